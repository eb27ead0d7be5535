"""What a results page says: compact tables that fit the book's text column, and the conclusions a
page states above its raw output, computed from the same tables so that they hold for any profile.

Every function takes the tables the notebooks already write (bench.csv, the cost curve, env.json,
the training metrics, the ablation summary) and returns a DataFrame or a Markdown string.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from clover2.load import CONTENDED_SHARE

# The one statistic of speed on every page, table and figure (clover2.measure.bench.geometric_mean):
# a method's speed over plain decoding's (a speedup) or over another method's (a speed ratio)
SPEED_STATISTIC = "geometric mean of per-prompt ratios [95% bootstrap CI]"
SPEEDUP = f"speedup, {SPEED_STATISTIC}"

# Short column names for the six tasks (the glossary maps each to the Spec-Bench task it stands for).
TASK_LABELS = {"overall": "all", "mt_bench": "MT-Bench", "translation": "transl.", "summarization": "summ.",
               "qa": "QA", "gsm8k": "GSM8K", "rag": "RAG"}


def method_label(method: str, temperature: float) -> str:
    """`clover2@eagle25` at T = 0, `clover2@eagle25/1` at T = 1 (the method grammar)."""
    return method if temperature == 0 else f"{method}/{temperature:g}"


def machine_name(record: dict) -> str:
    """The machine a record (env.json, provenance.json, a notebook's metadata) names: its GPU, else its
    CPU's short name (`clover2.measure.provenance.cpu_name`; records from before it: the model name)."""
    return record.get("gpu") or record.get("cpu_name") or record.get("cpu", "")


def _labelled(table: pd.DataFrame) -> pd.DataFrame:
    return table.assign(label=[method_label(m, t) for m, t in zip(table.method, table.temperature)])


def bracket(lo: float, hi: float, digits: int = 3) -> str:
    """An interval as the pages print it: `digits` decimals, one more for a bound that they would print as
    1 (the side of 1 it falls on is what the decision rules read)."""
    def bound(v: float) -> str:
        return f"{v:.{digits + 1}f}" if f"{v:.{digits}f}" == f"{1:.{digits}f}" and v != 1 else f"{v:.{digits}f}"
    return f"[{bound(lo)}, {bound(hi)}]"


def overall_table(table: pd.DataFrame) -> pd.DataFrame:
    """One row per method (all prompts): tau, tokens/s, speedup with its interval (`SPEEDUP`), draft
    share and exactness, in the columns the glossary defines."""
    rows = _labelled(table[table.task == "overall"])
    out = pd.DataFrame({
        "tau": [_or_dash(x, "{:.2f}") for x in rows.tau],  # Hugging Face's generate counts no steps
        "tokens/s": rows.tokens_per_s.round(1).to_numpy(),
        SPEEDUP: [f"{s:.2f} {bracket(lo, hi, 2)}" for s, lo, hi in zip(rows.speedup, rows.speedup_lo, rows.speedup_hi)],
        "draft share": [_or_dash(x, "{:.3f}") for x in rows.draft_share],
        "identical": [("" if np.isnan(x) else f"{x:.0%}") for x in rows.identical_frac]},
        index=pd.Index(rows.label, name="method"))
    if "contended" in rows and rows.contended.any():
        out["contended"] = rows.contended.map({True: "yes", False: ""}).to_numpy()
    return out


def at_saved_step(metrics: pd.DataFrame, saved: dict[str, int | None]) -> pd.DataFrame:
    """Each variant's evaluation rows (`metrics`: one row per evaluation step and head) at the step
    of the draft as saved and benchmarked (`saved`: the sidecars' `best_step`, the last step with
    `train.keep_best` off); the last evaluation where the step is not known."""
    step = metrics.variant.map(saved).astype(float).fillna(metrics.groupby("variant").step.transform("max"))
    return metrics[metrics.step == step].reset_index(drop=True)


def _or_dash(x: float, fmt: str) -> str:
    """A number as `fmt`, or an en dash where there is none (not measured, not defined)."""
    return "–" if pd.isna(x) else fmt.format(x)


def tree_pays(fits: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Per draft and node budget, the best depth of its dynamic tree (the benchmark's fit_<draft>.csv
    tables, the draft alone): `tau` as the calibration measured it and `tau_required`, what that tree
    needs to break even with plain decoding here (its verification plus the draft's time, in 1-token
    steps: tau / predicted speedup). The tree pays where tau > tau_required."""
    rows = []
    for draft, fit in fits.items():
        alone = fit[(fit.budget > 0) & (fit[[c for c in fit.columns if c.endswith("_budget")]] == 0).all(axis=1)]
        best = alone.loc[alone.groupby("budget").predicted_speedup.idxmax()]
        rows.append(best.assign(draft=draft, tau_required=best.tau / best.predicted_speedup)
                    [["draft", "budget", "depth", "tau", "tau_required", "predicted_speedup"]])
    return pd.concat(rows, ignore_index=True)


def draft_ms_per_step(runs: pd.DataFrame) -> pd.Series:
    """Per run of runs.csv (indexed by prompt), the milliseconds its draft took per decoding step: its
    share of the wall time spent drafting, times the wall time, over its steps."""
    return (1e3 * runs.draft_share * runs.seconds / runs.steps).set_axis(runs.prompt)


def draft_step_costs(runs: pd.DataFrame, temperature: float = 0.0) -> pd.DataFrame:
    """The draft's time per decoding step of every method that drafts with a trained model alone,
    from the benchmark's own timings (runs.csv: each run's seconds, steps and share of time spent
    drafting), as medians over prompts: ms per step, and over plain decoding's time per token on the
    same prompts. A fitted method that drafts nothing is left out."""
    from clover2.drafts import ARCHITECTURES

    runs = runs[runs.temperature == temperature]
    ar = runs[runs.method == "ar"].set_index("prompt")
    plain = ar.seconds / ar.new_tokens
    rows = []
    for method, g in runs.groupby("method", sort=False):
        if method.split("@")[0] not in ARCHITECTURES or g.draft_share.median() < 1e-3:
            continue
        per_step = draft_ms_per_step(g)
        rows.append({"method": method, "draft ms / step": per_step.median(),
                     "over a plain step": (per_step / 1e3 / plain.reindex(per_step.index)).median()})
    return pd.DataFrame(rows, columns=["method", "draft ms / step", "over a plain step"]).set_index("method").round(3)


def _interval(row) -> str:
    return f"{row.speedup:.2f}x {bracket(row.speedup_lo, row.speedup_hi, 2)}"


def paired_comparison(paired: pd.DataFrame, a: str, b: str, temperature: float = 0.0) -> str | None:
    """`a` against `b` on the same prompts (`paired`: the benchmark's paired.csv): the speed ratio
    (`SPEED_STATISTIC`, as every speedup), how many prompts `a` was faster on, and the tau ratio. No
    verdict: the interval covers the prompts of one training seed's drafts, and a comparison of drafts
    needs seeds too (the designed study's). None where the run did not measure the pair."""
    row = paired[(paired.method == a) & (paired.versus == b) & (paired.temperature == temperature)]
    if row.empty:
        return None
    r = row.iloc[0]
    tau = "" if pd.isna(r.tau_ratio) else f"; tau ratio {r.tau_ratio:.2f}" + (
        f" {bracket(r.tau_ratio_lo, r.tau_ratio_hi, 2)}" if "tau_ratio_lo" in r and not pd.isna(r.tau_ratio_lo) else "")
    return (f"`{method_label(a, temperature)}` / `{method_label(b, temperature)}`: {r.speed_ratio:.2f}x "
            f"{bracket(r.speed_ratio_lo, r.speed_ratio_hi, 2)}, faster on {int(r.faster_on)} of {int(r.n_prompts)} "
            f"prompts{tau}")


# The method-against-method comparisons a benchmark page states, paired by prompt, where both ran.
PAIRS = (("clover2@eagle25", "eagle1@eagle25"), ("clover2@eagle25", "eagle3@eagle25"),
         ("clover2@eagle25", "medusa@eagle25"), ("eagle3@eagle25", "eagle1@eagle25"))


def seed_pairs(paired_by_seed: dict[int, pd.DataFrame], temperature: float = 0.0) -> pd.DataFrame:
    """The `PAIRS` comparisons in each training seed's benchmark (`{seed: its paired.csv}`), one row
    per comparison and seed: speed ratio with its interval over prompts, prompts faster, tau ratio."""
    rows = []
    for seed, paired in paired_by_seed.items():
        for a, b in PAIRS:
            r = paired[(paired.method == a) & (paired.versus == b) & (paired.temperature == temperature)]
            if len(r):
                r = r.iloc[0]
                rows.append({"comparison": f"{a.split('@')[0]} / {b.split('@')[0]}", "seed": seed,
                             "speed ratio": r.speed_ratio, "lo": r.speed_ratio_lo, "hi": r.speed_ratio_hi,
                             "faster on": f"{int(r.faster_on)}/{int(r.n_prompts)}", "tau ratio": r.tau_ratio})
    return pd.DataFrame(rows, columns=["comparison", "seed", "speed ratio", "lo", "hi", "faster on", "tau ratio"])


def seed_findings(spread: pd.DataFrame | None = None, pairs: pd.DataFrame | None = None) -> str:
    """What the training seeds say: with `spread` (`clover2.research.lab.seed_spread`'s summary),
    each draft's tau from seed to seed against its interval from prompt to prompt, and in how many
    seeds its difference from Clover-2 is beyond prompt noise; with `pairs` (`seed_pairs`), each
    comparison's speed ratio per seed."""
    has_spread, has_pairs = spread is not None and not spread.empty, pairs is not None and not pairs.empty
    seeds = max(int(spread.seeds.max()) if has_spread else 1, pairs.seed.nunique() if has_pairs else 1)
    if seeds < 2:
        return "- One training seed: the intervals cover the prompts only."
    lines = []
    if has_spread:
        lines.append(f"- **{seeds} training seeds** per draft (initialisation and batch order; the same data and "
                     "prompts). tau, the mean over seeds, with the seeds' standard deviation beside the half-width "
                     "of one seed's interval over prompts:")
        for r in spread.itertuples():
            versus = "" if r.difference_mean == 0 else (f"; against Clover-2 {r.difference_mean:+.3f} on average, "
                                                       f"beyond prompt noise in {int(r.beyond_noise_in)} of "
                                                       f"{r.seeds} seeds")
            lines.append(f"  - `{r.variant}`: {r.tau_mean:.3f} (seeds: sd {r.tau_sd:.3f}, "
                         f"{r.tau_min:.3f}-{r.tau_max:.3f}; prompts: ±{r.prompt_half_width:.3f}){versus}.")
    for comparison, g in (pairs.groupby("comparison", sort=False) if has_pairs else []):
        above, below = int((g.lo > 1).sum()), int((g.hi < 1).sum())
        lines.append(f"- **Speed, {comparison}**, paired by prompt in each seed's run: "
                     + ", ".join(f"{x:.2f}x" for x in g["speed ratio"])
                     + f"; faster beyond prompt noise in {above} of {len(g)} seeds, slower in {below}.")
    return "\n".join(lines)


def speedup_findings(table: pd.DataFrame, env: dict, curve: pd.DataFrame | None = None,
                     paired: pd.DataFrame | None = None, runs: pd.DataFrame | None = None) -> str:
    """The benchmark page's conclusions: the fastest method, the paper's comparison at its own tree
    (paired by prompt where `paired`, the run's paired.csv, is given), the fitted tree's prediction
    against the measurement, each source's share of a hybrid's or union's accepted tokens, what
    verification costs here and what a draft step costs (from `runs`, the run's runs.csv),
    exactness and the machine's load."""
    overall = table[table.task == "overall"].set_index(["method", "temperature"])
    greedy = overall.xs(0.0, level="temperature")
    n = int(greedy.n_prompts.max())
    lines = [f"- **Setup**: {n} prompts ({table[table.task != 'overall'].task.nunique()} tasks), up to "
             f"{env.get('bench', {}).get('max_new_tokens', '?')} new tokens each, every method interleaved prompt by "
             f"prompt; {env['target']} in {env['dtype']} on {machine_name(env)} "
             f"({env.get('torch_threads', '?')} threads), commit `{env['commit']}`; trees "
             + ", ".join(f"`{t}`" for t in dict.fromkeys(table.tree.dropna()) if t) + "; temperatures "
             + ", ".join(f"{t:g}" for t in sorted(table.temperature.unique())) + f". Speed: {SPEEDUP}."]
    best = greedy.drop(index="ar").speedup.idxmax()
    lines.append(f"- **Fastest at T = 0**: `{best}`, {_interval(greedy.loc[best])} over plain decoding "
                 f"({greedy.loc['ar'].tokens_per_s:.1f} tokens/s).")
    pair = [m for m in ("clover2@eagle25", "eagle1@eagle25") if m in greedy.index]
    if len(pair) == 2:
        c, e = greedy.loc[pair[0]], greedy.loc[pair[1]]
        lines.append(f"- **The paper's comparison** (its 25-node tree, T = 0): Clover-2 tau {c.tau:.2f} against "
                     f"EAGLE-1 {e.tau:.2f} (ratio {c.tau / e.tau:.2f}; the paper: 1.00-1.05); speedups "
                     f"{_interval(c)} and {_interval(e)}.")
    compared = [] if paired is None else [line for t in sorted(table.temperature.unique()) for x, y in PAIRS
                                          if (line := paired_comparison(paired, x, y, t))]
    if compared:
        lines.append("- **Paired by prompt** (each method's speed over the other's on the same prompt, moments apart, "
                     f"{SPEED_STATISTIC}; the paper: Clover-2 / EAGLE-1 1.01-1.07 at T = 0): "
                     + "; ".join(compared) + ". The intervals cover prompts, not training seeds: they describe "
                     "these drafts and decide nothing about the architectures.")
    for name, fitted in env.get("fitted_trees", {}).items():
        base, eq, folder = name.partition("=")  # clover2.measure.bench.record_name: ARCH[!ENGINE][=FOLDER]
        arch, bang, engine = base.partition("!")
        method = f"{arch}@fitted{bang}{engine}{eq}{folder}"
        if method not in greedy.index:
            continue
        row = greedy.loc[method]
        measured = f"measured {_interval(row)}" + ("" if pd.isna(row.tau) else f", tau {row.tau:.2f}")
        # what the method drafts: the draft's nodes and every copy source's (a union may copy without the draft)
        copies = [f"{k.removesuffix('_budget')} {v}" for k, v in fitted.items() if k.endswith("_budget") and v]
        if not fitted["budget"] and not copies:
            lines.append(f"- **Fitted tree ({name})**: none. No tree is predicted to beat plain decoding here (best "
                         f"{fitted['predicted_speedup']:.2f}x), so `{method}` drafts nothing: {measured}.")
        else:
            nodes = (f"the draft's {fitted['budget']} node" + ("s" if fitted["budget"] > 1 else "") +
                     f", depth {fitted['depth']}" if fitted["budget"] else "no draft nodes")
            lines.append(f"- **Fitted tree ({name})**: {nodes}"
                         + (f", and {', '.join(copies)} copied" if copies else "")
                         + f"; predicted {fitted['predicted_speedup']:.2f}x, {measured}.")
    by_source = greedy.filter(regex=r"^accepted_.+_per_step$").dropna(how="all")  # hybrids and unions
    if len(by_source):
        def shares(row: pd.Series) -> str:
            row = row.dropna().rename(lambda c: c.removeprefix("accepted_").removesuffix("_per_step"))
            return ", ".join(f"{source} {v:.2f} ({v / max(row.sum(), 1e-12):.0%})" for source, v in row.items())
        lines.append("- **Accepted draft tokens by source** (per step, each source's part of tau - 1; a token that "
                     "several sources proposed counts for the first, copying before the draft): "
                     + "; ".join(f"`{m}`: {shares(row)}" for m, row in by_source.iterrows()) + ".")
    curve = None if curve is None else curve.assign(engine=curve.get("engine", "eager"))
    for engine, c in ([] if curve is None else curve.groupby("engine", sort=False)):
        cost = dict(zip(c.n_tokens, c.relative))
        at = [k for k in (4, 8, 16, 24, 64) if k in cost]
        where = "" if engine == "eager" else f", engine `{engine}`"
        one = f", {c.median_ms.iloc[0]:.2f} ms" if "median_ms" in c else ""
        paper = (f"; the paper's 26-token tree, interpolated: {np.interp(26, c.n_tokens, c.relative):.2f}x"
                 if c.n_tokens.min() <= 26 <= c.n_tokens.max() else "")
        lines.append(f"- **Verification cost**{where} (one forward of N tokens over one of 1{one}): "
                     + ", ".join(f"N = {k}: {cost[k]:.2f}x" for k in at) + paper
                     + ". A tree of N - 1 nodes pays only if tau exceeds that cost plus the draft's.")
    if runs is not None and len(costs := draft_step_costs(runs)):
        lines.append("- **Draft step** (median over prompts, in ms and over a plain step: the d of the cost "
                     "model): "
                     + ", ".join(f"`{m}` {r['draft ms / step']:.2f} ms ({r['over a plain step']:.2f})"
                                 for m, r in costs.iterrows()) + ".")
    floor = env.get("bandwidth")
    for plain in [m for m in greedy.index if m.split("!")[0] == "ar"] if floor else []:
        step_ms = 1e3 / greedy.loc[plain].tokens_per_s
        lines.append(f"- **Against memory bandwidth** (`{plain}`): {step_ms:.2f} ms per token, "
                     f"{step_ms / floor['floor_ms']:.0f}x the floor of {floor['floor_ms']:.3f} ms "
                     f"({floor['weight_bytes'] / 1e6:.0f} MB of weights at the "
                     f"{floor['copy_bandwidth_gb_s']:.0f} GB/s a large copy reaches here).")
    exact = greedy.identical_frac.dropna()
    if len(exact):
        lines.append(f"- **Exactness**: {exact.min():.0%} of greedy outputs token-identical to plain decoding "
                     f"(every method, every prompt).")
    load = env.get("other_load")
    if load is not None:
        verdict = "the machine was idle" if load <= CONTENDED_SHARE else "**measured under contention: rerun**"
        lines.append(f"- **Load**: other processes used {load:.1%} of the CPUs during the run; {verdict}.")
    return "\n".join(lines)


def distillation_findings(final: pd.DataFrame, eval_tokens: int | None = None) -> str:
    """The training page's conclusions from the held-out top-1 per variant and head (last step); the
    numbers themselves are in `head_top1_table`."""
    top1 = final.pivot_table(index="variant", columns="head", values="top1")
    lines = []
    if {"clover2", "clover2-hard-labels"} <= set(top1.index):
        soft, hard = top1.loc["clover2", 0], top1.loc["clover2-hard-labels", 0]
        verdict = "helps" if soft > hard else "does not help"
        lines.append(f"- **Distillation {verdict} at this budget**: head 0 {soft:.3f} with the target's soft labels "
                     f"against {hard:.3f} with hard labels (the paper trains on soft labels).")
    if "clover2" in top1.index:
        row = top1.loc["clover2"].dropna()
        drops = bool((np.diff(row.to_numpy()) <= 0.01).all())
        lines.append("- Deeper heads are " + ("less accurate, as expected" if drops else
                     "not uniformly less accurate: heads after the first are teacher-forced (they see the true "
                     "previous tokens), so their accuracy can exceed a shallower head's on a small held-out set")
                     + ".")
    if eval_tokens:
        lines.append(f"- Accuracy is teacher-forced top-1 against the target's greedy token on {eval_tokens:,} "
                     "held-out answer tokens (the target's own answers to prompts never trained on).")
    return "\n".join(lines)


def head_top1_table(final: pd.DataFrame, published: dict[str, tuple[float, ...]]) -> pd.DataFrame:
    """Held-out top-1 per variant (rows) and head (columns) at the end of training, with published
    per-head accuracies of other drafts and targets as further rows, for scale."""
    table = final.pivot_table(index="variant", columns="head", values="top1")
    for name, heads in published.items():
        table.loc[name] = pd.Series(heads, index=range(len(heads))).reindex(table.columns)
    return table.rename(columns="head {}".format).rename_axis(index="draft", columns=None).round(3)


def ablation_table(summary: pd.DataFrame) -> pd.DataFrame:
    """One row per variant: head-0 held-out accuracy, tau with its interval over prompts, and the
    paired interval of its tau minus Clover-2's (`summary`: the ablation notebook's summary.csv)."""
    s = summary.set_index("variant")
    return pd.DataFrame({
        "held-out top-1": s.top1.round(3), "held-out top-5": s.top5.round(3),
        "tau [95% interval]": [f"{r.tau:.2f} [{r.tau_lo:.2f}, {r.tau_hi:.2f}]" for r in s.itertuples()],
        "tau minus Clover-2, 95% interval": ["–" if r.Index == "clover2" else f"[{r.delta_lo:+.3f}, {r.delta_hi:+.3f}]"
                                             for r in s.itertuples()]},
        index=s.index)


def coverage_table(coverage: pd.DataFrame) -> pd.DataFrame:
    """Per task, the share of the target's answer tokens inside the draft vocabulary; drafts with
    the same vocabulary (identical shares) share one row."""
    wide = (coverage.assign(task=coverage.task.map(TASK_LABELS))
            .pivot_table(index="draft", columns="task", values="coverage", sort=False).rename_axis(columns=None))
    groups = wide.round(6).groupby(list(wide.columns), sort=False).groups
    names = ["every draft" if len(g) == len(wide) else ", ".join(g) for g in groups.values()]
    return pd.DataFrame([wide.loc[list(g)[0]] for g in groups.values()], index=pd.Index(names, name="drafts")).round(3)


def ablation_findings(summary: pd.DataFrame, n_prompts: int) -> str:
    """The ablation page's conclusions: each variant's tau against Clover-2's, with the sample size,
    and, where the table has them, the paired bootstrap intervals of the differences."""
    s = summary.set_index("variant")
    paired = {"delta_lo", "delta_hi"} <= set(s.columns)
    lines = [f"- **Sample**: {n_prompts} prompts in all; "
             + ("a difference is beyond prompt noise where its paired 95% interval over prompts excludes 0. The "
                "interval covers prompts, not training seeds, and is not corrected for the number of comparisons: "
                "a direction, not a verdict (the designed study decides the comparisons of drafts)." if paired else
                "a tau difference of a few hundredths is within what so few prompts can separate, so read "
                "directions, not margins.")]
    if "clover2" in s.index:
        base = s.loc["clover2"].tau
        others = [v for v in s.index if v != "clover2"]
        if paired:
            def group(keep):
                return ", ".join(f"`{v}` ({s.loc[v].tau:.2f})" for v in others if keep(s.loc[v])) or "none"
            lines.append(f"- Clover-2 reaches tau {base:.2f} [{s.loc['clover2'].tau_lo:.2f}, "
                         f"{s.loc['clover2'].tau_hi:.2f}]. "
                         f"Below it beyond prompt noise: {group(lambda r: r.delta_hi < 0)}. "
                         f"Above it beyond prompt noise: {group(lambda r: r.delta_lo > 0)}. Within prompt noise: "
                         f"{group(lambda r: r.delta_lo <= 0 <= r.delta_hi)}.")
        else:
            variants = [v for v in others if v.startswith("clover2-")]
            lower = [v for v in variants if s.loc[v].tau < base]
            higher = [v for v in variants if s.loc[v].tau >= base]
            lines.append(f"- Clover-2 reaches tau {base:.2f}. Below it: "
                         + (", ".join(f"`{v}` ({s.loc[v].tau:.2f})" for v in lower) or "no variant")
                         + ". At or above it: "
                         + (", ".join(f"`{v}` ({s.loc[v].tau:.2f})" for v in higher) or "no variant") + ".")
            rivals = [v for v in ("eagle1", "eagle3", "clover1", "medusa") if v in s.index]
            if rivals:
                lines.append("- Rivals on the same data and budget: "
                             + ", ".join(f"`{v}` {s.loc[v].tau:.2f}" for v in rivals) + ".")
        ttt = [(v, b) for v, b in (("clover2-ttt7", "clover2"), ("eagle1-ttt7", "eagle1")) if {v, b} <= set(s.index)]
        if ttt:
            lines.append("- Trained as EAGLE-3 trains (7 heads on their own states): "
                         + "; ".join(f"`{v}` {s.loc[v].tau:.2f} against `{b}` {s.loc[b].tau:.2f}"
                                     for v, b in ttt) + ".")
    return "\n".join(lines)


def paper_findings(ratio: pd.DataFrame, ours: str) -> str:
    """Clover-2 / EAGLE-1 tau per task, the paper's sources and this run (`ours`: its source label). A
    profile's run draws no verdict on the ordering: one training seed and a few prompts a task cannot
    carry a difference of a few percent; the designed study decides it (the book's front page)."""
    lines = []
    for source, part in ratio.groupby("source", sort=False):
        r = part.tau_ratio
        lines.append(f"- {source}: Clover-2 / EAGLE-1 tau {r.min():.2f}-{r.max():.2f} per task, at or above 1 on "
                     f"{int((r >= 0.9995).sum())} of {len(r)}.")
    if (ratio.source == ours).any():
        lines.append("- This run's drafts were trained with one seed and each task has a few prompts: its ratios show "
                     "a direction, not a verdict. The ordering is decided by the designed study, with seeds and "
                     "prompts in one interval (the front page).")
    return "\n".join(lines)
