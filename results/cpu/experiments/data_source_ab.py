"""A/B: Clover-2 trained 100 steps on ShareGPT-as-is (prefill-labelled) vs on the target's own answers,
both evaluated on the target's own answers to held-out prompts."""
import json, sys, time
from dataclasses import replace
from pathlib import Path
import torch
torch.set_num_threads(2)
from clover2.profiles import load_profile
from clover2.measure.tasks import benchmark_texts
from clover2.training.corpora import sharegpt_conversations
from clover2.training.data import prepare_data, split_corpus
from clover2.training.train import train

out = Path(sys.argv[-1]) if sys.argv[-1].startswith("/") else Path("/tmp/ab")  
prof = load_profile("cpu")
target = prof.load_target()
t0 = time.perf_counter()
training, held = split_corpus(sharegpt_conversations(), benchmark_texts())
print("corpus", len(training), "held", len(held), f"{time.perf_counter()-t0:.0f}s", flush=True)
stage = sys.argv[1]
data = prof.data
if stage == "eval":
    m = prepare_data(target, held, out / "eval", data.held_out_set()); print(json.dumps(m))
elif stage == "corpus":
    m = prepare_data(target, training, out / "corpus", replace(data, tokens=int(sys.argv[2]), conversations=0)); print(json.dumps(m))
elif stage == "self":
    m = prepare_data(target, training, out / "self", replace(data, tokens=0, conversations=192, max_tokens=384)); print(json.dumps(m))
elif stage == "train":
    name = sys.argv[2]
    tc = replace(prof.train_config("clover2"), **json.loads(sys.argv[3]) if len(sys.argv) > 3 else {})
    tag = name + (sys.argv[4] if len(sys.argv) > 4 else "")
    m = train(target, out / name, out / f"draft-{tag}", prof.draft_config("clover2"), tc, eval_dir=out / "eval")
    print(json.dumps({"tag": tag, **{k: round(v, 4) for k, v in m.items() if "top" in k or k == "loss"}}))
