"""llama.cpp's methods in the benchmark (clover2.measure.engine), against a stand-in server that speaks
llama-server's protocol: the grammar, the checks, the server's lifecycle and the step accounting.
The real engine runs in the committed engine benchmark (book: "Take your draft to a serving engine")."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
import torch

from clover2.drafts.methods import MethodSpec
from clover2.errors import Clover2Error
from clover2.load import _HELPERS, _own_s, count_as_own
from clover2.measure.bench import BenchConfig, interleaved
from clover2.measure.engine import LlamaCpp, Server
from clover2.measure.runs import Method, Run

FAKE_SERVER = r'''
import json, sys
from http.server import BaseHTTPRequestHandler, HTTPServer
argv = sys.argv[1:]
open(__file__ + ".args", "w").write(json.dumps(argv))
class Handler(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass
    def _send(self, obj):
        body = json.dumps(obj).encode()
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def do_GET(self):
        self._send({"status": "ok"})
    def do_POST(self):
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        open(__file__ + ".request", "w").write(json.dumps(request))
        self._send({"tokens": [5, 6, 7, 8, 2], "content": "",
                    "timings": {"predicted_ms": 10.0, "draft_n": 4, "draft_n_accepted": 2}})
HTTPServer(("127.0.0.1", int(argv[argv.index("--port") + 1])), Handler).serve_forever()
'''


@pytest.fixture()
def fake_cpp(tmp_path):
    (tmp_path / "convert_hf_to_gguf.py").write_text("")
    server = tmp_path / "build" / "bin" / "llama-server"
    server.parent.mkdir(parents=True)
    server.write_text(f"#!{sys.executable}\n{FAKE_SERVER}")
    server.chmod(0o755)
    return LlamaCpp.at(tmp_path)


def test_the_engine_methods_grammar():
    assert MethodSpec.parse("llama.cpp").label == "llama.cpp"
    assert MethodSpec.parse("llama.cpp+pld").label == "llama.cpp+pld@chain3"  # the engine's own default
    spec = MethodSpec.parse("llama.cpp+eagle3@chain2=/drafts/eagle3")
    assert (spec.label, spec.arch, spec.is_draft) == ("llama.cpp+eagle3@chain2=eagle3", "eagle3", True)
    assert MethodSpec.parse("llama.cpp+pld!defaults").label == "llama.cpp+pld@chain3!defaults"
    for bad, why in [("llama.cpp@chain3", "no tree"), ("llama.cpp+pld@eagle25", "verifies chains: write @chainK"),
                     ("llama.cpp+pld@chain0", "verifies chains"), ("llama.cpp/1", "greedy"),
                     ("llama.cpp+eagle3@dynamic:6:3:2", r"verifies chains: write @chainK \(K >= 1\)$"),
                     ("llama.cpp!static", "only 'defaults'"), ("llama.cpp+pld=/x", "EAGLE-3 methods take a draft")]:
        with pytest.raises(Clover2Error, match=why):
            MethodSpec.parse(bad)


def test_a_bench_with_engine_methods_needs_the_engine_and_its_plain_decoding(fake_cpp, tmp_path):
    with pytest.raises(Clover2Error, match="--llama-cpp"):
        BenchConfig(methods=("ar", "llama.cpp"))
    with pytest.raises(Clover2Error, match="add the method llama.cpp"):
        BenchConfig(methods=("ar", "llama.cpp+pld"), llama_cpp=str(fake_cpp.root))
    BenchConfig(methods=("ar", "llama.cpp", "llama.cpp+pld"), llama_cpp=str(fake_cpp.root))
    with pytest.raises(Clover2Error, match="add the method llama.cpp!defaults"):
        BenchConfig(methods=("ar", "llama.cpp", "llama.cpp+pld!defaults"), llama_cpp=str(fake_cpp.root))
    with pytest.raises(Clover2Error, match="not a llama.cpp source tree"):
        LlamaCpp.at(tmp_path / "nowhere")
    (fake_cpp.server).unlink()
    with pytest.raises(Clover2Error, match="llama-server is not built"):
        LlamaCpp.at(fake_cpp.root)


def test_a_server_runs_greedy_requests_and_counts_the_steps(fake_cpp, tmp_path):
    draft = tmp_path / "draft.gguf"
    server = Server(fake_cpp, tmp_path / "target.gguf", tmp_path / "server.log", spec_type="draft-eagle3",
                    draft=draft, n_max=3, threads=2)
    with server:
        pid = server.process.pid
        run = server.complete([1, 2, 3], 16)
    args = json.loads(fake_cpp.server.with_name("llama-server.args").read_text())
    assert args[args.index("--spec-type") + 1] == "draft-eagle3" and args[args.index("--spec-draft-n-max") + 1] == "3"
    assert args[args.index("-md") + 1] == str(draft) and args[args.index("-t") + 1] == "2"
    assert all(args[args.index(flag) + 1] == "f32" for flag in ("-ctk", "-ctv", "-ctkd", "-ctvd"))  # f32 KV caches
    assert args[args.index("-fa") + 1] == "off"  # flash attention computes in f16 on a CPU
    with Server(fake_cpp, tmp_path / "target.gguf", tmp_path / "defaults.log", spec_type="draft-eagle3",
                draft=draft, n_max=3, exact=False):
        pass
    args = json.loads(fake_cpp.server.with_name("llama-server.args").read_text())
    assert not {"-ctk", "-ctv", "-ctkd", "-ctvd", "-fa"} & set(args)  # the engine's own defaults
    request = json.loads(fake_cpp.server.with_name("llama-server.request").read_text())
    assert request["prompt"] == [1, 2, 3] and request["n_predict"] == 16 and request["temperature"] == 0
    assert request["cache_prompt"] is False and request["return_tokens"] is True
    # 5 tokens: the prefill's first, then 4 over steps that accepted 2 draft tokens: 2 steps
    assert run.output_ids == [5, 6, 7, 8, 2] and (run.steps, run.step_tokens) == (2, 4) and run.decode_s == 0.01
    assert server.process.poll() is not None  # stopped on exit
    assert pid not in _HELPERS


def test_a_server_that_cannot_start_says_why(fake_cpp, tmp_path):
    fake_cpp.server.write_text("#!/bin/sh\necho 'error: unknown model architecture: eagle4'\nexit 1\n")
    with pytest.raises(Clover2Error, match="unknown model architecture"):
        with Server(fake_cpp, tmp_path / "target.gguf", tmp_path / "server.log"):
            pass


def test_an_engine_method_is_checked_against_the_engine_own_plain_decoding():
    def method(name: str, tokens: list[int], reference: str = "ar") -> Method:
        return Method(MethodSpec.parse(name), lambda prompt: Run(tokens, 1.0, None, totals=(len(tokens) - 1,) * 2),
                      reference=reference)

    engine_plain = method("llama.cpp", [1, 2, 9])  # differs from clover2's plain decoding in its last token
    spec = method("llama.cpp+pld", [1, 2, 9], reference="llama.cpp")
    rows = interleaved([method("ar", [1, 2, 3]), engine_plain, spec], {"p": [0]})
    identical = dict(zip(rows.method, rows.identical))
    assert identical == {"ar": 1.0, "llama.cpp": 0.0, "llama.cpp+pld@chain3": 1.0}
    with pytest.raises(Clover2Error, match="checked against llama.cpp"):
        interleaved([method("ar", [1]), spec], {"p": [0]})


def test_the_cpu_time_of_a_started_server_counts_as_the_benchmark_own():
    busy = subprocess.Popen([sys.executable, "-c", "import time\nt = time.process_time()\n"
                             "while time.process_time() - t < 0.5: pass"])  # half a second of CPU, then exits
    try:
        before = _own_s()
        count_as_own(busy.pid)
        deadline = time.monotonic() + 60
        while _own_s() - before < 0.3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _own_s() - before >= 0.3  # the child's time (a finished, unwaited child keeps its counts)
        count_as_own(busy.pid, forget=True)
        assert _own_s() - before < 0.3  # forgotten: this process's own time alone again
    finally:
        busy.kill()
        busy.wait()


def test_the_use_page_table_reads_the_engine_run(tmp_path):
    from clover2.measure.bench import paired, summarize
    from clover2.research.engines import brief, engines

    def method(name: str, tokens: list[int], seconds: float, steps: int, reference: str = "ar") -> Method:
        return Method(MethodSpec.parse(name), lambda prompt: Run(tokens, seconds, None, decode_s=seconds,
                                                                 totals=(steps, len(tokens) - 1)), reference=reference)

    methods = [method("ar", [1, 2, 3, 4, 5], 1.0, 4), method("llama.cpp", [1, 2, 3, 4, 5], 0.5, 4),
               method("llama.cpp+eagle3@chain3=/d/eagle3", [1, 2, 3, 4, 5], 0.4, 2, reference="llama.cpp"),
               method("eagle3@chain3=/d/eagle3", [1, 2, 3, 4, 5], 0.8, 2)]
    runs = interleaved(methods, {"a": [0], "b": [1]})
    folder = tmp_path / "engine"
    folder.mkdir()
    summarize(runs).to_csv(folder / "bench.csv", index=False)
    paired(runs).to_csv(folder / "paired.csv", index=False)
    (folder / "env.json").write_text(json.dumps({
        "cpu_name": "Some CPU", "cpu_count": 2, "torch_threads": 2, "commit": "abc1234", "other_load": 0.01,
        "bench": {"max_new_tokens": 64},
        "llama_cpp": {"version": "version: 1 (0c1e570)", "drafts": {"x": {"weights_sha256": "f" * 64}},
                      "attention": {"": "f32 KV cache, flash attention off", "!defaults": "defaults: f16 KV cache"}}}))
    text = engines(tmp_path)
    row = next(line for line in text.splitlines() if line.startswith("| llama.cpp, EAGLE-3,"))
    # 4 tokens over 2 steps after the first; 2.5x clover2's plain decoding, 1.25x llama.cpp's; the same output
    assert row.split(" | ")[1:] == ["2.00", "2.50x [2.50, 2.50]", "1.25x [1.25, 1.25]", "100% |"]
    assert "Some CPU" in text and "abc1234" in text and "3-token chain" in text and "OpenVINO" not in text
    assert text.startswith("llama.cpp's plain decoding runs 2.00x [2.00, 2.00] as fast as clover2's. "
                           "The fastest exact method here is llama.cpp, EAGLE-3, 3-token "
                           "chain, 2.50x clover2's plain decoding and 1.25x its engine's.")  # by the speed statistic
    # OpenVINO beside them: its plain decoding read against clover2's, its prompt lookup against its own
    methods += [method("openvino", [1, 2, 3, 4, 5], 0.25, 4),
                method("openvino+pld@chain3", [1, 2, 3, 4, 6], 0.2, 2, reference="openvino")]
    runs = interleaved(methods, {"a": [0], "b": [1]})
    summarize(runs).to_csv(folder / "bench.csv", index=False)
    paired(runs).to_csv(folder / "paired.csv", index=False)
    env = json.loads((folder / "env.json").read_text())
    (folder / "env.json").write_text(json.dumps(env | {"openvino": {"version": "2026.4.1.0"}}))
    text = engines(tmp_path)
    assert ("llama.cpp's plain decoding runs 2.00x [2.00, 2.00] as fast as clover2's; OpenVINO GenAI's plain "
            "decoding runs 4.00x [4.00, 4.00] as fast as clover2's. The fastest exact method here is OpenVINO GenAI, "
            "prompt lookup, 3-token chain, 5.00x clover2's plain decoding and 1.25x its engine's.") in text
    assert "OpenVINO GenAI 2026.4.1.0" in text and "| OpenVINO GenAI, prompt lookup, 3-token chain | 2.00 |" in text
    assert text.splitlines()[-1].endswith("| 0% |")  # its output parted from OpenVINO's plain decoding's
    # the same draft in OpenVINO: its dynamic tree said in words
    with_ov = methods + [method("openvino+eagle3@chain3=/d/eagle3", [1, 2, 3, 4, 5], 0.3, 4, reference="openvino"),
                         method("openvino+eagle3@dynamic:6:3:2=/d/eagle3", [1, 2, 3, 4, 5], 0.3, 1,
                                reference="openvino")]
    runs = interleaved(with_ov, {"a": [0], "b": [1]})
    summarize(runs).to_csv(folder / "bench.csv", index=False)
    paired(runs).to_csv(folder / "paired.csv", index=False)
    text = engines(tmp_path)
    assert "| OpenVINO GenAI, EAGLE-3, tree of 6 (depth 3, top 2) | 4.00 | 3.33x" in text
    # the advice box's sentence: every engine's plain decoding, the fastest exact method, clover2's fastest
    assert brief(tmp_path) == (
        "**Another engine first:** in one run on Some CPU ({doc}`serving`), plain decoding ran 2.00x [2.00, 2.00] as "
        "fast as clover2's in llama.cpp and 4.00x [4.00, 4.00] in OpenVINO GenAI; OpenVINO GenAI's, with no draft, "
        "3.20x [3.20, 3.20] as fast as clover2's fastest method, clover2's EAGLE-3 (3-token chain); the fastest "
        "exact method was OpenVINO GenAI's prompt lookup (3-token chain), 5.00x [5.00, 5.00] as fast as clover2's "
        "plain decoding.")
    assert brief(tmp_path / "nowhere") == ""
    assert engines(tmp_path / "nowhere").startswith("Not measured yet")


def test_an_engine_takes_the_target_at_f32_and_with_its_tokenizer(fresh_cache):
    """Both engines (llama.cpp, OpenVINO) convert the target at f32, clover2's exact path, from a Hugging Face
    folder: a bf16 target and a target without a tokenizer are refused, the engine named."""
    from dataclasses import replace

    from conftest import tiny_target

    from clover2.measure.engine import engine_home
    with pytest.raises(Clover2Error, match="OpenVINO methods run the target at f32.*--dtype float32"):
        engine_home(tiny_target("llama", dtype=torch.bfloat16), "OpenVINO")
    with pytest.raises(Clover2Error, match="no tokenizer: llama.cpp cannot convert it"):
        engine_home(replace(tiny_target("llama"), tokenizer=None), "llama.cpp")
    assert not list(fresh_cache.rglob("target-hf"))  # refused before anything is written
