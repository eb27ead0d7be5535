"""The architecture diagram of the book draws every draft and the colour key."""

import matplotlib.pyplot as plt

from clover2.research.diagram import draft_architectures


def test_diagram_names_every_draft_and_the_key(tmp_path):
    fig = draft_architectures()
    texts = {t.get_text() for ax in fig.axes for t in ax.texts} | {t.get_text() for t in fig.legends[0].get_texts()}
    assert {"EAGLE-1", "Clover-1", "Medusa-1", "frozen (the target's)", "trained (the draft's)"} <= texts
    assert any("Augmenting Block" in t for t in texts) and any("once per tree node" in t for t in texts)
    fig.savefig(tmp_path / "a.png")
    assert (tmp_path / "a.png").stat().st_size > 20_000
    plt.close(fig)
