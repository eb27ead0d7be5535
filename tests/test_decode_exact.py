"""Greedy speculative decoding is token-identical to Hugging Face greedy `generate` (fp32)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import VOCAB, hf_greedy, tiny_target
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clover2.decoding.decode import DecodeConfig, generate, speculative_steps
from clover2.decoding.drafter import Drafter, NoDrafter
from clover2.decoding.prompt_lookup import PromptLookupDrafter
from clover2.decoding.suffix import SuffixCache
from clover2.decoding.token_recycling import TokenRecycling
from clover2.decoding.tree import EAGLE_25, Draft, Tree

MAX_NEW = 40


def mixed_prompts(n: int = 30, seed: int = 0) -> list[list[int]]:
    """Prompts of mixed kinds: random, repetitive (prompt lookup hits), one token, long."""
    rng = np.random.default_rng(seed)
    prompts = []
    for i in range(n):
        kind = i % 5
        if kind == 0:
            p = rng.integers(0, VOCAB, rng.integers(2, 30))
        elif kind == 1:
            p = np.tile(rng.integers(0, VOCAB, rng.integers(2, 6)), 8)
        elif kind == 2:
            p = rng.integers(0, VOCAB, 1)
        elif kind == 3:
            p = rng.integers(0, VOCAB, rng.integers(100, 180))
        else:
            p = np.concatenate([rng.integers(0, 8, 20), rng.integers(0, VOCAB, 10)])
        prompts.append(p.tolist())
    return prompts


class OracleDrafter(Drafter):
    """An adversarial drafter: random tree shapes whose nodes follow the true greedy continuation
    with probability `p_true` and are random tokens otherwise (sometimes the right one by chance)."""

    def __init__(self, truth: list[int], seed: int, p_true: float, max_nodes: int = 24):
        self.truth, self.rng, self.p_true, self.max_nodes = truth, np.random.default_rng(seed), p_true, max_nodes

    def begin(self, prompt_ids, hidden):
        self.offset = len(prompt_ids)

    def propose(self, ids):
        done = len(ids) - self.offset  # tokens generated so far
        n = int(self.rng.integers(0, self.max_nodes + 1))
        parents = [-1] + [int(self.rng.integers(0, i)) for i in range(1, n + 1)]
        tree = Tree(parents=tuple(parents))
        on_truth, tokens = [True], []
        for i in range(1, n + 1):
            d = int(tree.depth[i])
            true_tok = self.truth[done + d - 1] if done + d - 1 < len(self.truth) else 0
            follow = on_truth[parents[i]] and self.rng.random() < self.p_true
            tok = true_tok if follow else int(self.rng.integers(0, VOCAB))
            tokens.append(tok)
            on_truth.append(on_truth[parents[i]] and tok == true_tok)
        return Draft(tree, torch.tensor(tokens, dtype=torch.long))


PROMPTS = mixed_prompts()


@pytest.mark.parametrize("method", ["ar", "pld", "suffix", "tr"])
def test_matches_hf_generate_on_30_prompts(tiny, method):
    cfg = DecodeConfig(max_new_tokens=MAX_NEW)
    make = {"ar": NoDrafter, "pld": PromptLookupDrafter, "suffix": SuffixCache().drafter,
            "tr": TokenRecycling(VOCAB, EAGLE_25).drafter}[method]  # one cache / matrix across prompts
    for prompt in PROMPTS:
        gen = generate(tiny, make(), prompt, cfg)
        assert gen.output_ids == hf_greedy(tiny, prompt, MAX_NEW), (tiny.name, method, prompt)
        assert len(gen.output_ids) == MAX_NEW and gen.stop_reason == "length"


def test_prompt_lookup_accepts_more_than_one_token_per_step_on_repetitive_text(tiny):
    prompt = PROMPTS[1]
    gen = generate(tiny, PromptLookupDrafter(), prompt, DecodeConfig(max_new_tokens=MAX_NEW))
    assert gen.output_ids == hf_greedy(tiny, prompt, MAX_NEW)
    assert all(n >= 1 for n in gen.accept_lengths) and len(gen.steps) == len(gen.accept_lengths)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(prompt_i=st.integers(0, len(PROMPTS) - 1), seed=st.integers(0, 2**31), p_true=st.floats(0.0, 1.0))
def test_adversarial_trees_never_change_the_output(tiny, prompt_i, seed, p_true):
    prompt = PROMPTS[prompt_i]
    truth = hf_greedy(tiny, prompt, MAX_NEW)
    gen = generate(tiny, OracleDrafter(truth, seed, p_true), prompt, DecodeConfig(max_new_tokens=MAX_NEW))
    assert gen.output_ids == truth


def test_oracle_chain_accepts_whole_paths(tiny):
    """With a perfect drafter, every step commits the full depth plus the bonus token."""
    prompt = PROMPTS[0]
    truth = hf_greedy(tiny, prompt, MAX_NEW)
    gen = generate(tiny, _ChainOracle(truth, 7), prompt, DecodeConfig(max_new_tokens=MAX_NEW))
    assert gen.output_ids == truth
    assert gen.accept_lengths[:-1] == [8] * (len(gen.steps) - 1)


class _ChainOracle(Drafter):
    def __init__(self, truth, k):
        self.truth, self.k = truth, k

    def begin(self, prompt_ids, hidden):
        self.offset = len(prompt_ids)

    def propose(self, ids):
        done = len(ids) - self.offset
        toks = (self.truth + [0] * self.k)[done: done + self.k]
        return Draft(Tree.chain(self.k), torch.tensor(toks, dtype=torch.long))


@pytest.mark.parametrize("family", ["llama", "gemma3"])
def test_eos_inside_an_accepted_path_stops_exactly_there(family):
    target = tiny_target(family)
    prompt = PROMPTS[3]
    truth = hf_greedy(target, prompt, MAX_NEW)
    # An EOS token that first appears mid-way through a 7-token accepted chain.
    k = next(i for i in range(2, MAX_NEW) if truth[i] not in truth[:i] and i % 8 not in (0, 7))
    target.model.generation_config.eos_token_id = truth[k]
    gen = generate(target, _ChainOracle(truth, 7), prompt, DecodeConfig(max_new_tokens=MAX_NEW))
    assert gen.output_ids == truth[: k + 1] == hf_greedy(target, prompt, MAX_NEW, eos=truth[k])
    assert gen.stop_reason == "eos" and gen.accept_lengths[-1] < 8


def test_max_new_tokens_inside_an_accepted_path(tiny):
    prompt = PROMPTS[0]
    truth = hf_greedy(tiny, prompt, MAX_NEW)
    gen = generate(tiny, _ChainOracle(truth, 7), prompt, DecodeConfig(max_new_tokens=5))
    assert gen.output_ids == truth[:5] and len(gen.steps) == 1 and gen.stop_reason == "length"


def test_stop_string_inside_an_accepted_path(tiny):
    prompt = PROMPTS[0]
    truth = hf_greedy(tiny, prompt, MAX_NEW)
    text = tiny.decode(truth)
    stop = text[10:13]  # ends at token 12 (one character per token)
    first = text.find(stop) + len(stop)  # tokens up to the first full occurrence
    gen = generate(tiny, _ChainOracle(truth, 7), prompt, DecodeConfig(max_new_tokens=MAX_NEW, stop_strings=(stop,)))
    assert gen.output_ids == truth[:first] and gen.stop_reason == "stop_string"


def test_cache_holds_exactly_the_committed_tokens_after_every_step(tiny):
    prompt = PROMPTS[4]
    truth = hf_greedy(tiny, prompt, MAX_NEW)
    cache = tiny.new_cache()
    ids = list(prompt)
    with torch.inference_mode():
        for step in speculative_steps(tiny, OracleDrafter(truth, 3, 0.7), prompt, DecodeConfig(max_new_tokens=MAX_NEW),
                                      cache=cache):
            ids += step.tokens
            assert cache.get_seq_length() == len(ids) - 1
            fresh = tiny.new_cache()
            n = len(ids) - 1
            mask = torch.full((n, n), torch.finfo(torch.float32).min).triu(1)[None, None]
            tiny.forward(torch.tensor([ids[:-1]]), torch.arange(n)[None], mask, fresh, logits_to_keep=1)
            for ours, ref in zip(cache.layers, fresh.layers):
                torch.testing.assert_close(ours.keys, ref.keys, atol=1e-5, rtol=1e-4)
                torch.testing.assert_close(ours.values, ref.values, atol=1e-5, rtol=1e-4)
    assert ids[len(prompt):] == truth


@pytest.mark.parametrize("engine", ["eager", "static"])
def test_a_causal_run_without_a_mask_equals_the_explicit_causal_mask(tiny, engine):
    """`visible=None` (the model masks itself: the fast prefill) gives the logits and cache entries of
    the explicit lower-triangular mask, on an empty cache and after a prefix, past Gemma's window."""
    from clover2.decoding.cache import new_cache
    ids = torch.tensor(PROMPTS[3][:60])
    runs = []
    with torch.inference_mode():
        for visible in (None, "explicit"):
            cache = new_cache(tiny, engine, capacity=256)
            logits = []
            for lo, hi in ((0, 40), (40, 60)):  # a prefill, then a causal run over a 40-token prefix
                n = hi - lo
                mask = None if visible is None else torch.ones(n, n, dtype=torch.bool).tril()
                logits.append(cache.run(tiny, ids[lo:hi], torch.arange(lo, hi), mask).logits[0])
            layers = cache.layers if engine == "eager" else cache.kv.layers
            runs.append((torch.cat(logits), [(la.keys[:, :, :60], la.values[:, :, :60]) for la in layers]))
    (logits_none, kv_none), (logits_mask, kv_mask) = runs
    torch.testing.assert_close(logits_none, logits_mask, atol=1e-5, rtol=1e-4)
    for (k1, v1), (k2, v2) in zip(kv_none, kv_mask):
        torch.testing.assert_close(k1, k2, atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(v1, v2, atol=1e-5, rtol=1e-4)


def test_static_tree_verification_equals_path_by_path_decoding(tiny):
    """Tree logits at every node equal decoding that node's root path on its own."""
    prompt = PROMPTS[0]
    rng = np.random.default_rng(0)
    tokens = torch.tensor(rng.integers(0, VOCAB, EAGLE_25.size - 1))
    draft = Draft(EAGLE_25, tokens)
    from clover2.decoding.decode import prefill
    from clover2.decoding.verify import verify
    with torch.inference_mode():
        cache = tiny.new_cache()
        prefill(tiny, cache, prompt[:-1], hidden=False)
        tree_logits = verify(tiny, cache, prompt[-1], draft).logits[0]
        for node in range(EAGLE_25.size):
            path = EAGLE_25.ancestors[node].nonzero().flatten()
            seq = prompt + tokens[path[1:] - 1].tolist()
            ref = tiny.model(torch.tensor([seq])).logits[0, -1].float()
            torch.testing.assert_close(tree_logits[node], ref, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("engine", ["static", "graphs"])
def test_static_engines_match_hf_generate(tiny, engine):
    """The static KV cache at bucketed, padded shapes (and `graphs`, which on a CPU runs the same path
    uncaptured) is token-identical to Hugging Face greedy decoding, plain and with trees of every size
    the oracle drafts; one cache serves every prompt (it is reused and grows with the longest)."""
    cfg = DecodeConfig(max_new_tokens=MAX_NEW, engine=engine)
    for i, prompt in enumerate(PROMPTS[:15]):
        truth = hf_greedy(tiny, prompt, MAX_NEW)
        for drafter in (NoDrafter(), PromptLookupDrafter(), OracleDrafter(truth, i, 0.7, max_nodes=40)):
            assert generate(tiny, drafter, prompt, cfg).output_ids == truth, (tiny.name, engine, prompt)
    assert tiny.engine_state[engine].capacity >= max(map(len, PROMPTS[:15])) + MAX_NEW


def test_a_full_static_cache_and_an_unknown_engine_are_clear_errors():
    from clover2.decoding.cache import StaticTreeCache, new_cache
    from clover2.errors import Clover2Error

    t = tiny_target("llama")
    cache = StaticTreeCache(t, 16, graphs=False)
    with pytest.raises(Clover2Error, match="full"):
        cache.run(t, torch.arange(20), torch.arange(20), torch.ones(20, 20, dtype=torch.bool).tril())
    with pytest.raises(Clover2Error, match="engine"):
        new_cache(t, "turbo")
    with pytest.raises(Clover2Error, match="engine"):
        DecodeConfig(engine="turbo")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
@pytest.mark.parametrize("family", ["llama", "gemma3"])
def test_cuda_graphs_match_hf_generate_on_a_gpu(family):
    """On a GPU, in fp32: the captured and replayed graphs give Hugging Face's greedy tokens."""
    target = tiny_target(family, kernels="stock")
    target.model.to("cuda")
    cfg = DecodeConfig(max_new_tokens=MAX_NEW, engine="graphs")
    for i, prompt in enumerate(PROMPTS[:10]):
        truth = hf_greedy(target, prompt, MAX_NEW)
        for drafter in (NoDrafter(), OracleDrafter(truth, i, 0.7, max_nodes=40)):
            assert generate(target, drafter, prompt, cfg).output_ids == truth, (family, prompt)
    assert target.engine_state["graphs"].graphed


def test_captured_states_are_the_targets_own(tiny):
    """What a draft reads of the target's forward: the final norm's input gives the logits through
    the norm and the LM head, and the inputs of chosen decoder layers are Hugging Face's own hidden
    states (`hidden_states[i]` enters layer i), concatenated in the order asked for."""
    n = 9
    ids = torch.randint(1, VOCAB, (1, n), generator=torch.Generator().manual_seed(3))
    pos, mask = torch.arange(n)[None], tiny.causal_mask(n)
    last = tiny.forward(ids, pos, mask, tiny.new_cache(), hidden=True)
    torch.testing.assert_close(tiny.model.lm_head(tiny.model.get_decoder().norm(last.hidden)).float(), last.logits)
    fused = tiny.forward(ids, pos, mask, tiny.new_cache(), hidden=True, layers=(1, 0)).hidden
    states = tiny.model(input_ids=ids, position_ids=pos, output_hidden_states=True).hidden_states
    torch.testing.assert_close(fused, torch.cat([states[1], states[0]], -1))
    assert tiny.forward(ids, pos, mask, tiny.new_cache(), layers=(1, 0)).hidden is None  # only when asked
