"""OpenVINO GenAI's methods in the benchmark (clover2.measure.openvino_engine), against stand-in `openvino_genai`
and `openvino` modules that the real worker (clover2.measure.openvino_worker) imports: the grammar, the
checks, the pipeline's settings, lifecycle and step accounting. With CLOVER2_OPENVINO set to a Python
that has the real engine (`.ci/openvino`), its greedy decoding must equal clover2's token for token."""

from __future__ import annotations

import json
import os
import sys
from contextlib import ExitStack
from pathlib import Path
from xml.etree import ElementTree

import pytest

from clover2.drafts.methods import MethodSpec
from clover2.errors import Clover2Error
from clover2.load import _HELPERS
from clover2.measure.bench import BenchConfig
from clover2.measure.openvino_engine import EXACT, OpenVino, Pipeline, read_layers, speculation

ROOT = Path(__file__).parents[1]

FAKE_GENAI = r'''
import json, os
__version__ = "fake-1.0"
class _Stats:
    def __init__(self, mean): self.mean = mean
class _Raw:
    def __init__(self, n): self.token_infer_durations = [1.0] * n
class _Metrics:
    def __init__(self, n): self.raw_metrics = _Raw(n)
    def get_generate_duration(self): return _Stats(30.0)
    def get_ttft(self): return _Stats(10.0)
class _Result:
    def __init__(self, tokens, n): self.tokens, self.perf_metrics = [tokens], _Metrics(n)
class GenerationConfig:
    pass
class TokenizedInputs:
    def __init__(self, ids, mask): self.ids = ids
def draft_model(path, device, **properties):
    return {"draft": path, "device": device, "properties": properties}
class LLMPipeline:
    def __init__(self, model, device, **properties):
        self.log = os.environ["FAKE_GENAI_LOG"]
        with open(self.log + ".load", "w") as f:
            json.dump({"model": model, "device": device, "properties": properties}, f)
    def generate(self, inputs, config):
        prompt = [int(t) for t in inputs.ids.data[0]]
        if prompt == [13]:
            raise RuntimeError("unlucky prompt")
        with open(self.log + ".request", "w") as f:
            json.dump({"prompt": prompt, "config": vars(config)}, f)
        tokens = [prompt[-1] + i for i in range(1, config.max_new_tokens + 1)]
        return _Result(tokens, 1 + (config.max_new_tokens - 1 + 1) // 2)  # the prefill, then 2 tokens a step
'''
FAKE_OV = "import numpy\nclass Tensor:\n    def __init__(self, array): self.data = numpy.asarray(array)\n"


@pytest.fixture()
def fake_ov(tmp_path, monkeypatch):
    stubs = tmp_path / "stubs"
    (stubs / "optimum" / "intel").mkdir(parents=True)
    (stubs / "openvino_genai.py").write_text(FAKE_GENAI)
    (stubs / "openvino.py").write_text(FAKE_OV)
    for init in (stubs / "optimum" / "__init__.py", stubs / "optimum" / "intel" / "__init__.py"):
        init.write_text("")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(stubs), os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("FAKE_GENAI_LOG", str(tmp_path / "genai"))
    return OpenVino.at(sys.executable)


def test_the_openvino_methods_grammar():
    assert MethodSpec.parse("openvino").label == "openvino"
    assert MethodSpec.parse("openvino+pld").label == "openvino+pld@chain3"
    assert MethodSpec.parse("openvino+pld@chain5!defaults").label == "openvino+pld@chain5!defaults"
    spec = MethodSpec.parse("openvino+eagle3=/drafts/eagle3")
    assert (spec.label, spec.arch, spec.is_draft) == ("openvino+eagle3@chain3=eagle3", "eagle3", True)
    assert MethodSpec.parse("openvino+eagle3@dynamic:6:3:2=/d").tree == "dynamic:6:3:2"  # OpenVINO's EAGLE-3 tree
    for bad, why in [("openvino@chain3", "openvino's plain decoding takes no tree"),
                     ("openvino+pld@eagle25", "openvino\\+pld verifies chains: write @chainK \\(K >= 1\\)$"),
                     ("openvino+pld@dynamic:6:3:2", "verifies chains"),
                     ("openvino+eagle3@eagle25=/d", "chainK \\(K >= 1\\), or @dynamic:BUDGET:DEPTH:TOPK"),
                     ("openvino+eagle3@dynamic:0:3:2=/d", "bad dynamic tree"),
                     ("openvino/1", "openvino methods are measured greedy"), ("openvino!static", "only 'defaults'"),
                     ("openvino+pld=/x", "take a draft")]:
        with pytest.raises(Clover2Error, match=why):
            MethodSpec.parse(bad)


def test_a_bench_with_openvino_methods_needs_the_engine_and_its_plain_decoding(fake_ov, tmp_path):
    with pytest.raises(Clover2Error, match="--openvino PYTHON"):
        BenchConfig(methods=("ar", "openvino"))
    with pytest.raises(Clover2Error, match="add the method openvino$"):
        BenchConfig(methods=("ar", "openvino+pld"), openvino=str(fake_ov.python))
    with pytest.raises(Clover2Error, match="add the method openvino!defaults"):
        BenchConfig(methods=("ar", "openvino", "openvino+pld!defaults"), openvino=str(fake_ov.python))
    BenchConfig(methods=("ar", "openvino", "openvino+pld@chain4"), openvino=str(fake_ov.python))
    no_engine = tmp_path / "python"
    no_engine.write_text("#!/bin/sh\necho 'No module named openvino_genai' >&2\nexit 1\n")
    no_engine.chmod(0o755)
    with pytest.raises(Clover2Error, match="not a Python with openvino-genai"):
        OpenVino.at(no_engine)


def test_a_pipeline_decodes_token_ids_greedily_with_f32_numerics_and_counts_the_steps(fake_ov, tmp_path):
    log = tmp_path / "genai"
    pipeline = Pipeline(fake_ov, tmp_path / "model", tmp_path / "pipeline.log", threads=2,
                        speculation=speculation(MethodSpec.parse("openvino+pld@chain4")))
    with pipeline:
        pid = pipeline.process.pid
        assert pid in _HELPERS  # its CPU time counts as the benchmark's own
        run = pipeline.complete([1, 2, 3], 5)
        with pytest.raises(Clover2Error, match="unlucky prompt"):
            pipeline.complete([13], 5)
        assert pipeline.complete([7], 1).output_ids == [8]  # the worker goes on after an error
    loaded = json.loads(Path(str(log) + ".load").read_text())
    assert loaded["model"] == str(tmp_path / "model") and loaded["device"] == "CPU"
    assert loaded["properties"] == {"prompt_lookup": True, "INFERENCE_NUM_THREADS": 2, **EXACT}
    request = json.loads(Path(str(log) + ".request").read_text())
    assert request["prompt"] == [7] and request["config"]["do_sample"] is False
    assert (request["config"]["num_assistant_tokens"], request["config"]["max_ngram_size"]) == (4, 3)
    # 5 tokens: the prefill's first, then 4 over 2 steps; decoding took 30 - 10 ms
    assert run.output_ids == [4, 5, 6, 7, 8] and (run.steps, run.step_tokens) == (2, 4)
    assert run.decode_s == pytest.approx(0.02) and run.seconds > 0
    assert pipeline.process.poll() is not None and pid not in _HELPERS  # stopped on exit
    with Pipeline(fake_ov, tmp_path / "model", tmp_path / "defaults.log", exact=False) as plain:
        plain.complete([1], 2)
    loaded = json.loads(Path(str(log) + ".load").read_text())
    assert loaded["properties"] == {"INFERENCE_NUM_THREADS": 1}  # the engine's own defaults, no prompt lookup
    request = json.loads(Path(str(log) + ".request").read_text())
    assert "num_assistant_tokens" not in request["config"]


def test_an_eagle3_pipeline_loads_its_draft_with_the_target_numerics_and_sets_its_tree(fake_ov, tmp_path):
    log = tmp_path / "genai"
    for tree, generation in [("chain2", {"num_assistant_tokens": 2}),
                             ("dynamic:6:3:2", {"num_assistant_tokens": 6, "tree_depth": 3, "branching_factor": 2})]:
        settings = speculation(MethodSpec.parse(f"openvino+eagle3@{tree}=/d"), tmp_path / "draft")
        with Pipeline(fake_ov, tmp_path / "model", tmp_path / "pipeline.log", speculation=settings) as pipeline:
            pipeline.complete([1, 2], 3)
        loaded = json.loads(Path(str(log) + ".load").read_text())
        assert loaded["properties"] == {"draft_model": {"draft": str(tmp_path / "draft"), "device": "CPU", "properties":
                                                        {"INFERENCE_NUM_THREADS": 1, **EXACT}},
                                        "INFERENCE_NUM_THREADS": 1, **EXACT}
        config = json.loads(Path(str(log) + ".request").read_text())["config"]
        assert {k: config[k] for k in generation} == generation and "max_ngram_size" not in config


def test_an_exported_draft_is_told_the_target_layers_it_was_trained_on(tmp_path):
    # OpenVINO GenAI's default is layers 2, L/2, L-3's outputs, one past what EAGLE-3 reads; the runtime info wins
    xml = tmp_path / "openvino_model.xml"
    xml.write_text('<?xml version="1.0"?>\n<net name="m" version="11"><layers><layer id="0" name="x" /></layers>'
                   '<rt_info><eagle3_mode value="True" /></rt_info></net>\n')
    read_layers(tmp_path, [1, 14, 26])
    root = ElementTree.parse(xml).getroot()
    assert root.find("rt_info/hidden_layers_list").get("value") == "1 14 26"
    assert root.find("rt_info/eagle3_mode").get("value") == "True" and root.find("layers/layer").get("name") == "x"
    before = xml.stat().st_mtime_ns, xml.stat().st_ino
    read_layers(tmp_path, [1, 14, 26])  # already told: not rewritten
    assert (xml.stat().st_mtime_ns, xml.stat().st_ino) == before
    read_layers(tmp_path, [2, 15, 27])  # told otherwise: one entry, the new layers
    assert [e.get("value") for e in ElementTree.parse(xml).getroot().iter("hidden_layers_list")] == ["2 15 27"]
    xml.write_text('<net name="m"><layers /></net>')  # no runtime info yet: it gets one
    read_layers(tmp_path, [1, 14, 26])
    assert ElementTree.parse(xml).getroot().find("rt_info/hidden_layers_list").get("value") == "1 14 26"
    xml.write_text('<net name="m"><layers>')  # cut short: said, with the way out
    with pytest.raises(Clover2Error, match="not a readable OpenVINO model.*export it again"):
        read_layers(tmp_path, [1, 14, 26])
    with pytest.raises(Clover2Error, match="no OpenVINO draft model"):
        speculation(MethodSpec.parse("openvino+eagle3@chain3=/d"))


def test_a_pipeline_that_cannot_load_says_why(fake_ov, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_GENAI_LOG", str(tmp_path / "nowhere" / "genai"))  # the stand-in's load then fails
    with pytest.raises(Clover2Error, match="(?s)stopped while loading.*No such file"):
        with Pipeline(fake_ov, tmp_path / "model", tmp_path / "pipeline.log"):
            pass


@pytest.mark.skipif(not os.environ.get("CLOVER2_OPENVINO"), reason="CLOVER2_OPENVINO: a Python with the real engine")
def test_openvino_greedy_decoding_equals_clover2s(tmp_path):
    from clover2.decoding.decode import DecodeConfig, generate
    from clover2.decoding.drafter import NoDrafter
    from clover2.decoding.target import load_target
    from clover2.drafts.checkpoint import load_draft
    from clover2.measure.bench import make_method
    from clover2.measure.openvino_engine import openvino_methods

    target = load_target(dtype="float32")
    prompts = [target.encode_chat([{"role": "user", "content": text}]) for text in
               ("Rewrite this: the cat sat on the mat, and the cat was happy.", "What is 17 times 23?")]
    ov = OpenVino.at(os.environ["CLOVER2_OPENVINO"])
    draft = ROOT / "results" / "study" / "drafts" / "eagle3"  # the study's published EAGLE-3 draft
    specs = [MethodSpec.parse(m) for m in ("openvino", "openvino+pld@chain3", f"openvino+eagle3@chain3={draft}",
                                           f"openvino+eagle3@dynamic:6:3:2={draft}")]
    ours = make_method(f"eagle3@chain3={draft}", target, DecodeConfig(max_new_tokens=24),
                       draft=load_draft(draft, target, weights="float"))
    with ExitStack() as stack:
        methods, record = openvino_methods(ov, specs, target, max_new_tokens=24, threads=2, log_dir=tmp_path,
                                           stack=stack)
        for prompt in prompts:
            plain = generate(target, NoDrafter(), prompt, DecodeConfig(max_new_tokens=24)).output_ids
            runs = [m.run(prompt) for m in methods]
            assert [r.output_ids for r in runs] == [plain] * 4
            # the draft is read as trained (the target layers it was trained on): the same steps as in clover2
            assert runs[2].steps == len(ours.run(prompt).accept_lengths)
    assert record["engine"] == "OpenVINO GenAI" and record["version"]
    assert record["drafts"][specs[2].label]["openvino"].startswith("eagle3-")
