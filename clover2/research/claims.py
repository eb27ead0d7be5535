"""The front page's verdict: the paper's claims one by one, each with this book's evidence and its
status, generated from the result tables so that no verdict is typed by hand.

The evidence comes from two places: the designed study (`results/study/`: its verdicts table, with
the protocol's decision rules, `clover2.research.verdicts`) for everything that compares trained
drafts, and the `cpu` profile that `make reproduce` reruns (`results/cpu/bench/`) for exactness,
costs and speed on a CPU. A status is one of `STATUSES`; a comparison the study has not finished
says so, with how far the study is.

The practitioner's box and table come from `clover2.research.advice`, the engine table from `engines`.

    python -m clover2.research.claims results book    # book/verdict.md, advice(-brief).md, speeds.md, engine.md
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from clover2.drafts.methods import MethodSpec
from clover2.files import write_text
from clover2.measure.bench import geometric_mean
from clover2.profiles import load_profile
from clover2.research import advice, paper
from clover2.research.design import DesignConfig
from clover2.research.engines import engines
from clover2.research.report import bracket, draft_ms_per_step
from clover2.research.verdicts import (
    PART_HELPS,
    PART_HURTS,
    PARTS,
    WAITS,
    arm_of,
    at_edge,
    p_text,
    part_arms,
    reason,
    rivals,
    superseded,
)

# "no difference shown": a secondary comparison's own rule (Holm-adjusted p at 5%) found neither side ahead;
# "inconclusive": a claim whose rule left it open otherwise (a primary comparison short of its power, the parts)
STATUSES = ("reproduced", "equivalent within the margin", "not reproduced", "no difference shown", "inconclusive",
            "not testable here", "not decided yet", "cut for machine time")
NAMES = {"clover2-official": "Clover-2 (official recipe)", "clover2": "Clover-2 (this project's value gain)",
         "eagle1": "EAGLE-1", "eagle3": "EAGLE-3", "medusa": "Medusa-1", "clover1": "Clover-1"}
# the arms that depart from the paper's recipe, and how: the front page names the departure wherever they appear
DEPARTURES = {"clover2": "this project's value gain"}
# a rival built short of its paper's recipe: said beside every comparison with it (the limitations page says why)
REDUCED = {"eagle3": "a reduced EAGLE-3: no LM head of its own, trained on this study's data",
           "medusa": "a reduced Medusa-1: its heads share the target's frozen LM head"}
# a rival the paper never met: its comparison is this book's question, not the paper's premise
LATER = {"eagle3": "(not in the paper: EAGLE-3 came after it)"}
NOT_TESTABLE_COST = 1.5  # a CPU where verifying the paper's 26-token tree costs this many plain steps or more


def _subject(arm: str) -> str:
    """An arm named as the subject of a claim: a departure from the paper says so."""
    name = NAMES.get(arm, arm)
    return f"{name[:-1]}, a departure from the paper)" if arm in DEPARTURES and name.endswith(")") else name


@dataclass(frozen=True)
class Claim:
    claim: str  # the paper's claim, in words
    paper: str  # the paper's numbers
    here: str  # this book's evidence
    status: str  # one of STATUSES
    page: str  # the page that shows the evidence
    departure: str = ""  # how the draft the claim is about departs from the paper (DEPARTURES), if it does


def _brief(arm: str) -> str:
    """An arm's short name, in a list of numbers (the departure named in a word)."""
    return advice.BRIEF.get(arm, NAMES.get(arm, arm))


def _pct(lo: float, hi: float) -> str:
    return f"{100 * (lo - 1):+.0f} to {100 * (hi - 1):+.0f}% per task"


def _ratio(r) -> str:
    return f"{r.ratio:.3f} {bracket(r.lo, r.hi)} ({r.seeds} seeds, {r.prompts} prompts)"


def _study_status(verdict: str) -> str:
    """The protocol's verdict (`clover2.research.verdicts`) as one of STATUSES."""
    if verdict == WAITS:
        return "not decided yet"
    if verdict.startswith("reproduced") or verdict in ("ahead", "faster", PART_HELPS):
        return "reproduced"
    if verdict.startswith("equivalent"):
        return "equivalent within the margin"
    if verdict.startswith("not reproduced") or verdict in ("behind", "slower", PART_HURTS):
        return "not reproduced"
    return "no difference shown" if verdict == "no difference shown" else "inconclusive"


def _read(path: Path) -> pd.DataFrame:
    """A table, or an empty one where there is none yet (no file, or a file the report wrote empty)."""
    try:
        return pd.read_csv(path)
    except (FileNotFoundError, pd.errors.EmptyDataError):
        return pd.DataFrame()


def study_claims(results: Path, design: DesignConfig | None = None) -> list[Claim]:
    """The claims the designed study decides (its arms from `design`, the `study` profile's by default):
    each primary Clover-2 against the reference (tau, and the first one's speed), against the other
    drafts, and its parts."""
    design = design or DesignConfig.of(load_profile("study"))
    ref = design.reference
    study = results / "study"
    runs, verdicts, plan = _read(study / "runs.csv"), _read(study / "verdicts.csv"), _read(study / "status.csv")

    def progress(arms: list[str]) -> str:
        """How far the plan has come for `arms`: their runs in the plan the results page counts (`status.csv`,
        which `clover2 study report` writes with it)."""
        if not len(plan):
            return f"in progress ({len(runs)} runs trained)"
        mine = plan[plan.arm.isin(arms)]
        if mine.empty:
            return "not started"
        done = int((mine.state == "done").sum())
        started = done or mine.state.str.startswith("at step").any()
        return f"{'in progress' if started else 'not started'} ({done} of {len(mine)} planned runs finished)"

    page = "../results/study/README"
    taus = paper.clover2_over_eagle1(paper.tau().assign(source=lambda d: d.target))
    speeds = paper.throughput().pivot_table(index=["temperature", "target", "task"], columns="method",
                                            values="speedup")
    speed_ratio = speeds.clover2 / speeds.eagle1
    out = []

    def rows(family: str, comparison: str | None = None) -> pd.DataFrame:
        if verdicts.empty:
            return verdicts
        v = verdicts[(verdicts.family == family) & (verdicts.tree == "eagle25")]
        return v[v.comparison == comparison] if comparison else v

    edge = at_edge(design, _read(study / "grid.csv"))
    for arm in design.primary:
        r = rows("primary", f"{arm} / {ref}")
        here, status = (progress([arm, ref]), "not decided yet") if r.empty else (
            f"tau ratio {_ratio(r.iloc[0])}, {design.main} training steps, 25-node tree",
            _study_status(r.iloc[0].verdict))
        if status != "not decided yet":  # the rule's reason, and the one caveat the protocol leaves open
            x = r.iloc[0]
            here += ": " + reason(x.lo, x.hi, design.margin, design.smallest_claim, design.largest_claim,
                                  NAMES.get(ref, ref)) + (
                "; its learning rate is at the edge of its tuning grid" if arm in edge else "")
            here += _with_training(study, design, arm, x)
        out.append(Claim(f"{_subject(arm)} predicts more tokens per step than {NAMES.get(ref, ref)}",
                         f"tau {_pct(taus.tau_ratio.min(), taus.tau_ratio.max())}, +"
                         f"{taus.groupby('task').tau_ratio.mean().min() - 1:.0%} or more averaged over its two "
                         f"targets (tested: +{100 * design.smallest_claim:g} to +{100 * design.largest_claim:g}%)",
                         here, status, page,
                         DEPARTURES.get(arm, "")))
    speed = _read(study / "speed" / "paired.csv")
    env = study / "speed" / "env.json"
    if env.exists() and superseded(json.loads(env.read_text()), study / "drafts"):
        speed = pd.DataFrame()  # timed on drafts the study no longer publishes: none of its numbers stand
    if not speed.empty:
        speed = speed[(speed.versus.map(arm_of) == ref) & (speed.temperature == 0)].assign(
            arm=lambda d: d.method.map(arm_of)).set_index("arm")
    measured = [a for a in design.primary if a in speed.index]
    # the paper's claim is about GPUs, which verify its 25-node tree in about one plain step: not testable on
    # a CPU whatever the ratio (the protocol); its CPU form is a claim of its own (amendment 1)
    cost = tree_cost(results)
    here = ("a GPU's claim (the 25-node tree costs about one plain step to check there"
            + (f", {cost:.1f} here" if cost is not None else "") + ")" + ("" if not measured else
            "; on that tree here, seed 0 paired by prompt: " + ", ".join(
                f"{_brief(a)} {speed.speed_ratio[a]:.3f}x {bracket(speed.speed_ratio_lo[a], speed.speed_ratio_hi[a])}"
                for a in measured) + f" as fast as {NAMES.get(ref, ref)}"))
    out.append(Claim(f"Clover-2 decodes faster than {NAMES.get(ref, ref)} on GPUs",
                     f"speed {_pct(speed_ratio.min(), speed_ratio.max())}", here, "not testable here", page))
    cpu = _read(study / "speed-cpu" / "claims.csv")  # amendment 1: the claims in their CPU form, once timed
    greedy = speeds.clover2.xs(0, level="temperature")  # the paper's Clover-2 over plain decoding, T = 0
    on_gpus = {"plain decoding": f"{greedy.min():.2f}-{greedy.max():.2f}x on GPUs",
               ref: f"speed {_pct(speed_ratio.min(), speed_ratio.max())} on GPUs"}
    if cpu.empty:  # not timed yet: the use page's seed-0 run is a first look, not the claim's test (one row)
        look = advice.first_look(results, list(design.primary), ref)
        said, named = [], False  # each draft's speed over plain decoding and over the reference, each named once
        for i, (a, (alone, over)) in enumerate(look.items()):
            said.append(f"{_brief(a)} {alone}" + (" over plain decoding" if i == 0 else "") + (
                "" if not over else f", {over}" if named else f", {over} over {NAMES.get(ref, ref)}"))
            named = named or bool(over)
        first = "; ".join(said)
        out.append(Claim(f"Clover-2 decodes faster on this CPU than plain decoding and {NAMES.get(ref, ref)}",
                         f"{greedy.min():.2f}-{greedy.max():.2f}x and {_pct(speed_ratio.min(), speed_ratio.max())} "
                         "on GPUs", "timed last ({doc}`amendment 1 <protocol>`)" + (
                             f"; a first look, seed 0 on its fitted tree: {first}" if first else ""),
                         "not decided yet", "use" if first else page))
    how = "each on its fastest tree and kernels here"
    for versus, g in (cpu.groupby(cpu.comparison.str.split(" / ").str[1], sort=False) if not cpu.empty else ()):
        rival, arms = NAMES.get(versus, versus), list(g.comparison.str.split(" / ").str[0])
        if len(g) > 1 and g.verdict.map(_study_status).nunique() == g.seeds.nunique() == g.prompts.nunique() == 1:
            # both recipes alike, on as many seeds and prompts: one row, no departure
            out.append(Claim(f"Clover-2 decodes faster on this CPU than {rival}", on_gpus.get(versus, ""),
                             "; ".join(f"{_brief(a)} {x.ratio:.3f}x {bracket(x.lo, x.hi)}, Holm p {p_text(x.p_holm)}"
                                       for a, x in zip(arms, g.itertuples()))
                             + f" ({g.seeds.iloc[0]} seeds, {g.prompts.iloc[0]} prompts; {how})",
                             _study_status(g.verdict.iloc[0]), page))
            continue
        for arm, x in zip(arms, g.itertuples()):
            out.append(Claim(f"{_subject(arm)} decodes faster on this CPU than {rival}", on_gpus.get(versus, ""),
                             f"{x.ratio:.3f}x {bracket(x.lo, x.hi)} ({x.seeds} seeds, {x.prompts} prompts; {how}), "
                             f"Holm p {p_text(x.p_holm)}", _study_status(x.verdict), page, DEPARTURES.get(arm, "")))
    for x in rows("architectures").itertuples():
        first, second = x.comparison.split(" / ")
        out.append(Claim(f"{_subject(first)} predicts more tokens per step than {_subject(second)}",
                         LATER.get(second, "(the paper's premise)"),
                         f"tau ratio {_ratio(x)}, Holm p {p_text(x.p_adjusted)}"
                         + (f" ({REDUCED[second]})" if second in REDUCED else ""),
                         _study_status(x.verdict), page, DEPARTURES.get(first, "")))
    decided = {c.split(" / ")[1] for c in rows("architectures").comparison} if not verdicts.empty else set()
    planned = [a for a in rivals(design) if a not in decided]
    if planned:
        out.append(Claim(f"Clover-2 predicts more tokens per step than {_names(planned)}", _premise(planned),
                         progress(planned), "not decided yet", page))
    cut_rivals = [a for a in design.cut if not design.arms[a].lr_from]
    if cut_rivals:
        out.append(Claim(f"Clover-2 predicts more tokens per step than {_names(cut_rivals)}", _premise(cut_rivals),
                         "not trained in the study (the protocol's cuts)", "cut for machine time", page))
    parts, cut = part_arms(design), part_arms(design, cut=True)
    if parts:
        out.append(_parts_claim(parts, cut, rows("parts"), progress, page))
    elif cut:
        out.append(Claim("Each of Clover-2's parts helps", "(its design)", "not trained in the study (the protocol's "
                         "cuts); one seed each in the `cpu` profile's ablations", "cut for machine time", page))
    return out


def _premise(rivals: list[str]) -> str:
    """The paper's column of a comparison with `rivals` not decided: its premise, less the rivals it never met."""
    later = [a for a in rivals if a in LATER]
    return "(the paper's premise" + (f"; {_names(later)} came after it" if later else "") + ")"


def _parts_claim(parts: list[str], cut: list[str], rows: pd.DataFrame, progress: Callable[[list[str]], str],
                 page: str) -> Claim:
    """The paper's design claim, that each of Clover-2's parts helps, in one row: each part's effect on tau (the
    official over the arm without it, - 1) with its interval, Holm p and verdict, or its progress (the `cut`
    parts named as cut). Read as the claim says, each of them: not reproduced once one part is shown to hurt;
    reproduced once every part is shown to help, none cut; inconclusive where every part run is decided, none
    hurts, and one is not shown to help or was cut."""
    read = {x.comparison.split(" / ")[0]: x for x in rows.itertuples()}
    said, left = [], [a for a in parts if a not in read]
    for arm, x in read.items():
        words = {PART_HELPS: "helps", PART_HURTS: "hurts"}.get(x.verdict, x.verdict)
        said.append(f"{PARTS.get(arm, (arm,))[0]} {1 / x.ratio - 1:+.1%} [{1 / x.hi - 1:+.1%}, {1 / x.lo - 1:+.1%}]"
                    f" ({x.seeds} seeds)" + ("" if x.verdict == WAITS else f", Holm p {p_text(x.p_adjusted)}")
                    + f": {words}")
    waiting = left + [a for a, x in read.items() if x.verdict == WAITS]
    if said and left:  # a part replayed but short of its seeds says so itself
        said.append(f"{_and([PARTS.get(a, (a,))[0] for a in left])}: {progress(left)}")
    if cut:
        said.append(f"{_and([PARTS.get(a, (a,))[0] for a in cut])}: cut for machine time")
    verdicts = [x.verdict for x in read.values()]
    status = ("not reproduced" if PART_HURTS in verdicts else UNDECIDED if waiting
              else "reproduced" if set(verdicts) == {PART_HELPS} and not cut else "inconclusive")
    return Claim("Each of Clover-2's parts helps", "(its design)",
                 "the part's effect on tau: " + "; ".join(said) if read else progress(parts), status, page)


def _and(words: list[str]) -> str:
    """Words listed in a sentence: "a, b and c"."""
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def _names(arms: list[str]) -> str:
    return _and([NAMES.get(a, a) for a in arms])


def _with_training(study: Path, design: DesignConfig, arm: str, row) -> str:
    """A primary ratio beside its budget: the paper's tau - 1 ratio, and the ratio at the half budget (every seed)
    and at the curve's longest (seed 0, where both arms' curves run at their chosen rates): the verdict is read at
    one small budget, and a reader asks which way it moves."""
    out = ""
    if "excess_ratio" in row.index and row.excess_ratio == row.excess_ratio:  # the rules read tau; the paper tau - 1
        out = f"; tau - 1 ratio (the paper's convention) {row.excess_ratio:.3f}"
        if {"excess_lo", "excess_hi"} <= set(row.index) and row.excess_lo == row.excess_lo:
            out += f" {bracket(row.excess_lo, row.excess_hi)}" + (
                f", not within {design.margin:.0%}" if "equivalent" in row.verdict and not
                1 - design.margin <= row.excess_lo <= row.excess_hi <= 1 + design.margin else "")
    spread, curve, grid = (_read(study / f) for f in ("spread.csv", "curve.csv", "grid.csv"))
    moves = []
    if not spread.empty:
        s = spread[(spread.budget == design.budgets[0]) & (spread.share == 1) & (spread.tree == "eagle25")] \
            .set_index("arm").tau
        if {arm, design.reference} <= set(s.index):
            moves.append(f"tau ratio {s[arm] / s[design.reference]:.3f} at {design.budgets[0]} steps (every seed)")
    if not curve.empty and not grid.empty and design.curve:
        chosen = grid[grid.chosen].set_index("arm").lr
        c = curve[curve.share == 1].pivot_table(index="budget", columns="arm", values="tau")  # seed 0's tau
        rates = curve[curve.budget == max(design.curve)].set_index("arm").lr
        if {arm, design.reference} <= set(c.columns) and all(
                math.isclose(rates.get(a, -1), chosen.get(a, -1)) for a in (arm, design.reference)):
            ratio = (c[arm] / c[design.reference]).dropna()  # the whole curve of seed 0, each arm at its rate
            moves.append("seed 0 alone " + ", ".join(f"{r:.3f} at {b:,}" for b, r in ratio.items()))
    return out + (f"; {'; '.join(moves)}" if moves else "")


def tree_cost(results: Path) -> float | None:
    """What verifying the paper's 25-node tree (26 tokens) costs in plain decoding steps on the `cpu` profile's
    machine (its benchmark's cost curve), or None before it ran."""
    curve = _read(results / "cpu" / "bench" / "cost_curve.csv")
    return float(np.interp(26, curve.n_tokens, curve.relative)) if not curve.empty else None


def _one_token_draft_steps(results: Path, design: DesignConfig) -> str:
    """Beside the 25-node tree's draft steps, the published drafts' on the one-token chain a CPU fits them to
    (the use page's run, seed 0): a clause naming each Clover-2 against the reference, or "" where the run did
    not fit that chain to the reference and a Clover-2."""
    ref = design.reference
    ms = advice.chain1_draft_ms(results, [*design.primary, ref])
    clovers = [a for a in design.primary if a in ms]
    if ref not in ms or not clovers:
        return ""
    dearer = {ms[a] > ms[ref] for a in clovers}
    return (f"; {'more' if dearer == {True} else 'less' if dearer == {False} else 'either'} on the 1-token chain "
            "CPUs are fitted to: " + ", ".join(f"{ms[a]:.1f} {_brief(a).removeprefix('Clover-2 ')}" for a in clovers)
            + f" against {ms[ref]:.1f} ms ({{doc}}`use`)")


def cpu_claims(results: Path, design: DesignConfig | None = None) -> list[Claim]:
    """The claims the `cpu` profile's benchmark decides on its machine: exactness, the draft's cost (beside it,
    the published drafts of `design`, the `study` profile's by default, on a CPU's one-token chain), and the
    speedup over plain decoding."""
    design = design or DesignConfig.of(load_profile("study"))
    bench_dir = results / "cpu" / "bench"
    bench, runs = (_read(bench_dir / f) for f in ("bench.csv", "runs.csv"))
    page = "../results/cpu/notebooks/04_speedup"
    out = []
    decoded = runs[(runs.method != "ar") & (runs.temperature == 0)]  # at T > 0 outputs differ by design
    identical = decoded.identical.mean()
    out.append(Claim("Speculative decoding is lossless", "by construction",
                     f"{identical:.1%} of {len(decoded)} decodings in float32 token-identical to plain decoding; "
                     "sampling "
                     "tested against the exact distribution ({doc}`decoding`)",
                     "reproduced" if identical == 1 else "not reproduced", page))
    t0 = runs[(runs.temperature == 0) & (runs.repeat == 0)]
    ms = {m: draft_ms_per_step(g) for m, g in t0.groupby("method")}  # as the speedup page's draft-step line
    c, e = ms["clover2@eagle25"], ms["eagle1@eagle25"]
    ratio, lo, hi = geometric_mean((c / e.reindex(c.index)).to_numpy(), _picks(len(c)))
    out.append(Claim("Clover-2's draft step costs less than EAGLE-1's on the paper's tree",
                     "(the design: its layers run once a step)",
                     f"{c.median():.1f} against {e.median():.1f} ms a step at the 25-node tree, ratio {ratio:.2f} "
                     f"{bracket(lo, hi, 2)}" + _one_token_draft_steps(results, design), "reproduced" if hi < 1
                     else "not reproduced" if lo > 1 else "inconclusive", page))
    cost = tree_cost(results)
    throughput = paper.throughput()
    found = []  # per temperature: the paper's speedups, this machine's row, and the status
    for t in (0, 1):
        row = bench[(bench.method == "clover2@eagle25") & (bench.task == "overall") & (bench.temperature == t)]
        theirs = throughput[(throughput.method == "clover2") & (throughput.temperature == t)].speedup
        if not row.empty:
            r = row.iloc[0]
            found.append((t, theirs, r, ("reproduced" if r.speedup_lo >= theirs.min() else "not reproduced")
                          if cost < NOT_TESTABLE_COST else "not testable here"))
    # one row where both temperatures read alike (so on a CPU that cannot test them), else one each
    for group in ([found] if len({f[3] for f in found}) == 1 else [[f] for f in found]) if found else []:
        claimed = " and ".join(f"{theirs.min():.1f}-{theirs.max():.1f}x (T = {t})" for t, theirs, _, _ in group)
        paper_said = " and ".join(f"{theirs.min():.2f}-{theirs.max():.2f}x" for _, theirs, _, _ in group)
        here = " and ".join(f"{r.speedup:.2f}x {bracket(r.speedup_lo, r.speedup_hi, 2)}" for _, _, r, _ in group)
        taus = ", ".join(f"{r.tau:.2f}" for _, _, r, _ in group)
        out.append(Claim(f"Clover-2 decodes {claimed} as fast as plain decoding", f"{paper_said} on GPUs",
                         f"{here} at the 25-node tree (the `cpu` profile's Clover-2, tau {taus}); verifying its 26 "
                         f"tokens costs {cost:.1f} plain steps here", group[0][3], page))
    return out


def _span(values: pd.Series) -> str:
    return f"{values.min():.2f}" if values.min() == values.max() else f"{values.min():.2f}-{values.max():.2f}"


def _picks(n: int, n_boot: int = 2000, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, n, (n_boot, n))


def claims(results: Path) -> list[Claim]:
    return study_claims(results) + cpu_claims(results)


def _row(verdicts: pd.DataFrame, family: str, comparison: str) -> pd.Series | None:
    if verdicts.empty:
        return None
    r = verdicts[(verdicts.family == family) & (verdicts.comparison == comparison) & (verdicts.tree == "eagle25")]
    return None if r.empty else r.iloc[0]


def _seeds(text: str) -> str:
    """'5 vs 5' as '5 seeds each', '5 vs 3' as '5 and 3 seeds'."""
    counts = str(text).split(" vs ")
    return (f"{counts[0]} {{term}}`seeds <seed>` each" if len(set(counts)) == 1 else
            " and ".join(counts) + " {term}`seeds <seed>`")


def _times(r: pd.Series) -> str:
    return f"{r.ratio:.3f} times as many {bracket(r.lo, r.hi)}"


def _method_words(method: str) -> str:
    """A method of the benchmark in plain words, for the abstract."""
    name = method.split("@")[0]
    copy, _, arch = name.partition("+")
    if arch:
        return f"{_method_words(copy).split(',')[0]} backed by {_draft_words(method)}"
    return {"pld": "{dfn}`prompt lookup`, which copies from the prompt with no draft,",
            "suffix": "a suffix cache, which copies from earlier text with no draft,",
            "tr": "Token Recycling, which reuses the target's past guesses with no draft,",
            "ar": "plain decoding"}.get(name, f"`{method}`")


def _draft_words(method: str) -> str:
    """The published draft a method decodes with, as the lists name it (by its folder: an architecture may have
    several, e.g. both Clover-2s)."""
    named = MethodSpec.parse(method).named
    return advice.BRIEF.get(named, NAMES.get(named, named))


def _not_told_apart(paired: pd.DataFrame, best: str) -> str:
    """The methods the fastest was not told apart from on the same prompts (greedy; its paired speed ratio's
    interval holds 1), in a clause: more than two as a count (the advice box names them), two drafts
    behind one copy source as such, else each draft once with the sources it was behind."""
    if paired.empty:
        return ""
    mine = paired[(paired.method == best) & (paired.temperature == 0) & (paired.versus != "ar")]
    tied = list(mine[(mine.speed_ratio_lo <= 1) & (mine.speed_ratio_hi >= 1)].versus)
    if not tied:
        return ""
    if len(tied) > 2:
        return f"{len(tied)} others not told apart from it"
    sources = {m.split("@")[0].partition("+")[0] for m in tied}
    if len(tied) > 1 and len(sources) == 1 and all("+" in m for m in tied):
        source = _method_words(tied[0]).split(" backed by")[0]
        return f"not told apart from {source} backed by any of {len(tied)} drafts"
    behind: dict[str, list[str]] = {}  # a draft's words -> the copy sources it was tied behind
    alone = []
    for m in tied:
        copy, plus, _ = m.split("@")[0].partition("+")
        if plus:
            behind.setdefault(_draft_words(m), []).append(advice.COPIES.get(copy, copy))
        else:
            alone.append(_draft_words(m) if MethodSpec.parse(m).arch else _method_words(m).rstrip(","))
    said = [f"{draft} behind {' or '.join(copies)}" for draft, copies in behind.items()] + alone
    return "not told apart from " + (", or " if any(" or " in x for x in said) else " or ").join(said)


def abstract(results: Path, design: DesignConfig | None = None) -> str:
    """The front page's first paragraphs in plain words, from the same tables as the verdict: what was
    tested and at what scale, what held and what did not (the paper's recipe first, a departure named
    as one), and what it means for a reader choosing a draft."""
    design = design or DesignConfig.of(load_profile("study"))
    ref = NAMES.get(design.reference, design.reference)
    study, bench_dir = results / "study", results / "cpu" / "bench"
    runs, verdicts = _read(study / "runs.csv"), _read(study / "verdicts.csv")
    bench, cost = _read(bench_dir / "bench.csv"), tree_cost(results)
    main = runs[(runs.budget == design.main) & (runs.share == 1)] if not runs.empty else runs
    tokens = int(main.tokens.iloc[0]) if not main.empty else 0
    taus = paper.clover2_over_eagle1(paper.tau().assign(source=lambda d: d.target)).tau_ratio
    official = [a for a in design.primary if a not in DEPARTURES]
    departed = [a for a in design.primary if a in DEPARTURES]
    rows = {a: _row(verdicts, "primary", f"{a} / {design.reference}") for a in design.primary}
    decided = [r for r in rows.values() if r is not None]

    seeds = f" ({_seeds(decided[0].seeds)})" if decided else ""
    data = f", with 1/{paper.PAPER_ANSWER_TOKENS / tokens:,.0f} of the paper's training tokens" if tokens else ""
    prompts = f" and {int(decided[0].prompts)} held-out prompts" if decided else ""
    tested = (
        "**In short.** In {dfn}`speculative decoding` a small {term}`draft` model guesses tokens and the "
        "{term}`target` checks them in one pass, its output unchanged. In the paper, "
        f"{{term}}`Clover-2` accepts {100 * (taus.min() - 1):.0f}-{100 * (taus.max() - 1):.0f}% more "
        "{term}`tokens per step <tau>` than {term}`EAGLE-1` on 7-8B targets. This book trained both"
        f"{seeds} for SmolLM2-135M-Instruct on 2 CPU cores{data}{prompts}.")

    held = []
    for i, arm in enumerate(official + departed):
        r = rows[arm]
        how = ("as published, Clover-2" if arm not in DEPARTURES else
               f"with one departure from the paper, {link_first_uses(DEPARTURES[arm], ('value gain',))},"
               + ("" if held and r is not None else " Clover-2"))
        held.append(f"{how} is still training" if r is None else
                    (f"{how} accepted {r.ratio:.3f} times {ref}'s tokens per step ({{term}}`interval` "
                     f"{bracket(r.lo, r.hi)})" if not held else f"{how} {r.ratio:.3f} times {bracket(r.lo, r.hi)}")
                    + f": **{_study_status(r.verdict)}**")
    what = "**What held, what did not.** " + "; ".join(held)[:1].upper() + "; ".join(held)[1:] + "."
    use = _read(results / "use" / "float32" / "bench.csv")  # the published drafts, timed for the use page
    greedy = use[(use.task == "overall") & (use.temperature == 0)] if not use.empty else use
    drafts = bench[(bench.task == "overall") & (bench.temperature == 0) & bench.method.str.endswith("@eagle25")] \
        if not bench.empty else bench  # as the claims below read them
    timed = _read(study / "speed-cpu" / "claims.csv")
    if not drafts.empty and cost is not None and cost < NOT_TESTABLE_COST:  # else the box says why not testable
        what += (f" Checking the paper's {{term}}`25-node tree` costs {cost:.1f} plain steps here, and the `cpu` "
                 f"profile's drafts ran at {_span(drafts.speedup)}x {{term}}`plain decoding`'s speed on it.")
    if not timed.empty:  # amendment 1: the speed claims in their CPU form, by draft (their intervals: the table)
        said: dict[str, list[str]] = {}
        for x in timed.itertuples():
            a, b = x.comparison.split(" / ")
            said.setdefault(a, []).append(f"{x.ratio:.2f} times as fast as {NAMES.get(b, b)} "
                                          f"(**{_study_status(x.verdict)}**)")
        what += (" On this CPU (every seed, each on its fastest tree and kernels), "
                 + "; ".join(f"{NAMES.get(a, a)} decoded {' and '.join(parts)}" for a, parts in said.items()) + ".")
    if official and all(r is not None and r.verdict != WAITS for r in rows.values()):  # every primary decided
        better = {arm: _study_status(rows[arm].verdict) == "reproduced" for arm in official + departed}
        what += (f" **For choosing a draft:** Clover-2 as published predicts "
                 f"{'more' if better[official[0]] else 'no more'} tokens per step than {ref} at this scale and "
                 "training budget")
        for arm in (a for a in departed if better[a] != better[official[0]]):  # a departure that changes the answer
            change = f"{100 * (rows[arm].ratio - 1):+.1f}%"
            what += f" ({change} with the departure)" if better[arm] else f" (no more with the departure, {change})"
        fastest = greedy if not greedy.empty else bench[(bench.task == "overall") & (bench.temperature == 0)] \
            if not bench.empty else bench
        if not fastest.empty and timed.empty:  # once timed, the claims' sentence says the CPU speeds (the advice
            # box below keeps the use page's fastest method)
            best = fastest.loc[fastest.speedup.idxmax()]
            tied = _not_told_apart(_read(results / "use" / "float32" / "paired.csv"), best.method) \
                if not greedy.empty else ""
            what += (f"; on a CPU, {_method_words(best.method)} was the fastest of clover2's methods "
                     f"({best.speedup:.2f}x{', ' + tied if tied else ''})")
        what += "."
    return f"{tested}\n\n{what}"


UNDECIDED = "not decided yet"  # a status whose claims the box lists in one group, departures named in each


def _group(c: Claim) -> tuple[str, str]:
    """A claim's group in the verdict box: its status and departure (a claim not decided yet: its status alone)."""
    return (c.status, "" if c.status == UNDECIDED else c.departure)


def _group_order(rows: list[Claim]):
    """The verdict box's groups of (status, departure): the group of the first claim (the paper's recipe
    against the reference) first, then by status, each departure after its status's plain group."""
    groups = list(dict.fromkeys(map(_group, rows)))
    first = _group(rows[0]) if rows else None
    return sorted(groups, key=lambda g: (g != first, STATUSES.index(g[0]), bool(g[1])))


def _box_text(c: Claim, *, both: bool = False) -> str:
    """A claim as the verdict box lists it: a departure is named by its group's lead, so not again; a claim not
    decided yet names its departure briefly, and no recipe at all where it is not decided for `both` (the box
    then lists the question once)."""
    text = c.claim
    for arm in (*DEPARTURES, "clover2-official"):
        if both:
            text = text.replace(_subject(arm), "Clover-2")
        elif DEPARTURES.get(arm) == c.departure and c.departure:
            text = text.replace(_subject(arm), _brief(arm) if c.status == UNDECIDED else "Clover-2")
    return text


def _box_texts(claims: list[Claim]) -> list[str]:
    """A group's claims as the verdict box lists them, each once (`_box_text`; in the group of claims not decided
    yet, a question open for both recipes is listed once, without either)."""
    bare = Counter(_box_text(c, both=True) for c in claims if c.status == UNDECIDED)
    return list(dict.fromkeys(_box_text(c, both=c.status == UNDECIDED and bare[_box_text(c, both=True)] > 1)
                              for c in claims))


def _lower(text: str) -> str:
    """A claim in the middle of a sentence: a first word of plain letters lower-cased ("Each", not "EAGLE-1")."""
    first = text.split(" ")[0]
    return text[0].lower() + text[1:] if first[1:].islower() and first.isalpha() else text


def _merged(texts: list[str]) -> list[str]:
    """Consecutive claims that start alike, as one: "A beats B" and "A beats C" as "A beats B and C"
    (at least two words in common, no parenthesis left open, and no "and" of their own in what differs,
    which the joined sentence would make ambiguous)."""
    groups: list[tuple[list[str], list[str]]] = []  # the words in common, and each claim's rest
    for text in texts:
        words = text.split(" ")
        if groups:
            head, tails = groups[-1]
            if len(tails) == 1:  # a claim alone: share as many words with it as there are
                whole = head + tails[0].split(" ")
                n = next((i for i, (a, b) in enumerate(zip(whole, words)) if a != b), min(len(whole), len(words)))
                shared = " ".join(words[:n])
                if 2 <= n < min(len(whole), len(words)) and shared.count("(") == shared.count(")") and \
                        "and" not in whole[n:] + words[n:]:
                    groups[-1] = (words[:n], [" ".join(whole[n:]), " ".join(words[n:])])
                    continue
            elif words[:len(head)] == head and len(words) > len(head):
                tails.append(" ".join(words[len(head):]))
                continue
        groups.append(([], [text]))
    return [" ".join(head + [_and(tails)]) for head, tails in groups]


# terms the front page links to the glossary at their first use (beside those the abstract links itself)
ADVICE_TERMS = ("prompt lookup", "suffix cache", "fitted tree", "tokens per step", "plain decoding", "seed")  # the box
FIRST_USE = ("tau", "official recipe", "Medusa-1", "EAGLE-3", "Clover-1", "Holm", "T = 0", "T = 1", "seed", "lossless",
             "25-node tree", "plain decoding")


def link_first_uses(text: str, terms=FIRST_USE) -> str:
    """Each of `terms` linked to its glossary entry where it is first used in `text`, unless that first
    use already is a link or a definition (inside a role's backticks)."""
    for term in terms:
        shown = re.sub(r"<[^`<>]*>`", lambda m: " " * len(m.group()), text)  # a role's target is not shown
        m = re.search(rf"(?<![\w-]){re.escape(term)}(?=s?(?![\w-]))", shown)
        if m and text[m.start() - 1] not in "`<":
            text = f"{text[:m.start()]}{{term}}`{term}`{text[m.end():]}"
    return text


def markdown(results: Path) -> str:
    """The abstract, the verdict box (the claims grouped by status, the paper's recipe first, a departure
    from the paper in a group of its own), then the claims table."""
    rows, cost = claims(results), tree_cost(results)
    why = (f" (a GPU checks the 25-node tree in about one plain step, this CPU in {cost:.1f})"
           if cost is not None and cost >= NOT_TESTABLE_COST else "")  # why not testable: said once, in the box
    lines = [abstract(results), "", "```{admonition} The verdict, claim by claim", ":class: verdict", ""]
    for status, departure in _group_order(rows):
        mine = _merged(_box_texts([c for c in rows if _group(c) == (status, departure)]))
        lead = f"**{status.capitalize()}**" + (why if status == "not testable here" else "") + (
            f", with a departure from the paper ({departure})" if departure else "")
        lines.append(f"- {lead}: {'; '.join([mine[0]] + [_lower(m) for m in mine[1:]])}.")
    lines += ["```", "", "```{container} claims", "",  # its columns' widths: _static/verdict.css
              "| the paper's claim | the paper | this book | status |", "|---|---|---|---|"]
    lines += [f"| {c.claim} | {c.paper} | {c.here} ({{doc}}`source <{c.page}>`) | **{c.status}** |" for c in rows]
    timed = not _read(results / "study" / "speed-cpu" / "claims.csv").empty
    lines += ["```", "", "Generated from the result tables: tokens per step " + (
        "and this CPU's speeds compared over seeds and prompts, by rules fixed before the runs ({doc}`protocol`); "
        "the advice below, seed 0's speeds over prompts" if timed else
        "compared over seeds and prompts, by rules fixed before the runs ({doc}`protocol`); speeds so far seed 0's, "
        "over prompts") + "; intervals 97.5% for the two primary comparisons, 95% for the others, which are "
        "decided by their Holm-adjusted p (so an interval clear of 1 may still read \"no difference shown\"); "
        "terms: {doc}`glossary`."]
    return link_first_uses("\n".join(lines)) + "\n"


README_START = "<!-- the book's abstract, written by `python -m clover2.research.claims results book` -->"
README_END = "<!-- end of the abstract -->"


def plain(text: str) -> str:
    """MyST text as plain Markdown (a README's): a glossary link as its words, a definition in italics."""
    text = re.sub(r"\{term\}`([^`<]*?)(?: <[^>]*>)?`", r"\1", text)
    return re.sub(r"\{dfn\}`([^`]*)`", r"*\1*", text)


def with_abstract(readme: str, results: Path) -> str:
    """`readme` with the book's abstract (plain) between its markers, so the README's results stay the book's."""
    head, start, rest = readme.partition(README_START)
    _, end, tail = rest.partition(README_END)
    if not (start and end):
        raise ValueError(f"the README lacks the markers {README_START!r} ... {README_END!r}")
    return f"{head}{start}\n{plain(abstract(results))}\n{end}{tail}"


if __name__ == "__main__":
    results, book = (Path(a) for a in (sys.argv[1:] + ["results", "book"])[:2]) if len(sys.argv) > 1 else \
        (Path("results"), Path("book"))
    write_text(book / "verdict.md", markdown(results))
    main_budget = DesignConfig.of(load_profile("study")).main
    write_text(book / "advice.md", link_first_uses(advice.box(results, main_budget=main_budget), ADVICE_TERMS))
    write_text(book / "advice-brief.md", link_first_uses(advice.box(results, main_budget=main_budget, brief=True),
                                                         ADVICE_TERMS))  # the front page's
    write_text(book / "speeds.md", advice.table(results))
    write_text(book / "engine.md", engines(results))
    readme = book.parent / "README.md"
    if readme.exists():
        write_text(readme, with_abstract(readme.read_text(), results))
