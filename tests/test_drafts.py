"""Draft models: shapes, losses, greedy exactness with every architecture and tree kind."""

from __future__ import annotations

from dataclasses import replace

import formulation
import pytest
import torch
from conftest import VOCAB, hf_greedy
from test_decode_exact import PROMPTS

from clover2.decoding.decode import DecodeConfig, generate, prefill
from clover2.decoding.drafter import Recording
from clover2.decoding.tree import EAGLE_25, preset
from clover2.drafts import ARCHITECTURES, build_draft
from clover2.drafts.base import DraftModel
from clover2.drafts.checkpoint import load_draft, save_draft
from clover2.drafts.config import DraftConfig
from clover2.drafts.drafter import DynamicTree, ModelDrafter
from clover2.drafts.methods import MethodSpec, drafter_factory
from clover2.errors import Clover2Error
from clover2.measure.fit import Fitted, fitted_factory
from clover2.training.losses import Batch, draft_loss, hard_ce, soft_ce

MAX_NEW = 24


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_forward_shapes_per_architecture(tiny, arch):
    cfg = DraftConfig.for_arch(arch)
    model = build_draft(cfg, tiny)
    h = torch.randn(2, 11, 64 * max(1, len(model.hidden_layers)))  # EAGLE-3 reads three layers' inputs
    outs = model(h, torch.randint(0, VOCAB, (2, 11)))
    assert len(outs) == model.trained_heads
    for i, o in enumerate(outs):
        assert o.shape == (2, 11 - i, 64)  # depth i at t needs the token x_{t+1+i}
        assert model.logits(o).shape == (2, 11 - i, VOCAB)


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_a_loaded_draft_is_the_saved_one_down_to_its_computed_buffers(tiny, arch, tmp_path):
    """Loading builds the draft without drawing the initial values it then replaces: every parameter and
    buffer, those computed at construction included (the rotary frequencies), equals the saved draft's,
    and the global random stream is untouched."""
    cfg = DraftConfig.for_arch(arch)
    torch.manual_seed(1)
    model = build_draft(cfg, tiny)
    with torch.no_grad():  # trained: none of its values is an initial one
        for p in model.parameters():
            if p.requires_grad:
                p.add_(torch.randn_like(p))
    save_draft(tmp_path, model, tiny, cfg, extra={})
    state = torch.get_rng_state()
    loaded = load_draft(tmp_path, tiny)
    assert torch.equal(torch.get_rng_state(), state)
    want, got = ({**dict(m.named_parameters()), **dict(m.named_buffers())} for m in (model, loaded))
    assert want.keys() == got.keys() and all(torch.equal(want[k], got[k]) for k in want), \
        [k for k in want if not torch.equal(want[k], got.get(k, torch.empty(0)))]


@pytest.mark.parametrize("init_layer, source", [(0, [0, 0]), (-1, [1, 1]), ("first", [0, 1]), ("last", [0, 1])])
def test_augmenting_block_starts_from_the_chosen_target_layers(tiny, init_layer, source):
    """An integer copies that one target layer into both block layers (official: 0 at HEAD, -1 at 934e306)."""
    model = build_draft(DraftConfig(init_layer=init_layer), tiny)
    layers = tiny.model.get_decoder().layers  # the tiny targets have 2 layers: "first" and "last" coincide
    for mine, theirs in zip(model.block.layers, source):
        torch.testing.assert_close(mine.mlp.down_proj.weight, layers[theirs].mlp.down_proj.weight)
    torch.testing.assert_close(model.embed.weight, tiny.model.get_output_embeddings().weight)  # lm_head copy
    w = model.ad0.q.weight
    assert torch.allclose(w, torch.eye(64), atol=0.011) and (w - torch.eye(64) >= 0).all()
    assert model.ad0.v.weight.abs().max() <= 0.01
    assert not any(p.requires_grad for p in (model.lm_head.weight, model.embed.weight))


def test_init_layer_outside_the_target_is_refused(tiny):
    with pytest.raises(Clover2Error, match="2 layers"):
        build_draft(DraftConfig(init_layer=5), tiny)


def test_eagle1_is_built_as_its_official_code(tiny):
    """One random decoder layer without an input norm; the LM head reads the draft's feature directly."""
    model = build_draft(DraftConfig.for_arch("eagle1"), tiny)
    layer = model.block.layers[0]
    assert isinstance(layer.input_layernorm, torch.nn.Identity)
    target_layer = tiny.model.get_decoder().layers[-1]
    assert not torch.allclose(layer.mlp.down_proj.weight, target_layer.mlp.down_proj.weight)
    f = torch.randn(3, 64)
    torch.testing.assert_close(model.root_logits(f), tiny.model.get_output_embeddings()(f))


@pytest.mark.parametrize("arch", [a for a in ARCHITECTURES if a != "eagle3"])
def test_regression_targets_live_where_the_lm_head_reads(tiny, arch):
    """A draft whose output is the target's next feature has zero regression loss, and that feature
    gives the target's own logits: the output, its regression target and the LM head share one space.
    (EAGLE-3 has no regression: its states are its own, read by its own norm; it refuses a weight.)"""
    ids = torch.tensor([PROMPTS[0][:12]])
    n = ids.shape[1]
    with torch.no_grad():
        out = tiny.forward(ids, torch.arange(n)[None], tiny.causal_mask(n), tiny.new_cache(), hidden=True)
        model = build_draft(DraftConfig.for_arch(arch, num_heads=2, regression_weight=1.0, ce_weight=0.0), tiny)
        reg = model.regression_targets(out.hidden)
        torch.testing.assert_close(model.logits(reg), out.logits, rtol=1e-4, atol=1e-4)
        batch = Batch(h=out.hidden, next_ids=ids.roll(-1, 1), topk_ids=torch.zeros(1, n, 1, dtype=torch.long),
                      topk_p=torch.zeros(1, n, 1), label_ids=torch.zeros(1, n, dtype=torch.long),
                      mask=torch.ones(1, n, dtype=torch.bool))
        oracle = [reg[:, 1 + i:] for i in range(model.trained_heads)]  # head i at t outputs the feature at t+1+i
        loss, _ = draft_loss(model.config, oracle, model.logits, reg, batch)
    assert loss.item() == pytest.approx(0, abs=1e-6)


def _states(target, model, ids):
    """The target states `model` reads at every position of `ids` `(1, n)`."""
    n = ids.shape[1]
    return target.forward(ids, torch.arange(n)[None], target.causal_mask(n), target.new_cache(), hidden=True,
                          layers=model.hidden_layers).hidden


@pytest.mark.parametrize("arch", ARCHITECTURES)
@pytest.mark.parametrize("steps", [0, 3])
def test_training_logits_equal_decoding_logits(tiny, arch, steps):
    """Teacher forcing and the decode path agree at depths 0-2, every head read at position t: the
    heads that own a depth (Clover, Medusa), and with training-time test (`steps` unrolled; 0: the
    architecture's own count) the unrolled steps of a draft that feeds its own states back (EAGLE-1,
    EAGLE-3), whose step j attends to the sequence's keys and its own earlier steps' as a tree node
    attends to the committed sequence and its ancestors. EAGLE-1 untrained on its own states (one
    head) is teacher-forced on the features it fed itself back."""
    torch.manual_seed(1)
    ids = torch.tensor([PROMPTS[1][:16]])
    t, depth = 9, 2
    model = build_draft(DraftConfig.for_arch(arch, num_heads=3), tiny).eval()
    with torch.no_grad():
        for p in model.parameters():  # move off the near-identity start, so that every part matters
            p.add_(0.02 * torch.randn_like(p))
        h = _states(tiny, model, ids)
        decoded, states = formulation.decode_path(model, h, ids, t, depth)
        outs = model(h, ids.roll(-1, 1), steps=steps)
        if len(outs) == 1:
            x = torch.cat([model.features(h[:, :t + 1]), torch.stack(states[:-1])[None]], 1)
            fed = model.trunk(x, model.embed(ids[:, 1:t + 2 + depth]), position_ids=torch.arange(x.shape[1])[None])
            taught = [model.logits(model.read(fed, None, 0))[0, t + d] for d in range(depth + 1)]
        else:
            taught = [model.logits(o)[0, t] for o in outs[: depth + 1]]
    assert len(taught) == depth + 1
    for d, (a, b) in enumerate(zip(decoded, taught)):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4, msg=f"{arch} depth {d}")


def test_training_and_decoding_are_one_formulation():
    """An architecture defines its trunk and head step (and how the LM head reads a state); the
    training forward and the decode calls are the base class's, for every draft."""
    shared = ("forward", "advance", "root_logits", "step")
    for arch, cls in ARCHITECTURES.items():
        assert {name for name in shared if getattr(cls, name) is not getattr(DraftModel, name)} == set(), arch
        assert cls.trunk is not DraftModel.trunk and cls.head_step is not DraftModel.head_step, arch


def test_every_draft_computes_what_it_computed_before_one_formulation():
    """Training outputs and gradients and the decode path of every architecture on the three
    families, against the fingerprints the code computed before training and decoding shared one
    formulation (`tests/formulation.py`): nothing a trained draft computes moved."""
    expected = formulation.load()
    got = formulation.all_fingerprints()
    assert got.keys() == expected.keys()
    for key, value in expected.items():
        torch.testing.assert_close(got[key], value, rtol=1e-4, atol=1e-5, msg=key)


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_decode_time_acceptance_equals_teacher_forced_accuracy(tiny, arch):
    """Decoding with a 1-node tree proposes, at every step, the draft's teacher-forced head-0 prediction
    at that position of the finished sequence, so the tree's acceptance while decoding is exactly the
    teacher-forced top-1 against the target's own tokens (what the training log measures). Any
    train/decode mismatch (features shifted by a position, a stale draft cache, the prefill's hidden
    states handed over wrongly) breaks the equality."""
    torch.manual_seed(2)
    model = build_draft(DraftConfig.for_arch(arch, num_heads=2), tiny).eval()
    with torch.no_grad():
        for p in model.parameters():  # move off the near-identity start, so that every part matters
            p.add_(0.02 * torch.randn_like(p))
    prompt = PROMPTS[1]
    recorded = Recording(ModelDrafter(model, preset("chain1")))
    gen = generate(tiny, recorded, prompt, DecodeConfig(max_new_tokens=MAX_NEW))
    ids = torch.tensor([prompt + gen.output_ids])
    with torch.no_grad():
        h = _states(tiny, model, ids)
        taught = model.d2t[model.logits(model(h, ids.roll(-1, 1))[0])[0].argmax(-1)]  # position t: token t + 2
    # step k's root is the last committed token: after the prompt, the prefill's token and the steps before
    roots = [len(prompt) + sum(gen.accept_lengths[:k]) for k in range(len(gen.steps))]
    proposed = [int(d.tokens[0]) for d in recorded.drafts]
    assert proposed == [int(taught[r - 1]) for r in roots], arch
    hits = [p == int(ids[0, r + 1]) for p, r in zip(proposed, roots)]
    assert [n == 2 for n in gen.accept_lengths[:-1]] == hits[:-1]  # accepted exactly where teacher forcing is right
    assert len(set(proposed)) > 1  # the draft is not stuck on one token


def test_draft_vocabulary_keeps_only_its_rows(tiny):
    d2t = torch.tensor([5, 1, 9])
    model = build_draft(DraftConfig(draft_vocab=3), tiny, d2t=d2t)
    torch.testing.assert_close(model.lm_head.weight, tiny.model.get_output_embeddings().weight[d2t])


@pytest.mark.parametrize("bad", [dict(arch="eagle9"), dict(extraction="middle"), dict(num_heads=0),
                                 dict(loss="mse"), dict(init_layer="middle"), dict(init_layer=True),
                                 dict(value_gain=0, extraction="after"), dict(input_noise=-1)])
def test_nonsense_draft_config_is_refused(bad):
    with pytest.raises(Clover2Error):
        DraftConfig(**bad)


def test_unknown_arch_lists_the_known_ones():
    with pytest.raises(Clover2Error, match="clover2, clover1, eagle1, eagle3, medusa"):
        DraftConfig.for_arch("hydra")


def test_soft_ce_is_cross_entropy_over_the_given_tokens():
    logits = torch.randn(4, 10)
    p = torch.softmax(torch.randn(4, 10), -1)
    ids = torch.arange(10).expand(4, 10)
    expected = -(p * torch.log_softmax(logits, -1)).sum(-1)
    torch.testing.assert_close(soft_ce(logits, ids, p), expected)
    outside = ids.clone()
    outside[:, 0] = -1  # a token outside the draft vocabulary drops out
    torch.testing.assert_close(soft_ce(logits, outside, p), expected + p[:, 0] * torch.log_softmax(logits, -1)[:, 0])


def test_hard_ce_ignores_tokens_outside_the_draft_vocabulary():
    logits = torch.randn(3, 5)
    ce = hard_ce(logits, torch.tensor([1, -1, 4]))
    assert ce[1] == 0 and ce[0] > 0


def test_loss_counts_only_masked_positions_and_decays_by_head(tiny):
    model = build_draft(DraftConfig(num_heads=2), tiny)
    B, T, k = 2, 9, 4
    batch = Batch(h=torch.randn(B, T, 64), next_ids=torch.randint(0, VOCAB, (B, T)),
                  topk_ids=torch.randint(0, VOCAB, (B, T, k)), topk_p=torch.full((B, T, k), 0.25),
                  label_ids=torch.randint(0, VOCAB, (B, T)), mask=torch.zeros(B, T, dtype=torch.bool))
    outs = model(batch.h, batch.next_ids)
    loss, m = draft_loss(model.config, outs, model.logits, model.regression_targets(batch.h), batch)
    assert loss.item() == 0  # nothing masked in
    batch.mask[:, 3:6] = True
    loss, m = draft_loss(model.config, outs, model.logits, model.regression_targets(batch.h), batch)
    assert loss.item() == pytest.approx(m["head0_loss"] + 0.7 * m["head1_loss"], rel=1e-5)
    assert 0 <= m["head0_top1"] <= m["head0_top5"] <= 1


@pytest.mark.parametrize("arch", ARCHITECTURES)
@pytest.mark.parametrize("tree", ["eagle25", "dynamic"])
def test_greedy_output_is_unchanged_by_any_draft(tiny, arch, tree):
    torch.manual_seed(0)
    model = build_draft(DraftConfig.for_arch(arch, num_heads=5), tiny).eval()
    spec = EAGLE_25 if tree == "eagle25" else DynamicTree(budget=12, depth=4, top_k=4)
    for prompt in PROMPTS[:6]:
        with torch.no_grad():
            gen = generate(tiny, ModelDrafter(model, spec), prompt, DecodeConfig(max_new_tokens=MAX_NEW))
        assert gen.output_ids == hf_greedy(tiny, prompt, MAX_NEW), (arch, tree, prompt)
        assert max(s.draft_nodes for s in gen.steps) > 0


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_greedy_output_is_unchanged_by_the_union_of_copying_and_any_draft(tiny, arch):
    """The suffix cache, prompt lookup and the draft in one tree, whole or cut to fitted budgets."""
    torch.manual_seed(0)
    model = build_draft(DraftConfig.for_arch(arch, num_heads=5), tiny).eval()
    spec = MethodSpec.parse(f"union+{arch}@dynamic:12:4:4")
    makers = [drafter_factory(spec, tiny, draft=model),
              fitted_factory(replace(spec, tree="fitted"), model,
                             Fitted(DynamicTree(3, 2, 4), (("suffix", 2), ("pld", 1)))),
              fitted_factory(replace(spec, tree="fitted"), model, Fitted(None, (("pld", 4),)))]
    assert [set(make().sources) for make in makers] == [{"suffix", "pld", "model"}, {"suffix", "pld", "model"}, {"pld"}]
    assert makers[1]().budgets == {"suffix": 2, "pld": 1}  # the fitted budgets, nothing else
    merged = 0
    for make in makers:
        for prompt in [p * 3 for p in PROMPTS[:3]] + PROMPTS[3:5]:  # repeated prompts: something to copy
            union = make()
            with torch.no_grad():
                gen = generate(tiny, union, prompt, DecodeConfig(max_new_tokens=MAX_NEW))
            assert gen.output_ids == hf_greedy(tiny, prompt, MAX_NEW), (arch, prompt)
            merged += sum(1 for s in gen.steps if s.draft_nodes > 0) * (len(union.sources) > 1)
    assert merged > 0


def test_a_fitted_tree_of_one_node_decodes_as_the_one_token_chain(tiny):
    """Greedy, one fitted node is the static `chain1` the command line writes (the same token, the cheaper
    path); sampled, or with more nodes, the fitted dynamic tree itself."""
    from clover2.decoding.sampling import SamplingConfig
    from clover2.decoding.tree import Tree

    model = build_draft(DraftConfig.for_arch("clover2", num_heads=2), tiny).eval()
    spec = MethodSpec.parse("clover2@fitted")
    chain = fitted_factory(spec, model, Fitted(DynamicTree(1, 1, 8)))().tree
    assert isinstance(chain, Tree) and chain.parents == Tree.chain(1).parents and chain.ranks == Tree.chain(1).ranks
    assert isinstance(fitted_factory(spec, model, Fitted(DynamicTree(1, 1, 8)),
                                     SamplingConfig(temperature=1.0))().tree, DynamicTree)
    assert fitted_factory(spec, model, Fitted(DynamicTree(3, 2, 4)))().tree == DynamicTree(3, 2, 4)


def test_a_draft_method_without_a_tree_decodes_on_the_devices_tree():
    """`clover2 generate` and `chat`: the paper's tree on a GPU, the one-token chain on a CPU, a written tree
    kept; the benchmark's spec keeps the paper's tree."""
    from clover2.cli import generate_spec
    from clover2.drafts.methods import device_tree

    assert MethodSpec.parse("suffix+eagle1=drafts/eagle1").tree == "eagle25"
    assert (device_tree("cpu"), device_tree(torch.device("cuda")), device_tree("cuda:0")) == ("chain1", "eagle25",
                                                                                                 "eagle25")
    on_cpu = dict(default_tree=device_tree("cpu"))
    assert MethodSpec.parse("suffix+eagle1=drafts/eagle1", **on_cpu).tree == "chain1"
    assert MethodSpec.parse("clover2@eagle25=d", **on_cpu).tree == "eagle25"  # a written tree kept
    assert MethodSpec.parse("ar", **on_cpu).tree == ""
    assert generate_spec("clover2=d", **on_cpu).tree == "chain1"
    assert generate_spec("clover2=d", tree="eagle25", **on_cpu).tree == "eagle25"  # the older spelling's tree kept
    assert generate_spec("clover2@dynamic:12:3:4=d", **on_cpu).tree == "dynamic:12:3:4"


def _propose(target, drafter):
    prompt = PROMPTS[0]
    with torch.no_grad():
        drafter.begin(prompt, prefill(target, target.new_cache(), prompt[:-1], hidden=True).hidden[0])
        return drafter.propose(prompt)


def _eagle2_reference(model, hidden, next_ids, spec):
    """EAGLE-2's tree grown node by node on the host from the draft's public calls: the pool's size,
    and the `budget` best of its nodes (by cumulative log-probability) as parents and tokens."""
    root = model.advance(hidden[None], torch.tensor(next_ids)[None], model.new_cache())
    pool, frontier, states = [], [0], {0: root[0]}  # pool: (score, parent, token), node i + 1 = pool[i]
    for d in range(spec.depth):
        if d == 0:
            logits = model.root_logits(root)
        else:
            parents = torch.stack([states[pool[n - 1][1]] for n in frontier])
            new_states, logits = model.step(parents, torch.tensor([pool[n - 1][2] for n in frontier]), d, cache=None)
            states |= {n: s for n, s in zip(frontier, new_states)}
        top = torch.log_softmax(logits, -1).topk(spec.top_k, dim=-1)
        first = len(pool) + 1
        for n, ids, lq in zip(frontier, model.d2t[top.indices].tolist(), top.values.tolist()):
            base = pool[n - 1][0] if n else 0.0
            pool += [(base + v, n, x) for x, v in zip(ids, lq)]
        frontier = sorted(range(first, len(pool) + 1), key=lambda i: -pool[i - 1][0])[: spec.top_k]
    kept = sorted(sorted(range(1, len(pool) + 1), key=lambda i: -pool[i - 1][0])[: spec.budget])
    index = {0: 0} | {n: i + 1 for i, n in enumerate(kept)}
    return len(pool), (-1, *(index[pool[n - 1][1]] for n in kept)), [pool[n - 1][2] for n in kept]


@pytest.mark.parametrize("budget, depth, top_k", [(60, 5, 10), (60, 6, 10), (10, 3, 4), (60, 3, 4), (7, 1, 4)])
def test_dynamic_tree_is_eagle2s(tiny, budget, depth, top_k):
    """EAGLE-2: a pool of top_k children per node of the top_k best per depth (top_k at depth 1,
    top_k^2 below); the tree is the pool's `budget` best nodes, ancestors included: the drafter's
    on-device growth gives the tree a node-by-node reference on the host grows."""
    torch.manual_seed(0)
    model = build_draft(DraftConfig(num_heads=6), tiny).eval()
    spec = DynamicTree(budget=budget, depth=depth, top_k=top_k)
    draft = _propose(tiny, ModelDrafter(model, spec))
    with torch.no_grad():
        hidden = prefill(tiny, tiny.new_cache(), PROMPTS[0][:-1], hidden=True).hidden[0]
        pool, parents, tokens = _eagle2_reference(model, hidden, PROMPTS[0][1:], spec)
    assert pool == top_k + (depth - 1) * top_k ** 2
    assert draft.tree.size - 1 == min(budget, pool)  # the budget binds whenever the pool allows
    assert (draft.tree.parents, draft.tokens.tolist()) == (parents, tokens)
    scores = draft.scores
    assert all(scores[i - 1] <= scores[parents[i] - 1] + 1e-6 for i in range(1, len(parents)) if parents[i] > 0)
    assert draft.tree.max_depth <= depth
    assert len(draft.tree.children[0]) <= top_k


def test_static_trees_have_the_requested_shape(tiny):
    model = build_draft(DraftConfig(), tiny).eval()
    chain = _propose(tiny, ModelDrafter(model, preset("chain4")))
    assert chain.tree.parents == (-1, 0, 1, 2, 3)
