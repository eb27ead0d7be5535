"""Token Recycling (Luo et al. 2024): training-free drafting from the target's own discarded guesses.

Every verification computes the target's distribution after each node of the tree, and a plain
decoder throws all but one of them away. Token Recycling keeps, for every token of the
vocabulary, the top-k tokens the target last predicted after it: an adjacency matrix `M (V, k)`.
A draft is a static tree read off the matrix, breadth first: node (r1..rd) is `M[parent, rd]`.
After each verification the rows of every token in the tree are overwritten with the target's
fresh top-k there. The matrix outlives a generation ("hot start"), so it learns the target's
habits across prompts; rows never written yet (-1) prune their subtree.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from clover2.decoding.drafter import Drafter, Memory
from clover2.decoding.tree import Draft, Tree, TreeBuilder
from clover2.errors import Clover2Error


class TokenRecycling(Memory):
    """The adjacency matrix shared by every generation, and the static tree drafts are read with."""

    def __init__(self, vocab_size: int, tree: Tree):
        if tree.ranks is None:
            raise Clover2Error("Token Recycling reads its draft along a static tree given as rank paths")
        self.tree = tree
        self.k = max(tree.ranks) + 1
        self.matrix = np.full((vocab_size, self.k), -1, dtype=np.int64)

    def drafter(self) -> Drafter:
        """A drafter for one generation, reading and updating this matrix."""
        return TokenRecyclingDrafter(self)


class TokenRecyclingDrafter(Drafter):
    reads_logits = True

    def __init__(self, state: TokenRecycling):
        self.state, self.memories = state, (state,)

    def propose(self, ids: Sequence[int]) -> Draft:
        tree, matrix = self.state.tree, self.state.matrix
        builder, node_of = TreeBuilder(), {0: 0}  # tree node -> builder node (absent: pruned)
        token = [int(ids[-1])] + [0] * (tree.size - 1)
        for i in range(1, tree.size):
            parent = tree.parents[i]
            if parent not in node_of:
                continue
            token[i] = int(matrix[token[parent], tree.ranks[i]])
            if token[i] >= 0:
                node_of[i] = builder.add(node_of[parent], token[i])
        return builder.build()

    def verified(self, root: int, draft: Draft, logits: torch.Tensor) -> None:
        tokens = torch.cat([torch.tensor([root]), draft.tokens])
        self.state.matrix[tokens.numpy()] = logits.topk(self.state.k, dim=-1).indices.cpu().numpy()
