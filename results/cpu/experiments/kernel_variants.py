"""Where a small-N forward spends its time, and which fp32 linear kernel serves it best (issue 13).

1. The torch profiler over the default (packed) target: self CPU time per operator for forwards
   of 1 and 8 new tokens over a 200-token cache (`kernel_profile.csv`).
2. Four ways to run every `nn.Linear`, swapped on one loaded target and measured in alternation:
   the stock `F.linear`; oneDNN pre-packed from 4 rows (clover2's default); oneDNN pre-packed for
   every call; the weight stored transposed (`x @ W.T` on a contiguous copy, MKL's other GEMM
   layout). One forward of N tokens each, interleaved (`kernel_variants.csv`).

    PYTHONPATH=. python results/cpu/experiments/kernel_variants.py     # ~4 min, on an idle machine
"""

import json
import statistics
import time
import types
from pathlib import Path

import pandas as pd
import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

from clover2.decoding import packed
from clover2.decoding.decode import prefill
from clover2.decoding.target import load_target
from clover2.decoding.tree import Draft, Tree
from clover2.decoding.verify import verify
from clover2.measure.load import mark, other_share
from clover2.measure.provenance import environment

HERE = Path(__file__).parent
SIZES = (1, 2, 4, 8, 12, 16, 24)


def _all_rows(self, x):
    return torch.ops.mkldnn._linear_pointwise(x, self.packed_weight, self.bias, "none", [], "")


def _transposed(self, x):
    y = x @ self.weight_t
    return y if self.bias is None else y + self.bias


def _stock(self, x):
    return F.linear(x, self.weight, self.bias)


VARIANTS = {"stock": _stock, "packed_4plus": packed._packed_forward, "packed_all": _all_rows,
            "transposed": _transposed}


def main(repeats: int = 12) -> None:
    target = load_target("smollm2-135m-instruct", dtype="float32", kernels="packed")
    linears = [m for m in target.model.modules() if isinstance(m, torch.nn.Linear)]
    for m in linears:
        m.weight_t = m.weight.detach().t().contiguous()
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(target.config.get_text_config().vocab_size, (201,), generator=gen).tolist()
    drafts = {n: Draft(Tree.chain(n - 1), torch.randint(1000, (n - 1,), generator=gen)) for n in SIZES}
    start = mark()
    with torch.inference_mode():
        cache = target.new_cache()
        prefill(target, cache, ids[:-1], hidden=False)

        def forward(n):
            verify(target, cache, ids[-1], drafts[n])
            cache.crop(-n)

        profiles = []
        for n in (1, 8):
            for _ in range(3):
                forward(n)
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                for _ in range(5):
                    forward(n)
            total = sum(e.self_cpu_time_total for e in prof.key_averages())
            profiles += [{"n_tokens": n, "op": e.key, "ms_per_forward": e.self_cpu_time_total / 5e3,
                          "share": e.self_cpu_time_total / total} for e in prof.key_averages()]
        ops = pd.DataFrame(profiles).sort_values(["n_tokens", "share"], ascending=[True, False])
        ops.groupby("n_tokens").head(12).round(4).to_csv(HERE / "kernel_profile.csv", index=False)

        times = {(v, n): [] for v in VARIANTS for n in SIZES}
        for r in range(repeats + 1):  # whole curves alternate, so drifting load hits every variant alike
            for v, fn in VARIANTS.items():
                for m in linears:
                    m.forward = types.MethodType(fn, m)
                for n in SIZES:
                    t0 = time.perf_counter()
                    forward(n)
                    if r:  # the first round warms up
                        times[v, n].append(time.perf_counter() - t0)
    rows = [{"variant": v, "n_tokens": n, "median_ms": 1e3 * statistics.median(times[v, n])} for v, n in times]
    curve = pd.DataFrame(rows)
    curve["relative"] = curve.median_ms / curve.variant.map(curve[curve.n_tokens == 1].set_index("variant").median_ms)
    curve.round(3).to_csv(HERE / "kernel_variants.csv", index=False)
    env = environment(target) | {"other_load": other_share(start), "repeats": repeats}
    (HERE / "kernel_variants_env.json").write_text(json.dumps(env, indent=2, default=str) + "\n")
    print(ops.groupby("n_tokens").head(8).round(3).to_string(index=False))
    print(curve.pivot(index="variant", columns="n_tokens", values="median_ms").round(1).to_string())
    print(f"other processes: {env['other_load']:.1%}")


if __name__ == "__main__":
    main()
