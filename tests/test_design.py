"""The designed study: its plan (grids, chosen rates, seeds, branches, the curve), the dev measure, and
a whole small study on a tiny target that trains, records, replays, resumes and says where it stands."""

from __future__ import annotations

import json
import math
import shutil
from dataclasses import replace

import pandas as pd
import pytest
import torch
from conftest import tiny_target
from safetensors.torch import load_file
from test_training import fake_data

from clover2.drafts.checkpoint import load_draft, probe
from clover2.errors import Clover2Error
from clover2.profiles import load_profile
from clover2.research.design import (
    Arm,
    DesignConfig,
    Experiment,
    chosen_lr,
    decay_start,
    dev_measure,
    grid,
    plan,
    steps_left,
)
from clover2.research.lab import Lab
from clover2.research.verdicts import analyze, page

DESIGN = DesignConfig(arms={"c2": Arm("clover2", lrs=(1e-3, 3e-3), seeds=2),
                            "e1": Arm("eagle1", lrs=(1e-3, 3e-3), seeds=2),
                            "abl": Arm("clover2-no-projector", lr_from="c2", seeds=1, tier=3)},
                      reference="e1", primary=("c2",), budgets=(5, 10), curve=(20,), half_data=0.5,
                      n_per_task=1, max_new_tokens=6, main_trees=("chain1",), n_boot=50)


def test_the_shipped_study_profile_is_the_protocols_design():
    design = DesignConfig.of(load_profile("study"))
    assert design.primary == ("clover2-official", "clover2") and design.reference == "eagle1"
    assert design.arms["clover2-official"].variant == "clover2-value-gain-1"
    assert all(len(design.arms[a].lrs) >= 3 and design.arms[a].seeds >= 5 for a in (*design.primary, "eagle1"))
    assert design.main == 600 and load_profile("study").train.schedule == "wsd"


def test_a_plan_runs_each_grid_then_the_seeds_at_the_chosen_rate_then_the_curve():
    runs = plan(DESIGN, {}, 0.2)  # the reference's grid first: it is in every primary comparison
    assert [r.name for r in runs] == ["e1/lr0.001-s0/b10", "e1/lr0.001-s0/b5", "e1/lr0.003-s0/b10", "e1/lr0.003-s0/b5",
                                      "c2/lr0.001-s0/b10", "c2/lr0.001-s0/b5", "c2/lr0.003-s0/b10", "c2/lr0.003-s0/b5"]
    main, short = runs[4:6]
    assert (decay_start(5, 0.2) == 4 and main.states == (4, 8)
            and (short.parent, short.parent_step, short.steps) == (main, 4, 1))
    dev = {("c2", 1e-3): 1.4, ("c2", 3e-3): 1.3, ("e1", 1e-3): 1.2, ("e1", 3e-3): 1.25}
    fixed = replace(DESIGN, extend_edge=0)
    assert (chosen_lr(fixed, "c2", dev) == 1e-3 and chosen_lr(fixed, "abl", dev) == 1e-3
            and chosen_lr(fixed, "e1", {}) is None)
    names = [r.name for r in plan(fixed, dev, 0.2)]
    assert names[8:] == ["e1/lr0.003-s1/b10", "e1/lr0.003-s1/b5", "c2/lr0.001-s1/b10", "c2/lr0.001-s1/b5",
                         "c2/lr0.001-s0/b20", "c2/lr0.001-s0-share0.5/b10",
                         "e1/lr0.003-s0/b20", "e1/lr0.003-s0-share0.5/b10", "abl/lr0.001-s0/b10", "abl/lr0.001-s0/b5"]
    three = replace(fixed, arms={k: replace(v, seeds=3) for k, v in fixed.arms.items()})
    seeds = [r.name for r in plan(three, dev, 0.2)[8:16]]  # the reference's first
    assert seeds == ["e1/lr0.003-s1/b10", "e1/lr0.003-s1/b5", "e1/lr0.003-s2/b10", "e1/lr0.003-s2/b5",
                     "c2/lr0.001-s1/b10", "c2/lr0.001-s1/b5", "c2/lr0.001-s2/b10", "c2/lr0.001-s2/b5"]
    long = plan(fixed, dev, 0.2)[12]
    assert long.parent.name == "c2/lr0.001-s0/b10" and long.parent_step == 8 and long.steps == 12
    # the protocol's rule: an edge winner extends the grid by one value beyond it, once, and the choice waits
    assert grid(DESIGN, "c2", dev) == (3.3e-4, 1e-3, 3e-3) and chosen_lr(DESIGN, "c2", dev) is None
    assert grid(DESIGN, "e1", dev) == (1e-3, 3e-3, 9e-3)
    assert chosen_lr(DESIGN, "c2", dev | {("c2", 3.3e-4): 1.1}) == 1e-3
    assert grid(DESIGN, "c2", dev | {("c2", 3.3e-4): 1.5}) == (3.3e-4, 1e-3, 3e-3)  # extended once only
    assert chosen_lr(DESIGN, "c2", dev | {("c2", 3.3e-4): 1.5}) == 3.3e-4


def test_amendment_one_extends_a_grid_until_its_best_is_interior_then_refines_by_half_steps():
    design = replace(DESIGN, extend_edge=6, arms=DESIGN.arms | {"c2": replace(DESIGN.arms["c2"], refine=True)})
    dev = {("c2", 1e-3): 1.3, ("c2", 3e-3): 1.4}
    assert grid(design, "c2", dev) == (1e-3, 3e-3, 9e-3) and chosen_lr(design, "c2", dev) is None
    dev |= {("c2", 9e-3): 1.5}  # still climbing at the new edge: one more, at two significant digits
    assert grid(design, "c2", dev) == (1e-3, 3e-3, 9e-3, 0.027)
    dev |= {("c2", 0.027): 1.45}  # turned down: the best is interior, so a half step each side of it
    assert grid(design, "c2", dev) == (1e-3, 3e-3, 0.0052, 9e-3, 0.016, 0.027)
    assert chosen_lr(design, "c2", dev) is None  # waits for the half steps
    assert chosen_lr(design, "c2", dev | {("c2", 0.0052): 1.49, ("c2", 0.016): 1.52}) == 0.016
    assert chosen_lr(design, "c2", dev | {("c2", 0.0052): 1.49, ("c2", 0.016): 1.47}) == 9e-3
    # an arm that does not refine stops at the interior x3 grid; an edge winner with no extensions left is not refined
    assert grid(replace(design, arms=DESIGN.arms), "c2", dev) == (1e-3, 3e-3, 9e-3, 0.027)
    assert grid(replace(design, extend_edge=1), "c2", dev) == (1e-3, 3e-3, 9e-3)
    with pytest.raises(Clover2Error, match="extend_edge"):
        replace(DESIGN, extend_edge=99)


def test_the_curve_keeps_its_rate_and_the_replicate_waits_for_its_arms_rate():
    dev = {("c2", 1e-3): 1.4, ("c2", 3e-3): 1.3, ("e1", 1e-3): 1.2, ("e1", 3e-3): 1.25}
    design = replace(DESIGN, extend_edge=0, curve_lrs={"c2": 3e-3}, replicate=("e1", 1))
    names = [r.name for r in plan(design, dev, 0.2)]
    assert "c2/lr0.003-s0/b20" in names and "c2/lr0.001-s0/b20" not in names
    assert names.index("e1-replicate/lr0.003-s1/b10") == names.index("c2/lr0.001-s1/b5") + 1  # after tier 1
    assert not any("replicate" in r.name for r in plan(design, {}, 0.2))
    with pytest.raises(Clover2Error, match="replicate"):
        replace(design, replicate=("e1", 7))


def test_a_cut_arm_is_never_planned_and_never_waits():
    dev = {("c2", 1e-3): 1.4, ("c2", 3e-3): 1.3, ("e1", 1e-3): 1.2, ("e1", 3e-3): 1.25}
    design = replace(DESIGN, extend_edge=0, arms=DESIGN.arms | {"abl": replace(DESIGN.arms["abl"], cut=True)})
    assert design.cut == ("abl",) and not any(r.arm == "abl" for r in plan(design, dev, 0.2))
    assert any(r.arm == "abl" for r in plan(replace(design, arms=DESIGN.arms, extend_edge=False), dev, 0.2))


@pytest.mark.parametrize("bad, match", [({"reference": "x"}, "must be arms"), ({"budgets": (10, 5)}, "increasing"),
                                        ({"curve": (8,)}, "beyond the main"), ({"half_data": 1.0}, "half_data"),
                                        ({"arms": DESIGN.arms | {"c2": replace(DESIGN.arms["c2"], cut=True)}},
                                         "cannot be cut")])
def test_a_nonsense_design_is_refused(bad, match):
    with pytest.raises(Clover2Error, match=match):
        replace(DESIGN, **bad)
    with pytest.raises(Clover2Error, match="lrs or lr_from"):
        Arm("clover2", lrs=(1e-3,), lr_from="c2")


def test_the_dev_measure_is_the_chain_length_of_the_pooled_head_accuracies():
    ev = {"qa_tokens": 30.0, "qa_head0_top1": 0.5, "qa_head1_top1": 0.2,
          "sharegpt_tokens": 10.0, "sharegpt_head0_top1": 0.9, "sharegpt_head1_top1": 0.6, "head0_top1": 0.1}
    a0, a1 = (30 * 0.5 + 10 * 0.9) / 40, (30 * 0.2 + 10 * 0.6) / 40
    assert dev_measure(ev) == pytest.approx(1 + a0 + a0 * a1)
    with pytest.raises(Clover2Error, match="per-category"):
        dev_measure({"head0_top1": 0.5})


class _Lab(Lab):
    """A Lab whose data is prepared already (fake data, no ShareGPT labelling), for a tiny target."""

    def prepare_data(self, data_dir=None, eval_dir=None):
        assert (data_dir / "meta.json").exists() and (eval_dir / "meta.json").exists()
        return {}


def test_a_small_study_trains_records_replays_and_resumes(tmp_path, monkeypatch):
    monkeypatch.setenv("CLOVER2_CACHE", str(tmp_path / "cache"))
    target = tiny_target("llama")
    smoke = load_profile("smoke")
    prof = replace(smoke, name="tiny-study", design=replace(DESIGN, curve=(), half_data=0.0, extend_edge=0, arms={
        k: v for k, v in DESIGN.arms.items() if k != "abl"}, replicate=("e1", 1)),
        train=replace(smoke.train, schedule="wsd", eval_every=100, max_len=32, batch_size=4), draft={"draft_vocab": 48})
    lab = _Lab(profile=prof, target=target, results=tmp_path / "results")
    experiment = Experiment(lab)
    fake_data(experiment.data_dir, target)
    shutil.copytree(experiment.data_dir, experiment.eval_dir)
    monkeypatch.setattr(Experiment, "prompts", lambda self: [("qa", [1, 2, 3, 4]), ("mt_bench", [5, 6, 7])])
    for _ in range(3):  # the reference's grid first: its two runs at the first rate, then the second rate's main run
        assert experiment.next_step()
    status = experiment.status()
    assert status.state.tolist()[:4] == ["done", "done", "done", "to do"]
    # e1's grid has both main-budget runs: its rate is chosen and its seed 1 is planned; c2's waits
    assert set(status[status.state == "waits for the grid"].arm) == {"c2"} and (status.arm == "e1").sum() == 6
    experiment.run()
    runs, replays = pd.read_csv(lab.results / "runs.csv"), pd.read_csv(lab.results / "replays.csv")
    sitting = pd.read_csv(lab.results / "sittings.csv").iloc[-1]  # the study's machine time, sitting by sitting
    assert sitting.ended == "finished" and sitting.runs_trained == 9 and sitting.seconds > 0 and sitting.cpu
    # the machine replicate waits for another CPU kind than the one that trained its original (this one)
    state = experiment.status().set_index("run").state
    twin = f"e1-replicate/lr{chosen_lr(DesignConfig.of(prof), 'e1', experiment.dev()):g}-s1/b10"
    assert len(runs) == 12 and state.pop(twin) == "waits for another CPU kind"
    assert set(state) == {"done"} and set(replays.cpu) == {runs.cpu.iloc[0]}  # each replay names its machine
    chosen = {a: chosen_lr(DesignConfig.of(prof), a, experiment.dev()) for a in ("c2", "e1")}
    evaluated = runs[runs.lr == runs.arm.map(chosen)]
    assert set(replays.run) == set(evaluated.run)
    # two prompts; chain1 at the main budget
    assert len(replays) == 2 * (len(evaluated) + (evaluated.budget == 10).sum())
    assert (runs.epochs > 0).all() and runs.dev.between(1, 3).all() and {"top1_head0", "cpu", "commit"} <= set(runs)
    assert not experiment.next_step()  # nothing left: the study is finished
    speed = pd.read_csv(lab.results / "speed" / "bench.csv")  # the primary pair timed, float, named apart
    assert (set(speed.method) == {"ar", "clover2@eagle25=c2", "eagle1@eagle25=e1"}
            and set(speed.draft_weights.dropna()) == {"float"})
    branch = runs.set_index("run").loc["c2/lr0.001-s0/b5"]
    assert branch.budget == 5 and branch.tokens < runs.set_index("run").loc["c2/lr0.001-s0/b10"].tokens
    assert branch.own_steps == 1 and 0 < branch.own_seconds < branch.train_seconds  # its own step, not its parent's
    kept = torch.load(experiment.folder(experiment.plan()[0]) / "states" / "step_000004.pt", weights_only=False)
    assert kept["state"]["step"] == 4
    # the results page and its tables come from the records alone
    tables = analyze(DesignConfig.of(prof), runs, replays, experiment.dev())
    assert {"grid", "spread", "verdicts", "power", "curve", "fits", "data"} <= set(tables)
    assert tables["verdicts"].family.iloc[0] == "primary" and tables["grid"].chosen.sum() == 2
    text = page(DesignConfig.of(prof), tables, experiment.status(), machine="a test CPU", commits="abc")
    assert "**c2 / e1**" in text and "Every planned run is done (" in text
    # seed 0 of each arm published in bf16, loadable, and replayed against its committed tau
    published = experiment.publish()
    assert [p.name for p in published] == ["c2", "e1"]
    assert {v.dtype for v in load_file(published[0] / "draft.safetensors").values()
            if v.is_floating_point()} == {torch.bfloat16}
    sidecar = json.loads((published[0] / "draft.json").read_text())  # with what it computes on a fixed prompt
    assert sidecar["probe"] == probe(load_draft(published[0], target), target) and len(sidecar["probe"]["tokens"]) == 3
    check = experiment.check_published()
    assert check.arm.tolist() == ["c2", "e1"] and check.difference.abs().max() < 0.5
    one = experiment.check_published(["e1"])  # one arm's draft alone: the same row
    assert one.arm.tolist() == ["e1"] and one.published_tau.iloc[0] == check.published_tau.iloc[1]
    with pytest.raises(Clover2Error, match="no published draft for nope"):
        experiment.check_published(["nope"])
    # on a machine without the cache the parent's kept states are gone: the branch trains from step 0,
    # and that is the same run (the same weights)
    short = next(r for r in experiment.plan() if r.parent is not None)
    torch.set_num_threads(1)  # as it trained: the speed run took every CPU, and another thread count rounds otherwise
    weights = runs.set_index("run").weights_sha256
    shutil.rmtree(experiment.folder(short.parent) / "states")
    shutil.rmtree(experiment.folder(short))
    runs[runs.run != short.name].to_csv(lab.results / "runs.csv", index=False)
    assert experiment.status().set_index("run").loc[short.name, "steps"] == short.budget  # all of it, not its tail
    experiment.train(short)
    again = pd.read_csv(lab.results / "runs.csv").set_index("run")
    assert again.loc[short.name, "weights_sha256"] == weights[short.name] and len(again) == len(runs)
    assert again.loc[short.name, "own_steps"] == short.budget
    # a machine without the cache keeps what was published
    shutil.rmtree(experiment.folder(experiment.plan()[0]))
    assert [p.name for p in experiment.publish()] == ["c2", "e1"]
    # on another CPU kind the replicate trains and replays under an arm of its own, which no comparison reads
    again.reset_index().assign(cpu="another CPU").to_csv(lab.results / "runs.csv", index=False)
    while experiment.next_step():
        pass
    runs, replays = pd.read_csv(lab.results / "runs.csv"), pd.read_csv(lab.results / "replays.csv")
    twin = runs.set_index("run").loc[twin]
    assert twin.arm == "e1-replicate" and twin.seed == 1 and (replays.arm == "e1-replicate").sum() == 4
    assert analyze(DesignConfig.of(prof), runs, replays, experiment.dev())["verdicts"].equals(tables["verdicts"])


def test_a_profile_without_a_design_or_with_another_schedule_is_refused(tmp_path):
    smoke = load_profile("smoke")
    lab = _Lab(profile=smoke, target=tiny_target("llama"), results=tmp_path)
    with pytest.raises(Clover2Error, match="no design section"):
        Experiment(lab)
    with pytest.raises(Clover2Error, match="warmup-stable-decay"):
        Experiment(replace(lab, profile=replace(smoke, design=DESIGN)))


def test_the_study_keeps_its_data_and_runs_when_the_code_changes(tmp_path, monkeypatch):
    import clover2.research.lab as lab_module

    monkeypatch.setenv("CLOVER2_CACHE", str(tmp_path / "cache"))
    smoke = load_profile("smoke")
    prof = replace(smoke, train=replace(smoke.train, schedule="wsd"), design=DESIGN)
    experiment = Experiment(_Lab(profile=prof, target=tiny_target("llama"), results=tmp_path))
    before = (experiment.data_dir, experiment.eval_dir, experiment.root, experiment.lab.data_dir)
    monkeypatch.setattr(lab_module, "code_version", lambda *parts: "other code")
    after = (experiment.data_dir, experiment.eval_dir, experiment.root, experiment.lab.data_dir)
    assert before[:3] == after[:3] and before[3] != after[3]  # the notebooks' cache moves on; the study's does not
    assert len({p.name.split("-")[0] for p in after[:3]}) == 3
    other = Experiment(_Lab(profile=replace(prof, data=replace(prof.data, tokens=prof.data.tokens + 1)),
                              target=tiny_target("llama"), results=tmp_path))
    assert other.data_dir != experiment.data_dir


def test_a_sitting_stopped_by_sigterm_is_logged(tmp_path, monkeypatch):
    import os
    import signal

    monkeypatch.setenv("CLOVER2_CACHE", str(tmp_path / "cache"))
    smoke = load_profile("smoke")
    prof = replace(smoke, train=replace(smoke.train, schedule="wsd"), design=DESIGN)
    experiment = Experiment(_Lab(profile=prof, target=tiny_target("llama"), results=tmp_path))
    monkeypatch.setattr(Experiment, "next_step", lambda self, timing: os.kill(os.getpid(), signal.SIGTERM) or True)
    handler = signal.getsignal(signal.SIGTERM)
    with pytest.raises(SystemExit):
        experiment.run()
    sitting = pd.read_csv(experiment.sittings_csv)
    assert sitting.ended.tolist() == ["interrupted"] and sitting.runs_trained.tolist() == [0]
    assert signal.getsignal(signal.SIGTERM) is handler  # the sitting's handler is gone with it


def test_a_sitting_killed_outright_leaves_its_row_as_of_its_last_step(tmp_path, monkeypatch):
    """SIGKILL (a machine stopped) runs no `finally`: the sitting's row, written after every step, stays as of the
    last step, marked running; the next sitting adds its own row beside it."""
    smoke = load_profile("smoke")
    prof = replace(smoke, train=replace(smoke.train, schedule="wsd"), design=DESIGN)
    experiment = Experiment(_Lab(profile=prof, target=tiny_target("llama"), results=tmp_path))
    steps = iter([True, True])

    def step(self, timing):
        if next(steps, None) is None:
            raise BaseException("killed")  # nothing after this runs in a real kill: the finally's row is dropped
        return True
    monkeypatch.setattr(Experiment, "next_step", step)
    written = []
    monkeypatch.setattr("clover2.research.design.write_csv", lambda path, df: written.append(df.copy()))
    with pytest.raises(BaseException, match="killed"):
        experiment.run()
    assert [w.ended.tolist() for w in written] == [["running"]] * 3 + [["interrupted"]]
    last_alive = written[-2]  # what a SIGKILL would have left: one row, as of the second step
    assert len(last_alive) == 1 and last_alive.ended.iloc[0] == "running"


def test_the_evaluation_prompts_seen_in_development_are_those_the_developed_on_profile_samples_too():
    """The study's value gain was developed on the `cpu` profile's benchmark prompts: the evaluation prompts that
    sample shares are named by their places, so the results page can read the comparisons without them."""
    from types import SimpleNamespace

    from clover2.profiles import load_profile
    from clover2.training.tasks import load_task

    study, cpu = load_profile("study"), load_profile("cpu")
    experiment = SimpleNamespace(design=DesignConfig.of(study), lab=SimpleNamespace(profile=study))
    seen = Experiment.seen_in_development(experiment)
    records = [r for t in study.bench.tasks for r in load_task(t, experiment.design.n_per_task)]
    developed = {r.turns for t in cpu.bench.tasks for r in load_task(t, cpu.bench.n_per_task, cpu.bench.seed)}
    assert seen == [i for i, r in enumerate(records) if r.turns in developed]
    assert len(seen) == 12 and len(developed) == 24  # half the cpu profile's sample is among the study's 131
    experiment.design = replace(experiment.design, developed_on="")
    assert Experiment.seen_in_development(experiment) == []


def test_the_status_prices_the_training_left_at_this_cpus_pace():
    """Hours left: each run's steps still to go (from its checkpoint's step; a branch from its parent's) at its
    arm's median seconds a step on this CPU kind, an untrained part at its parent arm's, an arm without either
    named and not counted."""
    import types

    from clover2.measure.provenance import machine

    here = machine()["cpu_name"]
    records = pd.DataFrame({"arm": ["c2", "c2", "e1", "e1"], "cpu": [here, here, here, "another CPU"],
                            "seconds_per_step": [1.0, 3.0, 0.5, 9.0]})
    design = replace(DESIGN, arms=DESIGN.arms | {"np": Arm("clover2", lr_from="c2", tier=3),
                                                 "m": Arm("medusa", lrs=(1e-3,))})
    stub = types.SimpleNamespace(records=lambda: records, design=design)
    stub.pace = lambda: Experiment.pace(stub)
    table = pd.DataFrame({"arm": ["c2", "c2", "e1", "np", "m", "e1"], "budget": [600, 300, 600, 600, 600, 600],
                          "steps": [600, 60, 600, 600, 600, math.nan], "reached": [300, 270, 0, 0, 0, 0],
                          "state": ["at step 300", "at step 270", "done", "to do", "to do", "waits for the grid"]})
    hours, unpriced = Experiment.hours_left(stub, table)
    # c2: 300 steps left, and 30 of its branch's 60 (from 240), at 2 s; np: 600 at c2's 2 s; m: not priced
    assert hours == pytest.approx((300 + 30 + 600) * 2.0 / 3600) and unpriced == ["m"]
    left = steps_left(table)  # what `clover2 study status` says is left: the same steps, a done run none
    assert left.tolist()[:5] == [300, 30, 0, 600, 600] and math.isnan(left.iloc[5])
