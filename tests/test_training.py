"""Training: the loss goes down, an interrupted run resumes to the same weights, two torchrun
processes match one, and bad checkpoints or data are refused with clear errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import VOCAB, tiny_target
from safetensors.torch import load_file

import clover2.training.train as train_mod
from clover2.decoding.decode import DecodeConfig, generate
from clover2.decoding.drafter import NoDrafter
from clover2.decoding.target import load_target
from clover2.decoding.tree import EAGLE_25
from clover2.drafts import build_draft
from clover2.drafts.checkpoint import load_draft
from clover2.drafts.config import DraftConfig
from clover2.drafts.drafter import ModelDrafter
from clover2.errors import Clover2Error
from clover2.files import write_json
from clover2.training.data import ARRAYS, DistillData, finalize
from clover2.training.train import TrainConfig, _forward, train

ROOT = Path(__file__).resolve().parent.parent


def fake_data(folder: Path, target, *, seqs: int = 24, length: int = 20, k: int = 4, seed: int = 0,
              source: str = "corpus") -> Path:
    """A data folder in the real format, from the tiny target's own greedy continuations."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    write_json(folder / "meta.json", {"target": target.identity(), "config": {}, "complete": False})
    for shard in range(2):
        parts = {a: [] for a in ARRAYS}
        lengths = []
        for _ in range(seqs // 2):
            ids = torch.tensor(rng.integers(0, VOCAB, length))
            with torch.no_grad():
                out = target.forward(ids[None], torch.arange(length)[None],
                                     torch.full((length, length), -1e9).triu(1)[None, None], target.new_cache(),
                                     hidden=True)
            top = torch.log_softmax(out.logits[0], -1).topk(k)
            parts["ids"].append(ids.numpy().astype(np.int32))
            parts["hidden"].append(out.hidden[0].numpy().astype(np.float16))
            parts["topk_ids"].append(top.indices.numpy().astype(np.int32))
            parts["topk_logp"].append(top.values.numpy().astype(np.float16))
            parts["response"].append(np.arange(length) >= length // 3)
            lengths.append(length)
        d = folder / f"shard_{shard:05d}"
        d.mkdir()
        for a, p in parts.items():
            np.save(d / f"{a}.npy", np.concatenate(p))
        np.save(d / "offsets.npy", np.concatenate([[0], np.cumsum(lengths)]))
        write_json(d / "stats.json", {"source": source, "tokens": sum(lengths), "conversations": len(lengths),
                                      "answer_seconds": 0.0, "label_seconds": 1.0})
    finalize(folder, 2)
    return folder


CFG = TrainConfig(batch_size=4, max_len=32, max_steps=6, eval_every=3, eval_batches=1, warmup_steps=2,
                  held_out=0.2, lr=3e-3)


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory):
    """A tiny Llama saved as a checkpoint folder, so that subprocesses can load it by path."""
    folder = tmp_path_factory.mktemp("tiny") / "llama"
    tiny_target("llama").model.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def target(tiny_folder):
    return load_target(str(tiny_folder), dtype="float32", kernels="stock")


@pytest.fixture(scope="module")
def data(target, tmp_path_factory):
    return fake_data(tmp_path_factory.mktemp("data") / "d", target)


@pytest.mark.parametrize("arch", ["clover2", "eagle1", "medusa", "clover1"])
def test_training_lowers_the_held_out_loss(target, data, tmp_path, arch):
    cfg = replace(CFG, max_steps=12, eval_every=12)
    dc = DraftConfig.for_arch(arch, num_heads=3)
    torch.manual_seed(cfg.seed)
    untrained = build_draft(dc, target)
    first = train_mod.evaluate(untrained, DistillData(data), DistillData(data).split(cfg.held_out)[1],
                               torch.arange(VOCAB), cfg, target.device)
    final = train(target, data, tmp_path / arch, dc, cfg)
    assert final["loss"] < first["loss"]
    lines = [json.loads(x) for x in (tmp_path / arch / "metrics.jsonl").read_text().splitlines()]
    assert lines[-1]["step"] == 12 and "eval_head0_top1" in lines[-1]


def test_interrupted_training_resumes_to_the_same_weights(target, data, tmp_path, monkeypatch):
    dc = DraftConfig(num_heads=3, draft_vocab=48)
    train(target, data, tmp_path / "straight", dc, CFG)
    real_save = train_mod._Run.save_state

    def save_then_die(*args, **kwargs):
        real_save(*args, **kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(train_mod._Run, "save_state", save_then_die)
    with pytest.raises(KeyboardInterrupt):
        train(target, data, tmp_path / "resumed", dc, CFG)
    monkeypatch.setattr(train_mod._Run, "save_state", real_save)
    train(target, data, tmp_path / "resumed", dc, CFG)
    a = load_file(tmp_path / "straight" / "draft.safetensors")
    b = load_file(tmp_path / "resumed" / "draft.safetensors")
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(a[key], b[key], atol=0, rtol=0)


def test_checkpoints_between_evaluations_change_nothing_and_resume_exactly(target, data, tmp_path, monkeypatch):
    """`checkpoint_every` saves the state between evaluations: the weights are those of a run without
    it, and a run killed right after such a checkpoint resumes from it to the same weights."""
    dc, cfg = DraftConfig(num_heads=3, draft_vocab=48), replace(CFG, max_steps=12, eval_every=12, checkpoint_every=5)
    train(target, data, tmp_path / "plain", dc, replace(cfg, checkpoint_every=0))
    real_save = train_mod._Run.save_state
    saved = []

    def save_then_die(run, path, state, best):
        real_save(run, path, state, best)
        saved.append(state["step"])
        if state["step"] == 5:
            raise KeyboardInterrupt

    monkeypatch.setattr(train_mod._Run, "save_state", save_then_die)
    with pytest.raises(KeyboardInterrupt):
        train(target, data, tmp_path / "cut", dc, cfg)
    train(target, data, tmp_path / "cut", dc, cfg)
    assert saved == [5, 10, 12]  # the checkpoints between evaluations, then the evaluation's
    a, b = load_file(tmp_path / "plain" / "draft.safetensors"), load_file(tmp_path / "cut" / "draft.safetensors")
    for key in a:
        torch.testing.assert_close(a[key], b[key], atol=0, rtol=0)


def test_resuming_with_other_settings_is_refused(target, data, tmp_path):
    train(target, data, tmp_path / "x", DraftConfig(num_heads=3), replace(CFG, max_steps=3))
    with pytest.raises(Clover2Error, match="other settings"):
        train(target, data, tmp_path / "x", DraftConfig(num_heads=2), replace(CFG, max_steps=3))


def test_two_torchrun_processes_match_one(tiny_folder, target, data, tmp_path):
    profile = tmp_path / "p.yaml"
    profile.write_text(f"target: {tiny_folder}\ndtype: float32\ntrain:\n  batch_size: 4\n  max_len: 32\n"
                       "  max_steps: 40\n  eval_every: 2\n  eval_batches: 1\n  warmup_steps: 2\n  held_out: 0.2\n")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    common = ["-m", "clover2.cli", "train", "--profile", str(profile), "--arch", "clover2", "--data", str(data),
              "--set", "train.max_steps=4", "--set", "draft.num_heads=3"]  # settings from the command line
    subprocess.run([sys.executable, *common, "--out", str(tmp_path / "one")], check=True, env=env, cwd=ROOT,
                   capture_output=True)
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", "29517",
                    *common, "--out", str(tmp_path / "two")], check=True, env=env, cwd=ROOT, capture_output=True)
    one = [json.loads(x) for x in (tmp_path / "one" / "metrics.jsonl").read_text().splitlines()]
    two = [json.loads(x) for x in (tmp_path / "two" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in one] == [r["step"] for r in two] == [2, 4]
    assert json.loads((tmp_path / "one" / "draft.json").read_text())["draft_config"]["num_heads"] == 3
    for r1, r2 in zip(one, two):
        assert r1["train_loss"] == pytest.approx(r2["train_loss"], rel=1e-4)
        assert r1["eval_loss"] == pytest.approx(r2["eval_loss"], rel=1e-4)
    a = load_file(tmp_path / "one" / "draft.safetensors")
    b = load_file(tmp_path / "two" / "draft.safetensors")
    for key in a:
        torch.testing.assert_close(a[key], b[key], atol=1e-5, rtol=1e-4)


def test_the_train_command_measures_no_kernels(tiny_folder, data, tmp_path, monkeypatch):
    """Training never runs the target, so `clover2 train` loads it with PyTorch's own kernels instead of
    timing every kernel first (minutes on a loaded machine, for nothing)."""
    import clover2.decoding.kernels as kernels
    from clover2.cli import main

    def measure(*args, **kwargs):
        raise AssertionError("clover2 train timed the target's kernels")

    monkeypatch.setattr(kernels, "measure", measure)
    profile = tmp_path / "p.yaml"
    profile.write_text(f"target: {tiny_folder}\ndtype: float32\ntrain:\n  batch_size: 4\n  max_len: 32\n"
                       "  max_steps: 2\n  eval_every: 2\n  eval_batches: 1\n  warmup_steps: 1\n  held_out: 0.2\n")
    assert main(["train", "--profile", str(profile), "--arch", "clover2", "--data", str(data),
                 "--out", str(tmp_path / "d")]) == 0
    assert (tmp_path / "d" / "draft.safetensors").exists()


def test_draft_for_another_target_is_refused(target, data, tmp_path):
    train(target, data, tmp_path / "d", DraftConfig(num_heads=2), replace(CFG, max_steps=2, eval_every=2))
    other = tiny_target("llama", seed=1)  # same shapes, other weights
    with pytest.raises(Clover2Error, match="trained for target"):
        load_draft(tmp_path / "d", other)
    assert load_draft(tmp_path / "d", target).config.num_heads == 2


def test_a_draft_serves_its_target_loaded_in_bf16(target, data, tmp_path):
    """The same weights in another precision are the same target: a draft trained on the float32
    model loads onto it in bf16 (what `--dtype auto` gives on a CPU with native bf16) and decodes
    exactly as plain decoding does there."""
    import copy

    from clover2.decoding.target import Target

    train(target, data, tmp_path / "d", DraftConfig(num_heads=2), replace(CFG, max_steps=2, eval_every=2))
    bf16 = Target(model=copy.deepcopy(target.model).to(torch.bfloat16), tokenizer=target.tokenizer, name=target.name)
    assert bf16.fingerprint() != target.fingerprint() and bf16.fingerprint(torch.bfloat16) == target.fingerprint(
        torch.bfloat16)
    draft = load_draft(tmp_path / "d", bf16)
    prompt, config = [3, 9, 4, 17, 3, 9, 4], DecodeConfig(max_new_tokens=12)
    assert generate(bf16, ModelDrafter(draft, EAGLE_25), prompt, config).output_ids == \
        generate(bf16, NoDrafter(), prompt, config).output_ids


def test_int8_draft_weights_change_the_speed_not_the_output(target, data, tmp_path):
    train(target, data, tmp_path / "d", DraftConfig(num_heads=3), replace(CFG, max_steps=2, eval_every=2))
    int8 = load_draft(tmp_path / "d", target, weights="int8")
    quantized = [m for m in int8.modules() if "quantized" in type(m).__module__]
    assert quantized and not any(type(m) is torch.nn.Linear for m in int8.modules())
    config = DecodeConfig(max_new_tokens=20)
    for prompt in ([3, 9, 4, 17, 3, 9, 4], list(range(5, 40)), [7] * 12):
        plain = generate(target, NoDrafter(), prompt, config).output_ids
        assert generate(target, ModelDrafter(int8, EAGLE_25), prompt, config).output_ids == plain
    assert "quantized" in type(load_draft(tmp_path / "d", target, weights="auto").lm_head).__module__  # a CPU: int8
    assert type(load_draft(tmp_path / "d", target).lm_head) is torch.nn.Linear  # default: as trained
    with pytest.raises(Clover2Error, match="unknown draft weights"):
        load_draft(tmp_path / "d", target, weights="fp8")


def test_corrupt_or_partial_checkpoints_are_refused(target, data, tmp_path):
    out = tmp_path / "d"
    train(target, data, out, DraftConfig(num_heads=2), replace(CFG, max_steps=2, eval_every=2))
    weights = out / "draft.safetensors"
    blob = weights.read_bytes()
    weights.write_bytes(blob[: len(blob) // 2])
    with pytest.raises(Clover2Error, match="partial or corrupt"):
        load_draft(out, target)
    (out / "draft.json").unlink()
    with pytest.raises(Clover2Error, match="no draft.json"):
        load_draft(out, target)


def test_data_from_another_target_is_refused(data, tmp_path):
    with pytest.raises(Clover2Error, match="made by target"):
        train(tiny_target("qwen2"), data, tmp_path / "d", DraftConfig(num_heads=2), CFG)


def test_incomplete_data_is_refused(tmp_path):
    (tmp_path / "meta.json").write_text(json.dumps({"target": {}, "config": {}, "complete": False}))
    with pytest.raises(Clover2Error, match="incomplete"):
        DistillData(tmp_path)


@pytest.mark.parametrize("schedule, end", [("constant", 1.0), ("linear", 0.0), ("cosine", 0.0), ("wsd", 0.0)])
def test_learning_rate_warms_up_then_follows_its_schedule(schedule, end):
    cfg = TrainConfig(warmup_steps=10, schedule=schedule)
    factors = [cfg.lr_factor(s, 100) for s in range(100)]
    assert factors[0] == pytest.approx(0.1) and factors[9] == pytest.approx(1.0)
    assert factors[-1] == pytest.approx(end, abs=1e-9)
    assert all(a >= b for a, b in zip(factors[9:], factors[10:]))  # never rises after warm-up


def test_keep_best_saves_the_draft_of_the_lowest_held_out_loss(target, data, tmp_path, monkeypatch):
    losses = iter([3.0, 1.0, 2.0, 2.5])
    real = train_mod.evaluate

    def evaluate(*args, **kwargs):
        return {**real(*args, **kwargs), "loss": next(losses)}

    monkeypatch.setattr(train_mod, "evaluate", evaluate)
    cfg = replace(CFG, max_steps=8, eval_every=2, keep_best=True)
    train(target, data, tmp_path / "d", DraftConfig(num_heads=2), cfg)
    meta = json.loads((tmp_path / "d" / "draft.json").read_text())
    assert meta["best_step"] == 4 and meta["eval"]["loss"] == 1.0


def test_wsd_holds_the_rate_then_decays_over_the_last_share():
    cfg = TrainConfig(warmup_steps=10, schedule="wsd", decay_share=0.25)
    factors = [cfg.lr_factor(s, 100) for s in range(100)]
    assert factors[10:75] == [1.0] * 65 and 0 < factors[80] < 1 and factors[99] == 0.0


def test_snapshots_are_loadable_drafts_of_their_step(target, data, tmp_path):
    """Each snapshot step leaves the draft of that moment with its evaluation: a learning curve's points."""
    cfg = replace(CFG, max_steps=6, eval_every=6, snapshots=(2, 4))
    train(target, data, tmp_path / "d", DraftConfig(num_heads=2), cfg)
    lines = [json.loads(x) for x in (tmp_path / "d" / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in lines] == [2, 4, 6]
    for step in (2, 4):
        folder = tmp_path / "d" / "snapshots" / f"step_{step:06d}"
        meta = json.loads((folder / "draft.json").read_text())
        assert meta["train_state"]["step"] == step and meta["eval"]["loss"] == lines[step // 2 - 1]["eval_loss"]
        load_draft(folder, target)
    two, four = (load_file(tmp_path / "d" / "snapshots" / f"step_{s:06d}" / "draft.safetensors") for s in (2, 4))
    assert any(not torch.equal(two[k], four[k]) for k in two)


def test_held_out_accuracy_per_category_pools_every_answer_token(target, data):
    """The per-category head-0 top-1 is the share of answer tokens where the draft's argmax is the
    target's top-1, pooled over the whole held-out set (computed here by hand)."""
    torch.manual_seed(0)
    model = build_draft(DraftConfig.for_arch("clover2", num_heads=2), target)
    d = DistillData(data)
    idx = d.split(0.5)[1]
    ev = train_mod.evaluate(model, d, idx, torch.arange(VOCAB), replace(CFG, eval_batches=0), target.device)
    batch = d.batch(idx, max_len=CFG.max_len, t2d=torch.arange(VOCAB))
    with torch.no_grad():
        pred = model.logits(model(batch.h, batch.next_ids)[0][:, :-1]).argmax(-1)
    mask = batch.mask[:, 1:]
    hits = (pred == batch.topk_ids[:, 1:, 0]) & mask
    assert ev["sharegpt_head0_top1"] == pytest.approx(float(hits.sum() / mask.sum()))
    assert ev["sharegpt_tokens"] == mask.sum() and ev["sharegpt_in_vocab"] == 1.0
    copied = torch.from_numpy(d.copied(idx, mask.shape[1] + 1))[:, 1:] & mask
    assert ev["sharegpt_copied"] == pytest.approx(float(copied.sum() / mask.sum()))
    assert ev["sharegpt_top1_copied"] == pytest.approx(float((hits & copied).sum() / copied.sum().clamp(min=1)))


def test_repeats_marks_tokens_that_end_a_seen_four_gram():
    from clover2.training.data import repeats

    assert repeats([1, 2, 3, 4, 9, 1, 2, 3, 4, 5, 2, 3, 4, 9]).tolist() == [False] * 8 + [True] + [False] * 4 + [True]


def test_a_mix_of_folders_serves_both_and_refuses_two_targets(target, data, tmp_path):
    other = fake_data(tmp_path / "o", target, seqs=6, seed=1)
    mix = DistillData(data, other)
    assert len(mix.sequences) == len(DistillData(data).sequences) + 6 and mix.hash not in (mix.meta["hash"],)
    assert torch.equal(mix.batch([len(mix.sequences) - 1], max_len=32, t2d=torch.arange(VOCAB)).h,
                       DistillData(other).batch([5], max_len=32, t2d=torch.arange(VOCAB)).h)
    with pytest.raises(Clover2Error, match="cannot be mixed"):
        DistillData(data, fake_data(tmp_path / "q", tiny_target("qwen2"), seqs=2))


def test_sources_train_on_one_part_of_a_mix_only(target, data, tmp_path, monkeypatch):
    """The data A/B's other arm: `sources` keeps the training batches to one part of the data."""
    mix = [data, fake_data(tmp_path / "own", target, seqs=8, seed=2, source="self")]
    seen, batch = [], DistillData.batch
    monkeypatch.setattr(DistillData, "batch", lambda self, idx, **kw: seen.append(list(idx)) or batch(self, idx, **kw))
    for sources in (("self",), ("corpus", "self")):
        seen.clear()
        train(target, mix, tmp_path / "-".join(sources), DraftConfig(num_heads=2),
              replace(CFG, max_steps=4, eval_every=4, sources=sources), eval_dir=data)
        parts = {DistillData(*mix).source[i] for b in seen[:4] for i in b}  # the training batches (evaluation follows)
        assert parts == set(sources) if sources == ("self",) else "self" in parts
    with pytest.raises(Clover2Error, match="sources"):
        replace(CFG, sources=("sharegpt",))


def test_length_groups_batch_similar_lengths_and_keep_every_sequence_once():
    from clover2.training.train import epoch_order

    lengths = list(np.random.default_rng(0).integers(10, 500, 96))
    cfg = TrainConfig(batch_size=4, length_groups=4)
    order = epoch_order(list(range(96)), lengths, cfg, epoch=0)
    assert sorted(order.tolist()) == list(range(96))
    batches = order.reshape(-1, 4)
    pad = lambda bs: sum(max(lengths[j] for j in b) * 4 - sum(lengths[j] for j in b) for b in bs)  # noqa: E731
    plain = epoch_order(list(range(96)), lengths, replace(cfg, length_groups=0), epoch=0).reshape(-1, 4)
    assert pad(batches) < pad(plain) / 2
    assert not np.array_equal(order, epoch_order(list(range(96)), lengths, cfg, epoch=1))


def test_autocast_auto_times_both_once_and_records_the_choice(target, data, tmp_path, monkeypatch):
    monkeypatch.setattr("clover2.training.train.native_bf16", lambda: True)  # timed wherever this runs
    cfg = replace(CFG, max_steps=4, eval_every=2, autocast_bf16="auto")
    train(target, data, tmp_path / "d", DraftConfig(num_heads=2), cfg)
    first = json.loads((tmp_path / "d" / "metrics.jsonl").read_text().splitlines()[0])
    assert first["fp32_step_s"] > 0 and first["bf16_step_s"] > 0
    assert first["autocast_bf16"] == (first["bf16_step_s"] < first["fp32_step_s"])
    meta = json.loads((tmp_path / "d" / "draft.json").read_text())
    assert meta["train_state"]["bf16"] == first["autocast_bf16"]
    with pytest.raises(Clover2Error, match="autocast_bf16"):
        replace(cfg, autocast_bf16="yes")


def test_autocast_auto_keeps_fp32_untimed_where_bf16_is_emulated(target, data, tmp_path, monkeypatch):
    monkeypatch.setattr("clover2.training.train.native_bf16", lambda: False)
    timed = []
    monkeypatch.setattr("clover2.training.train._forward", lambda *a, **k: timed.append(a[5]) or _forward(*a, **k))
    train(target, data, tmp_path / "d", DraftConfig(num_heads=2), replace(CFG, max_steps=2, eval_every=2,
                                                                         autocast_bf16="auto"))
    first = json.loads((tmp_path / "d" / "metrics.jsonl").read_text().splitlines()[0])
    assert first["autocast_bf16"] is False and "bf16_step_s" not in first and first["bf16_untimed"]
    assert timed and not any(timed)  # no step ran under bf16


def test_sigterm_stops_after_the_step_and_the_run_resumes_to_the_same_weights(target, data, tmp_path, monkeypatch):
    import signal

    dc = DraftConfig(num_heads=2)
    train(target, data, tmp_path / "straight", dc, CFG)
    real = train_mod.draft_loss
    calls = iter(range(100))

    def loss_then_signal(*args, **kwargs):
        if next(calls) == 4:  # the 5th training step (evaluations go through `evaluate`)
            signal.raise_signal(signal.SIGTERM)
        return real(*args, **kwargs)

    monkeypatch.setattr(train_mod, "draft_loss", loss_then_signal)
    monkeypatch.setattr(train_mod, "evaluate", lambda *a, **k: {"loss": 1.0})
    with pytest.raises(Clover2Error, match="stopped by SIGTERM after step 5"):
        train(target, data, tmp_path / "resumed", dc, CFG)
    monkeypatch.undo()
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL  # the process is killable again
    train(target, data, tmp_path / "resumed", dc, CFG)
    a, b = (load_file(tmp_path / d / "draft.safetensors") for d in ("straight", "resumed"))
    for key in a:
        torch.testing.assert_close(a[key], b[key], atol=0, rtol=0)


def test_training_time_test_trains_every_unrolled_step(target, data, tmp_path):
    """`ttt_steps`: EAGLE-1 trained on 3 steps of its own states logs a loss and accuracy per step and
    learns; a draft cannot train more heads than it has depths (Medusa), nor a negative count."""
    cfg = replace(CFG, max_steps=12, eval_every=12, ttt_steps=3)
    dc = DraftConfig.for_arch("eagle1")
    torch.manual_seed(cfg.seed)
    first = train_mod.evaluate(build_draft(dc, target), DistillData(data), DistillData(data).split(cfg.held_out)[1],
                               torch.arange(VOCAB), cfg, target.device)
    final = train(target, data, tmp_path / "eagle1", dc, cfg)
    assert {"head0_loss", "head1_loss", "head2_loss"} <= set(final) and "head3_loss" not in final
    assert final["loss"] < first["loss"]
    with pytest.raises(Clover2Error, match="1 to 3 heads"):
        train(target, data, tmp_path / "medusa", DraftConfig.for_arch("medusa", num_heads=3), replace(cfg, ttt_steps=4))
    with pytest.raises(Clover2Error, match="ttt_steps"):
        replace(cfg, ttt_steps=-1)


def test_a_shorter_budget_branched_off_a_longer_run_is_the_run_that_ends_there(target, data, tmp_path):
    """Warmup-stable-decay: an 8-step run equals, weight for weight, an 8-step run started from the state a
    12-step run kept at step 6 (both schedules still hold the rate there); starting from step 7, after the
    8-step run began decaying, is refused, as is a state from other settings or a corrupt one."""
    dc = DraftConfig(num_heads=3, draft_vocab=48)
    wsd = replace(CFG, schedule="wsd", decay_share=0.25, warmup_steps=1, eval_every=100)
    train(target, data, tmp_path / "straight", dc, replace(wsd, max_steps=8))
    train(target, data, tmp_path / "long", dc, replace(wsd, max_steps=12, states=(6, 7)))
    kept = tmp_path / "long" / "states"
    assert sorted(p.name for p in kept.iterdir()) == ["step_000006.pt", "step_000007.pt"]
    train(target, data, tmp_path / "branch", dc, replace(wsd, max_steps=8), start_from=kept / "step_000006.pt")
    a, b = (load_file(tmp_path / n / "draft.safetensors") for n in ("straight", "branch"))
    for key in a:
        torch.testing.assert_close(a[key], b[key], atol=0, rtol=0)
    meta = json.loads((tmp_path / "branch" / "draft.json").read_text())
    assert meta["train_state"]["step"] == 8
    assert (meta["train_state"]["tokens"]
            == json.loads((tmp_path / "straight" / "draft.json").read_text())["train_state"]["tokens"])
    long = load_file(tmp_path / "long" / "draft.safetensors")
    assert any(not torch.equal(a[k], long[k]) for k in a)  # the longer run's own end differs
    with pytest.raises(Clover2Error, match="schedule that already differs"):
        train(target, data, tmp_path / "late", dc, replace(wsd, max_steps=8), start_from=kept / "step_000007.pt")
    with pytest.raises(Clover2Error, match="trained otherwise"):
        train(target, data, tmp_path / "lr", dc, replace(wsd, max_steps=8, lr=1e-3), start_from=kept / "step_000006.pt")
    with pytest.raises(Clover2Error, match="other settings"):
        train(target, data, tmp_path / "arch", DraftConfig(num_heads=2, draft_vocab=48), replace(wsd, max_steps=8),
              start_from=kept / "step_000006.pt")
    (tmp_path / "bad.pt").write_bytes(b"not a state")
    with pytest.raises(Clover2Error, match="not a training state"):
        train(target, data, tmp_path / "bad", dc, replace(wsd, max_steps=8), start_from=tmp_path / "bad.pt")


def test_kept_states_leave_out_the_weights_borrowed_from_the_target(target, data, tmp_path):
    train(target, data, tmp_path / "d", DraftConfig(num_heads=2), replace(CFG, max_steps=2, eval_every=2, states=(2,)))
    for path in (tmp_path / "d" / "checkpoint" / "state.pt", tmp_path / "d" / "states" / "step_000002.pt"):
        weights = torch.load(path, weights_only=False)["model"]
        assert weights and not any(k.startswith(("lm_head.", "embed.", "target_norm.")) for k in weights)


def test_data_share_trains_on_a_fixed_subset_the_same_for_every_seed(target, data, tmp_path, monkeypatch):
    seen, batch = [], DistillData.batch
    monkeypatch.setattr(DistillData, "batch", lambda self, idx, **kw: seen.append(list(idx)) or batch(self, idx, **kw))
    subsets = []
    for seed in (0, 1):
        seen.clear()
        cfg = replace(CFG, max_steps=8, eval_every=100, data_share=0.5, seed=seed)
        train(target, data, tmp_path / f"s{seed}", DraftConfig(num_heads=2), cfg)
        subsets.append({i for b in seen[:8] for i in b})  # training batches (the evaluation follows)
    train_idx = DistillData(data).split(CFG.held_out)[0]
    assert subsets[0] == subsets[1] and len(subsets[0]) == round(len(train_idx) / 2)
    with pytest.raises(Clover2Error, match="data_share"):
        replace(CFG, data_share=0.0)


def test_a_targets_identity_keeps_its_fields(target):
    """Prepared data, benchmark caches and the designed study's folders are keyed by the target's
    identity: a field added to it would move every one of them (a draft's sidecar records more, by
    `target_record`)."""
    from clover2.drafts.checkpoint import target_record

    assert set(target.identity()) == {"name", "model_type", "vocab_size", "hidden_size", "num_hidden_layers",
                                      "fingerprint"}
    assert target_record(target) == target.identity() | {"fingerprint_bf16": target.fingerprint(torch.bfloat16)}
