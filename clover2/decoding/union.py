"""One tree from several drafters: copying and drafting in the same verification forward.

Copy-based drafters (the suffix cache, prompt lookup) predict the tokens that repeat their context
and nothing else; a trained draft predicts the others and copies poorly (on the benchmark a third
of the target's tokens repeat their context, and a 90-step draft predicted those at 0.06 against
0.22 for the rest). `Union` asks every source for its draft, keeps each source's first
`budgets[name]` nodes in that source's own order of preference (a model draft's by cumulative
log-probability, a copy draft's breadth first: either way a subtree), and merges them into one
trie: where two sources propose the same token path they share the node. Greedy acceptance then
takes the longest path any source got right.

Merging is exact only for deterministic proposals: at temperature > 0 the nodes of a draft are
drawn from its q, and a node proposed by two sources has no single q that recursive rejection
sampling could use. So with `one_source` the union proposes the first source's draft that is not
empty instead (prompt lookup where the context repeats itself, the draft elsewhere): still one
source per step, which keeps the target's distribution exactly.

`calibrating`: every node's rank in each source's order of preference is kept beside each draft
(`ranks`, one list per step), which is what fitting the budgets to the machine needs (`clover2.measure.fit`).

Per step, `accepted` records which source proposed each accepted draft token (read off the draft
along the committed tokens): what each source contributes to tau. A node that several sources
proposed counts for the first of them in `sources`' order (the copy sources come before the draft
in `clover2.drafts.methods`, so the draft is credited only with tokens that copying missed).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

import torch

from clover2.decoding.drafter import Drafter
from clover2.decoding.prompt_lookup import PromptLookupDrafter
from clover2.decoding.suffix import SuffixCache
from clover2.decoding.tree import NO_DRAFT, Draft, TreeBuilder
from clover2.errors import Clover2Error


def preference(draft: Draft) -> list[int]:
    """A draft's nodes (1..n), most preferred first; every prefix of the order is a subtree.

    With scores (a model's cumulative log-probabilities), best first, ties to the shallower node (a
    child never outscores its parent); without, breadth first (parents precede children)."""
    nodes = list(range(1, draft.tree.size))
    if draft.scores is None:
        return nodes
    return sorted(nodes, key=lambda i: (-float(draft.scores[i - 1]), draft.tree.depths[i], i))


class Union(Drafter):
    def __init__(self, sources: Mapping[str, Drafter], budgets: Mapping[str, int] | None = None, *,
                 one_source: bool = False, calibrating: bool = False):
        """`sources`: name -> drafter; `budgets`: name -> most nodes kept from it (default: all it proposes)."""
        self.sources, self.budgets = dict(sources), dict(budgets or {})
        self.one_source, self.calibrating = one_source, calibrating
        self.needs_hidden = any(d.needs_hidden for d in self.sources.values())
        reads = {d.hidden_layers for d in self.sources.values() if d.needs_hidden}
        if len(reads) > 1:
            raise Clover2Error(f"the drafters of a union read different target states ({sorted(reads)}): one "
                               "forward returns one kind, so combine drafts that read the same")
        self.hidden_layers = next(iter(reads), ())
        self.reads_logits = any(d.reads_logits for d in self.sources.values())
        self.memories = tuple(dict.fromkeys(m for d in self.sources.values() for m in d.memories))
        self.seconds: dict[str, list[float]] = {name: [] for name in self.sources}  # per source, per step
        self.ranks: list[list[dict[str, int]]] = []  # calibrating: per step, per node, its rank in each source
        self.accepted: list[tuple[str, ...]] = []  # per step, the source of each accepted draft token
        self.draft, self.origin = None, []  # the draft being verified (None: the prefill), each node's source

    def begin(self, prompt_ids, hidden):
        for d in self.sources.values():
            d.begin(prompt_ids, hidden if d.needs_hidden else None)

    def propose(self, ids: Sequence[int]) -> Draft:
        drafts = {}
        for name, d in self.sources.items():
            start = time.perf_counter()
            drafts[name] = d.propose(ids)
            self.seconds[name].append(time.perf_counter() - start)
            if self.one_source and drafts[name].tree.size > 1:
                self.draft, self.origin = drafts[name], [name] * (drafts[name].tree.size - 1)
                return self.draft
        self.draft, self.origin = (NO_DRAFT, []) if self.one_source else self._merge(drafts)
        return self.draft

    def _merge(self, drafts: dict[str, Draft]) -> tuple[Draft, list[str]]:
        """The merged trie, and the first source that proposed each of its nodes."""
        trie, node_of, ranks, first = TreeBuilder(), {}, [{}], [""]  # node_of: (parent, token) -> node
        for name, draft in drafts.items():
            order = preference(draft)
            kept = sorted(order[: self.budgets.get(name, len(order))])  # parents first
            rank = {i: r for r, i in enumerate(order)}
            placed = {0: 0}
            for i in kept:
                key = (placed[draft.tree.parents[i]], int(draft.tokens[i - 1]))
                if key not in node_of:
                    node_of[key] = trie.add(*key)
                    ranks.append({})
                    first.append(name)
                placed[i] = node_of[key]
                ranks[placed[i]][name] = rank[i]
        order = trie.order()
        if self.calibrating:
            self.ranks.append([ranks[i] for i in order])
        return trie.build(order), [first[i] for i in order]

    def verified(self, root, draft, logits):
        for d in self.sources.values():
            d.verified(root, draft, logits)

    def observe(self, new_ids: Sequence[int], hidden: torch.Tensor | None):
        for d in self.sources.values():
            d.observe(new_ids, hidden if d.needs_hidden else None)
        if self.draft is not None:  # a step's (not the prefill's): follow the committed tokens down its draft
            children, tokens, node, sources = self.draft.tree.children, self.draft.tokens.tolist(), 0, []
            for token in new_ids:
                node = next((c for c in children[node] if tokens[c - 1] == token), None)
                if node is None:
                    break  # the bonus token: the target's own
                sources.append(self.origin[node - 1])
            self.accepted.append(tuple(sources))
        self.draft = None


def copy_drafters(suffix: SuffixCache) -> dict[str, Drafter]:
    """The copy-based drafters for one generation; `suffix` remembers every generation it served."""
    return {"suffix": suffix.drafter(), "pld": PromptLookupDrafter()}
