"""Greedy acceptance without timing: how many tokens each draft's tree gets accepted, by replay.

Greedy accept lengths depend on the target's outputs only, never on time. Each prompt is decoded
plainly once (`plain_reference`), and each draft's speculative decoding is replayed against it
(`clover2.decoding.replay`: the draft runs for real, the target's forwards are read off the plain
decoding). The tau of many drafts (variants, a run's snapshots) on several trees therefore costs
one plain decoding per prompt plus the drafts themselves, and can run beside training.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from clover2.decoding.decode import DecodeConfig
from clover2.decoding.replay import Reference, plain_reference, replay
from clover2.decoding.target import Target
from clover2.drafts.base import DraftModel
from clover2.drafts.checkpoint import load_draft
from clover2.drafts.drafter import ModelDrafter
from clover2.files import atomic_path
from clover2.measure.methods import parse_tree


def layers_read(target: Target, archs: Sequence[str]) -> tuple[int, ...]:
    """The target layers whose inputs drafts of these architectures read between them (index L: the
    last hidden state), for `references`."""
    from clover2.drafts import ARCHITECTURES

    text = target.config.get_text_config()
    return tuple(sorted({i for a in archs for i in ARCHITECTURES[a].layers_read(text) or (text.num_hidden_layers,)}))


def references(target: Target, prompts: Sequence[tuple[str, list[int]]], config: DecodeConfig,
               cache: Path | None = None, *, layers: tuple[int, ...] = ()) -> list[Reference]:
    """Plain greedy decoding of each `(task, ids)` prompt with the states of `layers` (`layers_read`;
    default: the last hidden state), kept for replays (in `cache`, a `.pt` file, when given: written
    atomically, reused when it holds these very prompts, limits and layers)."""
    layers = tuple(layers) or (target.config.get_text_config().num_hidden_layers,)
    if cache is not None and Path(cache).exists():
        saved = torch.load(cache, weights_only=False)
        if saved["prompts"] == list(prompts) and saved["config"] == config and \
                all(r.layers == layers for r in saved["refs"]):
            return saved["refs"]
    refs = [plain_reference(target, ids, config, layers=layers)
            for _, ids in tqdm(prompts, desc="plain decoding", unit="prompt")]
    if cache is not None:
        with atomic_path(Path(cache)) as tmp:
            torch.save({"prompts": list(prompts), "config": config, "refs": refs}, tmp)
    return refs


def replayed_steps(target: Target, drafts: Mapping[str, Path | DraftModel], prompts: Sequence[tuple[str, list[int]]],
                   refs: Sequence[Reference], *, trees: Sequence[str] = ("eagle25",), engine: str = "eager") -> pd.DataFrame:
    """One row per draft, tree and prompt: `task`, `tokens` committed, decoding `steps` and `first`
    (steps that accepted at least one draft token: on the 1-node tree `chain1`, the draft's
    first-token acceptance). Drafts are folders (loaded with float weights) or loaded models."""
    rows = []
    for name, draft in drafts.items():
        model = draft if isinstance(draft, DraftModel) else load_draft(draft, target)
        for tree in trees:
            shape = parse_tree(tree)
            for p, ((task, _), ref) in enumerate(zip(prompts, tqdm(refs, desc=f"tau {name} {tree}", unit="prompt"))):
                g = replay(target, ModelDrafter(model, shape, graphs=engine == "graphs"), ref)
                rows.append({"draft": name, "tree": tree, "prompt": p, "task": task, "tokens": sum(g.accept_lengths),
                             "steps": len(g.steps), "first": sum(a > 1 for a in g.accept_lengths)})
    return pd.DataFrame(rows)


def paired_tau_intervals(runs: pd.DataFrame, *, reference: str, n_boot: int = 2000, seed: int = 0) -> pd.DataFrame:
    """Per variant, 95% bootstrap intervals of tau (sum of tokens / sum of steps over resampled
    prompts) and of its difference from the `reference` variant's on the same resample. `runs`: one
    row per variant and prompt, with columns variant, prompt, tokens, steps."""
    tokens = runs.pivot(index="prompt", columns="variant", values="tokens")
    steps = runs.pivot(index="prompt", columns="variant", values="steps")
    variants = list(dict.fromkeys(runs.variant))
    picks = np.random.default_rng(seed).integers(0, len(tokens), size=(n_boot, len(tokens)))
    taus = {v: tokens[v].to_numpy()[picks].sum(1) / steps[v].to_numpy()[picks].sum(1) for v in variants}
    rows = {v: {"tau_lo": np.percentile(t, 2.5), "tau_hi": np.percentile(t, 97.5),
                "delta_lo": np.percentile(t - taus[reference], 2.5),
                "delta_hi": np.percentile(t - taus[reference], 97.5)} for v, t in taus.items()}
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("variant")
