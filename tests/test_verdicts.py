"""The designed study's statistics: two-level intervals, Holm, the protocol's decision rules, power and fits."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from clover2.errors import Clover2Error
from clover2.research.design import Arm, DesignConfig, SpeedConfig
from clover2.research.verdicts import (
    bootstrap,
    cells,
    curve_fits,
    holm,
    log_linear,
    power,
    power_law,
    primary_verdict,
    spread,
    verdicts,
)

DESIGN = DesignConfig(arms={"c2": Arm("clover2", lrs=(1e-3,), seeds=5), "e1": Arm("eagle1", lrs=(1e-3,), seeds=5),
                            "m": Arm("medusa", lrs=(1e-3,), seeds=3, tier=2)},
                      reference="e1", primary=("c2",), budgets=(300, 600), extend_edge=0, n_boot=2000)
DEV = {(a, 1e-3): 1.5 for a in DESIGN.arms}


def replays(taus: dict[str, float], *, seeds: dict[str, int], prompts: int = 131, seed_sd: float = 0.02,
            budgets=(300, 600), rng_seed: int = 0) -> pd.DataFrame:
    """Synthetic replays: each arm's seeds scatter around its tau; each prompt has its own difficulty,
    shared by every arm (so that pairing by prompt matters)."""
    rng = np.random.default_rng(rng_seed)
    difficulty = rng.normal(0, 0.25, prompts)
    rows = []
    for arm, tau in taus.items():
        for s in range(seeds[arm]):
            shift = rng.normal(0, seed_sd)
            for budget in budgets:
                for p in range(prompts):
                    steps = 40
                    tokens = round(steps * max(1.0, tau + shift + difficulty[p] + rng.normal(0, 0.05)))
                    rows.append({"run": f"{arm}/s{s}/b{budget}", "arm": arm, "lr": 1e-3, "seed": s, "budget": budget,
                                 "share": 1.0, "tree": "eagle25", "prompt": p, "task": "qa", "tokens": tokens,
                                 "steps": steps})
    return pd.DataFrame(rows)


def test_holm_adjusts_like_the_textbook():
    np.testing.assert_allclose(holm([0.01, 0.04, 0.03, 0.005]), [0.03, 0.06, 0.06, 0.02])
    assert holm([0.5]).tolist() == [0.5]


@pytest.mark.parametrize("lo, hi, verdict", [(1.01, 1.06, "reproduced"), (0.90, 0.99, "rival ahead"),
                                              (0.98, 1.02, "equivalent within 3%"),
                                              (0.975, 1.005, "smallest gain excluded"),
                                              (0.96, 1.05, "inconclusive")])
def test_the_primary_decision_rule_follows_the_protocol(lo, hi, verdict):
    assert verdict in primary_verdict(lo, hi, 0.03, 0.01)


def test_a_bound_at_one_within_resampling_error_gives_both_readings_of_the_rule():
    from clover2.research.verdicts import reason

    claimed = 0.03, 0.01, 0.05  # the margin, the paper's smallest and largest claimed gains
    assert reason(0.974, 0.995, *claimed) == "the rival ahead"
    assert reason(0.974, 0.995, *claimed, rival="EAGLE-1") == "EAGLE-1 ahead"  # the rival named where known
    assert reason(0.974, 0.9997, *claimed) == ("the rival ahead (its upper bound lies within the bootstrap's "
                                               "resampling error of 1: had it fallen just above 1, the rule would "
                                               "read equivalent within 3%, the paper's smallest gain excluded)")
    assert reason(0.974, 1.0003, *claimed, rival="EAGLE-1") == (
        "equivalent within 3%, the paper's smallest gain excluded (its upper bound lies within the bootstrap's "
        "resampling error of 1: had it fallen just below 1, the rule would read EAGLE-1 ahead)")
    assert reason(1.0004, 1.04, *claimed) == ("Clover-2 ahead (its lower bound lies within the bootstrap's "
                                              "resampling error of 1: had it fallen just below 1, the rule would "
                                              "read inconclusive at this power)")
    assert reason(1.0004, 1.02, *claimed).startswith("Clover-2 ahead (its lower bound")
    assert reason(1.0004, 1.02, *claimed).endswith("the rule would read equivalent within 3%)")


def test_clover2_ahead_says_where_its_interval_lies_against_the_papers_claimed_gains():
    from clover2.research.verdicts import reason

    assert reason(1.020, 1.045, 0.03, 0.01, 0.05) == "Clover-2 ahead, the interval inside the paper's 1-5%"
    assert reason(1.005, 1.03, 0.03, 0.01, 0.05) == "Clover-2 ahead, the interval overlapping the paper's 1-5%"
    assert reason(1.06, 1.09, 0.03, 0.01, 0.05) == "Clover-2 ahead, the interval above the paper's 1-5%"
    assert reason(1.002, 1.008, 0.03, 0.01, 0.05) == "Clover-2 ahead, the interval below the paper's 1-5%"


def test_an_interval_shows_which_side_of_one_a_bound_lies():
    from clover2.research.report import bracket

    assert bracket(0.9737, 0.99974) == "[0.974, 0.9997]" and bracket(1.0003, 1.05) == "[1.0003, 1.050]"
    assert bracket(0.98, 1.0) == "[0.980, 1.000]" and bracket(0.96, 1.02) == "[0.960, 1.020]"


def test_a_clear_lead_is_reproduced_and_the_rivals_are_corrected_within_their_family():
    table = cells(replays({"c2": 1.9, "e1": 1.8, "m": 1.6}, seeds={"c2": 5, "e1": 5, "m": 3}), DESIGN, DEV)
    out = verdicts(DESIGN, table).set_index("comparison")
    primary = out.loc["c2 / e1"]
    assert (primary.family == "primary" and primary.level == 0.95  # one primary: 95%
            and primary.verdict.startswith("reproduced"))
    assert primary.lo < 1.9 / 1.8 < primary.hi and primary.seeds == "5 vs 5" and primary.prompts == 131
    assert out.loc["c2 / m"].verdict == "ahead" and out.loc["c2 / m"].p_adjusted >= out.loc["c2 / m"].p
    assert out.loc["c2 / e1: 600 steps over 300"].verdict == "no difference shown"  # the same gap at both budgets


def test_equal_drafts_give_an_interval_around_one_that_is_not_a_lead():
    table = cells(replays({"c2": 1.8, "e1": 1.8, "m": 1.8}, seeds={"c2": 5, "e1": 5, "m": 3}, seed_sd=0.005),
                  DESIGN, DEV)
    primary = verdicts(DESIGN, table).set_index("comparison").loc["c2 / e1"]
    assert primary.lo < 1 < primary.hi and not primary.verdict.startswith("reproduced")


def test_seed_noise_widens_the_interval_beyond_the_prompts_alone():
    quiet = cells(replays({"c2": 1.8, "e1": 1.8}, seeds={"c2": 5, "e1": 5}, seed_sd=0.0), DESIGN, DEV)
    noisy = cells(replays({"c2": 1.8, "e1": 1.8}, seeds={"c2": 5, "e1": 5}, seed_sd=0.08), DESIGN, DEV)
    width = lambda t: np.subtract(*np.quantile(bootstrap(t, 2000)[("c2", 600, 1.0, "eagle25")] /  # noqa: E731
                                                bootstrap(t, 2000)[("e1", 600, 1.0, "eagle25")], [0.975, 0.025]))
    assert width(noisy) > 2 * width(quiet)
    s = spread(noisy).set_index(["arm", "budget"]).loc[("c2", 600)]
    assert s.seeds == 5 and 0.02 < s.seed_sd < 0.2 and s.prompt_half_width > 0
    p = power(noisy, "c2", "e1", budget=600, level=0.975, target_half_width=0.025)
    assert p["seeds"] == 5 and p["half_width"] > 0.025 and (p["seeds_for_target"] or 101) > 5


def test_an_interval_depends_only_on_its_own_arms_whatever_else_the_study_holds():
    design = DesignConfig(**{**DESIGN.__dict__, "arms": DESIGN.arms | {"b": Arm("medusa", lrs=(1e-3,), tier=2)}})
    dev = DEV | {("b", 1e-3): 1.5}
    base = replays({"c2": 1.8, "e1": 1.75}, seeds={"c2": 5, "e1": 5})
    # an unrelated arm, with seeds (its name first in any sorted order of the arms)
    more = pd.concat([base, replays({"b": 1.5}, seeds={"b": 3}, rng_seed=1)])
    primary = lambda r: verdicts(design, cells(r, design, dev)).set_index("comparison").loc[  # noqa: E731
        "c2 / e1", ["ratio", "lo", "hi", "p"]]
    assert primary(base).equals(primary(more))
    before, after = bootstrap(cells(base, design, dev), 500), bootstrap(cells(more, design, dev), 500)
    assert all(np.array_equal(before[k], after[k]) for k in before)
    # the arm's own draws do move with its own seeds, and with the bootstrap's seed
    fewer = base[~((base.arm == "c2") & (base.seed == 4))]
    key = ("c2", 600, 1.0, "eagle25")
    assert not np.array_equal(bootstrap(cells(fewer, DESIGN, DEV), 500)[key], before[key])
    assert not np.array_equal(bootstrap(cells(base, DESIGN, DEV), 500, seed=1)[key], before[key])


def test_fits_above_the_trees_largest_tau_are_left_out_of_the_range():
    tokens = np.array([3e5, 6e5, 1.2e6])
    points = pd.DataFrame({"arm": "c2", "tokens": tokens, "tau": 1 + 0.001 * tokens ** 0.5})  # tau - 1 grows fast
    free, capped = curve_fits(points, at=1.18e9).iloc[0], curve_fits(points, at=1.18e9, ceiling=6).iloc[0]
    assert free.at_budget_power_law > 6 and free.above_ceiling == 0
    assert np.isinf(capped.at_budget_power_law) and capped.above_ceiling == 1 and capped.range_hi <= 6


def test_the_extra_tokens_ratio_and_the_per_task_ratios_sit_beside_each_comparison():
    from clover2.research.verdicts import per_task

    r = replays({"c2": 1.8, "e1": 1.6, "m": 1.5}, seeds={"c2": 5, "e1": 5, "m": 3}, seed_sd=0.005)
    r["task"] = np.where(r.prompt % 2 == 0, "qa", "gsm8k")
    v = verdicts(DESIGN, cells(r, DESIGN, DEV)).set_index("comparison")
    row = v.loc["c2 / e1"]  # (tau_a - 1) / (tau_b - 1) is further from 1 than tau_a / tau_b
    assert row.excess_ratio > row.ratio > 1 and row.excess_lo < row.excess_ratio < row.excess_hi
    assert np.isnan(v.loc[v.family == "budget", "excess_ratio"]).all()  # a ratio of ratios has none
    # a budget comparison says which way training moves the ratio, not "ahead" (which reads as c2 ahead of e1)
    assert set(v.loc[v.family == "budget", "verdict"]) <= {"moves toward c2", "moves toward e1", "no difference shown"}
    from clover2.research.verdicts import secondary_verdict, verdict_words

    words = verdict_words("budget", "c2 / e1: 600 steps over 300")
    assert [secondary_verdict(ratio, p, words=words) for ratio, p in ((1.1, 0.01), (0.9, 0.01), (1.1, 0.2))] == \
        ["moves toward c2", "moves toward e1", "no difference shown"]
    tasks = per_task(DESIGN, r, DEV)
    assert set(tasks.task) == {"qa", "gsm8k"} and set(tasks.prompts) == {66, 65}
    assert not tasks[tasks.comparison.str.contains(" over ")].shape[0]
    primary = tasks[tasks.comparison == "c2 / e1"]
    assert (primary.lo < primary.ratio).all() and (primary.paper > 1).all()  # the paper's ratio for the task
    assert tasks[tasks.comparison == "c2 / m"].paper.isna().all()  # the paper publishes none against Medusa


def test_a_replay_missing_a_prompt_is_refused():
    r = replays({"c2": 1.8, "e1": 1.8}, seeds={"c2": 2, "e1": 2}, prompts=5)
    with pytest.raises(Clover2Error, match="every prompt"):
        cells(r.drop(index=r.index[(r.arm == "c2") & (r.seed == 1) & (r.prompt == 3)]), DESIGN, DEV)


def test_curve_fits_recover_a_log_linear_law_and_a_power_law_and_give_a_range():
    tokens = np.array([3e5, 6e5, 1.2e6, 2.4e6])
    points = pd.DataFrame({"arm": "c2", "tokens": tokens, "tau": log_linear(tokens, -1.5, 0.15)})
    fit = curve_fits(points, at=1.18e9).iloc[0]
    assert fit.at_budget_log_linear == pytest.approx(log_linear(1.18e9, -1.5, 0.15))
    assert fit.range_lo <= fit.at_budget_log_linear <= fit.range_hi and fit.points == 4
    assert fit.range_hi > fit.range_lo  # the forms disagree far beyond the points: a range, not a number
    # tau - 1 gaining 7% a doubling (EAGLE-3's data scaling): the power law finds it exactly
    power = pd.DataFrame({"arm": "e", "tokens": tokens[:3], "tau": power_law(tokens[:3], 1e-3, np.log2(1.07))})
    fit = curve_fits(power, at=1.18e9).iloc[0]
    assert fit.relative_slope_per_doubling == pytest.approx(0.07)
    assert fit.at_budget_power_law == pytest.approx(power_law(1.18e9, 1e-3, np.log2(1.07)))
    assert fit.points == 3 and "at_budget_saturating" not in fit.index  # three parameters need a fourth point
    assert curve_fits(power.iloc[:2], at=1.18e9).empty  # two points are no fit


def test_the_pages_tables_show_rates_and_counts_as_a_reader_writes_them():
    from clover2.research.verdicts import markdown

    text = markdown(pd.DataFrame({"lr": [3e-4, 1e-3], "tokens": [635066.0, 1.0], "tau": [1.23456, float("nan")]}))
    assert "| 0.0003 | 635066 | 1.235 |" in text and "| 0.001 | 1 |  |" in text


def test_a_comparison_waits_for_its_planned_seeds_before_the_rule_decides():
    """Seed 0 alone shows a ratio and an interval, but the protocol's rule decides only when both arms have
    every planned seed: a clear lead on one seed each is not yet a verdict, on the page or the front page."""
    from clover2.research.claims import _study_status
    from clover2.research.verdicts import WAITS, readable

    table = cells(replays({"c2": 1.9, "e1": 1.8, "m": 1.6}, seeds={"c2": 1, "e1": 5, "m": 3}), DESIGN, DEV)
    out = verdicts(DESIGN, table).set_index("comparison")
    assert out.loc["c2 / e1"].verdict == WAITS and out.loc["c2 / e1"].seeds == "1 vs 5"
    assert out.loc["c2 / e1"].lo > 1  # the interval is there; the verdict is not
    assert _study_status(WAITS) == "not decided yet"
    shown = readable("verdicts", out.reset_index())
    assert shown.loc[0, "verdict"] == WAITS and shown.loc[0, "tau ratio [interval]"].count("[") == 1
    dynamic = readable("verdicts", out.reset_index().assign(tree="dynamic:60:5:10"))
    assert dynamic.comparison.str.endswith(", 60-node dynamic tree").all() and "tree" not in dynamic


def test_the_results_page_shows_one_row_per_arm():
    """The grids, the taus and the curve as one row per arm (a column per rate, or per budget and tree), so
    that the page stays short as arms land; the chosen rate stands out, and each cell keeps its spreads."""
    from clover2.research.verdicts import readable

    grid = pd.DataFrame({"arm": ["a", "a", "b"], "lr": [1e-3, 3e-3, 1e-3], "dev": [1.4, 1.5, 1.3],
                         "tokens": 1, "epochs": 1.0, "chosen": [False, True, True]})
    shown = readable("grid", grid).set_index("arm")
    assert list(shown.columns) == ["1e-3", "3e-3"] and shown.loc["a", "3e-3"] == "**1.500**"
    assert shown.loc["b", "3e-3"] == ""
    from clover2.research.verdicts import rate

    assert [rate(x) for x in (0.0052, 0.00033, 0.027, 1e-3)] == ["5.2e-3", "3.3e-4", "2.7e-2", "1e-3"]
    spread_ = pd.DataFrame({"arm": ["a", "a", "a"], "budget": [600, 300, 600], "share": 1.0,
                            "tree": ["dynamic:60:5:10", "eagle25", "eagle25"], "seeds": [5, 5, 5],
                            "tau": [1.9, 1.5, 1.7], "seed_sd": [0.02, 0.03, np.nan], "prompt_half_width": 0.05})
    shown = readable("spread", spread_)
    assert list(shown.columns) == ["arm", "seeds", "300 steps", "600 steps", "600 steps, 60-node dynamic tree"]
    assert shown.loc[0, "300 steps"] == "1.500 (0.030, ±0.050)" and shown.loc[0, "600 steps"] == "1.700 (±0.050)"


def test_the_page_says_when_a_chosen_rate_is_still_at_the_edge_of_its_extended_grid():
    from clover2.research.verdicts import _still_at_edge

    grid = pd.DataFrame({"arm": ["c2"] * 3 + ["e1"] * 2, "lr": [1e-3, 3e-3, 9e-3, 1e-3, 3e-3],
                         "dev": [1.4, 1.5, 1.6, 1.5, 1.4], "chosen": [False, False, True, True, False]})
    design = DesignConfig(arms={"c2": Arm("clover2", lrs=(1e-3, 3e-3)), "e1": Arm("eagle1", lrs=(1e-3, 3e-3))},
                          reference="e1", primary=("c2",))
    assert "edge after extending: c2; the protocol extends once" in _still_at_edge(design, grid)  # not e1
    assert _still_at_edge(design, grid.assign(chosen=[False, True, False, True, False])) == ""
    # an arm at another arm's rate has one row and no grid of its own: never at an edge
    part = pd.DataFrame({"arm": ["np"], "lr": [9e-3], "dev": [1.5], "chosen": [True]})
    design = replace(design, arms=design.arms | {"np": Arm("clover2", lr_from="c2", tier=3)}, extend_edge=6)
    assert "c2; the protocol extends up to 6 times" in _still_at_edge(design, pd.concat([grid, part]))
    assert "np" not in _still_at_edge(design, pd.concat([grid, part]))


def test_the_page_gives_the_primary_pair_in_words_and_the_rest_in_one_table():
    from clover2.research.verdicts import analyze, page

    rep = replays({"c2": 1.9, "e1": 1.8, "m": 1.6}, seeds={"c2": 5, "e1": 5, "m": 3})
    runs = rep.groupby("run").first().reset_index()[["run", "arm", "lr", "seed", "budget", "share"]].assign(
        dev=1.5, tokens=1000, epochs=1.0)
    tables = analyze(DESIGN, runs, rep, DEV)
    status = runs.assign(state="done", steps=600.0)
    text = page(DESIGN, tables, status, machine="cpu", commits="abc")
    primary, rest = text.split("## The secondary comparisons")
    assert "- **c2 / e1**" in primary and "| primary |" not in rest and "| architectures | c2 / m |" in rest
    assert "| architectures | c2 / m | 1." in rest and "Every planned run is done (" in text
    power = text.split("## Power of the primary comparisons")[1].split("##")[0]
    assert "| comparison | seed SD of the difference |" in power and "seed_sd" not in power
    assert "(the fewer of the two arms': 5 per arm)" in power  # one count for every row: said once
    assert "| c2 / e1 | 0." in power and "±" in power
    half = tables["power"].half_width.iloc[0]  # the rule for adding seeds, applied at the planned five
    assert f"With 5 seeds per arm the predicted half-width (±{half:.1%}) is within" in power
    assert ("no seeds are added" in power) == (half <= 0.025)
    assert "edge of its extended grid" not in primary
    grid = pd.DataFrame({"arm": ["c2", "c2", "e1"], "lr": [1e-3, 3e-3, 1e-3], "dev": [1.4, 1.5, 1.5],
                         "chosen": [False, True, True]})  # c2's grid extended once, its best rate still the top
    text = page(DESIGN, {**tables, "grid": grid}, status, machine="cpu", commits="abc")
    assert "The learning rate chosen for c2 is at the edge" in text.split("## The secondary comparisons")[0]
    assert "Still at the edge" not in text  # said once, above
    fits = pd.DataFrame({"arm": ["c2"], "points": [3], "at_budget_log_linear": [3.0], "at_budget_power_law": [4.0],
                         "range_lo": [3.0], "range_hi": [4.0], "above_ceiling": [0], "ceiling": [6.0],
                         "relative_slope_per_doubling": [0.2]})
    data = pd.DataFrame({"arm": ["c2"], "twice the steps": [1.1], "twice the unique data": [1.01]})
    text = page(DESIGN, {**tables, "fits": fits, "data": data}, status, machine="cpu", commits="abc")
    assert "## Data or repetition" not in text  # one table: the fits with the data ratios beside them
    assert "| c2 | 3 | 3.00 | 4.00 | +20% | 1.100 | 1.010 |" in text.split("## tau at the paper's budget")[1]
    assert "(from four points; each curve here has 3) a saturating one" in text
    assert "| tau at 1.18B tokens, log-linear | tau at 1.18B tokens, power law |" in text  # one column a form
    capped = fits.assign(at_budget_power_law=[np.inf], range_hi=[3.0], above_ceiling=[1])  # read above the tree's most
    text = page(DESIGN, {**tables, "fits": capped}, status, machine="cpu", commits="abc")
    assert "| c2 | 3 | 3.00 | above 6 |" in text and "above the tree's largest tau (6) is no value" in text
    unfitted = fits.assign(at_budget_power_law=[np.nan])  # a form that could not be fitted: no value, not "above"
    assert "| c2 | 3 | 3.00 |  |" in page(DESIGN, {**tables, "fits": unfitted}, status, machine="cpu", commits="abc")
    assert "## Data or repetition" in page(DESIGN, {**tables, "data": data}, status, machine="cpu", commits="abc")
    drawn = page(DESIGN, tables, status, machine="cpu", commits="abc", figures={"verdicts": "figures/forest.png"})
    assert "```{figure} figures/forest.png\n:name: study-forest" in drawn and "rules from before it" not in drawn
    assert drawn.index("## Findings") < drawn.index("{figure} figures/forest.png") < drawn.index(
        "## The secondary comparisons") < drawn.index("## How and where it ran")  # findings, figures, tables, then how
    assert "by the protocol's rules from before it" in page(DESIGN, tables, status, machine="cpu", commits="abc",
                                                            amended=False)
    check = pd.DataFrame({"arm": ["c2", "e1"], "tree": ["eagle25"] * 2, "committed_tau": [1.7, 1.6],
                          "published_tau": [1.7, 1.6], "difference": [0.0, 0.0], "cpu": ["X"] * 2,
                          "date": ["2026-12-05"] * 2})
    shown = page(DESIGN, {**tables, "published": check}, status, machine="cpu", commits="abc")
    assert "Replayed on X, 2026-12-05." in shown and "replayed on |" not in shown  # said once, not per row
    shown = page(DESIGN, {**tables, "published": check.assign(cpu=["X", "Y"])}, status, machine="cpu", commits="abc")
    assert "| replayed on |" in shown and "Replayed on" not in shown


def test_machine_time_counts_each_runs_own_steps_once():
    from clover2.research.verdicts import machine_text, machine_time

    runs = pd.DataFrame({"run": ["a/b600", "a/b300", "b/b600", "b/b300"], "cpu": ["X", "X", "Y", "Y"],
                         "budget": [600, 300, 600, 300], "train_seconds": [3600.0, 1800.0, 7200.0, 4000.0],
                         "own_seconds": [np.nan, np.nan, 7200.0, 400.0]})  # X's rows predate own_seconds
    sittings = pd.DataFrame({"cpu": ["Y", "Y"], "seconds": [3600, 5400]})
    table = machine_time(runs, sittings, main=600).set_index("cpu")
    assert table.loc["X", "training_hours"] == pytest.approx(1 + 0.2 * 0.5)  # the branch's last fifth
    assert table.loc["Y", "training_hours"] == pytest.approx(2 + 400 / 3600)
    assert table.loc["Y", "sittings"] == 2 and table.loc["Y", "sitting_hours"] == pytest.approx(2.5)
    assert np.isnan(table.loc["X", "sitting_hours"])
    text = machine_text(table.reset_index())
    assert text == ("X, 2 runs trained in 1.1 hours; Y, 2 runs trained in 2.1 hours, 2.5 hours in the 2 stretches of "
                    "`clover2 study run` logged")
    only_timed = machine_time(runs, pd.concat([sittings, pd.DataFrame({"cpu": ["Z"], "seconds": [1800]})]), main=600)
    assert machine_text(only_timed).endswith("; Z, no runs trained, 0.5 hours in the 1 stretch of `clover2 study run` "
                                             "logged")


def test_the_results_page_leaves_out_tables_with_nothing_in_them():
    from clover2.research.verdicts import page

    status = pd.DataFrame({"run": ["c2/a", "e1/b"], "arm": ["c2", "e1"], "state": ["done", "to do"],
                           "steps": [10.0, 10.0]})
    tables = {"grid": pd.DataFrame({"arm": ["c2"], "lr": [1e-3], "dev": [1.5], "chosen": [True]}),
              "fits": pd.DataFrame(), "data": pd.DataFrame()}
    text = page(DESIGN, tables, status, machine="a CPU", commits="abc")
    assert "## Learning-rate grids" in text and "**1.500**" in text
    assert "tau at the paper's budget" not in text and "Data or repetition" not in text and "nothing yet" not in text
    assert "1 run (0 of them wait for their arm's learning rate)" in text
    assert "files behind this page" not in text  # none given: no section
    served = page(DESIGN, tables, status, machine="a CPU", commits="abc",
                  downloads=["runs.csv", "verdicts.csv", "drafts/c2/draft.json", "drafts/c2/draft.safetensors"])
    assert "- **tables**: {download}`runs.csv <runs.csv>`, {download}`verdicts.csv <verdicts.csv>`" in served
    assert "- **drafts/c2**: {download}`draft.json <drafts/c2/draft.json>`, " in served  # the book serves each file


def test_the_published_drafts_check_says_where_and_when_it_replayed():
    from clover2.research.verdicts import readable

    check = pd.DataFrame({"arm": ["c2"], "tree": ["eagle25"], "committed_tau": [1.7], "published_tau": [1.7],
                          "difference": [0.0], "cpu": ["AMD EPYC Zen (AVX2)"], "date": ["2026-12-04"]})
    shown = readable("published", check)
    assert shown["replayed on"].tolist() == ["AMD EPYC Zen (AVX2), 2026-12-04"] and "cpu" not in shown


def test_the_pair_speed_section_names_each_draft_its_ratio_to_the_reference_and_the_machine():
    from clover2.research.verdicts import page, readable, speed_table

    methods = ["ar", "clover2@eagle25=results/study/drafts/c2", "eagle1@eagle25=results/study/drafts/e1"]
    bench = pd.DataFrame({"method": methods * 2, "task": ["overall"] * 3 + ["qa"] * 3, "temperature": 0.0,
                          "tau": [1.0, 1.7, 1.6] * 2, "tokens_per_s": [20.0, 22.0, 21.0] * 2,
                          "speedup": [1.0, 1.1, 1.05] * 2, "speedup_lo": [1.0, 1.0, 0.95] * 2,
                          "speedup_hi": [1.0, 1.2, 1.15] * 2, "n_prompts": 131})
    pairs = pd.DataFrame({"method": [methods[1], methods[2]], "versus": [methods[2], methods[1]], "temperature": 0.0,
                          "tau_ratio": [1.06, 0.94], "speed_ratio": [1.048, 0.954], "speed_ratio_lo": [1.01, 0.92],
                          "speed_ratio_hi": [1.09, 0.99]})
    env = {"cpu_name": "a test CPU", "commit": "abc1234", "contended": False}
    table = speed_table(bench, pairs, env, reference="e1")
    assert table.arm.tolist() == ["ar", "c2", "e1"]  # one row per method, the overall task only
    shown = readable("speed", table)
    assert shown.method.tolist() == ["c2", "e1"]  # plain decoding's speed is in the note
    assert shown["speed over e1 [interval]"].tolist() == ["1.048 [1.010, 1.090]", ""]
    assert shown["tau over e1"].tolist() == ["1.060", ""]
    status = pd.DataFrame({"run": ["x"], "arm": ["c2"], "state": ["done"], "steps": [600.0]})
    text = page(DESIGN, {"speed": table}, status, machine="cpu", commits="abc")
    section = text.split("## Speed of the primary pair")[1].split("##")[0]
    assert "on a test CPU, code at abc1234; plain decoding 20.0 tokens/s" in section and "131 prompts" in section
    assert "No other job loaded the machine" in section and "intervals over prompts only" in section
    assert "timed last" not in text  # a design without speed claims: nothing is left to time
    claims_design = replace(DESIGN, speed_claims=SpeedConfig())
    assert "The speed claims are timed last" in page(claims_design, {}, status, machine="cpu", commits="abc")
    done = {"speed_claims": pd.DataFrame({"claim": ["C1"], "comparison": ["c2 / plain decoding"], "ratio": [1.1],
                                          "lo": [1.0], "hi": [1.2], "p_holm": [0.01], "seeds": ["5"],
                                          "verdict": ["faster"]})}  # every run done, and the claims timed
    assert "timed last" not in page(claims_design, done, status, machine="cpu", commits="abc")
    flagged = page(DESIGN, {"speed": table.assign(contended=True)}, status, machine="cpu", commits="abc")
    assert "flagged, not evidence" in flagged


def test_the_page_shows_the_speed_claims_in_their_cpu_form_with_the_fits_prediction_beside_the_measurement():
    from clover2.research.verdicts import page

    table = cells(replays({"c2": 1.8, "e1": 1.6}, seeds={"c2": 5, "e1": 5}), DESIGN, DEV)
    tables = {"verdicts": verdicts(DESIGN, table)}
    claims = pd.DataFrame({"claim": ["C1", "C2"], "comparison": ["c2 / plain decoding", "c2 / e1"],
                           "ratio": [1.18, 0.94], "lo": [1.11, 0.92], "hi": [1.26, 0.98], "p": [0.001, 0.002],
                           "p_holm": [0.002, 0.004], "verdict": ["faster", "slower"], "seeds": ["5", "5 vs 5"],
                           "prompts": [131, 131]})
    claims.attrs["env"] = {"cpu_name": "a test CPU", "commit": "abc", "evaluation": {"other_load": 0.004}}
    trees = pd.DataFrame({"arm": ["c2", "c2"], "tree": ["chain2", "dynamic:4:2:2"], "speedup": [1.2, 1.1],
                          "lo": [1.1, 1.0], "hi": [1.3, 1.2], "decode_speedup": [1.3, 1.2],
                          "predicted_speedup": [np.nan, 1.4], "tau": [1.5, 1.6], "chosen": [True, False]})
    speedups = pd.DataFrame({"arm": ["pld", "c2"], "speedup": [1.2, 1.18], "lo": [1.1, 1.11], "hi": [1.3, 1.26],
                             "seeds": [1, 5], "prompts": [131, 131], "tree": ["", "chain2"], "tau": [1.3, 1.5]})
    status = pd.DataFrame({"run": ["x"], "arm": ["c2"], "state": ["done"], "steps": [1.0]})
    text = page(DESIGN, {**tables, "speed_claims": claims, "tree_choice": trees, "speedups": speedups}, status,
                machine="cpu", commits="abc")
    assert "## The speed claims on this CPU" in text and "| C2 | c2 / e1 | 0.940 [0.920, 0.980] | 0.004 |" in text
    assert "Timed on a test CPU, code at abc" in text and "0.4% of the machine" in text
    assert "| c2 | dynamic:4:2:2 |  | 1.100 [1.000, 1.200] | 1.200 | 1.400 | 1.600 |" in text  # fit beside measure
    assert "## Speed over plain decoding, every draft and baseline" in text
    earlier = tables["verdicts"][tables["verdicts"].family == "primary"]
    text = page(DESIGN, {**tables, "earlier": earlier}, status, machine="cpu", commits="abc")
    assert "## The primary comparisons by the protocol's first rules" in text and "| primary | c2 / e1 |" in text


def test_the_machine_replicate_stands_beside_its_original_and_the_seed_spread():
    """One seed trained again on another CPU kind: its tau beside the first run's on the same prompts, in
    units of the arm's seed-to-seed standard deviation, on the page's findings and in a table of its own."""
    from clover2.research.verdicts import analyze, page

    design = replace(DESIGN, replicate=("e1", 1))
    reps = replays({"c2": 1.8, "e1": 1.75, "m": 1.6}, seeds={"c2": 5, "e1": 5, "m": 3})
    again = reps[(reps.run == "e1/s1/b600")].assign(run="e1-replicate/s1/b600", arm="e1-replicate")
    again = again.assign(tokens=again.tokens + 2)  # a little more accepted on the second machine
    names = sorted(set(reps.run)) + ["e1-replicate/s1/b600"]
    runs = pd.DataFrame({"run": names, "arm": [n.split("/")[0] for n in names], "seed": [int(n.split("/")[1][1:])
                         for n in names], "budget": [int(n.split("/b")[1]) for n in names], "share": 1.0, "lr": 1e-3,
                         "dev": 1.5, "tokens": 1000, "epochs": 1.0,
                         "cpu": ["AMD EPYC"] * (len(names) - 1) + ["Intel Xeon"],
                         "weights_sha256": [f"w{i}" for i in range(len(names))]})
    tables = analyze(design, runs, pd.concat([reps, again], ignore_index=True), DEV)
    row = tables["replicate"].iloc[0]
    assert (row.arm, row.seed, row.budget, row.first_cpu, row.again_cpu, row.same_weights) == (
        "e1", 1, 600, "AMD EPYC", "Intel Xeon", False)
    assert row.ratio == pytest.approx(again.tokens.sum() / (again.tokens.sum() - 2 * len(again)))
    sd = tables["spread"].set_index(["arm", "budget"]).seed_sd[("e1", 600)]
    assert row.in_seed_sds == pytest.approx((row.tau_again - row.tau_first) / sd)
    assert "e1-replicate" not in set(tables["spread"].arm)  # in no comparison
    text = page(design, tables, pd.DataFrame({"run": ["x"], "arm": ["e1"], "state": ["done"], "steps": [1.0]}),
                machine="a CPU", commits="abc")
    assert "- **machine** (descriptive): e1 seed 1 trained again on Intel Xeon (first on AMD EPYC), other " \
        "weights" in text
    assert "## The machine" in text and "seed-to-seed standard deviations" in text
    assert analyze(DESIGN, runs, reps, DEV)["replicate"].empty  # no replicate planned: nothing


def test_each_arms_learning_curve_is_at_one_rate_even_where_its_grid_chose_another_later():
    """The curve's longer runs train at the rate pinned for them (`curve_lrs`); its points at the main
    budgets come from the same rate, not from the rate the arm's grid chose later (whose seeds the
    verdicts read), and the page names the rates."""
    from clover2.research.verdicts import analyze, page

    design = DesignConfig(arms={"c2": Arm("clover2", lrs=(1e-3, 3e-3), seeds=5), "e1": Arm("eagle1", lrs=(1e-3,),
                                                                                          seeds=5)},
                          reference="e1", primary=("c2",), budgets=(300, 600), curve=(1200,),
                          curve_lrs={"c2": 3e-3}, extend_edge=0, n_boot=200)
    dev = {("c2", 1e-3): 1.6, ("c2", 3e-3): 1.5, ("e1", 1e-3): 1.5}  # c2 chooses 1e-3, after its curve at 3e-3
    chosen = replays({"c2": 1.9, "e1": 1.8}, seeds={"c2": 5, "e1": 5})
    pinned = replays({"c2": 1.6}, seeds={"c2": 3}, budgets=(300, 600, 1200), rng_seed=1).assign(lr=3e-3)
    pinned = pinned[(pinned.seed == 0) | (pinned.budget == 600)]
    longer = replays({"e1": 1.85}, seeds={"e1": 1}, budgets=(1200,), rng_seed=2)
    rep = pd.concat([chosen, pinned.assign(run=pinned.run + "-lr3"), longer.assign(run=longer.run + "-long")])
    runs = rep.groupby("run").first().reset_index()[["run", "arm", "lr", "seed", "budget", "share"]].assign(
        dev=1.5, tokens=lambda d: 1000 * d.budget, epochs=1.0)
    tables = analyze(design, runs, rep, dev)
    c2 = tables["curve"][tables["curve"].arm == "c2"].set_index("budget")
    assert set(c2.lr) == {3e-3} and list(c2.index) == [300, 600, 1200]
    assert c2.tau.max() < 1.75 and c2.loc[600, "seeds"] == 3 and c2.loc[300, "seeds"] == 1  # never the 1.9 seeds
    assert tables["spread"].set_index(["arm", "budget"]).tau[("c2", 600)] > 1.85  # the verdicts' rate
    text = page(design, tables, runs.assign(state="done", steps=600.0), machine="cpu", commits="abc")
    assert "c2 (lr 0.003) " in text.split("- **longer training**")[1]
    assert "c2 0.003 (its grid now chooses 0.001: the curve was trained first)" in text


def test_the_power_rule_adds_seeds_only_where_the_first_seeds_cannot_find_a_3pc_difference():
    """Amendment 1: after EAGLE-3's first three seeds, the power of each primary comparison with it to find a
    3% difference at Holm's strictest step; below 80% its two extra seeds join the plan (and the verdicts wait
    for them). Read on the first seeds alone, so the seeds it adds do not decide it again."""
    from clover2.research.design import plan
    from clover2.research.verdicts import detection_power, power_rule, with_power_rule

    design = replace(DESIGN, arms=DESIGN.arms | {"e3": Arm("eagle3", lrs=(1e-3,), seeds=3, more_seeds=2, tier=2)})
    dev = DEV | {("e3", 1e-3): 1.5}
    quiet = replays({"c2": 1.8, "e1": 1.8, "m": 1.6, "e3": 1.8}, seeds={"c2": 5, "e1": 5, "m": 3, "e3": 3},
                    seed_sd=0.004)
    noisy = pd.concat([quiet[quiet.arm != "e3"],
                       replays({"e3": 1.8}, seeds={"e3": 3}, seed_sd=0.06, rng_seed=4)])
    assert power_rule(design, quiet[quiet.arm != "e3"], dev).empty  # not before its first seeds are in
    assert power_rule(design, quiet[(quiet.arm != "e3") | (quiet.seed < 2)], dev).empty
    calm, loud = power_rule(design, quiet, dev), power_rule(design, noisy, dev)
    assert list(calm.comparison) == ["c2 / e3"] and calm.alpha.iloc[0] == pytest.approx(0.05 / 2)  # c2 vs e3, m
    assert calm.power.iloc[0] > 0.8 > loud.power.iloc[0] and list(calm.seeds_added) == [0]
    assert list(loud.seeds_added) == [2] and loud.seeds.iloc[0] == "5 vs 3"
    assert with_power_rule(design, quiet, dev).arms["e3"].seeds == 3
    ruled = with_power_rule(design, noisy, dev)
    assert ruled.arms["e3"].seeds == 5 and ruled.arms["c2"] == design.arms["c2"]
    assert {r.seed for r in plan(ruled, dev, 0.2) if r.arm == "e3"} == {0, 1, 2, 3, 4}
    assert {r.seed for r in plan(design, dev, 0.2) if r.arm == "e3"} == {0, 1, 2}
    more = pd.concat([noisy, replays({"e3": 1.8}, seeds={"e3": 5}, seed_sd=0.0, rng_seed=5).query("seed >= 3")])
    assert power_rule(design, more, dev).power.iloc[0] == loud.power.iloc[0]  # seeds 3 and 4 never re-decide it
    v = verdicts(ruled, cells(noisy, ruled, dev)).set_index("comparison")
    assert v.loc["c2 / e3", "verdict"] == "waits for its seeds"  # 3 of the 5 seeds the rule now plans
    from clover2.research.verdicts import analyze, page

    runs = noisy.groupby("run").first().reset_index()[["run", "arm", "lr", "seed", "budget", "share"]].assign(
        dev=1.5, tokens=1000, epochs=1.0)
    status = runs.assign(state="done", steps=600.0)
    shown = page(ruled, {**analyze(ruled, runs, noisy, dev), "power_rule": loud}, status, machine="cpu",
                 commits="abc").split("## Seeds added by the power rule")[1].split("##")[0]
    assert "| c2 / e3 | 5 vs 3 |" in shown and "e3: 2 seeds added." in shown and "two-sided at 0.0250" in shown
    # the power of a larger gap is higher
    table = cells(quiet, design, dev)
    low = detection_power(table, "c2", "e3", budget=600, difference=0.01, alpha=0.025)
    assert low < detection_power(table, "c2", "e3", budget=600, difference=0.03, alpha=0.025)


def test_holm_counts_a_familys_planned_comparisons_and_a_part_that_helps_reads_so():
    """A family's Holm correction counts every comparison the design plans (one not replayed yet at p = 1),
    so a verdict never loosens as the others arrive; a part whose removal costs tokens per step "helps"."""
    from clover2.research.verdicts import PART_HELPS

    rep = replays({"c2": 1.9, "e1": 1.8, "m": 1.8, "np": 1.8}, seeds={"c2": 5, "e1": 5, "m": 3, "np": 3})
    alone = verdicts(DESIGN, cells(rep, DESIGN, DEV)).set_index("comparison")
    design = replace(DESIGN, arms=DESIGN.arms | {"e3": Arm("eagle3", lrs=(1e-3,), tier=2),
                                                 "np": Arm("clover2", lr_from="c2", tier=3)})
    dev = DEV | {("e3", 1e-3): 1.5}
    planned = verdicts(design, cells(rep, design, dev)).set_index("comparison")  # c2 / e3 planned, not replayed
    assert "c2 / e3" not in planned.index
    assert planned.loc["c2 / m", "p_adjusted"] == pytest.approx(min(1.0, 2 * alone.loc["c2 / m", "p"]))
    assert alone.loc["c2 / m", "p_adjusted"] == alone.loc["c2 / m", "p"]  # one planned: no correction
    assert planned.loc["np / c2", "ratio"] < 1 and planned.loc["np / c2", "verdict"] == PART_HELPS


def test_the_single_stream_bootstraps_primary_intervals_are_shown_once_beside_the_new_ones():
    """Amendment 1: every interval computed again with a generator per arm, the earlier ones shown beside them
    once, from the table committed before the change."""
    from clover2.research.verdicts import analyze, page

    rep = replays({"c2": 1.9, "e1": 1.8, "m": 1.6}, seeds={"c2": 5, "e1": 5, "m": 3})
    runs = rep.groupby("run").first().reset_index()[["run", "arm", "lr", "seed", "budget", "share"]].assign(
        dev=1.5, tokens=1000, epochs=1.0)
    tables = analyze(DESIGN, runs, rep, DEV)
    tables["earlier"] = tables["verdicts"][tables["verdicts"].family == "primary"]
    before = pd.DataFrame({"comparison": ["c2 / e1"], "ratio": [0.987], "lo": [0.974], "hi": [1.0000210164],
                           "commit": ["abc1234"]})
    status = runs.assign(state="done", steps=600.0)
    text = page(DESIGN, {**tables, "earlier_bootstrap": before}, status, machine="cpu", commits="abc")
    section = text.split("## The primary comparisons by the protocol's first rules")[1].split("##")[0]
    assert ("one random stream; on the same runs it gave c2 / e1 0.987 [0.974, 1.0000] (`earlier-bootstrap.csv`, "
            "as committed at abc1234)") in section  # a bound printed to the digit that says its side of 1
    assert "earlier-bootstrap" not in page(DESIGN, tables, status, machine="cpu", commits="abc")


def test_the_primary_familys_p_is_adjusted_as_its_intervals_are_by_bonferroni():
    """Two primaries read 97.5% intervals: their adjusted p is Bonferroni's 2p, so that it falls below 5%
    exactly when the interval leaves out 1 (a Holm p beside a Bonferroni interval could disagree with it)."""
    design = replace(DESIGN, arms=DESIGN.arms | {"c2o": Arm("clover2", lrs=(1e-3,), seeds=5)}, primary=("c2o", "c2"))
    dev = DEV | {("c2o", 1e-3): 1.5}
    rep = replays({"c2": 1.9, "c2o": 1.795, "e1": 1.8, "m": 1.6}, seeds={"c2": 5, "c2o": 5, "e1": 5, "m": 3})
    out = verdicts(design, cells(rep, design, dev))
    primary = out[out.family == "primary"].set_index("comparison")
    assert len(primary) == 2 and (primary.level == 0.975).all()
    np.testing.assert_allclose(primary.p_adjusted, np.minimum(1.0, 2 * primary.p))
    near = primary.loc["c2o / e1"]  # a moderate p, where Holm (its p alone, as the larger) would differ
    assert 0.01 < near.p < 0.5 and near.p_adjusted == pytest.approx(min(1.0, 2 * near.p)) != near.p
    assert near.lo <= 1 <= near.hi and not primary.loc["c2 / e1"].lo <= 1 <= primary.loc["c2 / e1"].hi
    for r in primary.itertuples():
        assert (r.p_adjusted < 0.05) == (not r.lo <= 1 <= r.hi)


def test_the_speed_claims_note_says_where_and_how_cleanly_they_were_timed():
    from clover2.research.verdicts import _cpu_speed_note

    claims = pd.DataFrame({"claim": ["C1"]})
    claims.attrs["env"] = {"cpu_name": "Some CPU", "commit": "abc1234", "kernel_plan": "mkl@1,packed@2+",
                           "evaluation": {"other_load": 0.012, "prompts_timed_again": 2, "prompts_still_contended": 0},
                           "speed_claims": {"contended_share": 0.05}, "retrained": ["e1/lr0.001-s1/b600"],
                           "timed_tau_difference": 0.004, "near_ties": 1}
    note = _cpu_speed_note(claims)
    for said in ("Some CPU", "abc1234", "mkl@1,packed@2+", "1.2%", "2 prompts were timed again for load over 5% "
                 "(0 still over it)", "1 trained again", "at most 0.004", "1 outputs parted from plain decoding's "
                 "at a near tie"):
        assert said in note
    claims.attrs["env"] |= {"retrained": [], "near_ties": 0}
    assert "0 trained again" in _cpu_speed_note(claims) and "token for token" in _cpu_speed_note(claims)


def test_the_prompts_weighted_alike_beside_the_pooled_verdict():
    """The pooled ratio (a prompt weighs by its forwards) is the verdict's, interval and all; beside it the
    geometric mean of the per-prompt tau ratios, seeds averaged in logs, with the rule's reading of it."""
    from clover2.research.verdicts import weighting

    rep = replays({"c2": 1.9, "e1": 1.8, "m": 1.6}, seeds={"c2": 5, "e1": 5, "m": 3})
    rep.loc[rep.prompt < 20, "steps"] *= 3  # a few long prompts weigh more in the pooled ratio
    rep.loc[rep.prompt < 20, "tokens"] *= 3
    table = cells(rep, DESIGN, DEV)
    out = weighting(DESIGN, table).set_index("comparison").loc["c2 / e1"]
    primary = verdicts(DESIGN, table).set_index("comparison").loc["c2 / e1"]
    assert (out.pooled, out.pooled_lo, out.pooled_hi) == (primary.ratio, primary.lo, primary.hi)
    logs = {a: np.mean([np.log(c.tokens / c.steps).mean(1)]) for a, c in
            ((a, table[(a, 600, 1.0, "eagle25")]) for a in ("c2", "e1"))}
    assert out.prompts_alike == pytest.approx(np.exp(logs["c2"] - logs["e1"]))
    assert out.prompts_alike_lo < out.prompts_alike < out.prompts_alike_hi and out.level == 0.95
    assert out.reading == primary_verdict(out.prompts_alike_lo, out.prompts_alike_hi, DESIGN.margin,
                                          DESIGN.smallest_claim)
    assert "unseen" not in weighting(DESIGN, table)  # no prompts seen in development: no such reading
    # the prompts seen while a departure was developed, set aside: the pooled ratio on the others alone
    seen = weighting(DESIGN, table, seen=[0, 1, 2]).set_index("comparison").loc["c2 / e1"]
    rest = cells(rep[rep.prompt > 2].assign(prompt=lambda d: d.prompt - 3), DESIGN, DEV)
    alone = verdicts(DESIGN, rest).set_index("comparison").loc["c2 / e1"]
    assert (seen.unseen, seen.unseen_lo, seen.unseen_hi) == pytest.approx((alone.ratio, alone.lo, alone.hi))
    assert seen.seen_prompts == 3 and seen.unseen_reading == alone.verdict


def test_single_seed_ratios_are_set_beside_the_seeds_own_spread_and_the_fits_beside_their_distance():
    from clover2.research.verdicts import _beyond, _seed_noise

    spread = pd.DataFrame({"arm": ["c2", "e1", "m", "c2"], "budget": [600, 600, 600, 300], "share": 1.0,
                           "tree": "eagle25", "seeds": [5, 5, 3, 5], "tau": [2.0, 2.0, 2.0, 2.0],
                           "seed_sd": [0.01, 0.02, 0.5, 0.5]})
    said = _seed_noise(DESIGN, spread)  # the primary arm and the reference at the main budget only
    assert "0.5%-1.0% of it at 600 steps" in said and _seed_noise(DESIGN, None) == ""
    assert _beyond(pd.DataFrame({"tokens": [1e6, 2e6]})).startswith(", 591 times the last point's tokens")


def test_acceptance_by_position_is_each_depths_share_given_the_one_before():
    from clover2.research.verdicts import positions

    rows = [{"arm": "c2", "lr": 1e-3, "budget": 600, "share": 1.0, "tree": "eagle25", "seed": s, "depth": 3,
             "lengths": lengths} for s, lengths in ((0, "1 2 3 4"), (1, "2 2 1 1"))]
    rows.append(rows[0] | {"budget": 300, "lengths": "4 4 4 4"})  # another budget: not read
    out = positions(DESIGN, pd.DataFrame(rows), DEV).set_index("arm").loc["c2"]
    # accepted draft tokens per step: 0 1 2 3 1 1 0 0 -> at least 1: 5/8, 2: 2/8, 3: 1/8
    assert (out.seeds, out.steps) == (2, 8) and out.accepted_per_step == pytest.approx(1.0)
    assert (out.position_1, out.position_2, out.position_3) == pytest.approx((5 / 8, 2 / 5, 1 / 2))


def test_the_findings_set_the_first_positions_beside_each_other():
    from clover2.research.verdicts import _findings

    pos = pd.DataFrame({"arm": ["c2", "e1", "m"], "position_1": [0.42, 0.46, 0.3], "position_2": [0.41, 0.37, 0.2]})
    line = next(x for x in _findings(DESIGN, {"positions": pos}) if "by draft position" in x)
    assert "accepted in c2 0.42, e1 0.46 of steps" in line and "first, in c2 0.41, e1 0.37" in line
    assert " m " not in line  # the primary arms and the reference only


def test_the_ablation_table_gives_each_parts_effect_with_its_interval_and_the_cpu_profiles_reading():
    """Clover-2's parts: per part, the tau without it beside the official's, the part's effect (official over
    without, - 1) with the comparison's interval inverted, its Holm p and verdict; the cpu profile's one-seed
    reading of the same part beside it where it ran one; the section on the results page."""
    from clover2.research.verdicts import PART_HELPS, analyze, page, parts, readable, with_cpu_reading

    design = replace(DESIGN, arms=DESIGN.arms | {"official-no-projector": Arm("clover2", lr_from="c2", tier=3),
                                                 "official-1-layer-block": Arm("clover2", lr_from="c2", tier=3)})
    rep = replays({"c2": 1.9, "e1": 1.8, "m": 1.6, "official-no-projector": 1.75, "official-1-layer-block": 1.9},
                  seeds={"c2": 5, "e1": 5, "m": 3, "official-no-projector": 3, "official-1-layer-block": 3})
    runs = rep.groupby("run").first().reset_index()[["run", "arm", "lr", "seed", "budget", "share"]].assign(
        dev=1.5, tokens=1000, epochs=1.0)
    dev = DEV | {(a, 1e-3): 1.5 for a in design.arms}
    tables = analyze(design, runs, rep, dev)
    table = tables["parts"].set_index("arm")
    v = tables["verdicts"].set_index("comparison").loc["official-no-projector / c2"]
    row = table.loc["official-no-projector"]
    assert row.part == "the output projector" and row.verdict == PART_HELPS == v.verdict
    assert row.effect == pytest.approx(1 / v.ratio - 1) and row.effect_lo == pytest.approx(1 / v.hi - 1)
    assert row.effect_lo < row.effect < row.effect_hi and row.effect > 0.05  # about 1.9 / 1.75
    assert row.tau_official == pytest.approx(tables["spread"].set_index(["arm", "budget"]).tau[("c2", 600)])
    assert table.loc["official-1-layer-block"].effect_lo < 0 < table.loc["official-1-layer-block"].effect_hi
    summary = pd.DataFrame({"variant": ["clover2", "clover2-no-projector"], "tau": [1.37, 1.32]})
    read = with_cpu_reading(tables["parts"], summary).set_index("arm").cpu_profile_effect
    assert read["official-no-projector"] == pytest.approx(1.37 / 1.32 - 1) and np.isnan(read["official-1-layer-block"])
    shown = readable("parts", with_cpu_reading(tables["parts"], summary))
    assert list(shown.columns)[-1] == "`cpu` profile, one seed" and shown.iloc[0, -1].startswith("+3.8%")
    status = runs.assign(state="done", steps=600.0)
    text = page(design, {**tables, "parts": with_cpu_reading(tables["parts"], summary)}, status, machine="cpu",
                commits="abc")
    assert "## Clover-2's parts" in text and text.index("## Clover-2's parts") < text.index("## Per task")
    assert "its reading" in text  # the caption names the cpu profile's column only where it is shown
    lone = with_cpu_reading(tables["parts"], summary.iloc[:1])  # no variant of the profile removed a part here
    assert "its reading" not in page(design, {**tables, "parts": lone}, status, machine="cpu", commits="abc")
    assert "parts" not in analyze(DESIGN, runs, rep, DEV)  # no part replayed: no table
    assert parts(DESIGN, pd.DataFrame(), pd.DataFrame()).empty
