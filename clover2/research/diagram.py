"""The architecture diagrams of the drafts: what is frozen and what is trained, what runs once per
decoding step and what runs once per tree node. Two figures, each as wide as the book's column
with its text at the size the book's check asks for: Clover-2 in detail, and its rivals.

    python -m clover2.research.diagram book/figures     # clover2.png and rivals.png
"""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import FancyBboxPatch  # noqa: E402

from clover2.research.figures import COLUMN_IN, MIN_PT, save  # noqa: E402

FIGURE_IN = 0.88 * COLUMN_IN  # a {figure} directive shows an image ~10% narrower than the text column

FROZEN, TRAINED, DATA = "#d9d9d9", "#9ecae1", "#ffffff"  # the target's parts, the draft's, tensors


def _box(ax, x, y, text, color, w=3.2, h=0.62, size=MIN_PT):
    ax.add_patch(FancyBboxPatch((x - w / 2, y - h / 2), w, h, boxstyle="round,pad=0.04,rounding_size=0.12",
                                fc=color, ec="#404040", lw=0.9))
    ax.text(x, y, text, ha="center", va="center", fontsize=size)
    return x, y, w, h


def _arrow(ax, start, end, text="", bend=0.0):
    ax.annotate("", xy=end, xytext=start, arrowprops=dict(arrowstyle="-|>", color="#303030", lw=0.9,
                                                          connectionstyle=f"arc3,rad={bend}"))
    if text:
        ax.text((start[0] + end[0]) / 2 + 0.1, (start[1] + end[1]) / 2, text, fontsize=MIN_PT, va="center",
                color="#303030")


def _frame(ax, x0, y0, x1, y1, label):
    ax.add_patch(FancyBboxPatch((x0, y0), x1 - x0, y1 - y0, boxstyle="round,pad=0.05,rounding_size=0.2",
                                fc="none", ec="#3182bd", lw=1.0, ls="--"))
    ax.text(x1 - 0.1, y1 + 0.1, label, fontsize=MIN_PT, color="#3182bd", va="bottom", ha="right", style="italic")


def _clover2(ax):
    """Clover-2 in detail, in two columns: once per step (left, from the target up to head 0), and
    once per tree node (right, from head 0's chosen token down to the deeper depths)."""
    _box(ax, 1.8, 0.45, "target LLM (frozen): hidden\nstates $h_{\\leq t}$ before its final norm", FROZEN,
         w=3.45, h=0.75)
    _box(ax, 6.05, 0.45, "embedding $E$ (frozen)\nof tokens $x_{\\leq t+1}$", FROZEN, w=2.9, h=0.75)
    _box(ax, 1.8, 1.95, "Attention Decoder AD$_0$: token\nfused into the state\n(cosine gate per head)", TRAINED,
         w=3.4, h=0.95)
    _box(ax, 1.8, 3.35, "Augmenting Block: 2 decoder\nlayers + norm, causal, KV\ncache over committed tokens",
         TRAINED, w=3.4, h=0.95)
    _box(ax, 1.8, 4.6, "FC$_0$ + norm $\\to$ LM head", TRAINED, w=3.4)
    _frame(ax, 0.05, 1.35, 3.55, 5.0, "once per step")
    _arrow(ax, (1.8, 0.83), (1.8, 1.47), "$h$")
    _arrow(ax, (5.4, 0.83), (3.0, 1.47), "$e$")
    _arrow(ax, (1.8, 2.43), (1.8, 2.87))
    _arrow(ax, (1.8, 3.83), (1.8, 4.29), "$s^{(0)}$")
    _box(ax, 1.8, 5.75, "head 0: $q_0$, the root's\nchildren (depth 1)", DATA, w=3.4, h=0.75)
    _arrow(ax, (1.8, 4.91), (1.8, 5.37))
    _box(ax, 6.05, 5.5, "AD$_1(s^{(i-1)}, E(x))$: one\nregressive RNN step,\nshared by every depth", TRAINED,
         w=2.9, h=0.95)
    _box(ax, 6.05, 4.15, "FC$_1[s^{(i)}; E(x)]$\n+ norm $\\to$ LM head", TRAINED, w=2.9, h=0.75)
    _box(ax, 6.05, 2.85, "head $i$: $q_i$, the\nchildren at depth $i+1$", DATA, w=2.9, h=0.75)
    _frame(ax, 4.45, 2.35, 7.55, 6.1, "once per tree node,\nbatched per depth")
    _arrow(ax, (3.5, 5.7), (4.6, 5.7))
    ax.text(4.05, 5.8, "$s^{(0)}, x$", fontsize=MIN_PT, color="#303030", ha="center", va="bottom")
    _arrow(ax, (6.05, 5.02), (6.05, 4.53), "$s^{(i)}$")
    _arrow(ax, (6.05, 3.78), (6.05, 3.23))
    _arrow(ax, (4.6, 2.75), (4.6, 5.3), bend=-0.5)
    ax.text(3.95, 3.9, "next\ndepth", fontsize=MIN_PT, color="#303030", ha="center", va="center")


def _rivals(ax):
    """The four rivals, one row each: the same colour code."""
    rows = [
        ("EAGLE-1", ["FC$[E(x); f_t]$", "1 decoder layer (no input\nnorm), KV cache grows\nper tree node",
                     "LM head (frozen)"], "every node runs the layer, feeding its predicted feature back"),
        ("EAGLE-3", ["FC of 3 target layers'\ninputs $g$ (no bias)",
                     "1 decoder layer reading\n$[E(x); g]$, per tree node", "norm $\\to$ LM head (frozen)"],
         "no regression; trained on its own predictions for 7 steps (training-time test)"),
        ("Clover-1", ["1-layer Augmenting\nBlock on $h$", "token fused after it\n(Attention Decoder)",
                      "RNN heads $\\to$ LM head"],
         "no output projector, hard labels (reconstructed: the paper body was unreachable)"),
        ("Medusa-1", ["$f_t$: the state after\nthe target's final norm",
                      "head $k$:\n$f_t + \\mathrm{SiLU}(W_k f_t + b_k)$", "LM head (frozen)"],
         "all heads once per step; no head sees the tokens chosen before it"),
    ]
    for r, (name, parts, note) in enumerate(rows):
        y = 2.4 * (len(rows) - 1 - r) + 0.4
        ax.text(0.15, y + 2.0, name, fontsize=MIN_PT + 1.5, weight="bold")
        for k, part in enumerate(parts):
            color = FROZEN if part.startswith("LM head") else DATA if part.startswith("$f_t$") else TRAINED
            _box(ax, 1.6 + 3.1 * k, y + 1.15, part, color, w=2.8, h=1.1)
            if k:
                _arrow(ax, (3.1 * k + 0.02, y + 1.15), (3.1 * k + 0.28, y + 1.15))
        ax.text(0.2, y + 0.3, note, fontsize=MIN_PT, color="#404040", va="center")


def _legend(fig):
    handles = [FancyBboxPatch((0, 0), 1, 1, fc=FROZEN, ec="#404040"), FancyBboxPatch((0, 0), 1, 1, fc=TRAINED,
                                                                                       ec="#404040")]
    fig.legend(handles, ["frozen (the target's)", "trained (the draft's)"], loc="lower right", fontsize=MIN_PT,
               frameon=False, ncol=2)


def draft_architectures() -> dict[str, plt.Figure]:
    """{"clover2": Clover-2 in detail, "rivals": EAGLE-1, EAGLE-3, Clover-1 and Medusa-1}."""
    figures = {}
    for name, draw, (w, h), height in (("clover2", _clover2, (7.6, 6.7), 5.8), ("rivals", _rivals, (9.3, 10.2), 6.3)):
        fig, ax = plt.subplots(figsize=(FIGURE_IN, height))
        ax.set_xlim(0, w)
        ax.set_ylim(-0.3, h)  # room for the legend below
        ax.axis("off")
        draw(ax)
        _legend(fig)
        fig.tight_layout()
        figures[name] = fig
    return figures


if __name__ == "__main__":
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "book/figures")
    out.mkdir(parents=True, exist_ok=True)
    for name, fig in draft_architectures().items():
        save(fig, out / f"{name}.png")
