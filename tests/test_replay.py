"""A replayed greedy decoding proposes, accepts and commits exactly what real decoding does."""

from __future__ import annotations

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
from clover2.measure.acceptance import layers_read

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
            assert [d.tokens.tolist() for d in replay_drafter.drafts] == [d.tokens.tolist() for d in real_drafter.drafts]
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
    assert Union({"pld": PromptLookupDrafter(), "e": ModelDrafter(eagle3, EAGLE_25)}).hidden_layers == eagle3.hidden_layers
