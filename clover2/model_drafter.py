"""Drafting token trees with a trained draft model (Clover-2, Clover-1, EAGLE-1, Medusa-1).

Per step the drafter first brings its own sequence state up to date with what the target just
committed (the *trunk*: Clover's Attention Decoder and Augmenting Block, or EAGLE-1's layer, with
their own KV cache, fed the target's pre-norm hidden states and the tokens that followed them),
then grows the tree depth by depth, one batched draft call per depth:

- a **static** tree (rank paths such as EAGLE-1's 25-node tree): node (r1..rd) takes the rd-th
  most likely token of its parent's draft distribution;
- a **dynamic** tree (EAGLE-2's expansion): each depth expands the `top_k` best frontier nodes by
  cumulative draft log-probability, and the `budget` best nodes overall form the tree.

At temperature 0 a node's children are its draft's most likely tokens. At temperature > 0 they are
drawn from the draft's warped distribution q (the target's temperature, top-k and top-p applied to
the draft's logits) without replacement, and each node records the distribution its token was drawn
from, so that verification by recursive rejection sampling keeps the target's distribution exactly.

Node states: Clover's heads >= 1 are one RNN step per node (state = AD1(parent state, E(token)));
Medusa's heads read the root state only; EAGLE-1 appends one entry per node to its KV cache and
attends to the node's ancestors through a tree mask, like the target's verification.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from clover2.draft import DraftModel
from clover2.drafters import Drafter
from clover2.errors import Clover2Error
from clover2.sampling import SamplingConfig, draw_without_replacement, warp
from clover2.tree import NO_DRAFT, Draft, Tree


@dataclass(frozen=True)
class DynamicTree:
    budget: int = 24  # draft nodes kept (the verification cost grows with it)
    depth: int = 5  # draft depths
    top_k: int = 8  # children tried per expanded node, and nodes expanded per depth

    def __post_init__(self):
        if min(self.budget, self.depth, self.top_k) < 1:
            raise Clover2Error(f"dynamic tree: budget, depth and top_k must be >= 1: {self}")


class ModelDrafter(Drafter):
    needs_hidden = True

    def __init__(self, model: DraftModel, tree: Tree | DynamicTree, sampling: SamplingConfig = SamplingConfig()):
        if isinstance(tree, Tree) and tree.ranks is None:
            raise Clover2Error("a static tree for a draft model must be given as rank paths")
        depth = tree.max_depth if isinstance(tree, Tree) else tree.depth
        if depth > model.config.num_heads and model.config.arch == "medusa":
            raise Clover2Error(f"tree depth {depth} exceeds Medusa's {model.config.num_heads} heads")
        self.model, self.tree, self.sampling = model, tree, sampling
        self.device = next(model.parameters()).device
        self.vocab = model.target_config.vocab_size

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
        m = self.model
        h = self.pending_h.to(self.device, torch.float32)[None]  # (1, n, H)
        nxt = torch.tensor(self.pending_next, device=self.device)[None]  # (1, n)
        if not self.pending_next:  # a one-token prompt: nothing to draft from yet
            return NO_DRAFT
        root = m.advance(h, nxt, self.cache)  # trunk over the newly committed positions
        self.pending_h, self.pending_next = self.pending_h[:0], []
        committed = self.cache.get_seq_length()
        expand = m.expander(root, self.cache)
        draft = self._static(expand) if isinstance(self.tree, Tree) else self._dynamic(expand)
        if self.cache.get_seq_length() > committed:  # EAGLE-1's entries for tree nodes
            self.cache.crop(committed - self.cache.get_seq_length())
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

    def _static(self, expand) -> Draft:
        tree = self.tree
        children: dict[int, list[int]] = {}
        for i in range(1, tree.size):
            children.setdefault(tree.parents[i], []).append(i)
        parent, token, qs, score = [-1], [0], [], [0.0]  # the tree actually drafted (sampling can leave nodes out)
        placed = {0: 0}  # preset node -> drafted node
        for d in range(tree.max_depth):
            rows = [p for p in range(tree.size) if int(tree.depth[p]) == d and p in children and p in placed]
            if not rows:
                break
            nodes = [placed[p] for p in rows]
            toks = torch.tensor([token[n] for n in nodes], device=self.device)
            logits = expand(nodes, [parent[n] for n in nodes], toks, d)  # (n, V_draft)
            k = max(tree.ranks[c] for p in rows for c in children[p]) + 1
            for p, (picks, dists, logq) in zip(rows, self._choose(logits, k)):
                for c in children[p]:
                    if tree.ranks[c] < len(picks):
                        placed[c] = len(parent)
                        parent.append(placed[p])
                        token.append(picks[tree.ranks[c]])
                        qs.append(dists[tree.ranks[c]])
                        score.append(score[placed[p]] + logq[tree.ranks[c]])
        return _draft_parts(parent, token, qs, score, list(range(1, len(parent))))

    def _dynamic(self, expand) -> Draft:
        spec = self.tree
        parent, token, score, depth, qs = [-1], [0], [0.0], [0], [None]
        frontier = [0]
        for d in range(spec.depth):
            toks = torch.tensor([token[i] for i in frontier], device=self.device)
            logits = expand(frontier, [parent[i] for i in frontier], toks, d)
            cand = []  # (cumulative log q, parent, token, q), in draw order per parent
            for node, (picks, dists, logq) in zip(frontier, self._choose(logits, spec.top_k)):
                cand += [(score[node] + lq, node, x, qd) for x, qd, lq in zip(picks, dists, logq)]
            if self.sampling.greedy:  # EAGLE-2: the best candidates across the frontier
                cand = sorted(cand, key=lambda c: -c[0])[: spec.top_k]
            else:
                # A sampled node may not be kept or dropped for its own token: that would bias what
                # verification sees. Keep every draw (in draw order) up to the budget; choose only
                # which nodes to expand next by their scores.
                cand = cand[: max(0, spec.budget - (len(parent) - 1))]
            new = []
            for s, node, x, qd in cand:
                parent.append(node), token.append(x), score.append(s), depth.append(d + 1), qs.append(qd)
                new.append(len(parent) - 1)
            frontier = sorted(new, key=lambda i: -score[i])[: spec.top_k]
            if not frontier:
                break
        if self.sampling.greedy:  # the best `budget` nodes; a child never outscores its parent
            keep = sorted(range(1, len(parent)), key=lambda i: (-score[i], depth[i]))[: spec.budget]
            keep.sort(key=lambda i: (depth[i], i))
        else:
            keep = list(range(1, len(parent)))
        return _draft_parts(parent, token, qs[1:], score, keep)


def _draft_parts(parent: list[int], token: list[int], qs: list, score: list[float], keep: list[int]) -> Draft:
    """The draft of nodes `keep` (in topological order): tree, tokens, q (None when greedy), scores."""
    index = {0: 0} | {old: k + 1 for k, old in enumerate(keep)}
    tree = Tree(parents=(-1, *(index[parent[i]] for i in keep)))
    tokens = torch.tensor([token[i] for i in keep], dtype=torch.long)
    chosen = [qs[i - 1] for i in keep]
    q = torch.stack(chosen) if chosen and chosen[0] is not None else None
    return Draft(tree, tokens, q, torch.tensor([score[i] for i in keep]))
