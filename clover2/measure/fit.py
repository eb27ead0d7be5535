"""Trees fitted to the hardware: the dynamic tree's node budget and depth that maximize expected
tokens per second on the running machine.

Verification costs more as the tree grows, and how much depends on the machine (on a 2-core CPU
64 tokens cost ~3.5x one step; on a GPU they cost ~1x). EAGLE-2's `total_token=-1` picks a budget
from timing alone, with a fixed guess of how many nodes get accepted. Here both sides are measured:

1. **Cost**: the target's cost curve t(N) (one forward of N new tokens) and the draft's time per
   step at depth 1 and at the deepest depth (linear in between), both on this machine now.
2. **Acceptance**: one calibration run per draft with the largest dynamic tree (every candidate kept)
   on prompts the benchmark does not use. In greedy decoding a node is accepted exactly when its
   path equals the target's own continuation, and the dynamic tree of budget B and depth D is the
   B best nodes (by cumulative draft log-probability) of depth <= D among those candidates. So the
   tokens per step of every (B, D) follow from that one run: tau(B, D) = 1 + mean over steps of the
   accepted nodes among the B best. (Counterfactual per step: later steps would start elsewhere.)

The chosen tree maximizes predicted speedup tau(B, D) * t(1) / (t(B + 1) + draft(D)).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from clover2.decoding.cache import BUCKETS, new_cache
from clover2.decoding.decode import DecodeConfig, clock, generate, prefill
from clover2.decoding.drafter import Recording
from clover2.decoding.target import Target
from clover2.decoding.tree import Draft, Tree
from clover2.decoding.verify import accepted_nodes, verify
from clover2.drafts.base import DraftModel
from clover2.drafts.drafter import DynamicTree, ModelDrafter
from clover2.errors import Clover2Error


@dataclass(frozen=True)
class FitConfig:
    max_depth: int = 6  # deepest tree considered
    top_k: int = 8  # children per expanded node and nodes expanded per depth (as DynamicTree)
    prompts: int = 6  # calibration prompts
    max_new_tokens: int = 64  # per calibration prompt

    def __post_init__(self):
        if min(self.max_depth, self.top_k, self.prompts, self.max_new_tokens) < 1:
            raise Clover2Error(f"fit config: every field must be >= 1: {self}")


def cost_curve(target: Target, *, prefix: int = 200, sizes=(1, 2, 4, 8, 12, 16, 24, 32, 48, 64),
               repeats: int = 7, seed: int = 0, engine: str = "eager") -> pd.DataFrame:
    """Median time of one forward of N new tokens over a cached `prefix`, relative to N = 1, on
    `engine` (clover2.decoding.cache; a static engine runs N padded to its bucket).

    The N tokens form a chain; a tree of N nodes costs the same (only the mask differs).
    Sizes are interleaved within each repeat, so drifting machine load hits all of them alike.
    """
    if prefix + max(sizes) > target.context_length:
        raise Clover2Error(f"prefix {prefix} + {max(sizes)} tokens exceed the context of {target.context_length}")
    gen = torch.Generator().manual_seed(seed)
    vocab = target.config.get_text_config().vocab_size
    ids = torch.randint(vocab, (prefix + 1,), generator=gen).tolist()
    times: dict[int, list[float]] = {n: [] for n in sizes}
    with torch.inference_mode():
        cache = new_cache(target, engine, capacity=prefix + 1 + max(max(sizes), BUCKETS[-1]))
        prefill(target, cache, ids[:-1], hidden=False)
        for _ in tqdm(range(repeats + 1), desc=f"cost curve ({engine})", unit="round"):
            for n in sizes:
                draft = Draft(Tree.chain(n - 1), torch.randint(vocab, (n - 1,), generator=gen))
                start = clock(target)
                verify(target, cache, ids[-1], draft)
                times[n].append(clock(target) - start)
                cache.crop(-n)
    base = statistics.median(times[sizes[0]][1:])
    return pd.DataFrame([{"n_tokens": n, "median_ms": 1e3 * statistics.median(t[1:]),
                          "relative": statistics.median(t[1:]) / base} for n, t in times.items()])


def calibrate(target: Target, model: DraftModel, prompts: Sequence[list[int]], config: FitConfig,
              *, engine: str = "eager") -> dict:
    """Acceptance of every candidate node, and the draft's time per step at depth 1 and max depth
    (on `engine`: with `graphs` the draft's calls are replayed where they can be)."""
    big = DynamicTree(budget=config.max_depth * config.top_k, depth=config.max_depth, top_k=config.top_k)
    decode = DecodeConfig(max_new_tokens=config.max_new_tokens, engine=engine)
    nodes, draft_s = [], {1: [], config.max_depth: []}
    for p, prompt in enumerate(tqdm(prompts, desc="calibrating tree", unit="prompt")):
        for depth in draft_s:
            shape = big if depth == config.max_depth else DynamicTree(budget=config.top_k, depth=1, top_k=config.top_k)
            recorder = Recording(ModelDrafter(model, shape, graphs=engine == "graphs"))
            gen = generate(target, recorder, prompt, decode)
            draft_s[depth] += [s.draft_s for s in gen.steps]
            if depth == config.max_depth:
                nodes += _node_outcomes(p, recorder.drafts, gen.output_ids, [len(s.tokens) for s in gen.steps])
    return {"nodes": pd.DataFrame(nodes), "draft_s": {d: float(np.median(v)) for d, v in draft_s.items()}}


def _node_outcomes(prompt: int, drafts: list[Draft], output: list[int], committed: list[int]) -> list[dict]:
    """Per draft node: its step, depth, score, and whether its path is the target's continuation."""
    rows, pos = [], 0
    for step, (draft, n) in enumerate(zip(drafts, committed)):
        accepted = accepted_nodes(draft, output[pos:])
        pos += n
        rows += [{"prompt": prompt, "step": step, "depth": int(draft.tree.depth[i]), "score": float(draft.scores[i - 1]),
                  "accepted": accepted[i - 1]} for i in range(1, draft.tree.size)]
    return rows


def fit_tree(calibration: dict, curve: pd.DataFrame, config: FitConfig) -> tuple[DynamicTree | None, pd.DataFrame]:
    """The (budget, depth) with the highest predicted speedup, and the whole prediction table.

    The tree is None where no tree is predicted to beat plain decoding (whose predicted speedup
    is 1 by definition): on such a machine the fitted method drafts nothing."""
    nodes = calibration["nodes"]
    if nodes.empty:
        raise Clover2Error("calibration drafted no nodes: the prompts were too short")
    steps = nodes.groupby(["prompt", "step"]).ngroups
    sizes, ms = curve.n_tokens.to_numpy(), curve.median_ms.to_numpy()
    t1 = float(np.interp(1, sizes, ms)) / 1e3
    d1, dmax = calibration["draft_s"][1], calibration["draft_s"][config.max_depth]
    rows = []
    for depth in range(1, config.max_depth + 1):
        ranked = nodes[nodes.depth <= depth].sort_values(["prompt", "step", "score", "depth"],
                                                         ascending=[True, True, False, True])
        ranked = ranked.assign(rank=ranked.groupby(["prompt", "step"]).cumcount() + 1)
        draft = d1 + (dmax - d1) * (depth - 1) / max(1, config.max_depth - 1)
        for budget in range(1, int(ranked["rank"].max()) + 1):
            if budget + 1 > sizes.max():
                break
            tau = 1 + ranked[ranked["rank"] <= budget].accepted.sum() / steps
            step_s = float(np.interp(budget + 1, sizes, ms)) / 1e3 + draft
            rows.append({"budget": budget, "depth": depth, "tau": tau, "verify_ms": 1e3 * (step_s - draft),
                         "draft_ms": 1e3 * draft, "predicted_speedup": tau * t1 / step_s})
    table = pd.DataFrame(rows)
    best = table.loc[table.predicted_speedup.idxmax()]
    if best.predicted_speedup <= 1:
        return None, table
    return DynamicTree(budget=int(best.budget), depth=int(best.depth), top_k=config.top_k), table
