"""Profiles: one YAML file names the target and every setting of a run.

The profiles shipped with clover2 live in `clover2/configs/` (package data; `configs/` at the top of
a checkout points there); any other YAML path works too. With no name given, the profile is
`$CLOVER2_PROFILE`, else `cpu`: the CLI and the notebooks share this one default.

A profile has the sections `data` (DataConfig), `train` (TrainConfig), `draft` (DraftConfig
fields applied on top of each architecture's own recipe) and `bench` (BenchConfig, with its `fit`
subsection), `lab` (LabConfig: the notebooks' variants) and `design` (the designed study's arms,
budgets and evaluation: kept as its YAML mapping here and parsed where it is used,
`clover2.research.design.DesignConfig.of`, so that nothing below the research layer needs it), plus
`target`, `dtype`, `device` and `kernels`.
Inside `train` and `draft`, a subsection named after an architecture (`eagle1: {lr: 3.0e-5}`) holds
that architecture's own settings on top of the shared ones. A profile may start from another
(`base: cpu`) and change only what differs. Unknown keys are errors, so a typo never silently falls
back to a default.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

import yaml

from clover2.decoding.builtin import DEFAULT_TARGET
from clover2.decoding.engines import ENGINES
from clover2.decoding.kernels import MODES
from clover2.drafts.config import DraftConfig
from clover2.errors import Clover2Error
from clover2.measure.bench import BenchConfig
from clover2.measure.fit import FitConfig
from clover2.paths import cache_root
from clover2.training.data import DataConfig
from clover2.training.train import TrainConfig

CONFIG_DIR = Path(__file__).resolve().parent / "configs"
DEFAULT_PROFILE = "cpu"


def default_profile() -> str:
    """The profile used when none is named: `$CLOVER2_PROFILE`, else `cpu`."""
    return os.environ.get("CLOVER2_PROFILE") or DEFAULT_PROFILE


def known_profiles() -> list[str]:
    return sorted(p.stem for p in CONFIG_DIR.glob("*.yaml"))


@dataclass(frozen=True)
class LabConfig:
    """What the notebooks train and measure beyond the benchmark (names from clover2.research.lab.VARIANTS)."""

    distillation: tuple[str, ...] = ("clover2", "clover2-hard-labels", "clover2-no-regression", "clover2-no-decay")
    ablations: tuple[str, ...] = ("medusa", "eagle1", "eagle3", "clover1", "clover2", "clover2-extraction-after",
                                  "clover2-no-projector", "clover2-1-layer-block", "clover2-hard-labels",
                                  "clover2-value-gain-1", "clover2-input-embedding", "clover2-full-vocab",
                                  "clover2-ttt7", "eagle1-ttt7")
    ablation_n_per_task: int = 2  # prompts per task for the ablations' greedy tau
    ablation_max_new_tokens: int = 64
    engine: str = "eager"  # the engine the ablations' tau is measured on (greedy tau is the same on every one)
    # The headline drafts are trained again with each further training seed (`-seed<k>` variants) and
    # measured on the same prompts, for their tau and their speed: the spread from seed to seed beside
    # the spread from prompt to prompt. (0,): one seed, the profile's own.
    seeds: tuple[int, ...] = (0,)
    headline: tuple[str, ...] = ("medusa", "eagle1", "eagle3", "clover2")

    def __post_init__(self):
        if min(self.ablation_n_per_task, self.ablation_max_new_tokens) < 1:
            raise Clover2Error(f"lab config: ablation_n_per_task and ablation_max_new_tokens must be >= 1: {self}")
        if not self.seeds or self.seeds[0] != 0 or len(set(self.seeds)) != len(self.seeds) or min(self.seeds) < 0:
            raise Clover2Error(f"lab config: seeds must start with 0 (the profile's own) and be distinct and >= 0: "
                               f"{self.seeds}")
        if self.engine not in ENGINES:
            raise Clover2Error(f"lab config: engine must be one of {', '.join(ENGINES)}, got {self.engine!r}")


@dataclass(frozen=True)
class Profile:
    name: str
    target: str  # built-in name, checkpoint folder or hub id
    dtype: str  # auto | float32 | bfloat16
    device: str  # cpu | cuda
    data: DataConfig
    train: TrainConfig  # shared by every architecture
    draft: dict  # DraftConfig overrides shared by every architecture
    bench: BenchConfig
    lab: LabConfig
    own: dict = field(default_factory=dict)  # {arch: {"train": {...}, "draft": {...}}}: one architecture's own settings
    # the designed study's section as written: `DesignConfig.of` parses it in the research layer
    design: dict = field(default_factory=dict)
    chat_template: str | None = None  # for a tokenizer that ships none: "vicuna" or a Jinja file (None: its own)
    # the target's linear kernels (clover2.decoding.kernels): auto, the fastest measured on this machine per
    # row count (cached; seconds to measure the first time), or one forced everywhere (stock: PyTorch's own)
    kernels: str = "auto"

    def __post_init__(self):
        if self.kernels not in MODES:
            raise Clover2Error(f"profile {self.name}: kernels must be one of {', '.join(MODES)}, got {self.kernels!r}")

    def load_target(self, name: str | None = None, *, adapter: Path | None = None, kernels: str | None = None):
        """The profile's target (or `name` instead), with the profile's dtype, device, chat template and
        kernels (or `kernels` instead), and a LoRA `adapter` merged in."""
        from clover2.decoding.target import load_target

        return load_target(name or self.target, dtype=self.dtype, device=self.device, chat_template=self.chat_template,
                           adapter=adapter, kernels=kernels or self.kernels)

    def draft_config(self, arch: str, **overrides) -> DraftConfig:
        """The architecture's recipe, then the profile's shared and own draft settings, then `overrides`."""
        return DraftConfig.for_arch(arch, **(self.draft | self.own.get(arch, {}).get("draft", {}) | overrides))

    def train_config(self, arch: str) -> TrainConfig:
        """The shared training settings with the architecture's own on top (its learning rate, say)."""
        return replace(self.train, **self.own.get(arch, {}).get("train", {}))


def profile_yaml(path: Path, seen: tuple[Path, ...] = ()) -> dict:
    """A profile's YAML mapping with its `base` resolved: `base: cpu` takes the shipped cpu profile (or a
    YAML path beside this one) and overrides it key by key, sections merged recursively, lists replaced."""
    path = path.resolve()
    if path in seen:
        raise Clover2Error(f"{path}: profiles inherit in a cycle: {' -> '.join(p.stem for p in (*seen, path))}")
    raw = yaml.safe_load(path.read_text()) or {}
    if not isinstance(raw, dict):
        raise Clover2Error(f"{path}: expected a mapping of sections")
    base = raw.pop("base", None)
    if base is None:
        return raw
    parent = Path(str(base)) if Path(str(base)).suffix else CONFIG_DIR / f"{base}.yaml"
    parent = parent if parent.is_absolute() or parent.is_file() else path.parent / parent
    if not parent.is_file():
        raise Clover2Error(f"{path}: unknown base profile {base!r}; known: {', '.join(known_profiles())}")
    return _merged(profile_yaml(parent, (*seen, path)), raw)


TOP_LEVEL = ("target", "dtype", "device", "chat_template", "kernels")
SECTIONS = {"data": DataConfig, "train": TrainConfig, "draft": DraftConfig, "bench": BenchConfig,
            "lab": LabConfig, "design": None}  # design: parsed by clover2.research.design, not here


def with_settings(raw: dict, settings: Sequence[str]) -> dict:
    """A profile's YAML mapping with each SECTION.FIELD=VALUE set (VALUE read as YAML): `train.lr=3e-4`,
    `train.eagle1.lr=3e-5` (one architecture's own), `bench.fit.max_nodes=40`, `dtype=float32`."""
    for text in settings:
        key, sep, value = text.partition("=")
        path = key.strip().split(".")
        if not sep or not all(path):
            raise Clover2Error(f"--set takes SECTION.FIELD=VALUE (e.g. train.max_steps=600), got {text!r}")
        if len(path) == 1 and path[0] not in TOP_LEVEL:
            owners = [name for name, cls in SECTIONS.items() if cls and path[0] in {f.name for f in fields(cls)}]
            hint = f": did you mean {' or '.join(f'{o}.{path[0]}' for o in owners)}?" if owners else ""
            raise Clover2Error(f"--set {text}: a setting is SECTION.FIELD (sections: {', '.join(SECTIONS)}; "
                               f"top level: {', '.join(TOP_LEVEL)}){hint}")
        node = raw
        for part in path[:-1]:
            if node.get(part) is None:
                node[part] = {}
            if not isinstance(node[part], dict):
                raise Clover2Error(f"--set {text}: {part} is a value, not a section")
            node = node[part]
        node[path[-1]] = _yaml_value(value)
    return raw


def _yaml_value(text: str):
    """`text` read as YAML, with 3e-4 a number (YAML 1.1, which PyYAML reads, wants 3.0e-4)."""
    value = yaml.safe_load(text)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            pass
    return value


def _merged(base: dict, over: dict) -> dict:
    return base | {k: _merged(base[k], v) if isinstance(v, dict) and isinstance(base.get(k), dict) else v
                   for k, v in over.items()}


def load_profile(name: str | Path | None = None, settings: Sequence[str] = ()) -> Profile:
    """A profile by name (a shipped one) or YAML path; None: the default profile. `settings`:
    SECTION.FIELD=VALUE changes on top of it (`with_settings`), checked as the file's own keys are."""
    name = default_profile() if name is None else name
    path = Path(name)
    if not path.suffix:
        path = CONFIG_DIR / f"{name}.yaml"
    if not path.is_file():
        raise Clover2Error(f"unknown profile {str(name)!r}; known: {', '.join(known_profiles())}, or a YAML path")
    raw = with_settings(profile_yaml(path), settings)
    where = str(path) + (f" (with --set {' '.join(settings)})" if settings else "")
    _check_keys(raw, set(TOP_LEVEL) | set(SECTIONS), where)
    from clover2.drafts.config import ARCHS

    own: dict[str, dict] = {}
    for key, cls in (("train", TrainConfig), ("draft", DraftConfig)):
        shared = dict(raw.get(key) or {})
        for arch in set(shared) & set(ARCHS):
            mine = shared.pop(arch) or {}
            _check_keys(mine, {f.name for f in fields(cls)} - {"arch"}, f"{where} [{key}.{arch}]")
            own.setdefault(arch, {})[key] = {k: tuple(v) if isinstance(v, list) else v for k, v in mine.items()}
        raw[key] = shared
    sections = {key: _section(raw.get(key), cls, f"{where} [{key}]", nested)
                for key, cls, nested in (("data", DataConfig, {}), ("train", TrainConfig, {}),
                                         ("bench", BenchConfig, {"fit": FitConfig}), ("lab", LabConfig, {}))}
    draft = raw.get("draft") or {}
    _check_keys(draft, {f.name for f in fields(DraftConfig)} - {"arch"}, f"{where} [draft]")
    design = raw.get("design") or {}
    _check_keys(design, set(design), f"{where} [design]")  # a mapping; its keys are the research layer's to check
    profile = Profile(name=path.stem, target=str(raw.get("target", DEFAULT_TARGET)),
                      dtype=str(raw.get("dtype", "float32")), device=str(raw.get("device", "cpu")),
                      data=sections["data"], train=sections["train"], draft=draft, bench=sections["bench"],
                      lab=sections["lab"], own=own, chat_template=raw.get("chat_template"),
                      design=design, kernels=str(raw.get("kernels", "auto")))
    for arch in own:  # every architecture's settings are checked now, not when it is first trained
        profile.draft_config(arch)
        try:
            profile.train_config(arch)
        except TypeError as e:
            raise Clover2Error(f"{where} [train.{arch}]: {e}") from None
    return profile


# A dry run keeps a profile's target, methods and variants and takes the smoke profile's sizes, on a CPU;
# its benchmark decodes fewer tokens still (a GPU profile's 60-node trees verify dearly on a CPU).
DRY_RUN_SIZES = {"data": None, "train": None, "draft": None,  # None: smoke's whole section on top
                 "bench": ("tasks", "n_per_task", "max_new_tokens", "fit"),
                 "lab": ("ablation_n_per_task", "ablation_max_new_tokens", "seeds")}
DRY_RUN_NEW_TOKENS = 4


def dry_run_profile(name: str | Path | None) -> Path:
    """A YAML profile `<name>-dry`: the profile's whole run at the smoke profile's sizes, in fp32 on the
    CPU, so that a GPU profile's whole run is checked anywhere in minutes; its drafts decode at the
    precision the profile's own device gives them (`auto` is float off a CPU: no int8 calibration
    the real run would not make). Written under the cache."""
    prof = load_profile(name)  # checks the profile itself first
    path = Path(name) if name and Path(name).suffix else CONFIG_DIR / f"{prof.name}.yaml"
    raw = profile_yaml(path)
    smoke = yaml.safe_load((CONFIG_DIR / "smoke.yaml").read_text())
    raw |= {"device": "cpu", "dtype": "float32"}
    for section, keys in DRY_RUN_SIZES.items():
        small = smoke.get(section) or {}
        raw[section] = (raw.get(section) or {}) | {k: v for k, v in small.items() if keys is None or k in keys}
    raw["bench"]["max_new_tokens"] = min(raw["bench"].get("max_new_tokens", DRY_RUN_NEW_TOKENS), DRY_RUN_NEW_TOKENS)
    if prof.bench.draft_weights == "auto" and prof.device != "cpu":
        raw["bench"]["draft_weights"] = "float"  # what `auto` decodes the drafts in off a CPU, as the real run
    if prof.device != "cpu":
        raw["kernels"] = "stock"  # a GPU has no kernels to choose between: `auto` is PyTorch's own there
    out = cache_root() / "profiles" / f"{prof.name}-dry.yaml"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(f"# The dry run of {prof.name}: its whole run at smoke sizes on a CPU "
                   "(clover2.profiles.dry_run_profile)\n"
                   + yaml.safe_dump(raw, sort_keys=False))
    load_profile(out)
    return out


def _section(raw, cls, where: str, nested: dict):
    """A config dataclass from its YAML mapping (lists become tuples, and so does one word given for a
    tuple field: `sources: corpus`; `nested` sections recursively)."""
    raw = raw or {}
    _check_keys(raw, {f.name for f in fields(cls)}, where)
    tuples = {f.name for f in fields(cls) if isinstance(f.default, tuple)}
    values = {k: tuple(v) if isinstance(v, list) else (v,) if isinstance(v, str) and k in tuples else v
              for k, v in raw.items() if k not in nested}
    values |= {k: _section(raw.get(k), c, f"{where[:-1]}.{k}]", {}) for k, c in nested.items()}
    try:
        return cls(**values)
    except TypeError as e:
        raise Clover2Error(f"{where}: {e}") from None


def _check_keys(section: dict, allowed: set[str], where: str) -> None:
    if not isinstance(section, dict):
        raise Clover2Error(f"{where}: expected a mapping")
    unknown = set(section) - allowed
    if unknown:
        raise Clover2Error(f"{where}: unknown keys {sorted(unknown)}; allowed: {sorted(allowed)}")
