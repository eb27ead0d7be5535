"""Learning curves: how each draft improves with training, measured at the snapshots of one long run.

A long run per draft (`TrainConfig.snapshots` at log-spaced steps, with the `wsd` schedule) leaves a
loadable draft at each snapshot, with its held-out evaluation in the sidecar. `measure` replays
every snapshot on the same prompts (greedy and untimed: `clover2.measure.acceptance`, so it may run
beside training), appending to a CSV after each snapshot so that an interrupted measurement
resumes. `evaluations` reads the held-out measure per task from the sidecars. `extrapolate` fits
tau - 1 = a + b ln(tokens seen) per draft on bootstrap resamples of the prompts and reads it at a
budget (by default the paper's, `PAPER_ANSWER_TOKENS`) with a 95% interval; `ratio` sets one draft's
tau over another's along both axes, tokens seen and training seconds (`RATIOS`); `pairs` compares
drafts at the snapshots they share, on each tree, with intervals paired by prompt (`PAIRS`).

Snapshots taken before the run's final decay have not been annealed, so the early points of a
`wsd` run sit a little below what a run ending there would reach.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from clover2.decoding.replay import Reference
from clover2.decoding.target import Target
from clover2.drafts.checkpoint import SIDECAR
from clover2.files import atomic_path
from clover2.measure.acceptance import paired_tau_intervals, replayed_steps
from clover2.paths import cache_root
from clover2.research.paper import PAPER_ANSWER_TOKENS

DYNAMIC_60 = "dynamic:60:5:10"  # EAGLE-2's dynamic tree, as the benchmark's methods grow it


def snapshots(run: str | Path) -> dict[int, Path]:
    """A run's finished snapshots by step (those whose sidecar is written)."""
    return {int(p.parent.name.removeprefix("step_")): p.parent
            for p in sorted(Path(run).glob(f"snapshots/step_*/{SIDECAR}"))}


def _arch(run: str | Path) -> str:
    """The architecture a run trains (from its first snapshot; clover2 before any snapshot exists)."""
    first = next(iter(snapshots(run).values()), None)
    return json.loads((first / SIDECAR).read_text())["draft_config"]["arch"] if first else "clover2"


def _state(snapshot: Path) -> dict:
    meta = json.loads((snapshot / SIDECAR).read_text())
    return {"seen_tokens": meta["train_state"]["tokens"], "train_seconds": meta["train_state"]["seconds"]}


def measure(target: Target, runs: Mapping[str, str | Path], prompts: Sequence[tuple[str, list[int]]],
            refs: Sequence[Reference], out: Path, *, trees: Sequence[str] = ("eagle25", "chain1"),
            engine: str = "eager") -> pd.DataFrame:
    """Replays of every snapshot of every run (`{draft name: run folder}`) on `prompts`: one row per
    draft, step, tree and prompt (columns of `replayed_steps`, plus step, seen_tokens, train_seconds).
    Rows already in `out` (a CSV) are kept; each new snapshot's are added and the file rewritten."""
    out = Path(out)
    done = pd.read_csv(out) if out.exists() else pd.DataFrame(columns=["draft", "step"])
    for name, run in runs.items():
        for step, folder in snapshots(run).items():
            if ((done.draft == name) & (done.step == step)).any():
                continue
            rows = replayed_steps(target, {name: folder}, prompts, refs, trees=trees, engine=engine)
            done = pd.concat([done, rows.assign(step=step, **_state(folder))], ignore_index=True)
            with atomic_path(out) as tmp:
                done.to_csv(tmp, index=False)
    return done


def evaluations(runs: Mapping[str, str | Path]) -> pd.DataFrame:
    """The held-out measure at every snapshot: one row per draft, step and category (`sharegpt` or a
    benchmark task) with head0_top1 (what the 1-node tree accepts on those prompts), copied (share of
    answer tokens repeating their context), top1_copied, top1_other and in_vocab."""
    rows = []
    for name, run in runs.items():
        for step, folder in snapshots(run).items():
            ev = json.loads((folder / SIDECAR).read_text())["eval"]
            for c in sorted({k[: -len("_head0_top1")] for k in ev if k.endswith("_head0_top1") and k != "head0_top1"}):
                rows.append({"draft": name, "step": step, **_state(folder), "category": c,
                             **{k: ev[f"{c}_{k}"] for k in ("head0_top1", "copied", "top1_copied", "top1_other",
                                                            "in_vocab", "tokens")}})
    return pd.DataFrame(rows)


def tau_by_snapshot(steps: pd.DataFrame, tree: str = "eagle25") -> pd.DataFrame:
    """Per draft and snapshot on one tree: tau, the share of steps accepting a draft token, and the axes."""
    sub = steps[steps.tree == tree]
    out = sub.groupby(["draft", "step"], sort=True).agg(
        seen_tokens=("seen_tokens", "first"), train_seconds=("train_seconds", "first"),
        tokens=("tokens", "sum"), steps=("steps", "sum"), first=("first", "sum")).reset_index()
    return out.assign(tau=out.tokens / out.steps, first_accepted=out["first"] / out.steps)


def extrapolate(steps: pd.DataFrame, *, tree: str = "eagle25", budget: float = PAPER_ANSWER_TOKENS,
                min_step: int = 0, n_boot: int = 2000, seed: int = 0) -> pd.DataFrame:
    """Per draft: tau - 1 = a + b ln(seen tokens) fitted over its snapshots from `min_step` on, on
    `n_boot` resamples of the prompts; its slope per tenfold of tokens and tau at `budget` answer
    tokens, each with a 95% interval (the fit's point value from all prompts). A straight line on a
    log axis is an assumption, and far beyond the data the interval only says how well the
    measured points pin that line down."""
    rows = []
    rng = np.random.default_rng(seed)
    for name, sub in steps[(steps.tree == tree) & (steps.step >= min_step)].groupby("draft", sort=False):
        tokens = sub.pivot(index="prompt", columns="step", values="tokens")
        n_steps = sub.pivot(index="prompt", columns="step", values="steps")
        x = np.log(sub.groupby("step").seen_tokens.first().loc[tokens.columns].to_numpy(dtype=float))
        picks = np.vstack([np.arange(len(tokens)), rng.integers(0, len(tokens), size=(n_boot, len(tokens)))])
        y = tokens.to_numpy()[picks].sum(1) / n_steps.to_numpy()[picks].sum(1) - 1  # (1 + n_boot, snapshots)
        xc = x - x.mean()
        slope = (y - y.mean(1, keepdims=True)) @ xc / max((xc ** 2).sum(), 1e-12)
        at = 1 + y.mean(1) + slope * (np.log(budget) - x.mean())
        per_decade = slope * np.log(10)
        rows.append({"draft": name, "snapshots": len(x), "last_seen_tokens": int(np.exp(x[-1])),
                     "last_tau": 1 + y[0, -1], "fit_at_last": 1 + y[0].mean() + slope[0] * (x[-1] - x.mean()),
                     "slope_per_decade": per_decade[0],
                     "slope_lo": np.percentile(per_decade[1:], 2.5), "slope_hi": np.percentile(per_decade[1:], 97.5),
                     "budget_tokens": budget, "tau_at_budget": at[0],
                     "tau_at_budget_lo": np.percentile(at[1:], 2.5), "tau_at_budget_hi": np.percentile(at[1:], 97.5)})
    return pd.DataFrame(rows)


def ratio(steps: pd.DataFrame, *, tree: str = "eagle25", num: str = "clover2", den: str = "eagle1") -> pd.DataFrame:
    """`num`'s tau over `den`'s along the curve: at each of `num`'s snapshots, against `den`'s tau
    at the same tokens seen and at the same training seconds (interpolated on a log axis between
    `den`'s snapshots; empty outside their range)."""
    taus = tau_by_snapshot(steps, tree)
    a, b = taus[taus.draft == num], taus[taus.draft == den]
    rows = []
    for _, r in a.iterrows():
        row = {"draft": num, "against": den, "step": r.step, "seen_tokens": r.seen_tokens,
               "train_seconds": r.train_seconds, "tau": r.tau}
        for axis in ("seen_tokens", "train_seconds"):
            xs = np.log(b[axis].to_numpy(dtype=float))
            inside = len(xs) and xs.min() <= np.log(r[axis]) <= xs.max()
            other = float(np.interp(np.log(r[axis]), xs, b.tau.to_numpy())) if inside else np.nan
            row |= {f"against_tau_same_{axis}": other, f"ratio_same_{axis}": r.tau / other}
        rows.append(row)
    return pd.DataFrame(rows)


RATIOS = (("clover2", "eagle1"), ("clover2", "eagle3"), ("eagle3", "eagle1"))  # along both axes (`ratio`)
# The paired comparisons of the curves' page: (draft, the one it is compared with)
PAIRS = (("clover2", "eagle1"), ("clover2", "eagle3"), ("eagle1", "eagle3"), ("clover2-ttt7", "clover2"),
         ("eagle1-ttt7", "eagle1"), ("eagle3", "eagle1"))


def pairs(steps: pd.DataFrame, comparisons: Sequence[tuple[str, str]] = PAIRS, *, n_boot: int = 2000) -> pd.DataFrame:
    """Per tree, pair of drafts (both measured) and snapshot step they share: both taus on the same
    prompts, their ratio, and the 95% bootstrap interval of the tau difference on prompts resampled
    together (`delta_lo`, `delta_hi`: an interval excluding 0 is a difference beyond prompt noise)."""
    rows = []
    for (tree, step), sub in steps.groupby(["tree", "step"], sort=True):
        for num, den in comparisons:
            both = sub[sub.draft.isin([num, den])].rename(columns={"draft": "variant"})
            if both.variant.nunique() < 2:
                continue
            ci = paired_tau_intervals(both, reference=den, n_boot=n_boot).loc[num]
            tau = both.groupby("variant").tokens.sum() / both.groupby("variant").steps.sum()
            rows.append({"tree": tree, "step": step, "draft": num, "against": den, "tau": tau[num],
                         "against_tau": tau[den], "ratio": tau[num] / tau[den], "delta_lo": ci.delta_lo,
                         "delta_hi": ci.delta_hi})
    return pd.DataFrame(rows)


def prediction(evals: pd.DataFrame, dev_steps: pd.DataFrame, bench_steps: pd.DataFrame) -> pd.DataFrame:
    """Per draft, snapshot and task: the held-out measure (teacher-forced head-0 top-1 on the dev
    prompts' answers), the 1-node tree's acceptance decoding those dev prompts, and decoding the
    benchmark's prompts; `error` is the measure minus the benchmark's acceptance."""
    def accepted(steps: pd.DataFrame, name: str) -> pd.Series:
        part = steps[steps.tree == "chain1"].groupby(["draft", "step", "task"])[["first", "steps"]].sum()
        return (part["first"] / part["steps"]).rename(name)

    held = evals.set_index(["draft", "step", "category"]).head0_top1.rename("held_out_top1")
    held.index = held.index.set_names("task", level="category")
    out = pd.concat([held, accepted(dev_steps, "dev_accepted"), accepted(bench_steps, "bench_accepted")],
                    axis=1, join="inner").reset_index()
    return out.assign(error=out.held_out_top1 - out.bench_accepted)


def run(target: Target, runs: Mapping[str, str | Path], out: str | Path, *, tasks: Sequence[str],
        n_per_task: int, dev_per_task: int, max_new_tokens: int, seed: int = 0, engine: str = "eager") -> dict:
    """Measure every snapshot of `runs` and write the curves' tables into `out`: the replays on
    `n_per_task` benchmark prompts per task (the 25-node, 60-node dynamic and 1-node trees) and on `dev_per_task` dev
    prompts per task (the 1-node tree: the prompts of the held-out set), the held-out measure, its
    prediction of the benchmark's acceptance, the extrapolation, the ratios and the paired comparisons.
    Resumes: each snapshot is replayed once, the plain decodings are cached (under the cache root)."""
    from clover2.decoding.decode import DecodeConfig
    from clover2.decoding.prompts import first_turn_ids
    from clover2.measure.acceptance import layers_read, references
    from clover2.research.figures import learning_curves, save
    from clover2.training.tasks import load_task

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    config = DecodeConfig(max_new_tokens=max_new_tokens, engine=engine)
    tables, prompts_of = {}, {}
    bench_trees = ("eagle25", DYNAMIC_60, "chain1")
    for name, split, n, trees in (("bench", "bench", n_per_task, bench_trees),
                                  ("dev", "dev", dev_per_task, ("chain1",))):
        prompts = prompts_of[name] = [(r.category, first_turn_ids(target, r))
                                      for t in tasks for r in load_task(t, n, seed, split=split)]
        refs = references(target, prompts, config, cache=cache_root() / "references" / f"{target.name}-{name}.pt",
                          layers=layers_read(target, [_arch(run) for run in runs.values()]))
        tables[f"{name}_steps"] = measure(target, runs, prompts, refs, out / f"{name}_steps.csv", trees=trees,
                                          engine=engine)
    if tables["bench_steps"].empty:  # no snapshot yet
        return tables
    tables["evaluations"] = evaluations(runs)
    tables["prediction"] = prediction(tables["evaluations"], tables["dev_steps"], tables["bench_steps"])
    tables["taus"] = tau_by_snapshot(tables["bench_steps"])
    tables["extrapolation"] = extrapolate(tables["bench_steps"])
    measured = set(tables["bench_steps"].draft)
    tables["ratio"] = pd.concat([ratio(tables["bench_steps"], num=a, den=b) for a, b in RATIOS if {a, b} <= measured]
                                or [pd.DataFrame()], ignore_index=True)
    tables["pairs"] = pairs(tables["bench_steps"])
    for name in ("evaluations", "prediction", "taus", "extrapolation", "ratio", "pairs"):
        if name in tables:
            with atomic_path(out / f"{name}.csv") as tmp:
                tables[name].to_csv(tmp, index=False)
    fig = learning_curves(tables["taus"], tables["extrapolation"],
                          title=f"{target.name}: greedy tau on {len(prompts_of['bench'])} benchmark prompts, "
                                "25-node tree")
    save(fig, out / "learning_curves.png")
    return tables
