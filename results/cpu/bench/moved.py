"""How much each cpu benchmark figure moved: the run at e494ef3 (old harness) beside the rerun on the
fixed harness. Both recomputed from runs.csv with one statistic (geometric mean of per-prompt speedups,
percentile bootstrap over prompts, 2000 resamples, seed 0); the old table's own figure (a median) beside."""
import sys
import numpy as np
import pandas as pd

old_runs, old_bench, new_runs, new_bench = (pd.read_csv(p) for p in sys.argv[1:5])

def geo(runs):
    rng = np.random.default_rng(0)
    out = {}
    for (m, t), g in runs.groupby(["method", "temperature"], sort=False):
        r = np.log(g.groupby("prompt").speedup.mean().to_numpy())
        picks = rng.integers(0, len(r), (2000, len(r)))
        b = np.exp(r[picks].mean(1))
        out[(m, t)] = (np.exp(r.mean()), np.quantile(b, .025), np.quantile(b, .975))
    return out

og, ng = geo(old_runs), geo(new_runs)
ob = old_bench[old_bench.task == "overall"].set_index(["method", "temperature"])
nb = new_bench[new_bench.task == "overall"].set_index(["method", "temperature"])
rows = []
for key in ng:
    if key not in og:
        continue
    rows.append({"method": key[0], "T": key[1], "tau_old": ob.tau.get(key), "tau_new": nb.tau.get(key),
                 "speedup_old_median": ob.speedup.get(key), "speedup_old_geomean": og[key][0],
                 "speedup_new_geomean": ng[key][0], "new_lo": ng[key][1], "new_hi": ng[key][2],
                 "moved": ng[key][0] / og[key][0]})
t = pd.DataFrame(rows)
print(t.round(3).to_string(index=False))
t.round(4).to_csv(sys.argv[5], index=False)
