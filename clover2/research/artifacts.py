"""Which commit, machine and date produced each results folder: the book's provenance table.

A profile's notebooks record their run in `provenance.json` (commit, code hash, machine) and each
executed notebook its start time; every benchmark writes `env.json` (commit, date, CPU or GPU, the
drafts' weight hashes). This collects them into one table, a row per folder that holds one, so a
reader can see at a glance which results share a commit, which ran on a tree with uncommitted
changes (`-dirty`), and on which machine.

    python -m clover2.research.artifacts results book/provenance.md
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd

from clover2.files import write_text


def _notebook_dates(folder: Path) -> str:
    """The day the profile's executed notebooks started (earliest papermill start time)."""
    starts = []
    for nb in folder.glob("*.ipynb"):
        start = json.loads(nb.read_text()).get("metadata", {}).get("papermill", {}).get("start_time")
        if start:
            starts.append(start)
    return min(starts)[:10] if starts else ""


def _published(record: Path, results: Path) -> bool:
    """Not the CI's smoke run or a dry run (neither is committed nor in the book)."""
    top = record.relative_to(results).parts[0]
    return top != "smoke" and not top.endswith("-dry")


def artifacts(results: str | Path) -> pd.DataFrame:
    """One row per results folder with a record: `folder` (relative to `results`), `what` (the
    notebooks of a profile, or a benchmark), `commit`, `machine` and `date`."""
    results = Path(results)
    rows = []
    for record in sorted(r for r in results.rglob("provenance.json") if _published(r, results)):
        p = json.loads(record.read_text())
        rows.append({"folder": record.parent.relative_to(results).as_posix() + "/notebooks", "what": "notebooks",
                     "commit": p.get("commit", ""), "machine": p.get("gpu") or p.get("cpu", ""),
                     "date": _notebook_dates(record.parent / "notebooks")})
    for record in sorted(r for r in results.rglob("env.json") if _published(r, results)):
        e = json.loads(record.read_text())
        rows.append({"folder": record.parent.relative_to(results).as_posix(), "what": "benchmark",
                     "commit": e.get("commit", ""), "machine": e.get("gpu") or e.get("cpu", ""),
                     "date": str(e.get("date", ""))[:10]})
    return pd.DataFrame(rows, columns=["folder", "what", "commit", "machine", "date"])


def page(results: str | Path) -> str:
    """The provenance table as a book page."""
    table = artifacts(results)
    dirty = table.commit.str.endswith("-dirty").sum()
    lines = ["# Provenance of every result", "",
             "Each results folder with a machine-readable record, the commit of the code that produced it "
             "(`-dirty`: with uncommitted changes to the code), the machine and the day. The notebooks of one "
             "profile run together at one commit; a benchmark folder beside them may come from another run, "
             "and its own page says which command made it. Written by "
             "`python -m clover2.research.artifacts results book/provenance.md` (part of `make book`).", "",
             f"{len(table)} records, {table.commit.nunique()} commits, {dirty} from a tree with uncommitted changes.", "",
             "| folder | what | commit | machine | date |", "|---|---|---|---|---|"]
    lines += [f"| `results/{r.folder}` | {r.what} | `{r.commit}` | {r.machine} | {r.date} |" for r in table.itertuples()]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    write_text(Path(sys.argv[2] if len(sys.argv) > 2 else "book/provenance.md"),
               page(sys.argv[1] if len(sys.argv) > 1 else "results"))
