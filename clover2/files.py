"""Atomic file output: a result is either absent or complete, never half-written.

Every file or folder clover2 writes goes through `atomic_path`: it is written under a temporary
name beside its destination and renamed into place (an atomic rename on POSIX), so an interrupted
run leaves the old version or nothing, and the next run resumes from there. There is no fsync
before the rename: writes survive an interrupted process, not a power loss (enough for a cache).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pandas as pd


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """A temporary path to write `path` (a file or a folder) into; renamed into place on success.

    On an exception the temporary file or folder is removed and `path` is left as it was.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.tmp{path.suffix}")  # the suffix kept, for tools that check it
    _remove(tmp)
    try:
        yield tmp
        if tmp.is_file():
            os.chmod(tmp, 0o644)
        if tmp.is_dir() and path.is_dir():
            shutil.rmtree(path)  # a folder cannot be replaced by rename while it exists
        os.replace(tmp, path)
    finally:
        _remove(tmp)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def write_text(path: str | Path, text: str) -> Path:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(path)


def write_json(path: str | Path, obj) -> Path:
    return write_text(path, json.dumps(obj, indent=2) + "\n")


def write_csv(path: str | Path, df: pd.DataFrame) -> Path:
    return write_text(path, df.to_csv(index=False))


def sha256_file(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def stable_hash(obj, length: int = 12) -> str:
    """A short hash of a JSON-able object (key order ignored): the name of a cache entry."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:length]


def jsonable(config) -> dict:
    """A config dataclass (or dict) as a JSON sidecar stores it (tuples become lists)."""
    return json.loads(json.dumps(config if isinstance(config, dict) else dataclasses.asdict(config)))


def same_config(stored: dict | None, config) -> bool:
    """Whether a config stored beside an artifact is exactly `config`: the one test every cache uses."""
    return stored is not None and jsonable(stored) == jsonable(config)
