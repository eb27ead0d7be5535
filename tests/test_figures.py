"""A figure shown in a notebook (as the book's pages show it) records the size of its smallest text."""

import base64
import io

import nbformat
from nbclient import NotebookClient
from PIL import Image

from clover2.research.figures import FONT_KEY


def test_a_notebook_figure_records_its_text_size():
    # The inline backend loads at the first figure and registers its own PNG formatter then, which
    # once replaced clover2's: the book's pages had figures without the record its check reads.
    cell = ("import clover2.research.figures\n"
            "import matplotlib.pyplot as plt\n"
            "fig, ax = plt.subplots(figsize=(3, 2))\n"
            "ax.set_title('t', fontsize=11)\n"
            "fig")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(cell)])
    NotebookClient(nb, timeout=120, kernel_name="python3").execute()
    shown = [o["data"]["image/png"] for o in nb.cells[0].outputs if "image/png" in o.get("data", {})]
    assert shown, "the figure was not shown"
    for data in shown:
        assert float(Image.open(io.BytesIO(base64.b64decode(data))).info[FONT_KEY]) > 0


def test_a_figure_wider_than_a_notebook_output_is_narrowed_not_shrunk():
    import matplotlib.pyplot as plt

    from clover2.research.figures import DPI, OUTPUT_IN, png

    fig, ax = plt.subplots(figsize=(OUTPUT_IN, 2))
    ax.plot([0, 1], [0, 1], label="a legend outside the axes, long enough to widen the figure")
    ax.legend(loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=10)
    image = Image.open(io.BytesIO(png(fig)))
    assert image.size[0] <= OUTPUT_IN * DPI + 2  # shown at its own size in a notebook output
    assert float(image.info[FONT_KEY]) == 10.0  # the text kept its points
    plt.close(fig)


def test_text_drawn_over_other_text_is_recorded():
    """A label printed over a panel's title (the book once showed "best 0.9clover2") is recorded in
    the PNG for the book check; a figure whose texts keep apart records nothing."""
    import matplotlib.pyplot as plt

    from clover2.research.figures import OVERLAP_KEY, png

    fig, ax = plt.subplots(figsize=(4, 3))
    ax.set_title("clover2")
    ax.text(0.5, 1.02, "best 0.90", transform=ax.transAxes, ha="center", va="bottom")
    assert "best 0.90 | clover2" in Image.open(io.BytesIO(png(fig))).info[OVERLAP_KEY] or \
        "clover2 | best 0.90" in Image.open(io.BytesIO(png(fig))).info[OVERLAP_KEY]
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(4, 3))
    ax.set_title("clover2")
    ax.plot([0, 1], [0, 1])
    assert Image.open(io.BytesIO(png(fig))).info[OVERLAP_KEY] == ""
    plt.close(fig)


def test_a_per_depth_rate_resting_on_a_handful_of_steps_is_not_drawn():
    import matplotlib.pyplot as plt
    import pandas as pd

    from clover2.research.figures import MIN_CONDITIONING, depth_acceptance_plot

    depths = pd.DataFrame({"draft": "clover2", "tree": "eagle25", "depth": [1, 2, 3],
                           "steps": [400, 90, MIN_CONDITIONING - 1], "rate": [0.3, 0.2, 0.9],
                           "reached": [0.3, 0.06, 0.01]})
    fig = depth_acceptance_plot(depths)
    rate, reached = fig.axes[0], fig.axes[1]
    assert max(x for line in rate.lines for x in line.get_xdata()) == 2  # depth 3: too few steps
    assert max(x for line in reached.lines for x in line.get_xdata()) == 3
    plt.close(fig)
