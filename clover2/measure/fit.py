"""Trees fitted to the hardware: the dynamic tree's node budget and depth (and, for the union with the
copy-based drafters, each one's node budget) that maximize expected tokens per second on the
running machine.

Verification costs more as the tree grows, and how much depends on the machine (on a 2-core CPU
64 tokens cost ~3.5x one step; on a GPU they cost ~1x). EAGLE-2's `total_token=-1` picks a budget
from timing alone, with a fixed guess of how many nodes get accepted. Here both sides are measured:

1. **Cost**: the target's cost curve t(N) (one forward of N new tokens) and the draft's time per
   step at depth 1 and at the deepest depth (linear in between), both on this machine now.
2. **Acceptance**: one calibration run per draft on prompts the benchmark does not use, drawn
   evenly from its tasks, with the union (`clover2.decoding.union`) of the largest dynamic tree
   (every candidate kept), the suffix cache and prompt lookup, each node recording its rank in
   every source that proposed it. In greedy decoding a node is accepted exactly when its path
   equals the target's own continuation; the dynamic tree of budget B and depth D is the B best
   nodes (by cumulative draft log-probability) of depth <= D among the draft's candidates, and a
   copy source of budget C keeps its first C nodes. So the tokens per step of every combination
   follow from that one run: tau = 1 + mean over steps of the accepted nodes that some source
   keeps. (Counterfactual per step: later steps would start elsewhere.) A draft alone is the
   union with the copy budgets at 0.

The chosen combination maximizes predicted speedup tau * t(1) / (mean t(kept + 1) + draft(D) + copy time).
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from clover2.decoding.cache import BUCKETS, new_cache
from clover2.decoding.decode import DecodeConfig, clock, generate, prefill
from clover2.decoding.drafter import Drafter, NoDrafter, Recording
from clover2.decoding.prompts import PromptRecord
from clover2.decoding.sampling import SamplingConfig
from clover2.decoding.suffix import SuffixCache
from clover2.decoding.target import Target
from clover2.decoding.tree import Draft, Tree
from clover2.decoding.union import Union, copy_drafters
from clover2.decoding.verify import accepted_nodes, verify
from clover2.drafts.base import DraftModel
from clover2.drafts.drafter import DynamicTree, ModelDrafter
from clover2.drafts.methods import HYBRIDS, MethodSpec, drafters_for
from clover2.errors import Clover2Error


@dataclass(frozen=True)
class FitConfig:
    max_depth: int = 6  # deepest tree considered
    top_k: int = 8  # children per expanded node and nodes expanded per depth (as DynamicTree)
    prompts: int = 6  # calibration prompts, drawn evenly from the benchmark's tasks
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


COPY_SOURCES = ("suffix", "pld")  # the copy-based drafters a union adds to a draft model
COPY_BUDGETS = (0, 1, 2, 4, 8)  # node budgets tried per copy source (8: each one's own cap)


def calibration_records(tasks: Sequence[list[PromptRecord]], chosen: Sequence[PromptRecord], n: int,
                        seed: int) -> list[PromptRecord]:
    """`n` records the benchmark does not use, drawn evenly from its tasks (as the benchmark weighs
    them, each task equally): one per task in turn, each a seeded random pick from what is left."""
    rng = np.random.default_rng(seed)
    pools = [[r for r in task if r not in chosen] for task in tasks]
    pools = [[p[i] for i in rng.permutation(len(p))] for p in pools if p]
    picks: list[PromptRecord] = []
    while pools and len(picks) < n:
        for pool in list(pools):
            if len(picks) < n:
                picks.append(pool.pop())
            if not pool:
                pools.remove(pool)
    return picks


def calibrate(target: Target, model: DraftModel, prompts: Sequence[list[int]], config: FitConfig,
              *, engine: str = "eager") -> dict:
    """Every candidate node of the union of the draft's largest tree and the copy drafters, with its
    rank in each source and whether it is accepted; the draft's time per step at depth 1 and max
    depth and each copy drafter's (on `engine`: with `graphs` the draft's calls are replayed where they can)."""
    big = DynamicTree(budget=config.max_depth * config.top_k, depth=config.max_depth, top_k=config.top_k)
    shallow = DynamicTree(budget=config.top_k, depth=1, top_k=config.top_k)
    decode = DecodeConfig(max_new_tokens=config.max_new_tokens, engine=engine)
    nodes, seconds, steps, suffix = [], {"depth1": [], "model": [], **{c: [] for c in COPY_SOURCES}}, 0, SuffixCache()
    for p, prompt in enumerate(tqdm(prompts, desc="calibrating tree", unit="prompt")):
        union = Union(copy_drafters(suffix) | {"model": ModelDrafter(model, big, graphs=engine == "graphs")},
                      calibrating=True)
        recorded = Recording(union)
        gen = generate(target, recorded, prompt, decode)
        nodes += _node_outcomes(p, recorded.drafts, union.ranks, gen.step_ids, gen.accept_lengths)
        steps += len(gen.steps)
        for name, s in union.seconds.items():
            seconds[name] += s
        one = Union({"model": ModelDrafter(model, shallow, graphs=engine == "graphs")})
        generate(target, one, prompt, decode)
        seconds["depth1"] += one.seconds["model"]
    median = {k: float(np.median(v)) if v else 0.0 for k, v in seconds.items()}
    return {"nodes": pd.DataFrame(nodes), "steps": steps,
            "draft_s": {1: median["depth1"], config.max_depth: median["model"]},
            "copy_s": {c: median[c] for c in COPY_SOURCES}}


def _node_outcomes(prompt: int, drafts: list[Draft], ranks: list[list[dict]], output: list[int],
                   committed: list[int]) -> list[dict]:
    """Per draft node: its step, depth, rank in each source (absent: NaN), and whether its path is
    the target's continuation."""
    rows, pos = [], 0
    for step, (draft, rank, n) in enumerate(zip(drafts, ranks, committed)):
        accepted = accepted_nodes(draft, output[pos:])
        pos += n
        rows += [{"prompt": prompt, "step": step, "depth": draft.tree.depths[i], "accepted": accepted[i - 1],
                  **{f"rank_{s}": float(r) for s, r in rank[i - 1].items()}} for i in range(1, draft.tree.size)]
    return rows


@dataclass(frozen=True)
class Fitted:
    """What the fit chose: the draft's dynamic tree (None: the draft proposes nothing) and each copy
    source's node budget (0: not used); no tree at all where plain decoding is predicted fastest."""

    tree: DynamicTree | None
    copy: tuple[tuple[str, int], ...] = ()  # (source, budget) of the copy sources used
    predicted_speedup: float = 1.0

    def record(self) -> dict:
        return {"budget": self.tree.budget if self.tree else 0, "depth": self.tree.depth if self.tree else 0,
                **{f"{s}_budget": b for s, b in self.copy}, "predicted_speedup": self.predicted_speedup}


def fit(calibration: dict, curve: pd.DataFrame, config: FitConfig, *,
        copy: bool = False) -> tuple[Fitted | None, pd.DataFrame]:
    """The combination with the highest predicted speedup, and the whole prediction table (columns
    budget, depth, one `<source>_budget` per copy source, tau, verify_ms, draft_ms, predicted_speedup).

    Without `copy`, the draft alone (every copy budget 0). The result is None where nothing is
    predicted to beat plain decoding (whose predicted speedup is 1 by definition)."""
    nodes = calibration["nodes"]
    if nodes.empty:
        raise Clover2Error("calibration drafted no nodes: the prompts were too short")
    steps = calibration["steps"]
    step_of = nodes.groupby(["prompt", "step"]).ngroup().to_numpy()
    accepted, depth = nodes.accepted.to_numpy(bool), nodes.depth.to_numpy()
    ranks = {s: nodes.get(f"rank_{s}", pd.Series(np.nan, index=nodes.index)).to_numpy(float)
             for s in ("model", *COPY_SOURCES)}
    sizes, ms = curve.n_tokens.to_numpy(), curve.median_ms.to_numpy() / 1e3
    t1 = float(np.interp(1, sizes, ms))
    d1, dmax = calibration["draft_s"][1], calibration["draft_s"][config.max_depth]
    copies = [dict(zip(COPY_SOURCES, b))
              for b in itertools.product(COPY_BUDGETS if copy else (0,), repeat=len(COPY_SOURCES))]
    # the draft's trees: (budget, depth, nodes kept); budget 0 drafts nothing (and costs no draft time)
    trees = [(0, 0, np.zeros(len(nodes), bool))]
    frame = pd.DataFrame({"step": step_of, "rank": ranks["model"]})
    for d in range(1, config.max_depth + 1):
        inside = frame["rank"].where(depth <= d)  # the candidates of a depth-d tree, ranked within each step
        order = (inside.groupby(frame.step).rank(method="first") - 1).fillna(np.inf).to_numpy()
        top = int(order[np.isfinite(order)].max()) + 1 if np.isfinite(order).any() else 0
        trees += [(b, d, order < b) for b in range(1, min(top, int(sizes.max()) - 1) + 1)]
    rows = []
    for budgets in copies:
        copy_kept = np.zeros(len(nodes), bool)
        for s, b in budgets.items():
            copy_kept |= ranks[s] < b
        copy_s = sum(calibration["copy_s"][s] for s, b in budgets.items() if b)
        for b, d, kept in trees:
            kept = kept | copy_kept
            if b == 0 and not copy_kept.any():
                continue  # plain decoding: speedup 1 by definition
            per_step = np.bincount(step_of[kept], minlength=steps)
            tau = 1 + (kept & accepted).sum() / steps
            verify_s = float(np.interp(1 + per_step, sizes, ms).mean())
            draft_s = (d1 + (dmax - d1) * (d - 1) / max(1, config.max_depth - 1) if b else 0.0) + copy_s
            rows.append({"budget": b, "depth": d, **{f"{s}_budget": n for s, n in budgets.items()}, "tau": tau,
                         "verify_ms": 1e3 * verify_s, "draft_ms": 1e3 * draft_s,
                         "predicted_speedup": tau * t1 / (verify_s + draft_s)})
    table = pd.DataFrame(rows)
    best = table.loc[table.predicted_speedup.idxmax()]
    if best.predicted_speedup <= 1:
        return None, table
    tree = DynamicTree(budget=int(best.budget), depth=int(best.depth), top_k=config.top_k) if best.budget else None
    used = tuple((s, int(best[f"{s}_budget"])) for s in COPY_SOURCES if best[f"{s}_budget"])
    return Fitted(tree, used, float(best.predicted_speedup)), table


def source_acceptance(calibration: dict) -> dict:
    """Per source of the calibration's union: nodes proposed and accepted per step, and how often its
    first node (its best guess at the next token) is accepted."""
    nodes, steps, out = calibration["nodes"], calibration["steps"], {}
    for s in ("model", *COPY_SOURCES):
        rank = nodes.get(f"rank_{s}", pd.Series(np.nan, index=nodes.index))  # absent: it never proposed a node
        mine = nodes[rank.notna()]
        out[s] = {"nodes_per_step": len(mine) / steps, "accepted_per_step": float(mine.accepted.sum()) / steps,
                  "first_node_accepted_per_step": float(mine[rank[rank.notna()] == 0].accepted.sum()) / steps}
    return out


def fitted_factory(spec: MethodSpec, model: DraftModel, fitted: Fitted | None,
                   sampling: SamplingConfig = SamplingConfig()) -> Callable[[], Drafter]:
    """The drafters of a `@fitted` method: the draft's fitted tree (and, for a union, the copy
    sources' fitted budgets); where nothing was predicted to pay, plain decoding (the copy source
    alone for a hybrid such as `pld+ARCH`, still a one-source `Union`, which counts what it proposed). A greedy
    tree of one node is the static one-token chain: the same token, and the command line's `@chain1`."""
    if fitted is None and spec.name in HYBRIDS:
        suffix, copy = SuffixCache(), HYBRIDS[spec.name]  # as `suffix`, it remembers earlier generations
        return lambda: Union({copy: copy_drafters(suffix)[copy]}, one_source=True)
    if fitted is None:
        return NoDrafter
    tree = fitted.tree
    if tree is not None and tree.budget == 1 and sampling.greedy:
        tree = Tree.chain(1)  # the same greedy token by the static path, as `clover2 generate --method X@chain1` runs
    return drafters_for(spec, model, tree, dict(fitted.copy), sampling)
