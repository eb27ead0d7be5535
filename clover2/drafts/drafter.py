"""Drafting token trees with a trained draft model (any class in `clover2.drafts.ARCHITECTURES`).

Per step the drafter first brings the draft's sequence state up to date with what the target just
committed (`DraftModel.advance`: fed the target's pre-norm hidden states and the tokens that
followed them, with the draft's own KV cache), then grows the tree depth by depth, one batched
`DraftModel.step` per depth. The drafter owns the tree (a `TreeBuilder`) and each node's state;
the model only computes states and logits.

- a **static** tree (rank paths such as EAGLE-1's 25-node tree): node (r1..rd) takes the rd-th
  most likely token of its parent's draft distribution;
- a **dynamic** tree (EAGLE-2's): each depth expands the `top_k` best nodes of the previous depth
  (by cumulative draft log-probability) into `top_k` children each; all of them join a candidate
  pool, and the `budget` best nodes of the pool form the tree. `depth` counts draft levels (EAGLE-2's
  own `depth` counts the levels after the first: its depth 5 is our 6).

At temperature 0 a node's children are its draft's most likely tokens. At temperature > 0 they are
drawn from the draft's warped distribution q (the target's temperature, top-k and top-p applied to
the draft's logits) without replacement, and each node records the distribution its token was drawn
from, so that verification by recursive rejection sampling keeps the target's distribution exactly.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from weakref import WeakKeyDictionary

import torch

from clover2.decoding.drafter import Drafter
from clover2.decoding.graphs import GraphCache
from clover2.decoding.sampling import SamplingConfig, draw_without_replacement, warp
from clover2.decoding.tree import NO_DRAFT, Draft, Tree, TreeBuilder
from clover2.drafts.base import DraftModel, TreeAttention
from clover2.errors import Clover2Error


@dataclass(frozen=True)
class DynamicTree:
    budget: int = 24  # draft nodes kept (the verification cost grows with it)
    depth: int = 5  # draft depths
    top_k: int = 8  # children tried per expanded node, and nodes expanded per depth

    def __post_init__(self):
        if min(self.budget, self.depth, self.top_k) < 1:
            raise Clover2Error(f"dynamic tree: budget, depth and top_k must be >= 1: {self}")

    @property
    def max_depth(self) -> int:
        """The deepest draft token, as a static `Tree`'s."""
        return self.depth


_GRAPHED: WeakKeyDictionary = WeakKeyDictionary()  # draft model -> its captured (root_logits, step)


def draft_calls(model: DraftModel, *, graphs: bool) -> tuple[Callable, Callable]:
    """The draft's `root_logits` and cache-free `step(parents, tokens, depth)`; with `graphs`, as CUDA
    graphs captured per shape and depth, kept for the model's lifetime."""
    calls = (model.root_logits, lambda parents, tokens, depth: model.step(parents, tokens, depth, cache=None))
    if not graphs:
        return calls
    if model not in _GRAPHED:
        _GRAPHED[model] = tuple(GraphCache(f, enabled=True) for f in calls)
    return _GRAPHED[model]


class ModelDrafter(Drafter):
    needs_hidden = True

    def __init__(self, model: DraftModel, tree: Tree | DynamicTree, sampling: SamplingConfig = SamplingConfig(),
                 *, graphs: bool = False):
        """`graphs`: replay the draft's per-depth calls as CUDA graphs where it can (a GPU, a draft
        whose step reads no cache); otherwise, and always on a CPU, they run eagerly."""
        if isinstance(tree, Tree) and tree.ranks is None:
            raise Clover2Error("a static tree for a draft model must be given as rank paths")
        depth = tree.max_depth if isinstance(tree, Tree) else tree.depth
        if model.max_tree_depth is not None and depth > model.max_tree_depth:
            raise Clover2Error(f"tree depth {depth} exceeds the {model.max_tree_depth} heads "
                               f"of this {model.arch} draft")
        self.model, self.tree, self.sampling = model, tree, sampling
        self.hidden_layers = model.hidden_layers  # the target states it reads (EAGLE-3: three layers' inputs)
        self.device, self.dtype = next(model.parameters()).device, next(model.parameters()).dtype
        # EAGLE-1's step attends to its growing draft cache, which a graph cannot follow: it stays eager
        graphs = graphs and self.device.type == "cuda" and not model.attends_to_tree
        self.root_logits, self.step = draft_calls(model, graphs=graphs)
        self.vocab = model.target_config.vocab_size
        self.begin([], None)

    # -- sequence state ---------------------------------------------------------------------

    def begin(self, prompt_ids: Sequence[int], hidden: torch.Tensor | None) -> None:
        self.cache = self.model.new_cache()
        self.generator = torch.Generator().manual_seed(self.sampling.seed + 1)  # the draft's own draws
        self.pending_h = hidden if hidden is not None else torch.empty(0, self.model.target_config.hidden_size)
        self.pending_next = list(prompt_ids[1:])

    def observe(self, new_ids: Sequence[int], hidden: torch.Tensor | None) -> None:
        self.pending_h = torch.cat([self.pending_h.to(hidden.device), hidden]) if len(self.pending_h) else hidden
        self.pending_next = self.pending_next + list(new_ids)

    def propose(self, ids: Sequence[int]) -> Draft:
        if not self.pending_next:  # a one-token prompt: nothing to draft from yet
            return NO_DRAFT
        h = self.pending_h.to(self.device, self.dtype)[None]  # (1, n, H)
        nxt = torch.tensor(self.pending_next, device=self.device)[None]  # (1, n)
        root = self.model.advance(h, nxt, self.cache)  # the sequence part over the newly committed positions
        self.pending_h, self.pending_next = self.pending_h[:0], []
        growth = _Growth(self, root)
        draft = self._static(growth) if isinstance(self.tree, Tree) else self._dynamic(growth)
        if self.cache.get_seq_length() > growth.committed:  # entries the tree's nodes added (EAGLE-1)
            self.cache.crop(growth.committed - self.cache.get_seq_length())
        return draft

    # -- tree growth ------------------------------------------------------------------------

    def _choose(self, logits: torch.Tensor, k: int) -> list[tuple[list[int], list, list[float]]]:
        """k children of each node from its draft logits `(n, V_draft)`: per node, the tokens (target
        ids), the q each was drawn from (None when greedy) and their log q. Greedy: one batched top-k."""
        if self.sampling.greedy:
            top = torch.log_softmax(logits, -1).topk(k, dim=-1)
            return [(ids, [None] * k, lq) for ids, lq in zip(self.model.d2t[top.indices].tolist(), top.values.tolist())]
        return [self._draw(row, k) for row in logits]

    def _draw(self, logits: torch.Tensor, k: int) -> tuple[list[int], list[torch.Tensor], list[float]]:
        """k children drawn without replacement from one node's warped draft distribution q."""
        q = warp(logits, self.sampling).cpu()
        picks, dists = draw_without_replacement(q, k, self.generator)
        d2t = self.model.d2t.cpu()
        full = [torch.zeros(self.vocab).index_copy_(0, d2t, d) for d in dists]
        return d2t[picks].tolist(), full, [float(q[i].log()) for i in picks]

    def _static(self, g: _Growth) -> Draft:
        tree, children = self.tree, self.tree.children
        placed = {0: 0}  # preset node -> drafted node (sampling can leave nodes out)
        for d in range(tree.max_depth):
            rows = [p for p in range(tree.size) if int(tree.depth[p]) == d and children[p] and p in placed]
            if not rows:
                break
            logits = g.expand([placed[p] for p in rows], d)  # (n, V_draft)
            k = max(tree.ranks[c] for p in rows for c in children[p]) + 1
            for p, (picks, dists, logq) in zip(rows, self._choose(logits, k)):
                for c in children[p]:
                    r = tree.ranks[c]
                    if r < len(picks):
                        placed[c] = g.nodes.add(placed[p], picks[r], score=g.nodes.score[placed[p]] + logq[r],
                                                q=dists[r])
        return g.nodes.build()

    def _dynamic(self, g: _Growth) -> Draft:
        """EAGLE-2's tree. Each depth expands the `top_k` best frontier nodes into `top_k` children each;
        greedy, all top_k x top_k children join the candidate pool, the best `top_k` of them form the
        next frontier, and the tree is the best `budget` nodes of the whole pool."""
        spec, nodes = self.tree, g.nodes
        frontier = [0]
        for d in range(spec.depth):
            logits = g.expand(frontier, d)
            cand = []  # (cumulative log q, parent, token, q), in draw order per parent
            for node, (picks, dists, logq) in zip(frontier, self._choose(logits, spec.top_k)):
                cand += [(nodes.score[node] + lq, node, x, qd) for x, qd, lq in zip(picks, dists, logq)]
            if not self.sampling.greedy:
                # A sampled node may not be kept or dropped for its own token: that would bias what
                # verification sees. Keep every draw (in draw order) up to the budget; choose only
                # which nodes to expand next by their scores.
                cand = cand[: max(0, spec.budget - (len(nodes) - 1))]
            new = [nodes.add(node, x, score=s, q=qd) for s, node, x, qd in cand]
            frontier = sorted(new, key=lambda i: -nodes.score[i])[: spec.top_k]
            if not frontier:
                break
        if not self.sampling.greedy:
            return nodes.build()
        # the best `budget` nodes of the pool; a child never outscores its parent, and ties go to the
        # shallower node, so they form a tree
        return nodes.build(sorted(range(1, len(nodes)), key=lambda i: (-nodes.score[i], nodes.depth[i]))[: spec.budget])


class _Growth:
    """One step's tree under construction and the draft state of each of its nodes."""

    def __init__(self, drafter: ModelDrafter, root: torch.Tensor):
        self.drafter, self.model, self.cache, self.root = drafter, drafter.model, drafter.cache, root  # root: (1, H)
        self.committed = self.cache.get_seq_length()
        self.nodes = TreeBuilder()
        self.states: dict[int, torch.Tensor] = {0: root[0]}  # node -> its draft state (H,)
        self.slot: dict[int, int] = {}  # node -> its entry in the draft cache (drafts that attend to the tree)

    def expand(self, frontier: list[int], depth: int) -> torch.Tensor:
        """Draft logits `(n, V_draft)` of the children of the frontier nodes, all at `depth`."""
        if depth == 0:
            return self.drafter.root_logits(self.root)
        nodes = self.nodes
        parents = torch.stack([self.states[nodes.parent[n]] for n in frontier])
        tokens = torch.tensor([nodes.token[n] for n in frontier], device=parents.device)
        attention, past = None, self.cache.get_seq_length()
        if self.model.attends_to_tree:
            attention = TreeAttention(self.committed, [[self.slot[a] for a in nodes.path(n)[:-1]] for n in frontier])
            self.slot |= {n: past + row for row, n in enumerate(frontier)}
        if attention is None:
            states, logits = self.drafter.step(parents, tokens, depth)
        else:
            states, logits = self.model.step(parents, tokens, depth, cache=self.cache, attention=attention)
        for row, n in enumerate(frontier):
            self.states[n] = states[row]
        return logits
