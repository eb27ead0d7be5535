"""Drafting token trees with a trained draft model (any class in `clover2.drafts.ARCHITECTURES`).

Per step the drafter first brings the draft's sequence state up to date with what the target just
committed (`DraftModel.advance`: fed the target's pre-norm hidden states and the tokens that
followed them, with the draft's own KV cache), then grows the tree depth by depth, one batched
`DraftModel.step` per depth. The drafter owns the tree and each node's state; the model only
computes states and logits.

- a **static** tree (rank paths such as EAGLE-1's 25-node tree): node (r1..rd) takes the rd-th
  most likely token of its parent's draft distribution;
- a **dynamic** tree (EAGLE-2's): each depth expands the `top_k` best nodes of the previous depth
  (by cumulative draft log-probability) into `top_k` children each; all of them join a candidate
  pool, and the `budget` best nodes of the pool form the tree. `depth` counts draft levels (EAGLE-2's
  own `depth` counts the levels after the first: its depth 5 is our 6).

At temperature 0 a node's children are its draft's most likely tokens, and the tree grows on the
draft's device (`ModelDrafter._greedy`): on a GPU the host does not wait for the draft while it
drafts. At temperature > 0 they are drawn from the draft's warped distribution q (the target's
temperature, top-k and top-p applied to the draft's logits) without replacement, on the host with
the drafter's own `torch.Generator` (a `TreeBuilder`), and each node records the distribution its
token was drawn from, so that verification by recursive rejection sampling keeps the target's
distribution exactly.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from weakref import WeakKeyDictionary

import torch

from clover2.decoding.drafter import Drafter
from clover2.decoding.graphs import GraphCache
from clover2.decoding.sampling import SamplingConfig, draw_without_replacement, warp
from clover2.decoding.transfer import to_device
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
        self.plan = _Plan.of(tree, self.device) if isinstance(tree, Tree) else None  # greedy growth's indices
        self.begin([], None)

    # -- sequence state ---------------------------------------------------------------------

    def begin(self, prompt_ids: Sequence[int], hidden: torch.Tensor | None) -> None:
        self.cache = self.model.new_cache()
        self.generator = torch.Generator().manual_seed(self.sampling.seed + 1)  # the draft's own draws
        self.pending_h = hidden if hidden is not None else torch.empty(0, self.model.target_config.hidden_size)
        self.pending_next = list(prompt_ids[1:])

    def observe(self, new_ids: Sequence[int], hidden: torch.Tensor | None) -> None:
        old = to_device(self.pending_h, hidden.device)
        self.pending_h = torch.cat([old, hidden]) if len(old) else hidden
        self.pending_next = self.pending_next + list(new_ids)

    def propose(self, ids: Sequence[int]) -> Draft:
        if not self.pending_next:  # a one-token prompt: nothing to draft from yet
            return NO_DRAFT
        h = to_device(self.pending_h, self.device, self.dtype)[None]  # (1, n, H)
        nxt = to_device(self.pending_next, self.device)[None]  # (1, n)
        root = self.model.advance(h, nxt, self.cache)  # the sequence part over the newly committed positions
        self.pending_h, self.pending_next = self.pending_h[:0], []
        committed = self.cache.get_seq_length()
        if self.sampling.greedy:
            draft = self._greedy(root)
        else:
            growth = _Growth(self, root)
            draft = self._static(growth) if isinstance(self.tree, Tree) else self._dynamic(growth)
        if self.cache.get_seq_length() > committed:  # entries the tree's nodes added (EAGLE-1)
            self.cache.crop(committed - self.cache.get_seq_length())
        return draft

    # -- tree growth ------------------------------------------------------------------------

    def _greedy(self, root: torch.Tensor) -> Draft:
        """The greedy tree, grown where the draft runs: per depth one batched step and one top-k over
        every expanded node's children; which candidates become nodes, and which are expanded next,
        is chosen by index (a static tree's `_Plan`, or the `top_k` best cumulative scores, EAGLE-2's
        way), so the host waits on nothing here, except for a dynamic tree's shape, read once at the end."""
        static = isinstance(self.tree, Tree)
        plan = self.plan
        depths = self.tree.max_depth if static else self.tree.depth
        committed, device = self.cache.get_seq_length(), root.device
        logits, states = self.root_logits(root), root  # the expanded nodes' children's logits, their states
        score = torch.zeros(1, dtype=torch.float64, device=device)  # cumulative log q of each expanded node
        visible = torch.zeros(1, 0, dtype=torch.bool, device=device)  # the draft-cache tree entries each one sees
        pool_id = torch.zeros(1, dtype=torch.long, device=device)  # its index in the candidate pool (root: 0)
        tokens, scores, parents, pooled = [], [], [], 1
        for d in range(depths):
            k = plan.k[d] if static else self.tree.top_k
            top = torch.log_softmax(logits, -1).topk(k, dim=-1)
            cand_token = self.model.d2t[top.indices].flatten()  # row-major: expanded node x rank
            cand_score = (score[:, None] + top.values.double()).flatten()
            if static:
                tokens.append(cand_token[plan.keep[d]])
                scores.append(cand_score[plan.keep[d]])
                expand = plan.expand[d]
            else:  # every candidate joins the pool; the `top_k` best are expanded
                tokens.append(cand_token)
                scores.append(cand_score)
                parents.append(pool_id.repeat_interleave(k))
                first, pooled = pooled, pooled + len(cand_token)
                expand = torch.sort(-cand_score, stable=True).indices[:self.tree.top_k]
                pool_id = first + expand
            if d + 1 == depths or not len(expand):
                break
            row = expand // k  # the expanded nodes' parents, among this depth's rows
            score, node_token = cand_score[expand], cand_token[expand]
            if self.model.attends_to_tree:
                if d:  # the parent's own entry and what it saw (the root, at depth 0, has no entry)
                    visible = torch.cat([visible[row], row[:, None] == torch.arange(len(states), device=device)], 1)
                else:
                    visible = visible.new_zeros(len(row), 0)
                states, logits = self.model.step(states[row], node_token, d + 1, cache=self.cache,
                                                 attention=TreeAttention(committed, visible))
            else:
                states, logits = self.step(states[row], node_token, d + 1)
        tokens, scores = torch.cat(tokens), torch.cat(scores)
        if static:
            return Draft(self.tree, tokens[plan.order], None, scores[plan.order].float())
        # the best `budget` candidates, in pool order (by depth, then as drawn); a child never outscores
        # its parent, and ties go to the earlier (shallower) candidate, so they form a tree
        keep = torch.sort(-scores, stable=True).indices[:self.tree.budget].sort().values
        renumber = torch.zeros(pooled, dtype=torch.long, device=device)
        renumber[keep + 1] = torch.arange(1, len(keep) + 1, device=device)
        tree = Tree(parents=(-1, *renumber[torch.cat(parents)[keep]].tolist()))  # the one read: the tree's shape
        return Draft(tree, tokens[keep], None, scores[keep].float())

    # -- sampled growth: on the host, where the draws and their explicit generator live -------

    def _draw(self, logits: torch.Tensor, k: int) -> list[tuple[list[int], list[torch.Tensor], list[float]]]:
        """Up to k children of each node, drawn without replacement from its warped draft distribution
        q (logits `(n, V_draft)`): per node, the tokens (target ids), the q each was drawn from, their log q."""
        d2t, out = self.model.d2t.cpu(), []
        for q in warp(logits, self.sampling).cpu():
            picks, dists = draw_without_replacement(q, k, self.generator)
            full = [torch.zeros(self.vocab).index_copy_(0, d2t, d) for d in dists]
            out.append((d2t[picks].tolist(), full, [float(q[i].log()) for i in picks]))
        return out

    def _static(self, g: _Growth) -> Draft:
        tree, children = self.tree, self.tree.children
        placed = {0: 0}  # preset node -> drafted node (a q with fewer than k tokens leaves nodes out)
        for d in range(tree.max_depth):
            rows = [p for p in range(tree.size) if tree.depths[p] == d and children[p] and p in placed]
            if not rows:
                break
            logits = g.expand([placed[p] for p in rows], d)  # (n, V_draft)
            k = max(tree.ranks[c] for p in rows for c in children[p]) + 1
            for p, (picks, dists, logq) in zip(rows, self._draw(logits, k)):
                for c in children[p]:
                    r = tree.ranks[c]
                    if r < len(picks):
                        placed[c] = g.nodes.add(placed[p], picks[r], score=g.nodes.score[placed[p]] + logq[r],
                                                q=dists[r])
        return g.nodes.build()

    def _dynamic(self, g: _Growth) -> Draft:
        """EAGLE-2's tree, sampled: each depth expands the `top_k` best frontier nodes into `top_k` drawn
        children each. A sampled node may not be kept or dropped for its own token (that would bias
        what verification sees): every draw is kept, in draw order, up to the budget, and the scores
        choose only which nodes to expand next."""
        spec, nodes = self.tree, g.nodes
        frontier = [0]
        for d in range(spec.depth):
            logits = g.expand(frontier, d)
            cand = []  # (cumulative log q, parent, token, q), in draw order per parent
            for node, (picks, dists, logq) in zip(frontier, self._draw(logits, spec.top_k)):
                cand += [(nodes.score[node] + lq, node, x, qd) for x, qd, lq in zip(picks, dists, logq)]
            cand = cand[: max(0, spec.budget - (len(nodes) - 1))]
            new = [nodes.add(node, x, score=s, q=qd) for s, node, x, qd in cand]
            frontier = sorted(new, key=lambda i: -nodes.score[i])[: spec.top_k]
            if not frontier:
                break
        return nodes.build()


@dataclass(frozen=True)
class _Plan:
    """How greedy growth reads a static tree. At depth d the rows are the nodes at depth d that have
    children (the root at 0), each offering its `k[d]` best tokens: candidates numbered row x k + rank.
    `keep[d]`: the candidates that are the tree's nodes at depth d + 1 (by depth, in node order);
    `expand[d]`: those that are the next depth's rows; `order`: the kept candidates of all depths,
    concatenated, put in node order."""

    k: tuple[int, ...]
    keep: tuple[torch.Tensor, ...]
    expand: tuple[torch.Tensor, ...]
    order: torch.Tensor

    @classmethod
    def of(cls, tree: Tree, device: torch.device) -> _Plan:
        children, levels = tree.children, [[] for _ in range(tree.max_depth + 1)]
        for i, d in enumerate(tree.depths):
            levels[d].append(i)
        ks, keep, expand, rows = [], [], [], [0]
        for d in range(tree.max_depth):
            k = max(tree.ranks[c] for p in rows for c in children[p]) + 1
            where = {c: r * k + tree.ranks[c] for r, p in enumerate(rows) for c in children[p]}
            ks.append(k)
            keep.append(torch.tensor([where[c] for c in levels[d + 1]], device=device))
            rows = [c for c in levels[d + 1] if children[c]]
            expand.append(torch.tensor([where[c] for c in rows], dtype=torch.long, device=device))
        position = {c: i for i, c in enumerate(c for level in levels[1:] for c in level)}
        order = torch.tensor([position[i] for i in range(1, tree.size)], dtype=torch.long, device=device)
        return cls(tuple(ks), tuple(keep), tuple(expand), order)


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
            visible = torch.zeros(len(frontier), past - self.committed, dtype=torch.bool)
            for row, n in enumerate(frontier):
                visible[row, [self.slot[a] - self.committed for a in nodes.path(n)[:-1]]] = True
            attention = TreeAttention(self.committed, visible.to(parents.device))
            self.slot |= {n: past + row for row, n in enumerate(frontier)}
        if attention is None:
            states, logits = self.drafter.step(parents, tokens, depth)
        else:
            states, logits = self.model.step(parents, tokens, depth, cache=self.cache, attention=attention)
        for row, n in enumerate(frontier):
            self.states[n] = states[row]
        return logits
