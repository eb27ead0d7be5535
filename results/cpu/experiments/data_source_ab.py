"""A/B: Clover-2 trained on ShareGPT as is (prefill-labelled) vs on the target's own answers, both
evaluated on the target's own answers to held-out prompts. Stages, in order (work folder $CLOVER2_CACHE/experiments):

    python data_source_ab.py eval
    python data_source_ab.py corpus 150000
    python data_source_ab.py self
    python data_source_ab.py train corpus '{"eval_batches": 4}'
    python data_source_ab.py train self '{"eval_batches": 4}'
    python data_source_ab.py train corpus '{"eval_batches": 4, "autocast_bf16": true}' bf16   # a tagged variant
"""

import json
import sys
from dataclasses import replace

from clover2.measure.tasks import benchmark_texts
from clover2.paths import cache_root
from clover2.profiles import load_profile
from clover2.training.corpora import sharegpt_conversations
from clover2.training.data import prepare_data, split_corpus
from clover2.training.train import train

OUT = cache_root() / "experiments"  # the work folder: data and drafts of the A/B runs


def main(stage: str, *args: str) -> None:
    profile = load_profile("cpu")
    target = profile.load_target()
    training, held = split_corpus(sharegpt_conversations(), benchmark_texts())
    data = profile.data
    if stage == "eval":
        meta = prepare_data(target, held, OUT / "eval", data.held_out_set())
    elif stage == "corpus":
        meta = prepare_data(target, training, OUT / "corpus", replace(data, tokens=int(args[0]), conversations=0))
    elif stage == "self":
        meta = prepare_data(target, training, OUT / "self", replace(data, tokens=0, conversations=192))
    else:
        name = args[0]
        recipe = replace(profile.train_config("clover2"), **(json.loads(args[1]) if len(args) > 1 else {}))
        tag = f"-{args[2]}" if len(args) > 2 else ""
        meta = train(target, OUT / name, OUT / f"draft-{name}{tag}", profile.draft_config("clover2"), recipe,
                     eval_dir=OUT / "eval")
    print(json.dumps(meta))


if __name__ == "__main__":
    main(*sys.argv[1:])
