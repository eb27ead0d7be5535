"""The study's speed claims in their CPU form (book/protocol.md, amendment 1): does each Clover-2 decode
faster than plain decoding (C1), and faster than EAGLE-1 (C2), on this CPU?

`clover2 study run` measures them last (`Experiment.next_step`, for a design with `speed_claims`), once every
planned run is trained and replayed, into results/<profile>/speed-cpu/, written at once. First, one step at a
time, it keeps every timed seed's draft with the results (`prepare_next`: seed 0's is the published draft, the
other seeds' are written alike into the study's cache, seeds/, outside git, where the published drafts stay under
100 MB; a draft this machine's cache lacks is trained again, the same rate, seed and data, runs.csv keeping its
row), each replayed untimed: its tau beside the committed one (drafts/timed.csv, drafts.csv). Only then does the timing
start, which needs the machine alone. A stage cut short resumes: the kernel plan, each arm's calibration and each
finished chunk of the evaluation's prompts are kept in results/<profile>/speed-cpu-work/, keyed by the CPU model
and size, the threads, the drafts' weights, the prompts and the timed code (another key starts over); the
suffix caches are filled again with the finished prompts before a resumed evaluation goes on. (speed/ keeps
the earlier run on the 25-node tree and PyTorch's stock kernels.)

1. **Kernels**: a copy of the target on the fastest linear kernels, measured afresh at the stage's start
   (`kernels="auto"`; the study's own target keeps the stock kernels its replays decode with). Plain decoding
   runs on the same plan, which env.json records with the cost curve that checks it (`checked_cost_curves`).
2. **Trees** (calibration.csv): per timed arm (the primary arms and the reference), its seed-0 draft on each
   candidate tree (a chain of each depth in `chains`, the tree `clover2.measure.fit` fits to that draft on
   this machine, and the fixed `trees`: EAGLE-1's 25 nodes), interleaved with plain decoding on a calibration
   set of `dev`-split prompts the evaluation never sees; the highest geometric-mean speedup wins. The fit's
   predicted speedup stands beside the measured one.
3. **Evaluation** (timings.csv): on the design's evaluation prompts, plain decoding, prompt lookup, the suffix
   cache and every seed of each timed arm on its tree, and each seed-0 draft behind the suffix cache
   (descriptive), in one repeat interleaved prompt by prompt (`clover2.measure.bench.interleaved`: the orders
   of a Williams design, each method as often right after each other one); a prompt during which other
   processes took more than `contended_share` of the machine is timed again, once (timings-contended.csv keeps
   the first timing). Every output must equal plain greedy decoding's, checked chunk by chunk: one that parts
   from it at a near tie, where the kernels' float rounding decides, is kept and counted (near-ties.csv); any
   other is an error, and nothing is written.
4. **Statistic** (speedups.csv, claims.csv): per prompt and seed, plain decoding's seconds over the method's;
   an arm's speedup is their geometric mean over prompts, averaged in logs over its seeds, with the interval
   of `clover2.research.verdicts.bootstrap` (prompts resampled once and shared by every arm; each arm's seeds
   from a generator of its own) on the log speedups. C1 and C2 for every primary arm are one family, Holm at
   `alpha`: "faster", "slower" or "no difference shown".
"""

from __future__ import annotations

import copy
import json
import math
import os
import shutil
import warnings
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from clover2.decoding.decode import DecodeConfig
from clover2.decoding.drafter import Memory
from clover2.decoding.kernels import KernelPlan, install
from clover2.decoding.prompts import PromptRecord, first_turn_ids
from clover2.decoding.target import Target, with_kernels
from clover2.drafts.base import DraftModel
from clover2.drafts.checkpoint import SIDECAR, WEIGHTS, load_draft
from clover2.drafts.methods import MethodSpec
from clover2.errors import Clover2Error
from clover2.files import atomic_path, stable_hash, write_csv, write_json
from clover2.measure.acceptance import replayed_steps
from clover2.measure.bench import Method, checked_cost_curves, interleaved, make_method
from clover2.measure.fit import FitConfig, calibrate, calibration_records, fit
from clover2.measure.provenance import code_version, environment, machine
from clover2.research.design import Run, SpeedConfig, chosen_lr, seed_runs
from clover2.research.verdicts import Cell, bootstrap, compare, holm, secondary_verdict
from clover2.training.tasks import load_task

if TYPE_CHECKING:
    from clover2.research.design import Experiment

PLAIN = "ar"  # plain decoding: what every speedup is measured against, on the same prompt moments apart
BASELINES = ("pld", "suffix")  # the training-free methods timed beside the drafts
TIMINGS = ["prompt", "task", "method", "arm", "seed", "tree", "seconds", "new_tokens", "steps", "step_tokens", "tau",
           "identical", "other_load", "decode_s", "draft_share"]  # timings.csv's columns
WORK_FORMAT = 3  # the layout (and order design) of an interrupted stage's folder: one of another is never resumed
# drafts.csv's columns (drafts/timed.csv): where the draft is kept (seed 0: its folder in drafts/; another: in the
# study's cache), its tau replayed there beside the committed run's,
# the CPU that trained it again for the stage and those weights' SHA-256 (empty where it was not), and the kept
# (bf16) weights' SHA-256
DRAFTS = ["arm", "seed", "run", "draft", "tree", "committed_tau", "timed_tau", "trained_again_on",
          "committed_weights_sha256", "trained_weights_sha256", "timed_weights_sha256"]


def measure(experiment: Experiment) -> pd.DataFrame:
    """The stage: every timed seed's draft on this machine, the trees chosen, the evaluation timed and judged,
    and every file written at once into `experiment.speed_claims_dir`. Returns the claims."""
    design, config = experiment.design, experiment.design.speed_claims
    if config is None:
        raise Clover2Error(f"profile {experiment.lab.profile.name!r}: its design has no speed_claims section")
    prompts = experiment.prompts()
    while prepare_next(experiment):  # `clover2 study run` takes these before the stage; a direct call here
        pass
    drafts = timed_drafts(experiment)
    kept = drafts_table(experiment, drafts)
    folders = {key: draft_folder(experiment, *key) for key in drafts}
    records = calibration_set(experiment.lab.profile.bench.tasks, config.calibration_per_task)
    arch = {arm: experiment.lab.draft_config(design.arms[arm].variant).arch for arm, _ in drafts}
    decode = DecodeConfig(max_new_tokens=design.max_new_tokens, timed=True)  # greedy, eager engine: the fp32 exact path
    fit_config = replace(experiment.lab.profile.bench.fit, max_new_tokens=design.max_new_tokens)
    threads, using = torch.get_num_threads(), config.threads or len(os.sched_getaffinity(0))
    key = work_key(using, dict(zip(kept.draft, kept.timed_weights_sha256)), config, design.max_new_tokens, prompts,
                   records)
    work = experiment.lab.results / "speed-cpu-work"
    if not (work / f"key-{key}").exists():
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        (work / f"key-{key}").touch()
    torch.set_num_threads(using)
    try:
        target, curve, kernel_check = stage_kernels(experiment.lab.target, config.kernels, work)
        models = {key: load_draft(folder, target) for key, folder in folders.items()}  # at float precision
        trees, calibration = choose_trees(target, {arm: (arch[arm], models[arm, 0]) for arm in arch}, records,
                                          curve, config, fit_config, decode, n_boot=design.n_boot, work=work)
        methods, who = evaluation_methods(target, models, arch, trees, decode)
        runs, first, load, ties = evaluate(methods, dict(enumerate(ids for _, ids in prompts)),
                                           dict(enumerate(task for task, _ in prompts)), config.contended_share,
                                           work, target=target, decode=decode)
        env = environment(target)
    finally:
        torch.set_num_threads(threads)
    timings = _timings(runs, who)
    table = speed_cells(timings)
    draws = bootstrap(table, design.n_boot)
    out = claims(table, draws, design.primary, design.reference, config.alpha)
    per_seed = timings.groupby(["arm", "seed"]).agg(tree=("tree", "first"), step_tokens=("step_tokens", "sum"),
                                                    steps=("steps", "sum"))
    per_arm = per_seed.assign(tau=per_seed.step_tokens / per_seed.steps).groupby("arm").agg(
        tree=("tree", "first"), tau=("tau", "mean"))  # a seed's tau pooled over the prompts, averaged over seeds
    summary = speedups(table, draws, 1 - config.alpha).join(per_arm, on="arm")
    env |= {"commit": experiment.commit, "kernel_plan": target.kernel_plan.describe(), "kernel_check": kernel_check,
            "speed_claims": asdict(config), "fit": asdict(fit_config), "trees": trees,
            "calibration_prompts": dict(Counter(r.category for r in records)),
            "calibration_other_load": float(calibration.other_load.mean()), "evaluation": load,
            "prompts": len(prompts), "max_new_tokens": design.max_new_tokens, "n_boot": design.n_boot,
            "near_ties": int((ties.timing == "kept").sum()) if len(ties) else 0,
            "calibration_near_ties": int(calibration.near_ties.sum()),
            "drafts": {f"{arm}-s{seed}": {"run": run.name, "draft": draft, "weights_sha256": sha}
                       for (arm, seed), run, draft, sha in zip(drafts, drafts.values(), kept.draft,
                                                               kept.timed_weights_sha256)},
            "retrained": kept.run[kept.trained_again_on.notna()].tolist(),
            "timed_tau_difference": float((kept.timed_tau - kept.committed_tau).abs().max())}
    with atomic_path(experiment.speed_claims_dir) as tmp:
        write_csv(tmp / "calibration.csv", calibration)
        write_csv(tmp / "timings.csv", timings)
        if first is not None:
            write_csv(tmp / "timings-contended.csv", _timings(first, who))
        if len(ties):
            write_csv(tmp / "near-ties.csv", ties)
        write_csv(tmp / "speedups.csv", summary)
        write_csv(tmp / "drafts.csv", kept)
        write_csv(tmp / "claims.csv", out)
        write_json(tmp / "env.json", env)
    shutil.rmtree(work)  # written: nothing left to resume (the drafts and their record stay)
    return out


def work_key(threads: int, weights: dict[str, str], config: SpeedConfig, max_new_tokens: int,
             prompts: list[tuple[str, list[int]]], records: Sequence[PromptRecord]) -> str:
    """What an interrupted stage's kept work is for: this CPU model and size, these threads, drafts (by folder),
    settings, prompts and calibration prompts, the timed code and this layout of its files; another starts over."""
    return stable_hash([WORK_FORMAT, machine()["cpu_name"], os.cpu_count(), threads, weights, asdict(config),
                        max_new_tokens, prompts, [asdict(r) for r in records],
                        code_version("decoding", "drafts", "measure")])


def stage_kernels(target: Target, mode: str, work: Path) -> tuple[Target, pd.DataFrame, dict]:
    """A copy of the target on `mode`'s kernels for the whole stage (the study's own target keeps the stock kernels
    its replays decode with), its verification cost curve and what checking it found (`checked_cost_curves`).
    `auto` measures the kernels afresh on the idle machine at the stage's start (a cached plan may date from a
    busier hour); the plan, the timings it was chosen from and the curve are kept in `work`, so that a resumed
    stage times on the very plan its first prompts were timed on. A forced kernel needs no measurement."""
    staged = replace(target, model=copy.deepcopy(target.model))
    if mode == "auto" and (work / "kernels.json").exists():
        kept = json.loads((work / "kernels.json").read_text())
        install(staged.model, KernelPlan(tuple(kept["kernels"]), tuple(kept["buckets"]),
                                         source="measured at the stage's start"))
        staged.model.kernel_timings = kept["timings"]
        return replace(staged, kernels=mode), pd.read_csv(work / "cost_curve.csv"), kept["check"]
    staged = with_kernels(staged, mode, fresh=mode == "auto")
    curves, check = checked_cost_curves(staged, ["eager"])
    write_csv(work / "cost_curve.csv", curves["eager"])
    write_json(work / "kernels.json", {"kernels": list(staged.kernel_plan.kernels),
                                       "buckets": list(staged.kernel_plan.buckets), "check": check,
                                       "timings": getattr(staged.model, "kernel_timings", [])})
    return staged, curves["eager"], check


def timed_drafts(experiment: Experiment, *, planned: bool = False) -> dict[tuple[str, int], Run]:
    """Every seed of each timed arm (the primary arms, then the reference), then seed 0 of each descriptive arm
    (`SpeedConfig.descriptive`: timed beside them, in no claim), by (arm, seed): its main-budget run on all the
    data at the arm's chosen rate, which must be recorded (the claims are timed after every seed); `planned`:
    those whose arm's rate is chosen, trained or not."""
    design, dev, recorded = experiment.design, experiment.dev(), set(experiment.records().run)
    descriptive = design.speed_claims.descriptive if design.speed_claims else ()
    unknown = [a for a in descriptive if a not in design.arms or design.arms[a].cut or design.arms[a].lr_from]
    if unknown:
        raise Clover2Error(f"design speed_claims: descriptive names arms with a grid of their own: {unknown}")
    out = {}
    for arm in (*design.primary, design.reference, *descriptive):
        lr = chosen_lr(design, arm, dev)
        if lr is None and planned:
            continue
        if lr is None:
            raise Clover2Error(f"{arm}'s learning rate is not chosen yet: the speed claims are timed after every seed")
        for seed in range(design.arms[arm].seeds if arm not in descriptive else 1):
            run = seed_runs(design, arm, lr, seed, experiment.decay_share)[0]
            if run.name not in recorded and not planned:
                raise Clover2Error(f"{run.name} is not trained yet: the speed claims are timed after every seed")
            out[arm, seed] = run
    return out


def draft_folder(experiment: Experiment, arm: str, seed: int) -> Path:
    """Where the stage's draft of `arm`'s seed is kept: seed 0's is the published draft (`Experiment.publish`),
    every other seed's is written alike (bf16 weights, timed at float precision) into the study's cache,
    seeds/ARM-sSEED/, not committed: the published drafts stay the headline ones, under 100 MB in git."""
    return experiment.published() / arm if seed == 0 else experiment.root / "seeds" / f"{arm}-s{seed}"


def drafts_csv(experiment: Experiment) -> Path:
    """The timed drafts' record (committed beside them): each one's tau replayed beside the committed run's."""
    return experiment.published() / "timed.csv"


def _kept(folder: Path, run: Run) -> bool:
    """Whether `folder` holds `run`'s draft."""
    return (folder / WEIGHTS).exists() and json.loads((folder / SIDECAR).read_text()).get("run") == run.name


def prepare_next(experiment: Experiment) -> bool:
    """Bring the first timed draft not kept yet (`draft_folder`) onto this machine and say whether there was one:
    published from this machine's cache, or trained again first where the cache lacks it (the same rate, seed and
    data; runs.csv keeps the row of the run it repeats), then replayed on the design's first tree, untimed, with
    the study's own target: its tau beside the committed one in `drafts_csv`, with the CPU that trained it again
    (a different machine may round differently). A draft about to be trained has its row written first, so that
    a process stopped before the replay still says it was trained again. `clover2 study run` takes these one step
    at a time before the stage, which alone needs the machine to itself."""
    path = drafts_csv(experiment)
    kept = pd.read_csv(path) if path.exists() else pd.DataFrame(columns=DRAFTS)
    replayed = set(kept.dropna(subset=["timed_tau"]).run)
    todo = [(key, run) for key, run in timed_drafts(experiment).items()
            if run.name not in replayed or not _kept(draft_folder(experiment, *key), run)]
    if not todo:
        return False
    (arm, seed), run = todo[0]
    dest, source, tree = draft_folder(experiment, arm, seed), experiment.folder(run), experiment.design.trees[0]
    earlier = kept[kept.run == run.name]
    row = {"arm": arm, "seed": seed, "run": run.name,
           "draft": dest.relative_to(experiment.published() if seed == 0 else experiment.root).as_posix(),
           "tree": tree, "committed_weights_sha256": experiment.records().set_index("run").weights_sha256[run.name],
           **({k: earlier.iloc[0][k] for k in ("trained_again_on", "trained_weights_sha256")} if len(earlier) else {})}
    if not _kept(dest, run):
        if not (source / WEIGHTS).exists():
            if (source / SIDECAR).exists():
                raise Clover2Error(f"{source} holds a {SIDECAR} but no weights: remove the folder, and the speed "
                                   "claims train the run again")
            row["trained_again_on"] = machine()["cpu_name"]
            kept = _with_row(path, kept, row)  # said before the training starts
            print(f"{run.name}: its draft is neither kept in {dest} nor in this machine's cache; training it again "
                  "for the speed claims", flush=True)
            experiment.train(run, record=False)
        if isinstance(row.get("trained_again_on"), str):
            row["trained_weights_sha256"] = _weights_sha256(source)
        experiment.publish_run(run, dest)
        kept = _with_row(path, kept, row)
    prompts = experiment.prompts()
    fresh = replayed_steps(experiment.lab.target, {run.name: dest}, prompts, experiment._references(prompts),
                           trees=[tree])
    committed = pd.read_csv(experiment.replays_csv)
    old = committed[(committed.run == run.name) & (committed.tree == tree)]
    _with_row(path, kept, row | {"committed_tau": old.tokens.sum() / old.steps.sum(),
                                 "timed_tau": fresh.tokens.sum() / fresh.steps.sum(),
                                 "timed_weights_sha256": _weights_sha256(dest)})
    return True


def drafts_left(experiment: Experiment) -> tuple[int, int, float]:
    """What the stage still needs before its timing (`clover2 study status`): how many timed drafts are not kept
    yet, how many of them this machine must train again (its cache lacks them) and that training's hours at each
    arm's `Experiment.pace`."""
    path = drafts_csv(experiment)
    replayed = set(pd.read_csv(path).dropna(subset=["timed_tau"]).run) if path.exists() else set()
    left = {key: run for key, run in timed_drafts(experiment, planned=True).items()
            if run.name not in replayed or not _kept(draft_folder(experiment, *key), run)}
    train = [run for key, run in left.items() if not (experiment.folder(run) / WEIGHTS).exists()
             and not _kept(draft_folder(experiment, *key), run)]
    pace = experiment.pace()
    return len(left), len(train), sum(run.budget * pace.get(run.arm, math.nan) for run in train) / 3600


def _with_row(path: Path, kept: pd.DataFrame, row: dict) -> pd.DataFrame:
    """`drafts_csv` with `row` in place of the run's earlier one, written."""
    out = pd.concat([kept[kept.run != row["run"]], pd.DataFrame([row])], ignore_index=True).reindex(columns=DRAFTS)
    write_csv(path, out)
    return out


def drafts_table(experiment: Experiment, drafts: dict[tuple[str, int], Run]) -> pd.DataFrame:
    """The rows of `drafts_csv` for the stage's `drafts` (drafts.csv), in their order."""
    kept = pd.read_csv(drafts_csv(experiment)).set_index("run")
    return kept.loc[[run.name for run in drafts.values()]].reset_index().reindex(columns=DRAFTS)


def _weights_sha256(folder) -> str:
    return json.loads((folder / SIDECAR).read_text())["weights_sha256"]


def calibration_set(tasks: Sequence[str], per_task: int) -> list[PromptRecord]:
    """`per_task` prompts of each task's `dev` split (a seeded sample; all of a split that holds fewer): what
    the trees are chosen on, never in the evaluation, which samples the `bench` split (`in_split`)."""
    return [r for task in tasks for r in load_task(task, per_task, split="dev")]


def draft_method(name: str, tree: str, arm: str, seed: int, model: DraftModel, target: Target,
                 decode: DecodeConfig) -> Method:
    """A draft method (`ARCH` or `suffix+ARCH`) on `tree` with a loaded float draft, labelled by its arm and
    seed (`clover2@chain3=eagle1-s2`), so that the seeds of one architecture are apart in the tables."""
    spec = replace(MethodSpec.parse(f"{name}@{tree}"), named=f"{arm}-s{seed}")
    return replace(make_method(spec, target, decode, draft=model), draft_weights="float")


def choose_trees(target: Target, drafts: dict[str, tuple[str, DraftModel]], records: Sequence[PromptRecord],
                 curve: pd.DataFrame, config: SpeedConfig, fit_config: FitConfig, decode: DecodeConfig, *,
                 n_boot: int, work: Path | None = None) -> tuple[dict[str, str], pd.DataFrame]:
    """Each arm's tree, chosen by measured speed on the calibration prompts `records`: its draft (`drafts`: arm
    -> architecture and seed-0 model) on every candidate (the chains, the fitted tree, the fixed trees),
    interleaved with plain decoding, one run per arm; the highest geometric-mean speedup wins (ties: the first
    candidate, the shallower chain). The fit calibrates on `fit_config.prompts` of the records, drawn evenly from
    their tasks, against the verification cost `curve` (where it predicts nothing beats plain decoding, no
    fitted tree is a candidate). Returns the chosen tree per arm, and one row per arm and candidate: the
    measured speedup with its interval (`speedups`), the speed of the decoding steps alone (what a fit
    predicts), the fit's prediction for the fitted tree, tau, the outputs parted from plain decoding's at a near
    tie (`near_ties`), and whether it was chosen. With `work`, each arm's rows are kept there as it finishes
    (calibration.csv) and an arm already there is not timed again: an interrupted calibration resumes."""
    prompts = {i: first_turn_ids(target, r) for i, r in enumerate(records)}
    categories = {i: r.category for i, r in enumerate(records)}
    tasks = list(dict.fromkeys(categories.values()))
    fit_prompts = [first_turn_ids(target, r) for r in calibration_records(
        [[r for r in records if r.category == t] for t in tasks], [], fit_config.prompts, seed=0)]
    kept = pd.read_csv(work / "calibration.csv") if work is not None and (work / "calibration.csv").exists() \
        else pd.DataFrame()
    for arm, (arch, model) in drafts.items():
        if len(kept) and arm in set(kept.arm):
            continue
        fitted, _ = fit(calibrate(target, model, fit_prompts, fit_config), curve, fit_config)
        predicted = {}
        if fitted is not None and fitted.tree is not None:  # greedy, a fitted tree of one node is the one-token
            t = fitted.tree  # chain (`clover2.measure.fit.fitted_factory`): timed once, as that chain
            one = t.budget == 1 and decode.sampling.greedy
            predicted["chain1" if one else f"dynamic:{t.budget}:{t.depth}:{t.top_k}"] = fitted.predicted_speedup
        # the chains shallow first (a tie goes to the shallower), the one-node fitted tree's among them
        chains = [f"chain{d}" for d in sorted({*config.chains, *([1] if "chain1" in predicted else [])})]
        methods = {tree: draft_method(arch, tree, arm, 0, model, target, decode)
                   for tree in dict.fromkeys([*chains, *predicted, *config.trees])}
        runs, _ = _timed_alone([make_method(PLAIN, target, decode), *methods.values()], prompts, categories,
                               config.contended_share, f"{arm}'s calibration")
        ties = near_ties(runs, f"{arm}'s calibration", prompts, target, decode)
        runs = runs.assign(arm=runs.method, seed=0)  # each candidate an arm of one seed
        table = speed_cells(runs)
        summary = speedups(table, bootstrap(table, n_boot), 1 - config.alpha).set_index("arm")
        rows = []
        for tree, method in methods.items():
            mine = runs[runs.method == method.label]
            rows.append({"arm": arm, "tree": tree,
                         "candidate": "fitted" if tree in predicted else "chain" if tree in chains else "fixed",
                         **summary.loc[method.label, ["speedup", "lo", "hi"]].to_dict(),
                         "decode_speedup": float(np.exp(np.log(mine.decode_speedup).mean())),
                         "predicted_speedup": predicted.get(tree, math.nan),
                         "tau": mine.step_tokens.sum() / mine.steps.sum(), "prompts": len(mine),
                         "other_load": mine.other_load.mean(), "near_ties": int((ties.method == method.label).sum())})
        best = max(methods, key=lambda tree: summary.loc[methods[tree].label, "speedup"])
        mine = pd.DataFrame(rows)
        kept = pd.concat([kept, mine.assign(chosen=mine.tree == best)], ignore_index=True)
        if work is not None:
            write_csv(work / "calibration.csv", kept)
    kept = kept[kept.arm.isin(list(drafts))].reset_index(drop=True)
    return kept[kept.chosen].set_index("arm").tree.to_dict(), kept


def evaluation_methods(target: Target, models: dict[tuple[str, int], DraftModel], arch: dict[str, str],
                       trees: dict[str, str], decode: DecodeConfig) -> tuple[list[Method], dict[str, tuple[str, int]]]:
    """The evaluation's methods: plain decoding, the baselines, every seed of each timed arm on its tree, then
    each arm's seed-0 draft behind the suffix cache (the arm `suffix+ARM`, descriptive); and each method's
    (arm, seed) by its label."""
    methods = [make_method(name, target, decode) for name in (PLAIN, *BASELINES)]
    who = {m.label: (m.label, 0) for m in methods}
    for (arm, seed), model in models.items():
        methods.append(draft_method(arch[arm], trees[arm], arm, seed, model, target, decode))
        who[methods[-1].label] = (arm, seed)
    for arm in trees:
        methods.append(draft_method(f"suffix+{arch[arm]}", trees[arm], arm, 0, models[arm, 0], target, decode))
        who[methods[-1].label] = (f"suffix+{arm}", 0)
    return methods, who


CHUNK = 12  # prompts timed in one go: what an interrupted evaluation loses at most
NEAR_TIE = 1e-3  # two tokens' logits closer than this: a tie the kernels' float rounding may break either way


def evaluate(methods: list[Method], prompts: dict[int, list[int]], categories: dict[int, str],
             contended_share: float, work: Path | None = None, *, target: Target | None = None,
             decode: DecodeConfig | None = None) -> tuple[pd.DataFrame, pd.DataFrame | None, dict, pd.DataFrame]:
    """Every method on every prompt in one repeat, interleaved (`interleaved`), `CHUNK` prompts at a time; a
    prompt during which other processes took more than `contended_share` of the machine is timed again, once
    (`_timed_alone`). Each chunk's outputs are checked against plain decoding's as it finishes (`near_ties`,
    with `target` and `decode`: a parting not at a near tie stops the stage there). With `work`, each finished
    chunk is kept there (timings.partial.csv, contended.partial.csv for the first timings of prompts timed again,
    near-ties.partial.csv), and a later call skips the prompts already timed: an interrupted evaluation resumes.
    Returns the timings, the first timings of the prompts timed again (else None), the load's record for
    env.json, and the near ties (`timing`: in the timings kept, or in a first timing under load)."""
    names = ("contended.partial.csv", "near-ties.partial.csv", "timings.partial.csv")  # written in this order: the
    # timings, which mark a chunk done, last, so that a stop between writes never keeps a chunk without the rest
    kept = {name: pd.read_csv(work / name) if work is not None and (work / name).exists() else pd.DataFrame()
            for name in names}
    done = set(kept["timings.partial.csv"].get("prompt", []))
    # a chunk cut short between its writes leaves no rows
    kept = {name: df[df.prompt.isin(done)] if len(df) else df for name, df in kept.items()}
    todo = [p for p in prompts if p not in done]
    if done and any(m.memories for m in methods):  # what the drafters remember, as the finished prompts left it
        print(f"resuming the evaluation after {len(done)} prompts: the methods that remember earlier prompts run "
              f"on them again, untimed", flush=True)
        _remember(methods, [prompts[p] for p in prompts if p in done])
    position = {p: i for i, p in enumerate(prompts)}  # the design of the methods' orders runs on across chunks
    for start in range(0, len(todo), CHUNK):
        chunk = {p: prompts[p] for p in todo[start:start + CHUNK]}
        runs, first = _timed_alone(methods, chunk, categories, contended_share, f"prompts {min(chunk)}-{max(chunk)}",
                                   order_from=position[next(iter(chunk))])
        ties = pd.concat([near_ties(df, f"prompts {min(chunk)}-{max(chunk)}", prompts, target, decode).assign(
            timing=timing) for df, timing in ((runs, "kept"), (first, "first, under load")) if df is not None],
            ignore_index=True)
        for name, df in zip(names, (first, ties, runs)):
            if df is not None and len(df):
                kept[name] = pd.concat([kept[name], df], ignore_index=True)
        if work is not None:
            for name, df in kept.items():
                if len(df):
                    write_csv(work / name, df)
    first, ties, runs = (kept[name] for name in names)
    loads = runs.groupby("prompt").other_load.first() if len(runs) else pd.Series(dtype=float)
    return runs, first if len(first) else None, {
        "other_load": float(loads.mean()), "timed_again": bool(len(first)),
        "prompts_timed_again": int(first.prompt.nunique()) if len(first) else 0,
        "prompts_still_contended": int((loads > contended_share).sum()),
        "contended": bool((loads > contended_share).any())}, ties


def _timed_alone(methods: list[Method], prompts: dict[int, list[int]], categories: dict[int, str],
                 contended_share: float, what: str, order_from: int = 0) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """`interleaved`, each prompt during which other processes took more than `contended_share` of the machine
    (`other_load`, measured per prompt) timed again once, on its own in its place in the design: the timings,
    and the first timings of the prompts taken again (else None). A prompt still contended the second time is
    kept, its load recorded. What the drafters remember across prompts (the suffix cache) is, for each prompt
    timed again, as its first timing found it (not yet holding its own answer), and afterwards as the first
    timings left it."""
    before = _snapshot(methods)
    runs = interleaved(methods, prompts, categories=categories, order_from=order_from)
    order = list(prompts)
    loads = runs.groupby("prompt").other_load.first()
    again = [p for p in order if loads[p] > contended_share]  # NaN (an unknown load) is not above it
    if not again:
        return runs, None
    warnings.warn(f"other processes took more than {contended_share:.0%} of the machine during {len(again)} "
                  f"prompt(s) of {what}: timing them again, once", stacklevel=3)
    after, redone = _snapshot(methods), []
    for p in again:
        _restore(before)
        _remember(methods, [prompts[q] for q in order[:order.index(p)]])
        redone.append(interleaved(methods, {p: prompts[p]}, categories=categories,
                                  order_from=order_from + order.index(p)))
    _restore(after)
    redone = pd.concat(redone, ignore_index=True)
    kept = pd.concat([runs[~runs.prompt.isin(again)], redone], ignore_index=True)
    kept = kept.sort_values("prompt", key=lambda p: p.map(order.index), kind="stable").reset_index(drop=True)
    return kept, runs[runs.prompt.isin(again)].reset_index(drop=True)


def _snapshot(methods: list[Method]) -> list[tuple[Memory, dict]]:
    return [(memory, memory.snapshot()) for m in methods for memory in m.memories]


def _restore(saved: list[tuple[Memory, dict]]) -> None:
    for memory, state in saved:
        memory.restore(state)


def _remember(methods: list[Method], prompts: list[list[int]]) -> None:
    """Each method that remembers across prompts run on `prompts` in turn, untimed: what it remembers as their
    timing would have left it (each method's memory is its own)."""
    for ids in tqdm(prompts, desc="remembering", unit="prompt", disable=len(prompts) < 2):
        for m in methods:
            if m.memories:
                m.run(ids)


def near_ties(runs: pd.DataFrame, where: str, prompts: dict[int, list[int]], target: Target | None,
              decode: DecodeConfig | None) -> pd.DataFrame:
    """The outputs of `runs` that part from plain greedy decoding's at a near tie: one row each (method, prompt,
    position, the two tokens, `gap` between their logits there, from plain decoding's own prefix). The target's
    kernels compute a verification's many rows and plain decoding's one row with different float rounding (as
    PyTorch's own paths do), so where two tokens' logits are within `NEAR_TIE` either may come first: both
    outputs are greedy decoding within rounding, and the timing stands, counted. Any other parting is a bug
    (speculative decoding is lossless on the fp32 exact path, and a speed measured on other tokens is no speed
    of the same work): an error, naming it."""
    bad = runs[runs.identical != 1]
    plain = (runs[runs.method == PLAIN].set_index("prompt").new_tokens.to_dict()
             if "new_tokens" in runs and (runs.method == PLAIN).any() else {})
    rows = []
    for r in bad.itertuples():
        position, expected, got = (int(x) for x in str(r.difference).split(":")) if ":" in str(r.difference) \
            else (-1, -1, -1)
        gap = (_gap(target, prompts[r.prompt], position, expected, got, decode)
               if target is not None and min(position, expected, got) >= 0 else math.inf)
        rows.append({"method": r.method, "prompt": r.prompt, "position": position, "plain_token": expected,
                     "token": got, "gap": gap, "new_tokens": getattr(r, "new_tokens", math.nan),
                     "plain_new_tokens": plain.get(r.prompt, math.nan)})
    out = pd.DataFrame(rows, columns=["method", "prompt", "position", "plain_token", "token", "gap", "new_tokens",
                                      "plain_new_tokens"])  # a tie can change the length: both, to see it
    wrong = out[~(out.gap < NEAR_TIE)]
    if len(wrong):
        named = ", ".join(f"{r.method} on prompt {r.prompt}" + (f" (token {r.position}, logits {r.gap:.2g} apart)"
                                                               if math.isfinite(r.gap) else "")
                          for r in wrong.head(5).itertuples())
        raise Clover2Error(f"{where}: {len(wrong)} outputs on {wrong.prompt.nunique()} prompts are not token-identical "
                           f"to plain greedy decoding, and not at a near tie ({named}"
                           f"{', ...' if len(wrong) > 5 else ''}); nothing is written")
    return out


def _gap(target: Target, ids: list[int], position: int, expected: int, got: int, decode: DecodeConfig) -> float:
    """How far apart the logits of tokens `expected` and `got` are at new token `position` of plain greedy
    decoding of `ids`: its own first `position` tokens as the prefix, one forward."""
    plain = make_method(PLAIN, target, replace(decode, max_new_tokens=max(position, 1)))
    prefix = plain.run(ids).output_ids[:position] if position else []
    with torch.inference_mode():
        logits = target.model(torch.tensor([[*ids, *prefix]])).logits[0, -1].float()
    return float((logits[expected] - logits[got]).abs())


def _timings(runs: pd.DataFrame, who: dict[str, tuple[str, int]]) -> pd.DataFrame:
    """`interleaved`'s rows with each method's arm and seed and its tau on the prompt (timings.csv)."""
    arm, seed = zip(*(who[m] for m in runs.method))
    return runs.assign(arm=arm, seed=seed, tau=runs.step_tokens / runs.steps)[TIMINGS]


def speed_cells(timings: pd.DataFrame) -> dict[str, Cell]:
    """Per arm of `timings` (columns prompt, arm, seed, seconds; plain decoding's rows carry the arm `ar`, one a
    prompt), a `Cell` of its log speedups, seeds x prompts: log(plain decoding's seconds / the method's) on the
    same prompt. They stand as the cell's `tokens` over `steps` of one each, so that `verdicts.bootstrap`, which
    resamples ratios of sums, resamples their means, and `Cell.tau` is their mean: the log of the speedup."""
    plain = timings[timings.arm == PLAIN].set_index("prompt").seconds
    if plain.index.duplicated().any():
        raise Clover2Error("plain decoding is timed more than once on a prompt: one repeat per timing")
    prompts = sorted(plain.index)
    out = {}
    for arm, g in timings[timings.arm != PLAIN].groupby("arm", sort=False):
        logs = g.assign(log=np.log(g.prompt.map(plain) / g.seconds)).pivot(index="seed", columns="prompt",
                                                                          values="log")
        if sorted(logs.columns) != prompts or logs.isna().any().any():
            raise Clover2Error(f"{arm} is not timed on every prompt plain decoding is, with every seed")
        logs = logs[prompts]
        out[arm] = Cell(arm, tuple(int(s) for s in logs.index), logs.to_numpy(float), np.ones(logs.shape))
    return out


def speedups(table: dict[str, Cell], draws: dict[str, np.ndarray], level: float) -> pd.DataFrame:
    """Each arm's speedup over plain decoding with its interval at `level` (`table`: `speed_cells`; `draws`:
    their `bootstrap`), and its seeds and prompts."""
    return pd.DataFrame([{"arm": arm, **{k: v for k, v in compare(math.exp(c.tau()), np.exp(draws[arm]), level).items()
                                         if k in ("ratio", "lo", "hi")},
                          "seeds": len(c.seeds), "prompts": c.tokens.shape[1]}
                         for arm, c in table.items()]).rename(columns={"ratio": "speedup"})


def claims(table: dict[str, Cell], draws: dict[str, np.ndarray], primary: Sequence[str], reference: str,
           alpha: float) -> pd.DataFrame:
    """The family of claims, C1 (each primary arm over plain decoding) then C2 (each over the reference: the ratio
    of the two arms' speedups, paired by prompt), each with its interval at 1 - `alpha`, bootstrap p-value,
    Holm's adjusted p over the family and verdict (`speed_verdict`). An interval reads only its own arms' cells
    and draws, so adding an arm or seeds to another leaves it as it was."""
    rows = []
    for claim, a, b in [*(("C1", a, None) for a in primary), *(("C2", a, reference) for a in primary)]:
        point = table[a].tau() - (table[b].tau() if b else 0.0)  # in logs
        resampled = draws[a] - (draws[b] if b else 0.0)
        rows.append({"claim": claim, "comparison": f"{a} / {b or 'plain decoding'}",
                     **compare(math.exp(point), np.exp(resampled), 1 - alpha),
                     "seeds": f"{len(table[a].seeds)}" + (f" vs {len(table[b].seeds)}" if b else ""),
                     "prompts": table[a].tokens.shape[1]})
    out = pd.DataFrame(rows)
    out["p_holm"] = holm(out.p.to_numpy())
    out["verdict"] = [speed_verdict(r, p, alpha) for r, p in zip(out.ratio, out.p_holm)]
    return out[["claim", "comparison", "ratio", "lo", "hi", "level", "p", "p_holm", "verdict", "seeds", "prompts"]]


def speed_verdict(ratio: float, p_holm: float, alpha: float) -> str:
    """The family's rule, `verdicts.secondary_verdict`'s in the words of speed: "faster" or "slower" where Holm's
    adjusted p is below `alpha`, else "no difference shown"."""
    return secondary_verdict(ratio, p_holm, alpha, words=("faster", "slower"))
