"""EAGLE-1: FC over [E(x_{t+1}); h_t], one decoder layer of the target's class, regressing h_{t+1}.

The target's own final norm and LM head turn a predicted feature into logits. Deeper tokens come
from feeding the predicted feature back: each tree node appends one entry to the draft's own KV
cache and attends to the committed sequence, its tree ancestors and itself (`TreeAttention`).
"""

from __future__ import annotations

import torch
from torch import nn

from clover2.decoding.hf_compat import decoder_stack, run_stack
from clover2.drafts.base import DraftModel, TreeAttention, copy_layers


class Eagle1Draft(DraftModel):
    arch = "eagle1"
    recipe = dict(aug_layers=1, embedding="input", loss="eagle", ce_weight=0.1, regression_weight=1.0,
                  head_decay=1.0, input_noise=0.1)
    attends_to_tree = True

    def __init__(self, config, target_config, *, d2t=None):
        super().__init__(config, target_config, d2t=d2t)
        H = self.target_config.hidden_size
        self.block = decoder_stack(self.target_config, config.aug_layers, final_norm=False)
        self.fc = nn.Linear(2 * H, H)

    def _init_from(self, target_model):
        """The decoder layer starts from the target's last (or first) layer."""
        copy_layers(target_model, self.block, self.config.init_layer)

    @property
    def trained_heads(self) -> int:
        return 1  # EAGLE-1 learns one step and reuses it at every depth

    def regression_targets(self, h):
        return h  # the raw (pre-norm) next feature

    def _heads(self, h, next_ids):
        return [self.target_norm(self._feature(h, self.embed(next_ids)))]

    def advance(self, h, next_ids, cache):
        past = cache.get_seq_length()
        pos = torch.arange(past, past + h.shape[1], device=h.device)[None]
        return self._feature(h, self.embed(next_ids), cache=cache, position_ids=pos)[:, -1]

    def root_logits(self, root):
        return self.logits(self.target_norm(root))

    def step(self, parents, tokens, depth, *, cache, attention: TreeAttention | None = None):
        e = self.embed(tokens)  # (n, H)
        past, n = cache.get_seq_length(), len(tokens)
        committed = attention.committed
        mask = torch.zeros(1, 1, n, past + n, device=e.device)
        mask[..., committed:] = torch.finfo(mask.dtype).min  # the sequence is visible, tree entries are not...
        for row, slots in enumerate(attention.visible):
            mask[0, 0, row, past + row] = 0  # ...except the node's own
            mask[0, 0, row, slots] = 0  # ...and its ancestors
        pos = torch.full((1, n), committed + depth - 1, device=e.device)
        s = self._feature(parents[None], e[None], cache=cache, position_ids=pos, attention_mask=mask)[0]
        return s, self.logits(self.target_norm(s))

    def _feature(self, h, e, *, cache=None, position_ids=None, attention_mask=None):
        """The predicted next pre-norm feature from [E(x_{t+1}); h_t]."""
        return run_stack(self.block, self.fc(torch.cat([e, h], -1)), cache=cache, position_ids=position_ids,
                         attention_mask=attention_mask)
