"""The designed study's results page told in figures: drawn by the report from the study's tables, each one
embedded in the page with a caption, after the findings and before the tables."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest
from matplotlib.container import ErrorbarContainer
from PIL import Image

from clover2.research.design import Arm, DesignConfig
from clover2.research.figures import FONT_KEY, MIN_PT, OVERLAP_KEY, forest
from clover2.research.study_report import FIGURES, draw_figures, write_page
from clover2.research.verdicts import claim_band, drawn_apart

DESIGN = DesignConfig(arms={"c2o": Arm("clover2", lrs=(1e-3,), seeds=2), "c2": Arm("clover2", lrs=(1e-3,), seeds=2),
                            "e1": Arm("eagle1", lrs=(1e-3,), seeds=2), "m": Arm("medusa", lrs=(1e-3,), seeds=2)},
                      reference="e1", primary=("c2o", "c2"), budgets=(300, 600), curve=(1200,))
PNGS = {"verdicts": "forest.png", "per_task": "per-task.png", "curve": "curve.png"}


def verdicts_csv() -> pd.DataFrame:
    """A small verdicts.csv: both primary comparisons, one per other family, the budget family's ratio of
    ratios (no tau - 1), and one comparison far from 1."""
    rows = [("primary", "c2o / e1", "eagle25", 0.99, 0.97, 1.004, 0.98, 0.94, 1.01, "not reproduced: equivalent "
             "within 3%, the paper's smallest gain excluded"),
            ("primary", "c2 / e1", "eagle25", 1.03, 1.02, 1.045, 1.08, 1.05, 1.11, "reproduced: Clover-2 ahead"),
            ("architectures", "c2 / m", "eagle25", 1.22, 1.20, 1.25, 1.77, 1.69, 1.85, "ahead"),
            ("value gain", "c2 / c2o", "eagle25", 1.04, 1.03, 1.06, 1.11, 1.08, 1.14, "ahead"),
            ("budget", "c2 / e1: 600 steps over 300", "eagle25", 1.01, 1.00, 1.03, None, None, None, "ahead"),
            ("tree", "c2 / e1", "dynamic:60:5:10", 1.03, 1.02, 1.05, 1.07, 1.04, 1.10, "ahead")]
    cols = ["family", "comparison", "tree", "ratio", "lo", "hi", "excess_ratio", "excess_lo", "excess_hi", "verdict"]
    out = pd.DataFrame(rows, columns=cols).assign(budget=600, p=0.001, p_adjusted=0.002, seeds="2 vs 2", prompts=48)
    return out.assign(level=[0.975 if f == "primary" else 0.95 for f in out.family])


def per_task_csv() -> pd.DataFrame:
    rows = [(f, c, task, r, paper if c.endswith("/ e1") else None)
            for task, paper in (("mt_bench", 1.035), ("qa", 1.010))
            for f, c, r in (("primary", "c2o / e1", 0.99), ("primary", "c2 / e1", 1.04),
                            ("architectures", "c2 / m", 1.2))]
    out = pd.DataFrame(rows, columns=["family", "comparison", "task", "ratio", "paper"])
    return out.assign(tree="eagle25", prompts=24, lo=out.ratio - 0.02, hi=out.ratio + 0.02)


def curve_csv() -> pd.DataFrame:
    return pd.DataFrame([{"arm": a, "lr": 1e-3, "budget": b, "share": 1.0, "tokens": 1000 * b, "epochs": b / 250,
                          "tau": t0 + 0.0002 * b, "seeds": 1 if b > 600 else 2, "seeds_tau": 1.5,
                          "seed_sd": np.nan if b > 600 else 0.01}
                         for a, t0 in (("c2o", 1.4), ("c2", 1.45), ("e1", 1.42)) for b in (300, 600, 1200)])


def spread_csv() -> pd.DataFrame:
    return pd.DataFrame([{"arm": a, "budget": b, "share": 1.0, "tree": "eagle25", "seeds": 2, "tau": 1.5,
                          "seed_sd": 0.01, "prompt_half_width": 0.05} for a in ("c2o", "c2", "e1") for b in (300, 600)])


@pytest.fixture
def tables(tmp_path) -> dict[str, pd.DataFrame]:
    """The study's tables as the report reads them back: written to CSV and read again."""
    made = {"verdicts": verdicts_csv(), "per_task": per_task_csv(), "curve": curve_csv(), "spread": spread_csv()}
    for name, df in made.items():
        df.to_csv(tmp_path / f"{name}.csv", index=False)
    return {name: pd.read_csv(tmp_path / f"{name}.csv") for name in made}


def status() -> pd.DataFrame:
    return pd.DataFrame({"run": ["c2/a"], "arm": ["c2"], "state": ["done"], "steps": [600.0]})


def test_the_report_draws_every_figure_and_the_page_shows_each_with_a_caption(tmp_path, tables):
    results = tmp_path / "study"
    drawn = write_page(results, DESIGN, tables, status(), machine="a test CPU", commits="2 commits")
    assert drawn == {key: f"{FIGURES}/{name}" for key, name in PNGS.items()}
    text = (results / "README.md").read_text()
    for name in PNGS.values():
        png = results / FIGURES / name
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        meta = Image.open(png).text  # what the book's browser check reads: readable, nothing drawn over another
        assert float(meta[FONT_KEY]) >= MIN_PT and meta[OVERLAP_KEY] == "", name
        block = re.search(rf"```{{figure}} {FIGURES}/{re.escape(name)}\n:name: [\w-]+\n:alt: .+\n\n(.+)\n```", text)
        assert block and len(block.group(1)) > 80, name  # embedded, with a caption a reader can follow
    embedded = re.findall(r"```\{figure\} (\S+)", text)
    assert sorted(embedded) == sorted(drawn.values()) and all((results / p).exists() for p in embedded)
    assert "](figures/" not in text  # no bare image without a caption
    # findings first, then the figures, then the tables; how and where it ran at the end
    order = ["## Findings", "- **c2o / e1**", "- **value gain**: c2 / c2o: 1.040 [1.030, 1.060], ahead",
             "- **per task**", "- **longer training**", "## The study in figures", "figures/forest.png",
             "figures/per-task.png", "figures/curve.png", "## The secondary comparisons", "## How and where it ran",
             "a test CPU"]
    assert [text.index(s) for s in order] == sorted(text.index(s) for s in order)
    assert "(+1% to +5%) and the equivalence margin (±3%)" in text  # the caption's numbers from the design
    assert "(+0.0% to +7.7%)" in text  # and from the paper's published numbers


def test_a_figure_without_its_table_is_neither_drawn_nor_referenced(tmp_path, tables):
    results = tmp_path / "study"
    drawn = write_page(results, DESIGN, {**tables, "per_task": pd.DataFrame()}, status(), machine="cpu", commits="x")
    assert set(drawn) == {"verdicts", "curve"} and not (results / FIGURES / "per-task.png").exists()
    assert "per-task.png" not in (results / "README.md").read_text()


def test_the_forest_plot_reads_the_tables_numbers_in_tau_and_in_tau_minus_one(tables):
    v = tables["verdicts"]
    fig = forest(v, band=claim_band(DESIGN), margin=DESIGN.margin, excess_band=(1.0, 1.077),
                 apart=drawn_apart(DESIGN))
    (near_tau, near_excess), (far_tau, far_excess) = [fig.axes[:2], fig.axes[2:]]
    ticks = sorted(((y, t.get_text()) for y, t in zip(near_tau.get_yticks(), near_tau.get_yticklabels())),
                   reverse=True)
    labels = [label for _, label in ticks]  # top to bottom
    assert labels[:2] == ["P1: c2o / e1", "P2: c2 / e1"]  # the top rows: the primary pair, in order
    assert "c2 / e1, 60-node tree" in labels and not any("over" in label for label in labels)  # no ratio of ratios
    assert [t.get_text() for t in far_tau.get_yticklabels()] == ["c2 / m"]  # far from 1: a row of its own

    def drawn(ax):
        return sorted(x for c in ax.containers if isinstance(c, ErrorbarContainer) for x in c.lines[0].get_xdata())

    near = v[v.family.isin(["primary", "value gain", "tree"])]
    assert drawn(near_tau) == pytest.approx(sorted(near.ratio))
    assert drawn(near_excess) == pytest.approx(sorted(near.excess_ratio))
    assert drawn(far_tau) == pytest.approx([1.22]) and drawn(far_excess) == pytest.approx([1.77])


def test_every_figure_is_drawn_again_from_the_tables(tmp_path, tables):
    out = tmp_path / "figures"
    out.mkdir()
    (out / "forest.png").write_bytes(b"stale")
    draw_figures(DESIGN, tables, out)
    assert (out / "forest.png").read_bytes()[:4] == b"\x89PNG"
