"""Training-time test (EAGLE-3's): a draft whose deeper tree nodes re-enter its own decoder layer is
trained on k unrolled steps of that recurrence, so that it learns from its own states as decoding
feeds them back, not only from the target's.

Step 0 reads the target's features at every position t with the token x_{t+1}, causally, as the
draft's sequence part does when decoding. Step j >= 1 feeds step j-1's output at t back with the
token x_{t+1+j} (teacher-forced: on the path that verification accepts, the drafted tokens are the
data's) at position t + j, and attends to step 0's keys at positions <= t and to its own earlier
steps' keys at t: exactly what a tree node at depth j attends to when decoding (the committed
sequence, its ancestors, itself; `clover2.drafts.base.TreeAttention`).

Run through Hugging Face's full attention over all the steps' keys, step j would score (j + 1) T keys
per query where t + 1 + j are visible. `unrolled_attention` (registered with transformers'
attention interface, as the official trainer computes it by hand) scores step 0's keys causally and
each later step's key at the query's own position only.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import nn
from transformers import AttentionInterface

NAME = "clover2_unrolled"


def unrolled_attention(module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                       attention_mask, *, scaling: float, unrolled: dict, dropout: float = 0.0, **_):
    """Attention of one unrolled step (`query`, `key`, `value`: `(B, heads, n, d)`, GQA heads allowed);
    `unrolled` keeps each layer's keys and values of the earlier steps of this forward. Returns
    `(B, n, heads, d)` as transformers' attention functions do; the 4-D mask is not used (none is made)."""
    steps = unrolled.setdefault(module, [])
    steps.append((key, value))
    n, rep = query.shape[2], query.shape[1] // key.shape[1]
    kv = [(k[:, :, :n].repeat_interleave(rep, 1), v[:, :, :n].repeat_interleave(rep, 1)) for k, v in steps]
    (k0, v0), later = kv[0], kv[1:]
    scores = (query @ k0.transpose(2, 3)).float() * scaling  # (B, h, n, n): step 0's keys, causal
    future = torch.ones(n, n, dtype=torch.bool, device=query.device).triu(1)
    scores = scores.masked_fill(future, torch.finfo(scores.dtype).min)
    own = [((query * k).sum(-1).float() * scaling)[..., None] for k, _ in later]  # (B, h, n, 1) each
    weights = torch.softmax(torch.cat([scores, *own], -1), -1).to(query.dtype)
    out = weights[..., :n] @ v0
    for i, (_, v) in enumerate(later):
        out = out + weights[..., n + i, None] * v
    return out.transpose(1, 2).contiguous(), None


AttentionInterface.register(NAME, unrolled_attention)


@contextlib.contextmanager
def unrolling(stack: nn.Module) -> Iterator[dict]:
    """Within it, `stack` (a `decoder_stack`) attends as `unrolled_attention`; yields the keyword
    arguments to pass each of its calls (`unrolled=`: the store of the steps' keys and values)."""
    previous = stack.config._attn_implementation
    stack.config._attn_implementation = NAME
    try:
        yield {"unrolled": {}}
    finally:
        stack.config._attn_implementation = previous
