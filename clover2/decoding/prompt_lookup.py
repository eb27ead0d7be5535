"""Prompt lookup decoding (Saxena 2023) as a tree drafter: no model, only the context.

The continuations of earlier occurrences of the last n-gram are merged into a trie; when the node
budget forces a choice, the nodes supported by the most matches are kept (a node never has more
support than its parent, so the kept set is always a tree).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from clover2.decoding.drafter import Drafter
from clover2.decoding.tree import NO_DRAFT, Draft, TreeBuilder
from clover2.errors import Clover2Error


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
    """Continuations of the most recent earlier occurrences of the context's last n-gram, as a trie."""

    def __init__(self, config: PromptLookupConfig = PromptLookupConfig()):
        self.config = config

    def propose(self, ids: Sequence[int]) -> Draft:
        c = self.config
        ctx = np.asarray(ids, dtype=np.int64)
        starts, n = self._matches(ctx)
        if not starts.size:
            return NO_DRAFT
        trie, node_of, support = TreeBuilder(), {}, [0]  # node_of: (parent, token) -> node
        for s in starts[::-1][: c.max_matches]:  # most recent match first
            node = 0
            for tok in ctx[s + n: s + n + c.max_depth].tolist():
                if (node, tok) not in node_of:
                    node_of[node, tok] = trie.add(node, tok)
                    support.append(0)
                node = node_of[node, tok]
                support[node] += 1
        chosen = sorted(range(1, len(trie)), key=lambda i: (-support[i], trie.depth[i], i))[: c.max_nodes]
        return trie.build(chosen)

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
