"""Where clover2 reads and writes: the cache (inputs and intermediate artifacts) and the results.

- **Cache** (`$CLOVER2_CACHE`, else `$XDG_CACHE_HOME/clover2`, else `~/.cache/clover2`): prepared
  targets, task files, training data, trained drafts and finished benchmark runs. Entries are keyed
  by their exact inputs and the code that made them (`clover2.measure.provenance`), so a changed
  algorithm or input never reuses a stale entry.
- **Results** (`$CLOVER2_RESULTS`, else `results/` in the current folder): what the book shows.
  Results are outputs only: nothing is ever read back from them as an input.
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    if os.environ.get("CLOVER2_CACHE"):
        return Path(os.environ["CLOVER2_CACHE"])
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "clover2"


def results_root() -> Path:
    return Path(os.environ.get("CLOVER2_RESULTS", "results")).resolve()


def repo_root() -> Path | None:
    """The source checkout this package was installed from (editable), or None for a plain install."""
    here = Path(__file__).resolve().parent.parent
    return here if (here / ".git").exists() and (here / "pyproject.toml").exists() else None
