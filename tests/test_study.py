"""The study's caches: keyed by settings, target, drafts, machine and code, never by results on disk."""

from __future__ import annotations

import json
from dataclasses import replace

import pandas as pd
import pytest
from conftest import tiny_target

import clover2.research.study as study_module
from clover2.errors import Clover2Error
from clover2.profiles import load_profile
from clover2.research.study import Study


def _study(tmp_path, profile=None, family="llama"):
    return Study(profile=profile or load_profile("smoke"), target=tiny_target(family), results=tmp_path / "results")


def test_data_and_draft_folders_are_keyed_by_their_inputs_and_code(tmp_path, monkeypatch):
    monkeypatch.setenv("CLOVER2_CACHE", str(tmp_path / "cache"))
    base = _study(tmp_path)
    data, draft = base.data_dir, base.draft_dir("clover2")
    assert data.is_relative_to(tmp_path / "cache") and draft.is_relative_to(tmp_path / "cache")
    assert (base.data_dir, base.draft_dir("clover2")) == (data, draft)  # stable
    assert base.draft_dir("eagle1") != draft
    prof = base.profile
    longer = _study(tmp_path, replace(prof, train=replace(prof.train, max_steps=7)))
    assert longer.data_dir == data and longer.draft_dir("clover2") != draft
    more = _study(tmp_path, replace(prof, data=replace(prof.data, conversations=17)))
    assert more.data_dir != data and more.draft_dir("clover2") != draft
    assert _study(tmp_path, family="qwen2").data_dir != data  # another target
    monkeypatch.setattr(study_module, "code_version", lambda *parts: "other code")
    assert base.data_dir != data and base.draft_dir("clover2") != draft


def test_a_finished_bench_is_reused_only_while_nothing_it_depends_on_changed(tmp_path, monkeypatch):
    monkeypatch.setenv("CLOVER2_CACHE", str(tmp_path / "cache"))
    tasks = tmp_path / "question.jsonl"
    tasks.write_text("\n".join(json.dumps({"question_id": i, "category": "qa", "turns": [t]})
                               for i, t in enumerate(["abcabcabc", "xyzxyz"])) + "\n")
    prof = load_profile("smoke")
    study = _study(tmp_path, replace(prof, bench=replace(prof.bench, tasks=(str(tasks),), methods=("ar", "pld"),
                                                          max_new_tokens=4)))
    runs = []
    real = study_module.run_bench
    monkeypatch.setattr(study_module, "run_bench", lambda *a: runs.append(1) or real(*a))
    first = study.bench()
    (study.results / "bench" / "bench.csv").write_text("stale numbers in the results folder\n")
    again = study.bench()  # the cache, not the results folder, answers
    assert len(runs) == 1
    pd.testing.assert_frame_equal(first, again)
    assert pd.read_csv(study.results / "bench" / "bench.csv").shape == first.shape  # results rewritten
    study.bench(max_new_tokens=5)  # other settings
    monkeypatch.setattr(study_module, "code_version", lambda *parts: "other code")
    study.bench()  # other code
    assert len(runs) == 3


def test_reuse_renders_the_run_in_the_results_folder_without_measuring(tmp_path, monkeypatch):
    monkeypatch.setenv("CLOVER2_CACHE", str(tmp_path / "cache"))
    study = _study(tmp_path, load_profile("smoke"))
    monkeypatch.setattr(study_module, "run_bench", lambda *a: pytest.fail("reuse must not measure"))
    with pytest.raises(Clover2Error, match="no benchmark"):
        study.bench(reuse=True)
    (study.results / "bench").mkdir(parents=True)
    (study.results / "bench" / "bench.csv").write_text("method,tau\nar,1.0\n")
    assert study.bench(reuse=True).method.tolist() == ["ar"]
