"""Drafts for serving engines: a trained draft written in the layouts engines load, and read back.

Formats (`FORMATS`: name -> the architecture it carries):

- `specforge`: EAGLE-3 as SpecForge trains it and SGLang serves it (`LlamaForCausalLMEagle3`, one
  decoder layer `midlayer.*`, its own `norm` and `lm_head` over the draft vocabulary, `d2t` as the
  offset from draft id to target id and `t2d` as the target ids it keeps). Its
  `eagle_aux_hidden_state_layer_ids` name the layers whose *outputs* are read (SGLang captures the
  input of layer id + 1), one less than the layers whose inputs clover2 reads.
- `speculators`: EAGLE-3 in the `speculators` layout (`speculators_model_type: eagle3`, the decoder
  layer's config under `transformer_layer_config`, weights `layers.0.*`), with its verifier named;
  its layer ids name the layers whose *inputs* are read (as vLLM and llama.cpp read them), as
  clover2's do. llama.cpp's `convert_hf_to_gguf.py --target-model-dir` converts this layout.
- `eagle`: EAGLE-1 in the original (yuhuili) layout that vLLM's `method: eagle` and SGLang's EAGLE
  load: `fc` over [E(x); f] and `layers.0.*` without an input norm, the target's LM head read by the
  engine. A draft vocabulary has no place in that layout: its target ids go to
  `hot_token_map.pt` (SGLang's `--speculative-token-map`), and an engine without one proposes from
  the whole vocabulary.
- `medusa`: Medusa-1 in the `speculators` Medusa layout (`speculators_model_type: medusa`, heads
  `blocks.K.layers.0.*`, the verifier's LM head shared by every head, the draft vocabulary as
  `d2t`/`t2d`), after the speculators source (`src/speculators/models/medusa/`, a release later than
  0.9.0, the one that installs here, which has no Medusa yet: its own classes could not check it).
- `clover`: Clover-2 (or Clover-1), which no engine runs: a research format in the `speculators`
  style (`speculators_model_type: clover2`, the augmenting block's layer config, the draft's own
  settings under `clover2_config`), the weights under clover2's own names (`block.layers.*` the
  augmenting block, `block.norm` its norm, `ad0.*` and `ad1.*` the Attention Decoders, `fc0` the
  output projector, `fc1` the regressive step's projection, `head_norm`), `d2t`/`t2d` as EAGLE-3's;
  the embedding and LM head are the verifier's. `load_exported` is its loader.

The mapping is exact: the draft vocabulary is renumbered by target id, as these formats number it,
which changes no proposal. Each export carries `clover2.json` (the draft's own config, its target,
the source draft's weights SHA-256), so that `load_exported` rebuilds the very draft: exported and
read back, it proposes what the draft it came from proposes (tested). Only the Llama and Qwen2
families' decoder layers are Llama-shaped; a Gemma draft is refused.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from clover2.decoding.target import Target
from clover2.drafts import draft_to_load
from clover2.drafts.base import BORROWED, DraftModel
from clover2.drafts.checkpoint import target_record
from clover2.drafts.config import DraftConfig
from clover2.errors import Clover2Error
from clover2.files import atomic_path, write_json

FORMATS = {"specforge": ("eagle3",), "speculators": ("eagle3",), "eagle": ("eagle1",), "medusa": ("medusa",),
           "clover": ("clover2", "clover1")}
WEIGHTS, CONFIG, OURS, HOT_TOKENS = "model.safetensors", "config.json", "clover2.json", "hot_token_map.pt"
EMBEDDING = "embed_tokens.weight"  # the target's input embedding, where an engine reads it from the draft
LLAMA_SHAPED = ("llama", "qwen2")  # target families whose decoder layer the formats' Llama layer holds


def _renames(fmt: str, heads: int) -> list[tuple[str, str]]:
    """(our prefix, theirs) per weight, most specific first: the map both ways (`heads`: the draft's)."""
    if fmt == "clover":
        return []  # clover2's own names
    if fmt == "medusa":
        return [(f"heads.{k}.linear.", f"blocks.{k}.layers.0.") for k in range(heads)]
    layer = {"specforge": "midlayer.", "speculators": "layers.0.", "eagle": "layers.0."}[fmt]
    ours = [("block.layers.0.input_layernorm.token_norm.", layer + "input_layernorm."),
            ("block.layers.0.input_layernorm.state_norm.", layer + "hidden_norm."),
            ("block.layers.0.", layer)]
    return ours if fmt != "eagle" else ours[2:]


def _rename(name: str, pairs: list[tuple[str, str]]) -> str:
    return next((new + name[len(old):] for old, new in pairs if name.startswith(old)), name)


def export_draft(model: DraftModel, target: Target, out: Path, fmt: str, *, source_sha256: str = "",
                 embeddings: bool = False) -> Path:
    """Write `model` (a draft for `target`) into `out` in format `fmt`; returns `out`. With `embeddings`
    (the EAGLE-3 formats), the target's input embedding goes in too, as `embed_tokens.weight`: SGLang and
    vLLM take the target's own, OpenVINO's exporter (optimum-intel) reads the draft's."""
    if fmt not in FORMATS:
        raise Clover2Error(f"unknown export format {fmt!r}; known: {', '.join(FORMATS)}")
    if model.arch not in FORMATS[fmt]:
        raise Clover2Error(f"the {fmt} format carries {' and '.join(FORMATS[fmt])} drafts, not {model.arch} "
                           f"(formats and what they carry: {FORMATS})")
    family = target.config.get_text_config().model_type
    if fmt in ("specforge", "speculators", "eagle") and family not in LLAMA_SHAPED:
        raise Clover2Error(f"a {family} target's decoder layer is not Llama-shaped: the {fmt} format cannot hold "
                           f"this draft (it holds drafts for {', '.join(LLAMA_SHAPED)} targets)")
    order = torch.argsort(model.d2t)  # the draft vocabulary by target id, as the formats number it
    pairs = _renames(fmt, model.config.num_heads)
    state = {k: (v.float() if v.is_floating_point() else v).detach().cpu() for k, v in model.state_dict().items()}
    # the embedding and the target's norm are the target's own: engines take them from it
    weights = {_rename(k, pairs): v for k, v in state.items() if k not in ("d2t", "target_norm.weight", "embed.weight")}
    if fmt in ("specforge", "speculators"):
        weights["lm_head.weight"] = state["lm_head.weight"][order]
    else:  # the engine reads the target's own head
        del weights["lm_head.weight"]
    if embeddings:
        if model.arch != "eagle3":
            raise Clover2Error(f"the target's embedding goes into EAGLE-3 exports only, not {model.arch}")
        weights[EMBEDDING] = target.model.get_input_embeddings().weight.detach().float().cpu()
    if fmt != "eagle":
        ids = state["d2t"][order]
        weights["d2t"] = ids - torch.arange(len(ids))  # draft id + d2t[draft id] = target id
        weights["t2d"] = torch.zeros(model.target_config.vocab_size, dtype=torch.bool).index_fill_(0, ids, True)
    out = Path(out)
    with atomic_path(out / WEIGHTS) as tmp:
        save_file({k: v.contiguous() for k, v in weights.items()}, tmp)
    if fmt == "eagle":
        with atomic_path(out / HOT_TOKENS) as tmp:
            torch.save(state["d2t"][order].clone(), tmp)
    write_json(out / CONFIG, _config(model, target, fmt))
    write_json(out / OURS, {"format": f"clover2-export/{fmt}", "draft_config": asdict(model.config),
                            "target": target_record(target), "source_weights_sha256": source_sha256})
    return out


def _config(model: DraftModel, target: Target, fmt: str) -> dict:
    """The engine's config.json: the target's decoder-layer settings with one layer, and the format's fields."""
    text = target.config.get_text_config()
    windows = ("layer_types", "use_sliding_window", "sliding_window", "max_window_layers")  # the draft's one layer
    layer = {k: v for k, v in text.to_dict().items()
             if not k.startswith(("_", "transformers_version")) and k not in windows}
    layer |= {"num_hidden_layers": 1, "tie_word_embeddings": False, "torch_dtype": "float32",
              "head_dim": getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads}
    layers_read = list(model.hidden_layers)
    if fmt != "clover":  # the engines' draft layer is a Llama one (SpecForge's and SGLang's for any target family)
        layer |= {"model_type": "llama", "attention_bias": text.model_type == "qwen2"}  # Qwen2's q, k, v have biases
    if fmt == "eagle":  # the original EAGLE-1 directory: a Llama config, `bias` for the fc layer
        return layer | {"architectures": ["LlamaForCausalLM"], "bias": True}
    verifier = {"name_or_path": target.name, "architectures": list(target.config.architectures or [])}
    if fmt == "medusa":
        V = text.vocab_size
        return {"architectures": ["MedusaModel"], "speculators_model_type": "medusa", "speculators_version": "0.9.0",
                "num_heads": model.config.num_heads, "num_hidden_layers": 1, "medusa_hidden_size": text.hidden_size,
                "medusa_vocab_size": V, "truncated_vocab_size": len(model.d2t) if len(model.d2t) < V else 0,
                "original_lm_head": True, "medusa_fc_bias": True, "head_weight_decay": model.config.head_decay,
                "speculators_config": {"algorithm": "medusa", "default_proposal_method": "greedy",
                                       "proposal_methods": [{"proposal_type": "greedy",
                                                             "speculative_tokens": model.config.num_heads}],
                                       "verifier": verifier}}
    if fmt == "clover":  # the augmenting block is the target family's own decoder layers
        return {"architectures": ["Clover2Speculator"], "speculators_model_type": "clover2",
                "speculators_version": "clover2-research/1", "transformer_layer_config": layer
                | {"num_hidden_layers": model.config.aug_layers}, "draft_vocab_size": len(model.d2t),
                "clover2_config": asdict(model.config),
                "speculators_config": {"algorithm": "clover2", "default_proposal_method": "tree",
                                       "proposal_methods": [{"proposal_type": "tree", "tree": "eagle25"}],
                                       "verifier": verifier},
                "needs": "the target's last hidden state before its final norm at every committed position, "
                         "and a tree (or chain) verifier"}
    if fmt == "specforge":
        return layer | {"architectures": ["LlamaForCausalLMEagle3"], "draft_vocab_size": len(model.d2t),
                        "target_model_type": text.model_type, "target_hidden_size": text.hidden_size,
                        "eagle_config": {"eagle_aux_hidden_state_layer_ids": [i - 1 for i in layers_read]}}
    return {"architectures": ["Eagle3Speculator"], "speculators_model_type": "eagle3", "speculators_version": "0.9.0",
            "transformer_layer_config": layer, "draft_vocab_size": len(model.d2t), "norm_before_residual": False,
            "target_hidden_size": text.hidden_size, "eagle_aux_hidden_state_layer_ids": layers_read,
            "speculators_config": {
                "algorithm": "eagle3",
                "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": model.config.num_heads}],
                "default_proposal_method": "greedy",
                "verifier": verifier}}


def load_exported(folder: str | Path, target: Target) -> DraftModel:
    """The draft an export holds, rebuilt for `target` (which must be the one it was exported for)."""
    folder = Path(folder)
    if not (folder / OURS).exists() or not (folder / WEIGHTS).exists():
        raise Clover2Error(f"{folder}: not a clover2 export (no {OURS} and {WEIGHTS})")
    ours = json.loads((folder / OURS).read_text())
    fmt = ours["format"].removeprefix("clover2-export/")
    if fmt not in FORMATS:
        raise Clover2Error(f"{folder}: unknown export format {ours['format']!r}")
    mine = target_record(target)
    if ours["target"].get("fingerprint_bf16") != mine["fingerprint_bf16"]:
        raise Clover2Error(f"{folder} was exported for target {ours['target'].get('name')!r}, not for "
                           f"{target.name!r} (its weights differ)")
    weights = load_file(folder / WEIGHTS)
    back = [(theirs, mine) for mine, theirs in _renames(fmt, ours["draft_config"]["num_heads"])]
    state = {_rename(k, back): v for k, v in weights.items() if k not in ("d2t", "t2d", EMBEDDING)}
    # the LM head of an `eagle` export is the target's own, cut to the hot tokens when the draft is built
    d2t = torch.load(folder / HOT_TOKENS) if fmt == "eagle" else weights["d2t"] + torch.arange(len(weights["d2t"]))
    config = DraftConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in ours["draft_config"].items()})
    model = draft_to_load(config, target, d2t=d2t.to(target.device))
    missing, unexpected = model.load_state_dict({k: v.to(target.device) for k, v in state.items()}, strict=False)
    if unexpected or {k for k in missing if k != "d2t" and not k.startswith(BORROWED)}:  # borrowed: from the target
        raise Clover2Error(f"{folder}: weights that do not fit a {config.arch} draft (missing {missing[:3]}, "
                           f"unexpected {unexpected[:3]})")
    return model.eval().requires_grad_(False)
