"""The research workflow behind the notebooks: one profile, its target, data, drafts and results.

Notebooks stay thin: a `parameters` cell, then `lab = Lab.open(profile, target=...)`, which
checks every parameter at once (an unknown profile, a target path that does not exist, a drafts
folder holding drafts for another target), so a bad one fails in the first cell with a clear
message.

Inputs and outputs are kept apart. Every long step is cached under `$CLOVER2_CACHE` and keyed by
its exact inputs and by the hash of the code that makes it (`clover2.measure.provenance`): data by
the data settings, the target and the data code; each draft by its settings, the data and the
training code; a benchmark run by its settings, the target, the drafts' weights, the machine and
the whole package. A changed algorithm or input therefore never reuses a stale entry, and an
interrupted step resumes. What the book shows is copied to `results/<profile>/` (outputs only,
never read back), beside `profile.yaml` (the resolved profile) and `provenance.json`.

Draft *variants* are the architectures and the paper's ablations, each a name for an architecture
plus the `DraftConfig` switches it changes (`VARIANTS`) and, for the training-time test, the
`TrainConfig` ones (`TRAINING`); all train on the same data with the same budget, so that every
difference comes from the architecture, the loss or how many of its own steps it learns from. Any
variant with `-seed<k>` appended is the same draft trained with another training seed (`seeded`),
which is how the spread from seed to seed is measured beside the spread from prompt to prompt.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import pandas as pd
import yaml

from clover2.decoding.decode import DecodeConfig
from clover2.decoding.prompts import first_turn_ids
from clover2.decoding.target import Target
from clover2.drafts.checkpoint import SIDECAR, load_draft
from clover2.drafts.methods import MethodSpec
from clover2.errors import Clover2Error
from clover2.files import atomic_path, jsonable, same_config, stable_hash, write_json, write_text
from clover2.measure.acceptance import layers_read, references, replayed_steps, tau_table
from clover2.measure.bench import run_bench
from clover2.measure.provenance import code_version, commit, machine
from clover2.paths import cache_root, results_root
from clover2.profiles import Profile, load_profile
from clover2.research.report import at_saved_step
from clover2.training.corpora import sharegpt_conversations
from clover2.training.data import DataConfig, complete_meta, prepare_data, split_corpus
from clover2.training.tasks import benchmark_texts, load_task
from clover2.training.train import train

VARIANTS: dict[str, tuple[str, dict]] = {
    # the architectures compared in the paper
    "medusa": ("medusa", {}),
    "eagle1": ("eagle1", {}),
    "eagle3": ("eagle3", {}),  # the draft its readers use today (2025)
    "clover1": ("clover1", {}),
    "clover2": ("clover2", {}),
    # Clover-2 with one enhancement removed (the paper's ablation table)
    # token fused after the block (the auto value gain is calibrated only for the token fused before it)
    "clover2-extraction-after": ("clover2", {"extraction": "after", "value_gain": 1.0}),
    "clover2-no-projector": ("clover2", {"output_projector": False}),  # no FC output projectors
    "clover2-1-layer-block": ("clover2", {"aug_layers": 1}),  # the weaker Augmenting Block
    "clover2-hard-labels": ("clover2", {"loss": "hard", "regression_weight": 0.0}),  # no distillation
    # this project's departure: the token's gain in Attention Decoder #0 back at the official 1
    "clover2-value-gain-1": ("clover2", {"value_gain": 1.0}),
    # the official recipe (value gain 1) with one enhancement removed: the study's parts (amendment 1);
    # the token extracted after the block is clover2-extraction-after, which has the official gain already
    "clover2-official-no-projector": ("clover2", {"value_gain": 1.0, "output_projector": False}),
    "clover2-official-1-layer-block": ("clover2", {"value_gain": 1.0, "aug_layers": 1}),
    "clover2-official-hard-labels": ("clover2", {"value_gain": 1.0, "loss": "hard", "regression_weight": 0.0}),
    # the distillation loss's other parts
    "clover2-no-regression": ("clover2", {"regression_weight": 0.0}),
    "clover2-no-decay": ("clover2", {"head_decay": 1.0}),
    # embedding and vocabulary options
    "clover2-input-embedding": ("clover2", {"embedding": "input"}),
    "clover2-full-vocab": ("clover2", {"draft_vocab": 0}),
    # EAGLE-3's training on the others: 7 heads, each on the draft's own states, weighted 0.8^i
    "clover2-ttt7": ("clover2", {"head_decay": 0.8}),
    "eagle1-ttt7": ("eagle1", {"head_decay": 0.8}),
}
TRAINING: dict[str, dict] = {"clover2-ttt7": {"ttt_steps": 7}, "eagle1-ttt7": {"ttt_steps": 7}}  # TrainConfig switches


def seeded(variant: str, seed: int) -> str:
    """`variant` trained with training seed `seed` (initialisation and batch order; the data is the
    same): `clover2-seed1`. Seed 0, every profile's own, is the variant itself."""
    return variant if seed == 0 else f"{variant}-seed{seed}"


def unseeded(variant: str) -> tuple[str, int | None]:
    """(`clover2`, 1) for `clover2-seed1`; (`clover2`, None) for `clover2` (the profile's own seed)."""
    base, sep, seed = variant.rpartition("-seed")
    return (base, int(seed)) if sep and seed.isdigit() else (variant, None)


def seed_spread(steps: pd.DataFrame, *, n_boot: int = 2000) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Training seeds beside prompts (`steps`: `replay` rows of `seeded` variants on one tree).
    Per variant and seed: tau over all prompts with its interval over prompts, and its difference
    from Clover-2's of the same seed with the paired interval (`tau_table`). Then per variant: the
    seeds' mean tau, their standard deviation and range (the spread from seed to seed), the mean
    half-width of the prompt intervals (the spread from prompt to prompt), the mean difference from
    Clover-2 and in how many seeds it is beyond prompt noise."""
    names = [unseeded(d) for d in steps.draft]
    steps = steps.assign(draft=[b for b, _ in names], seed=[k or 0 for _, k in names])
    per_seed = pd.concat([tau_table(g.drop(columns="seed"), n_boot=n_boot).query("task == 'overall'").assign(seed=k)
                          for k, g in steps.groupby("seed")], ignore_index=True)
    reference = per_seed[per_seed.variant == ("clover2" if "clover2" in set(per_seed.variant)
                                              else per_seed.variant.iloc[0])]
    per_seed = per_seed.merge(reference[["seed", "tau"]].rename(columns={"tau": "reference_tau"}), on="seed")
    per_seed["difference"] = per_seed.tau - per_seed.reference_tau
    beyond = (per_seed.delta_lo > 0) | (per_seed.delta_hi < 0)
    summary = per_seed.assign(beyond=beyond, half_width=(per_seed.tau_hi - per_seed.tau_lo) / 2).groupby(
        "variant", sort=False).agg(seeds=("seed", "nunique"), tau_mean=("tau", "mean"), tau_sd=("tau", "std"),
                                   tau_min=("tau", "min"), tau_max=("tau", "max"),
                                   prompt_half_width=("half_width", "mean"),
                                   difference_mean=("difference", "mean"), beyond_noise_in=("beyond", "sum"))
    return (per_seed[["variant", "seed", "tau", "tau_lo", "tau_hi", "difference", "delta_lo", "delta_hi"]],
            summary.reset_index())


def training_log(path: Path, variant: str) -> pd.DataFrame:
    """A draft's `metrics.jsonl` in long form: one row per evaluation step, head and split
    (`train`: the last training batch; `held-out`: the held-out set), with loss, top-1 and top-5."""
    rows = []
    for line in Path(path).read_text().splitlines():
        m = json.loads(line)
        for split, prefix in (("held-out", "eval"), ("train", "train")):
            heads = sorted({int(k.split("_")[1][4:]) for k in m if k.startswith(f"{prefix}_head")})
            rows += [{"variant": variant, "step": m["step"], "train_seconds": m["train_seconds"], "split": split,
                      "head": h, "loss": m.get(f"{prefix}_head{h}_loss"), "top1": m.get(f"{prefix}_head{h}_top1"),
                      "top5": m.get(f"{prefix}_head{h}_top5")} for h in heads]
    return pd.DataFrame(rows)


@dataclass
class Lab:
    profile: Profile
    target: Target
    results: Path  # results/<profile>: what the book shows (outputs only)
    drafts_given: Path | None = None  # a folder of drafts the user supplies (None: trained into the cache)

    @classmethod
    def open(cls, profile: str | None = None, *, target: str | None = None, drafts: str | Path | None = None,
             results: str | Path | None = None, kernels: str | None = None) -> Lab:
        """Check the parameters and load the target: the first cell of every notebook.

        `profile` None is the default profile (`$CLOVER2_PROFILE`, else `cpu`); `results` None is
        `$CLOVER2_RESULTS/<profile>`, else `results/<profile>` in the current folder; `kernels` None: the
        profile's."""
        prof = load_profile(profile)
        lab = cls(profile=prof, target=prof.load_target(target, kernels=kernels),
                    results=Path(results) if results else results_root() / prof.name,
                    drafts_given=Path(drafts) if drafts else None)
        for sidecar in sorted(lab.drafts_given.glob(f"*/{SIDECAR}")) if lab.drafts_given else []:
            load_draft(sidecar.parent, lab.target)  # drafts the user gave must fit this target
        lab.results.mkdir(parents=True, exist_ok=True)
        write_text(lab.results / "profile.yaml",
                   yaml.safe_dump(jsonable(asdict(prof) | {"target": lab.target.name}), sort_keys=False))
        write_json(lab.results / "provenance.json", {"commit": commit(), "code": code_version(), **machine()})
        return lab

    def chapter(self, name: str) -> Path:
        """The results folder of one notebook (created)."""
        out = self.results / name
        out.mkdir(parents=True, exist_ok=True)
        return out

    # -- data and drafts ----------------------------------------------------------------------

    @property
    def data_dir(self) -> Path:
        """The target-labelled training data, keyed by its settings, the target and the code that makes it."""
        return self._data_dir(self.profile.data, "train")

    @property
    def eval_dir(self) -> Path:
        """The held-out set: the target's own answers to held-out ShareGPT prompts."""
        return self._data_dir(self.profile.data.held_out_set(), "eval")

    def _data_dir(self, config: DataConfig, kind: str) -> Path:
        key = stable_hash({"data": asdict(config), "target": self.target.identity(),
                           "code": code_version("decoding", "training/data.py", "training/corpora.py",
                                                "training/tasks.py")})
        return cache_root() / "data" / self.profile.name / f"{kind}-{key}"

    def draft_dir(self, variant: str) -> Path:
        """Where a variant's draft lives: the given drafts folder, or the cache keyed by everything it came from."""
        if self.drafts_given:
            return self.drafts_given / variant
        key = stable_hash({"draft": asdict(self.draft_config(variant)), "train": asdict(self.train_config(variant)),
                           "data": self.data_dir.name, "eval": self.eval_dir.name,
                           "code": code_version("decoding", "drafts", "training")})
        return cache_root() / "drafts" / self.profile.name / f"{variant}-{key}"

    def prepare_data(self, data_dir: Path | None = None, eval_dir: Path | None = None) -> dict:
        """The training data (ShareGPT conversations as they are and/or the target's own answers, each
        labelled by the target) and the held-out set (its own answers to prompts never trained on), both cleared of
        every benchmark task's prompts and answers, into `data_dir` and `eval_dir` (default: the cache's,
        keyed by their code too). Resumes; instant when done."""
        data_dir, eval_dir = data_dir or self.data_dir, eval_dir or self.eval_dir
        if complete_meta(eval_dir) and complete_meta(data_dir):
            return complete_meta(data_dir)
        training, held = split_corpus(sharegpt_conversations(), benchmark_texts())
        prepare_data(self.target, held, eval_dir, self.profile.data.held_out_set())
        return prepare_data(self.target, training, data_dir, self.profile.data)

    def draft(self, variant: str) -> Path:
        """The trained draft of `variant`, training it first if needed (resumes an interrupted run).
        Its sidecar and metrics log are copied to results/<profile>/drafts/<variant>/."""
        config, recipe, out = self.draft_config(variant), self.train_config(variant), self.draft_dir(variant)
        if (out / SIDECAR).exists():
            meta = json.loads((out / SIDECAR).read_text())
            if not (same_config(meta.get("draft_config"), config) and same_config(meta.get("train_config"), recipe)):
                raise Clover2Error(f"{out} holds a {variant} draft trained with other settings than profile "
                                   f"{self.profile.name!r}; move it away (or pass another drafts folder) to retrain")
        else:
            self.prepare_data()
            train(self.target, self.data_dir, out, config, recipe, eval_dir=self.eval_dir)
        keep = self.chapter(f"drafts/{variant}")
        for name in (SIDECAR, "metrics.jsonl"):
            shutil.copyfile(out / name, keep / name)
        return out

    def draft_config(self, variant: str):
        """A variant's draft configuration: its architecture's, with the variant's parts switched (`VARIANTS`)."""
        base, _ = unseeded(variant)
        if base not in VARIANTS:
            raise Clover2Error(f"unknown draft variant {variant!r}; known: {', '.join(VARIANTS)} "
                               "(each may end in -seed<k>: trained with training seed k)")
        arch, overrides = VARIANTS[base]
        return self.profile.draft_config(arch, **overrides)

    def train_config(self, variant: str):
        """A variant's training configuration: the profile's for its architecture, its own switches (`TRAINING`)
        and its training seed (`-seed<k>`)."""
        base, seed = unseeded(variant)
        config = replace(self.profile.train_config(self.draft_config(variant).arch), **TRAINING.get(base, {}))
        return config if seed is None else replace(config, seed=seed)

    def metrics(self, variants: list[str], *, train: bool = False) -> pd.DataFrame:
        """Held-out evaluations of the variants during training, one row per evaluation and head
        (with `train`, also the training batch's metrics at the same steps; column `split`)."""
        logs = pd.concat([training_log(self.draft(v) / "metrics.jsonl", v) for v in variants], ignore_index=True)
        return logs if train else logs[logs.split == "held-out"].drop(columns="split").reset_index(drop=True)

    def final_metrics(self, variants: list[str]) -> pd.DataFrame:
        """Each variant's held-out evaluation of the draft as saved (the one benchmarked), one row per
        head: the last evaluation, or with `train.keep_best` the best one (the sidecar's `best_step`)."""
        saved = {v: json.loads((self.draft(v) / SIDECAR).read_text()).get("best_step") for v in variants}
        return at_saved_step(self.metrics(variants), saved)

    # -- measurements -------------------------------------------------------------------------

    def replay(self, variants: list[str], *, tasks: tuple[str, ...] | None = None, n_per_task: int | None = None,
               max_new_tokens: int | None = None, trees: tuple[str, ...] = ("eagle25",)) -> pd.DataFrame:
        """Greedy decoding of the same prompts by every variant on each tree, without timing: each
        prompt is decoded plainly once and every variant's decoding replayed against it
        (`clover2.decoding.replay`: the drafts run for real, the target's forwards are read off the
        plain decoding), which costs the drafts alone. One row per variant (column `draft`), tree and
        prompt, with each step's accept length: the input of `tau_table`, `depth_acceptance`,
        `accept_histogram` and `vocabulary_coverage` (`clover2.measure.acceptance`)."""
        n_per_task = n_per_task or self.profile.lab.ablation_n_per_task
        max_new_tokens = max_new_tokens or self.profile.lab.ablation_max_new_tokens
        records = [r for t in (tasks or self.profile.bench.tasks) for r in load_task(t, n_per_task)]
        prompts = [(r.category, first_turn_ids(self.target, r)) for r in records]
        engine = self.profile.lab.engine
        models = {v: self.draft(v) for v in variants}  # trained first, outside the replays
        refs = references(self.target, prompts, DecodeConfig(max_new_tokens=max_new_tokens, engine=engine),
                          layers=layers_read(self.target, [self.draft_config(v).arch for v in variants]))
        return replayed_steps(self.target, models, prompts, refs, trees=list(trees), engine=engine)

    def tau(self, variants: list[str], *, tree: str = "eagle25", n_boot: int = 2000, **replay) -> pd.DataFrame:
        """Greedy tau of each variant per task on the same prompts and tree (`replay`'s), with
        intervals paired by prompt (`tau_table`)."""
        return tau_table(self.replay(variants, trees=(tree,), **replay), n_boot=n_boot)

    def bench(self, name: str = "bench", *, rerun: bool = False, reuse: bool = False, seed: int = 0,
              **overrides) -> pd.DataFrame:
        """The profile's benchmark (fields of BenchConfig overridable) into results/<profile>/<name>/.

        Drafts it names are trained first (with training seed `seed`: each architecture's `seeded`
        variant). A finished run is taken from the cache only when
        everything it depends on is unchanged (settings, target, drafts' weights, machine, code);
        `rerun` measures again regardless. `reuse` takes the run already in results/<profile>/<name>/
        as it is, whatever produced it (to re-render a page; its env.json says what measured it)."""
        if reuse and not rerun:
            if not (self.results / name / "bench.csv").exists():
                raise Clover2Error(f"reuse: no benchmark in {self.results / name} to reuse; run it first (reuse=False)")
            return pd.read_csv(self.results / name / "bench.csv")
        config = replace(self.profile.bench,
                         **{k: tuple(v) if isinstance(v, list) else v for k, v in overrides.items()})
        specs = [MethodSpec.parse(s) for s in config.methods]
        drafts = {s.arch: self.draft(seeded(s.arch, seed)) for s in specs if s.is_draft and s.draft is None}
        key = stable_hash({"bench": asdict(config), "target": self.target.identity(), "dtype": str(self.target.dtype),
                           "device": str(self.target.device), "kernels": self.target.kernel_plan.describe(),
                           "machine": machine(), "code": code_version(),
                           "drafts": {n: json.loads((p / SIDECAR).read_text())["weights_sha256"]
                                      for n, p in drafts.items()}})
        cached = cache_root() / "bench" / self.profile.name / f"{name}-{key}"
        if rerun or not (cached / "bench.csv").exists():
            with atomic_path(cached) as tmp:
                run_bench(self.target, config, drafts, tmp)
        out = self.results / name
        shutil.rmtree(out, ignore_errors=True)
        shutil.copytree(cached, out)
        return pd.read_csv(out / "bench.csv")

