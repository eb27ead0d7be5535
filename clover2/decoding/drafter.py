"""Drafters (the paper's q): propose a token tree for the current state, observe what was kept.

The decoder calls `begin` once per sequence, then `verified` and `observe` for the prefill's first
token (the step of an empty tree), then per step `propose`, `verified` (the target's logits over the
proposed tree, for drafters that learn from them) and `observe` (what was kept). A drafter
that reads the target's hidden states sets `needs_hidden`; it then receives, for every position
whose KV entry was committed, the last hidden state before the final norm, or with `hidden_layers`
the inputs of those target layers concatenated (EAGLE-3's fused features). Implementations:
`NoDrafter` (plain decoding), the training-free `clover2.decoding.prompt_lookup`,
`clover2.decoding.suffix` and `clover2.decoding.token_recycling`, `clover2.drafts.ModelDrafter`
(the trained draft models) and `clover2.decoding.union` (several drafters in one tree).

Some drafters learn across generations (the suffix cache, Token Recycling): each generation's
drafter reads and adds to a `Memory` shared by all of them, which it lists in `memories`, so that a
benchmark can take an untimed warm-up run and put the memory back as it was before it.
"""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from collections.abc import Sequence

import torch

from clover2.decoding.tree import NO_DRAFT, Draft


class Memory:
    """What a family of drafters learns across generations; `snapshot` and `restore` save and put it back."""

    def snapshot(self) -> dict:
        return copy.deepcopy(vars(self))

    def restore(self, saved: dict) -> None:
        vars(self).update(copy.deepcopy(saved))


class Drafter(ABC):
    needs_hidden: bool = False  # does `observe` need the target's pre-norm hidden states?
    hidden_layers: tuple[int, ...] = ()  # whose inputs `hidden` holds instead (Target.forward's `layers`)
    reads_logits: bool = False  # does `verified` learn from the target's logits over the tree?
    memories: tuple[Memory, ...] = ()  # what it learns from and adds to beyond this generation

    def begin(self, prompt_ids: Sequence[int], hidden: torch.Tensor | None) -> None:
        """A new sequence: `hidden` `(P - 1, H)` covers every prompt position but the last."""

    @abstractmethod
    def propose(self, ids: Sequence[int]) -> Draft:
        """A draft tree rooted at `ids[-1]`, the last committed token."""

    def verified(self, root: int, draft: Draft, logits: torch.Tensor) -> None:
        """The target's logits `(N, V)` after the root and after each node of the draft just verified."""

    def observe(self, new_ids: Sequence[int], hidden: torch.Tensor | None) -> None:
        """Tokens committed this step; `hidden` `(len(new_ids), H)` at the positions now cached."""


class NoDrafter(Drafter):
    """Plain autoregressive decoding: the empty tree, verified by the same forward path."""

    def propose(self, ids: Sequence[int]) -> Draft:
        return NO_DRAFT


class Recording(Drafter):
    """Passes a drafter through, keeping every draft it proposes (tree fitting, traced steps)."""

    def __init__(self, inner: Drafter):
        self.inner, self.drafts = inner, []
        self.needs_hidden, self.hidden_layers, self.reads_logits = (inner.needs_hidden, inner.hidden_layers,
                                                                    inner.reads_logits)
        self.memories = inner.memories

    def begin(self, prompt_ids, hidden):
        self.inner.begin(prompt_ids, hidden)

    def propose(self, ids) -> Draft:
        draft = self.inner.propose(ids)
        self.drafts.append(draft)
        return draft

    def observe(self, new_ids, hidden):
        self.inner.observe(new_ids, hidden)

    def verified(self, root, draft, logits):
        self.inner.verified(root, draft, logits)
