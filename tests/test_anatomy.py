"""The architecture notebook's helpers on a tiny target: parameter table, traced step, component costs."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pytest
import torch
from conftest import tiny_target

from clover2.decoding.decode import DecodeConfig, generate
from clover2.decoding.drafter import NoDrafter
from clover2.drafts import build_draft
from clover2.drafts.config import DraftConfig
from clover2.research.anatomy import component_costs, draw_tree, parameter_table, trace_step


@pytest.fixture(scope="module")
def parts():
    t = tiny_target("llama")
    torch.manual_seed(0)
    return t, build_draft(DraftConfig.for_arch("clover2", num_heads=3), t).eval()


def test_parameter_table_separates_trained_from_borrowed(parts):
    t, model = parts
    table = parameter_table(model, t).set_index("component")
    assert not table.loc["lm_head"].trained and table.loc["block"].trained
    assert table.parameters.sum() == sum(p.numel() for p in model.parameters())


def test_traced_step_accepts_a_path_that_matches_plain_decoding(parts):
    t, model = parts
    prompt = [5, 6, 7, 8, 9, 10]
    trace = trace_step(t, model, prompt, step=3)
    path = trace["accepted"]
    assert path[0] == 0 and all(trace["parents"][b] == a for a, b in zip(path, path[1:]))
    plain = generate(t, NoDrafter(), prompt, DecodeConfig(max_new_tokens=40)).output_ids
    assert t.decode([]) == "" and trace["committed"] in t.decode(plain)
    draw_tree(trace)


def test_component_costs_are_positive_and_relative_to_a_target_step(parts):
    t, model = parts
    costs = component_costs(t, model, list(range(3, 30)), repeats=2)
    assert costs.share_of_target_step.iloc[0] == 1 and (costs.ms > 0).all()
    assert costs.part.str.contains("whole step").any()
