"""A/B at equal training time (issue 12): the `cpu` recipe's training window and draft vocabulary.
Every Clover-2 variant trains for the same 3 minutes on the same corpus data (work folder $CLOVER2_CACHE/experiments,
made by data_source_ab.py) and is evaluated on the same held-out set in the same 384-token window.

    python train_cost_ab.py
"""

import json
import shutil
import sys
from dataclasses import replace
from pathlib import Path

import pandas as pd
import torch

from clover2.drafts.checkpoint import load_draft
from clover2.paths import cache_root
from clover2.profiles import load_profile
from clover2.training.data import DistillData
from clover2.training.train import evaluate, train

OUT = cache_root() / "experiments"  # the work folder: data and drafts of the A/B runs
VARIANTS = {"384/8192": ({}, {}), "256/8192": ({"max_len": 256}, {}), "256/4096": ({"max_len": 256}, {"draft_vocab": 4096})}


def main(minutes: float = 3.0) -> None:
    profile = load_profile("cpu")
    target = profile.load_target()
    held = DistillData(OUT / "eval")
    rows = []
    for name, (train_over, draft_over) in VARIANTS.items():
        out = OUT / f"cost-{name.replace('/', '-')}"
        shutil.rmtree(out, ignore_errors=True)
        recipe = replace(profile.train_config("clover2"), max_steps=0, max_minutes=minutes, **train_over)
        train(target, OUT / "corpus", out, replace(profile.draft_config("clover2"), **draft_over), recipe,
              eval_dir=OUT / "eval")
        draft = load_draft(out, target)
        t2d = torch.full((target.config.get_text_config().vocab_size,), -1, dtype=torch.long)
        t2d[draft.d2t] = torch.arange(len(draft.d2t))
        ev = evaluate(draft, held, list(range(len(held.sequences))), t2d,
                      replace(recipe, max_len=384, eval_batches=4), target.device)
        state = json.loads((out / "draft.json").read_text())["train_state"] if (out / "draft.json").exists() else {}
        rows.append({"variant": name, **state, **{k: round(v, 4) for k, v in ev.items()}})
        print(json.dumps(rows[-1]), flush=True)
    pd.DataFrame(rows).to_csv(Path(__file__).parent / "train_cost_ab.csv", index=False)


if __name__ == "__main__":
    main(*map(float, sys.argv[1:]))
