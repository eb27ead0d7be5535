"""Check the built book (run by `make book`): every figure an executed notebook page references
exists and is not empty, and a headless Chromium screenshot of the speedup page shows them rendered
(a page whose images failed to load has text only: no saturated colour)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from PIL import Image

HTML = Path("_build/html")
PAGES = ["results/cpu/notebooks/04_speedup.html", "results/cpu/notebooks/02_distillation.html"]
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars",
                  "--window-size=1280,7000"]


def main() -> int:
    problems = []
    for page in PAGES:
        html = (HTML / page).read_text()
        images = re.findall(r'<img[^>]+src="([^"]+)"', html)
        if not images:
            problems.append(f"{page}: no figures")
        for src in images:
            if not src.startswith("data:"):
                f = (HTML / page).parent / src
                if not f.exists() or f.stat().st_size < 2000:
                    problems.append(f"{page}: figure {src} missing or empty")
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        print("book check: chromium not found, screenshot skipped (Debian: apt-get install chromium)")
    else:
        # The same page with and without images: rendered figures add saturated colour (bars, lines,
        # heat maps) that text and highlighted code alone do not have.
        with_images = _saturated(browser, HTML / PAGES[0], HTML.parent / "speedup_page.png", images=True)
        without = _saturated(browser, HTML / PAGES[0], HTML.parent / "speedup_page_noimages.png", images=False)
        print(f"screenshot of {PAGES[0]}: {with_images:.2%} saturated pixels with images, {without:.2%} without")
        if with_images < 2 * without + 0.002:
            problems.append(f"{PAGES[0]}: the figures do not show in the screenshot")
    for p in problems:
        print("book check:", p, file=sys.stderr)
    return 1 if problems else 0


def _saturated(browser: str, page: Path, shot: Path, *, images: bool) -> float:
    """Screenshot `page` headless; the share of pixels in saturated colour."""
    extra = [] if images else ["--blink-settings=imagesEnabled=false"]
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run([browser, *CHROMIUM_FLAGS, *extra, f"--user-data-dir={profile}", f"--screenshot={shot.resolve()}",
                        page.resolve().as_uri()], check=True, capture_output=True, timeout=120)
    rgb = np.asarray(Image.open(shot).convert("RGB"), dtype=np.int16)
    return float(((rgb.max(-1) - rgb.min(-1)) > 80).mean())


if __name__ == "__main__":
    sys.exit(main())
