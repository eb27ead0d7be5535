"""llama.cpp beside clover2: a real CPU engine's plain decoding, prompt lookup and EAGLE-3 as benchmark methods.

Someone who deploys on a CPU runs an engine, not a PyTorch loop, so the benchmark can run llama.cpp's
server, built from its source (`LlamaCpp.root`: a source tree with `build/bin/llama-server`), on the
same prompts as clover2's methods, interleaved with them prompt by prompt (`clover2.measure.bench`):

- `llama.cpp`: its plain greedy decoding;
- `llama.cpp+pld@chainK`: its prompt lookup (`--spec-type ngram-simple`), at most K tokens a step,
  looking up the last 3 tokens as clover2's prompt lookup does (the engine's default, 12, finds few
  matches in short answers);
- `llama.cpp+eagle3@chainK=DRAFT`: a clover2-trained EAGLE-3 draft, exported in the `speculators`
  layout (`clover2.drafts.export`) and converted by llama.cpp's own `convert_hf_to_gguf.py`, K tokens
  a step (llama.cpp verifies chains, not trees).

The target is converted from the very weights clover2 loads, at f32 (the draft too); the KV caches
are kept at f32 and flash attention is off (the engine's defaults, an f16 cache and, on a CPU, flash
attention, compute attention in f16: on one held-out prompt they moved a logit by 0.036 and made an
EAGLE-3 run's output differ from the engine's own plain decoding at a near-tie). So configured, the
engine and clover2 compute the same model, and greedy decoding in each should give the same tokens,
up to the order of floating-point sums. Each server gets the threads clover2 uses and one slot; a request sends
the prompt's token ids (its chat template already applied) with the prompt cache off, greedy, and
reads back the tokens and the server's counts. Tokens per step: the tokens decoded after the first
over the target's decoding steps, each of which commits its accepted draft tokens plus one, so
steps = decoded - 1 - accepted. The servers' CPU time counts as the benchmark's own
(`clover2.load.count_as_own`), not as other load.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import torch

from clover2.decoding.prompt_lookup import PromptLookupConfig
from clover2.decoding.target import Target
from clover2.drafts.checkpoint import SIDECAR, load_draft, target_record
from clover2.drafts.export import OURS, export_draft
from clover2.drafts.methods import ENGINE_DEFAULTS, MethodSpec, engine_of
from clover2.errors import Clover2Error
from clover2.files import atomic_path
from clover2.load import count_as_own
from clover2.measure.runs import Method, Run
from clover2.paths import cache_root

SPEC_TYPES = {"llama.cpp+pld": "ngram-simple", "llama.cpp+eagle3": "draft-eagle3"}  # method -> --spec-type
LOOKUP_NGRAM = PromptLookupConfig().max_ngram  # the n-gram llama.cpp's prompt lookup looks up, as clover2's
READY_S = 180  # how long a server may take to load its models


@dataclass(frozen=True)
class LlamaCpp:
    """A llama.cpp source tree built with cmake: its server and its converter."""

    root: Path

    @property
    def server(self) -> Path:
        return self.root / "build" / "bin" / "llama-server"

    @property
    def converter(self) -> Path:
        return self.root / "convert_hf_to_gguf.py"

    @classmethod
    def at(cls, root: str | Path) -> LlamaCpp:
        cpp = cls(Path(root).expanduser().resolve())
        if not cpp.converter.exists():
            raise Clover2Error(f"{cpp.root}: not a llama.cpp source tree (no convert_hf_to_gguf.py)")
        if not cpp.server.exists():
            raise Clover2Error(f"{cpp.root}: llama-server is not built; build it with `cmake -B build "
                               f"-DLLAMA_CURL=OFF && cmake --build build -j --target llama-server` there")
        return cpp

    def version(self) -> str:
        """`version: ... (build, commit ...)` as the server prints it."""
        out = subprocess.run([self.server, "--version"], capture_output=True, text=True, timeout=60)
        return next((line.strip() for line in (out.stdout + out.stderr).splitlines() if "version" in line), "")

    def convert(self, source: Path, out: Path, *, target_dir: Path | None = None) -> Path:
        """`source` (a Hugging Face folder) as an f32 GGUF at `out`, unless already there."""
        if out.exists():
            return out
        extra = ["--target-model-dir", str(target_dir)] if target_dir else []
        env = os.environ | {"PYTHONPATH": os.pathsep.join(filter(None, [str(self.root / "gguf-py"),
                                                                         os.environ.get("PYTHONPATH")]))}
        with atomic_path(out) as tmp:
            done = subprocess.run([sys.executable, str(self.converter), str(source), *extra, "--outtype", "f32",
                                   "--outfile", str(tmp)], capture_output=True, text=True, env=env)
            if done.returncode:
                raise Clover2Error(f"llama.cpp could not convert {source}:\n{done.stderr[-2000:]}\n(it needs "
                                   "numpy, sentencepiece and transformers in this Python)")
        return out


def engine_home(target: Target, engine: str) -> tuple[Path, Path]:
    """Where an engine's files for `target` live (the cache, keyed by the target's weights) and a Hugging Face
    folder of the target (config, weights, tokenizer) for the engine to convert: the one it was loaded from, or
    saved there. The engines run the target at f32, clover2's exact path."""
    if target.dtype != torch.float32:
        raise Clover2Error(f"the {engine} methods run the target at f32, as clover2's exact path: load the "
                           f"target in float32 (--dtype float32), not {target.dtype}")
    home = cache_root() / "engine" / target_record(target)["fingerprint_bf16"][:12]
    folder = Path(str(getattr(target.model, "name_or_path", "")))
    if (folder / "config.json").exists() and (folder / "tokenizer.json").exists():
        return home, folder
    if target.tokenizer is None:
        raise Clover2Error(f"target {target.name!r} has no tokenizer: {engine} cannot convert it")
    with atomic_path(home / "target-hf") as tmp:
        target.model.save_pretrained(tmp)
        target.tokenizer.save_pretrained(tmp)
    return home, home / "target-hf"


def eagle3_export(spec: MethodSpec, target: Target, home: Path, fmt: str, *,
                  embeddings: bool = False) -> tuple[str, Path]:
    """The SHA-256 of the weights of `spec`'s trained EAGLE-3 draft, and the draft exported for `target` in
    format `fmt` (clover2.drafts.export) into an engine's `home`, once (keyed by the weights)."""
    sha = json.loads((spec.draft / SIDECAR).read_text())["weights_sha256"]
    out = home / (f"eagle3-{sha[:12]}-{fmt}" + ("-embedding" if embeddings else ""))
    if not (out / OURS).exists():  # written last
        export_draft(load_draft(spec.draft, target, weights="float"), target, out, fmt, source_sha256=sha,
                     embeddings=embeddings)
    return sha, out


def stopped(process: subprocess.Popen, log) -> None:
    """A benchmark's helper process, asked to stop, waited for (killed after 30 s) and no longer counted as the
    benchmark's own; its log closed."""
    count_as_own(process.pid, forget=True)
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        process.kill()
    log.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """One llama-server process (one model, optionally a speculative method) and greedy requests to it."""

    def __init__(self, cpp: LlamaCpp, model: Path, log: Path, *, spec_type: str = "", draft: Path | None = None,
                 n_max: int = 0, threads: int = 1, context: int = 4096, exact: bool = True):
        self.port = _free_port()
        args = [str(cpp.server), "-m", str(model), "--host", "127.0.0.1", "--port", str(self.port),
                "-t", str(threads), "-tb", str(threads), "-c", str(context), "-np", "1", "--no-webui"]
        if exact:  # f32 attention too (see the module's docstring); else the engine's defaults
            args += ["-ctk", "f32", "-ctv", "f32", "-fa", "off"]
        if spec_type:
            args += ["--spec-type", spec_type, "--spec-draft-n-max", str(n_max)]
            if spec_type == "ngram-simple":  # clover2's prompt lookup's longest n-gram (the engine's default, 12,
                # matches little in short answers), and the chain's length
                args += ["--spec-ngram-simple-size-n", str(LOOKUP_NGRAM), "--spec-ngram-simple-size-m", str(n_max)]
        if draft is not None:
            args += ["-md", str(draft), "-td", str(threads), "-tbd", str(threads)]
            args += ["-ctkd", "f32", "-ctvd", "f32"] if exact else []
        self.args, self.log = args, log

    def __enter__(self) -> Server:
        self._log = open(self.log, "w")
        self.process = subprocess.Popen(self.args, stdout=self._log, stderr=subprocess.STDOUT)
        count_as_own(self.process.pid)
        deadline = time.monotonic() + READY_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise Clover2Error(f"llama-server stopped while loading ({' '.join(self.args)}):\n"
                                   + self.log.read_text()[-2000:])
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=5) as r:
                    if r.status == 200:
                        return self
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.5)
        self.__exit__()
        raise Clover2Error(f"llama-server did not come up in {READY_S} s; its log: {self.log}")

    def __exit__(self, *exc) -> None:
        self.process.terminate()
        stopped(self.process, self._log)

    def complete(self, prompt: list[int], max_new_tokens: int) -> Run:
        """Greedy decoding of `prompt` (token ids): its tokens, wall time, and the server's step counts."""
        body = json.dumps({"prompt": prompt, "n_predict": max_new_tokens, "temperature": 0.0, "top_k": 1,
                           "cache_prompt": False, "return_tokens": True, "stream": False}).encode()
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}/completion", data=body,
                                         headers={"Content-Type": "application/json"})
        start = time.perf_counter()
        with urllib.request.urlopen(request, timeout=600) as r:
            reply = json.loads(r.read())
        seconds = time.perf_counter() - start
        tokens, timing = list(reply["tokens"]), reply["timings"]
        accepted = int(timing.get("draft_n_accepted", 0))
        steps = len(tokens) - 1 - accepted  # each step commits its accepted draft tokens and one more
        return Run(tokens, seconds, None, decode_s=timing["predicted_ms"] / 1000, totals=(steps, len(tokens) - 1))


def engine_methods(cpp: LlamaCpp, specs: list[MethodSpec], target: Target, *, max_new_tokens: int,
                   threads: int, log_dir: Path, stack: ExitStack) -> tuple[list[Method], dict]:
    """The llama.cpp methods of `specs`, their servers started under `stack` (stopped when it closes),
    and what env.json records of them (the engine's version, the models' files and settings)."""
    home, folder = engine_home(target, "llama.cpp")
    model = cpp.convert(folder, home / "target-f32.gguf")
    log_dir.mkdir(parents=True, exist_ok=True)
    methods, record = [], {"engine": "llama.cpp", "version": cpp.version(), "target_gguf": model.name,
                           "threads": threads, "dtype": "f32", "drafts": {},
                           "attention": {"": "f32 KV cache, flash attention off",
                                         "!defaults": "the engine's defaults: f16 KV cache, flash attention auto"}}
    for s in (s for s in specs if engine_of(s.name) == "llama.cpp"):
        draft = None
        if s.name == "llama.cpp+eagle3":
            sha, exported = eagle3_export(s, target, home, "speculators")
            draft = cpp.convert(exported, home / f"eagle3-{sha[:12]}-f32.gguf", target_dir=folder)
            record["drafts"][s.label] = {"weights_sha256": sha, "gguf": draft.name}
        n_max = int(s.tree.removeprefix("chain")) if s.tree else 0
        exact = s.engine != ENGINE_DEFAULTS
        server = stack.enter_context(Server(cpp, model, log_dir / f"{s.label.replace('/', '_')}.log",
                                            spec_type=SPEC_TYPES.get(s.name, ""), draft=draft, n_max=n_max,
                                            threads=threads, exact=exact))
        plain = "llama.cpp" + ("" if exact else f"!{ENGINE_DEFAULTS}")
        methods.append(Method(s, lambda prompt, server=server: server.complete(prompt, max_new_tokens),
                              reference="ar" if s.label == plain else plain,
                              draft_weights="float" if draft else ""))
    return methods, record
