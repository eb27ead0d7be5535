"""A suffix cache drafter (after SuffixDecoding, Oliaro et al. 2024): no model, only text seen before.

Every prompt and every output the drafter has seen, across generations, is counted into a table of
n-grams and the tokens that followed them. A draft grows best-first from the context's longest
suffix found in the table: a node's estimated probability is the product of the empirical
next-token frequencies along its path (each looked up with the longest suffix of its own context
that the table knows), and the most probable nodes above `min_prob` form the tree. Unlike prompt
lookup it ranks continuations by how often they occurred, and it remembers earlier generations.
"""

from __future__ import annotations

import heapq
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import count

from clover2.decoding.drafter import Drafter, Memory
from clover2.decoding.tree import NO_DRAFT, Draft, TreeBuilder
from clover2.errors import Clover2Error


@dataclass(frozen=True)
class SuffixConfig:
    max_ngram: int = 4  # longest context suffix looked up
    min_ngram: int = 2  # shortest one (single tokens predict too little to pay for verification)
    max_nodes: int = 8  # draft-node budget
    max_depth: int = 8  # longest continuation
    min_prob: float = 0.1  # nodes whose path is estimated less likely than this are not proposed

    def __post_init__(self):
        if not 1 <= self.min_ngram <= self.max_ngram:
            raise Clover2Error(f"need 1 <= min_ngram <= max_ngram, got {self.min_ngram}, {self.max_ngram}")
        if min(self.max_nodes, self.max_depth) < 1 or not 0 < self.min_prob <= 1:
            raise Clover2Error(f"max_nodes and max_depth must be >= 1 and 0 < min_prob <= 1: {self}")


class SuffixCache(Memory):
    """n-gram -> next-token counts over everything seen, shared by the drafters it makes."""

    def __init__(self, config: SuffixConfig = SuffixConfig()):
        self.config = config
        self.counts: dict[tuple[int, ...], Counter] = defaultdict(Counter)

    def add(self, ids: Sequence[int], start: int) -> None:
        """Count the tokens `ids[start:]`, each after the n-grams that precede it."""
        c = self.config
        for j in range(max(start, c.min_ngram), len(ids)):
            for n in range(c.min_ngram, min(c.max_ngram, j) + 1):
                self.counts[tuple(ids[j - n: j])][ids[j]] += 1

    def next_tokens(self, context: Sequence[int]) -> list[tuple[int, float]]:
        """(token, frequency) after the longest suffix of `context` seen before, most frequent first."""
        c = self.config
        for n in range(min(c.max_ngram, len(context)), c.min_ngram - 1, -1):
            seen = self.counts.get(tuple(context[-n:]))
            if seen:
                total = sum(seen.values())
                return [(tok, k / total) for tok, k in seen.most_common()]
        return []

    def drafter(self) -> Drafter:
        """A drafter for one generation, reading and adding to this cache."""
        return SuffixDrafter(self)


class SuffixDrafter(Drafter):
    def __init__(self, cache: SuffixCache):
        self.cache, self.ids, self.memories = cache, [], (cache,)

    def begin(self, prompt_ids, hidden) -> None:
        self.ids = list(prompt_ids)
        self.cache.add(self.ids, 0)

    def observe(self, new_ids, hidden) -> None:
        start = len(self.ids)
        self.ids += list(new_ids)
        self.cache.add(self.ids, start)

    def propose(self, ids: Sequence[int]) -> Draft:
        c = self.cache.config
        ctx, trie, heap, order = list(ids[-c.max_ngram:]), TreeBuilder(), [], count()

        def expand(node: int, path: tuple[int, ...], p: float) -> None:
            for tok, freq in self.cache.next_tokens(ctx + list(path)):
                if p * freq < c.min_prob:
                    break  # most frequent first: the rest are less likely still
                heapq.heappush(heap, (-p * freq, next(order), node, (*path, tok)))

        expand(0, (), 1.0)
        # Best first: a child is never more likely than its parent, so parents are placed first.
        while heap and len(trie) <= c.max_nodes:
            neg_p, _, parent, path = heapq.heappop(heap)
            node = trie.add(parent, path[-1])
            if len(path) < c.max_depth:
                expand(node, path, -neg_p)
        return trie.build() if len(trie) > 1 else NO_DRAFT
