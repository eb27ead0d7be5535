"""Drafting token trees with a trained draft model (Clover-2, Clover-1, EAGLE-1, Medusa-1).

Per step the drafter first brings its own sequence state up to date with what the target just
committed (the *trunk*: Clover's Attention Decoder and Augmenting Block, or EAGLE-1's layer, with
their own KV cache, fed the target's pre-norm hidden states and the tokens that followed them),
then grows the tree depth by depth, one batched draft call per depth:

- a **static** tree (rank paths such as EAGLE-1's 25-node tree): node (r1..rd) takes the rd-th
  most likely token of its parent's draft distribution;
- a **dynamic** tree (EAGLE-2's expansion): each depth expands the `top_k` best frontier nodes by
  cumulative draft log-probability, and the `budget` best nodes overall form the tree.

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

    def __init__(self, model: DraftModel, tree: Tree | DynamicTree):
        if isinstance(tree, Tree) and tree.ranks is None:
            raise Clover2Error("a static tree for a draft model must be given as rank paths")
        if isinstance(tree, Tree) and tree.max_depth > model.config.num_heads and model.config.arch == "medusa":
            raise Clover2Error(f"tree depth {tree.max_depth} exceeds Medusa's {model.config.num_heads} heads")
        self.model, self.tree = model, tree
        self.device = next(model.parameters()).device

    # -- sequence state ---------------------------------------------------------------------

    def begin(self, prompt_ids: Sequence[int], hidden: torch.Tensor | None) -> None:
        self.cache = self.model.new_cache()
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
        tree, tokens = (self._static(expand) if isinstance(self.tree, Tree) else self._dynamic(expand))
        if self.cache.get_seq_length() > committed:  # EAGLE-1's entries for tree nodes
            self.cache.crop(committed - self.cache.get_seq_length())
        return Draft(tree, tokens.cpu())

    # -- tree growth ------------------------------------------------------------------------

    def _static(self, expand) -> tuple[Tree, torch.Tensor]:
        tree = self.tree
        tokens = torch.zeros(tree.size, dtype=torch.long, device=self.device)
        children: dict[int, list[int]] = {}
        for i in range(1, tree.size):
            children.setdefault(tree.parents[i], []).append(i)
        for d in range(tree.max_depth):
            parents = [p for p in range(tree.size) if int(tree.depth[p]) == d and p in children]
            logits = expand(parents, [tree.parents[p] for p in parents], tokens[parents], d)  # (n, V_draft)
            k = max(tree.ranks[c] for p in parents for c in children[p]) + 1
            top = logits.topk(k, dim=-1).indices
            for row, p in enumerate(parents):
                for c in children[p]:
                    tokens[c] = self.model.d2t[top[row, tree.ranks[c]]]
        return tree, tokens[1:]

    def _dynamic(self, expand) -> tuple[Tree, torch.Tensor]:
        spec = self.tree
        parent, token, score, depth = [-1], [0], [0.0], [0]
        frontier = [0]
        for d in range(spec.depth):
            toks = torch.tensor([token[i] for i in frontier], device=self.device)
            logp = torch.log_softmax(expand(frontier, [parent[i] for i in frontier], toks, d), dim=-1)
            top = logp.topk(spec.top_k, dim=-1)
            cand = (torch.tensor([score[i] for i in frontier], device=self.device)[:, None] + top.values).flatten()
            new = []
            for flat in cand.topk(min(spec.top_k, cand.numel())).indices.tolist():
                row, col = divmod(flat, spec.top_k)
                parent.append(frontier[row])
                token.append(int(self.model.d2t[top.indices[row, col]]))
                score.append(float(cand[flat]))
                depth.append(d + 1)
                new.append(len(parent) - 1)
            frontier = new
        # The best `budget` nodes; a child never outscores its parent, so they form a tree.
        keep = sorted(range(1, len(parent)), key=lambda i: (-score[i], depth[i]))[: spec.budget]
        keep.sort(key=lambda i: (depth[i], i))
        index = {0: 0} | {old: k + 1 for k, old in enumerate(keep)}
        tree = Tree(parents=(-1, *(index[parent[i]] for i in keep)))
        return tree, torch.tensor([token[i] for i in keep], dtype=torch.long)
