"""The side-by-side benchmark, the cost curve and the configured bench run, on tiny models
(no timing assertions: only what must hold on any machine)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import tiny_target

from clover2.decoding.decode import DecodeConfig, generate
from clover2.decoding.sampling import SamplingConfig
from clover2.decoding.suffix import SuffixCache
from clover2.decoding.token_recycling import TokenRecycling
from clover2.decoding.tree import preset
from clover2.drafts import build_draft
from clover2.drafts.checkpoint import save_draft
from clover2.drafts.config import DraftConfig
from clover2.drafts.methods import MethodSpec, drafter_factory
from clover2.errors import Clover2Error
from clover2.load import mark, other_share
from clover2.measure.bench import (
    BenchConfig,
    Method,
    balanced_order,
    interleaved,
    make_method,
    moved,
    paired,
    run_bench,
    summarize,
)
from clover2.measure.fit import FitConfig, cost_curve, fit
from clover2.measure.provenance import environment
from clover2.training.tasks import load_task


@pytest.fixture(scope="module")
def runs():
    t = tiny_target("llama")
    cfg = DecodeConfig(max_new_tokens=12)
    hot = DecodeConfig(max_new_tokens=12, sampling=SamplingConfig(temperature=1.0))
    methods = [make_method(m, t, cfg) for m in ("ar", "pld", "hf")] + [make_method(m, t, hot) for m in ("ar", "pld")]
    prompts = {"a": [1, 2, 3, 1, 2, 3, 1, 2], "b": [5, 9, 7], "c": [4] * 10}
    return interleaved(methods, prompts, repeats=2, categories={"a": "x", "b": "x", "c": "y"})


def test_every_method_runs_every_prompt_and_repeat(runs):
    assert len(runs) == 5 * 3 * 2
    assert set(zip(runs.method, runs.temperature)) == {("ar", 0), ("pld", 0), ("hf", 0), ("ar", 1), ("pld", 1)}
    greedy = runs[runs.temperature == 0]
    assert (greedy.identical == 1).all()  # fp32: all three produce the same tokens
    assert runs[runs.temperature == 1].identical.isna().all()  # sampled runs are not compared token by token
    assert (runs[runs.method == "ar"].speedup == 1).all()  # each temperature against its own plain decoding
    assert (runs[runs.method == "ar"].decode_speedup == 1).all()
    assert runs[runs.method == "hf"].decode_speedup.isna().all()  # HF generate's prefill is not known
    ours = runs[runs.method != "hf"]
    assert (ours.decode_speedup > 0).all() and not ours.decode_speedup.equals(ours.speedup)  # the prefill left out


def test_summary_has_overall_and_per_task_rows_with_intervals(runs):
    s = summarize(runs)
    keys = set(zip(s.method, s.temperature, s.task))
    assert keys == {(m, t, c) for m, t in [("ar", 0), ("pld", 0), ("hf", 0), ("ar", 1), ("pld", 1)]
                    for c in ("overall", "x", "y")}
    assert {"method", "task", "temperature", "tau", "tokens_per_s", "speedup", "speedup_lo", "speedup_hi",
            "identical_frac", "n_prompts"} <= set(s.columns)
    assert (s.speedup_lo <= s.speedup).all() and (s.speedup <= s.speedup_hi).all()
    ar = s[(s.method == "ar") & (s.task == "overall") & (s.temperature == 0)].iloc[0]
    assert ar.tau == 1 and ar.tau_minus_1 == 0 and ar.speedup == 1 and ar.identical_frac == 1 and ar.n_prompts == 3
    assert np.isnan(s[s.method == "hf"].tau).all()  # HF generate reports no steps



def test_a_runs_table_read_back_from_its_csv_summarizes_as_it_was_written(runs, tmp_path):
    runs.to_csv(tmp_path / "runs.csv", index=False)  # a method without a tree comes back with tree NaN
    again = summarize(pd.read_csv(tmp_path / "runs.csv"))
    pd.testing.assert_frame_equal(again[["method", "task", "speedup", "tau"]],
                                  summarize(runs)[["method", "task", "speedup", "tau"]])


def test_how_far_each_figure_moved_between_two_runs(runs):
    old, new = summarize(runs), summarize(runs.assign(speedup=runs.speedup * 2))
    table = moved(old, new)
    assert len(table) == 5 and set(zip(table.method, table.temperature)) == set(zip(runs.method, runs.temperature))
    assert np.allclose(table.moved, 2) and (table.tau_old.fillna(0) == table.tau_new.fillna(0)).all()

def test_paired_comparisons_are_per_prompt_ratios_of_the_same_run(runs):
    p = paired(runs, n_boot=500)
    assert set(zip(p.method, p.versus, p.temperature)) == {(a, b, t) for t, ms in ((0, ("ar", "pld", "hf")),
                                                                                   (1, ("ar", "pld")))
                                                            for a in ms for b in ms if a != b}
    pld = runs[(runs.method == "pld") & (runs.temperature == 0)]
    row = p[(p.method == "pld") & (p.versus == "ar") & (p.temperature == 0)].iloc[0]
    assert row.speed_ratio == pytest.approx(np.exp(np.log(pld.speedup).mean()))  # the geometric mean of the speedups
    assert row.speed_ratio_lo <= row.speed_ratio <= row.speed_ratio_hi and row.n_prompts == 6
    assert row.faster_on == (pld.speedup > 1).sum()
    back = p[(p.method == "ar") & (p.versus == "pld") & (p.temperature == 0)].iloc[0]
    assert back.speed_ratio == pytest.approx(1 / row.speed_ratio) and back.tau_ratio == pytest.approx(1 / row.tau_ratio)
    assert row.tau_ratio_lo <= row.tau_ratio <= row.tau_ratio_hi
    hf = p[(p.method == "hf") & (p.versus == "ar")].iloc[0]  # generate counts no steps: no tau, a speed ratio
    assert np.isnan(hf.tau_ratio) and np.isnan(hf.tau_ratio_lo) and hf.speed_ratio > 0


def test_every_speedup_is_the_geometric_mean_of_the_per_prompt_ratios(runs):
    """Summary and paired tables state one statistic: the geometric mean of per-prompt ratios with
    its percentile bootstrap interval (not a median, which bimodal copy data makes unstable)."""
    bimodal = runs.assign(speedup=np.where(runs.prompt == "a", 3.0, 1.0))  # per prompt: 3, 1, 1 (median 1)
    s = summarize(bimodal, n_boot=500).set_index(["method", "temperature", "task"])
    row = s.loc[("pld", 0.0, "overall")]
    assert row.speedup == pytest.approx(3 ** (1 / 3)) and 1 <= row.speedup_lo < row.speedup < row.speedup_hi < 3
    p = paired(runs, n_boot=500).set_index(["method", "versus", "temperature"])
    ours = summarize(runs, n_boot=500).set_index(["method", "temperature", "task"])
    assert ours.loc[("pld", 0.0, "overall"), "speedup"] == pytest.approx(p.loc[("pld", "ar", 0.0), "speed_ratio"])


def test_other_processes_load_is_measured_and_marks_the_table(runs):
    start = mark()
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])  # another process, not waited for
    try:
        time.sleep(1.5)
        share = other_share(start)
    finally:
        busy.kill()
        busy.wait()
    assert share >= 0.8 / (os.cpu_count() or 1) - 0.1  # one busy CPU (less scheduling noise)
    assert runs.other_load.between(0, 1).all()
    loaded = summarize(runs.assign(other_load=0.5))
    assert loaded.contended.all() and not summarize(runs.assign(other_load=0.0)).contended.any()


def test_the_first_prompts_timed_run_is_what_it_would_be_without_the_warm_up():
    """Drafters that remember across prompts (the suffix cache, Token Recycling, the hybrids with
    the suffix cache) start the first timed prompt as if there had been no untimed warm-up on it,
    and still remember the timed prompts that came before."""
    t = tiny_target("llama")
    cfg = DecodeConfig(max_new_tokens=24)
    prompts = {"a": [1, 2, 3, 1, 2, 3, 1, 2], "b": [5, 9, 7]}
    runs = interleaved([make_method(m, t, cfg) for m in ("ar", "suffix", "tr@chain3")], prompts)
    runs = runs.set_index(["method", "prompt"])
    suffix, recycling = SuffixCache(), TokenRecycling(96, preset("chain3"))  # fresh, no warm-up
    for method, memory in (("suffix", suffix), ("tr@chain3", recycling)):
        for prompt in prompts:  # in the benchmark's order, each remembering the one before
            assert runs.loc[(method, prompt), "steps"] == len(generate(t, memory.drafter(), prompts[prompt], cfg).steps)


def test_hybrids_and_unions_report_the_accepted_tokens_of_each_source():
    """runs.csv: per run, the accepted draft tokens each source proposed (they add up to all the
    accepted draft tokens: a bonus token per step, but for a last step the length limit cut);
    bench.csv: the same per step, each source's part of tau - 1."""
    t = tiny_target("llama")
    model = build_draft(DraftConfig.for_arch("clover2", num_heads=2), t).eval()
    cfg = DecodeConfig(max_new_tokens=16)
    methods = [make_method(m, t, cfg, draft=model)
               for m in ("ar", "pld", "suffix+clover2@chain2", "union+clover2@chain2")]
    runs = interleaved(methods, {"a": [5, 9, 7], "again": [5, 9, 7]}).set_index("prompt")  # the suffix cache knows it
    for method, sources in (("suffix+clover2@chain2", ["suffix", "model"]),
                            ("union+clover2@chain2", ["suffix", "pld", "model"])):
        r = runs[runs.method == method]
        accepted = r[[f"accepted_{s}" for s in sources]]
        assert accepted.sum(axis=1).between(r.step_tokens - r.steps, r.step_tokens - r.steps + 1).all()
        assert r.loc["again", "accepted_suffix"] > 0 and accepted.notna().all().all()
    assert runs[runs.method.isin(["ar", "pld"])].filter(like="accepted_").isna().all().all()  # one source: no split
    table = summarize(runs.reset_index()).set_index(["method", "task"])
    union = table.loc[("union+clover2@chain2", "overall")]
    parts = union[[f"accepted_{s}_per_step" for s in ("suffix", "pld", "model")]].sum()
    assert union.tau - 1 <= parts <= union.tau - 1 + 1 / runs[runs.method == "union+clover2@chain2"].steps.sum()


def test_unknown_method_duplicate_and_missing_reference():
    t = tiny_target("llama")
    with pytest.raises(Clover2Error, match="unknown method"):
        make_method("medusa9", t, DecodeConfig())
    with pytest.raises(Clover2Error, match="reference"):
        interleaved([make_method("pld", t, DecodeConfig(max_new_tokens=2))], {"a": [1, 2]})
    hot = DecodeConfig(max_new_tokens=2, sampling=SamplingConfig(temperature=1.0))
    with pytest.raises(Clover2Error, match="temperature 1.0"):
        interleaved([make_method("ar", t, DecodeConfig(max_new_tokens=2)), make_method("pld", t, hot)], {"a": [1, 2]})


@pytest.mark.parametrize("spec, parsed", [
    ("ar", ("ar", "", 0.0, None)),
    ("clover2", ("clover2", "eagle25", 0.0, None)),
    ("eagle1@dynamic:60:6:10/1", ("eagle1", "dynamic:60:6:10", 1.0, None)),
    ("clover2@fitted/0.7=some/dir", ("clover2", "fitted", 0.7, "some/dir")),
    ("suffix", ("suffix", "", 0.0, None)),
    ("tr", ("tr", "eagle25", 0.0, None)),
    ("tr@chain4/1", ("tr", "chain4", 1.0, None)),
    ("pld+clover2@fitted", ("pld+clover2", "fitted", 0.0, None)),
    ("suffix+eagle1@chain3/1", ("suffix+eagle1", "chain3", 1.0, None)),
    ("clover2@dynamic:60:5:10/1!graphs=d/c2", ("clover2", "dynamic:60:5:10", 1.0, "d/c2")),
    ("ar!static", ("ar", "", 0.0, None))])
def test_method_specs(spec, parsed):
    s = MethodSpec.parse(spec)
    name, tree, temperature, path = s.name, s.tree, s.temperature, s.draft
    assert (name, tree, temperature, str(path) if path else None) == parsed
    assert s.arch == {"clover2": "clover2", "eagle1": "eagle1", "pld+clover2": "clover2",
                      "suffix+eagle1": "eagle1"}.get(name, "")
    assert s.is_draft == bool(s.arch)


def test_hybrids_take_their_copy_source_where_it_proposes_and_the_draft_elsewhere():
    t = tiny_target("llama")
    model = build_draft(DraftConfig.for_arch("clover2", num_heads=2), t).eval()
    for name, copy in (("pld+clover2", "pld"), ("suffix+clover2", "suffix")):
        drafter = drafter_factory(MethodSpec.parse(f"{name}@chain2"), t, draft=model)()
        assert list(drafter.sources) == [copy, "model"] and drafter.one_source


@pytest.mark.parametrize("spec", ["hydra", "pld@eagle25", "ar/hot", "suffix@eagle25", "tr@dynamic:8:3:4",
                                  "tr@fitted", "pld+hydra", "suffix+pld", "ar!turbo", "ar!eager", "hf!graphs", "ar!",
                                  "eagle1@dynamic:6:3", "eagle1@dynamic", "eagle1@dynamicX:6:3:2",
                                  "openvino+eagle3@dynamic:6:3=/d"])
def test_bad_method_specs_are_refused(spec):
    with pytest.raises(Clover2Error):
        MethodSpec.parse(spec)


def test_engine_is_in_the_label_and_reaches_the_decoder():
    spec = MethodSpec.parse("clover2@eagle25/1!graphs")
    assert (spec.engine, spec.label) == ("graphs", "clover2@eagle25!graphs")
    assert MethodSpec.parse("clover2@eagle25").label == "clover2@eagle25"  # eager: the plain label
    # two drafts of one architecture in one benchmark: each named by its folder
    a, b = (MethodSpec.parse(f"clover2@eagle25=results/study/drafts/{n}") for n in ("clover2", "clover2-official"))
    assert (a.label, b.label) == ("clover2@eagle25=clover2", "clover2@eagle25=clover2-official")
    t = tiny_target("llama")
    calls = []
    import clover2.measure.bench as bench
    real = bench.generate
    try:
        bench.generate = lambda target, drafter, prompt, config: (calls.append(config.engine)
                                                                  or real(target, drafter, prompt, config))
        make_method("ar!static", t, DecodeConfig(max_new_tokens=2)).run([1, 2, 3])
    finally:
        bench.generate = real
    assert calls == ["static"]


@pytest.mark.parametrize("engine", ["eager", "static"])
def test_cost_curve_is_relative_to_one_token(engine):
    curve = cost_curve(tiny_target("qwen2"), prefix=20, sizes=(1, 4, 16), repeats=2, engine=engine)
    assert curve.n_tokens.tolist() == [1, 4, 16]
    assert curve.relative.iloc[0] == 1 and (curve.median_ms > 0).all()


def test_environment_records_versions_dtype_and_commit():
    env = environment(tiny_target("llama"))
    assert {"cpu", "torch", "transformers", "dtype", "commit", "torch_threads", "kernels"} <= set(env)
    assert env["dtype"] == "float32"


def _spec_bench_file(path):
    """A Spec-Bench-format question file: {"question_id", "category", "turns"} per line."""
    rows = [{"question_id": i, "category": c, "turns": [text * (1 + i % 3)]}
            for i, (c, text) in enumerate([("translation", "abcabc"), ("translation", "xyz"), ("qa", "hello"),
                                           ("qa", "what is it"), ("rag", "aabbaabb"), ("rag", "q q q")])]
    path.write_text("\n".join(map(json.dumps, rows)) + "\n")
    return path


def test_spec_bench_file_is_sampled_per_category_and_bad_tasks_are_refused(tmp_path):
    records = load_task(str(_spec_bench_file(tmp_path / "question.jsonl")), n=1)
    assert [r.category for r in records] == ["translation", "qa", "rag"]
    with pytest.raises(Clover2Error, match="unknown task"):
        load_task("wmt14")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question_id": 1, "category": "qa"}\n')
    with pytest.raises(Clover2Error, match="line 1"):
        load_task(str(bad))


def test_two_drafts_of_one_architecture_keep_a_record_each(tmp_path):
    """Two Clover-2 drafts in one run (the paper's recipe and a variant, each named by its folder): each
    keeps its own fitted tree, fit table and draft record, keyed as its method names it."""
    t = tiny_target("llama")
    cfg = DraftConfig.for_arch("clover2", num_heads=2)
    for name, seed in (("official", 0), ("variant", 1)):
        torch.manual_seed(seed)
        save_draft(tmp_path / name, build_draft(cfg, t), t, cfg, extra={})
    config = BenchConfig(tasks=(str(_spec_bench_file(tmp_path / "question.jsonl")),), n_per_task=1, max_new_tokens=6,
                         methods=("ar", *(f"clover2@fitted={tmp_path / n}" for n in ("official", "variant"))),
                         fit=FitConfig(max_depth=2, top_k=2, prompts=1, max_new_tokens=6), threads=1,
                         draft_weights="float")
    run_bench(t, config, None, tmp_path / "out")
    env = json.loads((tmp_path / "out" / "env.json").read_text())
    assert set(env["fitted_trees"]) == set(env["drafts"]) == {"clover2=official", "clover2=variant"}
    assert {d["weights_sha256"] for d in env["drafts"].values()} == {
        json.loads((tmp_path / n / "draft.json").read_text())["weights_sha256"] for n in ("official", "variant")}
    assert all((tmp_path / "out" / f"fit_clover2={n}.csv").exists() for n in ("official", "variant"))


def test_configured_bench_with_a_fitted_tree_writes_the_table(tmp_path, monkeypatch):
    """The whole `clover2 bench --config` path on a tiny target: tasks from a Spec-Bench file, a draft
    with static, dynamic and fitted trees, greedy and sampled; greedy drafts stay token-identical."""
    import clover2.measure.bench as B

    rounds = []
    monkeypatch.setattr(B, "cost_curve", lambda *a, repeats, **k: rounds.append(repeats) or cost_curve(
        *a, repeats=repeats, **k))
    t = tiny_target("llama", kernels="auto")  # the default path: env.json records the measured plan
    cfg = DraftConfig.for_arch("clover2", num_heads=3)
    save_draft(tmp_path / "drafts" / "clover2", build_draft(cfg, t), t, cfg, extra={})
    config = BenchConfig(tasks=(str(_spec_bench_file(tmp_path / "question.jsonl")),), n_per_task=1,
                         max_new_tokens=10, methods=("ar", "pld", "suffix", "tr@chain3", "clover2@eagle25",
                                                     "clover2@dynamic:8:3:3", "clover2@fitted", "pld+clover2@fitted",
                                                     "suffix+clover2@fitted", "union+clover2@fitted",
                                                     "union+clover2@eagle25", "ar/1", "clover2@eagle25/1",
                                                     "union+clover2@eagle25/1", "ar!graphs", "clover2@fitted!graphs"),
                         fit=FitConfig(max_depth=3, top_k=3, prompts=2, max_new_tokens=8), threads=1, cost_repeats=2)
    table = run_bench(t, config, tmp_path / "drafts", tmp_path / "out")
    assert rounds and set(rounds) == {2}  # the configured rounds of every cost curve
    disk = pd.read_csv(tmp_path / "out" / "bench.csv")
    assert len(disk) == len(table) == 16 * 4  # 16 methods x (3 tasks + overall)
    assert {"other_load", "contended"} <= set(disk.columns)
    greedy = disk[disk.temperature == 0]
    assert (greedy.identical_frac == 1).all()
    env = json.loads((tmp_path / "out" / "env.json").read_text())
    assert env["torch_threads"] >= 1 and 0 <= env["other_load"] <= 1 and "contended" in env
    fitted = env["fitted_trees"]["clover2"]
    if fitted["predicted_speedup"] > 1:
        assert 1 <= fitted["budget"] <= 9 and 1 <= fitted["depth"] <= 3
    else:  # no tree pays: the fitted method drafts nothing
        assert fitted["budget"] == fitted["depth"] == 0
    fit = pd.read_csv(tmp_path / "out" / "fit_clover2.csv")
    assert fit.predicted_speedup.max() == pytest.approx(fitted["predicted_speedup"])
    assert "clover2!graphs" in env["fitted_trees"] and (tmp_path / "out" / "fit_clover2!graphs.csv").exists()
    union = pd.read_csv(tmp_path / "out" / "fit_union+clover2.csv")  # the union's fit includes the draft alone
    assert ({"suffix_budget", "pld_budget"} <= set(union.columns)
            and union.predicted_speedup.max() >= fit.predicted_speedup.max())
    assert env["fitted_trees"]["union+clover2"]["predicted_speedup"] == pytest.approx(union.predicted_speedup.max())
    weights = env["drafts"]["clover2"]  # the precision chosen by the predicted speed of each one's best tree
    assert set(weights["predicted_speedup_by_weights"]) == {"float", "int8"}
    assert weights["weights"] == max(weights["predicted_speedup_by_weights"],
                                     key=weights["predicted_speedup_by_weights"].get)
    assert set(disk[disk.method.str.contains("clover2")].draft_weights) == {env["draft_weights"], weights["weights"]}
    union = disk[disk.method == "union+clover2@eagle25"]  # what each source proposed of its accepted tokens
    assert union[[f"accepted_{s}_per_step" for s in ("suffix", "pld", "model")]].notna().all().all()
    assert set(env["kernel_check"]) == {"kernels_measured_again", "one_token_dearer_than_two"}
    assert (sum(env["calibration_tasks"].values()) == 2
            and set(env["calibration"]["clover2"]) == {"model", "suffix", "pld"})
    assert env["kernels"]["mode"] == "auto" and len(env["kernels"]["kernels"]) == len(env["kernels"]["buckets"])
    curve = pd.read_csv(tmp_path / "out" / "cost_curve.csv")
    assert set(curve.engine) == {"eager", "graphs"}  # one curve per engine in the run
    assert env["engines"] == {"eager": {"cuda_graphs": False}, "graphs": {"cuda_graphs": False}}  # a CPU: uncaptured
    assert env["bandwidth"]["weight_bytes"] > 0 and env["bandwidth"]["floor_ms"] > 0
    assert (tmp_path / "out" / "runs.csv").exists()


def test_a_fit_that_finds_no_tree_decodes_plainly(tmp_path, monkeypatch):
    """Where the fit predicts no tree beats plain decoding, `@fitted` drafts nothing (tau 1) and the
    hybrids fall back to their copy source alone, all still reported under their own names."""
    import clover2.measure.bench as bench

    def no_tree(*args, **kwargs):
        return None, fit(*args, **kwargs)[1]
    monkeypatch.setattr(bench, "fit", no_tree)
    t = tiny_target("llama")
    cfg = DraftConfig.for_arch("clover2", num_heads=3)
    save_draft(tmp_path / "drafts" / "clover2", build_draft(cfg, t), t, cfg, extra={})
    config = BenchConfig(tasks=(str(_spec_bench_file(tmp_path / "question.jsonl")),), n_per_task=1, max_new_tokens=10,
                         methods=("ar", "pld", "suffix", "clover2@fitted", "pld+clover2@fitted",
                                  "suffix+clover2@fitted", "union+clover2@fitted"),
                         fit=FitConfig(max_depth=2, top_k=3, prompts=1, max_new_tokens=6), threads=1)
    table = run_bench(t, config, tmp_path / "drafts", tmp_path / "out").set_index(["method", "task"])
    env = json.loads((tmp_path / "out" / "env.json").read_text())
    assert env["fitted_trees"]["clover2"]["budget"] == 0
    assert table.loc[("clover2@fitted", "overall"), "tau"] == 1
    assert table.loc[("pld+clover2@fitted", "overall"), "tau"] == table.loc[("pld", "overall"), "tau"]
    assert table.loc[("suffix+clover2@fitted", "overall"), "tau"] == table.loc[("suffix", "overall"), "tau"]
    assert table.loc[("union+clover2@fitted", "overall"), "tau"] == 1
    assert (table.identical_frac == 1).all()


def test_every_draft_of_a_run_decodes_at_one_precision_which_both_tables_carry(tmp_path, monkeypatch):
    """`draft_weights: auto` picks one precision for all drafts (the one whose drafts' best trees
    predict more speed together), though each draft alone would pick another: no comparison between
    methods is one between precisions. runs.csv and bench.csv carry each method's precision."""
    import clover2.measure.bench as bench

    predicted = {("clover2", "int8"): 1.3, ("clover2", "float"): 1.0, ("eagle1", "int8"): 0.9, ("eagle1", "float"): 1.1}

    def calibrate(target, model, prompts, config, *, engine):  # a calibration is known by its draft and precision
        return model.arch, "int8" if any("quantized" in type(m).__module__ for m in model.modules()) else "float"
    monkeypatch.setattr(bench, "calibrate", calibrate)
    monkeypatch.setattr(bench, "fit", lambda c, curve, config, copy=False:
                        (None, pd.DataFrame({"predicted_speedup": [predicted[c]]})))
    monkeypatch.setattr(bench, "source_acceptance", lambda calibration: {})
    t = tiny_target("llama")
    for arch in ("clover2", "eagle1"):
        cfg = DraftConfig.for_arch(arch, num_heads=3) if arch == "clover2" else DraftConfig.for_arch(arch)
        save_draft(tmp_path / "drafts" / arch, build_draft(cfg, t), t, cfg, extra={})
    config = BenchConfig(tasks=(str(_spec_bench_file(tmp_path / "question.jsonl")),), n_per_task=1, max_new_tokens=6,
                         methods=("ar", "clover2@chain2", "eagle1@chain2"), fit=FitConfig(prompts=1), threads=1)
    run_bench(t, config, tmp_path / "drafts", tmp_path / "out")
    env = json.loads((tmp_path / "out" / "env.json").read_text())
    assert env["draft_weights"] == "int8" and {env["drafts"][a]["weights"] for a in ("clover2", "eagle1")} == {"int8"}
    assert env["drafts"]["eagle1"]["predicted_speedup_by_weights"] == {"float": 1.1, "int8": 0.9}  # alone: float
    for table in ("runs.csv", "bench.csv"):
        weights = pd.read_csv(tmp_path / "out" / table).groupby("method").draft_weights.unique()
        assert list(weights["clover2@chain2"]) == list(weights["eagle1@chain2"]) == ["int8"]
        assert pd.isna(weights["ar"]).all()


def test_missing_draft_fails_before_anything_runs(tmp_path):
    config = BenchConfig(tasks=("qa",), methods=("ar", "eagle1@eagle25"))
    with pytest.raises(Clover2Error, match="draft"):
        run_bench(tiny_target("llama"), config, tmp_path / "nothing", tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_run_with_nothing_left_to_calibrate_on_says_so_instead_of_dividing_by_zero(tmp_path):
    """Every prompt of the file benchmarked and a fitted tree asked for: a clear message, before any work."""
    t = tiny_target("llama")
    cfg = DraftConfig.for_arch("clover2", num_heads=2)
    save_draft(tmp_path / "drafts" / "clover2", build_draft(cfg, t), t, cfg, extra={})
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(f'{{"id": "{i}", "prompt": "say {i}"}}\n' for i in range(3)))
    config = BenchConfig(tasks=(str(prompts),), n_per_task=3, max_new_tokens=4, methods=("ar", "clover2@fitted"),
                         fit=FitConfig(max_depth=2, top_k=2, prompts=2, max_new_tokens=4), threads=1)
    with pytest.raises(Clover2Error, match="none is left to fit the tree"):
        run_bench(t, config, tmp_path / "drafts", tmp_path / "out")
    with pytest.raises(Clover2Error, match="no draft to decode with"):  # a draft method with no draft anywhere
        run_bench(t, replace(config, methods=("ar", "clover2@chain2")), None, tmp_path / "out")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(Clover2Error, match="no prompts|holds no prompts"):
        run_bench(t, replace(config, tasks=(str(empty),), methods=("ar",)), None, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_tau_is_deterministic_across_runs_greedy_and_sampled():
    """Same prompts, same seeds: tau is identical run to run (only the times vary)."""
    t = tiny_target("qwen2")
    torch.manual_seed(0)
    draft = build_draft(DraftConfig.for_arch("clover2", num_heads=3), t).eval()
    tables = []
    for _ in range(2):
        methods = []
        for temperature in (0.0, 1.0):
            cfg = DecodeConfig(max_new_tokens=16, sampling=SamplingConfig(temperature=temperature, seed=5))
            methods += [make_method("ar", t, cfg), make_method("pld", t, cfg)]
            methods.append(Method(MethodSpec.parse(f"clover2@eagle25/{temperature}"), _draft_run(t, draft, cfg)))
        runs = interleaved(methods, {"a": [1, 2, 3, 1, 2, 3, 1], "b": [7, 8, 9]})
        tables.append(summarize(runs).set_index(["method", "temperature", "task"]).tau)
    pd.testing.assert_series_equal(tables[0], tables[1])


def _draft_run(target, draft, cfg):
    from clover2.decoding.decode import generate
    from clover2.decoding.tree import EAGLE_25
    from clover2.drafts.drafter import ModelDrafter
    from clover2.measure.bench import Run

    def run(prompt):
        g = generate(target, ModelDrafter(draft, EAGLE_25, cfg.sampling), prompt, cfg)
        return Run(g.output_ids, g.seconds, g.accept_lengths)
    return run


def test_commit_is_dirty_for_code_changes_but_not_for_results_or_prose(tmp_path, monkeypatch):
    """A run writes into the tracked results/ folder; only code changes make the recorded commit dirty (not
    the book's prose or the README)."""
    import subprocess

    from clover2.measure import provenance

    git = lambda *args: subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=tmp_path,  # noqa: E731
                                       check=True, capture_output=True)
    (tmp_path / "results").mkdir()
    (tmp_path / "book").mkdir()
    (tmp_path / "code.py").write_text("x = 1\n")
    for prose in ("results/bench.csv", "book/use.md", "README.md"):
        (tmp_path / prose).write_text("a\n")
    git("init", "-q")
    git("add", ".")
    git("commit", "-qm", "init")
    monkeypatch.setattr(provenance, "repo_root", lambda: tmp_path)
    for prose in ("results/bench.csv", "book/use.md", "README.md"):  # a run's output, the book's prose
        (tmp_path / prose).write_text("b\n")
    assert not provenance.commit().endswith("-dirty")
    (tmp_path / "code.py").write_text("x = 2\n")
    assert provenance.commit().endswith("-dirty")


def test_time_the_hypervisor_took_counts_as_other_work(monkeypatch):
    """On a virtual machine, `steal` (the 8th field of /proc/stat's cpu line) is time this process waited
    for its CPUs: it counts as other processes' work, as the benchmark's load record must see it."""
    import builtins
    import io

    import clover2.load as load

    stats = iter(["cpu  100 0 0 900 0 0 0 0 0 0\ncpu0 50 0 0 450 0 0 0 0\ncpu1 50 0 0 450 0 0 0 0\n",
                  "cpu  100 0 0 900 0 0 0 100 0 0\ncpu0 50 0 0 450 0 0 0 50\ncpu1 50 0 0 450 0 0 0 50\n"])
    real_open = builtins.open
    monkeypatch.setattr(builtins, "open", lambda f, *a, **k: io.StringIO(next(stats)) if f == "/proc/stat"
                        else real_open(f, *a, **k))
    monkeypatch.setattr(load.os, "sysconf", lambda name: 100)  # clock ticks a second
    before, after = load._machine_busy_s(), load._machine_busy_s()
    assert before == (1.0, 2) and after == (2.0, 2)  # the steal's 100 ticks are busy time
    assert load.other_share(load.LoadMark(0.0, before, 0.0), load.LoadMark(1.0, after, 0.0)) == 0.5


@pytest.mark.parametrize("n", [1, 2, 3, 4, 7, 8, 25])
def test_the_methods_orders_balance_places_and_neighbours(n):
    """Over one Williams design (n orders, 2n for an odd n) each method takes each place equally often and comes
    right after each other method equally often; a plain rotation, the check's counter-example, fails the second."""
    rows = 2 * n if n % 2 else n
    orders = [balanced_order(n, k) for k in range(rows)]
    assert all(sorted(o) == list(range(n)) for o in orders)
    assert all(Counter(o[place] for o in orders) == dict.fromkeys(range(n), rows // n) for place in range(n))

    def after(orders):
        return Counter((a, b) for o in orders for a, b in zip(o, o[1:]))

    assert set(after(orders).values()) <= {rows // n} and len(after(orders)) == n * (n - 1)
    assert balanced_order(n, rows + 1) == orders[1]  # the design repeats
    rotation = [list(range(k, n)) + list(range(k)) for k in range(n)]
    assert n < 3 or len(after(rotation)) < n * (n - 1)  # a rotation puts each method after the same one
