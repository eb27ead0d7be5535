"""The notebooks executed with papermill for a profile: what `make reproduce` runs.

Each notebook in `notebooks/` (committed without outputs) runs with `profile` and any extra
parameters injected after its `parameters` cell, in the `notebooks/` folder, and its executed
copy is written atomically to `results/<profile>/notebooks/`. Papermill's injected-parameters cell
is tagged `remove-cell`, so the book shows the notebook's own parameters cell and the results, not
the injection.
"""

from __future__ import annotations

import os
from pathlib import Path

import nbformat
import papermill
from tqdm.auto import tqdm

from clover2.errors import Clover2Error
from clover2.profiles import load_profile

REPO = Path(__file__).resolve().parent.parent
NOTEBOOKS = ("01_architecture", "02_distillation", "03_ablations", "04_speedup", "05_figures")


def run_notebooks(profile: str, *, only: list[str] | None = None, parameters: dict | None = None,
                  kernel: str = "python3") -> list[Path]:
    """Execute the notebooks (all, or `only` these) for `profile`; return the executed copies."""
    name = load_profile(profile).name  # an unknown profile fails here, before any notebook runs
    chosen = list(only or NOTEBOOKS)
    unknown = [n for n in chosen if n not in NOTEBOOKS]
    if unknown:
        raise Clover2Error(f"unknown notebooks {unknown}; known: {', '.join(NOTEBOOKS)}")
    out_dir = REPO / "results" / name / "notebooks"
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for nb in tqdm(chosen, desc=f"notebooks ({name})", unit="notebook"):
        out, tmp = out_dir / f"{nb}.ipynb", out_dir / f".{nb}.ipynb.tmp"
        papermill.execute_notebook(REPO / "notebooks" / f"{nb}.ipynb", tmp, kernel_name=kernel,
                                   parameters={"profile": profile, **(parameters or {})},
                                   cwd=str(REPO / "notebooks"), progress_bar=False)
        executed = nbformat.read(tmp, as_version=4)
        for cell in executed.cells:
            tags = cell.metadata.setdefault("tags", [])
            if "injected-parameters" in tags and "remove-cell" not in tags:
                tags.append("remove-cell")
        nbformat.write(executed, tmp)
        os.replace(tmp, out)
        written.append(out)
    return written
