"""Check the built book (run by `make book`): every figure an executed notebook page references
exists and is not empty, and a headless Chromium screenshot of the speedup page shows them rendered
(a page whose images failed to load is mostly white)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from PIL import Image

HTML = Path("_build/html")
PAGES = ["results/cpu/notebooks/04_speedup.html", "results/cpu/notebooks/02_distillation.html"]
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars",
                  "--window-size=1280,3000"]


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
        with tempfile.TemporaryDirectory() as profile:
            shot = HTML.parent / "speedup_page.png"
            subprocess.run([browser, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"--screenshot={shot.resolve()}",
                            (HTML / PAGES[0]).resolve().as_uri()], check=True, capture_output=True, timeout=120)
        gray = Image.open(shot).convert("L")
        colored = sum(1 for v in gray.getdata() if v < 200) / (gray.width * gray.height)
        print(f"screenshot {shot}: {colored:.1%} of pixels drawn")
        if colored < 0.03:
            problems.append(f"{shot}: the page looks blank ({colored:.1%} of pixels drawn)")
    for p in problems:
        print("book check:", p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
