"""Seaborn figures for the book, each from a results table, labelled with units and hardware."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns

sns.set_theme(context="notebook", style="whitegrid")


def hardware_label(env: dict) -> str:
    """'SmolLM2-135M on <CPU>, N threads, float32' for figure titles."""
    where = env.get("gpu") or f"{env.get('cpu', '?')}, {env.get('torch_threads', '?')} threads"
    return f"{env.get('target', '?')} on {where}, {env.get('dtype', '?')}"


def training_curves(metrics: pd.DataFrame, *, value: str = "top1", title: str = ""):
    """Held-out per-head accuracy (or loss) against training step, one panel per variant."""
    g = sns.relplot(data=metrics, x="step", y=value, hue="head", col="variant", kind="line", marker="o",
                    col_wrap=min(4, metrics.variant.nunique()), height=3, aspect=1.2, palette="viridis")
    g.set_axis_labels("training step", {"top1": "held-out top-1 accuracy", "top5": "held-out top-5 accuracy",
                                        "loss": "held-out loss"}.get(value, value))
    if title:
        g.figure.suptitle(title, y=1.03)
    return g


def speedup_bars(table: pd.DataFrame, *, title: str = ""):
    """Median speedup over plain decoding per method and task, with 95% bootstrap intervals."""
    rows = table[table.method != "ar"].copy()
    rows["label"] = rows.method + rows.temperature.map(lambda t: "" if t == 0 else f" (T={t:g})")
    tasks = list(dict.fromkeys(rows.task))
    labels = list(dict.fromkeys(rows.label))
    fig, ax = plt.subplots(figsize=(max(8, 0.5 * len(labels) * len(tasks) / 3), 4.5))
    width = 0.8 / len(labels)
    palette = sns.color_palette("tab20", len(labels))
    for k, label in enumerate(labels):
        r = rows[rows.label == label].set_index("task").reindex(tasks)
        x = [i + (k - len(labels) / 2 + 0.5) * width for i in range(len(tasks))]
        ax.bar(x, r.speedup, width, color=palette[k], label=label,
               yerr=[r.speedup - r.speedup_lo, r.speedup_hi - r.speedup], error_kw={"lw": 0.8})
    ax.axhline(1, color="black", lw=1, ls="--")
    ax.set_xticks(range(len(tasks)), tasks)
    ax.set_ylabel("speedup over plain decoding (x, median, 95% CI)")
    ax.legend(fontsize=7, ncol=2, bbox_to_anchor=(1.01, 1), loc="upper left")
    ax.set_title(title)
    fig.tight_layout()
    return fig


def tau_bars(table: pd.DataFrame, *, hue: str = "method", title: str = ""):
    """Tokens per target forward (tau, bonus token included) per task."""
    g = sns.catplot(data=table, x="task", y="tau", hue=hue, kind="bar", height=4, aspect=2.2, palette="tab10")
    g.set_axis_labels("task", "tau: tokens per target forward")
    if title:
        g.figure.suptitle(title, y=1.03)
    return g


def cost_curve_plot(curve: pd.DataFrame, *, title: str = ""):
    """Time of one target forward of N tokens relative to one token."""
    fig, ax = plt.subplots(figsize=(6, 4))
    sns.lineplot(data=curve, x="n_tokens", y="relative", marker="o", ax=ax)
    ax.set_xlabel("tokens verified in one forward (tree nodes + root)")
    ax.set_ylabel("time relative to a 1-token step")
    ax.set_title(title)
    fig.tight_layout()
    return fig


def fit_heatmap(fit: pd.DataFrame, *, title: str = ""):
    """Predicted speedup of the dynamic tree per node budget and depth (from the fitted model)."""
    pivot = fit.pivot_table(index="depth", columns="budget", values="predicted_speedup")
    fig, ax = plt.subplots(figsize=(10, 3))
    sns.heatmap(pivot, cmap="viridis", ax=ax, cbar_kws={"label": "predicted speedup (x)"})
    ax.set_xlabel("node budget")
    ax.set_ylabel("depth")
    ax.set_title(title)
    fig.tight_layout()
    return fig
