"""Prompt files and conversations.

A prompts file holds one JSON object per line, either ``{"id": ..., "prompt": "..."}`` or
``{"id": ..., "turns": ["first user turn", ...]}`` (the MT-Bench / Spec-Bench layout, where
``question_id`` may stand for ``id``), optionally with a ``category`` (or ``kind``). Later user
turns follow the model's own earlier answers.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from clover2.decoding.decode import DecodeConfig, Generation, generate
from clover2.decoding.drafter import Drafter
from clover2.decoding.target import Target
from clover2.errors import Clover2Error


@dataclass(frozen=True)
class PromptRecord:
    id: str
    turns: tuple[str, ...]  # user turns, in order
    category: str = ""  # optional "category" (Spec-Bench) or "kind" field: results are grouped by it


def read_prompts(path: str | Path) -> list[PromptRecord]:
    """Parse a JSONL prompts file; a malformed line is an error naming the line and the reason."""
    path = Path(path)
    if not path.is_file():
        raise Clover2Error(f"prompts file {path} does not exist")
    records = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if line.strip():
            records.append(_parse_record(line, where=f"{path}, line {n}", default_id=str(len(records))))
    if not records:
        raise Clover2Error(f"prompts file {path} holds no prompts")
    return records


def _parse_record(line: str, *, where: str, default_id: str) -> PromptRecord:
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as e:
        raise Clover2Error(f"{where}: not valid JSON ({e.msg} at column {e.colno})") from None
    if not isinstance(obj, dict):
        raise Clover2Error(f"{where}: expected a JSON object, got {type(obj).__name__}")
    if ("prompt" in obj) == ("turns" in obj):
        raise Clover2Error(f"{where}: give exactly one of \"prompt\" (a string) or \"turns\" (a list of strings)")
    turns = [obj["prompt"]] if "prompt" in obj else obj["turns"]
    if not isinstance(turns, list) or not turns or not all(isinstance(t, str) and t.strip() for t in turns):
        raise Clover2Error(f"{where}: \"prompt\" must be a non-empty string and \"turns\" a non-empty list of them")
    return PromptRecord(id=str(obj.get("id", obj.get("question_id", default_id))), turns=tuple(turns),
                        category=str(obj.get("category", obj.get("kind", ""))))


def first_turn_ids(target: Target, record: PromptRecord) -> list[int]:
    """The token ids of a record's first user turn, ready for the reply (what the benchmark decodes)."""
    return target.encode_chat([{"role": "user", "content": record.turns[0]}])


def run_conversation(target: Target, make_drafter: Callable[[], Drafter], record: PromptRecord,
                     config: DecodeConfig) -> list[Generation]:
    """Answer each user turn in order through the chat template; one `Generation` per turn."""
    messages, generations = [], []
    for turn in record.turns:
        messages.append({"role": "user", "content": turn})
        gen = generate(target, make_drafter(), target.encode_chat(messages), config)
        generations.append(gen)
        messages.append({"role": "assistant", "content": target.decode(gen.output_ids)})
    return generations


def conversation_json(target: Target, record: PromptRecord, generations: list[Generation]) -> dict:
    """The CLI's JSON object: totals over all turns, and the turns one by one. `steps` and
    `accept_lengths` count the decoding steps, after each turn's first token (its prefill's)."""
    turns = [{"output_ids": g.output_ids, "text": target.decode(g.output_ids), "steps": len(g.steps),
              "accept_lengths": g.accept_lengths, "seconds": round(g.seconds, 4), "stop_reason": g.stop_reason,
              "prompt_tokens": len(g.prompt_ids)} for g in generations]
    tokens = sum(len(t["output_ids"]) for t in turns)
    seconds = sum(g.seconds for g in generations)
    lengths = [a for t in turns for a in t["accept_lengths"]]
    return {"id": record.id,
            "output_ids": [i for t in turns for i in t["output_ids"]],
            "text": "\n\n".join(t["text"] for t in turns),
            "steps": len(lengths),
            "accept_lengths": lengths,
            "seconds": round(seconds, 4),
            "tau": round(sum(lengths) / len(lengths), 4) if lengths else 1.0,
            "tokens_per_s": round(tokens / seconds, 2) if seconds else None,
            "turns": turns}
