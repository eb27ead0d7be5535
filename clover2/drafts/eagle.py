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
from clover2.drafts.base import DraftModel, TreeAttention, copy_layers
from clover2.drafts.ttt import unrolling


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

    def _heads(self, x, next_ids, steps):
        """Step j's outputs at positions t = 0..T-1-j (the state fed back at depth j of a tree)."""
        e, T = self.embed(next_ids), x.shape[1]
        outs, s = [], x
        with unrolling(self.block) as unrolled:
            for j in range(min(steps, T)):
                n = T - j
                pos = torch.arange(j, j + n, device=x.device)[None]
                s = self._predict(s[:, :n], e[:, j:j + n], position_ids=pos, unrolled=unrolled)
                outs.append(s)
        return outs

    def advance(self, h, next_ids, cache):
        past = cache.get_seq_length()
        pos = torch.arange(past, past + h.shape[1], device=h.device)[None]
        return self._predict(self.features(h), self.embed(next_ids), cache=cache, position_ids=pos)[:, -1]

    def root_logits(self, root):
        return self.logits(root)

    def step(self, parents, tokens, depth, *, cache, attention: TreeAttention | None = None):
        e = self.embed(tokens)  # (n, H)
        past, n = cache.get_seq_length(), len(tokens)
        committed = attention.committed
        mask = torch.full((n, past + n), torch.finfo(e.dtype).min, device=e.device)
        mask[:, :committed] = 0  # the committed sequence is visible; of the tree entries, only...
        rows = torch.arange(n, device=e.device)
        mask[rows, past + rows] = 0  # ...the node's own
        for row, slots in enumerate(attention.visible):
            mask[row, slots] = 0  # ...and its ancestors'
        pos = torch.full((1, n), committed + depth - 1, device=e.device)
        s = self._predict(parents[None], e[None], cache=cache, position_ids=pos, attention_mask=mask[None, None])[0]
        return s, self.logits(s)

    def _predict(self, f, e, **stack_kwargs):
        """The predicted next feature f̂_{t+1} from [E(x_{t+1}); f_t] (`stack_kwargs`: see `run_stack`)."""
        return run_stack(self.block, self.fc(torch.cat([e, f], -1)), **stack_kwargs)
