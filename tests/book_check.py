"""Check the built book (run by `make reproduce` after `make book`): a headless Chromium opens every
page of the table of contents at a laptop's width and the check fails on

- an image that did not load (missing file, empty file, broken link);
- a table wider than the page's text column (a table the reader must scroll sideways);
- a results page (under results/) without a figure or a table, or with almost no text;
- a figure an executed notebook references that is missing or empty (checked without a browser).

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

HTML = Path("_build/html")
WIDTH = 1280  # a laptop browser window
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars",
                  f"--window-size={WIDTH},1000", "--virtual-time-budget=8000", "--dump-dom"]
# Runs in the page once it has loaded and writes what it found into an attribute of <body>.
PROBE = """<script>window.addEventListener('load', () => {
  const main = document.querySelector('article') || document.querySelector('main') || document.body;
  const column = main.getBoundingClientRect().width;
  const found = {column: column, text: main.innerText.length, broken: [], wide: [],
                 images: main.querySelectorAll('img').length, tables: main.querySelectorAll('table').length};
  document.querySelectorAll('img').forEach(i => {
    if (!i.complete || i.naturalWidth === 0) found.broken.push(i.getAttribute('src')); });
  main.querySelectorAll('table').forEach(t => {
    const w = t.scrollWidth;
    if (w > column + 4) found.wide.push(Math.round(w) + 'px: ' + t.innerText.slice(0, 60).replace(/\\s+/g, ' '));
  });
  document.body.setAttribute('data-book-check', JSON.stringify(found));
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


def check_page(name: str, found: dict) -> list[str]:
    problems = [f"{name}: image {src} did not load" for src in found["broken"]]
    problems += [f"{name}: table wider than the {found['column']:.0f}px text column ({w})" for w in found["wide"]]
    if name.startswith("results/") and (found["images"] + found["tables"] == 0 or found["text"] < 400):
        problems.append(f"{name}: results page without a figure or table, or nearly empty ({found['text']} characters)")
    return problems


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


def main() -> int:
    names = pages()
    problems = [f"{n}: not built" for n in names if not (HTML / n).exists()]
    names = [n for n in names if (HTML / n).exists()]
    for n in names:
        problems += notebook_figures(n)
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        print("book check: chromium not found, pages not opened (Debian: apt-get install chromium)")
    else:
        for n in names:
            found = probe(browser, HTML / n)
            problems += check_page(n, found)
            print(f"book check: {n}: {found['images']} images, {found['tables']} tables, {found['text']} characters")
    for p in problems:
        print("book check:", p, file=sys.stderr)
    print(f"book check: {len(names)} pages, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
