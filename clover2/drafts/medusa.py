"""Medusa-1: one residual block per head on the target's normed state, each into the frozen LM head.

The LM head is shared here; Medusa-1 trains one LM head per head, which on a CPU budget costs more
than the whole rest of the draft. Every head reads the root state only, so a node's children do not
depend on its own token: all nodes at one depth get the same proposals.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import nn

from clover2.drafts.base import DraftModel, TreeAttention


class ResBlock(nn.Module):
    """Medusa's head block: x + SiLU(W x), W zero-initialized (the head starts as the LM head)."""

    def __init__(self, hidden: int):
        super().__init__()
        self.linear = nn.Linear(hidden, hidden)
        nn.init.zeros_(self.linear.weight)
        nn.init.zeros_(self.linear.bias)

    def forward(self, x):
        return x + F.silu(self.linear(x))


class Medusa1Draft(DraftModel):
    arch = "medusa"
    recipe = dict(aug_layers=0, output_projector=False, loss="hard", regression_weight=0.0)

    def __init__(self, config, target_config, *, d2t=None):
        super().__init__(config, target_config, d2t=d2t)
        self.heads = nn.ModuleList(ResBlock(self.target_config.hidden_size) for _ in range(config.num_heads))

    def _heads(self, h, next_ids):
        s = self.target_norm(h)
        return [head(s) for head in self.heads]

    @property
    def max_tree_depth(self) -> int:
        return self.config.num_heads

    def advance(self, h, next_ids, cache):
        return self.target_norm(h[:, -1])

    def root_logits(self, root):
        return self.logits(self.heads[0](root))

    def step(self, parents, tokens, depth, *, cache, attention: TreeAttention | None = None):
        # A node's state is the root's; head `depth` proposes the same children for every node.
        return parents, self.logits(self.heads[depth](parents[:1])).expand(len(tokens), -1)
