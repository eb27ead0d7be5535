"""Draft models: shapes, losses, greedy exactness with every architecture and tree kind."""

from __future__ import annotations

import pytest
import torch
from conftest import VOCAB, hf_greedy
from test_decode_exact import PROMPTS

from clover2.decoding.decode import DecodeConfig, generate
from clover2.decoding.tree import EAGLE_25, preset
from clover2.drafts import ARCHITECTURES, build_draft
from clover2.drafts.config import DraftConfig
from clover2.drafts.drafter import DynamicTree, ModelDrafter
from clover2.errors import Clover2Error
from clover2.training.losses import Batch, draft_loss, hard_ce, soft_ce

MAX_NEW = 24


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_forward_shapes_per_architecture(tiny, arch):
    cfg = DraftConfig.for_arch(arch)
    model = build_draft(cfg, tiny)
    h = torch.randn(2, 11, 64)
    outs = model(h, torch.randint(0, VOCAB, (2, 11)))
    assert len(outs) == model.trained_heads
    for i, o in enumerate(outs):
        expected = 11 - i if arch in ("clover2", "clover1") else 11
        assert o.shape == (2, expected, 64)
        assert model.logits(o).shape == (2, expected, VOCAB)


def test_clover2_starts_from_the_official_initialization(tiny):
    model = build_draft(DraftConfig(), tiny)
    layers = tiny.model.get_decoder().layers
    torch.testing.assert_close(model.block.layers[1].mlp.down_proj.weight, layers[-1].mlp.down_proj.weight)
    torch.testing.assert_close(model.embed.weight, tiny.model.get_output_embeddings().weight)  # lm_head copy
    w = model.ad0.q.weight
    assert torch.allclose(w, torch.eye(64), atol=0.011) and (w - torch.eye(64) >= 0).all()
    assert model.ad0.v.weight.abs().max() <= 0.01
    assert not any(p.requires_grad for p in (model.lm_head.weight, model.embed.weight))


def test_draft_vocabulary_keeps_only_its_rows(tiny):
    d2t = torch.tensor([5, 1, 9])
    model = build_draft(DraftConfig(draft_vocab=3), tiny, d2t=d2t)
    torch.testing.assert_close(model.lm_head.weight, tiny.model.get_output_embeddings().weight[d2t])


@pytest.mark.parametrize("bad", [dict(arch="eagle3"), dict(extraction="middle"), dict(num_heads=0),
                                 dict(loss="mse")])
def test_nonsense_draft_config_is_refused(bad):
    with pytest.raises(Clover2Error):
        DraftConfig(**bad)


def test_unknown_arch_lists_the_known_ones():
    with pytest.raises(Clover2Error, match="clover2, clover1, eagle1, medusa"):
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


def test_draft_trees_have_the_requested_shape(tiny):
    model = build_draft(DraftConfig(), tiny).eval()
    d = ModelDrafter(model, DynamicTree(budget=10, depth=3, top_k=4))
    prompt = PROMPTS[0]
    with torch.no_grad():
        from clover2.decoding.decode import prefill
        cache = tiny.new_cache()
        d.begin(prompt, prefill(tiny, cache, prompt[:-1], hidden=True))
        draft = d.propose(prompt)
    assert draft.tree.size - 1 == 10 and draft.tree.max_depth <= 3
    static = ModelDrafter(model, preset("chain4"))
    with torch.no_grad():
        static.begin(prompt, prefill(tiny, tiny.new_cache(), prompt[:-1], hidden=True))
        chain = static.propose(prompt)
    assert chain.tree.parents == (-1, 0, 1, 2, 3)
