"""What every number is recorded with: the machine, the versions, the commit, and the code's own hash.

`code_version(parts)` hashes the source of the named parts of clover2 (subpackages or modules):
cache entries (data, drafts, benchmark runs) are keyed by it, so changed code never reuses an
entry made by older code, while a change elsewhere in the package leaves the entry valid.
"""

from __future__ import annotations

import datetime
import functools
import hashlib
import os
import platform
import subprocess
from pathlib import Path

import torch
import transformers

from clover2 import __version__
from clover2.decoding.target import Target
from clover2.paths import repo_root

PACKAGE = Path(__file__).resolve().parent.parent


@functools.cache
def code_version(*parts: str) -> str:
    """A short hash of the source files of `parts` ("decoding", "drafts", "training/data.py", ...; none: all of clover2)."""
    roots = [PACKAGE / p for p in parts] or [PACKAGE]
    files = sorted({f for r in roots for f in ([r] if r.is_file() else r.rglob("*.py"))})
    h = hashlib.sha256()
    for f in files:
        h.update(str(f.relative_to(PACKAGE)).encode() + b"\0" + f.read_bytes())
    return h.hexdigest()[:12]


def commit() -> str:
    """The checkout's commit (`-dirty` with uncommitted changes outside `results/`, which runs write
    into), or the installed version's."""
    root = repo_root()
    if root is None:
        return __version__  # setuptools-scm puts the commit into the version of a package built from git
    git = lambda *args: subprocess.run(["git", *args], cwd=root, capture_output=True, text=True).stdout.strip()  # noqa: E731
    dirty = git("status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)results")
    return git("rev-parse", "--short", "HEAD") + ("-dirty" if dirty else "")


def machine() -> dict:
    """What decides the speed of a run: processor, threads, accelerator."""
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        cpu = platform.processor()
    return {"cpu": cpu, "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None}


def environment(target: Target) -> dict:
    """Hardware, versions and commit, recorded beside every number."""
    return {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            **machine(), "torch": torch.__version__,
            "transformers": transformers.__version__, "python": platform.python_version(),
            "target": target.name, "dtype": str(target.dtype).removeprefix("torch."),
            "device": str(target.device), "kernels": target.kernel_record(), "commit": commit(), "clover2": __version__,
            "load_average_1m": os.getloadavg()[0]}  # other work on the machine biases every comparison


