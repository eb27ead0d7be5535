"""The benchmark: methods interleaved prompt by prompt on the configured tasks and temperatures.

The machine is shared and noisy, so a method is only ever compared with plain decoding measured
in the same run, on the same prompt, moments apart: speedups are per-prompt ratios, summarized
everywhere (against plain decoding, method against method) by their geometric mean with a 95%
percentile bootstrap interval over prompts. Every result carries the environment it came from.
"""

from __future__ import annotations

import itertools
import json
import os
import resource
import time
import warnings
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import transformers
from tqdm.auto import tqdm

from clover2.decoding.decode import DecodeConfig, clock, generate
from clover2.decoding.drafter import Drafter
from clover2.decoding.kernels import available
from clover2.decoding.prompts import first_turn_ids
from clover2.decoding.sampling import SamplingConfig
from clover2.decoding.target import Target, with_kernels
from clover2.decoding.tree import Tree
from clover2.decoding.union import Union
from clover2.drafts.base import DraftModel
from clover2.drafts.checkpoint import DRAFT_WEIGHTS, SIDECAR
from clover2.drafts.drafter import DynamicTree
from clover2.drafts.methods import (
    ENGINE_METHODS,
    HF_METHODS,
    UNIONS,
    MethodSpec,
    drafter_factory,
    engine_of,
    load_draft_for,
)
from clover2.errors import Clover2Error
from clover2.files import write_csv, write_json
from clover2.load import CONTENDED_SHARE, mark, other_share
from clover2.measure.bandwidth import bandwidth_floor
from clover2.measure.engine import LlamaCpp, engine_methods
from clover2.measure.fit import (
    FitConfig,
    calibrate,
    calibration_records,
    cost_curve,
    fit,
    fitted_factory,
    source_acceptance,
)
from clover2.measure.openvino_engine import OpenVino, openvino_methods
from clover2.measure.provenance import environment
from clover2.measure.runs import Method, Run
from clover2.training.tasks import SPEC_BENCH_TASKS, load_task


def make_method(spec: MethodSpec | str, target: Target, config: DecodeConfig, *, draft: DraftModel | None = None,
                tree: Tree | DynamicTree | None = None, make: Callable[[], Drafter] | None = None) -> Method:
    """clover2's loop with a drafter (`ar`, `pld`, a draft architecture; `make` gives it where the
    caller chose it, as for fitted trees), or Hugging Face `generate` (`hf`, `hf-pld`), at the
    temperature of `config`. Its warm-up puts back what the drafters remember across prompts."""
    spec = MethodSpec.parse(spec) if isinstance(spec, str) else spec
    spec = replace(spec, temperature=config.sampling.temperature)
    config = replace(config, engine=spec.engine)
    sp = config.sampling
    if spec.name not in HF_METHODS:
        make = make or drafter_factory(spec, target, draft=draft, tree=tree, sampling=sp)

        def run(prompt: list[int], remember: bool = True) -> Run:
            drafter = make()
            saved = [] if remember else [(m, m.snapshot()) for m in drafter.memories]
            g = generate(target, drafter, prompt, config)
            for memory, state in saved:
                memory.restore(state)
            accepted = ({name: 0 for name in drafter.sources} | Counter(s for step in drafter.accepted for s in step)
                        if isinstance(drafter, Union) else None)
            return Run(g.output_ids, g.seconds, g.accept_lengths, sum(s.draft_s for s in g.steps),
                       sum(s.draft_s + s.verify_s for s in g.steps), accepted)
        return Method(spec, run, warm_up=lambda prompt: run(prompt, remember=False), memories=make().memories)
    gen_config = target.model.generation_config.to_dict() | {
        "do_sample": not sp.greedy, "max_new_tokens": config.max_new_tokens, "num_beams": 1,
        "eos_token_id": list(target.eos_token_ids) or None, "temperature": sp.temperature or None,
        "top_p": sp.top_p, "top_k": sp.top_k or None,
        "prompt_lookup_num_tokens": 10 if spec.name == "hf-pld" else None}

    def run_hf(prompt: list[int]) -> Run:
        ids = torch.tensor([prompt], device=target.device)
        start = clock(target)
        torch.manual_seed(sp.seed)  # HF generate samples from the global generator
        with torch.inference_mode():
            out = target.model.generate(ids, attention_mask=torch.ones_like(ids),
                                        generation_config=transformers.GenerationConfig(**gen_config))
        return Run(out[0, len(prompt):].tolist(), time.perf_counter() - start, None)
    return Method(spec, run_hf)


def balanced_order(n: int, k: int) -> list[int]:
    """The k-th order of n methods in a Williams design: over n orders (2n for an odd n) each method takes each
    place once and comes right after each other method once. A plain rotation also gives every place, but a
    method always follows the same neighbour, whose after-effects (the caches it leaves warm, the clock it
    leaves the cores at) would stay with that one pair."""
    first = [0] + [(j + 1) // 2 if j % 2 else n - j // 2 for j in range(1, n)]  # 0, 1, n-1, 2, n-2, ...
    row = k % (2 * n if n % 2 else n)
    order = [(i + row) % n for i in first]
    return order[::-1] if row >= n else order


def interleaved(methods: list[Method], prompts: dict[str, list[int]], *, repeats: int = 1,
                categories: dict[str, str] | None = None, order_from: int = 0) -> pd.DataFrame:
    """Run every method on every prompt, each prompt in the next order of a Williams design (`balanced_order`;
    the first prompt's order is order `order_from`: a run in parts continues the design); one row per run.

    Each method is compared with eager plain decoding (`ar`) at its own temperature (engines too:
    `ar!graphs` reports what graphs alone buy), run on the same prompt moments apart. A warm-up run
    of each method on the first prompt is excluded (it also captures the graphs of `!graphs`), and
    leaves nothing in what drafters remember across prompts (`Method.warm_up`), so that the first
    prompt's timed run does not find its own answer there. `identical` says whether a greedy
    method's output equals its reference's (`Method.reference`: plain greedy decoding, or an engine's
    own), and `difference` where it parts from it (`parting`); `other_load` is the share of the machine's CPUs
    other processes used during that prompt; `draft_weights` is the draft's precision; hybrids and
    unions add `accepted_<source>`, the accepted draft tokens each source proposed.
    """
    labels = [(m.label, m.temperature) for m in methods]
    if len(set(labels)) != len(labels):
        raise Clover2Error(f"a method is listed twice: {labels}")
    for t in {m.temperature for m in methods}:
        if ("ar", t) not in labels:
            raise Clover2Error(f"methods at temperature {t} need the reference 'ar' at that temperature")
    for m in methods:
        if (m.reference, m.temperature) not in labels:
            raise Clover2Error(f"{m.label} is checked against {m.reference}, which the run does not have")
    first = next(iter(prompts.values()))
    for m in methods:
        (m.warm_up or m.run)(first)
    rows = []
    jobs = [(r, pid) for r in range(repeats) for pid in prompts]
    for k, (r, pid) in enumerate(tqdm(jobs, desc="prompts", unit="prompt")):
        order = [methods[i] for i in balanced_order(len(methods), k + order_from)]
        runs, start = {}, mark()
        for m in order:
            if torch.cuda.is_available():
                torch.cuda.reset_peak_memory_stats()
            runs[m.label, m.temperature] = m.run(prompts[pid]), (
                torch.cuda.max_memory_allocated() / 2**20 if torch.cuda.is_available() else float("nan"))
        load = other_share(start)
        for m in methods:
            run, peak = runs[m.label, m.temperature]
            ref = runs["ar", m.temperature][0]
            same = runs[m.reference, m.temperature][0]
            n = len(run.output_ids)
            rows.append({"method": m.label, "tree": m.spec.tree, "temperature": m.temperature,
                         "draft_weights": m.draft_weights, "prompt": pid,
                         "task": (categories or {}).get(pid, ""), "repeat": r, "new_tokens": n,
                         "seconds": run.seconds, "decode_s": run.decode_s, "tokens_per_s": n / run.seconds,
                         "speedup": (n / run.seconds) / (len(ref.output_ids) / ref.seconds),
                         # the same without the prefill (and its first token), which every method pays
                         # alike: the speed of the decoding steps, what a fit predicts
                         "decode_speedup": (run.step_tokens / run.decode_s) / (ref.step_tokens / ref.decode_s),
                         "steps": run.steps, "step_tokens": run.step_tokens,
                         "draft_share": run.draft_s / run.seconds, "peak_mem_mb": peak, "other_load": load,
                         "identical": float(run.output_ids == same.output_ids) if m.temperature == 0 else float("nan"),
                         "difference": parting(same.output_ids, run.output_ids) if m.temperature == 0 else "",
                         **{f"accepted_{source}": k for source, k in (run.accepted or {}).items()}})
    return pd.DataFrame(rows)


def parting(reference: Sequence[int], output: Sequence[int]) -> str:
    """Where `output` first differs from `reference`: `POSITION:REFERENCE_TOKEN:TOKEN` (-1 for a token past an
    output's end), or "" where they are the same."""
    if list(reference) == list(output):
        return ""
    i = next((i for i, (a, b) in enumerate(zip(reference, output)) if a != b), min(len(reference), len(output)))
    at = lambda ids: ids[i] if i < len(ids) else -1  # noqa: E731
    return f"{i}:{at(reference)}:{at(output)}"


def geometric_mean(ratios: np.ndarray, picks: np.ndarray) -> tuple[float, float, float]:
    """The geometric mean of per-prompt ratios with its 95% percentile bootstrap interval: the
    statistic of every speedup and speed ratio here. `picks` `(n_boot, n)`: resampled prompt indices."""
    logs = np.log(ratios)
    boot = np.exp(logs[picks].mean(1))
    return float(np.exp(logs.mean())), float(np.quantile(boot, 0.025)), float(np.quantile(boot, 0.975))


def summarize(df: pd.DataFrame, *, seed: int = 0, n_boot: int = 2000) -> pd.DataFrame:
    """The tidy table: one row per method x task x temperature, plus task `overall` per method.

    tau counts the bonus token (tokens per decoding step, the prefill's first token and forward
    left out; the paper's convention is tau - 1, given beside it); speedup is the geometric mean of
    the per-prompt ratios to plain decoding at the same temperature, with its 95% bootstrap interval
    (`geometric_mean`; `decode_speedup`: the same without the prefill); `accepted_<source>_per_step`
    (hybrids and unions) is what each source adds to tau (together tau - 1, plus the bonus token of
    a last step cut short by the length limit); `draft_weights` is the draft's precision;
    `contended` marks rows measured while other processes used more than `CONTENDED_SHARE` of the
    machine (on average over its prompts)."""
    rng = np.random.default_rng(seed)
    keys = ["method", "tree", "temperature"]
    groups = [(*k, "overall", g) for k, g in df.groupby(keys, sort=False, dropna=False)]  # no tree: NaN from a CSV
    if df.task.nunique() > 1:
        groups += [k + (g,) for k, g in df.groupby(keys + ["task"], sort=False, dropna=False)]
    sources = [c for c in df.columns if c.startswith("accepted_")]
    rows = []
    for method, tree, temperature, task, g in groups:
        picks = rng.integers(0, len(g), size=(n_boot, len(g)))
        speedup, lo, hi = geometric_mean(g.speedup.to_numpy(), picks)
        tau = g.step_tokens.sum() / g.steps.sum() if g.steps.notna().all() else float("nan")
        rows.append({"method": method, "tree": tree, "task": task, "temperature": temperature,
                     "draft_weights": g.draft_weights.iloc[0],
                     "n_prompts": g.prompt.nunique(), "n_runs": len(g), "tau": tau, "tau_minus_1": tau - 1,
                     "tokens_per_s": g.tokens_per_s.median(), "speedup": speedup, "speedup_lo": lo, "speedup_hi": hi,
                     "decode_speedup": float(np.exp(np.log(g.decode_speedup).mean())),
                     **{f"{c}_per_step": g[c].sum() / g.steps.sum() if g[c].notna().all() else float("nan")
                        for c in sources},
                     "draft_share": g.draft_share.median(), "identical_frac": g.identical.mean(),
                     "peak_mem_mb": g.peak_mem_mb.max(), "other_load": g.other_load.mean(),
                     "contended": bool(g.other_load.mean() > CONTENDED_SHARE)})
    return pd.DataFrame(rows)


def paired(df: pd.DataFrame, *, seed: int = 0, n_boot: int = 2000) -> pd.DataFrame:
    """Every pair of methods at one temperature, compared prompt by prompt: the geometric mean of
    the per-prompt speed ratios (a over b) with its 95% bootstrap interval over prompts (as
    `summarize`'s speedups), how many prompts a was faster on, and the tau ratio (sums of tokens
    over steps) with its interval over the same resampled prompts. Pairs measured moments apart on
    the same prompt cancel the prompt's own difficulty, which unpaired intervals keep. A run's
    drafts share one precision (`run_bench`), so every pair compares like with like."""
    rng = np.random.default_rng(seed)
    rows = []
    for temperature, g in df.groupby("temperature", sort=False):
        index = ["prompt", "repeat"]
        speed = g.pivot_table(index=index, columns="method", values="tokens_per_s", sort=False)
        tokens = g.pivot_table(index=index, columns="method", values="step_tokens", sort=False).reindex(speed.index)
        steps = g.pivot_table(index=index, columns="method", values="steps", sort=False).reindex(speed.index)
        picks = rng.integers(0, len(speed), size=(n_boot, len(speed)))
        for a, b in itertools.permutations(speed.columns, 2):
            ratio = (speed[a] / speed[b]).to_numpy()
            mean, lo, hi = geometric_mean(ratio, picks)
            row = {"method": a, "versus": b, "temperature": temperature, "n_prompts": len(ratio),
                   "speed_ratio": mean, "speed_ratio_lo": lo, "speed_ratio_hi": hi, "faster_on": int((ratio > 1).sum()),
                   "tau_ratio": np.nan, "tau_ratio_lo": np.nan, "tau_ratio_hi": np.nan}
            if a in tokens and b in tokens and tokens[[a, b]].notna().all().all():  # HF generate counts no steps
                ta, sa, tb, sb = (x.to_numpy(float) for x in (tokens[a], steps[a], tokens[b], steps[b]))
                tau = (ta[picks].sum(1) / sa[picks].sum(1)) / (tb[picks].sum(1) / sb[picks].sum(1))
                row.update(tau_ratio=float((ta.sum() / sa.sum()) / (tb.sum() / sb.sum())),
                           tau_ratio_lo=float(np.quantile(tau, 0.025)), tau_ratio_hi=float(np.quantile(tau, 0.975)))
            rows.append(row)
    return pd.DataFrame(rows)


def moved(old: pd.DataFrame, new: pd.DataFrame) -> pd.DataFrame:
    """How far each method's overall figures moved between two runs of a benchmark (`summarize`
    tables of the same methods): tau and speedup in each, the new speedup's interval, and the
    ratio of the new speedup to the old (`moved`). The runs differ in time, machine or harness, so
    the ratio is not paired by prompt: read it against the two intervals."""
    keys = ["method", "temperature"]
    pick = lambda t: t[t.task == "overall"][keys + ["tau", "speedup", "speedup_lo", "speedup_hi"]]  # noqa: E731
    both = pick(old).merge(pick(new), on=keys, suffixes=("_old", "_new"))
    return both.assign(moved=both.speedup_new / both.speedup_old).drop(columns=["speedup_lo_old", "speedup_hi_old"])


# ---- the configured benchmark: tasks x methods x temperatures, with trees fitted to this machine ----

@dataclass(frozen=True)
class BenchConfig:
    # Built-in task names (clover2.training.tasks.TASKS) or prompts .jsonl files such as Spec-Bench's
    # question.jsonl (sampled per category). Default: the Spec-Bench six.
    tasks: tuple[str, ...] = SPEC_BENCH_TASKS
    n_per_task: int = 10  # seeded sample per task (per category of a .jsonl file)
    max_new_tokens: int = 128
    # Method specs NAME[@TREE][/TEMPERATURE][!ENGINE][=DRAFT_PATH]; TREE is a preset, dynamic:B:D:K, or
    # `fitted` (the tree fitted to this machine and engine, clover2.measure.fit); ENGINE static or
    # graphs (clover2.decoding.cache; without it, eager); drafts default to DRAFTS/NAME.
    methods: tuple[str, ...] = ("ar", "pld", "hf-pld", "clover2@eagle25", "clover2@fitted")
    top_p: float = 1.0  # applied to the methods at temperature > 0
    top_k: int = 0
    repeats: int = 1
    # rounds of the verification cost curve (clover2.measure.fit.cost_curve: each size timed once a round,
    # the median kept), which fitted trees are fitted to and which checks the kernel choice
    cost_repeats: int = 7
    seed: int = 0  # task samples and sampling
    threads: int = 0  # torch CPU threads for the run (0: every CPU this process may use)
    # The drafts' linear weights while decoding: float or int8 (clover2.drafts.checkpoint.load_draft),
    # or auto: on a CPU, the one whose fitted trees predict more tokens per second here over all the
    # run's drafts (int8 halves the draft's step but changes its top-1 on some steps), float
    # elsewhere. Every draft of a run decodes at the same precision, so that methods compare like
    # with like. The target verifies every token either way.
    draft_weights: str = "auto"
    fit: FitConfig = FitConfig()  # calibration of `fitted` trees and of the drafts' precision
    # a llama.cpp source tree with llama-server built, for the llama.cpp methods (clover2.measure.engine)
    llama_cpp: str = ""
    # a Python with openvino-genai and optimum-intel (.ci/openvino), for the OpenVINO methods
    # (clover2.measure.openvino_engine)
    openvino: str = ""

    def __post_init__(self):
        if not self.tasks or not self.methods:
            raise Clover2Error("bench config: give at least one task and one method")
        if min(self.n_per_task, self.max_new_tokens, self.repeats, self.cost_repeats) < 1 or self.threads < 0:
            raise Clover2Error(f"bench config: n_per_task, max_new_tokens, repeats and cost_repeats must be >= 1 "
                               f"and threads >= 0: {self}")
        specs = [MethodSpec.parse(spec) for spec in self.methods]
        if any(engine_of(s.name) == "llama.cpp" for s in specs) and not self.llama_cpp:
            raise Clover2Error("bench config: the llama.cpp methods need a built llama.cpp source tree: "
                               "give --llama-cpp PATH (or bench.llama_cpp)")
        if any(engine_of(s.name) == "openvino" for s in specs) and not self.openvino:
            raise Clover2Error("bench config: the OpenVINO methods need a Python with openvino-genai and "
                               "optimum-intel: give --openvino PYTHON (or bench.openvino; `.ci/openvino` makes one)")
        labels = {s.label for s in specs}
        for s in specs:
            plain = engine_of(s.name) + ("" if s.engine == "eager" else f"!{s.engine}")
            if s.name in ENGINE_METHODS and s.name != engine_of(s.name) and plain not in labels:
                raise Clover2Error(f"bench config: {s.label} is checked against {engine_of(s.name)}'s plain decoding "
                                   f"with the same settings: add the method {plain}")
        if self.draft_weights not in DRAFT_WEIGHTS:
            raise Clover2Error(f"bench config: draft_weights must be one of {', '.join(DRAFT_WEIGHTS)}")


def _fit_key(spec: MethodSpec) -> tuple[str, Path, str]:
    """What a fitted method's fit depends on: a union's own (with the copy budgets) or its draft's
    alone (for `ARCH` and `pld+ARCH`), the draft folder and the engine."""
    return spec.name if spec.name in UNIONS else spec.arch, spec.draft, spec.engine


def record_name(spec: MethodSpec, name: str) -> str:
    """`name` (an architecture, or a union's method name and engine) as the run's records key it: with
    `=folder` where the method named its draft, so that two drafts of one architecture keep a record each
    (`clover2=clover2-official` beside `clover2`)."""
    return name + (f"={spec.named}" if spec.named else "")


def draft_precisions(weights: str, target: Target) -> tuple[str, ...]:
    """The draft precisions a run chooses between: both on a CPU under `auto`, else the one given."""
    if weights == "auto":
        return ("float", "int8") if target.device.type == "cpu" else ("float",)
    return (weights,)


KERNEL_RETRIES = 2  # a kernel choice the cost curve contradicts is measured again at most this often


def checked_cost_curves(target: Target, engines: Sequence[str],
                        repeats: int = 7) -> tuple[dict[str, pd.DataFrame], dict]:
    """The verification cost curve of every engine, checked against the target's kernel choice: where
    a 1-token forward costs more than a 2-token one, the choice (`kernels="auto"`: timed under noise,
    or cached from another day) failed here, so the kernels are measured again, whatever the cache
    holds, and the curves with them (`repeats` rounds each), at most `KERNEL_RETRIES` times. Returns the
    curves and what the check found (env.json's `kernel_check`)."""
    retune = target.kernels == "auto" and len(available(target.dtype, target.device)) > 1
    for attempt in itertools.count():
        curves = {e: cost_curve(target, prefix=min(200, target.context_length - 65), repeats=repeats, engine=e)
                  for e in engines}
        failed = [e for e, c in curves.items() if _one_token_dearer(c)]
        if not failed or not retune or attempt == KERNEL_RETRIES:
            break
        warnings.warn(f"a 1-token forward cost more than a 2-token one ({', '.join(failed)}): the kernel choice "
                      f"({target.kernel_plan.describe()}) failed here; measuring the kernels again", stacklevel=2)
        with_kernels(target, "auto", fresh=True)
    if failed:
        warnings.warn(f"a 1-token forward still costs more than a 2-token one ({', '.join(failed)}), kernels "
                      f"{target.kernel_plan.describe()}: the machine is noisy, or no kernel serves one row well",
                      stacklevel=2)
    return curves, {"kernels_measured_again": attempt, "one_token_dearer_than_two": failed}


def _one_token_dearer(curve: pd.DataFrame) -> bool:
    ms = dict(zip(curve.n_tokens, curve.median_ms))
    return 1 in ms and 2 in ms and ms[1] > ms[2]


def run_bench(target: Target, config: BenchConfig, drafts: Mapping[str, Path] | Path | None, out: Path) -> pd.DataFrame:
    """Measure every method on every task side by side; write runs.csv, bench.csv, paired.csv, env.json,
    cost_curve.csv (and, for fitted trees, fit_<arch>.csv or fit_union+<arch>.csv) into `out`. Draft
    methods without a path take `drafts[name]` (a mapping) or `drafts/<name>` (a folder), all at one
    precision (`draft_weights` in env.json and in both tables). Returns the bench table."""
    torch.set_num_threads(config.threads or len(os.sched_getaffinity(0)))
    with ExitStack() as servers:  # the other engines' servers and pipelines, stopped however the run ends
        return _run_bench(target, config, drafts, out, servers)


def _run_bench(target: Target, config: BenchConfig, drafts: Mapping[str, Path] | Path | None, out: Path,
               servers: ExitStack) -> pd.DataFrame:
    cpp = LlamaCpp.at(config.llama_cpp) if config.llama_cpp else None  # a missing build fails here, not hours later
    ov = OpenVino.at(config.openvino) if config.openvino else None  # as a Python without OpenVINO
    start = mark()
    folder = (lambda name: drafts.get(name)) if isinstance(drafts, Mapping) else \
        (lambda name: drafts / name if drafts else None)
    specs = [MethodSpec.parse(s) for s in config.methods]
    specs = [replace(s, draft=folder(s.arch)) if s.is_draft and s.draft is None else s for s in specs]
    for s in specs:
        if s.is_draft and s.draft is None:
            raise Clover2Error(f"{s.label}: no draft to decode with: give --drafts DIR (a folder holding "
                               f"{s.arch}/) or write the method {s.label}=PATH")
    records, pools = [], []
    for task in config.tasks:
        pools.append(load_task(task))
        if not pools[-1]:
            raise Clover2Error(f"task {task}: it holds no prompts")
        records += load_task(task, config.n_per_task, config.seed)
    precisions = draft_precisions(config.draft_weights, target)
    calibrating = any(s.tree == "fitted" for s in specs) or (len(precisions) > 1 and any(s.is_draft for s in specs))
    calib_records = calibration_records(pools, records, config.fit.prompts, config.seed) if calibrating else []
    if calibrating and not calib_records:
        raise Clover2Error(
            f"every prompt of {', '.join(map(str, config.tasks))} is benchmarked (bench.n_per_task="
            f"{config.n_per_task}), so none is left to fit the tree or choose the draft's precision on "
            f"(bench.fit.prompts={config.fit.prompts} wanted): give a file with more prompts, lower "
            "bench.n_per_task, or use a fixed tree (@chainK, @eagle25) and --set bench.draft_weights=float")
    if calibrating and len(calib_records) < config.fit.prompts:
        warnings.warn(f"only {len(calib_records)} prompts are left beside the benchmark's to calibrate on "
                      f"(bench.fit.prompts={config.fit.prompts}): the fitted trees rest on them", stacklevel=2)
    calib = [first_turn_ids(target, r) for r in calib_records]
    # Each draft loaded once, before any work, at every precision a choice is made between
    paths = list(dict.fromkeys(s.draft for s in specs if s.is_draft))
    spec_of = {s.draft: s for s in specs if s.is_draft}
    draft_name = {p: record_name(s, s.arch) for p, s in spec_of.items()}  # each draft's key in the run's records
    models = {(p, w): load_draft_for(spec_of[p], target, weights=w) for p in paths for w in precisions}
    # the engines by their folder's name (their versions: env["llama_cpp"], env["openvino"]), drafts by content:
    # no machine path
    bench = asdict(replace(config, llama_cpp=Path(config.llama_cpp).name, openvino=Path(config.openvino).name))
    env = environment(target) | {"bench": bench, "drafts": {
        record_name(s, s.arch): {"folder": s.draft.name,
                 "weights_sha256": json.loads((s.draft / SIDECAR).read_text())["weights_sha256"]}
        for s in specs if s.is_draft}, "calibration_tasks": dict(Counter(r.category for r in calib_records))}
    # The verification cost curve of every engine in the run (what fitted trees are fitted to; it
    # checks the kernel choice) and the step time that memory bandwidth allows.
    engines = list(dict.fromkeys(s.engine for s in specs if s.name not in (*HF_METHODS, *ENGINE_METHODS))) or ["eager"]
    curves, env["kernel_check"] = checked_cost_curves(target, engines, config.cost_repeats)
    write_csv(out / "cost_curve.csv", pd.concat([c.assign(engine=e) for e, c in curves.items()], ignore_index=True))
    kernels = [pd.DataFrame(target.kernel_record()["timings"]).assign(model="target")] + [
        pd.DataFrame(getattr(m, "kernel_timings", [])).assign(model=f"{draft_name[p]} ({w})")
        for (p, w), m in models.items()]
    write_csv(out / "kernels.csv", pd.concat(kernels, ignore_index=True))  # what each model's kernels were chosen from
    env["draft_kernels"] = {f"{draft_name[p]} ({w})": m.kernel_dispatch.plan.describe()
                            for (p, w), m in models.items() if hasattr(m, "kernel_dispatch")}
    env["bandwidth"] = bandwidth_floor(target)
    env["engines"] = {e: {"cuda_graphs": e == "graphs" and target.device.type == "cuda"} for e in engines}
    # One calibration per draft, engine and precision: it fits the trees and chooses the precision,
    # one for every draft (the one whose drafts' best trees predict more tokens per second here, in
    # geometric mean), so that no comparison between methods is one between precisions
    calibrations, needed, predicted = {}, {}, {}
    for path in paths:
        needed[path] = [s.engine for s in specs if s.draft == path and s.tree == "fitted"] or \
            (["eager"] if len(precisions) > 1 else [])
        for engine, w in itertools.product(dict.fromkeys(needed[path]), precisions):
            calibrations[path, engine, w] = calibrate(target, models[path, w], calib, config.fit, engine=engine)
        if len(precisions) > 1:
            engine = needed[path][0]
            predicted[path] = {w: float(fit(calibrations[path, engine, w], curves[engine], config.fit)[1]
                                        .predicted_speedup.max()) for w in precisions}
    precision = max(precisions, key=lambda w: sum(np.log(p[w]) for p in predicted.values()))  # ties: the first
    for path in paths:
        arch = draft_name[path]
        env["drafts"][arch] |= {"weights": precision} | (
            {"predicted_speedup_by_weights": predicted[path]} if path in predicted else {})
        if needed[path]:
            env.setdefault("calibration", {})[arch] = source_acceptance(calibrations[path, needed[path][0], precision])
    if paths:
        env["draft_weights"] = precision
    fitted = {}  # (method name, draft folder, engine) -> what the fit chose (None: plain decoding)
    for s in specs:
        if s.tree != "fitted" or (key := _fit_key(s)) in fitted:
            continue
        fitted[key], table = fit(calibrations[s.draft, s.engine, precision], curves[s.engine], config.fit,
                                 copy=s.name in UNIONS)
        name = record_name(s, key[0] if s.engine == "eager" else f"{key[0]}!{s.engine}")
        write_csv(out / f"fit_{name}.csv", table)
        env.setdefault("fitted_trees", {})[name] = fitted[key].record() if fitted[key] else \
            {"budget": 0, "depth": 0, "predicted_speedup": float(table.predicted_speedup.max())}  # 0: plain decoding
    methods = []
    if cpp is not None:
        methods, env["llama_cpp"] = engine_methods(cpp, specs, target, max_new_tokens=config.max_new_tokens,
                                                   threads=torch.get_num_threads(), log_dir=out / "llama.cpp",
                                                   stack=servers)
    if ov is not None:
        more, env["openvino"] = openvino_methods(ov, specs, target, max_new_tokens=config.max_new_tokens,
                                                 threads=torch.get_num_threads(), log_dir=out / "openvino",
                                                 stack=servers)
        methods += more
    for s in specs:
        if s.name in ENGINE_METHODS:
            continue
        sampling = SamplingConfig(temperature=s.temperature, top_p=config.top_p if s.temperature else 1.0,
                                  top_k=config.top_k if s.temperature else 0, seed=config.seed)
        decode = DecodeConfig(max_new_tokens=config.max_new_tokens, sampling=sampling, timed=True)
        model = models.get((s.draft, precision))
        make = None
        if s.tree == "fitted":
            make = fitted_factory(s, model, fitted[_fit_key(s)], sampling)
        methods.append(replace(make_method(s, target, decode, draft=model, make=make),
                               draft_weights=precision if s.is_draft else ""))
    order = [s.label for s in specs]
    methods.sort(key=lambda m: order.index(m.label))  # as the config lists them
    runs = interleaved(methods, {r.id: first_turn_ids(target, r) for r in records}, repeats=config.repeats,
                       categories={r.id: r.category for r in records})
    table = summarize(runs, seed=config.seed)
    load = other_share(start)
    if table.contended.any() or load > CONTENDED_SHARE:
        warnings.warn(f"other processes used {load:.0%} of the machine during the benchmark (up to "
                      f"{runs.other_load.max():.0%} during a prompt): speedups measured under load are biased "
                      "against speculative methods (rows marked `contended`); rerun on an idle machine", stacklevel=2)
    write_csv(out / "runs.csv", runs)
    write_csv(out / "bench.csv", table)
    write_csv(out / "paired.csv", paired(runs, seed=config.seed))
    write_json(out / "env.json", env | {"peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                                        "other_load": load, "contended": bool(load > CONTENDED_SHARE),
                                        "torch_threads": torch.get_num_threads()})
    return table
