"""EAGLE-1, as its official code builds it: it works in the space of the feature that enters the
target's LM head (the normed last hidden state, `f_t`) throughout.

    f̂_{t+1} = Layer(FC([E(x_{t+1}); f_t]))       logits = LMHead(f̂_{t+1})

The loss regresses f̂_{t+1} onto the target's own f_{t+1} (SmoothL1, weight 1) plus 0.1 x the soft
cross-entropy of the logits against the target's next-token distribution. Its one decoder layer has
no input norm (the official layer index 0 skips it) and starts random (PyTorch's default init, as
the official `nn.Module`); inputs get uniform noise during training. Deeper tokens come from feeding
the predicted feature back: each tree node appends one entry to the draft's own KV cache and attends
to the committed sequence, its tree ancestors and itself (`TreeAttention`).

EAGLE-1 trains that one step only, on the target's features. With `TrainConfig.ttt_steps` = k it
also trains on k - 1 steps of its own predictions (`clover2.drafts.ttt`), which is how EAGLE-3
(`clover2.drafts.eagle3`, a subclass) trains.
"""

from __future__ import annotations

import torch
from torch import nn

from clover2.decoding.hf_compat import decoder_stack, run_stack
from clover2.drafts.base import DraftModel, copy_layers


class Eagle1Draft(DraftModel):
    arch = "eagle1"
    recipe = dict(aug_layers=1, embedding="input", loss="eagle", ce_weight=0.1, regression_weight=1.0,
                  head_decay=1.0, input_noise=0.1, init_layer="random", output_projector=False)
    attends_to_tree = True
    fc_inputs, fc_bias = 2, True  # FC([E(x); f]); EAGLE-3 fuses three target layers' inputs, without a bias

    def __init__(self, config, target_config, *, d2t=None):
        super().__init__(config, target_config, d2t=d2t)
        H = self.target_config.hidden_size
        self.block = decoder_stack(self.target_config, config.aug_layers, final_norm=False)
        for m in self.block.modules():  # PyTorch's default init, as the official (plain nn.Module) draft
            if isinstance(m, nn.Linear):
                m.reset_parameters()
        if config.aug_layers:
            self.block.layers[0].input_layernorm = nn.Identity()  # the official layer 0 has none
        self.fc = nn.Linear(self.fc_inputs * H, H, bias=self.fc_bias)

    def _init_from(self, target_model):
        copy_layers(target_model, self.block, self.config.init_layer)  # "random" (official) keeps the fresh layer

    @property
    def trained_heads(self) -> int:
        return 1  # EAGLE-1 learns one step and reuses it at every depth

    def features(self, h):
        return self.target_norm(h)  # the feature the target's LM head reads

    def trunk(self, x, e, **where):
        return self._predict(x, e, **where)

    def head_step(self, s, e, depth, **where):
        return self._predict(s, e, **where)  # the predicted feature fed back in place of the target's

    def _predict(self, f, e, **where):
        """The predicted next feature f̂_{t+1} from [E(x_{t+1}); f_t] (`where`: see `run_stack`)."""
        return run_stack(self.block, self.fc(torch.cat([e, f], -1)), **where)
