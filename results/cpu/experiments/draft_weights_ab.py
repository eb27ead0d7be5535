"""A/B of the draft's weights while decoding (issue 13): float32 (pre-packed) vs int8, Clover-2.

The same trained draft decodes three prompts (MT-Bench, QA, GSM8K; 48 new tokens) with two
dynamic trees, loaded once as trained and once with int8 linear weights. It reports the draft's
time per step and tau; the output is the same either way, since the target verifies every token.

    python draft_weights_ab.py DRAFT_FOLDER   # a Clover-2 draft trained for the cpu profile's target
"""

import json
import sys
from pathlib import Path

from clover2.decoding.decode import DecodeConfig, generate
from clover2.decoding.prompts import first_turn_ids
from clover2.decoding.target import load_target
from clover2.drafts.checkpoint import load_draft
from clover2.drafts.drafter import DynamicTree, ModelDrafter
from clover2.measure.tasks import load_task


def main(draft_folder: str) -> None:
    target = load_target("smollm2-135m-instruct", dtype="float32")
    drafts = {w: load_draft(draft_folder, target, weights=w) for w in ("float", "int8")}
    prompts = [first_turn_ids(target, load_task(task, 1, 0)[0]) for task in ("mt_bench", "qa", "gsm8k")]
    config, rows = DecodeConfig(max_new_tokens=48), []
    for tree in (DynamicTree(16, 4, 8), DynamicTree(6, 3, 4)):
        for weights, model in drafts.items():
            generate(target, ModelDrafter(model, tree), prompts[0], config)  # warm-up
            steps = [s for p in prompts for s in generate(target, ModelDrafter(model, tree), p, config).steps]
            rows.append({"tree": f"dynamic:{tree.budget}:{tree.depth}:{tree.top_k}", "weights": weights,
                         "draft_ms_per_step": round(1e3 * sum(s.draft_s for s in steps) / len(steps), 2),
                         "tau": round(sum(len(s.tokens) for s in steps) / len(steps), 3)})
            print(json.dumps(rows[-1]), flush=True)
    (Path(__file__).parent / "draft_weights_ab.json").write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
