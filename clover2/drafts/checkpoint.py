"""Saving and loading a trained draft: safetensors weights plus a JSON sidecar.

Only the trained parts are stored; the frozen copies of the target's LM head, embedding and norm
are rebuilt from the target at load time. The sidecar records the draft config, the target's
identity (name, sizes, weight fingerprint), the training data's hash and the weights file's SHA-256.
Loading checks all of it, so a draft loaded onto a target it was not trained for, or a corrupt or
partial checkpoint, fails with a clear error. The weights are written first and the sidecar last,
each atomically: a checkpoint without its sidecar is incomplete, never half-valid.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import asdict
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from clover2.decoding.kernels import available, linear_pass, linear_shapes, tuned
from clover2.decoding.target import Target
from clover2.drafts import draft_to_load
from clover2.drafts.base import BORROWED, DraftModel, TreeAttention
from clover2.drafts.config import DraftConfig
from clover2.errors import Clover2Error
from clover2.files import atomic_path, sha256_file, write_json

WEIGHTS, SIDECAR = "draft.safetensors", "draft.json"


def save_draft(out: Path, model: DraftModel, target: Target, config: DraftConfig, *, extra: dict) -> Path:
    out = Path(out)
    with atomic_path(out / WEIGHTS) as tmp:
        save_file({k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()
                   if not k.startswith(BORROWED)}, tmp)
    write_json(out / SIDECAR, {"format": "clover2-draft/1", "draft_config": asdict(config),
                               "target": target_record(target), "draft_vocab_size": len(model.d2t),
                               "weights_sha256": sha256_file(out / WEIGHTS), **extra})
    return out


def target_record(target: Target) -> dict:
    """What a draft's sidecar records of its target: its identity, and the fingerprint of its head
    rounded to bf16, which the same weights loaded in bf16 share (a draft serves either)."""
    return target.identity() | {"fingerprint_bf16": target.fingerprint(torch.bfloat16)}


DRAFT_WEIGHTS = ("auto", "float", "int8")


def load_draft(path: str | Path, target: Target, *, weights: str = "float") -> DraftModel:
    """A trained draft for `target`, checked against the target it was trained for.

    `weights`: "float" as trained (float32 on a CPU, its linear layers on the kernels chosen as the
    target's are: measured per row count under `auto`, else the target's forced kernel); "int8"
    stores every linear layer's weights in int8 and quantizes its input on the fly
    (CPU only): the draft step reads a quarter of the bytes (how much faster it runs is measured by the benchmark),
    and since the target verifies every token, the output does not change, only tau a little;
    "auto" is int8 on a CPU and float elsewhere. The result is frozen, for decoding only."""
    if weights not in DRAFT_WEIGHTS:
        raise Clover2Error(f"unknown draft weights {weights!r}: use one of {', '.join(DRAFT_WEIGHTS)}")
    if weights == "auto":
        weights = "int8" if target.device.type == "cpu" else "float"
    if weights == "int8" and target.device.type != "cpu":
        raise Clover2Error(f"int8 draft weights run on a CPU only (the target is on {target.device}); use 'float'")
    path = Path(path)
    sidecar = path / SIDECAR
    if not sidecar.exists():
        raise Clover2Error(f"{path} holds no {SIDECAR}: not a clover2 draft, or an interrupted save")
    try:
        meta = json.loads(sidecar.read_text())
    except json.JSONDecodeError as e:
        raise Clover2Error(f"{sidecar} is corrupt: {e}") from None
    if not (path / WEIGHTS).exists() or sha256_file(path / WEIGHTS) != meta.get("weights_sha256"):
        raise Clover2Error(f"{path / WEIGHTS} is missing, partial or corrupt (its SHA-256 does not match {SIDECAR})")
    want, have = meta["target"], target.identity()
    same_model = want.get("fingerprint") == have["fingerprint"] or (  # or the same weights in another precision
        "fingerprint_bf16" in want and want["fingerprint_bf16"] == target.fingerprint(torch.bfloat16))
    diffs = [k for k in ("model_type", "vocab_size", "hidden_size", "num_hidden_layers") if want.get(k) != have.get(k)]
    diffs += [] if same_model else ["fingerprint"]
    if diffs:
        raise Clover2Error(f"draft {path} was trained for target {want['name']!r}, not {have['name']!r} "
                           f"(they differ in {', '.join(diffs)})")
    try:
        config = DraftConfig(**meta["draft_config"])
    except TypeError as e:
        raise Clover2Error(f"{sidecar}: its draft config does not fit this version of clover2 ({e})") from None
    state = load_file(path / WEIGHTS)
    model = draft_to_load(config, target, d2t=state["d2t"].to(target.device))
    missing, unexpected = model.load_state_dict(state, strict=False)
    if unexpected or any(not k.startswith(BORROWED) for k in missing):
        raise Clover2Error(f"{path / WEIGHTS} does not fit a {config.arch} draft "
                           f"(missing {missing[:3]}, unexpected {unexpected[:3]})")
    # On a GPU the draft runs in the target's dtype, as the official code does (its precision never
    # changes the output: the target verifies every token); on a CPU it stays float32.
    dtype = target.dtype if target.device.type == "cuda" else torch.float32
    model = model.to(dtype).eval().requires_grad_(False)
    if weights == "int8":
        with warnings.catch_warnings():  # torch.ao's eager quantization is deprecated in favour of torchao
            warnings.simplefilter("ignore")
            torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8, inplace=True)
    else:  # frozen from here on: the draft's step reads prepared weights too
        mode = target.kernels if target.kernels in ("auto", *available(dtype, target.device)) else "auto"
        tuned(model, mode, linear_pass(model), {"draft": config.arch, "linears": linear_shapes(model)})
    return model


PROBE = "Explain in two sentences why the sky is blue."  # the fixed chat prompt of `probe`


@torch.no_grad()
def probe(model: DraftModel, target: Target, *, depth: int = 2, top: int = 8) -> dict[str, list]:
    """What a draft computes on one fixed chat prompt, recorded when a draft is published so that a
    later version of the code can be checked against it: from the prompt's last position down the
    draft's own greedy path, each depth's `top` most likely tokens (target ids) and their logits."""
    ids = target.encode_chat([{"role": "user", "content": PROBE}])
    n = len(ids)
    x = torch.tensor([ids], device=target.device)
    h = target.forward(x, torch.arange(n, device=target.device)[None], target.causal_mask(n), target.new_cache(),
                       hidden=True, layers=model.hidden_layers).hidden
    dtype = next(model.parameters()).dtype
    cache = model.new_cache()
    state = model.advance(h[:, :-1].to(dtype), x[:, 1:], cache)  # the root: the prompt's last token
    committed = cache.get_seq_length()
    logits = model.root_logits(state)
    tokens, values = [], []
    for d in range(depth + 1):
        best = logits[0].float().topk(top)
        tokens.append(model.d2t[best.indices].tolist())
        values.append([round(v, 4) for v in best.values.tolist()])
        if d < depth:
            attention = TreeAttention(committed, torch.ones(1, d, dtype=torch.bool, device=state.device))  # a chain
            state, logits = model.step(state, model.d2t[best.indices[:1]], d + 1, cache=cache, attention=attention)
    return {"prompt": PROBE, "tokens": tokens, "logits": values}
