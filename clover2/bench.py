"""Side-by-side measurement: methods interleaved prompt by prompt, and the target's cost curve.

The machine is shared and noisy, so a method is only ever compared with plain decoding measured
in the same run, on the same prompt, moments apart: speedups are per-prompt ratios, summarized
by their median with a bootstrap interval. Every result carries the environment it came from.
"""

from __future__ import annotations

import datetime
import platform
import resource
import statistics
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import transformers
from tqdm.auto import tqdm

from clover2.decode import DecodeConfig, generate, prefill
from clover2.drafters import Drafter, NoDrafter, PromptLookupDrafter
from clover2.errors import Clover2Error
from clover2.files import write_csv, write_json
from clover2.fit import FitConfig
from clover2.sampling import SamplingConfig
from clover2.target import Target
from clover2.tasks import SPEC_BENCH_TASKS
from clover2.tree import Draft, Tree, preset
from clover2.verify import verify


@dataclass(frozen=True)
class Run:
    output_ids: list[int]
    seconds: float
    accept_lengths: list[int] | None  # None for methods that do not report steps (HF generate)
    draft_s: float = 0.0


@dataclass(frozen=True)
class Method:
    """One benchmarked method: a label such as `clover2@eagle25`, the temperature it samples at,
    and the function generating an answer to a prompt."""

    label: str
    temperature: float
    run: Callable[[list[int]], Run]

    @property
    def name(self) -> str:
        return self.label.split("@")[0]

    @property
    def tree(self) -> str:
        return self.label.partition("@")[2]


DRAFT_ARCHS = ("clover2", "clover1", "eagle1", "medusa")
METHODS = ("ar", "pld", "hf", "hf-pld", *DRAFT_ARCHS)


def parse_tree(spec: str):
    """A static preset name (eagle25, medusa63, chainK) or `dynamic:BUDGET:DEPTH:TOPK`."""
    from clover2.model_drafter import DynamicTree

    if spec.startswith("dynamic"):
        parts = spec.split(":")[1:]
        try:
            return DynamicTree(*map(int, parts))
        except (TypeError, ValueError):
            raise Clover2Error(f"bad dynamic tree {spec!r}; write dynamic:BUDGET:DEPTH:TOPK, e.g. dynamic:24:5:8") from None
    return preset(spec)


def parse_method(spec: str, default_temperature: float = 0.0) -> tuple[str, str, float, Path | None]:
    """`NAME[@TREE][/TEMPERATURE][=DRAFT_PATH]`, e.g. `clover2@dynamic:60:6:10/1=drafts/clover2`:
    name, tree (empty for methods without one), temperature, draft folder (None: the default)."""
    rest, _, path = spec.strip().partition("=")
    rest, slash, temp = rest.partition("/")
    name, _, tree = rest.partition("@")
    if name not in METHODS:
        raise Clover2Error(f"unknown method {name!r} in {spec!r}; known: {', '.join(METHODS)}")
    if tree and name not in DRAFT_ARCHS:
        raise Clover2Error(f"{spec!r}: only draft methods ({', '.join(DRAFT_ARCHS)}) take a tree")
    try:
        temperature = float(temp) if slash else default_temperature
    except ValueError:
        raise Clover2Error(f"{spec!r}: the temperature after '/' must be a number") from None
    return name, tree or ("eagle25" if name in DRAFT_ARCHS else ""), temperature, Path(path) if path else None


def load_draft_for(name: str, target: Target, draft: Path | None):
    """A trained draft of architecture `name` from its folder, checked against the target."""
    from clover2.checkpoint import load_draft

    if draft is None:
        raise Clover2Error(f"method {name!r} needs a draft folder (NAME=PATH)")
    model = load_draft(draft, target)
    if model.config.arch != name:
        raise Clover2Error(f"{draft} holds a {model.config.arch} draft, not {name}")
    return model


def drafter_factory(name: str, target: Target, *, draft=None, tree="eagle25",
                    sampling: SamplingConfig = SamplingConfig()) -> Callable[[], Drafter]:
    """A function making a fresh drafter per generation: `ar`, `pld`, or a trained draft (`draft`:
    its folder, or the draft already loaded). `tree` is a spec (`parse_tree`) or a built tree."""
    if name == "ar":
        return NoDrafter
    if name == "pld":
        return PromptLookupDrafter
    if name not in DRAFT_ARCHS:
        raise Clover2Error(f"unknown method {name!r}; known: {', '.join(METHODS)}")
    from clover2.model_drafter import ModelDrafter

    model = draft if isinstance(draft, torch.nn.Module) else load_draft_for(name, target, draft)
    shape = parse_tree(tree) if isinstance(tree, str) else tree
    return lambda: ModelDrafter(model, shape, sampling)


def make_method(name: str, target: Target, config: DecodeConfig, *, draft=None,
                tree="eagle25", label: str | None = None) -> Method:
    """clover2's loop with a drafter (`ar`, `pld`, a draft architecture), or Hugging Face `generate` (`hf`, `hf-pld`)."""
    label = label or name
    if name not in ("hf", "hf-pld"):
        make = drafter_factory(name, target, draft=draft, tree=tree, sampling=config.sampling)

        def run(prompt: list[int]) -> Run:
            g = generate(target, make(), prompt, config)
            return Run(g.output_ids, g.seconds, g.accept_lengths, sum(s.draft_s for s in g.steps))
        return Method(label, config.sampling.temperature, run)
    sp = config.sampling
    gen_config = target.model.generation_config.to_dict() | {
        "do_sample": not sp.greedy, "max_new_tokens": config.max_new_tokens, "num_beams": 1,
        "eos_token_id": list(target.eos_token_ids) or None, "temperature": sp.temperature or None,
        "top_p": sp.top_p, "top_k": sp.top_k or None,
        "prompt_lookup_num_tokens": 10 if name == "hf-pld" else None}

    def run_hf(prompt: list[int]) -> Run:
        ids = torch.tensor([prompt], device=target.device)
        start = time.perf_counter()
        torch.manual_seed(sp.seed)  # HF generate samples from the global generator
        with torch.inference_mode():
            out = target.model.generate(ids, attention_mask=torch.ones_like(ids),
                                        generation_config=transformers.GenerationConfig(**gen_config))
        return Run(out[0, len(prompt):].tolist(), time.perf_counter() - start, None)
    return Method(label, sp.temperature, run_hf)


def interleaved(methods: list[Method], prompts: dict[str, list[int]], *, repeats: int = 1,
                categories: dict[str, str] | None = None) -> pd.DataFrame:
    """Run every method on every prompt, rotating the order per prompt; one row per run.

    Each method is compared with plain decoding (`ar`) at its own temperature, run on the same
    prompt moments apart. A warm-up run of each method on the first prompt is excluded.
    `identical` says whether a greedy method's output equals plain greedy decoding's.
    """
    labels = [(m.label, m.temperature) for m in methods]
    if len(set(labels)) != len(labels):
        raise Clover2Error(f"a method is listed twice: {labels}")
    for t in {m.temperature for m in methods}:
        if ("ar", t) not in labels:
            raise Clover2Error(f"methods at temperature {t} need the reference 'ar' at that temperature")
    first = next(iter(prompts.values()))
    for m in methods:
        m.run(first)
    rows = []
    jobs = [(r, pid) for r in range(repeats) for pid in prompts]
    for k, (r, pid) in enumerate(tqdm(jobs, desc="prompts", unit="prompt")):
        order = methods[k % len(methods):] + methods[: k % len(methods)]
        runs = {}
        for m in order:
            if torch.cuda.is_available():
                torch.cuda.reset_peak_memory_stats()
            runs[m.label, m.temperature] = m.run(prompts[pid]), (
                torch.cuda.max_memory_allocated() / 2**20 if torch.cuda.is_available() else float("nan"))
        for m in methods:
            run, peak = runs[m.label, m.temperature]
            ref = runs["ar", m.temperature][0]
            n = len(run.output_ids)
            rows.append({"method": m.label, "tree": m.tree, "temperature": m.temperature, "prompt": pid,
                         "task": (categories or {}).get(pid, ""), "repeat": r, "new_tokens": n,
                         "seconds": run.seconds, "tokens_per_s": n / run.seconds,
                         "speedup": (n / run.seconds) / (len(ref.output_ids) / ref.seconds),
                         "steps": len(run.accept_lengths) if run.accept_lengths else float("nan"),
                         "draft_share": run.draft_s / run.seconds, "peak_mem_mb": peak,
                         "identical": float(run.output_ids == ref.output_ids) if m.temperature == 0 else float("nan")})
    return pd.DataFrame(rows)


def summarize(df: pd.DataFrame, *, seed: int = 0, n_boot: int = 2000) -> pd.DataFrame:
    """The tidy table: one row per method x task x temperature, plus task `overall` per method.

    tau counts the bonus token (tokens per target forward; the paper's convention is tau - 1,
    given beside it); speedup is the median per-prompt ratio to plain decoding at the same
    temperature, with a 95% bootstrap interval."""
    rng = np.random.default_rng(seed)
    keys = ["method", "tree", "temperature"]
    groups = [(*k, "overall", g) for k, g in df.groupby(keys, sort=False)]
    if df.task.nunique() > 1:
        groups += [k + (g,) for k, g in df.groupby(keys + ["task"], sort=False)]
    rows = []
    for method, tree, temperature, task, g in groups:
        s = g.speedup.to_numpy()
        boot = np.median(rng.choice(s, size=(n_boot, len(s))), axis=1)
        tau = g.new_tokens.sum() / g.steps.sum() if g.steps.notna().all() else float("nan")
        rows.append({"method": method, "tree": tree, "task": task, "temperature": temperature,
                     "n_prompts": g.prompt.nunique(), "n_runs": len(g), "tau": tau, "tau_minus_1": tau - 1,
                     "tokens_per_s": g.tokens_per_s.median(), "speedup": float(np.median(s)),
                     "speedup_lo": float(np.quantile(boot, 0.025)), "speedup_hi": float(np.quantile(boot, 0.975)),
                     "draft_share": g.draft_share.median(), "identical_frac": g.identical.mean(),
                     "peak_mem_mb": g.peak_mem_mb.max()})
    return pd.DataFrame(rows)


def cost_curve(target: Target, *, prefix: int = 200, sizes=(1, 2, 4, 8, 12, 16, 24, 32, 48, 64),
               repeats: int = 7, seed: int = 0) -> pd.DataFrame:
    """Median time of one forward of N new tokens over a cached `prefix`, relative to N = 1.

    The N tokens form a chain; a tree of N nodes costs the same (only the mask differs).
    Sizes are interleaved within each repeat, so drifting machine load hits all of them alike.
    """
    if prefix + max(sizes) > target.context_length:
        raise Clover2Error(f"prefix {prefix} + {max(sizes)} tokens exceed the context of {target.context_length}")
    gen = torch.Generator().manual_seed(seed)
    vocab = target.config.get_text_config().vocab_size
    ids = torch.randint(vocab, (prefix + 1,), generator=gen).tolist()
    times: dict[int, list[float]] = {n: [] for n in sizes}
    with torch.inference_mode():
        cache = target.new_cache()
        prefill(target, cache, ids[:-1], hidden=False)
        for _ in tqdm(range(repeats + 1), desc="cost curve", unit="round"):
            for n in sizes:
                draft = Draft(Tree.chain(n - 1), torch.randint(vocab, (n - 1,), generator=gen))
                start = time.perf_counter()
                verify(target, cache, ids[-1], draft)
                times[n].append(time.perf_counter() - start)
                cache.crop(-n)
    base = statistics.median(times[sizes[0]][1:])
    return pd.DataFrame([{"n_tokens": n, "median_ms": 1e3 * statistics.median(t[1:]),
                          "relative": statistics.median(t[1:]) / base} for n, t in times.items()])


def environment(target: Target) -> dict:
    """Hardware, versions and commit, recorded beside every number."""
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        cpu = platform.processor()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = bool(subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                                capture_output=True, text=True).stdout.strip())
    return {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "cpu": cpu, "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
            "torch_threads": torch.get_num_threads(), "torch": torch.__version__,
            "transformers": transformers.__version__, "python": platform.python_version(),
            "target": target.name, "dtype": str(target.dtype).removeprefix("torch."),
            "device": str(target.device), "commit": commit + ("-dirty" if dirty else "")}


# ---- the configured benchmark: tasks x methods x temperatures, with trees fitted to this machine ----

@dataclass(frozen=True)
class BenchConfig:
    # Built-in task names (clover2.tasks.TASKS) or prompts .jsonl files such as Spec-Bench's
    # question.jsonl (sampled per category). Default: the Spec-Bench six.
    tasks: tuple[str, ...] = SPEC_BENCH_TASKS
    n_per_task: int = 10  # seeded sample per task (per category of a .jsonl file)
    max_new_tokens: int = 128
    # Method specs NAME[@TREE][/TEMPERATURE][=DRAFT_PATH]; TREE is a preset, dynamic:B:D:K, or
    # `fitted` (the tree fitted to this machine, clover2.fit); drafts default to DRAFTS/NAME.
    methods: tuple[str, ...] = ("ar", "pld", "hf-pld", "clover2@eagle25", "clover2@fitted")
    top_p: float = 1.0  # applied to the methods at temperature > 0
    top_k: int = 0
    repeats: int = 1
    seed: int = 0  # task samples and sampling
    fit: FitConfig = FitConfig()  # calibration of `fitted` trees

    def __post_init__(self):
        if not self.tasks or not self.methods:
            raise Clover2Error("bench config: give at least one task and one method")
        if min(self.n_per_task, self.max_new_tokens, self.repeats) < 1:
            raise Clover2Error(f"bench config: n_per_task, max_new_tokens and repeats must be >= 1: {self}")
        for spec in self.methods:
            parse_method(spec)


def run_bench(target: Target, config: BenchConfig, drafts: Path | None, out: Path) -> pd.DataFrame:
    """Measure every method on every task side by side; write runs.csv, bench.csv, env.json (and,
    for fitted trees, cost_curve.csv and fit_<arch>.csv) into `out`. Returns the bench table."""
    from clover2.fit import calibrate, fit_tree
    from clover2.tasks import load_task

    specs = [parse_method(s) for s in config.methods]
    paths = [path or (drafts / name if drafts else None) if name in DRAFT_ARCHS else None
             for name, _, _, path in specs]
    models = {path: load_draft_for(name, target, path)  # each draft loaded once, before any work
              for (name, *_), path in zip(specs, paths) if name in DRAFT_ARCHS}
    records, calibration = [], []
    for task in config.tasks:
        every = load_task(task)
        chosen = load_task(task, config.n_per_task, config.seed)
        records += chosen
        calibration += [r for r in every if r not in chosen]
    encode = lambda r: target.encode_chat([{"role": "user", "content": r.turns[0]}])  # noqa: E731  first turns
    env = environment(target) | {"bench": asdict(config), "drafts": {name: str(p) for (name, *_), p in zip(specs, paths) if p}}
    trees: dict[Path, object] = {}  # fitted tree per draft folder
    fitted = {path: name for (name, tree, _, _), path in zip(specs, paths) if tree == "fitted"}
    if fitted:
        curve = cost_curve(target, prefix=min(200, target.context_length - 65))
        write_csv(out / "cost_curve.csv", curve)
        rng = np.random.default_rng(config.seed)
        picks = rng.choice(len(calibration), size=min(config.fit.prompts, len(calibration)), replace=False)
        calib = [encode(calibration[i]) for i in picks]
        for path, name in fitted.items():
            trees[path], table = fit_tree(calibrate(target, models[path], calib, config.fit), curve, config.fit)
            write_csv(out / f"fit_{name}.csv", table)
            env.setdefault("fitted_trees", {})[name] = asdict(trees[path]) | {
                "predicted_speedup": float(table.predicted_speedup.max())}
    methods = []
    for (name, tree, temperature, _), path in zip(specs, paths):
        sampling = SamplingConfig(temperature=temperature, top_p=config.top_p if temperature else 1.0,
                                  top_k=config.top_k if temperature else 0, seed=config.seed)
        decode = DecodeConfig(max_new_tokens=config.max_new_tokens, sampling=sampling)
        label = f"{name}@{tree}" if tree else name
        methods.append(make_method(name, target, decode, draft=models.get(path), label=label,
                                   tree=trees[path] if tree == "fitted" else tree))
    runs = interleaved(methods, {r.id: encode(r) for r in records}, repeats=config.repeats,
                       categories={r.id: r.category for r in records})
    table = summarize(runs, seed=config.seed)
    write_csv(out / "runs.csv", runs)
    write_csv(out / "bench.csv", table)
    write_json(out / "env.json", env | {"peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024})
    return table
