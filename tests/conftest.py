"""Shared fixtures: tiny random targets of three families (no downloads), and helpers."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, Gemma3TextConfig, LlamaConfig, Qwen2Config

from clover2.decoding.target import Target, with_kernels

VOCAB = 96


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


def tiny_target(family: str, seed: int = 0, dtype=torch.float32, vocab: int = VOCAB, kernels: str = "auto") -> Target:
    """A random target; `kernels` as in `load_target` (auto: the kernels measured fastest here, the default path)."""
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


def hf_greedy(target: Target, prompt: list[int], max_new_tokens: int, eos: int | None = None) -> list[int]:
    """Hugging Face's own greedy decoding: the reference every test compares against."""
    with torch.inference_mode():
        ids = torch.tensor([prompt], device=target.device)
        out = target.model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                    max_new_tokens=max_new_tokens,
                                    eos_token_id=eos, pad_token_id=0)
    return out[0, len(prompt):].tolist()
