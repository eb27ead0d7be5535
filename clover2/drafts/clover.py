"""Clover-2 (as its official code builds it) and Clover-1 (the same parts without Clover-2's enhancements).

- **Clover-2**: an Attention Decoder fuses h_t with E(x_{t+1}) *before* a 2-layer Augmenting Block of
  the target's own decoder-layer class (causal over the sequence, initialized from target layers,
  followed by its own norm), then an FC output projector and a shared head norm feed the frozen LM
  head. Heads i >= 1 are one regressive RNN step, shared across heads: the Attention Decoder #1
  fuses the previous head's state with the embedding of the token chosen at the previous depth, and
  FC([state; E(token)]) projects it.
- **Clover-1** (reconstructed: the paper body is not reachable): the token is fused *after* a 1-layer
  Augmenting Block, no output projector (the state goes straight to the head norm and LM head), and
  no distillation (hard labels only). Its switches are Clover-2's ablations, so it is Clover-2 with
  another recipe.
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn

from clover2.decoding.hf_compat import decoder_stack, run_stack
from clover2.drafts.base import DraftModel, copy_layers


class AttentionDecoder(nn.Module):
    """Clover's Attention Decoder: the state queries one key, the token embedding.

    With a single key, attention reduces to a per-head gate: the cosine of query and key scales
    the value (no softmax, no output projection), added to the state. Starts near identity.
    """

    def __init__(self, hidden: int, heads: int, eps: float):
        super().__init__()
        self.heads = heads
        self.register_buffer("gain", torch.ones(()))  # scale of the value path (see DraftConfig.value_gain)
        self.norm = nn.RMSNorm(hidden, eps=eps)
        self.q, self.k, self.v = (nn.Linear(hidden, hidden) for _ in range(3))
        with torch.no_grad():  # torch.nn.init's fills, which a draft built for loading skips (draft_to_load)
            for lin, eye in ((self.q, 1.0), (self.k, 1.0), (self.v, 0.0)):
                nn.init.uniform_(lin.weight, 0, 0.01)
                lin.weight.add_(eye * torch.eye(hidden))
                nn.init.zeros_(lin.bias)

    def forward(self, h: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
        split = lambda x: x.unflatten(-1, (self.heads, -1))  # noqa: E731  (..., H) -> (..., nh, dh)
        gate = F.cosine_similarity(split(self.q(self.norm(h))), split(self.k(e)), dim=-1)  # (..., nh)
        return h + self.gain * (gate[..., None] * split(self.v(e))).flatten(-2)


def _near_identity(lin: nn.Linear, hidden: int) -> nn.Linear:
    with torch.no_grad():
        nn.init.uniform_(lin.weight, 0, 0.01)
        lin.weight[:, :hidden] += torch.eye(hidden)
        nn.init.zeros_(lin.bias)
    return lin


class Clover2Draft(DraftModel):
    arch = "clover2"

    def __init__(self, config, target_config, *, d2t=None):
        super().__init__(config, target_config, d2t=d2t)
        text = self.target_config
        H, eps = text.hidden_size, getattr(text, "rms_norm_eps", 1e-6)
        self.block = decoder_stack(text, config.aug_layers, final_norm=True)  # the Augmenting Block
        self.ad0 = AttentionDecoder(H, text.num_attention_heads, eps)
        self.ad1 = AttentionDecoder(H, text.num_attention_heads, eps)
        self.head_norm = copy.deepcopy(self.target_norm).requires_grad_(True)
        if config.output_projector:
            self.fc0 = _near_identity(nn.Linear(H, H), H)
            self.fc1 = _near_identity(nn.Linear(2 * H, H), H)

    def _init_from(self, target_model):
        """The Augmenting Block starts from the target's last (or first) layers and its final norm."""
        norm = target_model.get_decoder().norm.state_dict()
        self.head_norm.load_state_dict(norm)
        copy_layers(target_model, self.block, self.config.init_layer)
        self.block.norm.load_state_dict(norm)

    def adapt_to(self, hidden):
        """`value_gain: 0` (auto): the target's hidden-state RMS over the token embeddings' RMS."""
        gain = self.config.value_gain or float(hidden.pow(2).mean().sqrt()
                                               / self.embed.weight.float().pow(2).mean().sqrt())
        self.ad0.gain.fill_(gain)

    def trunk(self, x, e, **where):
        """Attention Decoder #0 and the Augmenting Block, in either order (`extraction`)."""
        if self.config.extraction == "before":
            return run_stack(self.block, self.ad0(x, e), **where)
        return self.ad0(run_stack(self.block, x, **where), e)

    def head_step(self, s, e, depth, **where):
        return self.ad1(s, e)  # one RNN step: the Attention Decoder #1 fuses the node's token

    def read(self, s, e, depth):
        """Through the output projector (FC(s) at the root, FC([s; E(token)]) below it) and the head norm."""
        if self.config.output_projector:
            s = self.fc0(s) if e is None else self.fc1(torch.cat([s, e], -1))
        return self.head_norm(s)


class Clover1Draft(Clover2Draft):
    arch = "clover1"
    recipe = dict(extraction="after", output_projector=False, aug_layers=1, loss="hard", regression_weight=0.0)
