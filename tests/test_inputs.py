"""Bad input gets a clear error: targets, prompts, prompt files, decode settings, adapters."""

from __future__ import annotations

import pytest
import torch
from conftest import tiny_target

from clover2.cli import main
from clover2.decoding.decode import DecodeConfig, generate
from clover2.decoding.drafter import NoDrafter
from clover2.decoding.prompts import read_prompts
from clover2.decoding.target import load_target, parse_dtype
from clover2.errors import Clover2Error


def test_unknown_target_lists_the_built_in_ones():
    with pytest.raises(Clover2Error, match="smollm2-135m-instruct"):
        load_target("no-such-model")


def test_folder_without_a_checkpoint_is_refused(tmp_path):
    with pytest.raises(Clover2Error, match="config.json"):
        load_target(str(tmp_path))


def test_unknown_dtype():
    with pytest.raises(Clover2Error, match="float32"):
        parse_dtype("float33")


def test_prompt_longer_than_the_context():
    t = tiny_target("llama")
    with pytest.raises(Clover2Error, match="context of 256"):
        generate(t, NoDrafter(), [1] * 256, DecodeConfig(max_new_tokens=4))


def test_generation_stops_at_the_context_end():
    t = tiny_target("llama")
    gen = generate(t, NoDrafter(), [1] * 250, DecodeConfig(max_new_tokens=50))
    assert len(gen.output_ids) == 6 and gen.stop_reason == "length"


def test_empty_prompt():
    with pytest.raises(Clover2Error, match="empty prompt"):
        generate(tiny_target("llama"), NoDrafter(), [], DecodeConfig())


@pytest.mark.parametrize("n", [0, -3])
def test_max_new_tokens_must_be_positive(n):
    with pytest.raises(Clover2Error, match="max_new_tokens"):
        DecodeConfig(max_new_tokens=n)


@pytest.mark.parametrize("line, why", [
    ("{not json", "line 2: not valid JSON"),
    ("[1, 2]", "line 2: expected a JSON object"),
    ('{"id": 1}', "line 2: give exactly one of"),
    ('{"id": 1, "turns": []}', "line 2: \"prompt\" must be"),
    ('{"id": 1, "turns": ["hi", 3]}', "line 2: \"prompt\" must be"),
])
def test_malformed_prompts_file_names_the_line_and_the_reason(tmp_path, line, why):
    f = tmp_path / "p.jsonl"
    f.write_text('{"id": "a", "prompt": "fine"}\n' + line + "\n")
    with pytest.raises(Clover2Error, match=why):
        read_prompts(f)


def test_prompts_file_layouts(tmp_path):
    f = tmp_path / "p.jsonl"
    f.write_text('{"id": "a", "prompt": "one"}\n\n{"question_id": 81, "category": "writing", "turns": ["x", "y"]}\n')
    recs = read_prompts(f)
    assert [(r.id, r.turns) for r in recs] == [("a", ("one",)), ("81", ("x", "y"))]


def test_cli_reports_errors_without_a_traceback(tmp_path, capsys):
    bad = tmp_path / "p.jsonl"
    bad.write_text("oops\n")
    assert main(["generate", "--prompts", str(bad)]) == 2
    assert "p.jsonl, line 1: not valid JSON" in capsys.readouterr().err
    assert main(["generate", "--target", "nope", "--prompt", "hi"]) == 2
    assert main(["generate", "--prompt", "hi", "--max-new-tokens", "0"]) == 2
    assert main(["curves", "--profile", "smoke", "--run", f"clover2={tmp_path / 'none'}", "--out", str(tmp_path)]) == 2
    assert "--run takes NAME=FOLDER" in capsys.readouterr().err


def test_generate_writes_a_method_as_every_command_does_with_the_older_spelling_as_one_alias(tmp_path):
    from clover2.cli import generate_spec

    new = generate_spec(f"pld+clover2@chain2={tmp_path / 'd'}")
    old = generate_spec("pld+clover2", tree="chain2", draft=tmp_path / "d")
    assert new == old and (new.name, new.tree, new.draft) == ("pld+clover2", "chain2", tmp_path / "d")
    assert generate_spec("clover2=x").tree == "eagle25" and generate_spec("pld", temperature=1.0).temperature == 1
    for method, extra, match in [("clover2@chain2=x", {"tree": "chain3"}, "names its tree already"),
                                 ("clover2=x", {"draft": tmp_path}, "names its draft already"),
                                 ("pld", {"tree": "chain2"}, "takes no tree"), ("ar", {"draft": tmp_path}, "no draft"),
                                 ("clover2@chain2", {}, "needs a trained draft"), ("hf", {}, "benchmark's reference"),
                                 ("clover2@chain2/1=x", {}, "--temperature"), ("clover2@bogus=x", {}, "bogus"),
                                 ("nope", {}, "unknown method")]:
        with pytest.raises(Clover2Error, match=match):
            generate_spec(method, **extra)


def test_every_command_names_the_target_and_its_dtype_alike():
    from clover2.cli import _parser, _profile

    args = _parser().parse_args(["train", "--profile", "smoke", "--arch", "clover2", "--target", "my-model",
                                 "--dtype", "bfloat16", "--set", "train.max_steps=3"])
    prof = _profile(args)
    assert (prof.target, prof.dtype, prof.train.max_steps) == ("my-model", "bfloat16", 3)
    assert _profile(_parser().parse_args(["bench", "--profile", "smoke", "--out", "x"])).dtype == "float32"
    for cmd in ("generate", "bench", "prepare-data", "train", "coverage", "cost-curve"):
        actions = next(a for a in _parser()._subparsers._group_actions if a.choices).choices[cmd]._option_string_actions
        assert {"--target", "--dtype"} <= set(actions), cmd


def test_lora_adapter_is_merged_into_the_target(tmp_path):
    from peft import LoraConfig, get_peft_model

    base = tiny_target("llama")
    base.model.save_pretrained(tmp_path / "base")
    torch.manual_seed(1)
    lora = get_peft_model(base.model, LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    lora.save_pretrained(tmp_path / "adapter")
    x = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():
        expected = lora(input_ids=x).logits
    loaded = load_target(str(tmp_path / "base"), dtype="float32", adapter=tmp_path / "adapter")
    with torch.no_grad():
        got = loaded.model(input_ids=x).logits
        plain = load_target(str(tmp_path / "base"), dtype="float32").model(input_ids=x).logits
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)
    assert not torch.allclose(plain, expected, atol=1e-3)


def test_adapter_folder_must_be_an_adapter(tmp_path):
    base = tiny_target("llama")
    base.model.save_pretrained(tmp_path / "base")
    (tmp_path / "junk").mkdir()
    with pytest.raises(Clover2Error, match="adapter_config.json"):
        load_target(str(tmp_path / "base"), adapter=tmp_path / "junk")
