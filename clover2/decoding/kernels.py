"""Linear kernels chosen by measurement: per number of rows, the fastest way this machine computes a
model's linear layers.

A decoding step of a small model on a CPU reads every weight once, so verifying a few tokens
should cost about what one token does; how close a kernel gets depends on the machine. Three
candidates compute the same product (they differ only in float rounding, as PyTorch's own 1-row
and many-row paths already do):

- `stock`: `F.linear` as PyTorch dispatches it (MKL on x86);
- `packed`: oneDNN with the weight reordered once into its blocked layout (what torch.compile's
  freezing pass does for CPU linears); fp32, and bf16 where the CPU computes it natively;
- `mkl`: MKL's packed GEMM (`cblas_sgemm_pack`: the weight packed once); fp32 only.

No rule picks well everywhere: on one 2-core Intel Xeon stock MKL was fastest at one row and oneDNN
from 4 rows, while on a 2-core AMD EPYC oneDNN was fastest at every row count (each run's choice and
timings are in its kernels.csv). So `kernels="auto"` times every
candidate on the loaded model itself, per row bucket (1, 2, 4 ... 64; a call of r rows uses the
plan of the largest bucket <= r), interleaved round by round, and keeps the one of lowest median
(`KernelPlan`). Noise is met three ways: a bucket whose two fastest kernels are within `CLOSE` of
each other is timed for more rounds before it is decided; a measurement taken while other processes
loaded the machine is taken again (up to `ATTEMPTS` in all); and a choice still taken under load
serves its run only, never cached. The plan is cached under `$CLOVER2_CACHE/kernels/`, keyed by the
machine, the torch version, the model's shapes (all a timing depends on) and the dtype; a missing,
stale or corrupt entry is measured again, never trusted, and so is one a caller found contradicted
(`fresh`: the benchmark's cost curve, where a 1-token forward costs more than a 2-token one).
`stock`, `packed` or `mkl` force one kernel.

`install(model, plan)` gives every `nn.Linear` the prepared weights its plan needs and a forward
that dispatches on the row count. No modeling file is touched and the original parameters stay
(state dict, tied embeddings, fingerprints), at the price of a prepared copy of the weights.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
import types
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F

from clover2.errors import Clover2Error
from clover2.files import stable_hash, write_json
from clover2.load import CONTENDED_SHARE, mark, other_share
from clover2.paths import cache_root

CANDIDATES = ("stock", "packed", "mkl")
MODES = ("auto", *CANDIDATES)  # auto: chosen by measurement; the others force one kernel everywhere
BUCKETS = (1, 2, 4, 8, 16, 32, 64)  # row counts measured; more rows than the last use its choice
PLAN_FORMAT = "clover2-kernels/1"
CLOSE = 0.05  # a bucket whose two fastest medians are within 5% is timed again (up to PASSES passes of rounds)
PASSES = 3
ATTEMPTS = 3  # measurements taken while other processes load the machine are taken again, up to this many in all


@dataclass(frozen=True)
class KernelPlan:
    """The kernel of each row bucket: calls of r rows use `kernels[i]` for the largest `buckets[i] <= r`."""

    kernels: tuple[str, ...]
    buckets: tuple[int, ...] = BUCKETS
    source: str = "forced"  # "measured", "cached" (measured earlier on this machine) or "forced"

    def __post_init__(self):
        if len(self.kernels) != len(self.buckets) or any(k not in CANDIDATES for k in self.kernels):
            raise Clover2Error(f"kernel plan: one of {', '.join(CANDIDATES)} per bucket {self.buckets}, "
                               f"got {self.kernels}")
        if list(self.buckets) != sorted(set(self.buckets)) or self.buckets[0] != 1:
            raise Clover2Error(f"kernel plan: buckets must rise from 1, got {self.buckets}")

    @classmethod
    def uniform(cls, kernel: str, source: str = "forced") -> KernelPlan:
        return cls((kernel,) * len(BUCKETS), BUCKETS, source)

    def kernel_for(self, rows: int) -> str:
        i = next(i for i in range(len(self.buckets) - 1, -1, -1) if self.buckets[i] <= max(rows, 1))
        return self.kernels[i]

    def describe(self) -> str:
        """`packed` for a uniform plan, else `stock@1,packed@2+` (each kernel from the bucket where it starts)."""
        if len(set(self.kernels)) == 1:
            return self.kernels[0]
        runs = [f"{k}@{b}" for i, (k, b) in enumerate(zip(self.kernels, self.buckets))
                if i == 0 or k != self.kernels[i - 1]]
        return ",".join(runs)

    def record(self) -> dict:
        return asdict(self) | {"describe": self.describe()}


def available(dtype: torch.dtype, device: torch.device | str) -> tuple[str, ...]:
    """The candidates that can compute `dtype` weights on `device` (only `stock` off the CPU)."""
    if torch.device(device).type != "cpu":
        return ("stock",)
    out = ["stock"]
    if torch.backends.mkldnn.is_available() and (dtype == torch.float32 or (dtype == torch.bfloat16 and native_bf16())):
        out.append("packed")
    if dtype == torch.float32 and torch.backends.mkl.is_available() and hasattr(torch.ops.mkl, "_mkl_linear"):
        out.append("mkl")
    return tuple(out)


def native_bf16() -> bool:
    """Whether this CPU computes bf16 natively (AVX512-BF16 or AMX); elsewhere PyTorch emulates it, slowly."""
    return any(flag in _cpu_flags() for flag in ("avx512_bf16", "amx_bf16"))


def check_mode(mode: str, dtype: torch.dtype, device: torch.device | str) -> str:
    """`mode` if it can run here: a forced kernel must be available for these weights."""
    if mode not in MODES:
        raise Clover2Error(f"unknown kernels {mode!r}: use one of {', '.join(MODES)}")
    if mode != "auto" and mode not in available(dtype, device):
        raise Clover2Error(f"kernels {mode!r} cannot compute {dtype} weights on {device} here (available: "
                           f"{', '.join(available(dtype, device))}); use 'auto' to choose by measurement")
    return mode


# ---- dispatch ---------------------------------------------------------------------------------


class Dispatch:
    """The kernel per row count, shared by every linear layer of one model: `use(plan)` switches them all."""

    def __init__(self, plan: KernelPlan):
        self.use(plan)

    def use(self, plan: KernelPlan) -> None:
        self.plan = plan
        self.table = [plan.kernel_for(r) for r in range(1, plan.buckets[-1] + 1)]

    def kernel(self, rows: int) -> str:
        return self.table[min(rows, len(self.table)) - 1]


def install(model: torch.nn.Module, plan: KernelPlan, kernels: Sequence[str] | None = None) -> Dispatch:
    """Give every `nn.Linear` of a frozen model the prepared weights of `kernels` (default: those
    `plan` uses) and a forward that follows the returned dispatch; returns it.

    Call it once the weights are final (after any adapter merge and device move): a prepared copy
    does not follow later changes to its parameter. A gradient always takes the stock kernel."""
    dispatch = Dispatch(plan)
    needed = set(kernels or plan.kernels)
    for module in model.modules():
        if not isinstance(module, torch.nn.Linear):
            continue
        w = module.weight.detach()
        module.prepared = {"packed": torch.ops.mkldnn._reorder_linear_weight(w) if "packed" in needed else None,
                           "mkl": torch.ops.mkl._mkl_reorder_linear_weight(w, 1) if "mkl" in needed else None}
        module.dispatch = dispatch
        module.forward = types.MethodType(_forward, module)
    model.kernel_dispatch = dispatch
    return dispatch


def keep_only(model: torch.nn.Module, plan: KernelPlan) -> None:
    """Switch `model` to `plan` and free the prepared weights it does not use."""
    model.kernel_dispatch.use(plan)
    for module in model.modules():
        if isinstance(module, torch.nn.Linear) and hasattr(module, "prepared"):
            module.prepared = {k: (w if k in plan.kernels else None) for k, w in module.prepared.items()}


def _forward(self: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
    if torch.is_grad_enabled() and (x.requires_grad or self.weight.requires_grad):
        return F.linear(x, self.weight, self.bias)  # the prepared kernels have no backward
    rows = x.numel() // x.shape[-1]
    kernel = self.dispatch.kernel(rows)
    if kernel == "packed":
        return torch.ops.mkldnn._linear_pointwise(x, self.prepared["packed"], self.bias, "none", [], "")
    if kernel == "mkl":
        y = torch.ops.mkl._mkl_linear(x.reshape(rows, x.shape[-1]), self.prepared["mkl"], self.weight, self.bias, rows)
        return y.view(*x.shape[:-1], y.shape[-1])
    return F.linear(x, self.weight, self.bias)


# ---- measurement ------------------------------------------------------------------------------


def measure(run: Callable[[int], None], dispatch: Dispatch, candidates: Sequence[str], *, repeats: int = 5,
            buckets: Sequence[int] = BUCKETS, timer: Callable[[str, int], float] | None = None) -> list[dict]:
    """Median seconds of `run(rows)` under each candidate, every bucket and candidate interleaved
    round by round (the order rotated per round), after one warm-up round; the buckets whose two
    fastest candidates are within `CLOSE` get `repeats` more rounds, up to `PASSES` passes in all.
    `timer(kernel, rows)` replaces the real timing (tests)."""
    times: dict[tuple[str, int], list[float]] = {(k, n): [] for k in candidates for n in buckets}
    pending, r = list(buckets), 0
    for _ in range(PASSES):
        for _ in range(repeats + (r == 0)):
            order = list(candidates[r % len(candidates):]) + list(candidates[: r % len(candidates)])
            for n in pending:
                for k in order:
                    dispatch.use(KernelPlan.uniform(k))
                    if timer is not None:
                        seconds = timer(k, n)
                    else:
                        start = time.perf_counter()
                        run(n)
                        seconds = time.perf_counter() - start
                    if r:
                        times[k, n].append(seconds)
            r += 1
        pending = [n for n in buckets if _close(sorted(statistics.median(times[k, n]) for k in candidates))]
        if not pending:
            break
    return [{"kernel": k, "rows": n, "median_ms": 1e3 * statistics.median(t), "rounds": len(t)}
            for (k, n), t in times.items()]


def _close(medians: list[float]) -> bool:
    """Whether the two fastest of a bucket's medians (sorted) are too close to tell apart yet."""
    return len(medians) > 1 and medians[1] <= medians[0] * (1 + CLOSE)


def choose(timings: list[dict], buckets: Sequence[int] = BUCKETS, source: str = "measured") -> KernelPlan:
    """The fastest kernel of each bucket (ties go to the earlier candidate)."""
    best = {}
    for row in timings:
        if row["rows"] not in best or row["median_ms"] < best[row["rows"]]["median_ms"]:
            best[row["rows"]] = row
    return KernelPlan(tuple(best[n]["kernel"] for n in buckets), tuple(buckets), source)


def tuned(model: torch.nn.Module, mode: str, run: Callable[[int], None], key: dict, *,
          timer: Callable[[str, int], float] | None = None, fresh: bool = False) -> KernelPlan:
    """Install kernels on `model` by `mode`: a forced kernel everywhere, or (`auto`) the plan measured
    with the workload `run(rows)`, cached under the machine, the torch version and `key` (the
    model's shapes and dtype; `fresh`: measured again whatever the cache holds). Returns the plan in
    use; `model.kernel_timings` keeps what it was chosen from. `timer` replaces the timing (tests):
    nothing is then read from or written to the cache."""
    dtype, device = next(model.parameters()).dtype, next(model.parameters()).device
    mode = check_mode(mode, dtype, device)
    candidates = available(dtype, device)
    model.kernel_timings = []
    if mode != "auto" or candidates == ("stock",):  # forced, or nothing to choose from
        if mode in ("auto", "stock"):
            return KernelPlan.uniform("stock")  # PyTorch's own kernels (a GPU's): nothing is installed
        return install(model, KernelPlan.uniform(mode)).plan
    full_key = json.loads(json.dumps(key | {"machine": machine_key(), "torch": torch.__version__, "dtype": str(dtype),
                                            "candidates": list(candidates), "buckets": list(BUCKETS)}))
    path = cache_root() / "kernels" / f"{stable_hash(full_key)}.json"
    stored = _cached(path, full_key) if timer is None and not fresh else None
    if stored is not None:
        model.kernel_timings = stored["timings"]
        return install(model, KernelPlan(tuple(stored["plan"]["kernels"]), BUCKETS, "cached")).plan
    dispatch = install(model, KernelPlan.uniform("stock"), candidates)
    for _ in range(ATTEMPTS):
        start = mark()
        with torch.inference_mode():
            model.kernel_timings = measure(run, dispatch, candidates, timer=timer)
        load = other_share(start)
        if not load > CONTENDED_SHARE:  # an idle machine (or an unknown load: NaN)
            break
    plan = choose(model.kernel_timings)
    if timer is None and load > CONTENDED_SHARE:
        warnings.warn(f"other processes used {load:.0%} of the machine while the kernels were timed: the choice "
                      f"({plan.describe()}) serves this run but is not cached; it is measured again next time",
                      stacklevel=3)
    elif timer is None:
        write_json(path, {"format": PLAN_FORMAT, "key": full_key, "plan": asdict(plan), "timings": model.kernel_timings,
                          "other_load": load})
    keep_only(model, plan)
    return plan


def _cached(path, key: dict) -> dict | None:
    """The record at `path` if it is whole and was measured for exactly `key`; else None (measure again)."""
    if not path.exists():
        return None
    try:
        stored = json.loads(path.read_text())
        if stored.get("format") != PLAN_FORMAT or stored.get("key") != key:
            raise ValueError("recorded for another machine, torch version, model or format")
        KernelPlan(tuple(stored["plan"]["kernels"]), tuple(stored["plan"]["buckets"]))  # a valid plan
        if tuple(stored["plan"]["buckets"]) != BUCKETS or not isinstance(stored["timings"], list):
            raise ValueError("other buckets than this version measures")
        return stored
    except (ValueError, KeyError, TypeError, AttributeError, Clover2Error) as e:
        warnings.warn(f"kernel plan {path} is unusable ({e}); measuring again", stacklevel=3)
        return None


def machine_key() -> dict:
    """What a kernel's speed depends on besides the model: processor, its flags, threads."""
    return {"cpu": cpuinfo().get("model name") or platform.processor(), "flags": stable_hash(sorted(_cpu_flags())),
            "cpus": len(os.sched_getaffinity(0)), "threads": torch.get_num_threads(),
            "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None}


def cpuinfo() -> dict[str, str]:
    """The first processor's fields in /proc/cpuinfo (`model name`, `vendor_id`, `cpu family`,
    `model`, `stepping`, `flags`...); empty where there is none."""
    try:
        with open("/proc/cpuinfo") as f:
            first = f.read().split("\n\n", 1)[0]
    except OSError:
        return {}
    return {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in first.splitlines()) if k.strip()}


def _cpu_flags() -> set[str]:
    return set(cpuinfo().get("flags", "").split())


def linear_pass(model: torch.nn.Module) -> Callable[[int], None]:
    """A workload for `tuned`: every linear layer of `model` once, in order, on `rows` rows (for
    models without a forward of their own, such as a draft: its weights stream as in a step)."""
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    param = next(model.parameters())
    inputs = {}

    def run(rows: int) -> None:
        for lin in linears:
            x = inputs.get((rows, lin.in_features))
            if x is None:
                x = inputs[rows, lin.in_features] = torch.randn(rows, lin.in_features, dtype=param.dtype,
                                                                 generator=torch.Generator().manual_seed(rows))
            lin(x)
    return run


def linear_shapes(model: torch.nn.Module) -> list[list[int]]:
    return [[m.out_features, m.in_features, m.bias is not None]
            for m in model.modules() if isinstance(m, torch.nn.Linear)]
