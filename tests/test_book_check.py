"""The book check's rules on what a browser found on a page (no browser needed): a clean page passes,
and each defect it is meant to catch fails it."""

from __future__ import annotations

import book_check
import pandas as pd
import pytest

CLEAN = {"broken": [], "wide": [], "column": 800, "cut": [], "tex": [], "reprs": [], "dataframes": 0,
         "truncated": False, "nan": 0, "figures": [], "abstract_bottom": 400, "verdict_bottom": 800,
         "images": 0, "tables": 1, "text": 3000, "height": 3 * book_check.SCREEN_HEIGHT}


def test_a_clean_page_passes():
    assert book_check.check_page(book_check.FRONT, CLEAN) == []
    assert book_check.check_page("results/cpu/notebooks/04_speedup.html", CLEAN) == []


@pytest.mark.parametrize("defect", [
    {"broken": ["figures/a.png"]}, {"wide": [1100]}, {"cut": ["a long line"]}, {"tex": ["$x$"]},
    {"reprs": ["PosixPath('a')"]}, {"dataframes": 1}, {"truncated": True}, {"nan": 2},
    {"abstract_bottom": None}, {"verdict_bottom": book_check.SCREEN_HEIGHT + 1},
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


def test_the_pages_to_read_through_have_a_length_in_all_reference_pages_aside():
    pages = {f"book/page{i}.html": 4.0 for i in range(8)}  # 32 screens to read
    assert book_check.book_length(pages) == []
    assert book_check.book_length(pages | {"book/protocol.html": 40.0}) == []  # consulted, not read through
    assert book_check.book_length(pages | {"book/more.html": 4.0})  # 36 screens to read: too long


def test_one_speed_per_method():
    assert book_check.speed_conflicts({"pld": {"1.19x [1.08, 1.33]": ["a.html", "b.html"]}}) == []
    found = book_check.speed_conflicts({"pld": {"1.19x [1.08, 1.33]": ["a.html"], "1.21x [1.1, 1.3]": ["b.html"]}})
    assert len(found) == 1 and "a.html" in found[0] and "b.html" in found[0]


def _page(body: str) -> str:
    return f"<html><body><nav>session</nav><article class='bd-article'><h1>Title</h1>{body}</article></body></html>"


def test_the_prose_checks_pass_a_clean_page():
    page = _page("<p>Each run was timed.</p><pre>profile cpu: a session id</pre><p><code>sittings.csv</code></p>")
    assert book_check.tracker_words("a.html", page) == [] and book_check.raw_pandas("a.html", page) == []


@pytest.mark.parametrize("words", ["a session's end took the run", "over several sittings", "not run on this harness",
                                   "see issue #59", "the ticket asks", "one Sitting of 6 hours"])
def test_a_trackers_word_in_the_prose_fails(words):
    found = book_check.tracker_words("a.html", _page(f"<p>The study ran {words} in all.</p>"))
    assert len(found) == 1 and "a.html" in found[0]


TABLE = pd.DataFrame({"method": ["pld", "suffix", "tr@chain4"], "speedup": [1.19, 1.18, 0.93],
                      "note": ["a b", "", "c"]})


@pytest.mark.parametrize("output", [
    f"<div class='cell_output'><pre>{TABLE}</pre></div>",
    f"<div class='cell_output'><pre>{TABLE.set_index('method')}</pre></div>",
    f"<div class='output'><pre>{TABLE.describe()}</pre></div>",
    "<div class='cell_output'><pre>0    1.19\n1    1.18\nName: speedup, dtype: float64</pre></div>",
    "<div class='cell_output'><pre>...\n[80 rows x 6 columns]</pre></div>",
    "<table class='dataframe'><tr><td>1</td></tr></table>",
])
def test_raw_pandas_output_fails(output):
    assert book_check.raw_pandas("a.html", _page(output))


def test_program_output_that_is_not_pandas_passes():
    for text in ("profile cpu: target smollm2-135m-instruct, torch.float32\n",
                 "step 10: loss 2.31\nstep 20: loss 2.12\nstep 30: loss 2.05\n",
                 "  indented first line\nthen prose that runs on\nand on\n"):
        assert book_check.raw_pandas("a.html", _page(f"<div class='cell_output'><pre>{text}</pre></div>")) == [], text


GLOSSARY = ("<dl class='glossary'><dt id='term-tau'>tau</dt><dd>tokens per step</dd>"
            "<dt id='term-seed'>seed</dt><dd>...</dd></dl>")


def _term(text: str, term: str) -> str:
    return f"<a class='reference internal' href='glossary.html#term-{term}'><span class='std-term'>{text}</span></a>"


def test_terms_defined_at_their_first_use_pass():
    front = _page(f"<p>A {_term('tau', 'tau')} of 1.7 over five {_term('seeds', 'seed')}; tau again, seeds again.</p>"
                  "<p><em class='dfn'>Holm</em>'s correction, then Holm again.</p>")
    terms = [*book_check.glossary_terms(GLOSSARY), "Holm"]
    assert terms[:2] == ["tau", "seed"] and book_check.undefined_terms(front, terms) == []


@pytest.mark.parametrize("body", [
    "<p>A tau of 1.7, then its definition: {tau}.</p>",  # used first, linked later
    "<p>A {tau} of 1.7 over five seeds.</p>",  # a glossary term never linked on the page
    "<p>A {tau} of 1.7, Holm p 0.01.</p>",  # a word of JARGON never defined
    "<p>The <code>x</code> Tau is 1.7.</p><p>{tau}</p>",  # case does not hide a use
])
def test_a_term_used_before_it_is_defined_fails_the_front_page(body):
    front = _page(body.format(tau=_term("tau", "tau")))
    found = book_check.undefined_terms(front, [*book_check.glossary_terms(GLOSSARY), "Holm"])
    assert len(found) == 1 and book_check.FRONT in found[0]


def test_the_title_and_code_do_not_count_as_uses():
    front = _page(f"<p><code>tau</code> then {_term('tau', 'tau')}</p>").replace("<h1>Title</h1>", "<h1>tau</h1>")
    assert book_check.undefined_terms(front, ["tau"]) == []


def test_the_books_markdown_sources_have_no_tracker_words():
    """The same rule on the pages written or generated as Markdown, without a build: prose only (code
    spans and blocks aside)."""
    import re
    from pathlib import Path

    root = Path(__file__).parents[1]
    pages = [root / f"{p[:-5]}.md" for p in book_check.pages() if (root / f"{p[:-5]}.md").exists()]
    assert len(pages) > 5
    for page in pages:
        prose = re.sub(r"```.*?```|`[^`]*`", " ", page.read_text(), flags=re.S)
        assert not book_check.TRACKER.findall(prose), page
