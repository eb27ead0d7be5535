"""Check the built book (run by `make reproduce` after `make book`): a headless Chromium opens every
page of the table of contents at a laptop's width and the check fails on

- an image that did not load (missing file, empty file, broken link);
- a table wider than the page's text column (a table the reader must scroll sideways);
- code or output wider than its box (cut off, or scrolled sideways);
- a formula left as TeX (MathJax, served from the build, did not typeset it);
- a Python object's repr shown as output (`PosixPath(...)`, `<... object at 0x...>`): a cell that
  should have ended quietly;
- a figure whose smallest text is under 9 pt as the page shows it (its PNG records the size of its
  smallest text, `clover2.research.figures.png`; figures made before that record are counted, not
  checked);
- a figure with text drawn over other text (its PNG records the overlaps, `OVERLAP_KEY`);
- a results page (under results/) without a figure or a table, or with almost no text;
- a front page whose abstract (the paragraphs from "In short.") and verdict (the `verdict`
  admonition) do not end within the first 1366x900 screen;
- one quantity with two values: a method's speed over plain decoding (a table cell "1.19x [1.08,
  1.33]" or "1.19 [1.08, 1.33]" in a column about speed, not "speed over" another method) that
  differs between two pages;
- raw pandas output: a DataFrame's own HTML, a truncated one ("80 rows x 6 columns") or NaN cells
  (notebooks show tables through `clover2.research.tables`);
- a page over `MAX_SCREENS` screens that is not a reference page, and pages to read through (all but
  the reference pages, which a reader consults: the protocol, the results' tables, the glossary...)
  over `READ_SCREENS` screens in all;
- a figure an executed notebook references that is missing or empty (checked without a browser).

Without a browser, from the built HTML, it also fails on

- a word of a project tracker's in the prose ("session", "sitting", "harness", "ticket", "issue #"),
  code and program output aside: a research report says what was done, not how the work was
  organized;
- raw pandas output: a DataFrame's own HTML table, its or a Series' text repr in an output, or a
  truncation line;
- a term used on the front page before it is defined: every glossary term and every word of `JARGON`
  that the front page uses must, where it is first used, link to its glossary entry (`{term}`) or be
  defined there (`{dfn}`).

Needs Chromium (`apt-get install chromium` on Debian); without it only the file checks run.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml
from bs4 import BeautifulSoup
from PIL import Image

from clover2.research.figures import FONT_KEY, MIN_PT, OVERLAP_KEY

HTML = Path("_build/html")
WIDTH = 1366  # a laptop browser window
SCREEN_HEIGHT = 900  # its first screen
FRONT = "book/intro.html"  # the front page: its abstract and verdict come first
GLOSSARY = "book/glossary.html"
# words a reader who has not read the paper needs defined, glossary entries or not: the front page
# defines each where it first uses it (its glossary terms are checked too)
JARGON = ("speculative decoding", "target", "draft", "step", "tau", "τ", "tokens per step", "plain decoding",
          "lossless", "value gain", "seed", "interval", "Holm", "25-node tree", "T = 0", "T = 1", "Clover-2",
          "Clover-1", "EAGLE-1", "EAGLE-3", "Medusa-1", "prompt lookup", "official recipe", "annealed")
# a project tracker's words, not a research report's (matched as whole words, any case)
TRACKER = re.compile(r"\b(?:sessions?|sittings?|harness(?:es)?|tickets?)\b|\bissue\s*#", re.IGNORECASE)
MAX_SCREENS = 5  # a page longer than this is too long to read, unless it is a reference page
REFERENCE = {"book/method.html", "book/glossary.html", "book/checklist.html",
             "book/protocol.html", "results/study/README.html"}
READ_SCREENS = 35  # the pages read through, in all: seven full pages
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars",
                  f"--window-size={WIDTH},1000", "--virtual-time-budget=8000", "--dump-dom"]
# Runs in the page once it has loaded and MathJax has typeset it, and writes what it found into an
# attribute of <body>.
PROBE = """<script>window.addEventListener('load', () => {
 const typeset = (window.MathJax && MathJax.startup && MathJax.startup.promise) || Promise.resolve();
 typeset.then(() => {
  const main = document.querySelector('article') || document.querySelector('main') || document.body;
  const column = main.getBoundingClientRect().width;
  const found = {column: column, text: main.innerText.length, broken: [], wide: [], cut: [], tex: [],
                 images: main.querySelectorAll('img').length, tables: main.querySelectorAll('table').length};
  document.querySelectorAll('img').forEach(i => {
    if (!i.complete || i.naturalWidth === 0) found.broken.push(i.getAttribute('src')); });
  const verdict = document.querySelector('.verdict');
  found.verdict_bottom = verdict ? verdict.getBoundingClientRect().bottom + window.scrollY : null;
  const paras = Array.from(main.querySelectorAll('p'));
  const first = paras.findIndex(p => p.innerText.startsWith('In short.'));  // the abstract: up to the verdict
  const abstract = first < 0 ? null : paras.slice(first).filter(p => !verdict || (verdict.compareDocumentPosition(p)
    & Node.DOCUMENT_POSITION_PRECEDING)).pop();
  found.abstract_bottom = abstract ? abstract.getBoundingClientRect().bottom + window.scrollY : null;
  found.height = document.documentElement.scrollHeight;
  found.dataframes = main.querySelectorAll('table.dataframe').length;
  found.truncated = (main.innerText.match(/\\d+ rows × \\d+ columns/g) || []).slice(0, 3);
  found.nan = Array.from(main.querySelectorAll('td')).filter(c => /^(NaN|nan|…|\\.\\.\\.)$/.test(c.innerText.trim()))
    .length;
  found.speeds = [];
  main.querySelectorAll('table').forEach(t => {
    const heads = Array.from(t.querySelectorAll('thead th')).map(h => h.innerText.trim().toLowerCase());
    t.querySelectorAll('tbody tr').forEach(r => {
      const cells = Array.from(r.querySelectorAll('td, th')).map(c => c.innerText.trim());
      cells.forEach((c, i) => {
        const head = heads[i] || '';  // a speed over plain decoding, not "speed over" another method
        if (i > 0 && /^\\d+\\.\\d+x? \\[/.test(c) && /speed/.test(head) && !/speed over (?!plain)/.test(head))
          found.speeds.push([cells[0], c.replace('x [', ' [').split(' ').slice(0, 3).join(' ')]);
      });
    });
  });
  found.figures = Array.from(main.querySelectorAll('img'))
    .map(i => [i.getAttribute('src'), i.getBoundingClientRect().width]);
  main.querySelectorAll('table').forEach(t => {
    const w = t.scrollWidth;
    if (w > column + 4) found.wide.push(Math.round(w) + 'px: ' + t.innerText.slice(0, 60).replace(/\\s+/g, ' '));
  });
  main.querySelectorAll('pre').forEach(p => {
    if (p.scrollWidth > p.clientWidth + 2) found.cut.push(p.innerText.slice(0, 60).replace(/\\s+/g, ' '));
  });
  main.querySelectorAll('.math').forEach(m => {
    if (!m.querySelector('mjx-container')) found.tex.push(m.textContent.slice(0, 60));
  });
  found.reprs = (main.innerText.match(/\\b(?:Posix|Windows)Path\\([^)]*\\)|<[\\w.]+ object at 0x[0-9a-f]+>/g) || [])
    .slice(0, 3);
  document.body.setAttribute('data-book-check', JSON.stringify(found));
 });
});</script>"""


def pages() -> list[str]:
    """Every page of `_toc.yml`, as the built HTML's relative path."""
    toc = yaml.safe_load(Path("_toc.yml").read_text())
    files = [toc["root"]] + [c["file"] for part in toc["parts"] for c in part["chapters"]]
    return [f"{f}.html" for f in files]


def probe(browser: str, page: Path) -> dict:
    """Open `page` (a copy with the probe script beside it, so relative links resolve) headless."""
    copy = page.with_name(f".check-{page.name}")
    copy.write_text(page.read_text().replace("</body>", PROBE + "</body>"))
    try:
        with tempfile.TemporaryDirectory() as profile:
            dom = subprocess.run([browser, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", copy.resolve().as_uri()],
                                 check=True, capture_output=True, text=True, timeout=120).stdout
    finally:
        copy.unlink()
    found = re.search(r'data-book-check="([^"]*)"', dom)
    if not found:
        raise RuntimeError(f"{page}: the probe did not run")
    return json.loads(html.unescape(found.group(1)))


def figure_info(page: Path, src: str) -> dict:
    """What a figure's PNG records (its text chunks), empty for a figure that is not a local PNG."""
    if src.startswith(("data:", "http")) or not (page.parent / src).is_file():
        return {}
    return dict(Image.open(page.parent / src).info)


def figure_text_pt(page: Path, src: str, shown_px: float) -> float | None:
    """The smallest text of a figure as the page shows it, in points (CSS: 96 px per inch), from the
    size its PNG records and its resolution; None where the PNG records no size."""
    if src.startswith(("data:", "http")) or not (page.parent / src).is_file():
        return None
    image = Image.open(page.parent / src)
    if FONT_KEY not in image.info:
        return None
    dpi = image.info.get("dpi", (72, 72))[0]
    return float(image.info[FONT_KEY]) * dpi * (shown_px / image.size[0]) / 96


def book_length(screens: dict[str, float]) -> list[str]:
    """The pages a reader reads through (every page but the reference ones), `{page: screens}`, over
    `READ_SCREENS` in all: a problem."""
    read = sum(h for name, h in screens.items() if name not in REFERENCE)
    return [f"the pages to read through are {read:.1f} screens of {WIDTH}x{SCREEN_HEIGHT} in all (at most "
            f"{READ_SCREENS}; reference pages aside)"] if read > READ_SCREENS else []


def check_page(name: str, found: dict) -> list[str]:
    problems = [f"{name}: image {src} did not load" for src in found["broken"]]
    problems += [f"{name}: table wider than the {found['column']:.0f}px text column ({w})" for w in found["wide"]]
    problems += [f"{name}: code or output cut off at its box's edge: {c}" for c in found["cut"]]
    problems += [f"{name}: formula not typeset: {t}" for t in found["tex"]]
    problems += [f"{name}: a Python object's repr as output: {r}" for r in found["reprs"]]
    if found["dataframes"] or found["truncated"] or found["nan"]:
        problems.append(f"{name}: raw pandas output ({found['dataframes']} DataFrame tables, truncated: "
                        f"{found['truncated']}, {found['nan']} NaN or '...' cells)")
    for what in ("abstract", "verdict") if name == FRONT else ():
        bottom = found[f"{what}_bottom"]
        if bottom is None or bottom > SCREEN_HEIGHT:
            where = "none" if bottom is None else f"it ends at {bottom:.0f}px"
            problems.append(f"{name}: the {what} is not on the first {WIDTH}x{SCREEN_HEIGHT} screen ({where})")
    for src, shown in found["figures"]:
        overlaps = figure_info(HTML / name, src).get(OVERLAP_KEY)
        if overlaps:
            problems.append(f"{name}: figure {src}: text drawn over text ({overlaps[:120]})")
        pt = figure_text_pt(HTML / name, src, shown)
        if pt is not None and pt < MIN_PT - 0.05:
            problems.append(f"{name}: figure {src}: its smallest text is {pt:.1f} pt at the page's width "
                            f"(under {MIN_PT})")
    if name.startswith("results/") and (found["images"] + found["tables"] == 0 or found["text"] < 400):
        problems.append(f"{name}: results page without a figure or table, or nearly empty ({found['text']} characters)")
    screens = found["height"] / SCREEN_HEIGHT
    if screens > MAX_SCREENS and name not in REFERENCE:
        problems.append(f"{name}: {screens:.1f} screens long (at most {MAX_SCREENS} for a page not a reference)")
    return problems


def speed_conflicts(speeds: dict[str, dict[str, list[str]]]) -> list[str]:
    """A method whose speed over plain decoding is quoted with two values ({method: {value: [pages]}})."""
    return [f"{method}: speed over plain decoding given as "
            + ", ".join(f"{value} ({pages[0]})" for value, pages in values.items())
            for method, values in speeds.items() if len(values) > 1]


def notebook_figures(name: str) -> list[str]:
    """Figures an executed notebook page references exist and are not empty (no browser needed)."""
    page = HTML / name
    problems = []
    for src in re.findall(r'<img[^>]+src="([^"]+)"', page.read_text()):
        if not src.startswith(("data:", "http")):
            f = page.parent / src
            if not f.exists() or f.stat().st_size < 2000:
                problems.append(f"{name}: figure {src} missing or empty")
    return problems


def _article(page_html: str):
    """The page's own text (its `article`), without code, program output, scripts or the page title."""
    soup = BeautifulSoup(page_html, "html.parser")
    article = soup.find("article") or soup.body or soup
    for tag in article.find_all(["script", "style", "pre", "code", "h1"]):
        tag.decompose()
    return article


def tracker_words(name: str, page_html: str) -> list[str]:
    """A project tracker's words in a page's prose (code and program output aside)."""
    text = " ".join(_article(page_html).get_text(" ").split())
    found = []
    for m in TRACKER.finditer(text):
        found.append(f"{name}: a tracker's word in the prose, \"{m.group(0)}\": "
                     f"...{text[max(0, m.start() - 50):m.end() + 30]}...")
    return found[:5]


PANDAS_TEXT = re.compile(r"\[\d+ rows x \d+ columns\]|\d+ rows × \d+ columns|^(?:Name: .*, )?dtype: \w+$", re.M)


def looks_like_dataframe(text: str) -> bool:
    """A DataFrame's or a Series' text repr (what `print(df)` writes): its truncation or dtype line, or a
    header indented by the index's width over rows that each start with an index label, every line
    ending in the same column (pandas right-aligns the columns)."""
    if PANDAS_TEXT.search(text):
        return True
    lines = [line for line in text.splitlines() if line.strip()]
    if len(lines) < 3 or not lines[0].startswith(" "):
        return False
    width = max(set(map(len, lines)), key=[len(line) for line in lines].count)  # most lines end here
    rows = [line for line in lines[1:] if len(line) == width and re.match(r"^\S+\s+\S", line)]
    return len(rows) >= 2 and len(rows) + 2 >= len(lines)  # a header of one or two lines, then the rows


def raw_pandas(name: str, page_html: str) -> list[str]:
    """Raw pandas output on a page, found in its HTML: a DataFrame's own table, or a text repr in a
    notebook's output."""
    soup = BeautifulSoup(page_html, "html.parser")
    problems = [f"{name}: raw pandas output (a DataFrame's own HTML table)"] if soup.select("table.dataframe") else []
    for out in soup.select("div.cell_output pre, div.output pre"):
        if looks_like_dataframe(out.get_text()):
            problems.append(f"{name}: raw pandas output (a DataFrame's text): {out.get_text()[:60]!r}")
    return problems


def glossary_terms(glossary_html: str) -> list[str]:
    """The terms the glossary defines (its `{glossary}` entries)."""
    soup = BeautifulSoup(glossary_html, "html.parser")
    return [" ".join(dt.get_text(" ").split()) for dt in soup.select("dl.glossary dt")]


def undefined_terms(front_html: str, terms) -> list[str]:
    """The terms (`terms`: the glossary's and `JARGON`) the front page uses before it defines them: the
    first use of each must be inside a link to the glossary or a definition (`{dfn}`)."""
    article = _article(front_html)
    text, defining = "", []  # the page's text, and the spans of it that define a term
    for node in article.find_all(string=True):
        start = len(text)
        text += str(node) + " "
        if any(p.name == "a" and "glossary.html#term-" in p.get("href", "") or "dfn" in (p.get("class") or [])
               for p in node.parents):
            defining.append((start, len(text)))
    problems = []
    for term in dict.fromkeys(terms):
        m = re.search(rf"(?<![\w-]){re.escape(term)}(?:s|es)?(?![\w-])", text, re.IGNORECASE)
        if m and not any(a <= m.start() < b for a, b in defining):
            problems.append(f"{FRONT}: \"{term}\" used before it is defined (no glossary link or definition at "
                            f"its first use: ...{' '.join(text[max(0, m.start() - 60):m.end() + 20].split())}...)")
    return problems


def prose_checks(names: list[str]) -> list[str]:
    """The checks that need no browser, on the built pages `names`: tracker words, raw pandas output
    and, on the front page, terms used before they are defined."""
    problems = []
    for n in names:
        page = (HTML / n).read_text()
        problems += tracker_words(n, page) + raw_pandas(n, page)
    if FRONT in names:
        glossary = (HTML / GLOSSARY).read_text() if (HTML / GLOSSARY).exists() else ""
        problems += undefined_terms((HTML / FRONT).read_text(), [*JARGON, *glossary_terms(glossary)])
    return problems


def main() -> int:
    names = pages()
    problems = [f"{n}: not built" for n in names if not (HTML / n).exists()]
    names = [n for n in names if (HTML / n).exists()]
    for n in names:
        problems += notebook_figures(n)
    problems += prose_checks(names)
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        print("book check: chromium not found, pages not opened (Debian: apt-get install chromium)")
    else:
        screens, speeds, heights = 0.0, {}, {}
        for n in names:
            found = probe(browser, HTML / n)
            problems += check_page(n, found)
            screens += found["height"] / SCREEN_HEIGHT
            heights[n] = found["height"] / SCREEN_HEIGHT
            for method, value in found["speeds"]:
                speeds.setdefault(method, {}).setdefault(value, []).append(n)
            unrecorded = sum(figure_text_pt(HTML / n, src, w) is None for src, w in found["figures"])
            print(f"book check: {n}: {found['height'] / SCREEN_HEIGHT:.1f} screens, {found['images']} images "
                  f"({unrecorded} without a text-size record), {found['tables']} tables, {found['text']} characters")
        shared = sum(len({page for pages in values.values() for page in pages}) > 1 for values in speeds.values())
        print(f"book check: {shared} methods' speeds quoted on more than one page, compared")
        problems += speed_conflicts(speeds)
        problems += book_length(heights)
        read = sum(h for n, h in heights.items() if n not in REFERENCE)
        print(f"book check: {screens:.1f} screens in all, {read:.1f} of them to read through")
    for p in problems:
        print("book check:", p, file=sys.stderr)
    print(f"book check: {len(names)} pages, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
