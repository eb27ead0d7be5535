"""The conclusions a results page states are computed from its tables, and say what the numbers say."""

import numpy as np
import pandas as pd

from clover2.research import paper, report


def _bench(clover_tau=1.5, eagle_tau=1.4, fitted_speedup=1.1):
    rows = []
    for task in ("overall", "mt_bench", "qa"):
        for method, tau, speed in (("ar", 1.0, 1.0), ("pld", 1.3, 1.2), ("clover2@eagle25", clover_tau, 0.6),
                                   ("eagle1@eagle25", eagle_tau, 0.55), ("clover2@fitted", 1.2, fitted_speedup)):
            rows.append({"method": method, "tree": "", "task": task, "temperature": 0.0, "n_prompts": 8, "n_runs": 8,
                         "tau": tau, "tau_minus_1": tau - 1, "tokens_per_s": 17 * speed, "speedup": speed,
                         "speedup_lo": speed - 0.1, "speedup_hi": speed + 0.1, "draft_share": 0.1,
                         "identical_frac": 1.0, "peak_mem_mb": np.nan, "other_load": 0.01, "contended": False})
    rows.append(rows[0] | {"temperature": 1.0, "identical_frac": np.nan})
    return pd.DataFrame(rows)


ENV = {"target": "t", "dtype": "float32", "cpu": "cpu", "gpu": None, "torch_threads": 2, "commit": "abc",
       "bench": {"max_new_tokens": 32}, "other_load": 0.01}


def test_overall_table_is_compact_and_labels_temperature():
    table = report.overall_table(_bench())
    assert list(table.columns) == ["tau", "tokens/s", report.SPEEDUP, "draft share", "identical"]
    assert "ar/1" in table.index and table.loc["pld", report.SPEEDUP] == "1.20 [1.10, 1.30]"
    assert table.loc["ar/1", "identical"] == ""  # sampled outputs are not compared
    hf = _bench().iloc[[0]].assign(method="hf", tau=np.nan, draft_share=np.nan)  # generate counts no steps
    row = report.overall_table(hf).loc["hf"]
    assert (row["tau"] == "–" and row["draft share"] == "–"
            and report.overall_table(_bench()).loc["pld", "tau"] == "1.30")


def test_speedup_findings_follow_the_numbers():
    env = ENV | {"fitted_trees": {"clover2": {"budget": 3, "depth": 2, "predicted_speedup": 1.15}}}
    text = report.speedup_findings(_bench(), env, pd.DataFrame({"n_tokens": [1, 4, 8], "relative": [1, 1.2, 1.4]}))
    assert "`pld`, 1.20x" in text and "ratio 1.07" in text and "3 nodes, depth 2" in text
    assert "N = 4: 1.20x" in text and "100% of greedy" in text and "idle" in text
    assert "26-token tree" not in text  # the curve stops at 8: nothing to interpolate
    wide = report.speedup_findings(_bench(), env, pd.DataFrame({"n_tokens": [1, 24, 32], "relative": [1, 2.2, 2.6]}))
    assert "the paper's 26-token tree, interpolated: 2.30x" in wide
    none = report.speedup_findings(_bench(fitted_speedup=1.0), ENV | {
        "other_load": 0.5, "fitted_trees": {"clover2": {"budget": 0, "depth": 0, "predicted_speedup": 0.9}}})
    assert "drafts nothing" in none and "contention" in none


def test_speed_is_named_by_one_statistic_on_every_page_table_and_figure():
    """The summary's speedups and the paired speed ratios are the same statistic, and say so by one name."""
    from clover2.research.figures import speedup_dots

    assert report.SPEEDUP == "speedup, geometric mean of per-prompt ratios [95% bootstrap CI]"
    paired = pd.DataFrame([{"method": "clover2@eagle25", "versus": "eagle1@eagle25", "temperature": 0.0, "n_prompts": 8,
                            "speed_ratio": 1.06, "speed_ratio_lo": 1.0, "speed_ratio_hi": 1.12, "faster_on": 6,
                            "tau_ratio": 1.02, "tau_ratio_lo": 0.99, "tau_ratio_hi": 1.05}])
    text = report.speedup_findings(_bench(), ENV, paired=paired)
    assert f"Speed: {report.SPEEDUP}." in text and f"moments apart, {report.SPEED_STATISTIC}" in text
    assert report.SPEEDUP in report.overall_table(_bench()).columns
    assert speedup_dots(_bench()).get_supxlabel() == report.SPEEDUP


def test_a_fitted_union_that_copies_without_the_draft_is_said_to_copy():
    """The fitted union drafted by copying alone (the draft's budget 0, a copy budget): the sentence
    says what it drafted, with its tau, never that it drafts nothing."""
    table = _bench()
    table = pd.concat([table, table[table.method == "clover2@fitted"].assign(method="union+clover2@fitted", tau=1.44)])
    env = ENV | {"fitted_trees": {"union+clover2": {"budget": 0, "depth": 0, "suffix_budget": 8,
                                                    "predicted_speedup": 1.3}}}
    text = report.speedup_findings(table, env)
    assert "drafts nothing" not in text
    assert "Fitted tree (union+clover2)**: no draft nodes, and suffix 8 copied; predicted 1.30x" in text
    assert "tau 1.44" in text


def test_each_sources_share_of_a_hybrids_accepted_tokens_is_stated():
    table = _bench().assign(accepted_pld_per_step=np.nan, accepted_model_per_step=np.nan)
    table.loc[table.method == "clover2@fitted", ["accepted_pld_per_step", "accepted_model_per_step"]] = [0.3, 0.1]
    text = report.speedup_findings(table, ENV)
    assert "**Accepted draft tokens by source**" in text
    assert "`clover2@fitted`: pld 0.30 (75%), model 0.10 (25%)" in text


def test_the_machine_is_named_by_its_cpus_short_name():
    env = ENV | {"cpu": "AMD EPYC Processor", "cpu_name": "AMD EPYC Zen 4 (AVX-512 BF16)"}
    assert "on AMD EPYC Zen 4 (AVX-512 BF16) (2 threads)" in report.speedup_findings(_bench(), env)
    assert report.machine_name(ENV) == "cpu" and report.machine_name(env | {"gpu": "H200"}) == "H200"


def test_speedup_findings_per_engine_and_against_the_bandwidth_floor():
    """A run with the graph engine: its own fitted tree, its own cost curve, and each plain decoding's
    time per token against the floor that memory bandwidth sets."""
    fast = _bench()
    fast = pd.concat([fast, fast[fast.method.isin(["ar", "clover2@fitted"]) & (fast.temperature == 0)].assign(
        method=lambda d: d.method + "!graphs", tokens_per_s=170.0, speedup=10.0)], ignore_index=True)
    env = ENV | {"fitted_trees": {"clover2!graphs": {"budget": 24, "depth": 5, "predicted_speedup": 2.5}},
                 "bandwidth": {"weight_bytes": 270e6, "copy_bandwidth_gb_s": 4000.0, "floor_ms": 0.0675}}
    curve = pd.DataFrame({"n_tokens": [1, 4, 1, 4], "median_ms": [50.0, 70.0, 2.0, 2.1],
                          "relative": [1, 1.4, 1, 1.05], "engine": ["eager", "eager", "graphs", "graphs"]})
    text = report.speedup_findings(fast, env, curve)
    assert "Fitted tree (clover2!graphs)**: the draft's 24 nodes, depth 5" in text and "measured 10.00x" in text
    assert ("N = 4: 1.40x" in text
            and "engine `graphs` (one forward of N tokens over one of 1, 2.00 ms): N = 4: 1.05x" in text)
    assert "(`ar`): 58.82 ms per token, 871x the floor of 0.068 ms" in text
    assert "(`ar!graphs`): 5.88 ms per token, 87x" in text


def test_paper_findings_give_the_ratios_and_leave_the_verdict_to_the_study():
    def ratio(clover, eagle):
        ours = pd.DataFrame([{"source": "ours", "method": m, "task": task, "tau": t}
                             for task in paper.TASKS for m, t in (("clover2", clover), ("eagle1", eagle))])
        return paper.clover2_over_eagle1(pd.concat([paper.tau().assign(source="paper"), ours]))
    ahead, behind = report.paper_findings(ratio(1.5, 1.4), "ours"), report.paper_findings(ratio(1.3, 1.4), "ours")
    assert "ours: Clover-2 / EAGLE-1 tau 1.07-1.07 per task, at or above 1 on 6 of 6" in ahead
    assert "ours: Clover-2 / EAGLE-1 tau 0.93-0.93 per task, at or above 1 on 0 of 6" in behind
    for text in (ahead, behind):  # one seed and a few prompts a task: no verdict either way
        assert "reproduce" not in text and "designed study" in text


def test_distillation_and_ablation_findings():
    final = pd.DataFrame([{"variant": v, "head": h, "top1": t - 0.05 * h}
                          for v, t in (("clover2", 0.3), ("clover2-hard-labels", 0.35)) for h in range(3)])
    text = report.distillation_findings(final)
    assert "does not help" in text and "less accurate, as expected" in text
    table = report.head_top1_table(final, {"Medusa-1 on Vicuna-7B (published)": (0.56, 0.32, 0.2, 0.15)})
    assert list(table.index) == ["clover2", "clover2-hard-labels", "Medusa-1 on Vicuna-7B (published)"]
    assert list(table.columns) == ["head 0", "head 1", "head 2"]  # the published 4th head is cut
    assert table.loc["clover2", "head 2"] == 0.2 and table.loc["Medusa-1 on Vicuna-7B (published)", "head 1"] == 0.32
    summary = pd.DataFrame({"variant": ["clover2", "clover2-no-projector", "clover2-hard-labels", "eagle1"],
                            "top1": [0.3, 0.2, 0.2, 0.3], "top5": [0.5] * 4, "tau": [1.4, 1.3, 1.45, 1.38]})
    text = report.ablation_findings(summary, 6)
    assert "6 prompts" in text and "Below it: `clover2-no-projector` (1.30)" in text
    assert "At or above it: `clover2-hard-labels` (1.45)" in text and "`eagle1` 1.38" in text


def test_training_log_has_both_splits_per_head_and_the_figure_draws_them(tmp_path):
    import json

    from clover2.research.figures import train_vs_heldout
    from clover2.research.lab import training_log

    lines = [{"step": s, "train_seconds": s / 10, **{f"{p}_head{h}_{k}": 0.1 * h + s / 1000 for p in ("train", "eval")
                                                    for h in range(2) for k in ("loss", "top1", "top5")}}
             for s in (100, 200)]
    (tmp_path / "metrics.jsonl").write_text("\n".join(json.dumps(x) for x in lines))
    log = training_log(tmp_path / "metrics.jsonl", "clover2")
    assert len(log) == 2 * 2 * 2 and set(log.split) == {"train", "held-out"}
    assert log[(log.step == 200) & (log["head"] == 1) & (log.split == "train")].top1.item() == 0.1 + 0.2
    g = train_vs_heldout(log)
    assert len(g.axes.flat) == 1 and len(g.axes.flat[0].lines) >= 4  # 2 heads x 2 splits


def test_paired_tau_intervals_separate_a_real_difference_from_noise():
    from clover2.measure.acceptance import paired_tau_intervals

    rng = np.random.default_rng(0)
    rows = []
    for p in range(30):
        steps = int(rng.integers(10, 30))
        for v, extra in (("clover2", 0.5), ("worse", 0.1), ("same", 0.5)):
            rows.append({"variant": v, "prompt": p, "steps": steps,
                         "tokens": int(steps * (1 + extra + rng.normal(0, 0.05)))})
    ci = paired_tau_intervals(pd.DataFrame(rows), reference="clover2")
    assert ci.loc["clover2", "delta_lo"] == ci.loc["clover2", "delta_hi"] == 0
    assert ci.loc["worse", "delta_hi"] < 0 and ci.loc["same", "delta_lo"] <= 0 <= ci.loc["same", "delta_hi"]
    assert 1.0 < ci.loc["worse", "tau_lo"] < ci.loc["worse", "tau_hi"] < 1.2
    summary = ci.assign(tau=[1.5, 1.1, 1.5], top1=0.2, top5=0.4).reset_index()
    text = report.ablation_findings(summary, 30)
    assert "Below it beyond prompt noise: `worse` (1.10)" in text and "Within prompt noise: `same` (1.50)" in text


def test_tau_beside_puts_this_runs_static_tree_drafts_next_to_the_paper():
    tau = paper.tau_beside(_bench(), "ours")
    mine = tau[tau.source == "ours"]
    assert set(mine.method) == {"clover2", "eagle1"} and set(mine.task) == {"mt_bench", "qa"}  # no overall, no pld
    assert set(tau.source) == {"vicuna-7b (paper)", "llama3-8b (paper)", "ours"}
    assert list(tau.columns) == ["source", "method", "task", "tau"]


def test_seed_findings_say_where_a_difference_holds_seed_by_seed():
    assert "One training seed" in report.seed_findings(pd.DataFrame(columns=["variant", "seeds"]))
    paired = {k: pd.DataFrame([{"method": "clover2@eagle25", "versus": "eagle1@eagle25", "temperature": 0.0,
                                "n_prompts": 24, "speed_ratio": r, "speed_ratio_lo": r - 0.03,
                                "speed_ratio_hi": r + 0.03, "faster_on": 18, "tau_ratio": 1.02}])
              for k, r in ((0, 1.06), (1, 1.01), (2, 1.08))}
    pairs = report.seed_pairs(paired)
    assert list(pairs.seed) == [0, 1, 2] and set(pairs.comparison) == {"clover2 / eagle1"}
    text = report.seed_findings(pairs=pairs)
    assert "1.06x, 1.01x, 1.08x" in text and "beyond prompt noise in 2 of 3 seeds, slower in 0" in text


def test_the_reported_evaluation_is_the_benchmarked_checkpoints():
    metrics = pd.DataFrame([{"variant": v, "step": s, "head": 0, "top1": s / 1000} for v in ("medusa", "eagle1")
                            for s in (500, 1000, 1300)])
    rows = report.at_saved_step(metrics, {"medusa": 1000, "eagle1": None}).set_index("variant")
    assert rows.loc["medusa", "step"] == 1000 and rows.loc["eagle1", "step"] == 1300  # keep-best, and the last


def test_a_notebook_table_is_plain_rounded_and_short():
    """DataFrames display as the book shows them: the index a first column, no NaN, numbers rounded
    by size, at most MAX_ROWS rows with a note; never pandas' own HTML."""
    import pandas as pd

    from clover2.research.tables import MAX_ROWS, cell, html

    df = pd.DataFrame({"tau": [1.23456, float("nan")], "tokens": [635066.0, 12.0], "n": [3, 4]},
                      index=pd.Index(["clover2", "eagle1"], name="method"))
    text = html(df)
    assert "dataframe" not in text and "NaN" not in text and "<th>method</th>" in text
    assert "<td>1.23</td>" in text and "<td>–</td>" in text and "<td>635,066</td>" in text and "<td>12.0</td>" in text
    assert [cell(x) for x in (0.01234, 123.456, 2, True)] == ["0.012", "123", "2", "yes"]
    long = html(pd.DataFrame({"x": range(MAX_ROWS + 5)}))
    assert long.count("<tr>") == MAX_ROWS + 1 and f"The first {MAX_ROWS} of {MAX_ROWS + 5} rows" in long


def test_ablation_table_gives_intervals_and_coverage_shares_a_row_per_vocabulary():
    summary = pd.DataFrame({"variant": ["clover2", "eagle1"], "top1": [0.3, 0.25], "top5": [0.5, 0.45],
                            "tau": [1.4, 1.3], "tau_lo": [1.3, 1.2], "tau_hi": [1.5, 1.4],
                            "delta_lo": [0.0, -0.15], "delta_hi": [0.0, -0.05]})
    table = report.ablation_table(summary)
    assert table.loc["eagle1", "tau [95% interval]"] == "1.30 [1.20, 1.40]"
    assert table.loc["eagle1", "tau minus Clover-2, 95% interval"] == "[-0.150, -0.050]"
    assert table.loc["clover2", "tau minus Clover-2, 95% interval"] == "–"
    coverage = pd.DataFrame([{"draft": d, "task": t, "coverage": c} for d, c in (("a", 0.9), ("b", 0.9), ("c", 0.8))
                             for t in ("qa", "overall")])
    rows = report.coverage_table(coverage)
    assert list(rows.index) == ["a, b", "c"] and rows.loc["c", "QA"] == 0.8
    assert list(report.coverage_table(coverage[coverage.draft != "c"]).index) == ["every draft"]


def test_speedup_findings_give_each_drafts_step_cost_from_the_runs():
    """The draft's cost per step (d in the cost model) is the median over prompts of its drafting time
    per step, over plain decoding's time per token on the same prompt; a method drafting nothing is left out."""
    runs = pd.DataFrame([
        {"method": m, "prompt": p, "temperature": 0.0, "seconds": s, "steps": st, "new_tokens": 10, "draft_share": d}
        for p in range(3)
        for m, s, st, d in (("ar", 1.0, 10, 0.0), ("clover2@eagle25", 2.0, 8, 0.2), ("clover2@fitted", 1.0, 10, 0.0))])
    text = report.speedup_findings(_bench(), ENV, runs=runs)
    # clover2@eagle25: 0.2 x 2 s over 8 steps = 50 ms a step; a plain step is 100 ms
    assert "`clover2@eagle25` 50.00 ms (0.50)" in text and "clover2@fitted`" not in text.split("Draft step")[1]
