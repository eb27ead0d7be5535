"""A replayed greedy decoding proposes, accepts and commits exactly what real decoding does."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import tiny_target
from test_decode_exact import PROMPTS, OracleDrafter

from clover2.decoding.decode import DecodeConfig, generate
from clover2.decoding.drafter import Recording
from clover2.decoding.prompt_lookup import PromptLookupDrafter
from clover2.decoding.replay import plain_reference, replay
from clover2.decoding.sampling import SamplingConfig
from clover2.decoding.token_recycling import TokenRecycling
from clover2.decoding.tree import EAGLE_25, preset
from clover2.decoding.union import Union
from clover2.drafts import ARCHITECTURES, build_draft
from clover2.drafts.config import DraftConfig
from clover2.drafts.drafter import DynamicTree, ModelDrafter
from clover2.errors import Clover2Error
from clover2.measure.acceptance import (
    accept_histogram,
    depth_acceptance,
    layers_read,
    replayed_steps,
    tau_table,
    vocabulary_coverage,
)

MAX_NEW = 24


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_replay_gives_real_decodings_accept_lengths(tiny, arch):
    """Every architecture, alone with a static and a dynamic tree, and in one tree with an oracle
    that knows the continuation (long accepted paths through the draft's hidden states too). The
    references hold the states every architecture reads; each replay takes its draft's own."""
    torch.manual_seed(0)
    model = build_draft(DraftConfig.for_arch(arch, num_heads=5), tiny).eval()
    config = DecodeConfig(max_new_tokens=MAX_NEW)
    layers = layers_read(tiny, list(ARCHITECTURES))
    assert len(layers) > 1  # the last state and EAGLE-3's fused ones
    for k, prompt in enumerate(PROMPTS[:4]):
        ref = plain_reference(tiny, prompt, config, layers=layers)
        truth = ref.ids[len(prompt):]
        makers = [lambda: ModelDrafter(model, EAGLE_25), lambda: ModelDrafter(model, DynamicTree(12, 4, 4)),
                  lambda: Union({"oracle": OracleDrafter(truth, k, 0.8), "model": ModelDrafter(model, EAGLE_25)})]
        for make in makers:
            real_drafter, replay_drafter = Recording(make()), Recording(make())
            real = generate(tiny, real_drafter, prompt, config)
            replayed = replay(tiny, replay_drafter, ref)
            assert replayed.output_ids == real.output_ids == truth
            assert replayed.accept_lengths == real.accept_lengths, (arch, prompt)
            # the same trees of the same tokens: the draft read the same hidden states
            assert ([d.tokens.tolist() for d in replay_drafter.drafts]
                    == [d.tokens.tolist() for d in real_drafter.drafts])
        assert max(real.accept_lengths) >= 3  # the union accepted whole paths


@pytest.mark.parametrize("stop", ["eos", "stop_string", "length"])
def test_replay_stops_where_decoding_stops(stop):
    """At EOS or a stop string inside an accepted path, and at the length cap, as real decoding does."""
    target = tiny_target("llama")
    prompt = PROMPTS[1] * 3  # repetitive: prompt lookup accepts long paths
    out = plain_reference(target, prompt, DecodeConfig(max_new_tokens=MAX_NEW)).ids[len(prompt):]
    k = next(i for i in range(4, MAX_NEW) if out[i] not in out[:i])  # first occurrence: decoding stops there
    config = DecodeConfig(max_new_tokens=MAX_NEW if stop != "length" else k,
                          stop_strings=(target.decode(out[k - 1:k + 1]),) if stop == "stop_string" else ())
    if stop == "eos":
        target.model.generation_config.eos_token_id = out[k]
    real = generate(target, PromptLookupDrafter(), prompt, config)
    replayed = replay(target, PromptLookupDrafter(), plain_reference(target, prompt, config))
    assert real.stop_reason == stop and len(real.output_ids) <= k + 1
    assert replayed.output_ids == real.output_ids and replayed.accept_lengths == real.accept_lengths
    assert replayed.stop_reason == stop


def test_replay_refuses_sampling_and_drafters_that_read_the_trees_logits(tiny):
    with pytest.raises(Clover2Error, match="greedy"):
        plain_reference(tiny, PROMPTS[0], DecodeConfig(max_new_tokens=4, sampling=SamplingConfig(temperature=1.0)))
    ref = plain_reference(tiny, PROMPTS[0], DecodeConfig(max_new_tokens=4))
    tr = TokenRecycling(tiny.config.get_text_config().vocab_size, preset("chain4"))
    with pytest.raises(Clover2Error, match="logits"):
        replay(tiny, tr.drafter(), ref)


def test_a_reference_without_the_states_a_draft_reads_is_refused_and_a_union_cannot_mix_them(tiny):
    """A replay serves a draft only the states its reference recorded (EAGLE-3's fused layers are not
    in a default one); one tree cannot hold drafts that read different states (one forward returns one kind)."""
    ref = plain_reference(tiny, PROMPTS[0], DecodeConfig(max_new_tokens=4))
    eagle3 = build_draft(DraftConfig.for_arch("eagle3"), tiny).eval()
    clover = build_draft(DraftConfig.for_arch("clover2"), tiny).eval()
    with pytest.raises(Clover2Error, match="plain_reference"):
        replay(tiny, ModelDrafter(eagle3, EAGLE_25), ref)
    with pytest.raises(Clover2Error, match="read different target states"):
        Union({"a": ModelDrafter(eagle3, EAGLE_25), "b": ModelDrafter(clover, EAGLE_25)})
    assert (Union({"pld": PromptLookupDrafter(), "e": ModelDrafter(eagle3, EAGLE_25)}).hidden_layers
            == eagle3.hidden_layers)


def _steps(lengths_per_prompt, draft="d", tree="eagle25", depth=5):
    return pd.DataFrame([{"draft": draft, "tree": tree, "prompt": p, "task": "qa" if p % 2 else "rag",
                          "tokens": sum(ls), "steps": len(ls), "lengths": " ".join(map(str, ls)), "depth": depth,
                          "answer_tokens": 10, "in_vocab": 10 - p} for p, ls in enumerate(lengths_per_prompt)])


def test_depth_acceptance_and_the_histogram_count_each_step_once():
    """Accept lengths 1, 2, 2, 4 (draft tokens 0, 1, 1, 3): depth 1 accepted on 3 of 4 steps, depth 2
    on 1 of those 3, depth 3 on 1 of 1; tau - 1 is the sum of the shares reaching each depth."""
    steps = _steps([[1, 2], [2, 4]])
    depths = depth_acceptance(steps).set_index("depth")
    assert depths.loc[1, "rate"] == 3 / 4 and depths.loc[2, "rate"] == 1 / 3 and depths.loc[3, "rate"] == 1.0
    assert depths.loc[4, "rate"] == 0 and np.isnan(depths.loc[5, "rate"])  # nothing reached depth 4
    tau = steps.tokens.sum() / steps.steps.sum()
    assert depths.reached.sum() == pytest.approx(tau - 1)
    hist = accept_histogram(steps).set_index("length")
    assert list(hist.steps) == [1, 2, 0, 1, 0, 0] and hist.share.sum() == pytest.approx(1)
    cover = vocabulary_coverage(steps).set_index("task")
    assert cover.loc["overall", "coverage"] == pytest.approx(19 / 20) and cover.loc["rag", "coverage"] == 1.0


def test_tau_table_pairs_every_variant_with_clover2_and_takes_one_tree():
    steps = pd.concat([_steps([[2, 2], [3, 1]] * 4, draft="clover2"), _steps([[1, 1], [2, 1]] * 4, draft="eagle1")])
    table = tau_table(steps, n_boot=200).set_index(["variant", "task"])
    assert table.loc[("clover2", "overall"), "tau"] == 2.0 and table.loc[("eagle1", "overall"), "tau"] == 1.25
    assert table.loc[("eagle1", "overall"), "delta_hi"] < 0  # below Clover-2 on every resample
    assert table.loc[("clover2", "overall"), "delta_hi"] == 0
    with pytest.raises(Clover2Error, match="one tree"):
        tau_table(pd.concat([steps, steps.assign(tree="chain1")]))


def test_replayed_steps_record_each_steps_length_and_the_answers_vocabulary(tiny):
    torch.manual_seed(0)
    model = build_draft(DraftConfig.for_arch("clover2", num_heads=3, draft_vocab=64), tiny,
                        d2t=torch.arange(64)).eval()
    prompts = [("qa", p) for p in PROMPTS[:2]]
    refs = [plain_reference(tiny, p, DecodeConfig(max_new_tokens=MAX_NEW)) for _, p in prompts]
    steps = replayed_steps(tiny, {"clover2": model}, prompts, refs, trees=("eagle25", "chain1"))
    for row, ref in zip(steps[steps.tree == "eagle25"].itertuples(), refs):
        lengths = [int(x) for x in row.lengths.split()]
        assert sum(lengths) == row.tokens and len(lengths) == row.steps and row.depth == EAGLE_25.max_depth
        answer = ref.ids[ref.prompt_len:]
        assert row.answer_tokens == len(answer) and row.in_vocab == sum(t < 64 for t in answer)
    assert set(steps[steps.tree == "chain1"].depth) == {1}
