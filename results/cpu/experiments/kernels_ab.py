"""A/B of the linear kernels (issue 13): stock PyTorch vs oneDNN with pre-packed weights, on this CPU.

Both targets are loaded side by side and measured in alternation, on an idle machine:
1. the verification cost curve: one forward of N new tokens over a cached 200-token prefix;
2. plain decoding (ms per token): clover2's loop and Hugging Face `generate`, with each kernel;
3. the Clover-2 draft's time per step against the target's, with a dynamic tree, with each kernel.

    python kernels_ab.py DRAFT_FOLDER   # a Clover-2 draft trained for the cpu profile's target
"""

import json
import statistics
import sys
from pathlib import Path

import pandas as pd
import torch

from clover2.decoding.decode import DecodeConfig, generate
from clover2.decoding.drafter import NoDrafter
from clover2.decoding.prompts import first_turn_ids
from clover2.decoding.target import load_target
from clover2.drafts.checkpoint import load_draft
from clover2.drafts.drafter import DynamicTree, ModelDrafter
from clover2.measure.bench import make_method
from clover2.measure.fit import cost_curve
from clover2.measure.load import mark, other_share
from clover2.measure.provenance import environment
from clover2.measure.tasks import SPEC_BENCH_TASKS, load_task

HERE = Path(__file__).parent
SIZES = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)


def main(draft_folder: str, blocks: int = 3) -> None:
    targets = {k: load_target("smollm2-135m-instruct", dtype="float32", kernels=k) for k in ("stock", "packed")}
    start = mark()
    curves = {k: [] for k in targets}
    for _ in range(blocks):  # alternate whole curves, so drifting load hits both alike
        for k, t in targets.items():
            curves[k].append(cost_curve(t, prefix=200, sizes=SIZES, repeats=5).set_index("n_tokens").median_ms)
    one = {k: statistics.median(c.loc[1] for c in curves[k]) for k in targets}
    rows = [{"n_tokens": n, **{f"{k}_ms": statistics.median(c.loc[n] for c in curves[k]) for k in targets}}
            for n in SIZES]
    curve = pd.DataFrame(rows).assign(stock_relative=lambda d: d.stock_ms / one["stock"],
                                      packed_relative=lambda d: d.packed_ms / one["packed"])
    curve.to_csv(HERE / "kernels_cost_curve.csv", index=False)
    print(curve.round(3).to_string(index=False), flush=True)

    prompts = [first_turn_ids(targets["stock"], load_task(task, 1, 0)[0]) for task in SPEC_BENCH_TASKS]
    config = DecodeConfig(max_new_tokens=64)
    drafts = {k: load_draft(draft_folder, t) for k, t in targets.items()}
    tree = DynamicTree(budget=16, depth=4, top_k=8)
    per_prompt = []
    for i, prompt in enumerate(prompts):
        runs = {}
        for k, t in targets.items():
            runs[f"ours_{k}"] = lambda t=t: generate(t, NoDrafter(), prompt, config)
            runs[f"hf_{k}"] = lambda t=t: make_method("hf", t, config).run(prompt)
            runs[f"draft_{k}"] = lambda t=t, k=k: generate(t, ModelDrafter(drafts[k], tree), prompt, config)
        names = list(runs)
        row = {"prompt": i}
        for name in names[i % len(names):] + names[: i % len(names)]:
            if i == 0:
                runs[name]()  # warm-up
            out = runs[name]()
            if name.startswith("draft"):
                row[f"{name}_step_ms"] = 1e3 * statistics.median(s.draft_s for s in out.steps)
            else:
                row[f"{name}_ms_per_token"] = 1e3 * out.seconds / len(out.output_ids)
        per_prompt.append(row)
        print(json.dumps({k: round(v, 2) for k, v in row.items()}), flush=True)
    decode = pd.DataFrame(per_prompt).median().drop("prompt")
    for k in targets:
        decode[f"draft_over_target_{k}"] = decode[f"draft_{k}_step_ms"] / decode[f"ours_{k}_ms_per_token"]
    env = environment(targets["packed"]) | {"other_load": other_share(start), "draft": Path(draft_folder).name}
    out = {"decode_medians": decode.round(4).to_dict(), "n_prompts": len(prompts), "max_new_tokens": 64, "env": env}
    (HERE / "kernels_ab.json").write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out["decode_medians"], indent=2))


if __name__ == "__main__":
    main(*sys.argv[1:2], *map(int, sys.argv[2:]))
