"""The designed experiment: Clover-2 against EAGLE with tuned learning rates, seeds and annealed budgets.

`book/protocol.md` says what is run and how it is judged; this module runs it and keeps its state.
A profile's `design` section (`DesignConfig`) names the arms (a draft variant of
`clover2.research.lab.VARIANTS`, a grid of learning rates, a number of seeds, the tier that says
when it runs), the budgets and the evaluation. From those and from what has finished, `plan` lists
every training run in the order the protocol gives: each tier's learning-rate grid (seed 0), then
its seeds at the rate chosen on the dev measure (the reference arm's first); after the first two
tiers, the learning curve and the half-data runs of the primary arms; then the rest.

Every run is warmup-stable-decay and annealed at its own budget. The main-budget run keeps its state
at the start of each shorter budget's decay, and the shorter run continues from there
(`train(start_from=...)`: exactly the run that would have ended at that budget); the curve's longer
runs continue from the main run's last stable step the same way.

The data and the runs live under `$CLOVER2_CACHE/design/<profile>/`, keyed by the data's settings,
the target and each run's settings, not by the code (a study spans sessions and commits; each run's
record names the commit that trained it). Each finished run appends a row to
`results/<profile>/runs.csv` (its budget, tokens, epochs, seconds, the dev measure) and, once its
arm's learning rate is chosen, its replays to `replays.csv` (one row per prompt and tree): both are
written atomically, so an interrupted study loses at most the run in flight, and `clover2 study run`
resumes it.
"""

from __future__ import annotations

import json
import math
import signal
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd
import torch
from safetensors.torch import load_file, save_file

from clover2.decoding.decode import DecodeConfig
from clover2.decoding.kernels import MODES
from clover2.decoding.prompts import first_turn_ids
from clover2.drafts.checkpoint import SIDECAR, WEIGHTS, load_draft, probe, target_record
from clover2.drafts.methods import parse_tree
from clover2.errors import Clover2Error
from clover2.files import atomic_path, sha256_file, stable_hash, write_csv, write_json
from clover2.measure.acceptance import layers_read, references, replayed_steps
from clover2.measure.bench import run_bench
from clover2.measure.provenance import commit, machine
from clover2.paths import cache_root
from clover2.profiles import load_profile
from clover2.training.data import DistillData
from clover2.training.tasks import load_task
from clover2.training.train import train

if TYPE_CHECKING:
    from clover2.research.lab import Lab


@dataclass(frozen=True)
class Arm:
    """One draft of the study and how it is tuned and repeated."""

    variant: str  # a name of clover2.research.lab.VARIANTS: the architecture and its switches
    lrs: tuple[float, ...] = ()  # the learning-rate grid (seed 0 at the main budget; the best dev measure wins)
    seeds: int = 3  # training seeds at the chosen rate, seed 0 (the grid's own run) included
    tier: int = 1  # when it runs: tiers 1 and 2 before the learning curve, higher ones after it
    lr_from: str = ""  # instead of a grid: the rate another arm chose (an ablation keeps its parent's)
    # once the x3 grid's best is interior: one half step (x/sqrt(3), x*sqrt(3)) each side of it (amendment 1)
    refine: bool = False
    # planned, then cut for machine time (book/protocol.md, "Order and cuts"): never run, and named as
    # cut on the results page and the front page, never as undecided
    cut: bool = False
    # seeds added after the first `seeds` where amendment 1's power rule finds them too few to find a 3%
    # difference with each primary arm (`clover2.research.verdicts.power_rule`)
    more_seeds: int = 0

    def __post_init__(self):
        if bool(self.lrs) == bool(self.lr_from) or any(lr <= 0 for lr in self.lrs) or self.seeds < 1 or self.tier < 1 \
                or self.more_seeds < 0:
            raise Clover2Error(f"design arm {self.variant}: give a grid of positive lrs or lr_from (not both), "
                               f"seeds >= 1, more_seeds >= 0 and tier >= 1: {self}")


@dataclass(frozen=True)
class SpeedConfig:
    """The speed claims in their CPU form (book/protocol.md, amendment 1; `clover2.research.speed`): how each
    timed draft's tree is chosen and how the evaluation is timed. The prompts, new tokens and resamples are
    the design's own."""

    calibration_per_task: int = 4  # dev-split prompts of each bench task the trees are chosen on (never evaluated)
    chains: tuple[int, ...] = (1, 2, 3, 4, 5)  # depths of the chain trees among the candidates
    trees: tuple[str, ...] = ("eagle25",)  # fixed trees among the candidates, beside the chains and the fitted tree
    kernels: str = "auto"  # the target's linear kernels while timing (clover2.decoding.kernels): the fastest measured
    # other processes above this share of the machine's CPU during the evaluation: it is timed again, once
    contended_share: float = 0.05
    alpha: float = 0.05  # Holm's family-wise level over C1 and C2; the intervals are at 1 - alpha
    threads: int = 0  # torch threads while timing (0: every CPU this process may use)
    # arms whose seed 0 is timed beside the claims' drafts, its tree chosen alike, in no claim (amendment 1: EAGLE-3)
    descriptive: tuple[str, ...] = ()

    def __post_init__(self):
        if self.calibration_per_task < 1 or not self.chains or min(self.chains) < 1 or self.threads < 0:
            raise Clover2Error(f"design speed_claims: need calibration_per_task >= 1, chain depths >= 1 and "
                               f"threads >= 0: {self}")
        if self.kernels not in MODES or not 0 <= self.contended_share < 1 or not 0 < self.alpha < 1:
            raise Clover2Error(f"design speed_claims: kernels one of {', '.join(MODES)}, 0 <= contended_share < 1 "
                               f"and 0 < alpha < 1: {self}")
        for tree in self.trees:
            parse_tree(tree)  # a bad tree fails when the profile loads, not after the study's training


@dataclass(frozen=True)
class DesignConfig:
    """The study's arms, budgets and evaluation (book/protocol.md)."""

    arms: dict[str, Arm] = field(default_factory=dict)  # by arm name, as the tables show it
    reference: str = "eagle1"  # the arm every primary arm is compared with
    primary: tuple[str, ...] = ()  # the primary hypotheses: each of these against the reference
    budgets: tuple[int, ...] = (300, 600)  # annealed budgets in steps; the last is the main one
    curve: tuple[int, ...] = ()  # longer annealed budgets for the primary arms and the reference, seed 0
    half_data: float = 0.0  # the primary arms and the reference at the main budget on this share of the data (0: none)
    # a grid whose best rate is at its edge gets one more value (x3) beyond it, up to this many times
    # (the protocol: once; amendment 1: until the best is interior, EXTEND_LIMIT times at most)
    extend_edge: int = 1
    # the rates the curve's and the half-data runs train at, by arm (amendment 1: where they were trained,
    # whatever the arm chooses later); an arm not named here uses its chosen rate
    curve_lrs: dict[str, float] = field(default_factory=dict)
    replicate: tuple = ()  # (arm, seed): that seed of the arm trained again on another CPU kind (descriptive)
    n_per_task: int = 24  # evaluation prompts per task (a task's benchmark split may hold fewer)
    max_new_tokens: int = 64
    trees: tuple[str, ...] = ("eagle25",)  # every evaluated run
    main_trees: tuple[str, ...] = ()  # also these, at the main budget only
    n_boot: int = 10000
    margin: float = 0.03  # equivalence: a ratio interval inside [1 - margin, 1 + margin]
    smallest_claim: float = 0.01  # the paper's smallest claimed gain: an interval below 1 + this excludes it
    largest_claim: float = 0.05  # the paper's largest claimed gain: where an interval above 1 lies against the claim
    # the speed claims in their CPU form, timed last into results/<profile>/speed-cpu/ (None: not timed)
    speed_claims: SpeedConfig | None = None
    # the profile whose benchmark prompts this project's departures (the value gain) were developed on: the
    # evaluation prompts it shares are set aside once to read the primary comparisons without them (descriptive)
    developed_on: str = ""

    def __post_init__(self):
        names = set(self.arms)
        if self.arms and (self.reference not in names or not set(self.primary) <= names):
            raise Clover2Error(f"design: reference {self.reference!r} and primary {self.primary} must be arms: "
                               f"{sorted(names)}")
        if any(a.lr_from and a.lr_from not in names for a in self.arms.values()):
            raise Clover2Error("design: lr_from must name another arm")
        if set(self.cut) & {self.reference, *self.primary, *(a.lr_from for a in self.arms.values() if not a.cut)}:
            raise Clover2Error(f"design: the reference, the primary arms and an arm another takes its rate from "
                               f"cannot be cut: {self.cut}")
        if not self.budgets or list(self.budgets) != sorted(set(self.budgets)) or self.budgets[0] < 1:
            raise Clover2Error(f"design: budgets must be increasing step counts >= 1: {self.budgets}")
        if any(c <= self.main for c in self.curve) or list(self.curve) != sorted(set(self.curve)):
            raise Clover2Error(f"design: curve budgets must increase beyond the main budget {self.main}: {self.curve}")
        if not 0 <= self.half_data < 1 or min(self.n_per_task, self.max_new_tokens, self.n_boot) < 1:
            raise Clover2Error(f"design: need 0 <= half_data < 1 and positive sizes: {self}")
        if not 0 <= int(self.extend_edge) <= EXTEND_LIMIT:
            raise Clover2Error(f"design: extend_edge is how many times a grid grows beyond its edge, 0 to "
                               f"{EXTEND_LIMIT}: {self.extend_edge}")
        if self.replicate and (len(self.replicate) != 2 or self.replicate[0] not in names
                               or not 0 <= int(self.replicate[1]) < self.arms[self.replicate[0]].seeds):
            raise Clover2Error(f"design: replicate is [arm, seed] of a planned seed: {self.replicate}")
        if not set(self.curve_lrs) <= names:
            raise Clover2Error(f"design: curve_lrs names arms only: {sorted(self.curve_lrs)}")

    @classmethod
    def from_yaml(cls, raw: dict | None, where: str) -> DesignConfig:
        raw = dict(raw or {})
        arms = raw.pop("arms", {}) or {}
        try:
            if raw.get("speed_claims") is not None:
                raw["speed_claims"] = SpeedConfig(**{k: tuple(v) if isinstance(v, list) else v
                                                     for k, v in raw["speed_claims"].items()})
            parsed = {name: Arm(**{k: tuple(v) if isinstance(v, list) else v for k, v in (spec or {}).items()})
                      for name, spec in arms.items()}
            raw["extend_edge"] = int(raw.get("extend_edge", 1))  # yaml's true/false: the protocol's once / never
            return cls(arms=parsed, **{k: tuple(v) if isinstance(v, list) else v for k, v in raw.items()})
        except TypeError as e:
            raise Clover2Error(f"{where}: {e}") from None

    @classmethod
    def of(cls, profile) -> DesignConfig:
        """A profile's design section, parsed (a profile keeps it as written: the layers below this one
        never need it). A profile built in code may hold a DesignConfig already."""
        if isinstance(profile.design, DesignConfig):
            return profile.design
        return cls.from_yaml(profile.design, f"profile {profile.name!r} [design]")

    @property
    def main(self) -> int:
        return self.budgets[-1]

    def before_amendment(self) -> DesignConfig:
        """The protocol's rate rules before amendment 1 (a grid extended once, no half steps): what the pages
        read while the amendment's grids are still running (book/protocol.md: nothing decided is decided
        again until its block is finished)."""
        return replace(self, extend_edge=1, arms={a: replace(s, refine=False) for a, s in self.arms.items()})

    def settled(self, dev: dict[tuple[str, float], float]) -> bool:
        """Whether the primary arms' and the reference's rates are chosen under these rules."""
        return all(chosen_lr(self, a, dev) is not None for a in (*self.primary, self.reference))

    @property
    def cut(self) -> tuple[str, ...]:
        """The arms cut for machine time, in the protocol's order."""
        return tuple(a for a, spec in self.arms.items() if spec.cut)


@dataclass(frozen=True)
class Run:
    """One training run of the study: an arm at a rate, seed, budget and share of the data. A run
    with a parent continues from the state the parent kept at `parent_step`."""

    arm: str
    lr: float
    seed: int
    budget: int
    share: float = 1.0
    parent: Run | None = None
    parent_step: int = 0
    states: tuple[int, ...] = ()  # the steps whose state it keeps for its children
    replicate: bool = False  # the same run trained again on another CPU kind (`DesignConfig.replicate`)

    @property
    def name(self) -> str:
        half = "" if self.share == 1 else f"-share{self.share:g}"
        return f"{self.recorded_arm}/lr{self.lr:g}-s{self.seed}{half}/b{self.budget}"

    @property
    def recorded_arm(self) -> str:
        """The arm its rows carry: a replicate's is no arm of the design, so that no comparison includes it."""
        return f"{self.arm}-replicate" if self.replicate else self.arm

    @property
    def steps(self) -> int:
        """The steps this run trains itself (a child's first steps are its parent's)."""
        return self.budget - self.parent_step


def decay_start(budget: int, decay_share: float) -> int:
    """The first step at which a warmup-stable-decay run of `budget` steps is below its full rate; a
    run that keeps its state after this many steps is where a run of this budget can branch off."""
    return budget - math.ceil(decay_share * budget)


def seed_runs(design: DesignConfig, arm: str, lr: float, seed: int, decay_share: float, *,
              share: float = 1.0, curve: bool = False) -> list[Run]:
    """The runs of one arm, rate and seed: the main budget (keeping the states the shorter budgets
    start from, and its last stable one, from which a longer run can continue), each shorter budget
    branching off it, then with `curve` the longest curve budget continuing from the main run's
    stable phase and the other curve budgets branching off that."""
    branch = {b: decay_start(b, decay_share) for b in (*design.budgets, *design.curve)}
    shorter, longer = design.budgets[:-1], design.curve if curve else ()
    keep = tuple(sorted({branch[b] for b in (*shorter, design.main)}))  # and its own last stable step
    main = Run(arm, lr, seed, design.main, share, states=keep)
    runs = [main] + [Run(arm, lr, seed, b, share, parent=main, parent_step=branch[b]) for b in shorter]
    if longer:
        top = Run(arm, lr, seed, longer[-1], share, parent=main, parent_step=branch[design.main],
                  states=tuple(branch[b] for b in longer[:-1]))
        runs += [top] + [Run(arm, lr, seed, b, share, parent=top, parent_step=branch[b]) for b in longer[:-1]]
    return runs


EXTEND_LIMIT = 6  # x3 steps beyond a grid's edge at most: 729 times its first end


def grid(design: DesignConfig, arm: str, dev: dict[tuple[str, float], float]) -> tuple[float, ...]:
    """An arm's grid of rates as far as `dev` (the dev measure of each finished (arm, rate) at the main
    budget, seed 0) has decided it: its own values; one more (x3) beyond the edge where its best sits,
    again while the best stays at an edge (`extend_edge` times at most); then, for an arm that `refine`s,
    one half step each side of the best once it is interior. Each value joins once those before it finished."""
    spec = design.arms[arm]
    lrs = sorted(spec.lrs)
    finished = lambda values: all((arm, lr) in dev for lr in values)  # noqa: E731
    for _ in range(int(design.extend_edge)):
        if not finished(lrs):
            return tuple(lrs)
        best = max(lrs, key=lambda lr: dev[(arm, lr)])
        if best == lrs[0]:
            lrs.insert(0, _round(lrs[0] / 3))
        elif best == lrs[-1]:
            lrs.append(_round(lrs[-1] * 3))
        else:
            break
    if not spec.refine or not finished(lrs):
        return tuple(lrs)
    best = max(lrs, key=lambda lr: dev[(arm, lr)])
    if best in (lrs[0], lrs[-1]):  # still at an edge when the extensions ran out: nothing to refine around
        return tuple(lrs)
    return tuple(sorted({*lrs, _round(best / math.sqrt(3)), _round(best * math.sqrt(3))}))


def _round(lr: float) -> float:
    return float(f"{lr:.2g}")


def chosen_lr(design: DesignConfig, arm: str, dev: dict[tuple[str, float], float]) -> float | None:
    """The rate the arm trains its seeds at: the best dev measure over its finished grid; an arm with
    `lr_from` takes that arm's choice. None until the grid is finished."""
    spec = design.arms[arm]
    if spec.lr_from:
        return chosen_lr(design, spec.lr_from, dev)
    lrs = grid(design, arm, dev)
    if not all((arm, lr) in dev for lr in lrs):
        return None
    return max(lrs, key=lambda lr: dev[(arm, lr)])


def run_lr(design: DesignConfig, arm: str, dev: dict[tuple[str, float], float], *, budget: int,
           share: float = 1.0, curve: bool = False) -> float | None:
    """The rate whose runs of `arm` at this budget and share of the data the study evaluates: the
    curve's and the half-data runs' pinned rate (`curve_lrs`) where one is given, else the chosen one.
    `curve`: the learning curve's rate at every budget (its points at the main budgets too, so that one
    curve is one rate)."""
    descriptive = curve or budget in design.curve or share != 1
    return (design.curve_lrs.get(arm) if descriptive else None) or chosen_lr(design, arm, dev)


def plan(design: DesignConfig, dev: dict[tuple[str, float], float], decay_share: float) -> list[Run]:
    """Every run known so far, in the order the study runs them (a seed's runs appear once its
    arm's rate is chosen; the curve once the primary arms' and the reference's are)."""
    def tier(t: int) -> list[Run]:  # its arms' grids, then their seeds at the chosen rates
        # the reference's grid and seeds first: it is in every primary comparison, so each of those is
        # decided as soon as its other arm's are in
        arms = sorted((a for a, spec in design.arms.items() if spec.tier == t and not spec.cut),
                      key=lambda a: a != design.reference)
        runs = [r for a in arms if not design.arms[a].lr_from
                for lr in grid(design, a, dev) for r in seed_runs(design, a, lr, 0, decay_share)]
        for a in arms:
            lr, spec = chosen_lr(design, a, dev), design.arms[a]
            if lr is not None:
                runs += [r for k in range(0 if spec.lr_from else 1, spec.seeds)
                         for r in seed_runs(design, a, lr, k, decay_share)]
        return runs

    tiers = sorted({a.tier for a in design.arms.values()})
    runs = [r for t in tiers if t <= 1 for r in tier(t)]
    if design.replicate:  # the machine replicate, once its arm's rate is chosen (amendment 1: before the new rivals)
        arm, seed = design.replicate[0], int(design.replicate[1])
        lr = chosen_lr(design, arm, dev)
        if lr is not None:
            runs += [replace(r, replicate=True) for r in seed_runs(design, arm, lr, seed, decay_share)[:1]]
    runs += [r for t in tiers if t == 2 for r in tier(t)]
    headline = (*design.primary, design.reference)
    for arm in headline:
        lr = design.curve_lrs.get(arm) or chosen_lr(design, arm, dev)
        if lr is None:
            continue
        if design.curve:  # seed 0's main run is the grid's; only the longer runs are new
            runs += seed_runs(design, arm, lr, 0, decay_share, curve=True)[len(design.budgets):]
        if design.half_data:
            runs += seed_runs(design, arm, lr, 0, decay_share, share=design.half_data)[:1]  # the main budget only
    runs += [r for t in tiers if t > 2 for r in tier(t)]
    return list(dict.fromkeys(runs))


def pooled_top1(evaluation: dict) -> list[float]:
    """Each trained head's top-1 agreement on the held-out set, every category (`evaluate`'s
    `<category>_head<k>_top1`, weighted by its `<category>_tokens`) pooled by its answer tokens."""
    categories = [k.removesuffix("_tokens") for k in evaluation if k.endswith("_tokens") and "_head" not in k]
    tokens = {c: evaluation[f"{c}_tokens"] for c in categories}
    total = sum(tokens.values())
    if not total:
        raise Clover2Error("the evaluation holds no per-category accuracies (evaluate with the held-out set)")
    heads = sum(1 for k in evaluation if k.startswith(f"{categories[0]}_head") and k.endswith("_top1"))
    return [sum(evaluation[f"{c}_head{k}_top1"] * tokens[c] for c in categories) / total for k in range(heads)]


def dev_measure(evaluation: dict) -> float:
    """The simulated chain length 1 + sum_k prod_{i<=k} a_k (`pooled_top1`): the tokens a chain of
    the draft's heads would accept per step if each head's agreement were independent of the others'."""
    a = pooled_top1(evaluation)
    return 1.0 + sum(math.prod(a[:k + 1]) for k in range(len(a)))

class Experiment:
    """The study of a profile with a `design` section, on that profile's target and data (`lab`,
    a `clover2.research.lab.Lab`): its runs' folders, what is done, and the next thing to do."""

    def __init__(self, lab: Lab):
        self.lab, self.protocol = lab, DesignConfig.of(lab.profile)
        self._ruled: tuple | None = None  # (the records' stamps, the design the power rule gives them)
        if not self.protocol.arms:
            raise Clover2Error(f"profile {lab.profile.name!r} has no design section: nothing to run "
                               "(the study's profile is `study`)")
        if lab.profile.train.schedule != "wsd":
            raise Clover2Error(f"profile {lab.profile.name!r}: the study's budgets branch off warmup-stable-decay "
                               f"runs; set train.schedule: wsd (it is {lab.profile.train.schedule!r})")
        self.decay_share = lab.profile.train.decay_share
        self.runs_csv, self.replays_csv = lab.results / "runs.csv", lab.results / "replays.csv"
        self.sittings_csv = lab.results / "sittings.csv"
        self.commit = commit()  # the code this process runs, whatever is checked out while it does

    @property
    def design(self) -> DesignConfig:
        """The profile's design with amendment 1's power rule applied to the runs and replays so far: an arm's
        `more_seeds` join its plan once its first seeds find a 3% difference underpowered."""
        if not any(s.more_seeds for s in self.protocol.arms.values()) or not self.replays_csv.exists():
            return self.protocol
        stamps = tuple((f.stat().st_mtime_ns, f.stat().st_size) for f in (self.runs_csv, self.replays_csv))
        if self._ruled is None or self._ruled[0] != stamps:
            from clover2.research.verdicts import with_power_rule  # it reads this module: imported where it runs

            self._ruled = (stamps, with_power_rule(self.protocol, pd.read_csv(self.replays_csv), self.dev()))
        return self._ruled[1]

    @property
    def data_dir(self) -> Path:
        """The study's training data, prepared once and kept: keyed by its settings and the target, not by
        the code (a study outlives many commits; a change to the data code must not restart it)."""
        key = stable_hash({"data": asdict(self.lab.profile.data), "target": self.lab.target.identity()})
        return cache_root() / "design" / self.lab.profile.name / f"data-{key}"

    @property
    def eval_dir(self) -> Path:
        return self.data_dir.with_name(self.data_dir.name.replace("data-", "eval-", 1))

    @property
    def root(self) -> Path:
        """The runs' folders: keyed by the profile and the data."""
        return self.data_dir.with_name(self.data_dir.name.replace("data-", "runs-", 1))

    def folder(self, run: Run) -> Path:
        return self.root / run.name

    def configs(self, run: Run):
        """The draft and training settings of a run: the arm's variant on the profile, with the run's
        rate, seed, budget, kept states and share of the data."""
        variant = self.design.arms[run.arm].variant
        recipe = replace(self.lab.train_config(variant), lr=run.lr, seed=run.seed, max_steps=run.budget,
                         states=run.states, data_share=run.share, snapshots=())
        return self.lab.draft_config(variant), recipe

    def records(self) -> pd.DataFrame:
        return pd.read_csv(self.runs_csv) if self.runs_csv.exists() else pd.DataFrame(columns=["run"])

    def replayed(self) -> set[tuple[str, str]]:
        if not self.replays_csv.exists():
            return set()
        done = pd.read_csv(self.replays_csv, usecols=["run", "tree"]).drop_duplicates()
        return set(zip(done.run, done.tree))

    def dev(self) -> dict[tuple[str, float], float]:
        """The dev measure of every finished grid run: (arm, rate) at the main budget, seed 0, all the data."""
        r = self.records()
        if r.empty:
            return {}
        r = r[(r.seed == 0) & (r.budget == self.protocol.main) & (r.share == 1)]  # the rule adds no budget
        return {(a, float(lr)): float(d) for a, lr, d in zip(r.arm, r.lr, r.dev)}

    def plan(self) -> list[Run]:
        return plan(self.design, self.dev(), self.decay_share)

    def trees(self, run: Run, dev: dict) -> tuple[str, ...]:
        """The trees a run is replayed on: none before its arm's rate is chosen or at another rate;
        the main trees too at the main budget on all the data."""
        if run_lr(self.design, run.arm, dev, budget=run.budget, share=run.share) != run.lr:
            return ()
        main = run.budget == self.design.main and run.share == 1
        return tuple(dict.fromkeys((*self.design.trees, *(self.design.main_trees if main else ()))))

    def next_step(self, *, timing: bool = True) -> bool:
        """Do the next thing the study needs (train a run, or replay a finished one) and say whether
        there was one: the first run of `plan` not yet trained or replayed. `timing` False: the speed claims'
        timing, which needs the machine alone, is not started (everything before it is done)."""
        dev, done, replayed = self.dev(), set(self.records().run), self.replayed()
        for run in self.plan():
            if self.elsewhere(run):
                continue
            if self.design.arms[run.arm].tier > 2 and not (self.speed_dir / "bench.csv").exists():
                self.speed()  # the primary pair's speed, once everything it compares is done (before the extras)
                return True
            if run.name not in done:
                self.train(run)
                return True
            todo = [t for t in self.trees(run, dev) if (run.name, t) not in replayed]
            if todo:
                self.replay(run, todo)
                return True
        if not (self.speed_dir / "bench.csv").exists():
            self.speed()
            return True
        if self.timing_left:
            from clover2.research.speed import measure, prepare_next  # they read this module's plan: imported here

            if prepare_next(self):  # first every timed draft kept with the results, one a step (training)
                return True
            if timing:
                measure(self)  # then the speed claims: they need the machine alone and every seed's draft
            return timing
        return False

    @property
    def timing_left(self) -> bool:
        """Whether the design's speed claims are still to be timed (`clover2.research.speed`)."""
        return self.design.speed_claims is not None and not (self.speed_claims_dir / "claims.csv").exists()

    def elsewhere(self, run: Run) -> bool:
        """Whether a replicate waits for another CPU kind: the one that trained its original is this one."""
        if not run.replicate:
            return False
        records = self.records().set_index("run")
        original = replace(run, replicate=False).name
        return original not in records.index or records.loc[original, "cpu"] == machine()["cpu_name"]

    def run(self, *, timing: bool = True) -> None:
        """Everything left, in order; each step resumes where an interrupted one stopped. Each sitting
        adds a row to `sittings.csv`, brought up to date after every step: its wall-clock time, machine and
        what it did, which add up to the study's machine time (`ended`: finished, interrupted, "before the
        timing" (`timing` False: everything but the speed claims' timing done), or running where the process was
        killed outright after its last step)."""
        started, before = datetime.now(timezone.utc), (len(self.records()), len(self.replayed()))

        def log(ended: str) -> None:  # this sitting's row, written again after every step
            row = {"started": started.isoformat(timespec="seconds"),
                   "seconds": round((datetime.now(timezone.utc) - started).total_seconds()),
                   "cpu": machine()["cpu_name"], "commit": self.commit, "runs_trained": len(self.records()) - before[0],
                   "replays": len(self.replayed()) - before[1], "ended": ended}
            old = pd.read_csv(self.sittings_csv) if self.sittings_csv.exists() else pd.DataFrame()
            old = old[old.started != row["started"]] if len(old) else old
            write_csv(self.sittings_csv, pd.concat([old, pd.DataFrame([row])], ignore_index=True))

        ended = "interrupted"
        try:  # a SIGTERM outside training (data, replays) ends the sitting through `finally` too
            previous = signal.signal(signal.SIGTERM, _exit_on_sigterm)
        except ValueError:  # not the main thread
            previous = None
        try:
            log("running")  # a process killed outright (SIGKILL, a machine stopped) leaves its last step's row
            while self.next_step(timing=timing):
                log("running")
            ended = "before the timing" if self.timing_left else "finished"
        finally:
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)
            log(ended)

    def train(self, run: Run, *, record: bool = True) -> None:
        """Train a run (continuing from its parent's kept state), then record it. Where the parent is
        recorded but its state is gone (a study moved to a machine without its cache), the run trains
        from step 0: the same run, warmup-stable-decay being the same up to its decay, at the cost
        of the parent's steps. Without `record`, runs.csv keeps the row it has (a recorded run's draft
        trained again on a machine without the cache, for the speed claims)."""
        if run.parent is not None and run.parent.name not in set(self.records().run):
            self.train(run.parent)
        out = self.folder(run)
        if not (out / SIDECAR).exists():
            draft_config, recipe = self.configs(run)
            start = self.kept_state(run)
            if run.parent is not None and start is None:
                print(f"{run.name}: {run.parent.name}'s state at step {run.parent_step} is gone; training from step 0",
                      flush=True)
            self.lab.prepare_data(self.data_dir, self.eval_dir)
            train(self.lab.target, self.data_dir, out, draft_config, recipe, eval_dir=self.eval_dir,
                  start_from=start)
        if record:
            self._record(run)

    def kept_state(self, run: Run) -> Path | None:
        """The state a run continues from: its parent's at `parent_step`, or None (step 0) where it has
        no parent or that state is gone."""
        path = None if run.parent is None else self.folder(run.parent) / "states" / f"step_{run.parent_step:06d}.pt"
        return path if path is not None and path.exists() else None

    def _record(self, run: Run) -> None:
        meta = json.loads((self.folder(run) / SIDECAR).read_text())
        _, recipe = self.configs(run)
        data = DistillData(self.data_dir)
        sequences = sum(1 for s in data.source if s in recipe.sources)  # the training mix's sequences (held-out apart)
        sequences = max(1, round(run.share * sequences))
        state, ev = meta["train_state"], meta["eval"]
        kept = self.kept_state(run)  # the parent's steps and seconds are in `state` too: this run's own are the rest
        inherited = torch.load(kept, weights_only=False)["state"] if kept else {"step": 0, "seconds": 0.0}
        row = {"run": run.name, "arm": run.recorded_arm, "variant": self.design.arms[run.arm].variant, "lr": run.lr,
               "seed": run.seed, "budget": run.budget, "share": run.share, "tokens": state["tokens"],
               "epochs": round(run.budget * recipe.batch_size / sequences, 3), "train_seconds": state["seconds"],
               "seconds_per_step": state["seconds"] / run.budget, "own_steps": run.budget - inherited["step"],
               "own_seconds": state["seconds"] - inherited["seconds"], "dev": dev_measure(ev),
               **{f"top1_head{k}": a for k, a in enumerate(pooled_top1(ev))},
               "weights_sha256": meta["weights_sha256"], "commit": self.commit, "cpu": machine()["cpu_name"],
               "finished": datetime.now(timezone.utc).isoformat(timespec="seconds")}
        records = self.records()
        records = records[records.run != run.name]
        write_csv(self.runs_csv, pd.concat([records, pd.DataFrame([row])], ignore_index=True) if len(records)
                  else pd.DataFrame([row]))  # an empty frame would turn the integer columns into floats

    def prompts(self) -> list[tuple[str, list[int]]]:
        """The evaluation set: `n_per_task` benchmark-split prompts of each of the profile's tasks (all
        of a task's split where it holds fewer)."""
        records = [r for t in self.lab.profile.bench.tasks for r in load_task(t, self.design.n_per_task)]
        return [(r.category, first_turn_ids(self.lab.target, r)) for r in records]

    def seen_in_development(self) -> list[int]:
        """The evaluation prompts (their places in `prompts`) that the `developed_on` profile's benchmark also
        samples: seen while this project's departures were developed."""
        if not self.design.developed_on:
            return []
        bench = load_profile(self.design.developed_on).bench
        seen = {r.turns for t in bench.tasks for r in load_task(t, bench.n_per_task, bench.seed)}
        records = [r for t in self.lab.profile.bench.tasks for r in load_task(t, self.design.n_per_task)]
        return [i for i, r in enumerate(records) if r.turns in seen]

    def replay(self, run: Run, trees: tuple[str, ...] | list[str]) -> None:
        """Replay a finished run's draft on the evaluation set (greedy, untimed) and add its rows."""
        prompts = self.prompts()
        refs = self._references(prompts)
        rows = replayed_steps(self.lab.target, {run.name: self.folder(run)}, prompts, refs, trees=list(trees))
        rows = rows.rename(columns={"draft": "run"}).assign(arm=run.recorded_arm, lr=run.lr, seed=run.seed,
                                                            budget=run.budget, share=run.share,
                                                            cpu=machine()["cpu_name"])
        old = pd.read_csv(self.replays_csv) if self.replays_csv.exists() else rows.iloc[:0]
        old = old[~((old.run == run.name) & old.tree.isin(trees))]
        write_csv(self.replays_csv, pd.concat([old, rows], ignore_index=True))

    @property
    def speed_dir(self) -> Path:
        return self.lab.results / "speed"

    @property
    def speed_claims_dir(self) -> Path:
        """The speed claims in their CPU form (`clover2.research.speed`); `speed_dir` is the earlier run on
        the 25-node tree and PyTorch's stock kernels."""
        return self.lab.results / "speed-cpu"

    def speed(self) -> pd.DataFrame:
        """The primary arms' and the reference's published drafts (seed 0, main budget), timed against
        plain decoding on the evaluation set's tasks, interleaved prompt by prompt in one run, every
        draft at float precision, on EAGLE-1's 25-node tree (`clover2.measure.bench.run_bench`;
        env.json names the machine and the load beside it)."""
        folders = {p.name: p for p in self.publish()}
        arms = [a for a in (*self.design.primary, self.design.reference) if a in folders]
        methods = ("ar", *(f"{self.lab.draft_config(self.design.arms[a].variant).arch}@{self.design.trees[0]}"
                           f"={folders[a]}" for a in arms))
        config = replace(self.lab.profile.bench, methods=methods, draft_weights="float",
                         n_per_task=self.design.n_per_task, max_new_tokens=self.design.max_new_tokens)
        with atomic_path(self.speed_dir) as tmp:
            table = run_bench(self.lab.target, config, None, tmp)
        return table

    def published(self) -> Path:
        return self.lab.results / "drafts"

    def publish(self) -> list[Path]:
        """Seed 0 of every arm with a grid at the main budget, on all the data, at its chosen rate,
        copied to results/<profile>/drafts/<arm>/ with bf16 weights (its settings, the target's
        fingerprint, the weights' SHA-256, its record from runs.csv and its `probe` beside them): what a reader loads
        with `load_draft` or `clover2 generate --method ARCH=FOLDER`. Arms not finished yet are skipped."""
        dev, recorded, out = self.dev(), set(self.records().run), []
        for arm, spec in self.design.arms.items():
            lr = chosen_lr(self.design, arm, dev)
            run = None if spec.lr_from or lr is None else seed_runs(self.design, arm, lr, 0, self.decay_share)[0]
            if run is None or run.name not in recorded:
                continue
            source, dest = self.folder(run), self.published() / arm
            if not (source / WEIGHTS).exists():  # a machine without the cache: what was published stays
                if (dest / SIDECAR).exists() and json.loads((dest / SIDECAR).read_text()).get("run") == run.name:
                    out.append(dest)
                    continue
                raise Clover2Error(f"{run.name}: its draft is not in {source} (another machine's cache?) and not "
                                   f"published in {dest}; train it again with `clover2 study run`")
            out.append(self.publish_run(run, dest))
        return out

    def publish_run(self, run: Run, dest: Path) -> Path:
        """`run`'s draft from this machine's cache, written to `dest` with bf16 weights, its settings, the target's
        fingerprint, the weights' SHA-256, its record from runs.csv and its `probe` (atomically)."""
        source, record = self.folder(run), self.records().set_index("run").loc[run.name]
        weights = {k: v.to(torch.bfloat16) if v.is_floating_point() else v
                   for k, v in load_file(source / WEIGHTS).items()}
        with atomic_path(dest) as tmp:
            tmp.mkdir(parents=True)
            save_file(weights, tmp / WEIGHTS)
            meta = json.loads((source / SIDECAR).read_text())
            meta |= {"weights_sha256": sha256_file(tmp / WEIGHTS), "weights_dtype": "bfloat16", "run": run.name,
                     "target": target_record(self.lab.target), "record": json.loads(record.to_json())}
            write_json(tmp / SIDECAR, meta)
            target = self.lab.target
            write_json(tmp / SIDECAR, meta | {"probe": probe(load_draft(tmp, target), target)})
        return dest

    def check_published(self, arms: Sequence[str] = ()) -> pd.DataFrame:
        """Replay every published draft (or those of `arms`) on the evaluation set (25-node tree) and set its
        tau beside the committed one of the run it came from: one row per draft, with the difference."""
        committed = pd.read_csv(self.replays_csv)
        folders = sorted(p.parent for p in self.published().glob(f"*/{SIDECAR}"))
        unknown = set(arms) - {f.name for f in folders}
        if unknown:
            raise Clover2Error(f"no published draft for {', '.join(sorted(unknown))}: published are "
                               f"{', '.join(f.name for f in folders) or 'none'} (clover2 study publish)")
        rows, prompts, tree = [], self.prompts(), self.design.trees[0]
        refs = self._references(prompts)  # once for every draft
        for folder in [f for f in folders if not arms or f.name in arms]:
            meta = json.loads((folder / SIDECAR).read_text())
            fresh = replayed_steps(self.lab.target, {folder.name: load_draft(folder, self.lab.target)}, prompts,
                                   refs, trees=[tree])
            old = committed[(committed.run == meta["run"]) & (committed.tree == tree)]
            rows.append({"arm": folder.name, "run": meta["run"], "tree": tree,
                         "committed_tau": old.tokens.sum() / old.steps.sum(),
                         "published_tau": fresh.tokens.sum() / fresh.steps.sum()})
        out = pd.DataFrame(rows)
        if not out.empty:
            out["difference"] = out.published_tau - out.committed_tau
        return out

    def _references(self, prompts):
        archs = sorted({self.lab.draft_config(a.variant).arch for a in self.design.arms.values()})
        return references(self.lab.target, prompts, DecodeConfig(max_new_tokens=self.design.max_new_tokens),
                          self.root / "references.pt", layers=layers_read(self.lab.target, archs))

    def status(self) -> pd.DataFrame:
        """One row per run of the plan so far: done, partial (the step its checkpoint holds, `reached`) or to do,
        the trees still to replay, and its steps; seeds still waiting for their arm's rate are listed
        with no rate."""
        dev, records, replayed = self.dev(), self.records(), self.replayed()
        done = set(records.run)
        rows = []
        for run in self.plan():
            ckpt = self.folder(run) / "checkpoint" / "state.pt"
            reached = _step(ckpt) if run.name not in done and ckpt.exists() else 0
            state = "done" if run.name in done else (f"at step {reached}" if reached else
                                                     ELSEWHERE if self.elsewhere(run) else "to do")
            lost = run.parent is not None and run.parent.name in done and self.kept_state(run) is None
            rows.append({"run": run.name, "arm": run.recorded_arm, "lr": run.lr, "seed": run.seed, "budget": run.budget,
                         "share": run.share, "steps": run.budget if lost else run.steps, "state": state,
                         "reached": reached,
                         "to_replay": " ".join(t for t in self.trees(run, dev) if (run.name, t) not in replayed)})
        listed = {(r["arm"], r["seed"]) for r in rows}
        for arm, spec in self.design.arms.items():
            if chosen_lr(self.design, arm, dev) is None and not spec.cut:
                rows += [{"run": f"{arm}/(rate to be chosen)-s{k}", "arm": arm, "lr": math.nan, "seed": k,
                          "budget": self.design.main, "share": 1.0, "steps": math.nan, "state": "waits for the grid",
                          "reached": 0, "to_replay": ""} for k in range(1, spec.seeds) if (arm, k) not in listed]
        return pd.DataFrame(rows)

    def pace(self) -> pd.Series:
        """Each arm's median seconds a training step on this CPU kind (on any, for an arm not trained here; an arm
        never trained at the pace of the arm whose rate it takes, its parts being alike)."""
        records = self.records()
        if "seconds_per_step" not in records:
            return pd.Series(dtype=float)
        here = records[records.cpu == machine()["cpu_name"]]
        pace = here.groupby("arm").seconds_per_step.median().combine_first(
            records.groupby("arm").seconds_per_step.median())
        return pace.combine_first(pd.Series({a: pace[s.lr_from] for a, s in self.design.arms.items()
                                             if s.lr_from in pace.index}, dtype=float))

    def hours_left(self, table: pd.DataFrame) -> tuple[float, list[str]]:
        """The training the runs not done in `table` (`status`'s) still need, in hours, at each arm's `pace`, a run
        its checkpoint holds counted from there; and the arms it cannot price. Replays and the speed stage come on
        top."""
        left, pace = table[(table.state != "done") & table.steps.notna()], self.pace()
        steps = steps_left(left)
        priced = left.arm.isin(pace.index)
        return float((steps[priced] * left.arm[priced].map(pace)).sum() / 3600), sorted(set(left.arm[~priced]))


def steps_left(table: pd.DataFrame) -> pd.Series:
    """The training steps each run of `table` (`Experiment.status`'s) still needs, counted from its checkpoint
    (a branch starts at budget - steps); NaN for a run whose rate is not chosen yet."""
    left = table.steps - (table.reached - (table.budget - table.steps)).clip(lower=0)
    return left.where(table.state != "done", 0)


ELSEWHERE = "waits for another CPU kind"  # the state of a replicate on the CPU kind that trained its original


def _exit_on_sigterm(signum, frame):
    raise SystemExit(128 + signum)


def _step(checkpoint: Path) -> int:
    return int(torch.load(checkpoint, weights_only=False)["state"]["step"])
