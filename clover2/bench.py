"""Side-by-side measurement: methods interleaved prompt by prompt, and the target's cost curve.

The machine is shared and noisy, so a method is only ever compared with plain decoding measured
in the same run, on the same prompt, moments apart: speedups are per-prompt ratios, summarized
by their median with a bootstrap interval. Every result carries the environment it came from.
"""

from __future__ import annotations

import datetime
import platform
import statistics
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import transformers
from tqdm.auto import tqdm

from clover2.decode import DecodeConfig, generate, prefill
from clover2.drafters import Drafter, NoDrafter, PromptLookupDrafter
from clover2.errors import Clover2Error
from clover2.sampling import SamplingConfig
from clover2.target import Target
from clover2.tree import Draft, Tree, preset
from clover2.verify import verify


@dataclass(frozen=True)
class Run:
    output_ids: list[int]
    seconds: float
    accept_lengths: list[int] | None  # None for methods that do not report steps (HF generate)
    draft_s: float = 0.0


Method = Callable[[list[int]], Run]

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


def drafter_factory(name: str, target: Target, *, draft: Path | None = None, tree: str = "eagle25",
                    sampling: SamplingConfig = SamplingConfig()) -> Callable[[], Drafter]:
    """A function making a fresh drafter per generation: `ar`, `pld`, or a trained draft (`draft` folder)."""
    if name == "ar":
        return NoDrafter
    if name == "pld":
        return PromptLookupDrafter
    if name not in DRAFT_ARCHS:
        raise Clover2Error(f"unknown method {name!r}; known: {', '.join(METHODS)}")
    from clover2.checkpoint import load_draft
    from clover2.model_drafter import ModelDrafter

    if draft is None:
        raise Clover2Error(f"method {name!r} needs a draft folder (NAME=PATH)")
    model = load_draft(draft, target)
    if model.config.arch != name:
        raise Clover2Error(f"{draft} holds a {model.config.arch} draft, not {name}")
    shape = parse_tree(tree)
    return lambda: ModelDrafter(model, shape, sampling)


def make_method(name: str, target: Target, config: DecodeConfig, *, draft: Path | None = None,
                tree: str = "eagle25") -> Method:
    """clover2's loop with a drafter (`ar`, `pld`, a draft architecture), or Hugging Face `generate` (`hf`, `hf-pld`)."""
    if name not in ("hf", "hf-pld"):
        make = drafter_factory(name, target, draft=draft, tree=tree, sampling=config.sampling)

        def run(prompt: list[int]) -> Run:
            g = generate(target, make(), prompt, config)
            return Run(g.output_ids, g.seconds, g.accept_lengths, sum(s.draft_s for s in g.steps))
        return run
    if name in ("hf", "hf-pld"):
        sp = config.sampling
        gen_config = target.model.generation_config.to_dict() | {
            "do_sample": not sp.greedy, "max_new_tokens": config.max_new_tokens, "num_beams": 1,
            "eos_token_id": list(target.eos_token_ids) or None, "temperature": sp.temperature or None,
            "top_p": sp.top_p, "top_k": sp.top_k or None,
            "prompt_lookup_num_tokens": 10 if name == "hf-pld" else None}

        def run(prompt: list[int]) -> Run:
            ids = torch.tensor([prompt], device=target.device)
            start = time.perf_counter()
            torch.manual_seed(sp.seed)  # HF generate samples from the global generator
            with torch.inference_mode():
                out = target.model.generate(ids, attention_mask=torch.ones_like(ids),
                                            generation_config=transformers.GenerationConfig(**gen_config))
            return Run(out[0, len(prompt):].tolist(), time.perf_counter() - start, None)
        return run


def interleaved(methods: dict[str, Method], prompts: dict[str, list[int]], *, repeats: int = 1,
                reference: str = "ar", categories: dict[str, str] | None = None) -> pd.DataFrame:
    """Run every method on every prompt, rotating the order per prompt; one row per run.

    A warm-up run of each method on the first prompt is excluded. `identical` says whether the
    output equals the reference method's output on the same prompt and repeat.
    """
    if reference not in methods:
        raise Clover2Error(f"the reference method {reference!r} must be among the methods")
    names = list(methods)
    first = next(iter(prompts.values()))
    for run in methods.values():
        run(first)
    rows = []
    jobs = [(r, pid) for r in range(repeats) for pid in prompts]
    for k, (r, pid) in enumerate(tqdm(jobs, desc="prompts", unit="prompt")):
        order = names[k % len(names):] + names[: k % len(names)]
        runs = {name: methods[name](prompts[pid]) for name in order}
        for name in names:
            run = runs[name]
            n = len(run.output_ids)
            rows.append({"method": name, "prompt": pid, "category": (categories or {}).get(pid, ""),
                         "repeat": r, "new_tokens": n, "seconds": run.seconds,
                         "tokens_per_s": n / run.seconds,
                         "steps": len(run.accept_lengths) if run.accept_lengths else float("nan"),
                         "draft_share": run.draft_s / run.seconds,
                         "identical": run.output_ids == runs[reference].output_ids})
    df = pd.DataFrame(rows)
    ref = df[df.method == reference].set_index(["prompt", "repeat"]).tokens_per_s
    df["speedup"] = df.tokens_per_s.values / ref.loc[list(zip(df.prompt, df.repeat))].values
    return df


def summarize(df: pd.DataFrame, *, seed: int = 0, n_boot: int = 2000) -> pd.DataFrame:
    """Per method and category (and `overall`): median tokens/s, tau, identical share, and the
    median per-prompt speedup over the reference with a 95% bootstrap interval."""
    rng = np.random.default_rng(seed)
    groups = [(m, "overall", g) for m, g in df.groupby("method", sort=False)]
    if df.category.nunique() > 1:
        groups += [(m, c, g) for (m, c), g in df.groupby(["method", "category"], sort=False)]
    rows = []
    for method, category, g in groups:
        s = g.speedup.to_numpy()
        boot = np.median(rng.choice(s, size=(n_boot, len(s))), axis=1)
        rows.append({"method": method, "category": category, "n_runs": len(g),
                     "tokens_per_s": g.tokens_per_s.median(),
                     "tau": g.new_tokens.sum() / g.steps.sum() if g.steps.notna().all() else float("nan"),
                     "speedup": float(np.median(s)), "speedup_lo": float(np.quantile(boot, 0.025)),
                     "speedup_hi": float(np.quantile(boot, 0.975)), "draft_share": g.draft_share.median(),
                     "identical_frac": g.identical.mean()})
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
