"""Drafters (the paper's q): propose a token tree for the current state, observe what was kept.

The decoder calls `begin` once per sequence, then per step `propose` and `observe`. A drafter
that reads the target's hidden states sets `needs_hidden`; it then receives the last hidden
state before the final norm for every position whose KV entry was committed.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from clover2.errors import Clover2Error
from clover2.tree import NO_DRAFT, Draft, Tree


class Drafter(ABC):
    needs_hidden: bool = False  # does `observe` need the target's pre-norm hidden states?

    def begin(self, prompt_ids: Sequence[int], hidden: torch.Tensor | None) -> None:
        """A new sequence: `hidden` `(P - 1, H)` covers every prompt position but the last."""

    @abstractmethod
    def propose(self, ids: Sequence[int]) -> Draft:
        """A draft tree rooted at `ids[-1]`, the last committed token."""

    def observe(self, new_ids: Sequence[int], hidden: torch.Tensor | None) -> None:
        """Tokens committed this step; `hidden` `(len(new_ids), H)` at the positions now cached."""


class NoDrafter(Drafter):
    """Plain autoregressive decoding: the empty tree, verified by the same forward path."""

    def propose(self, ids: Sequence[int]) -> Draft:
        return NO_DRAFT


@dataclass(frozen=True)
class PromptLookupConfig:
    # Defaults tuned on configs/prompts/foundation.jsonl on a 2-core CPU, where verifying 8 tokens
    # costs ~1.9x one decode step in fp32: single-token matches are too often wrong to pay.
    max_ngram: int = 3  # longest suffix n-gram looked up in the context
    min_ngram: int = 2  # shortest one tried when longer ones have no match
    max_depth: int = 6  # draft tokens along one continuation
    max_matches: int = 3  # most recent matches whose continuations form the tree
    max_nodes: int = 8  # draft-node budget (verification cost grows with it)

    def __post_init__(self):
        if not 1 <= self.min_ngram <= self.max_ngram:
            raise Clover2Error(f"need 1 <= min_ngram <= max_ngram, got {self.min_ngram}, {self.max_ngram}")
        if min(self.max_depth, self.max_matches, self.max_nodes) < 1:
            raise Clover2Error(f"max_depth, max_matches and max_nodes must be >= 1: {self}")


class PromptLookupDrafter(Drafter):
    """Prompt lookup decoding as a tree: continuations of earlier occurrences of the last n-gram.

    The continuations of the most recent matches are merged into a trie; when the budget
    forces a choice, the nodes supported by the most matches are kept (a node never has more
    support than its parent, so the kept set is always a tree).
    """

    def __init__(self, config: PromptLookupConfig = PromptLookupConfig()):
        self.config = config

    def propose(self, ids: Sequence[int]) -> Draft:
        c = self.config
        ctx = np.asarray(ids, dtype=np.int64)
        starts, n = self._matches(ctx)
        if not starts.size:
            return NO_DRAFT
        # Trie of continuations, most recent match first: key (parent, token) -> node.
        nodes: dict[tuple[int, int], int] = {}
        parent_of, token_of, support = [-1], [-1], [0]
        for s in starts[::-1][: c.max_matches]:
            parent = 0
            for tok in ctx[s + n: s + n + c.max_depth].tolist():
                key = (parent, tok)
                if key not in nodes:
                    nodes[key] = len(token_of)
                    parent_of.append(parent), token_of.append(tok), support.append(0)
                parent = nodes[key]
                support[parent] += 1
        depth = [0] * len(token_of)
        for i in range(1, len(token_of)):
            depth[i] = depth[parent_of[i]] + 1
        chosen = sorted(range(1, len(token_of)), key=lambda i: (-support[i], depth[i], i))[: c.max_nodes]
        chosen.sort(key=lambda i: (depth[i], i))  # parents before children
        new_index = {0: 0} | {old: k + 1 for k, old in enumerate(chosen)}
        tree = Tree(parents=(-1, *(new_index[parent_of[i]] for i in chosen)))
        return Draft(tree, torch.tensor([token_of[i] for i in chosen], dtype=torch.long))

    def _matches(self, ctx: np.ndarray) -> tuple[np.ndarray, int]:
        """Start positions of earlier occurrences of the longest matching suffix n-gram."""
        for n in range(self.config.max_ngram, self.config.min_ngram - 1, -1):
            if len(ctx) <= n:
                continue
            # Windows of ctx[:-1] exclude the suffix itself and always have a next token.
            windows = np.lib.stride_tricks.sliding_window_view(ctx[:-1], n)
            starts = np.flatnonzero((windows == ctx[-n:]).all(1))
            if starts.size:
                return starts, n
        return np.empty(0, dtype=np.int64), 0
