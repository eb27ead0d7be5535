"""Fitting the dynamic tree to the hardware: the counterfactual acceptance and the choice of tree."""

from __future__ import annotations

import pandas as pd
import pytest
import torch
from conftest import tiny_target

from clover2.decoding.decode import DecodeConfig, generate
from clover2.decoding.drafter import Recording
from clover2.drafts import build_draft
from clover2.drafts.config import DraftConfig
from clover2.drafts.drafter import DynamicTree, ModelDrafter
from clover2.measure.fit import FitConfig, _node_outcomes, fit_tree


@pytest.mark.parametrize("arch", ["clover2", "eagle1", "medusa"])
def test_node_outcomes_reproduce_the_accepted_lengths_of_the_run(arch):
    """In the calibration run itself every candidate is in the tree, so the nodes marked accepted
    per step must be exactly the draft tokens that step committed."""
    t = tiny_target("llama")
    torch.manual_seed(0)
    model = build_draft(DraftConfig.for_arch(arch, num_heads=3), t).eval()
    rec = Recording(ModelDrafter(model, DynamicTree(budget=24, depth=3, top_k=8)))
    gen = generate(t, rec, [5, 6, 7, 8, 9, 10], DecodeConfig(max_new_tokens=40))
    nodes = pd.DataFrame(_node_outcomes(0, rec.drafts, gen.output_ids, gen.accept_lengths))
    accepted = nodes.groupby("step").accepted.sum().reindex(range(len(gen.steps)), fill_value=0).tolist()
    drafted = [n - 1 for n in gen.accept_lengths]
    assert accepted[:-1] == drafted[:-1] and accepted[-1] >= drafted[-1]  # the last step may be cut by the cap
    assert sum(drafted) > 0  # the check is not vacuous


def _calibration(steps: int = 4):
    """Every step: a chain-like candidate list where the two best nodes are accepted, the rest not."""
    rows = [{"prompt": 0, "step": s, "depth": d, "score": -float(r), "accepted": r < 2}
            for s in range(steps) for r, d in enumerate([1, 2, 1, 3, 2, 3, 1, 2])]
    return {"nodes": pd.DataFrame(rows), "draft_s": {1: 0.001, 3: 0.003}}


def test_flat_cost_picks_a_big_tree_and_steep_cost_a_small_one():
    cfg = FitConfig(max_depth=3, top_k=4)
    flat = pd.DataFrame({"n_tokens": [1, 16], "median_ms": [10.0, 10.0]})
    steep = pd.DataFrame({"n_tokens": [1, 16], "median_ms": [10.0, 85.0]})  # +5 ms per token
    tree, table = fit_tree(_calibration(), flat, cfg)
    best = table.loc[table.predicted_speedup.idxmax()]
    assert best.tau == 3 and tree.budget >= 2 and tree.depth >= 2  # both accepted nodes are inside
    assert table[(table.budget == 1) & (table.depth == 3)].tau.item() == 2
    small, _ = fit_tree(_calibration(), steep, cfg)
    assert (small.budget, small.depth) == (2, 2)  # the two accepted nodes and nothing more
    assert isinstance(tree, DynamicTree) and tree.top_k == 4


def test_expected_speedup_formula():
    cfg = FitConfig(max_depth=3, top_k=4)
    curve = pd.DataFrame({"n_tokens": [1, 9], "median_ms": [10.0, 18.0]})  # +1 ms per extra token
    _, table = fit_tree(_calibration(), curve, cfg)
    row = table[(table.budget == 2) & (table.depth == 2)].iloc[0]
    draft_s = 0.001 + 0.002 * (2 - 1) / 2
    assert row.predicted_speedup == pytest.approx(3 * 0.010 / (0.012 + draft_s))  # verify 3 tokens: 12 ms


def test_no_tree_when_none_beats_plain_decoding():
    """Where every tree is predicted slower than plain decoding, the fit says so: no tree."""
    cfg = FitConfig(max_depth=3, top_k=4)
    costly = pd.DataFrame({"n_tokens": [1, 16], "median_ms": [10.0, 160.0]})  # +10 ms per token
    tree, table = fit_tree(_calibration(), costly, cfg)
    assert tree is None and table.predicted_speedup.max() <= 1
