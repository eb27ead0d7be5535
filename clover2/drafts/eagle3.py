"""EAGLE-3, as its official code builds it (SafeAILab/EAGLE, `eagle/traineagle3/cnets.py`): EAGLE-1's
recurrence without its feature regression, reading three target layers, trained on its own steps.

    g_t = FC([a_t; b_t; c_t])                      the inputs of target layers 2, L/2 and L-3, fused
    s_{t+1} = Layer(E(x_{t+1}), g_t)               attention reads [norm(E); norm(g)] (2H), the residual is g
    logits = LMHead(norm(s_{t+1}))

Deeper tree nodes feed s back in place of g, attending to the committed sequence, their ancestors
and themselves, as EAGLE-1 (its subclass here). Training unrolls 7 such steps (the official code's
`length = 7`; the paper says 5) with loss weights 0.8^i (`clover2.drafts.ttt`), against the target's
distribution renormalized over the draft vocabulary, at positions whose target top-1 lies in it.

Where this departs from the official code (the method chapter lists it too): the LM head is the
target's, frozen and cut to the draft vocabulary as for every draft here (EAGLE-3 trains a fresh one
over its 32k-token vocabulary); the soft labels are the target's stored top-k, not its whole
distribution; the decoder layer is the target family's own class (Llama, Qwen2 or Gemma-3), with its
query, key and value projections widened to read 2H.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from clover2.decoding.hf_compat import final_norm_like, run_stack
from clover2.drafts.base import DraftModel
from clover2.drafts.eagle import Eagle1Draft
from clover2.errors import Clover2Error

UNROLL = 7  # training-time test steps of the official code (`self.length`); the paper says 5


def fused_layers(num_layers: int) -> tuple[int, ...]:
    """The target layers whose inputs EAGLE-3 fuses: 2, L // 2 and L - 3 (low, middle, high), as its
    official code picks them, clamped into range for targets of fewer than 6 layers (the tests' tiny ones)."""
    return tuple(min(max(i, 0), num_layers - 1) for i in (2, num_layers // 2, num_layers - 3))


class FusedInput(nn.Module):
    """EAGLE-3's layer input, in place of the decoder layer's input norm: [norm(E(x)); norm(g)] (2H),
    so that attention reads the token and the state while the residual stream carries g alone.
    The draft sets `tokens` (the embeddings) around each call of its layer."""

    def __init__(self, norm: nn.Module):
        super().__init__()
        self.token_norm, self.state_norm = copy.deepcopy(norm), copy.deepcopy(norm)
        self.tokens: torch.Tensor | None = None

    def forward(self, g: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.token_norm(self.tokens), self.state_norm(g)], -1)


class Eagle3Draft(Eagle1Draft):
    arch = "eagle3"
    recipe = dict(aug_layers=1, embedding="input", loss="eagle3", ce_weight=1.0, regression_weight=0.0,
                  head_decay=0.8, input_noise=0.0, init_layer="random", output_projector=False, num_heads=UNROLL)
    fc_inputs, fc_bias = 3, False  # the three layers' inputs, fused
    trained_heads = DraftModel.trained_heads  # every unrolled step has a loss (EAGLE-1 trains one)

    def __init__(self, config, target_config, *, d2t=None):
        if config.regression_weight:
            raise Clover2Error("an eagle3 draft has no feature regression (it reads fused layers, and its "
                               "states are its own): set regression_weight: 0")
        super().__init__(config, target_config, d2t=d2t)
        H = self.target_config.hidden_size
        layer = self.block.layers[0]
        layer.input_layernorm = FusedInput(final_norm_like(self.target_config))
        attn = layer.self_attn
        for name in ("q_proj", "k_proj", "v_proj"):  # attention reads [E; g]: 2H wide
            old = getattr(attn, name)
            setattr(attn, name, nn.Linear(2 * H, old.out_features, bias=old.bias is not None))
        self.norm = final_norm_like(self.target_config)  # the draft's own norm before the LM head

    @classmethod
    def layers_read(cls, target_config):
        return fused_layers(target_config.get_text_config().num_hidden_layers)

    def features(self, h):
        return self.fc(h)

    def logits(self, o):
        return self.lm_head(self.norm(o)).float()

    def _predict(self, g, e, **where):
        """The next state s_{t+1} from the state g_t (fused target features, or a parent's state) and E(x_{t+1})."""
        fuse = self.block.layers[0].input_layernorm
        fuse.tokens = e
        try:
            return run_stack(self.block, g, **where)
        finally:
            fuse.tokens = None
