"""The practitioner's answer, "Should I use Clover-2?": a box for the front page and the use page, and the
use page's table, generated from one benchmark of the study's published drafts (`results/use/`), so that the
advice is what was measured.

The benchmark (`results/README.md` has its command) times plain decoding, the two ways of copying from the
prompt and every published draft on the tree fitted to the machine, alone and behind the suffix cache,
interleaved prompt by prompt on held-out prompts: `results/use/float32/` at the command line's default
precision (the exact path), `results/use/bfloat16/` at bf16 (a shorter list). A speed is the geometric
mean of per-prompt ratios to plain decoding at the same precision, with its 95% bootstrap interval.

    python -m clover2.research.claims results book    # writes book/advice.md and book/speeds.md too
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from clover2.drafts.methods import MethodSpec
from clover2.measure.bench import record_name
from clover2.research import engines
from clover2.research.report import bracket, draft_ms_per_step

PUBLISHED = "results/study/drafts"  # where the published drafts live, as a command names them
# each published draft folder as a reader knows it (the study's arms; the value gain is a departure)
DRAFTS = {"clover2-official": "Clover-2 (the paper's recipe)", "clover2": "Clover-2 (with this project's value gain)",
          "eagle1": "EAGLE-1", "medusa": "Medusa-1", "eagle3": "EAGLE-3", "clover1": "Clover-1"}
COPIES = {"pld": "prompt lookup", "suffix": "the suffix cache"}
BRIEF = {"clover2-official": "Clover-2 (paper's recipe)", "clover2": "Clover-2 (value gain)"}  # in lists and tables


def _read(folder: Path) -> tuple[pd.DataFrame, pd.DataFrame, dict] | None:
    """A run's greedy overall rows, its paired table and env.json; None where it was not run."""
    if not (folder / "bench.csv").exists():
        return None
    bench = pd.read_csv(folder / "bench.csv")
    rows = bench[(bench.task == "overall") & (bench.temperature == 0)].set_index("method")
    return rows, pd.read_csv(folder / "paired.csv"), json.loads((folder / "env.json").read_text())


def tree_of(method: str, env: dict) -> str:
    """The tree a method ran on: its own, or for `@fitted` the tree the fit chose (one node: the one-token
    chain, which the benchmark decodes it as; more: EAGLE-2's dynamic tree); "" where the fit drafts nothing."""
    spec = MethodSpec.parse(method)
    if spec.tree != "fitted":
        return spec.tree
    fit = env.get("fitted_trees", {}).get(record_name(spec, spec.arch), {})
    if not fit.get("budget"):
        return ""
    return "chain1" if fit["budget"] == 1 else \
        f"dynamic:{fit['budget']}:{fit['depth']}:{env['bench']['fit']['top_k']}"  # clover2.measure.fit.fitted_factory


def command(method: str, env: dict) -> str:
    """The `clover2 generate` flag that runs `method` as the benchmark ran it (a fitted tree as the
    static tree it chose; a fit that drafts nothing is the copying part alone, or plain decoding)."""
    spec, tree = MethodSpec.parse(method), tree_of(method, env)
    if not spec.arch:
        return f"--method {spec.name}"
    if not tree:
        copy = spec.name.partition("+")[0]
        return f"--method {copy}" if "+" in spec.name else "--method ar"
    return f"--method {spec.name}@{tree}={PUBLISHED}/{spec.named}"


def describe(method: str, env: dict) -> str:
    """A method in a reader's words, in a sentence's middle: what drafts, and on which tree."""
    spec = MethodSpec.parse(method)
    if not spec.arch:
        return {"ar": "plain decoding"}.get(spec.name, COPIES.get(spec.name, spec.name))
    draft = DRAFTS.get(spec.named, spec.named)
    copy = spec.name.partition("+")[0] if "+" in spec.name else ""
    tree = tree_of(method, env)
    shape = ("the tree fitted to this machine, " if spec.tree == "fitted" else "") + (
        "no draft tokens" if not tree else "the paper's 25-node tree" if tree == "eagle25" else
        f"a {tree[5:]}-token chain" if tree.startswith("chain") else f"a dynamic tree of {tree.split(':')[1]} nodes")
    named = f"{draft[:-1]}; {shape})" if draft.endswith(")") else f"{draft} ({shape})"
    return f"{COPIES[copy]} with {named} behind it" if copy else named


def short(method: str) -> str:
    """A method's name in a list: what drafts, without the tree."""
    spec = MethodSpec.parse(method)
    copy = spec.name.partition("+")[0] if "+" in spec.name else ""
    draft = BRIEF.get(spec.named, DRAFTS.get(spec.named, spec.named)) if spec.arch else \
        {"ar": "plain decoding"}.get(spec.name, COPIES.get(spec.name))
    return f"{COPIES[copy]} + {draft}" if copy else draft


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]


def _span(ratios: list[pd.Series]) -> str:
    """Paired speed ratios' points as one figure or a range: "0.94x", "0.92-0.93x"."""
    lo, hi = (f"{v:.2f}" for v in (min(r.speed_ratio for r in ratios), max(r.speed_ratio for r in ratios)))
    return f"{lo}x" if lo == hi else f"{lo}-{hi}x"


def _speed(r: pd.Series) -> str:
    return f"{r.speedup:.2f}x {bracket(r.speedup_lo, r.speedup_hi, 2)}"


def _measured(env: dict, rows: pd.DataFrame) -> str:
    return (f"{env['cpu_name']}, {env['torch_threads']} threads, commit `{env['commit']}`, {env['date'][:10]}; "
            f"{int(rows.n_prompts.max())} held-out prompts of the six Spec-Bench tasks, up to "
            f"{env['bench']['max_new_tokens']} new tokens, greedy, every method interleaved with plain decoding "
            f"prompt by prompt, other processes {env['other_load']:.1%} of the machine")


def _tree_words(method: str, env: dict) -> str:
    """The tree a method's row ran on, in a few words, where its command does not say it: a tree the method
    names (a fitted tree's command names the tree chosen), or a fitted tree that drafts nothing."""
    spec, tree = MethodSpec.parse(method), tree_of(method, env)
    if not spec.arch or (spec.tree == "fitted" and tree):
        return ""
    return ("fitted: no draft tokens" if not tree else "25-node tree" if tree == "eagle25" else
            f"{tree[5:]}-token chain" if tree.startswith("chain") else f"{tree.split(':')[1]}-node dynamic tree")


def table(results: Path) -> str:
    """The use page's table: every method of the float32 run, fastest first, with the command that runs it;
    both runs' files as downloads (the bf16 run is summed up in the box)."""
    run = _read(results / "use" / "float32")
    if run is None:
        return "Not measured yet: `results/use/` holds no run.\n"
    rows, _, env = run
    rows = rows.sort_values("speedup", ascending=False)
    lines = [f"Measured in float32 (the command line's default: every output is plain decoding's, token for token) on "
             f"{_measured(env, rows)}; plain decoding {rows.loc['ar'].tokens_per_s:.1f} tokens/s. `D` is "
             f"`{PUBLISHED}`. Speed: the geometric mean over prompts of plain decoding's time over the method's "
             "(not a ratio of median tokens per second), with its 95% bootstrap interval; each command names the "
             "tree fitted here (`@fitted`, below).", "",
             "```{container} speeds", "",
             "| method | `clover2 generate --method` | tokens per step | speed over plain decoding |",
             "|---|---|---|---|"]
    lines += [f"| {_capital(short(m))}{', ' + t if (t := _tree_words(m, env)) else ''} | "
              f"`{command(m, env).removeprefix('--method ').replace(PUBLISHED, 'D')}` | "
              f"{'–' if pd.isna(r.tau) else f'{r.tau:.2f}'} | {'1' if m == 'ar' else _speed(r)} |"
              for m, r in rows.iterrows()]
    lines += ["```"]
    files = [f"{{download}}`{dtype} <../results/use/{dtype}/bench.csv>`" for dtype in ("float32", "bfloat16")
             if (results / "use" / dtype / "bench.csv").exists()]
    lines += ["", "Every row per task, with tokens per second and the share of identical outputs: " + ", ".join(files)
              + " (`bench.csv`; the columns: `results/README.md`)."]
    return "\n".join(lines) + "\n"


def fitted(greedy: pd.DataFrame, draft: str, copy: str = "") -> tuple[str, pd.Series] | None:
    """The method (and its row) of a run that decodes with the published `draft` on its fitted tree, behind
    `copy` (a way of copying from the prompt) or alone; None where the run has none."""
    found = [m for m in greedy.index if (s := MethodSpec.parse(m)).named == draft and s.tree == "fitted"
             and s.name.partition("+")[0] == (copy or s.name) and ("+" in s.name) == bool(copy)]
    return (found[0], greedy.loc[found[0]]) if found else None


def chain1_draft_ms(results: Path, drafts: list[str]) -> dict[str, float]:
    """Each of `drafts` alone on its fitted tree in the use page's float32 run, where that tree is the one-token
    chain: its draft's milliseconds a decoding step (greedy; the median over prompts). Empty without a run."""
    folder = results / "use" / "float32"
    run = _read(folder)
    if run is None or not (folder / "runs.csv").exists():
        return {}
    rows, _, env = run
    runs = pd.read_csv(folder / "runs.csv")
    out = {}
    for draft in drafts:
        found = fitted(rows, draft)
        mine = runs[(runs.method == found[0]) & (runs.temperature == 0)] if found else runs.iloc[:0]
        if found and tree_of(found[0], env) == "chain1" and len(mine):
            out[draft] = float(draft_ms_per_step(mine).median())
    return out


def first_look(results: Path, drafts: list[str], versus: str) -> dict[str, tuple[str, str]]:
    """Each draft's seed 0 alone on its fitted tree in the use page's float32 run, in words: its speed over
    plain decoding, and over `versus`'s draft on the same prompts ("" where the run lacks it). Empty without
    a run."""
    run = _read(results / "use" / "float32")
    if run is None:
        return {}
    rows, paired, _ = run
    rival, out = fitted(rows, versus), {}
    for draft in drafts:
        if (found := fitted(rows, draft)) is not None:
            over = _paired(paired, found[0], rival[0]) if rival else None
            out[draft] = (_speed(found[1]), "" if over is None else _ratio(over))
    return out


def _paired(paired: pd.DataFrame, method: str, versus: str) -> pd.Series | None:
    """`method`'s speed over `versus` on the same prompts (greedy), None where the run has no such pair."""
    r = paired[(paired.method == method) & (paired.versus == versus) & (paired.temperature == 0)]
    return None if r.empty else r.iloc[0]


def _ratio(r: pd.Series) -> str:
    """A paired speed ratio, its interval's side of 1 kept (what "faster" or "slower" reads)."""
    return f"{r.speed_ratio:.2f}x {bracket(r.speed_ratio_lo, r.speed_ratio_hi, 2)}"


def box(results: Path, study_tau: pd.Series | None = None, main_budget: int = 600, *, brief: bool = False) -> str:
    """The "Should I use Clover-2?" admonition, from `results/use/` (and, for the GPU prediction, the study's
    tau at the paper's tree and its `main_budget`: `results/study/spread.csv` unless `study_tau` is given).
    `brief`: its answer alone, the rest on the use page (the front page's)."""
    run = _read(results / "use" / "float32")
    head = ["```{admonition} Should I use Clover-2?", ":class: tip", ""]
    if run is None:
        return "\n".join(head + ["Not measured yet: `results/use/` holds no run.", "```"]) + "\n"
    rows, paired, env = run
    greedy = rows.drop(index="ar")
    exact_rows = greedy[greedy.identical_frac == 1]
    best = (exact_rows if len(exact_rows) else greedy).speedup.idxmax()
    exact = rows.identical_frac.min() == 1

    def of(draft: str, copy: str = "") -> tuple[str, pd.Series] | None:
        return fitted(greedy, draft, copy)

    alone = [(DRAFTS[d], *x) for d in DRAFTS if (x := of(d))]
    name = describe(best, env)
    # the exact methods the run could not tell from the fastest: their paired interval over it holds 1
    ties = [m for m in (exact_rows if len(exact_rows) else greedy).sort_values("speedup", ascending=False).index
            if m != best and (r := _paired(paired, m, best)) is not None and r.speed_ratio_hi >= 1]
    lines = [f"**On a CPU, measured: the fastest exact way to decode with clover2 here was {name}, "
             f"{_speed(greedy.loc[best])} "
             f"as fast as plain decoding:** `clover2 generate {command(best, env)}`." if greedy.loc[best].speedup_lo > 1
             else f"**On a CPU, measured: nothing decoded faster than plain decoding beyond its interval here** (the "
                  f"fastest, {name}, {_speed(greedy.loc[best])}): use plain decoding."]
    if ties and greedy.loc[best].speedup_lo > 1:  # the brief names them, the use page gives each its interval
        lo, hi = (f"{v:.2f}" for v in (greedy.loc[ties].speedup.min(), greedy.loc[ties].speedup.max()))
        lines[0] += (" Not told apart from it on the same prompts (paired, 95%): " + (
            ", ".join(short(m) for m in ties) + f" ({lo if lo == hi else f'{lo}-{hi}'}x)" if brief
            else "; ".join(f"{short(m)} {_speed(greedy.loc[m])}" for m in ties)) + ".")
    lines.append(
        "- **A draft alone**, on the tree fitted to this CPU (tokens per step: the table below): "
        + "; ".join(f"{name} {_speed(r)}" for name, _, r in alone)
        + ". **Copying from the prompt**, no draft: "
        + "; ".join(f"{COPIES[m]} {_speed(greedy.loc[m])}" for m in COPIES if m in greedy.index) + ".")
    for copy, words in COPIES.items():  # each way of copying with the drafts behind it, over it alone
        behind = [(DRAFTS[d], *x) for d in DRAFTS if (x := of(d, copy))]
        if behind and copy in greedy.index:
            lines.append(f"- **A draft behind {words}** (the draft proposes where there is nothing to copy; each "
                         f"speed, then its ratio to {words} alone): "
                         + "; ".join(f"{name} {_speed(r)}" + ("" if (over := _paired(paired, m, copy)) is None
                                                              else f", {_ratio(over)}")
                                     for name, m, r in behind) + ".")
    eagle = {copy: x for copy in ("", *COPIES) if (x := of("eagle1", copy))}
    pairs = [(d, copy, r) for d in ("clover2-official", "clover2") for copy in eagle
             if (x := of(d, copy)) and (r := _paired(paired, x[0], eagle[copy][0])) is not None]
    if pairs and brief:  # each Clover-2 once: in how many of its settings it was told apart from EAGLE-1, which way
        said = []
        for d in dict.fromkeys(d for d, _, _ in pairs):
            ratios = [r for e, _, r in pairs if e == d]
            apart = [(how, ones) for how, ones in (("faster", [r for r in ratios if r.speed_ratio_lo > 1]),
                                                   ("slower", [r for r in ratios if r.speed_ratio_hi < 1])) if ones]
            said.append(f"{BRIEF[d]} " + (", ".join(f"{how} in {len(ones)} of {len(ratios)} ({_span(ones)})"
                                                     for how, ones in apart) if apart
                                          else f"told apart in none of {len(ratios)}"))
        lines[0] += (" Against EAGLE-1 on the same prompts (alone and behind each way of copying, each on its "
                     "fitted tree): " + "; ".join(said) + ".")
    if pairs:
        lines.append("- **Clover-2 over EAGLE-1**, each on its fitted tree, paired by prompt: "
                     + "; ".join(f"{BRIEF[d]}{' behind ' + COPIES[copy] if copy else ''} {_ratio(r)}"
                                 for d, copy, r in pairs) + " (above 1: Clover-2 faster).")
    other = engines.brief(results)  # another engine's plain decoding may beat every method of clover2's
    if brief:
        return "\n".join(head + [lines[0], *(["", other] if other else []), "", "Each draft alone and behind a "
                                  "cache, Clover-2 against EAGLE-1, bfloat16 and a GPU's prediction: {doc}`use`. "
                                  "Serving engines run EAGLE-1 and EAGLE-3, not Clover-2; llama.cpp and OpenVINO "
                                  "GenAI beside clover2: {doc}`serving`.", "```"]) + "\n"
    if other:
        lines.insert(1, f"- {other}")
    lines.append(f"- **Exact**: {'every' if exact else 'not every'} output equalled plain decoding's, token for token "
                 f"(float32, the command line's default). On {env['cpu_name']}, {env['torch_threads']} threads, "
                 f"{int(rows.n_prompts.max())} held-out prompts; one training seed per draft (seed 0 of the study's "
                 f"arms, `{PUBLISHED}`). The run and every method's command: {{doc}}`use`.")
    bf16 = _read(results / "use" / "bfloat16")
    if bf16 is not None:
        brows, _, benv = bf16
        others = brows.drop(index="ar")
        fast = others.speedup.idxmax()
        lines.append(f"- **In bfloat16** (`--dtype bfloat16`, a second run): plain decoding "
                     f"{brows.loc['ar'].tokens_per_s:.1f} tokens/s (median) against float32's "
                     f"{rows.loc['ar'].tokens_per_s:.1f}; the fastest method, {short(fast)}, "
                     f"{_speed(others.loc[fast])} bf16 plain decoding's speed (float32's fastest: "
                     f"{_speed(greedy.loc[best])}); but only {others.identical_frac.min():.0%}-"
                     f"{others.identical_frac.max():.0%} of the speculative outputs equalled bf16 plain "
                     "decoding's (verifying several tokens at once rounds differently): take it where an answer of "
                     "the model's quality will do, float32 where the output must be plain greedy decoding's.")
    tau = study_tau if study_tau is not None else _study_tau(results, main_budget)
    if tau is not None and len(tau):
        lines.append("- **On a GPU** (a prediction, not measured here): the paper's 25-node tree costs about one "
                     "plain step to verify there, so a draft's tokens per step on it bound its speedup: "
                     + ", ".join(f"{DRAFTS[a]} {t:.2f}" for a, t in tau.items()) + " (the study's seeds), less the "
                     "draft's own time. The paper measured 2.1-3.1x with 7-8B targets, whose drafts accept more.")
    return "\n".join(head + lines + ["```"]) + "\n"


def _study_tau(results: Path, budget: int) -> pd.Series | None:
    """The study's mean tau over seeds at the paper's 25-node tree and its main `budget`, per published arm
    (an arm whose seeds at its chosen rate are not replayed yet has no row)."""
    path = results / "study" / "spread.csv"
    if not path.exists():
        return None
    spread = pd.read_csv(path)
    main = spread[(spread.tree == "eagle25") & (spread.share == 1) & (spread.budget == budget)].set_index("arm")
    return main.tau.reindex([a for a in DRAFTS if a in main.index])
