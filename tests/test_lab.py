"""The lab's caches (the notebooks' workflow): keyed by settings, target, drafts, machine and code, never
by results on disk."""

from __future__ import annotations

import json
from dataclasses import replace

import pandas as pd
import pytest
from conftest import tiny_target

import clover2.research.lab as lab_module
from clover2.errors import Clover2Error
from clover2.profiles import load_profile
from clover2.research.lab import Lab, seed_spread, seeded, unseeded


def _lab(tmp_path, profile=None, family="llama"):
    return Lab(profile=profile or load_profile("smoke"), target=tiny_target(family), results=tmp_path / "results")


def test_data_and_draft_folders_are_keyed_by_their_inputs_and_code(tmp_path, monkeypatch):
    monkeypatch.setenv("CLOVER2_CACHE", str(tmp_path / "cache"))
    base = _lab(tmp_path)
    data, draft = base.data_dir, base.draft_dir("clover2")
    assert data.is_relative_to(tmp_path / "cache") and draft.is_relative_to(tmp_path / "cache")
    assert (base.data_dir, base.draft_dir("clover2")) == (data, draft)  # stable
    assert base.draft_dir("eagle1") != draft
    prof = base.profile
    longer = _lab(tmp_path, replace(prof, train=replace(prof.train, max_steps=7)))
    assert longer.data_dir == data and longer.draft_dir("clover2") != draft
    more = _lab(tmp_path, replace(prof, data=replace(prof.data, conversations=17)))
    assert more.data_dir != data and more.draft_dir("clover2") != draft
    assert _lab(tmp_path, family="qwen2").data_dir != data  # another target
    monkeypatch.setattr(lab_module, "code_version", lambda *parts: "other code")
    assert base.data_dir != data and base.draft_dir("clover2") != draft


def test_a_finished_bench_is_reused_only_while_nothing_it_depends_on_changed(tmp_path, monkeypatch):
    monkeypatch.setenv("CLOVER2_CACHE", str(tmp_path / "cache"))
    tasks = tmp_path / "question.jsonl"
    tasks.write_text("\n".join(json.dumps({"question_id": i, "category": "qa", "turns": [t]})
                               for i, t in enumerate(["abcabcabc", "xyzxyz"])) + "\n")
    prof = load_profile("smoke")
    lab = _lab(tmp_path, replace(prof, bench=replace(prof.bench, tasks=(str(tasks),), methods=("ar", "pld"),
                                                          max_new_tokens=4, threads=1)))
    runs = []
    real = lab_module.run_bench
    monkeypatch.setattr(lab_module, "run_bench", lambda *a: runs.append(1) or real(*a))
    first = lab.bench()
    (lab.results / "bench" / "bench.csv").write_text("stale numbers in the results folder\n")
    again = lab.bench()  # the cache, not the results folder, answers
    assert len(runs) == 1
    pd.testing.assert_frame_equal(first, again)
    assert pd.read_csv(lab.results / "bench" / "bench.csv").shape == first.shape  # results rewritten
    lab.bench(max_new_tokens=5)  # other settings
    monkeypatch.setattr(lab_module, "code_version", lambda *parts: "other code")
    lab.bench()  # other code
    assert len(runs) == 3


def test_reuse_renders_the_run_in_the_results_folder_without_measuring(tmp_path, monkeypatch):
    monkeypatch.setenv("CLOVER2_CACHE", str(tmp_path / "cache"))
    lab = _lab(tmp_path, load_profile("smoke"))
    monkeypatch.setattr(lab_module, "run_bench", lambda *a: pytest.fail("reuse must not measure"))
    with pytest.raises(Clover2Error, match="no benchmark"):
        lab.bench(reuse=True)
    (lab.results / "bench").mkdir(parents=True)
    (lab.results / "bench" / "bench.csv").write_text("method,tau\nar,1.0\n")
    assert lab.bench(reuse=True).method.tolist() == ["ar"]


def test_a_seeded_variant_is_the_same_draft_with_another_training_seed(tmp_path, monkeypatch):
    monkeypatch.setenv("CLOVER2_CACHE", str(tmp_path / "cache"))
    base = _lab(tmp_path)
    assert seeded("clover2-ttt7", 0) == "clover2-ttt7" and seeded("clover2-ttt7", 2) == "clover2-ttt7-seed2"
    assert unseeded("clover2-ttt7-seed2") == ("clover2-ttt7", 2) and unseeded("clover2") == ("clover2", None)
    assert base.draft_config("clover2-ttt7-seed2") == base.draft_config("clover2-ttt7")
    assert base.train_config("clover2-ttt7-seed2") == replace(base.train_config("clover2-ttt7"), seed=2)
    assert base.draft_dir("clover2-seed1") != base.draft_dir("clover2")
    with pytest.raises(Clover2Error, match="unknown draft variant"):
        base.draft_config("clover9-seed1")


def test_seed_spread_sets_seeds_beside_prompts():
    def rows(draft, lengths):
        return [{"draft": draft, "tree": "eagle25", "prompt": p, "task": "qa", "tokens": sum(ls), "steps": len(ls)}
                for p, ls in enumerate(lengths)]
    good, bad = [[2, 2, 3]] * 6, [[1, 1, 2]] * 6
    steps = pd.DataFrame(rows("clover2", good) + rows("eagle1", bad) + rows("clover2-seed1", good)
                         + rows("eagle1-seed1", [[2, 2, 3]] * 6))  # seed 1: the two tie
    per_seed, spread = seed_spread(steps, n_boot=200)
    assert set(zip(per_seed.variant, per_seed.seed)) == {("clover2", 0), ("eagle1", 0), ("clover2", 1), ("eagle1", 1)}
    eagle = spread.set_index("variant").loc["eagle1"]
    assert eagle.seeds == 2 and eagle.beyond_noise_in == 1 and eagle.tau_min == pytest.approx(4 / 3)
    assert eagle.tau_sd > 0 and spread.set_index("variant").loc["clover2", "tau_sd"] == 0
