"""The book's architecture diagrams draw every draft and the colour key, readable at the column's width."""

import matplotlib.pyplot as plt
from PIL import Image

from clover2.research.diagram import draft_architectures
from clover2.research.figures import COLUMN_IN, FONT_KEY, MIN_PT, png


def test_diagrams_name_every_draft_and_the_key_at_a_readable_size(tmp_path):
    figures = draft_architectures()
    texts = {name: {t.get_text() for ax in fig.axes for t in ax.texts}
             | {t.get_text() for t in fig.legends[0].get_texts()}
             for name, fig in figures.items()}
    assert {"EAGLE-1", "EAGLE-3", "Clover-1", "Medusa-1", "frozen (the target's)"} <= texts["rivals"]
    assert (any("Augmenting Block" in t for t in texts["clover2"])
            and any("once per tree node" in t for t in texts["clover2"]))
    for fig in figures.values():
        assert fig.get_figwidth() <= COLUMN_IN
        (tmp_path / "a.png").write_bytes(png(fig))
        image = Image.open(tmp_path / "a.png")
        assert float(image.info[FONT_KEY]) >= MIN_PT and image.size[0] > 600
        plt.close(fig)
