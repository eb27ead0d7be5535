"""Profiles: every shipped profile parses, bad ones are refused, and the paper profiles run end to
end on CPU with a tiny random model of their targets' family (a dry run of a GPU-box first run)."""

from __future__ import annotations

import shutil
from dataclasses import replace

import pandas as pd
import pytest
import torch
from transformers import AutoModelForCausalLM, LlamaConfig

from clover2.decoding.target import load_target, prepare_builtin
from clover2.errors import Clover2Error
from clover2.profiles import CONFIG_DIR, load_profile
from clover2.research.lab import VARIANTS, Lab
from clover2.training.data import prepare_data


@pytest.mark.parametrize("name", sorted(p.stem for p in CONFIG_DIR.glob("*.yaml")))
def test_every_shipped_profile_parses_and_names_known_variants(name):
    profile = load_profile(name)
    assert set(profile.lab.distillation) | set(profile.lab.ablations) <= set(VARIANTS)
    assert profile.bench.methods[0] == "ar"


@pytest.mark.parametrize("text, match", [
    ("bench: {n_per_task: 0}", "n_per_task"),
    ("bench: {cost_repeats: 0}", "cost_repeats must be >= 1"),
    ("bench: {methods: [ar, eagle9]}", "unknown method"),
    ("bench: {fit: {top_k: 0}}", "fit config"),
    ("bench: {colour: red}", "unknown keys"),
    ("lab: {ablation_n_per_task: -1}", "lab config"),
    ("lab: {engine: warp}", "engine must be one of"),
    ("trian: {}", "unknown keys"),
    ("train: {eagle1: {lr_typo: 1}}", r"train.eagle1.*unknown keys"),
    ("train: {eagle1: {lr: -1}}", "lr > 0"),
    ("draft: {clover1: {value_gain: 0}}", "auto value gain"),
    ("draft: {medusa: {init_layer: middle}}", "init_layer"),
    ("kernels: fastest", "kernels must be one of")])
def test_nonsense_profiles_are_refused(tmp_path, text, match):
    path = tmp_path / "bad.yaml"
    path.write_text(text + "\n")
    with pytest.raises(Clover2Error, match=match):
        load_profile(path)


def test_each_architecture_gets_its_own_recipe_on_top_of_the_shared_one():
    paper = load_profile("paper-vicuna7b")
    assert paper.train_config("eagle1").lr == 3e-5 and paper.train_config("eagle1").warmup_steps == 2000
    assert paper.train_config("clover2").lr == 1e-3 and paper.train_config("clover2").batch_size == 16
    assert paper.draft_config("clover2").init_layer == 0 and paper.draft_config("eagle1").init_layer == "random"
    assert paper.chat_template == "vicuna"
    cpu = load_profile("cpu")
    assert cpu.draft_config("clover2").value_gain == 0  # auto, Clover-2 only
    assert cpu.draft_config("clover1").value_gain == 1 and cpu.draft_config("medusa").draft_vocab == 8192
    assert len({cpu.train_config(a).lr for a in ("clover2", "clover1", "eagle1", "medusa")}) == 1  # one rule


def test_unknown_profile_lists_the_known_ones():
    with pytest.raises(Clover2Error, match="known: .*cpu"):
        load_profile("gpu-huge")


def _tiny_llama_with_smollm2_tokenizer(folder):
    """Vicuna-7B and LLaMA3-8B are Llama-family: a 2-layer random Llama with a real tokenizer."""
    builtin = prepare_builtin("smollm2-135m-instruct")
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=49152, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                         bos_token_id=1, eos_token_id=2, tie_word_embeddings=False)
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    for f in builtin.iterdir():
        if f.name.startswith(("tokenizer", "special_tokens", "chat_template")):
            shutil.copy(f, folder / f.name)
    return folder


@pytest.mark.slow
@pytest.mark.parametrize("name", ["paper-vicuna7b", "paper-llama3-8b", "gpu"])
def test_gpu_profile_dry_run_on_a_tiny_model_of_its_family(name, tmp_path, fresh_cache):
    """A GPU profile's own settings (dtype, loss, bf16 autocast, vocabulary, trees, methods and their
    engines), with only the sizes shrunk (two of its tasks) and the device set to CPU: data, every draft,
    ablation tau, bench. (`make test` also runs the gpu profile's first notebook through `clover2 notebooks`.)"""
    profile = load_profile(name)
    folder = _tiny_llama_with_smollm2_tokenizer(tmp_path / "target")
    tiny = replace(
        profile, target=str(folder), device="cpu",
        data=replace(profile.data, tokens=150, max_tokens=64, pack_tokens=128, conversations=2, max_new_tokens=6,
                     batch_size=2, shard_conversations=2, eval_conversations=2),
        train=replace(profile.train, max_steps=2, batch_size=2, max_len=48, eval_every=1, eval_batches=1,
                      warmup_steps=1),
        bench=replace(profile.bench, tasks=profile.bench.tasks[:2], n_per_task=1, max_new_tokens=4, threads=1,
                      fit=replace(profile.bench.fit, prompts=1, max_new_tokens=4, max_depth=3)),
        lab=replace(profile.lab, ablation_n_per_task=1, ablation_max_new_tokens=4))
    target = load_target(str(folder), dtype=profile.dtype, device="cpu", kernels="stock")
    lab = Lab(profile=tiny, target=target, results=tmp_path / "results")
    turns = [("Say hello.", "Hello!", "And again?", "Hello again!"),
             ("Name a colour.", "Blue.", "Another one?", "Red."),
             ("Count to three.", "One, two, three.", "Go on.", "Four, five."),
             ("What is 2 + 2?", "4.", "And 3 + 3?", "6.")]
    corpus = [[{"role": ("user", "assistant")[i % 2], "content": t} for i, t in enumerate(c)] for c in turns]
    prepare_data(target, corpus, lab.data_dir, tiny.data)  # the conversations as they are, multi-turn
    prepare_data(target, corpus[:2], lab.eval_dir, tiny.data.held_out_set())  # the target's own answers
    tau = lab.tau(list(tiny.lab.ablations))
    assert set(tau.variant) == set(tiny.lab.ablations) and (tau.tau >= 1).all()
    table = lab.bench()
    assert set(table.task) == {"overall", *tiny.bench.tasks}
    assert set(table.method) == {m.split("/")[0] for m in tiny.bench.methods}
    assert pd.read_csv(lab.results / "bench" / "bench.csv").shape == table.shape


def test_the_gpu_profile_and_its_dry_run():
    """The gpu profile runs in bf16 on CUDA with eager and graph methods side by side; its dry run keeps
    its methods and variants at the smoke profile's sizes (its benchmark at 4 new tokens), in fp32 on the CPU."""
    from clover2.profiles import dry_run_profile

    gpu = load_profile("gpu")
    assert (gpu.device, gpu.dtype, gpu.lab.engine) == ("cuda", "bfloat16", "graphs")
    assert "ar!graphs" in gpu.bench.methods and "ar" in gpu.bench.methods and gpu.bench.max_new_tokens == 128
    dry = load_profile(dry_run_profile("gpu"))
    smoke = load_profile("smoke")
    assert (dry.name, dry.device, dry.dtype) == ("gpu-dry", "cpu", "float32")
    assert dry.bench.methods == gpu.bench.methods and dry.lab.ablations == gpu.lab.ablations
    assert (dry.data, dry.bench.n_per_task, dry.bench.tasks) == (smoke.data, smoke.bench.n_per_task, smoke.bench.tasks)
    assert dry.bench.fit == smoke.bench.fit and dry.bench.max_new_tokens == min(smoke.bench.max_new_tokens, 4)
    assert dry.train.max_steps == smoke.train.max_steps and dry.lab.engine == "graphs"
    assert gpu.bench.draft_weights == "auto" and dry.bench.draft_weights == "float"  # auto's choice on a GPU
    assert smoke.bench.draft_weights == "auto"  # a CPU's choice between float and int8 stays checked by smoke
    assert (gpu.kernels, dry.kernels) == ("auto", "stock")  # a GPU has no kernels to choose between


def test_the_profile_names_the_kernels_and_a_command_can_override_them(monkeypatch):
    """The smoke profile loads its target with PyTorch's own kernels, the others measure them (`auto`);
    `--kernels` on a profile command, or `kernels=` in Lab.open, overrides the profile."""
    import clover2.decoding.target as target_mod
    from clover2.cli import _parser, _profile

    asked = []
    monkeypatch.setattr(target_mod, "load_target", lambda *a, **kw: asked.append(kw["kernels"]))
    load_profile("smoke").load_target()
    load_profile("cpu").load_target()
    load_profile("smoke").load_target(kernels="packed")
    load_profile("cpu", settings=["kernels=mkl"]).load_target()
    assert asked == ["stock", "auto", "packed", "mkl"]
    for command in (["bench", "--out", "x"], ["prepare-data"]):
        args = _parser().parse_args([*command, "--profile", "smoke"])
        assert args.kernels is None and _profile(args).kernels == "stock"  # the profile's, unless given
        assert _parser().parse_args([*command, "--kernels", "mkl"]).kernels == "mkl"


def test_a_profile_starts_from_its_base_and_changes_only_what_differs(tmp_path):
    child = tmp_path / "child.yaml"
    child.write_text("base: cpu\ntrain: {max_steps: 7}\nlab: {seeds: [0, 3]}\n")
    cpu, mine = load_profile("cpu"), load_profile(child)
    assert (mine.train.max_steps, mine.lab.seeds) == (7, (0, 3))
    assert replace(mine.train, max_steps=cpu.train.max_steps) == cpu.train  # everything else inherited
    assert (mine.data, mine.bench, mine.own, mine.lab.ablations) == (cpu.data, cpu.bench, cpu.own,
                                                                       cpu.lab.ablations)
    seeds = load_profile("cpu-seeds")
    assert seeds.lab.seeds == (0, 1, 2) and set(cpu.lab.ablations) < set(seeds.lab.ablations)
    assert (seeds.data, seeds.train, seeds.bench) == (cpu.data, cpu.train, cpu.bench)  # cpu's drafts are reused


@pytest.mark.parametrize("text, match", [("base: nowhere\n", "unknown base profile"),
                                         ("base: loop.yaml\n", "cycle"),
                                         ("base: cpu\ntrain: {max_step: 7}\n", "unknown keys")])
def test_a_bad_base_is_refused(tmp_path, text, match):
    (tmp_path / "loop.yaml").write_text(text)
    with pytest.raises(Clover2Error, match=match):
        load_profile(tmp_path / "loop.yaml")


def test_set_changes_any_setting_of_a_profile():
    """`--set SECTION.FIELD=VALUE` reaches every section, one architecture's own settings, nested
    sections and the top level; the values are YAML; nothing else moves."""
    plain = load_profile("cpu")
    changed = load_profile("cpu", settings=["train.max_steps=17", "train.eagle1.lr=3e-4", "draft.num_heads=4",
                                            "bench.fit.prompts=9", "dtype=float32", "train.sources=corpus",
                                            "bench.tasks=[qa, gsm8k]"])
    assert changed.train.max_steps == 17 and changed.train_config("eagle1").lr == 3e-4
    assert changed.train_config("clover2").lr == plain.train_config("clover2").lr
    assert changed.draft_config("clover2").num_heads == 4 and changed.bench.fit.prompts == 9
    assert changed.dtype == "float32" and changed.train.sources == ("corpus",)
    assert changed.bench.tasks == ("qa", "gsm8k")
    assert replace(changed.data) == plain.data and changed.name == plain.name


@pytest.mark.parametrize("setting, match", [
    ("max_steps=3", "did you mean train.max_steps"),  # a field without its section
    ("train.max_stepz=3", r"--set train.max_stepz=3.*unknown keys \['max_stepz'\]"),
    ("train.max_steps", "SECTION.FIELD=VALUE"),
    ("dtype.x=1", "dtype is a value, not a section"),
    ("train.max_steps=-4", "max_steps, max_minutes and epochs must be >= 0"),  # the config's own checks still run
])
def test_a_bad_set_is_refused_clearly(setting, match):
    with pytest.raises(Clover2Error, match=match):
        load_profile("cpu", settings=[setting])
