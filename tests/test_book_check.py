"""The book check's rules on what a browser found on a page (no browser needed): a clean page passes,
and each defect it is meant to catch fails it."""

from __future__ import annotations

import book_check
import pytest

CLEAN = {"broken": [], "wide": [], "column": 800, "cut": [], "tex": [], "reprs": [], "dataframes": 0,
         "truncated": False, "nan": 0, "figures": [], "scale_bottom": 400, "verdict_bottom": 800,
         "images": 0, "tables": 1, "text": 3000, "height": 3 * book_check.SCREEN_HEIGHT}


def test_a_clean_page_passes():
    assert book_check.check_page(book_check.FRONT, CLEAN) == []
    assert book_check.check_page("results/cpu/notebooks/04_speedup.html", CLEAN) == []


@pytest.mark.parametrize("defect", [
    {"broken": ["figures/a.png"]}, {"wide": [1100]}, {"cut": ["a long line"]}, {"tex": ["$x$"]},
    {"reprs": ["PosixPath('a')"]}, {"dataframes": 1}, {"truncated": True}, {"nan": 2},
    {"scale_bottom": None}, {"verdict_bottom": book_check.SCREEN_HEIGHT + 1},
    {"height": (book_check.MAX_SCREENS + 0.5) * book_check.SCREEN_HEIGHT},
])
def test_each_defect_fails_the_front_page(defect):
    assert book_check.check_page(book_check.FRONT, CLEAN | defect)


def test_a_results_page_needs_a_table_or_figure_and_text():
    name = "results/study/README.html"
    assert book_check.check_page(name, CLEAN | {"tables": 0})
    assert book_check.check_page(name, CLEAN | {"text": 100})


def test_a_reference_page_may_be_long():
    long = CLEAN | {"height": (book_check.MAX_SCREENS + 3) * book_check.SCREEN_HEIGHT}
    assert book_check.check_page(sorted(book_check.REFERENCE)[0], long) == []


def test_one_speed_per_method():
    assert book_check.speed_conflicts({"pld": {"1.19x [1.08, 1.33]": ["a.html", "b.html"]}}) == []
    found = book_check.speed_conflicts({"pld": {"1.19x [1.08, 1.33]": ["a.html"], "1.21x [1.1, 1.3]": ["b.html"]}})
    assert len(found) == 1 and "a.html" in found[0] and "b.html" in found[0]
