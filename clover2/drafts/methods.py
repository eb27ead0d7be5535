"""Decoding methods by name: the spec grammar `NAME[@TREE][/TEMPERATURE][!ENGINE][=DRAFT_PATH]`, parsed once
into a `MethodSpec`, and the drafter each one decodes with.

Names: `ar` (plain decoding), `pld` (prompt lookup), `suffix` (a suffix cache over everything seen),
`tr` (Token Recycling, which takes a static tree), `hf` and `hf-pld` (Hugging Face `generate`, plain
and with its prompt lookup; benchmark only), every draft architecture in
`clover2.drafts.ARCHITECTURES`, `pld+ARCH` and `suffix+ARCH` (prompt lookup, or the suffix cache,
where it proposes something, the draft elsewhere: one source per step) and `union+ARCH` (the suffix
cache, prompt lookup and the draft in one tree, `clover2.decoding.union`; one source per step at
temperature > 0). Draft methods take a tree: a static preset (`eagle25`, `medusa63`, `chainK`),
EAGLE-2's dynamic tree `dynamic:BUDGET:DEPTH:TOPK`, or `fitted` (the dynamic tree, and for a union
each copy source's budget, fitted to the machine by `clover2.measure.fit`, benchmark only).
`llama.cpp`, `llama.cpp+pld@chainK` and `llama.cpp+eagle3@chainK` (benchmark only, greedy) are
llama.cpp's server: its plain decoding, its prompt lookup and a trained EAGLE-3 draft converted for
it (`clover2.measure.engine`); `openvino`, `openvino+pld@chainK` and `openvino+eagle3@chainK` (or
`@dynamic:BUDGET:DEPTH:TOPK`, OpenVINO's EAGLE-3 tree) OpenVINO GenAI's plain decoding, prompt lookup and a
trained EAGLE-3 draft exported for it (`clover2.measure.openvino_engine`); each with `!defaults` at the
engine's own numerics. `!ENGINE`
runs the target (and the draft, where it can) on another engine of `clover2.decoding.cache`:
`!static` (a preallocated KV cache at bucketed shapes) or `!graphs` (the same, replayed as CUDA
graphs on a GPU); without it, the eager reference.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from clover2.decoding.cache import ENGINES
from clover2.decoding.decode import DecodeConfig, generate
from clover2.decoding.drafter import Drafter, NoDrafter
from clover2.decoding.prompt_lookup import PromptLookupDrafter
from clover2.decoding.sampling import SamplingConfig
from clover2.decoding.suffix import SuffixCache
from clover2.decoding.target import Target
from clover2.decoding.token_recycling import TokenRecycling
from clover2.decoding.tree import Tree, preset
from clover2.decoding.union import Union, copy_drafters
from clover2.drafts import ARCHITECTURES
from clover2.drafts.base import DraftModel
from clover2.drafts.checkpoint import load_draft
from clover2.drafts.drafter import DynamicTree, ModelDrafter
from clover2.errors import Clover2Error

BASELINES: dict[str, type[Drafter]] = {"ar": NoDrafter, "pld": PromptLookupDrafter}  # drafters without a model
HF_METHODS = ("hf", "hf-pld")  # Hugging Face generate, for reference
# a copy source where it proposes something, else the draft: name -> the copy source
HYBRIDS = {f"{copy}+{arch}": copy for copy in ("pld", "suffix") for arch in ARCHITECTURES}
UNIONS = tuple(f"union+{arch}" for arch in ARCHITECTURES)  # copying and the draft in one tree
TREE_METHODS = (*ARCHITECTURES, *HYBRIDS, *UNIONS, "tr")  # the names that take a tree
# other engines' methods, by engine: llama.cpp's server (clover2.measure.engine): plain, prompt lookup and
# EAGLE-3; OpenVINO GenAI (clover2.measure.openvino_engine): the same three; all but plain with a chain
# (OpenVINO's EAGLE-3 also with its dynamic tree)
ENGINES_ELSEWHERE = {"llama.cpp": ("llama.cpp", "llama.cpp+pld", "llama.cpp+eagle3"),
                     "openvino": ("openvino", "openvino+pld", "openvino+eagle3")}
ENGINE_METHODS = tuple(name for names in ENGINES_ELSEWHERE.values() for name in names)
ENGINE_DEFAULTS = "defaults"  # `llama.cpp!defaults`: the engine's own numerics (attention, precision), not f32


def engine_of(name: str) -> str:
    """The engine that runs method `name`: `llama.cpp`, `openvino`, or "" (clover2's own)."""
    return next((engine for engine, names in ENGINES_ELSEWHERE.items() if name in names), "")

DEFAULT_TREE = "eagle25"  # a draft method's tree where none is written (the benchmark's, as the paper's)
# The tree `clover2 generate` and `chat` decode with where none is written, by the target's device: the
# paper's 25-node tree on a GPU, where verifying its 26 tokens costs about one step; on a CPU, where it
# costs 2-3 steps, the tree the benchmark fitted to every published draft (book: "Should I use Clover-2?").
GENERATE_TREES = {"cuda": "eagle25", "cpu": "chain1"}


def method_names() -> tuple[str, ...]:
    return (*BASELINES, "suffix", "tr", *HF_METHODS, *ARCHITECTURES, *HYBRIDS, *UNIONS, *ENGINE_METHODS)


@dataclass(frozen=True)
class MethodSpec:
    name: str  # one of method_names()
    tree: str = ""  # draft methods: a preset, dynamic:B:D:K or fitted; "" for the others
    temperature: float = 0.0  # 0: greedy; > 0: lossless sampling
    draft: Path | None = None  # draft methods: the trained draft's folder (None: the caller's default)
    engine: str = "eager"  # the target's KV cache and launch mode (clover2.decoding.cache.ENGINES)
    named: str = ""  # the name of the draft folder the spec gave (`=PATH`): two drafts of one architecture apart

    @classmethod
    def parse(cls, spec: str, default_temperature: float = 0.0, *, default_tree: str = DEFAULT_TREE) -> MethodSpec:
        """`NAME[@TREE][/TEMPERATURE][!ENGINE][=DRAFT_PATH]`, e.g. `clover2@dynamic:60:6:10/1!graphs=drafts/clover2`;
        a method that takes a tree and names none takes `default_tree`."""
        rest, _, path = spec.strip().partition("=")
        rest, bang, engine = rest.partition("!")
        rest, slash, temp = rest.partition("/")
        name, _, tree = rest.partition("@")
        if name not in method_names():
            raise Clover2Error(f"unknown method {name!r} in {spec!r}; known: {', '.join(method_names())}")
        if name in ENGINE_METHODS:
            if bang and engine != ENGINE_DEFAULTS:
                raise Clover2Error(f"{spec!r}: {engine_of(name)} runs its own engine; after '!' it takes only "
                                   f"'{ENGINE_DEFAULTS}' (its own attention numerics)")
            return cls._engine(spec, name, tree, temp, path, engine or "eager")
        if bang and engine not in ENGINES[1:]:
            raise Clover2Error(f"{spec!r}: the engine after '!' must be one of {', '.join(ENGINES[1:])}")
        if bang and name in HF_METHODS:
            raise Clover2Error(f"{spec!r}: Hugging Face generate runs its own engine; "
                               f"'!{engine}' is for clover2's loop")
        if tree and name not in TREE_METHODS:
            raise Clover2Error(f"{spec!r}: only draft methods ({', '.join(ARCHITECTURES)}, pld+ARCH, suffix+ARCH, "
                               "union+ARCH) and tr take a tree")
        if name == "tr" and tree and (tree == "fitted" or tree.startswith("dynamic")):
            raise Clover2Error(f"{spec!r}: Token Recycling reads a static tree (a preset such as eagle25 or chainK)")
        try:
            temperature = float(temp) if slash else default_temperature
        except ValueError:
            raise Clover2Error(f"{spec!r}: the temperature after '/' must be a number") from None
        if temperature < 0:
            raise Clover2Error(f"{spec!r}: the temperature must be >= 0")
        if tree and tree != "fitted":
            parse_tree(tree)  # a bad tree fails here, not hours later
        return cls(name, tree or (default_tree if name in TREE_METHODS else ""), temperature,
                   Path(path) if path else None, engine or "eager", Path(path).name if path else "")

    @classmethod
    def _engine(cls, spec: str, name: str, tree: str, temperature: str, path: str, engine: str) -> MethodSpec:
        """Another engine's method (llama.cpp, OpenVINO): greedy; a chain of K tokens for prompt lookup and
        EAGLE-3 (default 3, llama.cpp's own default), or OpenVINO's EAGLE-3 tree `dynamic:BUDGET:DEPTH:TOPK`
        (its num_assistant_tokens, tree_depth, branching_factor), none for plain decoding; EAGLE-3's trained
        draft folder after '='; with `!defaults`, the engine's own numerics (llama.cpp: an f16 KV cache, flash
        attention; OpenVINO: its inference precision and KV cache) instead of f32."""
        plain = engine_of(name)
        if temperature and temperature.strip() not in ("0", "0.0"):
            raise Clover2Error(f"{spec!r}: the {plain} methods are measured greedy (no '/TEMPERATURE')")
        if name == plain and (tree or path):
            raise Clover2Error(f"{spec!r}: {plain}'s plain decoding takes no tree and no draft")
        tree = tree or "chain3"
        chain = tree.startswith("chain") and tree[5:].isdigit() and int(tree[5:]) >= 1
        if name == "openvino+eagle3" and tree.startswith("dynamic"):
            parse_tree(tree)  # a bad tree fails here
        elif name != plain and not chain:
            raise Clover2Error(f"{spec!r}: {name} verifies chains: write @chainK (K >= 1)"
                               + (", or @dynamic:BUDGET:DEPTH:TOPK" if name == "openvino+eagle3" else ""))
        if path and not name.endswith("+eagle3"):
            raise Clover2Error(f"{spec!r}: only the engines' EAGLE-3 methods take a draft")
        return cls(name, "" if name == plain else tree, 0.0, Path(path) if path else None, engine,
                   Path(path).name if path else "")

    @property
    def label(self) -> str:
        """The name in tables: `name@tree` for draft methods, `name` otherwise, then `!engine` unless eager,
        then `=folder` where the spec named its draft (`clover2@eagle25=clover2-official`)."""
        engine = "" if self.engine == "eager" else f"!{self.engine}"
        return ((f"{self.name}@{self.tree}" if self.tree else self.name) + engine
                + (f"={self.named}" if self.named else ""))

    @property
    def arch(self) -> str:
        """The draft architecture a draft method (or hybrid, or union) decodes with; "" for the others."""
        arch = self.name.rpartition("+")[2]
        return arch if arch in ARCHITECTURES else ""

    @property
    def is_draft(self) -> bool:
        return bool(self.arch)


def parse_tree(spec: str) -> Tree | DynamicTree:
    """A static preset name (eagle25, medusa63, chainK) or `dynamic:BUDGET:DEPTH:TOPK`."""
    if spec.startswith("dynamic"):
        head, *sizes = spec.split(":")
        try:
            if head != "dynamic" or len(sizes) != 3:
                raise ValueError
            return DynamicTree(*map(int, sizes))
        except (TypeError, ValueError):
            raise Clover2Error(f"bad dynamic tree {spec!r}; write dynamic:BUDGET:DEPTH:TOPK, "
                               "e.g. dynamic:24:5:8") from None
    return preset(spec)


def load_draft_for(spec: MethodSpec, target: Target, *, weights: str = "auto") -> DraftModel:
    """The trained draft a draft method names (with `weights` as in `load_draft`), checked against
    the target and the architecture."""
    if spec.draft is None:
        raise Clover2Error(f"method {spec.label!r} needs a draft folder (NAME=PATH)")
    model = load_draft(spec.draft, target, weights=weights)
    if model.arch != spec.arch:
        raise Clover2Error(f"{spec.draft} holds a {model.arch} draft, not {spec.arch}")
    return model


def drafter_factory(spec: MethodSpec, target: Target, *, draft: DraftModel | None = None,
                    tree: Tree | DynamicTree | None = None,
                    sampling: SamplingConfig = SamplingConfig()) -> Callable[[], Drafter]:
    """A function making a fresh drafter per generation. Draft methods use `draft` (else the one in
    `spec.draft`) with `tree` (else the spec's tree, which must not be `fitted`: the benchmark fits
    it, `clover2.measure.fit.fitted_factory`)."""
    if spec.name in BASELINES:
        return BASELINES[spec.name]
    if spec.name == "suffix":
        return SuffixCache().drafter  # one cache for every generation: it remembers earlier ones
    if spec.name == "tr":  # one adjacency matrix for every generation (hot start)
        return TokenRecycling(target.config.get_text_config().vocab_size, tree or parse_tree(spec.tree)).drafter
    if not spec.is_draft:
        raise Clover2Error(f"method {spec.name!r} decodes with Hugging Face generate, not with a drafter")
    if tree is None and spec.tree == "fitted":
        raise Clover2Error("a fitted tree is chosen by the benchmark (clover2 bench), not given by name")
    model = draft if draft is not None else load_draft_for(spec, target)
    return drafters_for(spec, model, tree if tree is not None else parse_tree(spec.tree), None, sampling)


def drafters_for(spec: MethodSpec, model: DraftModel, tree: Tree | DynamicTree | None,
                 copy_budgets: dict[str, int] | None, sampling: SamplingConfig) -> Callable[[], Drafter]:
    """The draft alone, a copy source then the draft (a hybrid), or the union of the copy drafters and the draft
    (`tree` None: the draft proposes nothing; `copy_budgets`: the copy sources used and their node
    budgets, the others left out; None: every copy source with all its nodes)."""
    graphs, suffix = spec.engine == "graphs", SuffixCache()  # as `suffix`, it remembers earlier generations

    def own() -> dict[str, Drafter]:
        return {} if tree is None else {"model": ModelDrafter(model, tree, sampling, graphs=graphs)}

    def sources() -> dict[str, Drafter]:
        copies = copy_drafters(suffix)
        if spec.name in HYBRIDS:
            return {HYBRIDS[spec.name]: copies[HYBRIDS[spec.name]]} | own()
        return {k: d for k, d in copies.items() if copy_budgets is None or copy_budgets.get(k)} | own()
    if spec.name in ARCHITECTURES:
        return (lambda: own()["model"]) if tree is not None else NoDrafter
    one_source = spec.name in HYBRIDS or not sampling.greedy  # a merged tree is exact for greedy decoding only
    return lambda: Union(sources(), copy_budgets or {}, one_source=one_source)


def device_tree(device: torch.device | str) -> str:
    """The tree of a method written without one in `clover2 generate` and `chat` (`GENERATE_TREES`); the
    benchmark keeps `DEFAULT_TREE`, as the paper's tables."""
    return GENERATE_TREES.get(torch.device(device).type, DEFAULT_TREE)


def chat(target: Target, method: str, message: str, *, max_new_tokens: int = 256,
         sampling: SamplingConfig = SamplingConfig()) -> str:
    """One user message answered with a method written as every command writes it (`NAME[@TREE][=DRAFT]`,
    e.g. `clover2@chain1=results/study/drafts/clover2`): the answer's text. Greedy by default, and then,
    in float32, exactly plain decoding's answer (`chat(target, "ar", message)`). A draft method without a
    tree decodes with the device's (`device_tree`)."""
    spec = MethodSpec.parse(method, sampling.temperature, default_tree=device_tree(target.device))
    make = drafter_factory(spec, target, sampling=sampling)
    ids = target.encode_chat([{"role": "user", "content": message}])
    return target.decode(generate(target, make(), ids, DecodeConfig(max_new_tokens=max_new_tokens,
                                                                    sampling=sampling)).output_ids)
