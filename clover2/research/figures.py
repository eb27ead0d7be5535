"""Seaborn figures for the book, each from a results table, labelled with units and hardware.

Every figure is drawn at most as wide as the book's text column (`COLUMN_IN`), and its PNG is at
most as wide as a notebook output there (`OUTPUT_IN`; `png` narrows a figure whose titles or
legends reach beyond it), so that it is shown at its own size and its text is at least `MIN_PT`
points there. Its PNG, in a
notebook's output (the formatter registered below) or saved with `save`, records the size of its
smallest text and its resolution (`png`), which the book's browser check reads to fail a figure a
reader could not read at the page's width.
"""

from __future__ import annotations

import io
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure
from matplotlib.text import Text
from matplotlib.ticker import EngFormatter, LogLocator, NullFormatter

from clover2.files import atomic_path
from clover2.research.report import TASK_LABELS, machine_name

COLUMN_IN = 7.5  # the book's text column at a 1280-px window: ~720 CSS px, 96 per inch
OUTPUT_IN = 7.1  # a notebook output inside that column (its padding takes ~40 px): the widest PNG shown at full size
MIN_PT = 9  # the smallest text a figure may have at that width
DPI = 120
FONT_KEY = "clover2 smallest text pt"  # the PNG text chunk the browser check reads
OVERLAP_KEY = "clover2 overlapping text"  # and the texts drawn over one another ("" when none)

sns.set_theme(context="notebook", style="whitegrid", rc={"figure.dpi": DPI, "savefig.dpi": DPI})


def smallest_text_pt(fig) -> float:
    """The font size of the smallest visible, non-empty text of a figure (or seaborn grid), in points."""
    fig = getattr(fig, "figure", fig)
    fig.canvas.draw()
    sizes = [t.get_fontsize() for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()]
    return float(min(sizes)) if sizes else float("inf")


def overlapping_text(fig) -> list[str]:
    """Pairs of visible, non-empty texts of a figure whose drawn boxes overlap (a label printed over a
    title, colliding tick labels), as "a | b". A text turned by other than a right angle is compared by
    its upright bounding box, which may collide where its letters do not: turn labels by 90 degrees."""
    fig = getattr(fig, "figure", fig)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    undrawn = set()  # labels of ticks outside their axis' view: kept by matplotlib, never drawn
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            lo, hi = sorted(axis.get_view_interval())
            pad = 1e-9 * max(1.0, abs(hi - lo))
            for tick in axis.get_major_ticks() + axis.get_minor_ticks():
                if not lo - pad <= tick.get_loc() <= hi + pad:
                    undrawn |= {id(tick.label1), id(tick.label2)}
    texts = [(t.get_text().strip(), t.get_window_extent(renderer)) for t in fig.findobj(Text)
             if t.get_visible() and t.get_text().strip() and id(t) not in undrawn]
    return [f"{a} | {b}" for i, (a, box_a) in enumerate(texts) for b, box_b in texts[i + 1:]
            if box_a.overlaps(box_b) and box_a.width * box_a.height > 0 and box_b.width * box_b.height > 0]


def fit_width(fig: Figure, width: float = OUTPUT_IN) -> None:
    """Narrow `fig` until what it draws (titles and legends outside the axes included) is at most
    `width` inches wide with the PNG's margins, so that the page shows it at its own size and its
    text keeps its points."""
    margins = 2 * plt.rcParams["savefig.pad_inches"]
    for _ in range(4):
        drawn = fig.get_tightbbox(fig.canvas.get_renderer()).width + margins
        if drawn <= width + 0.01:
            return
        w, h = fig.get_size_inches()
        fig.set_size_inches(max(w - (drawn - width), 0.5 * w), h)


def png(fig) -> bytes:
    """A figure (or seaborn grid) as the book shows it: a PNG at `DPI`, cropped to what is drawn and
    at most `OUTPUT_IN` wide (`fit_width`), recording its smallest text size (`FONT_KEY`) and any
    texts drawn over one another (`OVERLAP_KEY`)."""
    fig = getattr(fig, "figure", fig)
    fit_width(fig)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI, bbox_inches="tight",
                metadata={FONT_KEY: f"{smallest_text_pt(fig):.2f}", OVERLAP_KEY: "; ".join(overlapping_text(fig)),
                          "Software": "clover2"})
    return buffer.getvalue()


def save(fig, path: str | Path) -> None:
    """Write `png(fig)` to `path`, atomically (nothing returned, so a notebook cell ending with it
    prints nothing)."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(png(fig))


def _show_as_the_book_does() -> None:
    """In a notebook, figures are shown as `png` makes them (the text size recorded)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is None:
        return
    if "inline" in plt.get_backend():
        # The inline backend registers its own PNG formatter when it is loaded, which pyplot does
        # lazily, at the first figure: load it now, so that ours comes after it and stays.
        import matplotlib_inline.backend_inline  # noqa: F401
    shell.display_formatter.formatters["image/png"].for_type(Figure, png)


_show_as_the_book_does()


def hardware_label(env: dict) -> str:
    """'SmolLM2-135M on <CPU's short name>, N threads, float32' for figure titles."""
    where = env.get("gpu") or f"{machine_name(env) or '?'}, {env.get('torch_threads', '?')} threads"
    return f"{env.get('target', '?')} on {where}, {env.get('dtype', '?')}"


def train_vs_heldout(log: pd.DataFrame, *, value: str = "top1", title: str = ""):
    """Per variant (panel) and head (colour): accuracy on the training batch (dashed) and on the
    held-out set (solid) against training step. A gap between the two is memorisation; curves still
    rising at the end are an unfinished optimisation."""
    g = sns.relplot(data=log, x="step", y=value, hue="head", style="split", style_order=["held-out", "train"],
                    col="variant", kind="line", marker="o", markersize=4, col_wrap=min(3, log.variant.nunique()),
                    height=2.3, aspect=1.0, palette="viridis", facet_kws={"sharey": True})
    g.set_axis_labels("training step", {"top1": "top-1 accuracy", "top5": "top-5 accuracy", "loss": "loss"}[value])
    g.set_titles("{col_name}")
    if title:
        g.figure.suptitle(title, y=1.03)
    return g


def speedup_dots(table: pd.DataFrame, *, title: str = ""):
    """Speedup over plain decoding (`report.SPEEDUP`: the geometric mean of per-prompt ratios with its
    95% bootstrap interval): every method over all prompts (left, ordered by speedup; `/1`:
    temperature 1), and per task for the trained drafts at the paper's 25-node tree, greedy (right)."""
    from clover2.research.report import SPEEDUP, method_label

    rows = table[table.method != "ar"]
    overall = rows[rows.task == "overall"].sort_values("speedup")
    labels = [method_label(m, t) for m, t in zip(overall.method, overall.temperature)]
    tasks = [t for t in TASK_LABELS if t in set(rows.task) and t != "overall"]
    greedy = rows[(rows.temperature == 0) & (rows.task != "overall")]
    drafts = [m for m in ("clover2@eagle25", "eagle1@eagle25", "eagle3@eagle25", "medusa@eagle25")
              if m in set(greedy.method)]
    fig, (left, right) = plt.subplots(1, 2, figsize=(COLUMN_IN, max(3.0, 0.26 * len(overall) + 1.4)),
                                      gridspec_kw={"width_ratios": [1.15, 1]})
    left.errorbar(overall.speedup, range(len(overall)), fmt="o", ms=4, capsize=2, color="tab:blue",
                  xerr=[overall.speedup - overall.speedup_lo, overall.speedup_hi - overall.speedup])
    left.set_yticks(range(len(overall)), labels, fontsize=MIN_PT)
    left.set_xlabel("all prompts")
    for k, method in enumerate(drafts):
        r = greedy[greedy.method == method].set_index("task").reindex(tasks)
        y = np.arange(len(tasks)) + (k - (len(drafts) - 1) / 2) * 0.8 / max(1, len(drafts))
        right.errorbar(r.speedup, y, fmt="o", ms=4, capsize=2, label=method.split("@")[0],
                       xerr=[r.speedup - r.speedup_lo, r.speedup_hi - r.speedup])
    right.set_yticks(range(len(tasks)), [TASK_LABELS[t] for t in tasks])
    right.set_xlabel("per task, 25-node tree")
    if drafts:
        right.legend(fontsize=MIN_PT, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=len(drafts), frameon=False,
                     handletextpad=0.2, columnspacing=0.8)
    for ax in (left, right):
        ax.axvline(1, color="black", lw=1, ls="--")
    fig.supxlabel(SPEEDUP, fontsize=MIN_PT + 1)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def tau_dots(overall: pd.DataFrame, *, label: str = "variant", title: str = ""):
    """Tokens per target forward (tau, bonus token included) over all prompts, one row per `label`
    (ordered by tau), with its 95% bootstrap interval over prompts (`tau_lo`, `tau_hi`)."""
    rows = overall.sort_values("tau")
    fig, ax = plt.subplots(figsize=(6.5, max(2.6, 0.3 * len(rows) + 1.0)))
    ax.errorbar(rows.tau, range(len(rows)), xerr=[rows.tau - rows.tau_lo, rows.tau_hi - rows.tau],
                fmt="o", ms=4, capsize=2, color="tab:blue")
    ax.set_yticks(range(len(rows)), rows[label])
    ax.set_xlabel("tau: tokens per target forward (95% interval over prompts)")
    if title:
        ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return fig


def tau_beside_paper(tau: pd.DataFrame):
    """tau per task of Clover-2 and EAGLE-1, one panel per source (the paper's targets and this run;
    `tau`: from `clover2.research.paper.tau_beside`), points rather than bars: two per task."""
    g = sns.catplot(data=tau.assign(task=tau.task.map(TASK_LABELS).fillna(tau.task)), x="task", y="tau",
                    hue="method", col="source", kind="point", dodge=0.3, linestyle="none", markers=["o", "s"],
                    height=2.4, aspect=1.0, col_wrap=3, palette="tab10")
    g.set_axis_labels("", "tau (tokens per\ntarget forward)")
    g.set_titles("{col_name}", size=MIN_PT + 1)
    g.tick_params(axis="x", labelrotation=90)  # upright: rotated 45 degrees, neighbouring labels' boxes collide
    return g


def cost_curve_plot(curve: pd.DataFrame, *, title: str = ""):
    """Time of one target forward of N tokens relative to one token (one line per engine)."""
    fig, ax = plt.subplots(figsize=(6, 3.6))
    curve = curve.assign(engine=curve.get("engine", "eager"))  # curves before engines existed: eager
    sns.lineplot(data=curve, x="n_tokens", y="relative", marker="o",
                 hue="engine" if curve.engine.nunique() > 1 else None, ax=ax)
    ax.set_xlabel("tokens verified in one forward (tree nodes + root)")
    ax.set_ylabel("time relative to a 1-token step")
    ax.set_title(title)
    fig.tight_layout()
    return fig


def learning_curves(taus: pd.DataFrame, fits: pd.DataFrame | None = None, *, title: str = ""):
    """Greedy tau at each snapshot of each draft's long run, against answer tokens seen (left) and
    training seconds (right), both on log axes; with `fits` (from `curves.extrapolate`), each
    draft's fitted line tau - 1 = a + b ln(tokens) on the left, dashed."""
    fig, axes = plt.subplots(1, 2, figsize=(COLUMN_IN, 3.4), sharey=True)
    palette = dict(zip(taus.draft.unique(), sns.color_palette("tab10")))
    for ax, axis, label in ((axes[0], "seen_tokens", "answer tokens seen"),
                            (axes[1], "train_seconds", "training seconds")):
        sns.lineplot(data=taus, x=axis, y="tau", hue="draft", palette=palette, marker="o", ax=ax, legend=ax is axes[0])
        ax.set_xscale("log")
        ax.xaxis.set_major_locator(LogLocator(subs=(1, 2, 5)))  # 100k, 200k, 500k, 1M: few labels, none overlapping
        ax.xaxis.set_major_formatter(EngFormatter(sep=""))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel(label + " (log scale)")
    for _, f in (fits.iterrows() if fits is not None else ()):
        x0 = taus[taus.draft == f.draft].seen_tokens.min()
        xs = np.geomspace(x0, f.last_seen_tokens, 20)
        slope = f.slope_per_decade / np.log(10)
        axes[0].plot(xs, f.fit_at_last + slope * np.log(xs / f.last_seen_tokens), ls="--", lw=1, color=palette[f.draft])
    axes[0].set_ylabel("tau (tokens per step)")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


MIN_CONDITIONING = 30  # steps a per-depth acceptance rate must rest on to be drawn


def depth_acceptance_plot(depths: pd.DataFrame, *, title: str = ""):
    """Decode-time acceptance per depth of the tree, one line per draft (`depths`: from
    `clover2.measure.acceptance.depth_acceptance`): left, the rate at depth d among the steps that
    accepted d - 1 draft tokens, where at least `MIN_CONDITIONING` did; right, the share of all
    steps reaching depth d (tau - 1 is their sum)."""
    fig, axes = plt.subplots(1, 2, figsize=(COLUMN_IN, 3.2))
    counted = depths[depths.steps >= MIN_CONDITIONING]  # a rate over a handful of steps is noise
    for ax, data, value, label in ((axes[0], counted, "rate", f"accepted at depth d, given d - 1\n"
                                    f"(where {MIN_CONDITIONING}+ steps reached d - 1)"),
                                   (axes[1], depths, "reached", "steps reaching depth d")):
        sns.lineplot(data=data, x="depth", y=value, hue="draft", style="draft", markers=True, dashes=False,
                     ax=ax, legend=ax is axes[1])
        ax.set_xlabel("depth d (draft tokens)")
        ax.set_ylabel(label)
        ax.set_ylim(0, None)
        ax.set_xticks(sorted(depths.depth.unique()))
    sns.move_legend(axes[1], "upper right", title=None, fontsize=MIN_PT)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def tree_pays_plot(trees: pd.DataFrame, *, title: str = ""):
    """Achieved against required tau per tree size, one colour per draft (`trees`: from
    `clover2.research.report.tree_pays`). Solid: the tau the calibration measured with the best
    dynamic tree of that many nodes; dashed: the tau that tree needs to break even with plain
    decoding on this machine (its verification plus the draft's time, in 1-token steps). A tree pays
    where the solid line runs above its dashed one."""
    fig, ax = plt.subplots(figsize=(7, 3.6))
    palette = dict(zip(trees.draft.unique(), sns.color_palette("tab10")))
    for draft, g in trees.groupby("draft", sort=False):
        ax.plot(g.budget, g.tau, marker="o", ms=3, color=palette[draft], label=f"{draft}: achieved")
        ax.plot(g.budget, g.tau_required, ls="--", color=palette[draft], label=f"{draft}: needed")
    ax.set_xlabel("draft tokens in the tree (node budget)")
    ax.set_ylabel("tau (tokens per step)")
    ax.legend(fontsize=9, ncol=2)
    if title:
        ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return fig


def _legend_beside(fig, ax, title: str):
    """The study figures' finish: the legend right of the axes, the title if any, the layout tightened."""
    ax.legend(fontsize=9, loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False)
    if title:
        ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return fig


def _comparison_labels(v: pd.DataFrame) -> list[str]:
    """A comparison as a row of the forest plot: the primary ones as the protocol numbers them (P1, P2, ...),
    a comparison on another tree than the 25-node one with that tree's size."""
    number = {c: i + 1 for i, c in enumerate(v[v.family == "primary"].comparison)}
    labels = []
    for family, comparison, tree in zip(v.family, v.comparison, v.tree):
        label = f"P{number[comparison]}: {comparison}" if family == "primary" else comparison
        if tree != "eagle25":
            label += f", {tree.split(':')[1]}-node tree" if tree.startswith("dynamic:") else f", {tree}"
        labels.append(label)
    return labels


def forest(verdicts: pd.DataFrame, *, band: tuple[float, float], margin: float,
           excess_band: tuple[float, float], apart: float, title: str = ""):
    """Every comparison of the designed study against its reference (`verdicts.csv`, the budget family's
    ratios of ratios apart), one row each, the primary ones first: its ratio and interval as a dot and a
    bar, in tau (left: the paper's claimed gain `band` as the protocol reads it, and the equivalence
    margin 1 ± `margin`, shaded) and in the paper's own convention, tau - 1 (right: the range of the
    paper's published per-task ratios, `excess_band`, shaded). The line at 1 is no difference. Comparisons
    whose whole tau interval lies more than `apart` from 1 are drawn in a row of panels of their own, below,
    so that they do not squeeze the others' scale."""
    v = verdicts[~verdicts.comparison.str.contains(" over ")]
    v = pd.concat([v[v.family == "primary"], v[v.family != "primary"]], ignore_index=True)
    v = v.assign(label=_comparison_labels(v))
    far = (v.lo > 1 + apart) | (v.hi < 1 - apart)
    groups = [g for g in (v[~far], v[far]) if len(g)]
    colors = dict(zip(v.family.unique(), sns.color_palette("tab10")))
    fig, axes = plt.subplots(len(groups), 2, sharey="row", squeeze=False,
                             figsize=(COLUMN_IN, 0.36 * len(v) + 1.2 * len(groups) + 1.2),
                             gridspec_kw={"height_ratios": [len(g) + 1 for g in groups]})
    handles = {}
    for row, g in enumerate(groups):
        left, right = axes[row]
        y = np.arange(len(g))[::-1]
        if row == 0:  # the shading and the line at 1 where the comparisons lie near it
            handles[f"equivalence margin (±{margin:.0%})"] = left.axvspan(1 - margin, 1 + margin, color="0.85",
                                                                          alpha=0.6, lw=0)
            handles[f"the paper's claim in tau ({band[0] - 1:+.0%} to {band[1] - 1:+.0%})"] = left.axvspan(
                *band, color="tab:green", alpha=0.25, lw=0)
            handles[f"the paper's per-task ratios in tau - 1 ({excess_band[0] - 1:+.1%} to "
                    f"{excess_band[1] - 1:+.1%})"] = right.axvspan(*excess_band, color="tab:purple", alpha=0.2, lw=0)
            for ax in (left, right):
                ax.axvline(1, color="0.3", lw=1)
        for ax, (value, lo, hi) in ((left, ("ratio", "lo", "hi")),
                                    (right, ("excess_ratio", "excess_lo", "excess_hi"))):
            for family, rows in g.groupby("family", sort=False):
                at = y[[g.index.get_loc(i) for i in rows.index]]
                handles[family] = ax.errorbar(rows[value], at, xerr=[rows[value] - rows[lo], rows[hi] - rows[value]],
                                              fmt="o", ms=5, color=colors[family], capsize=3)
        left.set_yticks(y, g.label)
        left.set_ylim(-0.6, len(g) - 0.4)
    axes[-1][0].set_xlabel("tau ratio")
    axes[-1][1].set_xlabel("ratio of tau - 1 (the paper's)")
    fig.legend(list(handles.values()), list(handles), loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=2,
               fontsize=MIN_PT, frameon=False)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def per_task_ratios(per_task: pd.DataFrame, *, paper_targets: pd.DataFrame | None = None, title: str = ""):
    """The primary comparisons' tau ratio per Spec-Bench task (dots with 95% intervals over that task's
    prompts and the seeds, 25-node tree) beside the paper's Clover-2 / EAGLE-1 ratio for the task
    (`per_task.csv`'s `paper`, the mean of its two targets: crosses) and, where given, each of the paper's
    targets' own ratio (`paper_targets`: columns source, task, tau_ratio, from
    `paper.clover2_over_eagle1`: small grey marks)."""
    p = per_task[(per_task.family == "primary") & (per_task.tree == "eagle25")]
    tasks = list(dict.fromkeys(t for t in TASK_LABELS if t in set(p.task))) or sorted(p.task.unique())
    fig, ax = plt.subplots(figsize=(COLUMN_IN, 3.6))
    comparisons = list(p.comparison.unique())
    width = 0.7 / max(1, len(comparisons) + 1)
    offset = lambda i: (i - len(comparisons) / 2) * width  # noqa: E731 (the paper's crosses in the last slot)
    for i, (comparison, color) in enumerate(zip(comparisons, sns.color_palette("tab10"))):
        g = p[p.comparison == comparison].set_index("task").reindex(tasks)
        ax.errorbar(np.arange(len(tasks)) + offset(i), g.ratio, yerr=[g.ratio - g.lo, g.hi - g.ratio], fmt="o",
                    color=color, capsize=3, label=f"P{i + 1}: {comparison}")
    x_paper = np.arange(len(tasks)) + offset(len(comparisons))
    if paper_targets is not None and not paper_targets.empty:
        for (source, g), marker in zip(paper_targets.groupby("source", sort=False), ("^", "v", "<", ">")):
            g = g.set_index("task").reindex(tasks)
            ax.scatter(x_paper, g.tau_ratio, marker=marker, s=22, color="0.55", zorder=3,
                       label=f"the paper, {source}")
    paper = p.drop_duplicates("task").set_index("task").reindex(tasks).paper
    ax.scatter(x_paper, paper, marker="x", s=60, color="black", zorder=4,
               label="the paper, mean of its targets")
    ax.axhline(1, color="0.3", lw=1)
    ax.set_xticks(np.arange(len(tasks)), [TASK_LABELS.get(t, t) for t in tasks])
    ax.tick_params(axis="x", labelsize=MIN_PT + 1)
    ax.set_ylabel("tau ratio (Clover-2 / EAGLE-1)")
    h, labels = ax.get_legend_handles_labels()  # the study's comparisons first, then the paper's marks
    first = [i for i, label in enumerate(labels) if not label.startswith("the paper")]
    order = first + [i for i in range(len(labels)) if i not in first]
    ax.legend([h[i] for i in order], [labels[i] for i in order], loc="upper center", bbox_to_anchor=(0.5, -0.12),
              ncol=2, fontsize=MIN_PT, frameon=False)
    if title:
        ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return fig


def study_curve(curve: pd.DataFrame, *, arms: list[str], title: str = ""):
    """The designed study's learning curve: seed 0's tau (25-node tree) at every annealed budget against
    the answer tokens it saw (log scale), and at the budgets with seeds, their mean and standard deviation;
    each arm at its curve's one rate (`curve.lr`), named in the legend."""
    c = curve[curve.arm.isin(arms) & (curve.share == 1)]
    fig, ax = plt.subplots(figsize=(COLUMN_IN, 3.2))
    for arm, color in zip(arms, sns.color_palette("tab10")):
        g = c[c.arm == arm].sort_values("tokens")
        if g.empty:
            continue
        ax.plot(g.tokens, g.tau, "o-", color=color, label=f"{arm} (lr {g.lr.iloc[0]:.2g}), seed 0")
        seeded = g[g.seeds > 1]
        ax.errorbar(seeded.tokens, seeded.seeds_tau, yerr=seeded.seed_sd, fmt="s", mfc="none", color=color,
                    capsize=3, label=f"{arm}, mean of {int(seeded.seeds.max())} seeds" if len(seeded) else None)
    ax.set_xscale("log")
    ax.xaxis.set_major_locator(LogLocator(subs=(1, 2, 5)))  # 200k, 500k, 1M: few labels, none overlapping
    ax.xaxis.set_major_formatter(EngFormatter(sep=""))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("answer tokens seen (log scale)")
    ax.set_ylabel("tau, 25-node tree")
    return _legend_beside(fig, ax, title)
