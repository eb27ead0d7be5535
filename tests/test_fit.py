"""Fitting the tree to the hardware: the counterfactual acceptance, the choice of the draft's tree
and of the copy sources' budgets in a union, and a calibration sample drawn evenly from the tasks."""

from __future__ import annotations

from collections import Counter

import pandas as pd
import pytest
import torch
from conftest import tiny_target

from clover2.decoding.decode import DecodeConfig, generate
from clover2.decoding.drafter import Recording
from clover2.decoding.prompts import PromptRecord
from clover2.decoding.suffix import SuffixCache
from clover2.decoding.union import Union, copy_drafters
from clover2.drafts import build_draft
from clover2.drafts.config import DraftConfig
from clover2.drafts.drafter import DynamicTree, ModelDrafter
from clover2.measure.fit import FitConfig, Fitted, _node_outcomes, calibration_records, fit

REPEATING = [5, 6, 7, 8, 9, 10, 5, 6, 7, 8, 9, 10, 5, 6, 7]  # gives the copy drafters something to copy


@pytest.mark.parametrize("arch", ["clover2", "eagle1", "medusa"])
def test_node_outcomes_reproduce_the_accepted_lengths_of_the_run(arch):
    """In the calibration run itself every candidate of every source is in the tree, so the nodes
    marked accepted per step must be exactly the draft tokens that step committed."""
    t = tiny_target("llama")
    torch.manual_seed(0)
    model = build_draft(DraftConfig.for_arch(arch, num_heads=3), t).eval()
    suffix = SuffixCache()
    generate(t, suffix.drafter(), REPEATING, DecodeConfig(max_new_tokens=40))  # the suffix cache has this answer
    union = Union(copy_drafters(suffix) | {"model": ModelDrafter(model, DynamicTree(budget=24, depth=3, top_k=8))},
                  calibrating=True)
    rec = Recording(union)
    gen = generate(t, rec, REPEATING, DecodeConfig(max_new_tokens=40))
    nodes = pd.DataFrame(_node_outcomes(0, rec.drafts, union.ranks, gen.step_ids, gen.accept_lengths))
    accepted = nodes.groupby("step").accepted.sum().reindex(range(len(gen.steps)), fill_value=0).tolist()
    drafted = [n - 1 for n in gen.accept_lengths]
    assert accepted[:-1] == drafted[:-1] and accepted[-1] >= drafted[-1]  # the last step may be cut by the cap
    assert sum(drafted) > 0  # the check is not vacuous
    assert nodes.rank_suffix.notna().sum() > 0 and nodes.rank_model.notna().sum() > 0  # both sources merged
    assert (nodes.reindex(columns=["rank_model", "rank_suffix", "rank_pld"]).notna().sum(axis=1) >= 1).all()


def _calibration(steps: int = 4, copy: bool = False):
    """Every step: draft candidates where the two best are accepted, the rest not; with `copy`, a
    copy source whose first node is the (already accepted) best and whose second is a third accepted
    token the draft never proposes."""
    rows = [{"prompt": 0, "step": s, "depth": d, "accepted": r < 2, "rank_model": float(r)}
            for s in range(steps) for r, d in enumerate([1, 2, 1, 3, 2, 3, 1, 2])]
    if copy:
        for s in range(steps):
            rows[s * 8] |= {"rank_pld": 0.0}
            rows.append({"prompt": 0, "step": s, "depth": 3, "accepted": True, "rank_pld": 1.0})
    return {"nodes": pd.DataFrame(rows), "steps": steps, "draft_s": {1: 0.001, 3: 0.003},
            "copy_s": {"suffix": 0.0, "pld": 0.0}}


def test_flat_cost_picks_a_big_tree_and_steep_cost_a_small_one():
    cfg = FitConfig(max_depth=3, top_k=4)
    flat = pd.DataFrame({"n_tokens": [1, 16], "median_ms": [10.0, 10.0]})
    steep = pd.DataFrame({"n_tokens": [1, 16], "median_ms": [10.0, 85.0]})  # +5 ms per token
    chosen, table = fit(_calibration(), flat, cfg)
    best = table.loc[table.predicted_speedup.idxmax()]
    assert best.tau == 3 and chosen.tree.budget >= 2 and chosen.tree.depth >= 2  # both accepted nodes are inside
    assert table[(table.budget == 1) & (table.depth == 3)].tau.item() == 2
    small, _ = fit(_calibration(), steep, cfg)
    assert (small.tree.budget, small.tree.depth) == (2, 2)  # the two accepted nodes and nothing more
    assert isinstance(chosen.tree, DynamicTree) and chosen.tree.top_k == 4 and chosen.copy == ()


def test_expected_speedup_formula():
    cfg = FitConfig(max_depth=3, top_k=4)
    curve = pd.DataFrame({"n_tokens": [1, 9], "median_ms": [10.0, 18.0]})  # +1 ms per extra token
    _, table = fit(_calibration(), curve, cfg)
    row = table[(table.budget == 2) & (table.depth == 2)].iloc[0]
    draft_s = 0.001 + 0.002 * (2 - 1) / 2
    assert row.predicted_speedup == pytest.approx(3 * 0.010 / (0.012 + draft_s))  # verify 3 tokens: 12 ms


def test_no_tree_when_none_beats_plain_decoding():
    """Where every tree is predicted slower than plain decoding, the fit says so: nothing."""
    cfg = FitConfig(max_depth=3, top_k=4)
    costly = pd.DataFrame({"n_tokens": [1, 16], "median_ms": [10.0, 160.0]})  # +10 ms per token
    chosen, table = fit(_calibration(), costly, cfg)
    assert chosen is None and table.predicted_speedup.max() <= 1


def test_the_union_fit_adds_the_copy_nodes_that_pay_and_counts_a_shared_node_once():
    cfg = FitConfig(max_depth=3, top_k=4)
    curve = pd.DataFrame({"n_tokens": [1, 16], "median_ms": [10.0, 25.0]})  # +1 ms per token
    alone, table_alone = fit(_calibration(copy=True), curve, cfg)  # without `copy`: the copy nodes are ignored
    assert alone.copy == () and table_alone.tau.max() == 3
    union, table = fit(_calibration(copy=True), curve, cfg, copy=True)
    assert union.copy == (("pld", 2),) and union.tree.budget == 2  # the copy source's two nodes, one of them shared
    best = table.loc[table.predicted_speedup.idxmax()]
    assert best.tau == 4 and best.pld_budget == 2 and best.suffix_budget == 0  # three accepted nodes + the bonus
    shared = table[(table.budget == 2) & (table.depth == 2) & (table.pld_budget == 1) & (table.suffix_budget == 0)]
    assert shared.tau.item() == 3 and shared.verify_ms.item() == pytest.approx(12.0)  # 3 tokens, not 4
    copy_only = table[(table.budget == 0) & (table.pld_budget == 2) & (table.suffix_budget == 0)]
    assert copy_only.tau.item() == 3 and copy_only.draft_ms.item() == 0  # no draft run, no draft time
    assert Fitted(None, (("pld", 2),), 1.2).record() == {"budget": 0, "depth": 0, "pld_budget": 2,
                                                         "predicted_speedup": 1.2}


def test_calibration_prompts_are_drawn_evenly_from_the_tasks_never_from_the_benchmarks():
    tasks = [[PromptRecord(f"{name}{i}", ("x",), name) for i in range(size)]
             for name, size in (("rag", 358), ("translation", 210), ("qa", 5), ("gsm8k", 1))]
    chosen = [tasks[2][0], tasks[3][0]]  # the benchmark's own: gsm8k has nothing left
    picks = calibration_records(tasks, chosen, 7, seed=0)
    assert not set(picks) & set(chosen) and len(set(picks)) == 7
    assert Counter(r.category for r in picks) == {"rag": 3, "translation": 2, "qa": 2}
    assert calibration_records(tasks, chosen, 7, seed=0) == picks  # seeded
    assert len(calibration_records(tasks, chosen, 10_000, seed=1)) == 358 + 210 + 4  # every record left, once
