"""Which commit, machine and date produced each results folder: the book's provenance table.

Each executed notebook records the commit and machine of its run (metadata `clover2`, written by
`clover2.research.notebooks`; copies older than that record fall back to their profile's
`provenance.json`, the last run's) and papermill its start time; every benchmark writes `env.json`
(commit, date, the GPU or the CPU with its short name such as "AMD EPYC Zen 4 (AVX-512 BF16)", the
drafts' weight hashes). This collects them into one table, a row per folder that holds one, so a
reader can see at a glance which results share a commit, which ran on a tree with uncommitted
changes (`-dirty`), and on which machine.

    python -m clover2.research.artifacts results book/records.md
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd

from clover2.files import write_text
from clover2.research.report import machine_name


def _published(record: Path, results: Path) -> bool:
    """Not the CI's smoke run or a dry run (neither is committed nor in the book)."""
    top = record.relative_to(results).parts[0]
    return top != "smoke" and not top.endswith("-dry")


def artifacts(results: str | Path) -> pd.DataFrame:
    """One row per executed notebook and per benchmark folder: `folder` (relative to `results`),
    `what`, `commit`, `machine` (`clover2.research.report.machine_name`) and `date`."""
    results = Path(results)
    rows = []
    for record in sorted(r for r in results.rglob("provenance.json") if _published(r, results)):
        profile = json.loads(record.read_text())  # the last notebook run of the profile, for copies without their own
        for nb in sorted((record.parent / "notebooks").glob("[!.]*.ipynb")):  # not a run's unfinished .tmp copy
            meta = json.loads(nb.read_text()).get("metadata", {})
            own = meta.get("clover2") or profile
            rows.append({"folder": nb.relative_to(results).as_posix(), "what": "executed notebook",
                         "commit": own.get("commit", ""), "machine": machine_name(own),
                         "date": str(meta.get("papermill", {}).get("start_time", ""))[:10]})
    for record in sorted(r for r in results.rglob("env.json") if _published(r, results)):
        e = json.loads(record.read_text())
        rows.append({"folder": record.parent.relative_to(results).as_posix(), "what": "benchmark",
                     "commit": e.get("commit", ""), "machine": machine_name(e),
                     "date": str(e.get("date", ""))[:10]})
    table = pd.DataFrame(rows, columns=["folder", "what", "commit", "machine", "date"])
    return table.assign(machine=table.machine.str.replace(r"\((R|TM)\)| Processor", "", regex=True).str.strip())


def page(results: str | Path) -> str:
    """The provenance table as a section of the book's hardware page (book/records.md, included there)."""
    table = artifacts(results)
    dirty = table.commit.str.endswith("-dirty").sum()
    lines = ["## Which commit and machine made each result", "",
             "Every executed notebook and benchmark folder under `results/` (`-dirty`: made with uncommitted changes "
             "to the code). A page can be re-rendered from its tables alone, so a profile's notebooks need not come "
             "from one run. Written by `python -m clover2.research.artifacts results book/records.md` (part of "
             f"`make book`): {len(table)} records, {table.commit.nunique()} commits, {dirty} from a tree with "
             "uncommitted changes.", "",
             "| folders | commit | machine | date |", "|---|---|---|---|"]
    # one row per (commit, machine, date): the folders one run made together
    for (commit, machine, date), g in table.groupby(["commit", "machine", "date"], sort=False):
        lines.append(f"| {', '.join(f'`{f}`' for f in g.folder)} | `{commit}` | {machine} | {date} |")
    return "\n".join(lines + [""])


if __name__ == "__main__":
    write_text(Path(sys.argv[2] if len(sys.argv) > 2 else "book/records.md"),
               page(sys.argv[1] if len(sys.argv) > 1 else "results"))
