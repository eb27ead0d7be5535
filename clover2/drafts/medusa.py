"""Medusa-1, as its README and code build it: K heads on the target's last (normed) hidden state,
each a residual block (`x + SiLU(W x + b)`, W zero-initialized, b PyTorch's default) into an LM head.
Head k predicts the token k+2 ahead; the loss is the sum of the heads' cross-entropies on the data's
tokens (no decay).

One departure: the LM head is shared and frozen (the target's), where Medusa-1 trains one per head
(initialized from the target's), which on a CPU budget costs more than the whole rest of the draft.
Every head reads the root state only, so a node's children do not depend on its own token: all
nodes at one depth get the same proposals. Verification is exact here (greedy match, or recursive
rejection sampling at T > 0); Medusa's own typical acceptance at T > 0 is not distribution-exact.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import nn

from clover2.drafts.base import DraftModel


class ResBlock(nn.Module):
    """Medusa's head block: x + SiLU(W x + b), W zero-initialized."""

    def __init__(self, hidden: int):
        super().__init__()
        self.linear = nn.Linear(hidden, hidden)
        nn.init.zeros_(self.linear.weight)

    def forward(self, x):
        return x + F.silu(self.linear(x))


class Medusa1Draft(DraftModel):
    arch = "medusa"
    recipe = dict(aug_layers=0, output_projector=False, loss="hard", regression_weight=0.0, head_decay=1.0)
    shared_children = True  # every head reads the root state only

    def __init__(self, config, target_config, *, d2t=None):
        super().__init__(config, target_config, d2t=d2t)
        self.heads = nn.ModuleList(ResBlock(self.target_config.hidden_size) for _ in range(config.num_heads))


    def features(self, h):
        return self.target_norm(h)  # the last hidden state as Medusa reads it (after the final norm)

    def trunk(self, x, e, **where):
        return x

    def head_step(self, s, e, depth, **where):
        return s  # a node's state is the root's: its token does not enter

    def read(self, s, e, depth):
        return self.heads[depth](s)

    @property
    def max_tree_depth(self) -> int:
        return self.config.num_heads
