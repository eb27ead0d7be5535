"""The notebooks executed with papermill for a profile: what `make reproduce` runs.

Each notebook of a checkout's `notebooks/` folder (committed without outputs) runs with `profile`,
`results` and any extra parameters injected after its `parameters` cell, in that folder, and its
executed copy is written atomically to `<results>/<profile>/notebooks/`. All of them run in one
Jupyter kernel, one after the other (its namespace reset in between): one process, so that the
imports and a GPU's start-up (25-40 s of CUDA warm-up per new process) are paid once. The wall time
of each notebook and of the whole run goes to `<results>/<profile>/notebooks/timings.json`.
Papermill's injected-parameters cell is tagged `remove-cell` and stderr (progress bars, warnings) is
dropped from the outputs, so the book shows the notebook's own parameters cell and the results; the
progress is streamed to the terminal while the notebooks run.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import nbformat
import papermill
from jupyter_client.manager import KernelManager
from tqdm.auto import tqdm

from clover2.errors import Clover2Error
from clover2.files import atomic_path, write_json
from clover2.measure.provenance import commit, machine
from clover2.paths import results_root
from clover2.profiles import load_profile

NOTEBOOKS = ("01_architecture", "02_distillation", "03_ablations", "04_speedup", "05_figures", "06_at_a_glance")


def run_notebooks(profile: str | None = None, *, source: str | Path = "notebooks", results: str | Path | None = None,
                  only: list[str] | None = None, parameters: dict | None = None, kernel: str = "python3") -> list[Path]:
    """Execute the notebooks in `source` (all, or `only` these) for `profile`, writing their results and
    executed copies under `results/<profile>/` (default: `$CLOVER2_RESULTS`, else ./results)."""
    prof = load_profile(profile)  # an unknown profile fails here, before any notebook runs
    source = Path(source).resolve()
    if not all((source / f"{nb}.ipynb").is_file() for nb in NOTEBOOKS):
        raise Clover2Error(f"{source} does not hold clover2's notebooks; they come with a clone of the "
                           "repository (run from its top folder, or give --notebooks DIR)")
    chosen = list(only or NOTEBOOKS)
    unknown = [n for n in chosen if n not in NOTEBOOKS]
    if unknown:
        raise Clover2Error(f"unknown notebooks {unknown}; known: {', '.join(NOTEBOOKS)}")
    folder = (Path(results).resolve() if results else results_root()) / prof.name
    written, seconds, start = [], {}, time.perf_counter()
    here = machine()
    record = {"commit": commit(), **{k: here[k] for k in ("cpu", "cpu_name", "gpu")}}  # each executed copy's own record
    km = KernelManager(kernel_name=kernel)
    km.start_kernel(cwd=str(source))
    try:
        for nb in tqdm(chosen, desc=f"notebooks ({prof.name})", unit="notebook"):
            out, begun = folder / "notebooks" / f"{nb}.ipynb", time.perf_counter()
            _reset(km)
            with atomic_path(out) as tmp:
                papermill.execute_notebook(source / f"{nb}.ipynb", tmp, kernel_name=kernel, km=km,
                                           parameters={"profile": str(profile or prof.name),
                                                       "results": os.path.relpath(folder, source),  # no machine path
                                                       **(parameters or {})},
                                           cwd=str(source), progress_bar=True, log_output=True)
                nbformat.write(for_the_book(nbformat.read(tmp, as_version=4), f"{nb}.ipynb", prof.name, record), tmp)
            written.append(out)
            seconds[nb] = round(time.perf_counter() - begun, 1)
    finally:
        km.shutdown_kernel(now=True)
    write_json(folder / "notebooks" / "timings.json", {"seconds": seconds, "total_seconds": round(
        time.perf_counter() - start, 1), "one_kernel": True})
    return written


def _reset(km: KernelManager) -> None:
    """Clear the shared kernel's namespace (imported modules, and a GPU's context, stay)."""
    client = km.client()
    client.start_channels()
    try:
        client.wait_for_ready(timeout=60)
        reply = client.execute_interactive("%reset -f", timeout=60)
        if reply["content"]["status"] != "ok":
            raise Clover2Error(f"could not reset the notebooks' kernel: {reply['content']}")
    finally:
        client.stop_channels()


def for_the_book(nb, name: str, profile: str, record: dict | None = None):
    """Hide the parameter cells (the defaults and papermill's injected values), drop stderr outputs
    (progress bars, warnings: the run's log, shown on the terminal while it runs, not a result) and
    the machine's paths, name the profile in the page's title ("cpu-full: At a glance"), so that
    the profiles' pages differ in the browser's title, the search and the page links, and keep the
    run's `record` (commit and machine) in the notebook's metadata (`clover2`): the provenance page
    reads each executed notebook's own."""
    papermill_record = nb.metadata.get("papermill", {})
    papermill_record.update({k: name for k in ("input_path", "output_path") if k in papermill_record})
    if record is not None:
        nb.metadata["clover2"] = dict(record)
    title = next((c for c in nb.cells if c.cell_type == "markdown" and c.source.startswith("# ")), None)
    if title is not None and not title.source.startswith(f"# {profile}: "):
        title.source = f"# {profile}: {title.source[2:]}"
    for cell in nb.cells:
        tags = cell.metadata.setdefault("tags", [])
        if ("injected-parameters" in tags or "parameters" in tags) and "remove-cell" not in tags:
            tags.append("remove-cell")  # the run's parameters are printed by its first cell
        if cell.cell_type == "code":
            cell.outputs = [o for o in cell.outputs if not (o.output_type == "stream" and o.name == "stderr")]
    return nb
