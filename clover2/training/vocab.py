"""The draft vocabulary: the target's tokens a draft may propose, ranked by how often answers use them.

A draft with a smaller output vocabulary (EAGLE-3's `d2t`, FR-Spec) spends less on its LM head at
every depth, but can never propose a token outside it. `ranked_tokens` orders the target's
vocabulary by frequency over the answer tokens of training data (the target's own answers where
the data holds them: what decoding will produce); the draft keeps the first `draft_vocab`.
`coverage` measures, per category of held-out prompt, the share of answer tokens the first k cover
for several k: the ceiling that size puts on acceptance, set against the LM head's cost.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from clover2.training.data import DistillData


def ranked_tokens(data: DistillData, vocab_size: int, indices: list[int]) -> np.ndarray:
    """Token ids from most to least frequent in the answers of the sequences `indices` (ties by id)."""
    return np.argsort(-data.token_frequencies(vocab_size, indices), kind="stable")


def coverage(ranked: np.ndarray, held_out: DistillData, sizes: Sequence[int]) -> pd.DataFrame:
    """Per category of `held_out` and overall: the share of its answer tokens among the first k of
    `ranked`, for each k in `sizes` (columns: category, size, coverage, answer_tokens)."""
    position = np.empty(len(ranked), dtype=np.int64)
    position[ranked] = np.arange(len(ranked))  # each token's rank
    ranks: dict[str, list[np.ndarray]] = {}
    for (k, a, b), category in zip(held_out.sequences, held_out.category):
        s = held_out.shards[k]
        ranks.setdefault(category, []).append(position[s["ids"][a:b][s["response"][a:b]]])
    ranks["all"] = [r for parts in list(ranks.values()) for r in parts]
    rows = []
    for category, parts in ranks.items():
        r = np.concatenate(parts)
        rows += [{"category": category, "size": k, "coverage": float((r < k).mean()), "answer_tokens": len(r)}
                 for k in sizes]
    return pd.DataFrame(rows)
