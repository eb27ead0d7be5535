"""Learning curves: snapshots replayed once each (resumable), the log-linear fit and its
extrapolation, one draft's tau over another's along both axes, and drafts paired by prompt."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from test_training import CFG, data, target, tiny_folder  # noqa: F401 (fixtures)

from clover2.decoding.decode import DecodeConfig
from clover2.drafts.config import DraftConfig
from clover2.measure.acceptance import references
from clover2.research import curves
from clover2.training.train import train


def _steps(draft: str, a: float, b: float, seconds_per_token: float) -> pd.DataFrame:
    """Replay rows whose tau - 1 is exactly a + b ln(tokens seen) on every prompt."""
    rows = []
    for step, seen in ((150, 1e4), (300, 2e4), (600, 4e4), (1200, 8e4)):
        for prompt in range(5):
            n = 10 * (prompt + 1)
            rows.append({"draft": draft, "tree": "eagle25", "prompt": prompt, "task": "qa", "step": step,
                         "seen_tokens": seen, "train_seconds": seen * seconds_per_token,
                         "steps": n, "tokens": n * (1 + a + b * np.log(seen)), "first": n // 2})
    return pd.DataFrame(rows)


def test_extrapolation_recovers_an_exact_log_linear_curve():
    fit = curves.extrapolate(_steps("clover2", 0.1, 0.05, 1.0), budget=1e9)
    row = fit.iloc[0]
    assert row.slope_per_decade == pytest.approx(0.05 * np.log(10))
    assert row.tau_at_budget == pytest.approx(1.1 + 0.05 * np.log(1e9))
    assert row.tau_at_budget_lo == pytest.approx(row.tau_at_budget_hi)  # every prompt says the same
    assert row.fit_at_last == pytest.approx(row.last_tau)


def test_ratio_compares_at_equal_tokens_and_at_equal_seconds():
    """EAGLE-1 four times cheaper per token: at equal seconds it has seen four times the tokens."""
    steps = pd.concat([_steps("clover2", 0.2, 0.05, 4.0), _steps("eagle1", 0.1, 0.05, 1.0)])
    r = curves.ratio(steps)
    same_tokens = (1.2 + 0.05 * np.log(r.seen_tokens)) / (1.1 + 0.05 * np.log(r.seen_tokens))
    np.testing.assert_allclose(r.ratio_same_seen_tokens, same_tokens)
    inside = r.train_seconds <= 8e4  # EAGLE-1's measured range of seconds
    np.testing.assert_allclose(r.against_tau_same_train_seconds[inside], 1.1 + 0.05 * np.log(r.train_seconds[inside]))
    assert set(r.draft) == {"clover2"} and set(r.against) == {"eagle1"}
    assert r.ratio_same_train_seconds[~inside].isna().all()



def test_pairs_compare_drafts_at_shared_steps_with_intervals_paired_by_prompt():
    """A draft ahead on every prompt is ahead beyond noise; a copy of a draft ties with it exactly."""
    ahead, base = _steps("clover2", 0.2, 0.05, 1.0), _steps("eagle3", 0.1, 0.05, 1.0)
    copy = base.assign(draft="eagle1")
    p = curves.pairs(pd.concat([ahead, base, copy]),
                     (("clover2", "eagle3"), ("eagle1", "eagle3"), ("medusa", "eagle3")))
    assert set(p.step) == {150, 300, 600, 1200} and set(p.draft) == {"clover2", "eagle1"}  # medusa: not measured
    lead = p[p.draft == "clover2"]
    np.testing.assert_allclose(lead.ratio, lead.tau / lead.against_tau)
    assert (lead.delta_lo > 0).all() and (lead.ratio > 1).all()
    tie = p[p.draft == "eagle1"]
    assert (tie.ratio == 1).all() and (tie.delta_lo == 0).all() and (tie.delta_hi == 0).all()

def test_snapshots_are_replayed_once_and_resume(target, data, tmp_path):  # noqa: F811
    run = tmp_path / "run"
    train(target, data, run, DraftConfig.for_arch("eagle1", num_heads=2), replace(CFG, max_steps=4, snapshots=(2, 4)))
    prompts = [("qa", [3, 5, 7, 9]), ("gsm8k", [4, 4, 8])]
    refs = references(target, prompts, DecodeConfig(max_new_tokens=6), cache=tmp_path / "refs.pt")
    assert references(target, prompts, DecodeConfig(max_new_tokens=6), cache=tmp_path / "refs.pt")[0].ids == refs[0].ids
    out = tmp_path / "steps.csv"
    first = curves.measure(target, {"eagle1": run}, prompts, refs, out, trees=("chain1",))
    assert sorted(set(first.step)) == [2, 4] and len(first) == 4 and (first.tokens >= first.steps).all()
    again = curves.measure(target, {"eagle1": run}, prompts, refs, out, trees=("chain1",))
    pd.testing.assert_frame_equal(again, pd.read_csv(out))
    assert len(again) == 4
    taus = curves.tau_by_snapshot(again, "chain1")
    assert list(taus.step) == [2, 4] and (taus.first_accepted == taus.tau - 1).all()  # one node: accept 0 or 1
    ev = curves.evaluations({"eagle1": run})
    assert set(ev.category) == {"sharegpt"} and list(ev.step) == [2, 4]


def test_prediction_sets_the_held_out_measure_beside_both_acceptances():
    evals = pd.DataFrame([{"draft": "clover2", "step": 150, "category": c, "head0_top1": v}
                          for c, v in (("qa", 0.30), ("rag", 0.20), ("sharegpt", 0.25))])
    def steps(first: dict) -> pd.DataFrame:
        return pd.DataFrame([{"draft": "clover2", "step": 150, "tree": "chain1", "prompt": p, "task": t,
                              "first": f, "steps": 10, "tokens": 10 + f} for p, (t, f) in enumerate(first.items())])
    out = curves.prediction(evals, steps({"qa": 3, "rag": 1}), steps({"qa": 2, "rag": 2})).set_index("task")
    assert list(out.index) == ["qa", "rag"]  # ShareGPT prompts are not benchmarked
    assert out.loc["qa", "dev_accepted"] == 0.3 and out.loc["qa", "bench_accepted"] == 0.2
    assert out.loc["qa", "error"] == pytest.approx(0.1) and out.loc["rag", "error"] == pytest.approx(0.0)
