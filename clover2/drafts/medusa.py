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

from clover2.drafts.base import DraftModel, TreeAttention


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

    def __init__(self, config, target_config, *, d2t=None):
        super().__init__(config, target_config, d2t=d2t)
        self.heads = nn.ModuleList(ResBlock(self.target_config.hidden_size) for _ in range(config.num_heads))

    def features(self, h):
        return self.target_norm(h)  # the last hidden state as Medusa reads it (after the final norm)

    def _heads(self, x, next_ids, steps):
        return [head(x) for head in self.heads[:steps]]

    @property
    def max_tree_depth(self) -> int:
        return self.config.num_heads

    def advance(self, h, next_ids, cache):
        return self.features(h[:, -1])

    def root_logits(self, root):
        return self.logits(self.heads[0](root))

    def step(self, parents, tokens, depth, *, cache, attention: TreeAttention | None = None):
        # A node's state is the root's; head `depth` proposes the same children for every node.
        return parents, self.logits(self.heads[depth](parents[:1])).expand(len(tokens), -1)
