"""Atomic file output: a result is either absent or complete, never half-written."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

import pandas as pd


def write_text(path: str | Path, text: str) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.chmod(tmp, 0o644)  # mkstemp makes files private; results are meant to be read
    os.replace(tmp, path)
    return path


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
