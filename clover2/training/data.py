"""Distillation data: conversations labelled by the target in one forward pass.

Two sources, one format:

- `corpus` (the official recipe of Clover-2, EAGLE-1 and Medusa-1): ShareGPT conversations *as they
  are*, human questions and the original answers, rendered with the target's chat template. Whole
  conversations are packed into long forwards (a block-diagonal causal mask keeps them apart, and
  positions restart per conversation), so labelling costs one prefill per token;
- `self`: the target answers prompts itself (greedy, batched), then the same labelling: ShareGPT
  first turns and, with `task_prompts`, prompts of the benchmark tasks' kinds (their `train` splits,
  `clover2.training.tasks.training_prompts`). A decode per token: several times dearer, but exactly
  the decoding distribution. The held-out set is made this way, from held-out ShareGPT prompts and
  each task's `dev` split, so that it measures per task what decoding will accept.

Per token of every conversation a shard stores:

- `ids` (int32): the token;
- `hidden` (float16, H): the target's last hidden state *before* the final norm: the draft's input.
  The normed state (the regression target) is recomputed from it with the frozen target norm, so it
  costs no disk;
- `fused` (float16, 3H; with `fused_states`): the inputs of the target layers EAGLE-3 reads
  (`clover2.drafts.eagle3.fused_layers`), from the same forward. Stored, they cost 3x the disk of
  `hidden` once; EAGLE-3's official trainer recomputes them in every training step instead, which
  costs a target forward per batch (at the labelling rate, on a CPU the slowest stage of the data);
- `topk_ids` (int32, k) and `topk_logp` (float16, k): the target's next-token distribution after
  this token, as its k most likely tokens and their log-probabilities. The top 32 of SmolLM2 hold
  ~0.97 of the mass on average (measured on its own greedy answers): a sparse top-k keeps the data
  small, and the soft-label loss is taken over those k tokens;
- `response` (bool): whether the token belongs to an answer, with its end-of-turn markup (the loss mask).

Shards hold a fixed number of conversations of one source and one category (`sharegpt` or a task's
name), are written under a temporary name and renamed into place, and are skipped when they exist:
an interrupted run resumes where it stopped. `meta.json` records the target's identity, a hash of
the data and the labelling throughput; checkpoints keep the hash.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Collection
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from clover2.decoding.target import Target
from clover2.errors import Clover2Error
from clover2.files import atomic_path, same_config, stable_hash, write_json
from clover2.training.tasks import SPEC_BENCH_TASKS, load_task, training_prompts

SOURCES = ("corpus", "self")  # conversations as they are; the target's own answers
ARRAYS = ("ids", "hidden", "topk_ids", "topk_logp", "response")
FUSED = "fused"  # the optional array of EAGLE-3's fused states


@dataclass(frozen=True)
class Batch:
    h: torch.Tensor  # (B, T, H) pre-norm target states (or (B, T, 3H) fused ones, for a draft that reads them)
    next_ids: torch.Tensor  # (B, T) x_{t+1} (0 past the end)
    topk_ids: torch.Tensor  # (B, T, k) target's most likely next tokens after t, in draft-vocab ids (-1: outside)
    topk_p: torch.Tensor  # (B, T, k) their probabilities
    label_ids: torch.Tensor  # (B, T) x_{t+1} in draft-vocab ids (-1: outside the draft vocabulary)
    mask: torch.Tensor  # (B, T) bool: x_{t+1} is a response token of a real (non-pad) position


@dataclass(frozen=True)
class DataConfig:
    """A data set of the two sources, either or both: `tokens` of conversations as they are (the
    official recipe) and prompts answered by the target itself (`conversations` from ShareGPT and
    `task_prompts`; mixed in by `TrainConfig.self_weight`)."""

    tokens: int = 1_000_000  # corpus: conversations in seeded order until this many tokens are labelled (0: none)
    max_tokens: int = 1024  # each conversation's first tokens (the most a draft trains on)
    corpus_max_tokens: int = 0  # corpus: each conversation's first tokens instead (0: max_tokens)
    pack_tokens: int = 2048  # tokens per labelling forward (whole conversations, packed)
    conversations: int = 0  # self: ShareGPT prompts the target answers (0: none)
    task_prompts: bool = False  # self: also every prompt of the benchmark tasks' kinds (their train splits and more)
    turns: int = 1  # self: user turns per conversation (later turns follow the target's own answers)
    max_prompt_tokens: int = 384  # self: conversations whose first prompt is longer are skipped
    max_new_tokens: int = 192  # self: cap on each answer
    batch_size: int = 16  # self: conversations generated together
    top_k: int = 32  # size of the stored sparse target distribution
    fused_states: bool = False  # also store EAGLE-3's fused states (the inputs of target layers 2, L/2, L-3)
    shard_conversations: int = 128  # conversations per shard (the unit of resumption)
    seed: int = 0  # shuffles the corpus before taking conversations
    eval_conversations: int = 64  # held-out set: the target's own answers to this many prompts never trained on
    dev_per_task: int = 0  # held-out set: and to this many prompts of each benchmark task's dev split
    held_out: bool = False  # this config describes the held-out set (`held_out_set`), not training data

    def __post_init__(self):
        for name in ("max_tokens", "pack_tokens", "turns", "max_prompt_tokens", "max_new_tokens", "batch_size",
                     "top_k", "shard_conversations", "eval_conversations"):
            if getattr(self, name) < 1:
                raise Clover2Error(f"data config: {name} must be >= 1, got {getattr(self, name)}")
        if min(self.tokens, self.conversations, self.dev_per_task) < 0 or \
                not (self.tokens or self.conversations or self.task_prompts):
            raise Clover2Error("data config: tokens (corpus), conversations or task_prompts (self) must be set: "
                               f"{self}")
        if self.pack_tokens < max(self.max_tokens, self.corpus_max_tokens) or self.corpus_max_tokens < 0:
            raise Clover2Error(f"data config: pack_tokens ({self.pack_tokens}) must hold one conversation "
                               f"of max_tokens ({self.max_tokens}) and of corpus_max_tokens ({self.corpus_max_tokens})")

    @property
    def corpus_window(self) -> int:
        """The tokens kept of each corpus conversation (from its start)."""
        return self.corpus_max_tokens or self.max_tokens

    def held_out_set(self) -> DataConfig:
        """The held-out set's config: the target's own answers to `eval_conversations` first turns
        and to `dev_per_task` dev prompts of each benchmark task."""
        return replace(self, tokens=0, conversations=self.eval_conversations, turns=1, task_prompts=False,
                       held_out=True)


def held_out(conversation: list[dict]) -> bool:
    """About 2% of conversations, chosen by a hash of the first user turn: never trained on, whatever
    the corpus order or size, so that evaluation prompts stay unseen."""
    return int(stable_hash(conversation[0]["content"], 8), 16) % 50 == 0


def split_corpus(corpus: list[list[dict]], exclude: Collection[str]) -> tuple[list[list[dict]], list[list[dict]]]:
    """The training and the held-out conversations (`held_out`), both cleared of the `exclude` texts."""
    clean = decontaminate(corpus, exclude)
    return [c for c in clean if not held_out(c)], [c for c in clean if held_out(c)]


def decontaminate(corpus: list[list[dict]], exclude: Collection[str], *, min_chars: int = 40) -> list[list[dict]]:
    """The conversations that share no line with the `exclude` texts (benchmark prompts and answers):
    lines of at least `min_chars` characters, compared with whitespace collapsed and case folded."""
    banned = _lines(exclude, min_chars)
    return [c for c in corpus if not _lines((m["content"] for m in c), min_chars) & banned]


def _lines(texts, min_chars: int) -> set[str]:
    return {norm for text in texts for line in text.splitlines()
            if len(norm := " ".join(line.split()).casefold()) >= min_chars}


def prepare_data(target: Target, corpus: list[list[dict]], out: Path, config: DataConfig,
                 *, rank: int = 0, world: int = 1) -> dict:
    """Label (or finish labelling) the data set in `out` from `corpus` (conversations of chat
    messages); shards are split across `world` ranks."""
    out = Path(out)
    meta_path = out / "meta.json"
    identity = target.identity()
    if meta_path.exists():
        meta = json.loads(meta_path.read_text())
        if meta["target"] != identity:
            raise Clover2Error(f"{out} holds data made by another target ({meta['target']['name']}, "
                               f"fingerprint {meta['target']['fingerprint']}), not {identity['name']}")
        if not same_config(meta["config"], config):
            raise Clover2Error(f"{out} was made with another data config: {meta['config']}")
        if meta.get("complete"):
            return meta
    S = config.shard_conversations
    as_is, prompts = _choose(target, corpus, config)
    groups = [("corpus", "sharegpt", as_is)] + [("self", c, [turns for k, turns in prompts if k == c])
                                                 for c in dict.fromkeys(k for k, _ in prompts)]
    shards = [(source, category, items[i:i + S]) for source, category, items in groups
              for i in range(0, len(items), S)]  # each shard holds one source and one category
    n_shards = len(shards)
    if rank == 0:
        out.mkdir(parents=True, exist_ok=True)
        write_json(meta_path, {"target": identity, "config": asdict(config), "complete": False,
                               "fused_layers": list(_fused(target, config))})
    todo = [k for k in range(rank, n_shards, world) if not (out / f"shard_{k:05d}").exists()]
    for k in tqdm(todo, desc=f"data shards (rank {rank})", unit="shard"):
        source, category, part = shards[k]
        start = time.perf_counter()
        convs = [conversation_ids(target, c) for c in part] if source == "corpus" else _answered(target, part, config)
        keep = config.corpus_window if source == "corpus" else config.max_tokens
        convs = [(ids[:keep], mask[:keep]) for ids, mask in convs]
        _write_shard(out / f"shard_{k:05d}", target, convs, config, source=source, category=category,
                     seconds=time.perf_counter() - start)
    if rank != 0:
        return {}
    return finalize(out, n_shards)


def complete_meta(folder: Path) -> dict | None:
    """The `meta.json` of a finished data folder; None when it is absent or unfinished."""
    path = Path(folder) / "meta.json"
    meta = json.loads(path.read_text()) if path.exists() else {}
    return meta if meta.get("complete") else None


def finalize(out: Path, n_shards: int) -> dict:
    """Count, hash and describe the finished shards in `meta.json`."""
    meta = json.loads((out / "meta.json").read_text())
    shards = [out / f"shard_{k:05d}" for k in range(n_shards)]
    missing = [s.name for s in shards if not s.exists()]
    if missing:
        raise Clover2Error(f"{out}: shards still missing: {missing[:5]} (rerun prepare-data to finish them)")
    h = hashlib.sha256()
    tokens = responses = nbytes = 0
    seconds = {"answer_seconds": 0.0, "label_seconds": 0.0}
    by_source = dict.fromkeys(SOURCES, 0)
    answered = 0  # response tokens the target wrote itself
    for s in shards:
        ids = np.load(s / "ids.npy")
        h.update(ids.tobytes())
        tokens += len(ids)
        responses += int(np.load(s / "response.npy").sum())
        nbytes += sum(f.stat().st_size for f in s.glob("*.npy"))
        stats = json.loads((s / "stats.json").read_text())
        seconds = {k: v + stats[k] for k, v in seconds.items()}
        by_source[stats["source"]] += stats["tokens"]
        answered += stats.get("response_tokens", 0) if stats["source"] == "self" else 0
    meta |= {"complete": True, "shards": n_shards, "tokens": tokens, "response_tokens": responses,
             "bytes_per_token": round(nbytes / max(1, tokens), 1), "hash": h.hexdigest()[:16],
             **{k: round(v, 1) for k, v in seconds.items()}, **{f"{k}_tokens": v for k, v in by_source.items()},
             "label_tokens_per_s": round(tokens / max(seconds["label_seconds"], 1e-9), 1),
             "answer_tokens_per_s": round(answered / max(seconds["answer_seconds"], 1e-9), 1)}
    write_json(out / "meta.json", meta)
    return meta


def _choose(target: Target, corpus: list[list[dict]], config: DataConfig) -> tuple[list, list]:
    """Conversations in seeded order: for the corpus part, whole conversations until `tokens` (counting
    each one's first `corpus_max_tokens`, which must hold an answer); for the self part, `(category,
    user turns)`: the tasks' prompts (their dev splits for the held-out set, else with
    `task_prompts` their training prompts), then the first `turns` user messages of the first
    `conversations` ShareGPT ones in the same order, so that the target answers again what the
    corpus part holds as it is (as EAGLE-3 regenerates its data); every first prompt fits
    `max_prompt_tokens`."""
    order = np.random.default_rng(config.seed).permutation(len(corpus))
    as_is, tokens, keep = [], 0, config.corpus_window
    for i in order if config.tokens else ():
        ids, mask = conversation_ids(target, corpus[i])
        if any(mask[:keep]):
            as_is.append(corpus[i])
            tokens += min(len(ids), keep)
            if tokens >= config.tokens:
                break

    def fits(turns: list[dict]) -> bool:
        return len(target.encode_chat(turns[:1])) <= config.max_prompt_tokens

    records = [r for t in SPEC_BENCH_TASKS for r in load_task(t, config.dev_per_task, config.seed, split="dev")] \
        if config.held_out and config.dev_per_task else training_prompts() if config.task_prompts else []
    prompts = [(r.category, turns) for r in records
               if fits(turns := [{"role": "user", "content": x} for x in r.turns[: config.turns]])]
    shared = 0
    for i in order if config.conversations else ():
        turns = [m for m in corpus[i] if m["role"] == "user"][: config.turns]
        if fits(turns):
            prompts.append(("sharegpt", turns))
            shared += 1
            if shared == config.conversations:
                break
    return as_is, prompts


def _answered(target: Target, part: list[list[dict]], config: DataConfig) -> list[tuple[list[int], list[bool]]]:
    """Token ids and answer masks of the prompts' conversations, answered turn by turn by the target."""
    histories: list[list[dict]] = [[] for _ in part]
    for t in range(config.turns):
        live = [i for i, turns in enumerate(part) if t < len(turns)]
        for i in live:
            histories[i].append(part[i][t])
        encoded = {i: target.encode_chat(histories[i]) for i in live}
        live.sort(key=lambda i: len(encoded[i]))  # batches of similar lengths pad little
        for b in range(0, len(live), config.batch_size):
            batch = live[b:b + config.batch_size]
            answers = _generate_batch(target, [encoded[i] for i in batch], config)
            for i, answer in zip(batch, answers):
                histories[i].append({"role": "assistant", "content": answer})
    return [conversation_ids(target, h) for h in histories]


def _generate_batch(target: Target, prompts: list[list[int]], config: DataConfig) -> list[str]:
    """Greedy answers, batched with left padding through Hugging Face `generate`."""
    width = max(map(len, prompts))
    eos = list(target.eos_token_ids) or None
    pad = eos[0] if eos else 0  # masked out: any id does
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts], device=target.device)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=target.device)
    with torch.inference_mode():
        out = target.model.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=config.max_new_tokens,
                                    eos_token_id=eos, pad_token_id=pad,
                                    temperature=None, top_p=None, top_k=None)
    return [target.decode(row[width:].tolist()) for row in out]


def conversation_ids(target: Target, messages: list[dict]) -> tuple[list[int], list[bool]]:
    """The whole conversation's ids through the target's chat template, and which of them the assistant
    wrote: each answer with the template's own end-of-turn markup (`</s>`, `<|eot_id|>`, `<|im_end|>`),
    every answer exactly once.

    The conversation is rendered and tokenized once; an answer's characters are those between the
    rendering of the turns before it (with the generation prompt) and the rendering through it, so a
    template that re-renders earlier turns differently is refused instead of silently losing them.
    """
    text = target.render_chat(messages, add_generation_prompt=False)
    spans = []
    for k, m in enumerate(messages):
        if m["role"] != "assistant":
            continue
        before = target.render_chat(messages[:k], add_generation_prompt=True)
        through = target.render_chat(messages[:k + 1], add_generation_prompt=False)
        if not (text.startswith(before) and text.startswith(through) and len(before) < len(through)):
            raise Clover2Error(f"the chat template of {target.name!r} renders turn {k} differently once later turns "
                               "follow; its answers cannot be located in the conversation")
        spans.append((len(before), len(through)))
    ids, offsets = target.tokenize(text, offsets=True)
    # a token is the assistant's when it starts inside an answer's characters
    answer = [any(a <= start < b for a, b in spans) and end > start for start, end in offsets]
    return ids, answer


def _write_shard(path: Path, target: Target, conversations: list[tuple[list[int], list[bool]]], config: DataConfig,
                 *, source: str = "corpus", category: str = "sharegpt", seconds: float) -> None:
    """Label the conversations, packed `pack_tokens` at a time into one forward each; written
    atomically with the shard's token count and labelling time (`stats.json`)."""
    fused = _fused(target, config)
    L = target.config.get_text_config().num_hidden_layers
    arrays: dict[str, list[np.ndarray]] = {a: [] for a in (*ARRAYS, *([FUSED] if fused else []))}
    start = time.perf_counter()
    with torch.inference_mode():
        for pack in _packs([len(ids) for ids, _ in conversations], config.pack_tokens):
            ids = [t for k in pack for t in conversations[k][0]]
            lengths = [len(conversations[k][0]) for k in pack]
            out = target.forward(torch.tensor([ids], device=target.device),
                                 torch.cat([torch.arange(m) for m in lengths]).to(target.device)[None],
                                 _block_causal_mask(lengths, target), target.new_cache(), hidden=True,
                                 layers=(*fused, L))  # the fused layers' inputs, then the last state (index L)
            top = torch.log_softmax(out.logits[0], dim=-1).topk(config.top_k, dim=-1)
            states = out.hidden[0].float().cpu().numpy().astype(np.float16)
            arrays["ids"].append(np.asarray(ids, dtype=np.int32))
            H = states.shape[-1] // (len(fused) + 1)
            arrays["hidden"].append(states[:, -H:])
            if fused:
                arrays[FUSED].append(states[:, :-H])
            arrays["topk_ids"].append(top.indices.cpu().numpy().astype(np.int32))
            arrays["topk_logp"].append(top.values.cpu().numpy().astype(np.float16))
            arrays["response"].append(np.asarray([r for k in pack for r in conversations[k][1]], dtype=bool))
    lengths = [len(ids) for ids, _ in conversations]
    with atomic_path(path) as tmp:
        tmp.mkdir()
        for a, parts in arrays.items():
            np.save(tmp / f"{a}.npy", np.concatenate(parts))
        # packs keep the conversations in order, so offsets follow the conversations
        np.save(tmp / "offsets.npy", np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64))
        write_json(tmp / "stats.json", {"source": source, "category": category, "tokens": sum(lengths),
                                        "conversations": len(lengths),
                                        "response_tokens": int(sum(sum(m) for _, m in conversations)),
                                        "answer_seconds": round(seconds, 2),
                                        "label_seconds": round(time.perf_counter() - start, 2)})


def _fused(target: Target, config: DataConfig) -> tuple[int, ...]:
    """The layers whose inputs the `fused` array stores (none without `fused_states`)."""
    from clover2.drafts.eagle3 import fused_layers  # the drafts import the decoder, which this module's users load

    return fused_layers(target.config.get_text_config().num_hidden_layers) if config.fused_states else ()


def _packs(lengths: list[int], capacity: int) -> list[list[int]]:
    """Consecutive conversations grouped into packs of at most `capacity` tokens (in order)."""
    packs: list[list[int]] = []
    used = capacity
    for k, n in enumerate(lengths):
        if used + n > capacity:
            packs.append([])
            used = 0
        packs[-1].append(k)
        used += n
    return packs


def repeats(ids: list[int], n: int = 4) -> np.ndarray:
    """Per token, whether the n tokens ending at it occurred (ending) earlier in `ids`."""
    seen, out = set(), np.zeros(len(ids), bool)
    for j in range(n - 1, len(ids)):
        gram = tuple(ids[j - n + 1:j + 1])
        out[j] = gram in seen
        seen.add(gram)
    return out


def _finished_meta(folder: Path) -> dict:
    meta_path = folder / "meta.json"
    if not meta_path.exists():
        raise Clover2Error(f"{folder} is not a clover2 data folder (no meta.json); run `clover2 prepare-data`")
    meta = json.loads(meta_path.read_text())
    if not meta.get("complete"):
        raise Clover2Error(f"{folder} is incomplete; rerun `clover2 prepare-data` to finish it")
    return meta


def _block_causal_mask(lengths: list[int], target: Target) -> torch.Tensor:
    """The additive `(1, 1, n, n)` mask of packed conversations: each token sees its own conversation's past."""
    n = sum(lengths)
    mask = torch.full((n, n), torch.finfo(target.dtype).min, dtype=target.dtype, device=target.device)
    start = 0
    for m in lengths:
        mask[start:start + m, start:start + m] = target.causal_mask(m)[0, 0]
        start += m
    return mask[None, None]


class DistillData:
    """The shards of one or more finished data folders (made by one target), memory-mapped, served as
    padded training batches; each sequence knows its source and category."""

    def __init__(self, *folders: str | Path):
        self.folders = [Path(f) for f in folders]
        if not self.folders:
            raise Clover2Error("no data folder given")
        self.metas = [_finished_meta(f) for f in self.folders]
        self.meta = self.metas[0]
        for f, m in zip(self.folders[1:], self.metas[1:]):
            if m["target"] != self.meta["target"]:
                raise Clover2Error(f"{f} was made by target {m['target']['name']} (fingerprint "
                                   f"{m['target']['fingerprint']}), {self.folders[0]} by {self.meta['target']['name']} "
                                   f"(fingerprint {self.meta['target']['fingerprint']}): they cannot be mixed")
        self.target = self.meta["target"]
        # the layers whose inputs the shards' `fused` arrays hold (empty: none stored)
        self.fused_layers = tuple(self.meta.get("fused_layers", ()))
        if any(tuple(m.get("fused_layers", ())) != self.fused_layers for m in self.metas[1:]):
            raise Clover2Error(f"{', '.join(map(str, self.folders))}: some hold fused states and some do not "
                               "(or of other layers): they cannot be mixed")
        self.hash = self.meta["hash"] if len(self.metas) == 1 else stable_hash([m["hash"] for m in self.metas], 16)
        dirs = [f / f"shard_{k:05d}" for f, m in zip(self.folders, self.metas) for k in range(m["shards"])]
        self.shards = [{a: np.load(d / f"{a}.npy", mmap_mode="r")
                        for a in (*ARRAYS, "offsets", *([FUSED] if self.fused_layers else []))} for d in dirs]
        self.sequences = [(k, int(o[i]), int(o[i + 1])) for k, s in enumerate(self.shards)
                          for o in [s["offsets"]] for i in range(len(o) - 1)]
        stats = [json.loads((d / "stats.json").read_text()) for d in dirs]
        self.source = [stats[k]["source"] for k, _, _ in self.sequences]  # per sequence: "corpus" or "self"
        # per sequence: "sharegpt" or the benchmark task whose kind of prompt it answers
        self.category = [stats[k].get("category", "sharegpt") for k, _, _ in self.sequences]

    def check_target(self, target: Target) -> None:
        """Refuse data made by another target than `target` (by name and weight fingerprint)."""
        if self.target != target.identity():
            raise Clover2Error(f"{', '.join(map(str, self.folders))} was made by target {self.target['name']} "
                               f"(fingerprint {self.target['fingerprint']}), not {target.name}")

    def copied(self, indices: list[int], length: int) -> np.ndarray:
        """`(B, length)` bool, aligned with `batch(indices).next_ids`: whether x_{t+1} repeats its
        context (the 4 tokens ending at it occurred earlier in the sequence: what copying drafts)."""
        out = np.zeros((len(indices), length), bool)
        for r, (k, a, b) in enumerate(self.sequences[i] for i in indices):
            rep = repeats(self.shards[k]["ids"][a:b].tolist())
            out[r, : min(length, len(rep) - 1)] = rep[1:length + 1]
        return out

    def split(self, held_out: float = 0.05) -> tuple[list[int], list[int]]:
        """Sequence indices for training and a held-out tail for evaluation."""
        n_eval = max(1, int(len(self.sequences) * held_out))
        return list(range(len(self.sequences) - n_eval)), list(range(len(self.sequences) - n_eval, len(self.sequences)))

    def token_frequencies(self, vocab_size: int, indices: list[int]) -> np.ndarray:
        """How often each token occurs in the responses of the given sequences."""
        counts = np.zeros(vocab_size, dtype=np.int64)
        for k, a, b in (self.sequences[i] for i in indices):
            s = self.shards[k]
            np.add.at(counts, s["ids"][a:b][s["response"][a:b]], 1)
        return counts

    def check_states(self, layers: tuple[int, ...]) -> None:
        """Refuse to serve a draft that reads the inputs of `layers` from data that does not hold them."""
        if layers and tuple(layers) != self.fused_layers:
            have = f"those of layers {list(self.fused_layers)}" if self.fused_layers else "none"
            raise Clover2Error(f"the draft reads the inputs of target layers {list(layers)}; "
                               f"{', '.join(map(str, self.folders))} holds {have}: prepare the data with "
                               "`fused_states: true` in its data config")

    def batch(self, indices: list[int], *, max_len: int, t2d: torch.Tensor, label_mask: bool = False,
              fused: bool = False) -> Batch:
        """Right-padded tensors for the sequences `indices`, truncated to `max_len` tokens; with
        `label_mask`, answer tokens outside the target's stored top-k after them leave the loss mask;
        with `fused`, `h` holds the fused states instead of the last hidden state."""
        spans = [self.sequences[i] for i in indices]
        T = min(max_len, max(b - a for _, a, b in spans))
        states = FUSED if fused else "hidden"
        B, H, k = len(spans), self.shards[0][states].shape[1], self.shards[0]["topk_ids"].shape[1]
        h = np.zeros((B, T, H), np.float32)
        nxt = np.zeros((B, T), np.int64)
        top_ids = np.zeros((B, T, k), np.int64)
        top_lp = np.full((B, T, k), -np.inf, np.float32)
        mask = np.zeros((B, T), bool)
        for r, (s_i, a, b) in enumerate(spans):
            s, n = self.shards[s_i], min(b - a, T)
            h[r, :n] = s[states][a:a + n]
            nxt[r, :n - 1] = s["ids"][a + 1:a + n]
            top_ids[r, :n] = s["topk_ids"][a:a + n]
            top_lp[r, :n] = s["topk_logp"][a:a + n]
            mask[r, :n - 1] = s["response"][a + 1:a + n]
            if label_mask:
                mask[r, :n - 1] &= (s["topk_ids"][a:a + n - 1] == s["ids"][a + 1:a + n, None]).any(-1)
        nxt_t = torch.from_numpy(nxt)
        return Batch(h=torch.from_numpy(h), next_ids=nxt_t, topk_ids=t2d[torch.from_numpy(top_ids)],
                     topk_p=torch.from_numpy(top_lp).exp(), label_ids=t2d[nxt_t], mask=torch.from_numpy(mask))
