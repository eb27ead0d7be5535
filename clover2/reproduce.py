"""The notebooks executed with papermill for a profile: what `make reproduce` runs.

Each notebook in `notebooks/` (committed without outputs) runs with `profile` and any extra
parameters injected after its `parameters` cell, in the `notebooks/` folder, and its executed
copy is written atomically to `results/<profile>/notebooks/`. Papermill's injected-parameters cell
is tagged `remove-cell` and stderr (progress bars, warnings) is dropped from the outputs, so the book
shows the notebook's own parameters cell and the results; the progress is streamed to the terminal
while the notebooks run.
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
        out, tmp = out_dir / f"{nb}.ipynb", out_dir / f".{nb}.tmp.ipynb"
        papermill.execute_notebook(REPO / "notebooks" / f"{nb}.ipynb", tmp, kernel_name=kernel,
                                   parameters={"profile": profile, **(parameters or {})},
                                   cwd=str(REPO / "notebooks"), progress_bar=True, log_output=True)
        nbformat.write(for_the_book(nbformat.read(tmp, as_version=4)), tmp)
        os.replace(tmp, out)
        written.append(out)
    return written


def for_the_book(nb):
    """Hide papermill's injected-parameters cell and drop stderr outputs (progress bars, warnings:
    the run's log, shown on the terminal while it runs, not a result)."""
    for cell in nb.cells:
        tags = cell.metadata.setdefault("tags", [])
        if "injected-parameters" in tags and "remove-cell" not in tags:
            tags.append("remove-cell")
        if cell.cell_type == "code":
            cell.outputs = [o for o in cell.outputs if not (o.output_type == "stream" and o.name == "stderr")]
    return nb
