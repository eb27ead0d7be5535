"""Seaborn figures for the book, each from a results table, labelled with units and hardware."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.ticker import EngFormatter, LogLocator, NullFormatter

from clover2.research.report import TASK_LABELS

sns.set_theme(context="notebook", style="whitegrid")


def hardware_label(env: dict) -> str:
    """'SmolLM2-135M on <CPU>, N threads, float32' for figure titles."""
    where = env.get("gpu") or f"{env.get('cpu', '?')}, {env.get('torch_threads', '?')} threads"
    return f"{env.get('target', '?')} on {where}, {env.get('dtype', '?')}"


def train_vs_heldout(log: pd.DataFrame, *, value: str = "top1", title: str = ""):
    """Per variant (panel) and head (colour): accuracy on the training batch (dashed) and on the
    held-out set (solid) against training step. A gap between the two is memorisation; curves still
    rising at the end are an unfinished optimisation."""
    g = sns.relplot(data=log, x="step", y=value, hue="head", style="split", style_order=["held-out", "train"],
                    col="variant", kind="line", marker="o", markersize=4, col_wrap=min(3, log.variant.nunique()),
                    height=3.2, aspect=1.15, palette="viridis", facet_kws={"sharey": True})
    g.set_axis_labels("training step", {"top1": "top-1 accuracy", "top5": "top-5 accuracy", "loss": "loss"}[value])
    g.set_titles("{col_name}")
    if title:
        g.figure.suptitle(title, y=1.03)
    return g


def speedup_bars(table: pd.DataFrame, *, title: str = ""):
    """Median speedup over plain decoding per method and task, with 95% bootstrap intervals; one
    panel per temperature (greedy and sampled decoding are not compared with each other)."""
    rows = table[table.method != "ar"]
    temps = sorted(rows.temperature.unique())
    tasks = [t for t in TASK_LABELS if t in set(rows.task)]
    fig, axes = plt.subplots(len(temps), 1, figsize=(9, 3.6 * len(temps)), squeeze=False)
    for ax, temp in zip(axes[:, 0], temps):
        part = rows[rows.temperature == temp]
        labels = list(dict.fromkeys(part.method))
        width = 0.84 / len(labels)
        palette = sns.color_palette("tab20" if len(labels) > 10 else "tab10", len(labels))
        for k, label in enumerate(labels):
            r = part[part.method == label].set_index("task").reindex(tasks)
            x = [i + (k - len(labels) / 2 + 0.5) * width for i in range(len(tasks))]
            ax.bar(x, r.speedup, width, color=palette[k], label=label,
                   yerr=[r.speedup - r.speedup_lo, r.speedup_hi - r.speedup], error_kw={"lw": 0.7})
        ax.axhline(1, color="black", lw=1, ls="--")
        ax.set_xticks(range(len(tasks)), [TASK_LABELS[t] for t in tasks])
        ax.set_ylabel("speedup (x)")
        ax.set_title(f"T = {temp:g}" + (" (greedy)" if temp == 0 else " (sampling)"), fontsize=10, loc="left")
        ax.legend(fontsize=8, ncol=1, bbox_to_anchor=(1.01, 1), loc="upper left", frameon=False)
    axes[-1, 0].set_xlabel("task; bars: median speedup over plain decoding, whiskers: 95% CI")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def tau_bars(table: pd.DataFrame, *, hue: str = "method", title: str = ""):
    """Tokens per target forward (tau, bonus token included) per task."""
    g = sns.catplot(data=table.assign(task=table.task.map(TASK_LABELS).fillna(table.task)), x="task", y="tau",
                    hue=hue, kind="bar", height=4, aspect=2.2, palette="tab10")
    g.set_axis_labels("task", "tau: tokens per target forward")
    g.set(ylim=(1, None))  # tau >= 1 always: the bars start at plain decoding
    if title:
        g.figure.suptitle(title, y=1.03)
    return g


def cost_curve_plot(curve: pd.DataFrame, *, title: str = ""):
    """Time of one target forward of N tokens relative to one token (one line per engine)."""
    fig, ax = plt.subplots(figsize=(6, 4))
    curve = curve.assign(engine=curve.get("engine", "eager"))  # curves before engines existed: eager
    sns.lineplot(data=curve, x="n_tokens", y="relative", marker="o",
                 hue="engine" if curve.engine.nunique() > 1 else None, ax=ax)
    ax.set_xlabel("tokens verified in one forward (tree nodes + root)")
    ax.set_ylabel("time relative to a 1-token step")
    ax.set_title(title)
    fig.tight_layout()
    return fig


def fit_heatmap(fit: pd.DataFrame, *, title: str = ""):
    """Predicted speedup of the dynamic tree per node budget and depth (from the fitted model),
    coloured around 1 (red: slower than plain decoding, blue: faster); the chosen cell is outlined.
    Empty cells are budgets a tree of that depth cannot reach with its top-k. For a union's fit
    (columns `<source>_budget`), the draft's trees beside the copy budgets of the best cell."""
    from matplotlib.patches import Rectangle

    best = fit.loc[fit.predicted_speedup.idxmax()]
    for column in [c for c in fit.columns if c.endswith("_budget")]:
        fit = fit[fit[column] == best[column]]
        title += f", {column.removesuffix('_budget')} {int(best[column])} nodes"
    fit = fit[fit.budget > 0]
    pivot = fit.pivot_table(index="depth", columns="budget", values="predicted_speedup")
    fig, ax = plt.subplots(figsize=(10, 3))
    sns.heatmap(pivot, cmap="RdBu", center=1.0, ax=ax, cbar_kws={"label": "predicted speedup (x)"})
    if best.predicted_speedup > 1 and best.budget > 0:  # else no draft tree is chosen
        col, row = list(pivot.columns).index(best.budget), list(pivot.index).index(best.depth)
        ax.add_patch(Rectangle((col, row), 1, 1, fill=False, ec="black", lw=2))
    ax.set_xlabel("node budget (draft tokens per step)")
    ax.set_ylabel("depth")
    ax.set_title(title + ("" if best.predicted_speedup > 1 else " (no tree beats plain decoding)"))
    fig.tight_layout()
    return fig


def learning_curves(taus: pd.DataFrame, fits: pd.DataFrame | None = None, *, title: str = ""):
    """Greedy tau at each snapshot of each draft's long run, against answer tokens seen (left) and
    training seconds (right), both on log axes; with `fits` (from `curves.extrapolate`), each
    draft's fitted line tau - 1 = a + b ln(tokens) on the left, dashed."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), sharey=True)
    palette = dict(zip(taus.draft.unique(), sns.color_palette("tab10")))
    for ax, axis, label in ((axes[0], "seen_tokens", "answer tokens seen"), (axes[1], "train_seconds", "training seconds")):
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
