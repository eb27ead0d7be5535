"""The front page's verdict: the paper's claims one by one, each with this book's evidence and its
status, generated from the result tables so that no verdict is typed by hand.

The evidence comes from two places: the designed study (`results/study/`: its verdicts table, with
the protocol's decision rules, `clover2.research.verdicts`) for everything that compares trained
drafts, and the `cpu` profile that `make reproduce` reruns (`results/cpu/bench/`) for exactness,
costs and speed on a CPU. A status is one of `STATUSES`; a comparison the study has not finished
says so, with how far the study is.

`speeds` is the table of what to expect on a CPU for the page on using a draft.

    python -m clover2.research.claims results book    # book/verdict.md and book/speeds.md
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from clover2.files import write_text
from clover2.measure.bench import geometric_mean
from clover2.profiles import load_profile
from clover2.research import paper
from clover2.research.design import DesignConfig
from clover2.research.report import draft_ms_per_step
from clover2.research.verdicts import WAITS, arm_of, at_edge, bracket, p_text, reason

STATUSES = ("reproduced", "equivalent within the margin", "not reproduced", "inconclusive", "not testable here",
            "not decided yet", "cut for machine time")
NAMES = {"clover2-official": "Clover-2 (official recipe)", "clover2": "Clover-2 (this project's value gain)",
         "eagle1": "EAGLE-1", "eagle3": "EAGLE-3", "medusa": "Medusa-1", "clover1": "Clover-1",
         # the official recipe with one part removed (the study's amendment 1)
         "official-extraction-after": "Clover-2 (official) with the token extracted after the block",
         "official-no-projector": "Clover-2 (official) without its output projector",
         "official-1-layer-block": "Clover-2 (official) with a one-layer augmenting block",
         "official-hard-labels": "Clover-2 (official) trained on hard labels"}
NOT_TESTABLE_COST = 1.5  # a CPU where verifying the paper's 26-token tree costs this many plain steps or more


@dataclass(frozen=True)
class Claim:
    claim: str  # the paper's claim, in words
    paper: str  # the paper's numbers
    here: str  # this book's evidence
    status: str  # one of STATUSES
    page: str  # the page that shows the evidence


def _pct(lo: float, hi: float) -> str:
    return f"{100 * (lo - 1):+.0f} to {100 * (hi - 1):+.0f}% per task"


def _ratio(r) -> str:
    return f"{r.ratio:.3f} {bracket(r.lo, r.hi)} ({r.seeds} seeds, {r.prompts} prompts)"


def _study_status(verdict: str) -> str:
    """The protocol's verdict (`clover2.research.verdicts`) as one of STATUSES."""
    if verdict == WAITS:
        return "not decided yet"
    if verdict.startswith("reproduced") or verdict in ("ahead", "faster"):
        return "reproduced"
    if verdict.startswith("equivalent"):
        return "equivalent within the margin"
    if verdict.startswith("not reproduced") or verdict in ("behind", "slower"):
        return "not reproduced"
    return "inconclusive"


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
    runs, verdicts = _read(study / "runs.csv"), _read(study / "verdicts.csv")
    progress = f"in progress ({len(runs)} runs trained)"
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
        here, status = (progress, "not decided yet") if r.empty else (
            f"tau ratio {_ratio(r.iloc[0])}, 25-node tree", _study_status(r.iloc[0].verdict))
        if status != "not decided yet":  # the rule's reason, and the one caveat the protocol leaves open
            x = r.iloc[0]
            here += ": " + reason(x.lo, x.hi, design.margin, design.smallest_claim, design.largest_claim,
                                  NAMES.get(ref, ref)) + (
                f"; {NAMES.get(arm, arm)}'s learning rate is at the edge of its tuning grid" if arm in edge else "")
        out.append(Claim(f"{NAMES.get(arm, arm)} predicts more tokens per step than {NAMES.get(ref, ref)}",
                         f"tau {_pct(taus.tau_ratio.min(), taus.tau_ratio.max())}", here, status, page))
    speed = _read(study / "speed" / "paired.csv")
    if not speed.empty:
        speed = speed[(speed.versus.map(arm_of) == ref) & (speed.temperature == 0)].assign(
            arm=lambda d: d.method.map(arm_of)).set_index("arm")
    measured = [a for a in design.primary if a in speed.index]
    here = "the pair's speed on one CPU is measured last (the protocol's order)" if not measured else (
        " and ".join(f"{NAMES.get(a, a)} {speed.speed_ratio[a]:.3f}x "
                     f"{bracket(speed.speed_ratio_lo[a], speed.speed_ratio_hi[a])}" for a in measured)
        + f" as fast as {NAMES.get(ref, ref)} on one CPU (seed 0's drafts, paired by prompt; intervals over prompts)")
    cpu = _read(study / "speed-cpu" / "claims.csv")  # amendment 1: the claims in their CPU form, once timed
    greedy = speeds.clover2.xs(0, level="temperature")  # the paper's Clover-2 over plain decoding, T = 0
    if cpu.empty:
        # the protocol: a CPU is not the hardware the claim is about, whatever the ratio, measured or not
        out.append(Claim(f"Clover-2 decodes faster than {NAMES.get(ref, ref)}",
                         f"speed {_pct(speed_ratio.min(), speed_ratio.max())}", here
                         + "; amendment 1 times the claims in their CPU form last", "not testable here", page))
    for x in cpu.itertuples():
        arm, versus = x.comparison.split(" / ")
        rival = NAMES.get(versus, versus)
        out.append(Claim(f"{NAMES.get(arm, arm)} decodes faster than {rival}, on this CPU",
                         f"speed {_pct(speed_ratio.min(), speed_ratio.max())}" if versus == ref else
                         f"{greedy.min():.2f}-{greedy.max():.2f}x on GPUs",
                         f"{x.ratio:.3f}x {bracket(x.lo, x.hi)} ({x.seeds} seeds, {x.prompts} prompts; the tree "
                         f"measured fastest here, the fastest kernels), Holm p {p_text(x.p_holm)}",
                         _study_status(x.verdict), page))
    for family, claim in (("architectures", "{a} predicts more tokens per step than {b}"),
                          ("parts", "{b} predicts more tokens per step than {a}")):
        r = rows(family)
        for x in r.itertuples():
            a, b = (NAMES.get(s, s) for s in x.comparison.split(" / "))
            text = claim.format(a=a, b=b)
            out.append(Claim(text, "(the paper's premise)" if family == "architectures" else "(its design)",
                             f"tau ratio {_ratio(x)}, Holm p {p_text(x.p_holm)}", _study_status(x.verdict), page))
        decided = {c.split(" / ")[1 if family == "architectures" else 0] for c in r.comparison} if len(r) else set()
        planned = [a for a, s in design.arms.items() if not s.cut and a not in decided
                   and (s.lr_from if family == "parts" else not s.lr_from and a not in (*design.primary, ref))]
        if planned and (family == "architectures" or r.empty):
            out.append(Claim(f"Clover-2 predicts more tokens per step than {_names(planned)}"
                             if family == "architectures" else "Each of Clover-2's parts helps",
                             "(the paper's premise)" if family == "architectures" else "(its design)", progress,
                             "not decided yet", page))
    rivals = [a for a in design.cut if not design.arms[a].lr_from]
    if rivals:
        out.append(Claim(f"Clover-2 predicts more tokens per step than {_names(rivals)}", "(the paper's premise)",
                         "not trained in the study (the protocol's cuts)", "cut for machine time", page))
    if any(design.arms[a].lr_from for a in design.cut):
        out.append(Claim("Each of Clover-2's parts helps", "(its design)", "not trained in the study (the protocol's "
                         "cuts); one seed each in the `cpu` profile's ablations", "cut for machine time", page))
    return out


def _names(arms: list[str]) -> str:
    names = [NAMES.get(a, a) for a in arms]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def cpu_claims(results: Path) -> list[Claim]:
    """The claims the `cpu` profile's benchmark decides on its machine: exactness, the draft's cost,
    and the speedup over plain decoding."""
    bench_dir = results / "cpu" / "bench"
    bench, runs, curve = (_read(bench_dir / f) for f in ("bench.csv", "runs.csv", "cost_curve.csv"))
    page = "../results/cpu/notebooks/04_speedup"
    out = []
    decoded = runs[(runs.method != "ar") & (runs.temperature == 0)]  # at T > 0 outputs differ by design
    identical = decoded.identical.mean()
    out.append(Claim("Speculative decoding is lossless", "by construction",
                     f"{identical:.1%} of {len(decoded)} decodings token-identical to plain decoding; sampling "
                     "tested against the exact distribution ({doc}`decoding`)",
                     "reproduced" if identical == 1 else "not reproduced", page))
    t0 = runs[(runs.temperature == 0) & (runs.repeat == 0)]
    ms = {m: draft_ms_per_step(g) for m, g in t0.groupby("method")}  # as the speedup page's draft-step line
    c, e = ms["clover2@eagle25"], ms["eagle1@eagle25"]
    ratio, lo, hi = geometric_mean((c / e.reindex(c.index)).to_numpy(), _picks(len(c)))
    out.append(Claim("Clover-2's draft step costs less than EAGLE-1's", "(the design: its layers run once a step)",
                     f"{c.median():.1f} against {e.median():.1f} ms a step at the 25-node tree, ratio {ratio:.2f} "
                     f"[{lo:.2f}, {hi:.2f}]", "reproduced" if hi < 1 else "not reproduced" if lo > 1
                     else "inconclusive", page))
    cost = float(np.interp(26, curve.n_tokens, curve.relative))
    throughput = paper.throughput()
    for t in (0, 1):
        row = bench[(bench.method == "clover2@eagle25") & (bench.task == "overall") & (bench.temperature == t)]
        theirs = throughput[(throughput.method == "clover2") & (throughput.temperature == t)].speedup
        if row.empty:
            continue
        r = row.iloc[0]
        testable = cost < NOT_TESTABLE_COST
        status = ("reproduced" if r.speedup_lo >= theirs.min() else "not reproduced") if testable \
            else "not testable here"
        out.append(Claim(f"Clover-2 decodes {theirs.min():.1f}-{theirs.max():.1f}x as fast as plain decoding (T = {t})",
                         f"{theirs.min():.2f}-{theirs.max():.2f}x on GPUs",
                         f"{r.speedup:.2f}x [{r.speedup_lo:.2f}, {r.speedup_hi:.2f}] at the 25-node tree; verifying "
                         f"its 26 tokens costs {cost:.1f} plain steps here", status, page))
    return out


def _span(values: pd.Series) -> str:
    return f"{values.min():.2f}" if values.min() == values.max() else f"{values.min():.2f}-{values.max():.2f}"


def _picks(n: int, n_boot: int = 2000, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, n, (n_boot, n))


def claims(results: Path) -> list[Claim]:
    return study_claims(results) + cpu_claims(results)


def scale(results: Path) -> str:
    """The scale of this book's evidence beside the paper's, and where its answer could change."""
    runs, bench = _read(results / "study" / "runs.csv"), _read(results / "cpu" / "bench" / "bench.csv")
    spread = _read(results / "study" / "spread.csv")
    compared = DesignConfig.of(load_profile("study")).main  # the budget the drafts are compared at
    main = runs[(runs.budget == compared) & (runs.share == 1)] if not runs.empty else runs
    tokens = int(main.tokens.iloc[0]) if not main.empty else 0
    drafts = bench[(bench.task == "overall") & (bench.temperature == 0) & bench.method.str.endswith("@eagle25")]
    theirs = paper.tau().tau
    budget = (f"the study's drafts see {tokens:,} answer tokens ({main.epochs.iloc[0]:.1f} epochs), about 1/"
              f"{paper.PAPER_ANSWER_TOKENS / tokens:,.0f} of the paper's {paper.PAPER_ANSWER_TOKENS / 1e9:.1f} "
              "billion" if tokens else "the study's drafts are still training")
    cpu = f"{drafts.tau.min():.2f}-{drafts.tau.max():.2f}"
    study = spread[(spread.budget == compared) & (spread.share == 1) & (spread.tree == "eagle25")] \
        if not spread.empty else spread
    accept = (f"{_span(study.tau)} tokens per step at the paper's 25-node tree in the study ({cpu} after the `cpu` "
              "profile's 90 steps)" if not study.empty else f"{cpu} tokens per step at the paper's 25-node tree (the "
              "`cpu` profile)")
    return (f"**The scale.** The target is SmolLM2-135M-Instruct (fp32) on two CPU cores, not the paper's 7-8B "
            f"models on GPUs; {budget}. Trained drafts accept {accept}, against {theirs.min():.1f}-"
            f"{theirs.max():.1f} in the paper. "
            "The ordering of the drafts is what this scale can test; it could change with a larger target, more "
            "training data, or a GPU, where verifying a tree of tokens costs about one plain step.")


def markdown(results: Path) -> str:
    """The scale, the verdict box (the claims grouped by status), then the claims table."""
    rows = claims(results)
    lines = [scale(results), "", "```{admonition} The verdict, claim by claim", ":class: verdict", ""]
    for status in STATUSES:
        mine = [c.claim for c in rows if c.status == status]
        if mine:
            lines.append(f"- **{status.capitalize()}**: {'; '.join(mine)}.")
    lines += ["```", "",
              "| the paper's claim | the paper | this book | status |", "|---|---|---|---|"]
    lines += [f"| {c.claim} | {c.paper} | {c.here} ({{doc}}`source <{c.page}>`) | **{c.status}** |" for c in rows]
    return "\n".join(lines) + "\n"


def speeds(results: Path, draft: str = "clover2") -> str:
    """What each method a user can run with `clover2 generate` and the published `draft` gave on the
    `cpu` profile's machine, fastest first (greedy), with the flags that run it (a fitted tree as the
    static tree the benchmark chose); every other method is on the benchmark's page."""
    bench_dir = results / "cpu" / "bench"
    bench, env = _read(bench_dir / "bench.csv"), json.loads((bench_dir / "env.json").read_text())
    rows = bench[(bench.task == "overall") & (bench.temperature == 0) & (bench.method != "ar")
                 & bench.speedup_lo.notna()].sort_values("speedup", ascending=False)
    fitted = env.get("fitted_trees", {})

    def flags(method: str) -> str:
        name, _, tree = method.partition("@")
        if name == "hf-pld":
            return "(Hugging Face's own prompt lookup)"
        if name.startswith("union+"):
            return "(the benchmark's fitted union)"
        if tree == "fitted":
            fit = fitted.get(name.split("+")[-1], {})
            if not fit.get("budget"):  # no draft tree pays on this machine: the copy part alone, or plain decoding
                return f"`--method {name.split('+')[0]}`" if "+" in name else "(drafts nothing here: plain decoding)"
            tree = f"chain{fit['depth']}" if fit.get("budget") == fit.get("depth") else \
                f"dynamic:{fit['budget']}:{fit['depth']}:8"
        needs = "=DRAFT" if any(a in name for a in ("clover", "eagle", "medusa")) else ""
        return f"`--method {name}" + (f"@{tree}" if tree else "") + f"{needs}`"

    rows = rows[[not flags(m).startswith("(") and m.split("@")[0].split("+")[-1] in (draft, "pld", "suffix", "tr")
                 for m in rows.method]]
    lines = [f"Measured on {env['cpu_name']} ({env['cpu_count']} cores), commit {env['commit']}, "
             f"{int(rows.n_prompts.max())} prompts of {env['bench']['max_new_tokens']} new tokens, every method "
             "interleaved with plain decoding in one run, nothing else running "
             f"({env['other_load']:.1%} of the machine); drafts trained by the `cpu` profile (90 steps). Every "
             "method, the other drafts' too: {doc}`../results/cpu/notebooks/04_speedup`.", "",
             "| method | speed over plain decoding | tokens per step | as `clover2 generate` |", "|---|---|---|---|"]
    lines += [f"| {r.method} | {r.speedup:.2f}x [{r.speedup_lo:.2f}, {r.speedup_hi:.2f}] | "
              f"{'–' if pd.isna(r.tau) else f'{r.tau:.2f}'} | "
              f"{flags(r.method)} |" for r in rows.itertuples()]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    results, book = (Path(a) for a in (sys.argv[1:] + ["results", "book"])[:2]) if len(sys.argv) > 1 else \
        (Path("results"), Path("book"))
    write_text(book / "verdict.md", markdown(results))
    write_text(book / "speeds.md", speeds(results))
