"""The speed claims in their CPU form (clover2.research.speed): the trees chosen by measured speed, the
geometric-mean statistic and its two-level interval, the family's Holm and words, lossless outputs only, a
missing seed's draft trained again without touching runs.csv, and the stage's files after a tiny study."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from conftest import tiny_target
from test_design import _Lab
from test_training import fake_data

import clover2.research.speed as speed
from clover2.decoding.decode import DecodeConfig
from clover2.decoding.prompts import PromptRecord
from clover2.drafts import build_draft
from clover2.drafts.config import DraftConfig
from clover2.drafts.drafter import DynamicTree
from clover2.errors import Clover2Error
from clover2.files import write_csv
from clover2.measure.bench import make_method
from clover2.measure.fit import FitConfig, Fitted
from clover2.measure.provenance import machine
from clover2.profiles import load_profile
from clover2.research.design import Arm, DesignConfig, Experiment, SpeedConfig
from clover2.research.verdicts import bootstrap, holm

CALIBRATION = [PromptRecord("c-qa", ("abcabcabc",), "qa"), PromptRecord("c-mt", ("xyzxyz",), "mt_bench")]


def _timed(seconds: dict[str, float]):
    """`interleaved` as it runs, with each method's seconds replaced by a known value (by a part of its label)."""
    real = speed.interleaved

    def run(methods, prompts, **kw):
        rows = real(methods, prompts, **kw)
        return rows.assign(seconds=[next((s for part, s in seconds.items() if part in m), 1.0) for m in rows.method])
    return run


def test_the_calibration_picks_the_measured_fastest_tree_and_sets_the_fit_beside_it(monkeypatch):
    target = tiny_target("llama")
    drafts = {arm: (arch, build_draft(DraftConfig.for_arch(arch), target).eval())
              for arm, arch in (("a", "eagle1"), ("b", "clover2"))}
    monkeypatch.setattr(speed, "calibrate", lambda *args, **kw: {})  # the fit's own run, known instead
    monkeypatch.setattr(speed, "fit", lambda *args, **kw: (Fitted(DynamicTree(4, 2, 4), (), 1.7), pd.DataFrame()))
    monkeypatch.setattr(speed, "interleaved", _timed({"@chain2=a-s0": 0.5, "@dynamic:4:2:4=b-s0": 0.4, "@": 0.8}))
    _unloaded(monkeypatch)
    chosen, table = speed.choose_trees(target, drafts, CALIBRATION, pd.DataFrame(), SpeedConfig(chains=(1, 2, 3)),
                                       FitConfig(prompts=1, max_depth=2, top_k=4), DecodeConfig(max_new_tokens=6),
                                       n_boot=200)
    assert chosen == {"a": "chain2", "b": "dynamic:4:2:4"}
    assert table.groupby("arm").tree.apply(list).to_dict() == {
        arm: ["chain1", "chain2", "chain3", "dynamic:4:2:4", "eagle25"] for arm in ("a", "b")}
    best = table[table.chosen].set_index("arm")
    assert best.speedup.to_dict() == pytest.approx({"a": 2.0, "b": 2.5}) and table.chosen.sum() == 2
    assert (table.predicted_speedup.notna() == (table.candidate == "fitted")).all()  # the prediction beside
    assert (table[table.candidate == "fitted"].predicted_speedup == 1.7).all() and (table.prompts == 2).all()
    # a fitted tree of one node is the one-token chain: timed once, as that chain (first: the shallowest), with
    # the fit's prediction
    monkeypatch.setattr(speed, "fit", lambda *args, **kw: (Fitted(DynamicTree(1, 1, 4), (), 1.2), pd.DataFrame()))
    _, table = speed.choose_trees(target, {"a": drafts["a"]}, CALIBRATION, pd.DataFrame(),
                                  SpeedConfig(chains=(2,)), FitConfig(prompts=1, max_depth=2, top_k=4),
                                  DecodeConfig(max_new_tokens=6), n_boot=200)
    assert list(table.tree) == ["chain1", "chain2", "eagle25"] and list(table.candidate) == ["fitted", "chain", "fixed"]
    assert table.predicted_speedup.iloc[0] == 1.2


def _timings(speedups: dict[str, float], n_prompts: int, seeds: int = 3, spread: float = 0.2, seed: int = 0):
    """Synthetic timings whose geometric-mean speedup is known: per arm and seed, log-normal noise around it that
    sums to zero over the prompts (a draw and its negative), and seed offsets that sum to zero over the seeds."""
    rng = np.random.default_rng(seed)
    rows = [{"prompt": p, "arm": "ar", "seed": 0, "seconds": 1.0} for p in range(n_prompts)]
    for arm, s in speedups.items():
        offsets = np.linspace(-0.05, 0.05, seeds) if seeds > 1 else [0.0]
        for k, offset in enumerate(offsets):
            half = rng.normal(0, spread, n_prompts // 2)
            noise = np.concatenate([half, -half])
            rows += [{"prompt": p, "arm": arm, "seed": k, "seconds": 1 / (s * np.exp(offset + e))}
                     for p, e in enumerate(noise)]
    return pd.DataFrame(rows)


def test_the_statistic_is_the_geometric_mean_over_prompts_and_seeds_and_narrows_with_more_prompts():
    widths = {}
    for n, seeds in ((20, 1), (80, 1), (80, 3)):
        table = speed.speed_cells(_timings({"x": 1.2}, n, seeds=seeds))
        summary = speed.speedups(table, bootstrap(table, 2000), 0.95).set_index("arm").loc["x"]
        assert summary.speedup == pytest.approx(1.2) and summary.lo < 1.2 < summary.hi
        assert (summary.seeds, summary.prompts) == (seeds, n)
        widths[n, seeds] = summary.hi - summary.lo
    assert widths[80, 1] < 0.7 * widths[20, 1]  # four times the prompts: about half the width
    assert widths[80, 3] > widths[80, 1]  # and the seeds' own spread is in the interval too
    with pytest.raises(Clover2Error, match="every prompt"):
        speed.speed_cells(_timings({"x": 1.2}, 20).query("not (arm == 'x' and prompt == 3 and seed == 1)"))


def test_c1_and_c2_are_one_family_under_holm_with_the_protocols_words():
    table = speed.speed_cells(_timings({"c2": 1.3, "c2-official": 0.98, "e1": 1.1}, 60, spread=0.1))
    draws = bootstrap(table, 2000)
    out = speed.claims(table, draws, ("c2", "c2-official"), "e1", 0.05)
    assert out.comparison.tolist() == ["c2 / plain decoding", "c2-official / plain decoding", "c2 / e1",
                                       "c2-official / e1"] and out.claim.tolist() == ["C1", "C1", "C2", "C2"]
    assert out.ratio.tolist() == pytest.approx([1.3, 0.98, 1.3 / 1.1, 0.98 / 1.1])
    assert np.allclose(out.p_holm, holm(out.p.to_numpy())) and (out.level == 0.95).all()
    assert out.verdict.tolist() == ["faster", "no difference shown", "faster", "slower"]
    assert out.seeds.tolist() == ["3", "3", "3 vs 3", "3 vs 3"] and (out.prompts == 60).all()
    assert [speed.speed_verdict(r, p, 0.05) for r, p in ((1.1, 0.049), (0.9, 0.01), (1.5, 0.05))] == [
        "faster", "slower", "no difference shown"]


def test_an_interval_depends_only_on_its_own_arms():
    timings = _timings({"c2": 1.3, "e1": 1.1, "c2-official": 1.0}, 40)
    more = pd.concat([timings, _timings({"pld": 1.05, "c2-official": 1.02}, 40, seeds=5, seed=1).query("arm != 'ar'")
                      .assign(seed=lambda d: d.seed + 10)])  # a baseline added, and seeds of another arm
    before, after = (speed.claims(t, bootstrap(t, 1000), ("c2", "c2-official"), "e1", 0.05).set_index("comparison")
                     for t in map(speed.speed_cells, (timings, more)))
    mine = (["c2 / plain decoding", "c2 / e1"], ["ratio", "lo", "hi"])
    pd.testing.assert_frame_equal(before.loc[mine], after.loc[mine])
    assert before.loc["c2-official / e1", "lo"] != after.loc["c2-official / e1", "lo"]


def test_an_output_that_is_not_plain_decodings_is_refused_unless_it_parts_at_a_near_tie(monkeypatch):
    """Lossless or nothing: an output that parts from plain greedy decoding's is an error, except at a near tie,
    where the kernels' float rounding (a verification's many rows against plain decoding's one) may break the
    tie either way: that one is kept and counted."""
    rows = pd.DataFrame({"method": ["ar", "pld", "clover2@chain2=c2-s0"], "prompt": [0, 0, 0],
                         "identical": [1, 1, 0], "difference": ["", "", "3:17:29"], "new_tokens": [8, 8, 7]})
    with pytest.raises(Clover2Error, match=r"1 outputs on 1 prompts are not token-identical.*clover2@chain2=c2-s0"):
        speed.near_ties(rows, "the evaluation", {0: [1, 2]}, None, None)  # no target to look: no tie to grant
    assert speed.near_ties(rows.assign(identical=1.0), "the evaluation", {0: [1, 2]}, None, None).empty
    gaps = []
    monkeypatch.setattr(speed, "_gap", lambda target, ids, position, expected, got, decode: (
        gaps.append((ids, position, expected, got)), gap)[1])
    gap = speed.NEAR_TIE / 2
    ties = speed.near_ties(rows, "the evaluation", {0: [1, 2]}, object(), DecodeConfig())
    assert gaps == [([1, 2], 3, 17, 29)] and ties.to_dict("records") == [
        {"method": "clover2@chain2=c2-s0", "prompt": 0, "position": 3, "plain_token": 17, "token": 29, "gap": gap,
         "new_tokens": 7, "plain_new_tokens": 8}]  # the tie shortened the output: both lengths, to see it
    gap = 0.5  # a real gap: a bug, named with where it parted
    with pytest.raises(Clover2Error, match=r"not at a near tie \(clover2@chain2=c2-s0 on prompt 0 \(token 3"):
        speed.near_ties(rows, "the evaluation", {0: [1, 2]}, object(), DecodeConfig())


def test_the_gap_is_read_from_plain_decodings_own_logits_where_the_outputs_part():
    import torch

    target = tiny_target("llama")
    decode = DecodeConfig(max_new_tokens=5)
    ids = [1, 2, 3, 4]
    out = make_method("ar", target, decode).run(ids).output_ids
    with torch.inference_mode():
        logits = target.model(torch.tensor([[*ids, *out[:2]]])).logits[0, -1]
    other = int(logits.argsort(descending=True)[1])  # the runner-up at plain decoding's third token
    gap = speed._gap(target, ids, 2, out[2], other, decode)
    assert out[2] == int(logits.argmax()) and gap == pytest.approx(float(logits[out[2]] - logits[other]), abs=1e-5)


def _unloaded(monkeypatch):
    """No other work on the machine, as `interleaved` measures it (the tests share it with other jobs)."""
    import clover2.measure.bench as bench

    monkeypatch.setattr(bench, "other_share", lambda start: 0.0)


def test_a_prompt_timed_under_load_is_timed_again_once_on_its_own(monkeypatch):
    target = tiny_target("llama")
    methods = [make_method(m, target, DecodeConfig(max_new_tokens=4)) for m in ("ar", "pld")]
    real, calls = speed.interleaved, []
    loads = iter([{0: 0.0, 1: 0.3}, {1: 0.2}])  # prompt 1 busy, then busy again; prompt 0 idle

    def loaded(methods, prompts, **kw):
        calls.append((list(prompts), kw["order_from"]))
        load = next(loads)
        return real(methods, prompts, **kw).assign(other_load=lambda d: d.prompt.map(load))
    monkeypatch.setattr(speed, "interleaved", loaded)
    with pytest.warns(UserWarning, match="1 prompt\\(s\\) of prompts 0-1: timing them again, once"):
        runs, first, load, ties = speed.evaluate(methods, {0: [1, 2, 3], 1: [4, 5]}, {0: "qa", 1: "qa"}, 0.05)
    assert calls == [([0, 1], 0), ([1], 1)]  # only the busy prompt, in its own place in the design
    assert runs.prompt.tolist() == [0, 0, 1, 1] and first.prompt.tolist() == [1, 1] and ties.empty
    assert load == {"other_load": pytest.approx(0.1), "timed_again": True, "prompts_timed_again": 1,
                    "prompts_still_contended": 1, "contended": True}


def _watched(method, seen):
    """`method` with what its drafters remember recorded as each timed run starts."""
    (memory,) = method.memories
    return replace(method, run=lambda ids: (seen.append((list(ids), memory.snapshot()["counts"])), method.run(ids))[1])


def test_a_prompt_timed_again_finds_the_suffix_cache_as_its_first_timing_did(monkeypatch):
    """Not holding its own answer (its first timing put it there), but every earlier prompt's; afterwards the
    cache is as the first timings left it: each prompt in it once."""
    target = tiny_target("llama")
    config = DecodeConfig(max_new_tokens=4)
    plain, suffix = (make_method(m, target, config) for m in ("ar", "suffix"))
    seen = []
    real = speed.interleaved
    loads = iter([{0: 0.0, 1: 0.3, 2: 0.0}, {1: 0.0}])  # prompt 1 busy, then idle

    def loaded(methods, prompts, **kw):
        load = next(loads)
        return real(methods, prompts, **kw).assign(other_load=lambda d: d.prompt.map(load))
    monkeypatch.setattr(speed, "interleaved", loaded)
    prompts = {0: [1, 2, 3, 1, 2], 1: [4, 5, 6, 4, 5], 2: [7, 8, 9, 7, 8]}
    with pytest.warns(UserWarning, match="timing them again"):
        speed.evaluate([plain, _watched(suffix, seen)], prompts, dict.fromkeys(prompts, "qa"), 0.05)
    at_1 = [counts for ids, counts in seen if ids == prompts[1]]
    assert len(at_1) == 2 and at_1[0] == at_1[1] and at_1[0]  # the retime: the cache as the first timing found it
    fresh = make_method("suffix", target, config)
    for ids in prompts.values():
        fresh.run(ids)
    assert suffix.memories[0].counts == fresh.memories[0].counts


def test_a_resumed_evaluation_finds_the_suffix_cache_as_an_uninterrupted_one(monkeypatch, tmp_path):
    """A new process resuming after the finished chunks first fills its suffix cache with their prompts; rows of
    a chunk cut short between its writes are not kept."""
    target = tiny_target("llama")
    config = DecodeConfig(max_new_tokens=4)
    monkeypatch.setattr(speed, "CHUNK", 1)
    _unloaded(monkeypatch)
    prompts = {0: [1, 2, 3, 1, 2], 1: [4, 5, 6, 4, 5], 2: [7, 8, 9, 7, 8]}
    tasks = dict.fromkeys(prompts, "qa")

    def methods(seen):  # a process's own methods
        return [make_method("ar", target, config), _watched(make_method("suffix", target, config), seen)]
    whole, cut = [], []
    speed.evaluate(methods(whole), prompts, tasks, 0.05)
    real, calls = speed._timed_alone, []

    def timed(methods, chunk, *args, **kw):  # the session ends during the third chunk
        calls.append(list(chunk))
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(methods, chunk, *args, **kw)
    monkeypatch.setattr(speed, "_timed_alone", timed)
    with pytest.raises(KeyboardInterrupt):
        speed.evaluate(methods([]), prompts, tasks, 0.05, tmp_path)
    leftover = pd.read_csv(tmp_path / "timings.partial.csv").query("prompt == 1").assign(prompt=2)
    write_csv(tmp_path / "contended.partial.csv", leftover)  # written before the third chunk's timings were
    runs, first, load, ties = speed.evaluate(methods(cut), prompts, tasks, 0.05, tmp_path)
    assert calls == [[0], [1], [2], [2]] and first is None and not load["timed_again"]
    assert [ids for ids, _ in cut] == list(prompts.values())  # prompts 0 and 1 remembered, untimed, then 2 timed
    assert cut[2][1] == whole[2][1]


def test_a_stage_resumes_only_with_the_same_threads_drafts_prompts_and_machine_size(monkeypatch):
    args = dict(threads=2, weights={"c2": "a", "seeds/c2-s1": "b"}, config=SpeedConfig(), max_new_tokens=64,
                prompts=[("qa", [1, 2, 3])], records=CALIBRATION)
    key = speed.work_key(**args)
    assert speed.work_key(**args) == key
    for change in ({"threads": 4}, {"weights": {"c2": "b", "seeds/c2-s1": "a"}}, {"prompts": [("qa", [1, 2, 4])]},
                   {"records": CALIBRATION[:1]}, {"max_new_tokens": 32}, {"config": SpeedConfig(chains=(1,))}):
        assert speed.work_key(**args | change) != key, change
    monkeypatch.setattr(speed.os, "cpu_count", lambda: 64)
    assert speed.work_key(**args) != key


def test_an_interrupted_evaluation_resumes_at_the_next_chunk(monkeypatch, tmp_path):
    target = tiny_target("llama")
    methods = [make_method(m, target, DecodeConfig(max_new_tokens=4)) for m in ("ar", "pld")]
    monkeypatch.setattr(speed, "CHUNK", 1)
    _unloaded(monkeypatch)
    real, calls = speed._timed_alone, []

    def timed(methods, chunk, categories, share, what, order_from=0):  # the session ends during the second chunk
        calls.append(list(chunk))
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(methods, chunk, categories, share, what, order_from)
    monkeypatch.setattr(speed, "_timed_alone", timed)
    prompts, tasks = {0: [1, 2, 3], 1: [4, 5], 2: [6, 7]}, {0: "qa", 1: "qa", 2: "qa"}
    with pytest.raises(KeyboardInterrupt):
        speed.evaluate(methods, prompts, tasks, 0.05, tmp_path)
    runs, first, load, ties = speed.evaluate(methods, prompts, tasks, 0.05, tmp_path)
    assert calls == [[0], [1], [1], [2]] and sorted(runs.prompt.unique()) == [0, 1, 2] and len(runs) == 6
    assert first is None and load["other_load"] == 0 and not load["timed_again"] and ties.empty


def test_the_stage_keeps_its_kernel_plan_and_each_arms_calibration_for_a_resumed_stage(monkeypatch, tmp_path):
    """The kernels are measured afresh when the stage starts and kept: a resumed stage times on the same plan
    (not whatever the kernel cache holds by then); an arm whose calibration finished is not timed again."""
    target = tiny_target("llama")
    first, curve, check = speed.stage_kernels(target, "auto", tmp_path)
    assert (tmp_path / "kernels.json").exists() and len(curve) and "kernels_measured_again" in check
    monkeypatch.setattr(speed, "with_kernels", lambda *a, **kw: pytest.fail("measured again on a resume"))
    again, curve2, check2 = speed.stage_kernels(target, "auto", tmp_path)
    assert again.kernel_plan.kernels == first.kernel_plan.kernels and check2 == check
    assert again.kernel_plan.buckets == first.kernel_plan.buckets
    assert again.kernel_record()["timings"] == first.kernel_record()["timings"] and again.kernels == "auto"
    pd.testing.assert_frame_equal(curve2, pd.read_csv(tmp_path / "cost_curve.csv"))
    assert target.kernel_plan.kernels == ("stock",) * len(target.kernel_plan.kernels)  # the study's own: untouched
    drafts = {arm: (arch, build_draft(DraftConfig.for_arch(arch), target).eval())
              for arm, arch in (("a", "eagle1"), ("b", "clover2"))}
    monkeypatch.setattr(speed, "calibrate", lambda *args, **kw: {})
    monkeypatch.setattr(speed, "fit", lambda *args, **kw: (None, pd.DataFrame()))
    _unloaded(monkeypatch)
    real, timed = speed._timed_alone, []

    def once(methods, prompts, categories, share, what, order_from=0):
        timed.append(what)
        if what == "b's calibration" and timed.count(what) == 1:
            raise KeyboardInterrupt  # cut during the second arm
        return real(methods, prompts, categories, share, what, order_from)
    monkeypatch.setattr(speed, "_timed_alone", once)
    args = (target, drafts, CALIBRATION, pd.DataFrame(), SpeedConfig(chains=(1,)), FitConfig(prompts=1),
            DecodeConfig(max_new_tokens=4))
    with pytest.raises(KeyboardInterrupt):
        speed.choose_trees(*args, n_boot=100, work=tmp_path)
    chosen, table = speed.choose_trees(*args, n_boot=100, work=tmp_path)
    assert timed == ["a's calibration", "b's calibration", "b's calibration"] and set(chosen) == {"a", "b"}
    assert table.arm.tolist() == ["a", "a", "b", "b"] and (table.near_ties == 0).all()


def test_a_tiny_study_times_its_claims_last_training_a_missing_seed_again_without_touching_runs_csv(tmp_path,
                                                                                                    monkeypatch):
    monkeypatch.setenv("CLOVER2_CACHE", str(tmp_path / "cache"))
    target = tiny_target("llama")
    smoke = load_profile("smoke")
    design = DesignConfig(arms={"c2": Arm("clover2", lrs=(1e-3,), seeds=2), "e1": Arm("eagle1", lrs=(1e-3,), seeds=2)},
                          reference="e1", primary=("c2",), budgets=(6,), extend_edge=0, n_per_task=1,
                          max_new_tokens=6, n_boot=200)
    prof = replace(smoke, name="tiny-speed", design=design, draft={"draft_vocab": 48},
                   train=replace(smoke.train, schedule="wsd", eval_every=100, max_len=32, batch_size=4))
    lab = _Lab(profile=prof, target=target, results=tmp_path / "results")
    experiment = Experiment(lab)
    fake_data(experiment.data_dir, target)
    shutil.copytree(experiment.data_dir, experiment.eval_dir)
    monkeypatch.setattr(Experiment, "prompts", lambda self: [("qa", [1, 2, 3, 1, 2, 3]), ("mt_bench", [5, 6, 7])])
    monkeypatch.setattr(Experiment, "speed", lambda self: write_csv(self.speed_dir / "bench.csv", pd.DataFrame()))
    monkeypatch.setattr(speed, "calibration_set", lambda tasks, per_task: CALIBRATION)
    experiment.run()  # the study without its speed claims: trained and replayed
    assert not experiment.speed_claims_dir.exists()
    # the claims, on a machine whose cache lost e1's seed 1
    config = SpeedConfig(chains=(1, 2), threads=1)
    claimed = Experiment(replace(lab, profile=replace(prof, design=replace(design, speed_claims=config))))
    runs_csv = claimed.runs_csv.read_bytes()
    timed = speed.timed_drafts(claimed)
    lost = timed["e1", 1]
    shutil.rmtree(claimed.folder(lost))
    keep, train, hours = speed.drafts_left(claimed)  # what `clover2 study status` says is left before the timing
    assert (keep, train) == (4, 1) and 0 < hours == pytest.approx(lost.budget * claimed.pace()["e1"] / 3600)
    claimed.run(timing=False)  # `clover2 study run --untimed`: every draft kept, the timing left for the machine alone
    assert speed.drafts_left(claimed) == (0, 0, 0) and not (claimed.speed_claims_dir / "claims.csv").exists()
    assert pd.read_csv(claimed.sittings_csv).ended.iloc[-1] == "before the timing"
    claimed.run()
    assert pd.read_csv(claimed.sittings_csv).ended.iloc[-1] == "finished"
    out = claimed.speed_claims_dir
    written = {p.name for p in out.iterdir()}  # the first timings beside, where a busy machine had them taken again
    assert written - {"timings-contended.csv", "near-ties.csv"} == {"calibration.csv", "timings.csv", "speedups.csv",
                                                                    "drafts.csv", "claims.csv", "env.json"}
    assert claimed.runs_csv.read_bytes() == runs_csv and (claimed.folder(lost) / "draft.safetensors").exists()
    drafts = pd.read_csv(out / "drafts.csv")
    assert drafts.run.tolist() == [run.name for run in timed.values()]  # every timed draft, kept with the results
    assert drafts.draft.tolist() == ["c2", "seeds/c2-s1", "e1", "seeds/e1-s1"]
    again = drafts[drafts.trained_again_on.notna()]
    assert again.run.tolist() == [lost.name] and again.trained_again_on.tolist() == [machine()["cpu_name"]]
    assert (again.trained_weights_sha256 == again.committed_weights_sha256).all()  # same machine, same run
    assert (drafts.timed_weights_sha256 != drafts.committed_weights_sha256).all()  # kept as bf16
    claims = pd.read_csv(out / "claims.csv")
    assert claims.comparison.tolist() == ["c2 / plain decoding", "c2 / e1"] and claims.seeds.tolist() == ["2", "2 vs 2"]
    assert set(claims.verdict) <= {"faster", "slower", "no difference shown"} and (claims.prompts == 2).all()
    timings, env = pd.read_csv(out / "timings.csv"), json.loads((out / "env.json").read_text())
    calibration = pd.read_csv(out / "calibration.csv")
    trees = calibration[calibration.chosen].set_index("arm").tree.to_dict()
    assert env["trees"] == trees and set(calibration.arm) == {"c2", "e1"}
    assert set(timings.method) == {"ar", "pld", "suffix", *(f"{a}@{trees[k]}={k}-s{s}" for a, k in
                                                           (("clover2", "c2"), ("eagle1", "e1")) for s in (0, 1)),
                                   f"suffix+clover2@{trees['c2']}=c2-s0", f"suffix+eagle1@{trees['e1']}=e1-s0"}
    assert (timings.identical == 1).all() and len(timings) == 2 * 9 and timings.other_load.notna().all()
    assert set(pd.read_csv(out / "speedups.csv").arm) == {"pld", "suffix", "c2", "e1", "suffix+c2", "suffix+e1"}
    assert env["kernels"]["mode"] == "auto" and env["kernel_plan"] and env["commit"] == claimed.commit
    assert env["evaluation"]["timed_again"] == ("timings-contended.csv" in written) and env["retrained"] == [lost.name]
    assert env["near_ties"] == 0 and env["timed_tau_difference"] == pytest.approx(
        (drafts.timed_tau - drafts.committed_tau).abs().max())
    assert env["drafts"]["e1-s1"]["draft"] == "seeds/e1-s1"
    assert not (claimed.lab.results / "speed-cpu-work").exists()  # nothing left to resume
    # the record stays with the results, seed 0's draft with the published ones, the other seeds' in the cache
    assert pd.read_csv(speed.drafts_csv(claimed)).equals(drafts)
    assert speed.draft_folder(claimed, "e1", 0).parent == claimed.published()
    assert speed.draft_folder(claimed, "e1", 1).is_relative_to(claimed.root)
    assert not speed.prepare_next(claimed)
    assert not claimed.next_step()  # the stage was the last thing to do
    # an output that is not plain decoding's stops the stage, and nothing is written
    shutil.rmtree(out)
    real = speed.interleaved
    monkeypatch.setattr(speed, "interleaved", lambda *a, **kw: real(*a, **kw).assign(identical=lambda d: (
        d.index != len(d) - 1).astype(float)))
    with pytest.raises(Clover2Error, match="not token-identical"):
        claimed.next_step()
    assert not out.exists()


def test_a_descriptive_arm_is_timed_at_seed_0_beside_every_seed_of_the_claims_arms():
    from types import SimpleNamespace

    design = DesignConfig(arms={"c2": Arm("clover2", lrs=(1e-3,), seeds=2), "e1": Arm("eagle1", lrs=(1e-3,), seeds=2),
                                "e3": Arm("eagle3", lrs=(1e-3,), seeds=3, tier=2)},
                          reference="e1", primary=("c2",), budgets=(6,), extend_edge=0,
                          speed_claims=SpeedConfig(descriptive=("e3",)))
    names = [f"{a}/lr0.001-s{s}/b6" for a, n in (("c2", 2), ("e1", 2), ("e3", 3)) for s in range(n)]
    records = pd.DataFrame({"run": names, "arm": [n.split("/")[0] for n in names], "lr": 1e-3,
                            "seed": [int(n.split("-s")[1][0]) for n in names], "budget": 6, "share": 1.0, "dev": 1.5})
    experiment = SimpleNamespace(design=design, dev=lambda: {(a, 1e-3): 1.5 for a in design.arms},
                                 records=lambda: records, decay_share=0.2)
    assert list(speed.timed_drafts(experiment)) == [("c2", 0), ("c2", 1), ("e1", 0), ("e1", 1), ("e3", 0)]
    experiment.design = replace(design, speed_claims=SpeedConfig(descriptive=("nope",)))
    with pytest.raises(Clover2Error, match="descriptive names arms"):
        speed.timed_drafts(experiment)


def test_the_methods_orders_run_on_across_the_evaluations_chunks(monkeypatch):
    """Each prompt takes the next order of the Williams design, across chunks too (an interrupted evaluation
    resumes the design): with three methods, three orders and then the same reversed."""
    from dataclasses import replace as swap

    target = tiny_target("llama")
    calls = []

    def logged(m):
        return swap(m, run=lambda ids, run=m.run, label=m.label: (calls.append(label), run(ids))[1], warm_up=m.run)

    methods = [logged(make_method(m, target, DecodeConfig(max_new_tokens=2))) for m in ("ar", "pld", "suffix")]
    monkeypatch.setattr(speed, "CHUNK", 2)
    _unloaded(monkeypatch)
    speed.evaluate(methods, {p: [1, 2, 3 + p] for p in range(5)}, dict.fromkeys(range(5), "qa"), 0.05)
    firsts = [calls[3 * p] for p in range(5)]  # each prompt's first method
    assert firsts == ["ar", "pld", "suffix", "suffix", "ar"]
    assert calls[9:12] == ["suffix", "pld", "ar"]  # the fourth order: the first reversed


def test_a_draft_trained_again_is_remembered_even_if_its_replay_is_cut_short(monkeypatch, tmp_path):
    """The row of a draft trained again is written before its training: a process stopped between the training
    and the replay finishes the replay next time, rather than finding the draft kept and forgetting it was trained
    again."""
    from types import SimpleNamespace

    from clover2.research.design import Run

    run = Run("e1", 1e-3, 1, 6)
    folder = tmp_path / "cache" / run.name
    calls = []

    def train(r, record=True):
        calls.append(("train", r.name, record))
        folder.mkdir(parents=True)
        (folder / "draft.safetensors").write_bytes(b"w")
        (folder / "draft.json").write_text(json.dumps({"weights_sha256": "fresh", "run": r.name}))

    def publish_run(r, dest):
        calls.append(("publish", r.name))
        shutil.copytree(folder, dest)
        (dest / "draft.json").write_text(json.dumps({"weights_sha256": "bf16", "run": r.name}))

    def replayed(target, drafts, prompts, refs, trees):
        calls.append(("replay", *drafts))
        if calls.count(("replay", run.name)) == 1:
            raise KeyboardInterrupt  # stopped during the first replay
        return pd.DataFrame({"draft": [run.name], "tokens": [30], "steps": [20]})

    pd.DataFrame({"run": [run.name], "tree": ["eagle25"], "tokens": [30], "steps": [20]}).to_csv(
        tmp_path / "replays.csv", index=False)
    experiment = SimpleNamespace(folder=lambda r: folder, train=train, publish_run=publish_run,
                                 published=lambda: tmp_path / "drafts", root=tmp_path / "study",
                                 design=SimpleNamespace(trees=("eagle25",)), prompts=lambda: [("qa", [1, 2])],
                                 lab=SimpleNamespace(target=None), _references=lambda prompts: None,
                                 replays_csv=tmp_path / "replays.csv",
                                 records=lambda: pd.DataFrame({"run": [run.name], "weights_sha256": ["old"]}))
    monkeypatch.setattr(speed, "timed_drafts", lambda e: {("e1", 1): run})
    monkeypatch.setattr(speed, "replayed_steps", replayed)
    with pytest.raises(KeyboardInterrupt):
        speed.prepare_next(experiment)
    pending = pd.read_csv(speed.drafts_csv(experiment))
    assert pending.run.tolist() == [run.name] and pending.timed_tau.isna().all()
    shutil.rmtree(tmp_path / "cache")  # and the run's own folder is gone: the kept draft is enough
    assert speed.prepare_next(experiment) and calls == [("train", run.name, False), ("publish", run.name),
                                                        ("replay", run.name), ("replay", run.name)]  # trained once
    done = pd.read_csv(speed.drafts_csv(experiment)).iloc[0]
    assert (done.draft, done.timed_tau, done.committed_tau, done.trained_again_on) == (
        "seeds/e1-s1", 1.5, 1.5, machine()["cpu_name"])
    assert (done.trained_weights_sha256, done.committed_weights_sha256, done.timed_weights_sha256) == (
        "fresh", "old", "bf16")
    assert not speed.prepare_next(experiment)  # nothing left
