"""Every place clover2 leans on a Hugging Face transformers detail beyond the documented forward.

No modeling file is forked; these are the few shims that keep the public forward enough. When
transformers is upgraded, this is the one file to read.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import inspect
from collections.abc import Iterator

import torch
from torch import nn
from transformers import AutoModel


@functools.cache
def cache_kwarg(model_class: type) -> str:
    """The keyword a model class takes for its cache: `cache` from transformers 5.24, else `past_key_values`."""
    return "cache" if "cache" in inspect.signature(model_class.forward).parameters else "past_key_values"


@contextlib.contextmanager
def capture_states(model: nn.Module, into: list[torch.Tensor], layers: tuple[int, ...] = ()) -> Iterator[None]:
    """Append what a draft reads of the target's forward to `into`: the input of the decoder's final
    norm (the last hidden state before it), or with `layers`, the inputs of those decoder layers
    concatenated in the order given (EAGLE-3's fused features: `(B, T, len(layers) * H)`). Index L,
    one past the last of the L layers, names the final norm: its input is the last hidden state."""
    decoder = model.get_decoder()
    stages = [*decoder.layers, decoder.norm]
    modules = [stages[i] for i in layers or (len(decoder.layers),)]
    got: list[torch.Tensor | None] = [None] * len(modules)  # each module's input, in the order asked

    def hook(k):
        return lambda _mod, args: got.__setitem__(k, args[0])

    handles = [m.register_forward_pre_hook(hook(k)) for k, m in enumerate(modules)]
    try:
        yield
        into.append(got[0] if len(got) == 1 else torch.cat(got, -1))
    finally:
        for h in handles:
            h.remove()


def make_saveable(model: nn.Module) -> None:
    """A GGUF-loaded model refuses `save_pretrained`; its de-quantized weights are ordinary tensors."""
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config


def decoder_stack(text_config, n_layers: int, *, final_norm: bool) -> nn.Module:
    """`n_layers` decoder layers of the target's own class, as its base model without embeddings."""
    cfg = copy.deepcopy(text_config)
    cfg.num_hidden_layers = n_layers
    if getattr(cfg, "layer_types", None):
        cfg.layer_types = ["full_attention"] * n_layers
    cfg.use_cache = True
    stack = AutoModel.from_config(cfg, attn_implementation="sdpa")
    stack.embed_tokens = None  # inputs arrive as vectors
    if not final_norm:
        stack.norm = nn.Identity()
    return stack


def final_norm_like(text_config) -> nn.Module:
    """A fresh final norm of the target's own class (RMSNorm variants differ across families)."""
    return decoder_stack(text_config, 0, final_norm=True).norm


def run_stack(stack: nn.Module, z: torch.Tensor, *, cache=None, position_ids=None, attention_mask=None,
              **attention_kwargs) -> torch.Tensor:
    """A `decoder_stack` over input vectors `z` `(B, T, H)`, with its own cache if given;
    `attention_kwargs` reach the attention function (transformers passes them through every layer)."""
    kwargs = {} if cache is None else {cache_kwarg(type(stack)): cache, "use_cache": True}
    return stack(inputs_embeds=z, position_ids=position_ids, attention_mask=attention_mask, **kwargs,
                 **attention_kwargs).last_hidden_state
