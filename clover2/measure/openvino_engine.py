"""OpenVINO GenAI beside clover2: the CPU engine Intel ships for LLMs, its plain decoding, prompt lookup and
EAGLE-3 drafts as benchmark methods.

A user who deploys a small model on a CPU may pick OpenVINO GenAI's `LLMPipeline`: a compiled graph with
its own kernels, not a PyTorch loop. The benchmark runs it in the Python that has it (`OpenVino.python`:
a separate environment, `.ci/openvino`, since optimum-intel pins its own torch and transformers), on the
same prompts as clover2's methods, interleaved with them prompt by prompt (`clover2.measure.bench`):

- `openvino`: its plain greedy decoding;
- `openvino+pld@chainK`: its prompt lookup (`prompt_lookup=True`), K tokens a step, looking up the last
  3 tokens as clover2's prompt lookup does;
- `openvino+eagle3@chainK=DRAFT` and `openvino+eagle3@dynamic:BUDGET:DEPTH:TOPK=DRAFT`: a trained EAGLE-3
  draft (`draft_model`), K tokens a step, or its tree of DEPTH levels keeping TOPK candidates a level and
  verifying the best BUDGET (`num_assistant_tokens`, `tree_depth`, `branching_factor`). The draft is
  written in SpecForge's layout with the target's embedding (`clover2.drafts.export`) and exported by
  optimum-intel at f32 like the target (its EAGLE-3 model is optimum-intel's own code: `--trust-remote-code`).
  OpenVINO GenAI does not read the draft's target layers from its config: unless the model says otherwise
  (`hidden_layers_list` in its runtime info), it takes the outputs of layers 2, L/2 and L-3, one layer past
  the inputs of those layers that EAGLE-3 reads (clover2's and the official code's choice). The draft
  still runs and greedy output stays exact, but it reads features it was not trained on; so the exported
  draft's runtime info is given the layers the export's config names (`eagle_aux_hidden_state_layer_ids`,
  outputs read; `read_layers`). Its Python binding cannot pass that list as a property (it wants 32-bit
  integers and makes 64-bit ones).

The target is exported by optimum-intel (`optimum-cli export openvino --weight-format fp32`) from the
very weights clover2 loads, and run with f32 inference precision and an f32 KV cache (the engine's
defaults on a CPU: bf16 inference where the CPU has it and a u8 KV cache, the `!defaults` methods),
so that engine and clover2 compute the same model and greedy decoding in each gives the same tokens, up
to the order of floating-point sums. Each pipeline gets the threads clover2 uses; a request sends the
prompt's token ids (its chat template already applied) and reads back the tokens, the target's steps
and their time (`clover2.measure.openvino_worker`, the engine's side). Its process's CPU time counts as
the benchmark's own (`clover2.load.count_as_own`), not as other load.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from xml.etree import ElementTree

from clover2.decoding.prompt_lookup import PromptLookupConfig
from clover2.decoding.target import Target
from clover2.drafts.drafter import DynamicTree
from clover2.drafts.methods import ENGINE_DEFAULTS, MethodSpec, engine_of, parse_tree
from clover2.errors import Clover2Error
from clover2.files import atomic_path
from clover2.load import count_as_own
from clover2.measure.engine import eagle3_export, engine_home, stopped
from clover2.measure.runs import Method, Run

WORKER = Path(__file__).with_name("openvino_worker.py")
# the exact path: the model clover2 computes (see the module's docstring); `!defaults`: the engine's own
EXACT = {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32"}
LOOKUP_NGRAM = PromptLookupConfig().max_ngram  # the n-gram prompt lookup matches, as clover2's


@dataclass(frozen=True)
class OpenVino:
    """A Python with openvino-genai and optimum-intel (`.ci/openvino` makes one)."""

    python: Path

    @classmethod
    def at(cls, python: str | Path) -> OpenVino:
        ov = cls(Path(python).expanduser().absolute())
        done = subprocess.run([str(ov.python), "-c", "import openvino_genai, optimum.intel; "
                               "print(openvino_genai.__version__)"], capture_output=True, text=True)
        if done.returncode:
            raise Clover2Error(f"{ov.python}: not a Python with openvino-genai and optimum-intel (make one with "
                               f"`.ci/openvino`):\n{done.stderr[-1000:]}")
        return ov

    def export(self, source: Path, out: Path, *, remote_code: bool = False) -> Path:
        """`source` (a Hugging Face folder) as an OpenVINO model with f32 weights at `out`, unless already there;
        `remote_code`: a model whose code is optimum-intel's own (an EAGLE-3 draft). No hub is asked."""
        if (out / "openvino_model.xml").exists():
            return out
        with atomic_path(out) as tmp:
            done = subprocess.run([str(self.python), "-m", "optimum.commands.optimum_cli", "export", "openvino",
                                   "--model", str(source), "--task", "text-generation-with-past",
                                   "--weight-format", "fp32", *(["--trust-remote-code"] if remote_code else []),
                                   str(tmp)], capture_output=True, text=True, env=os.environ | {"HF_HUB_OFFLINE": "1"})
            if done.returncode:
                raise Clover2Error(f"optimum-intel could not export {source}:\n{done.stderr[-2000:]}")
        return out


def read_layers(draft: Path, layers: list[int]) -> None:
    """The exported EAGLE-3 `draft` told to read the outputs of the target's `layers` (its runtime info's
    `hidden_layers_list`, which OpenVINO GenAI takes over its default), unless it already is; the model's
    XML is rewritten atomically, its weights untouched."""
    xml = draft / "openvino_model.xml"
    try:
        tree = ElementTree.parse(xml)
    except (OSError, ElementTree.ParseError) as e:
        raise Clover2Error(f"{xml}: not a readable OpenVINO model ({e}); delete {draft} to export it again") from None
    info = tree.getroot().find("rt_info")
    if info is None:
        info = ElementTree.SubElement(tree.getroot(), "rt_info")
    value = " ".join(map(str, layers))
    entry = info.find("hidden_layers_list")
    if entry is not None and entry.get("value") == value:
        return
    if entry is None:
        entry = ElementTree.SubElement(info, "hidden_layers_list")
    entry.set("value", value)
    with atomic_path(xml) as tmp:
        tree.write(tmp, encoding="utf-8", xml_declaration=True)


def speculation(spec: MethodSpec, draft: Path | None = None) -> dict:
    """What the worker sets up for method `spec` (`draft`: its EAGLE-3 draft exported for OpenVINO): the
    pipeline's prompt lookup or draft model, and the generation config's fields; {} for plain decoding."""
    if not spec.tree:
        return {}
    tree = parse_tree(spec.tree)
    steps = ({"num_assistant_tokens": tree.budget, "tree_depth": tree.depth, "branching_factor": tree.top_k}
             if isinstance(tree, DynamicTree) else {"num_assistant_tokens": tree.max_depth})
    if spec.name == "openvino+pld":
        return {"prompt_lookup": True, "generation": steps | {"max_ngram_size": LOOKUP_NGRAM}}
    if draft is None:
        raise Clover2Error(f"{spec.label}: no OpenVINO draft model given")
    return {"draft": str(draft), "generation": steps}


class Pipeline:
    """One OpenVINO GenAI pipeline (plain decoding, or speculative decoding as `speculation` sets it up) in its
    own process."""

    def __init__(self, ov: OpenVino, model: Path, log: Path, *, speculation: dict | None = None, threads: int = 1,
                 exact: bool = True):
        properties = {"INFERENCE_NUM_THREADS": threads, **(EXACT if exact else {})}
        self.args = [str(ov.python), str(WORKER), str(model), json.dumps(properties), json.dumps(speculation or {})]
        self.log = log

    def __enter__(self) -> Pipeline:
        self._log = open(self.log, "w")
        self.process = subprocess.Popen(self.args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log,
                                        text=True)
        count_as_own(self.process.pid)
        ready = self.process.stdout.readline()
        if not ready:
            self.__exit__()
            raise Clover2Error(f"OpenVINO GenAI stopped while loading ({' '.join(self.args)}):\n"
                               + self.log.read_text()[-2000:])
        self.version = json.loads(ready)["version"]
        return self

    def __exit__(self, *exc) -> None:
        self.process.stdin.close()  # the worker's loop ends
        stopped(self.process, self._log)

    def complete(self, prompt: list[int], max_new_tokens: int) -> Run:
        """Greedy decoding of `prompt` (token ids): its tokens, wall time, and the engine's step count."""
        start = time.perf_counter()
        self.process.stdin.write(json.dumps({"prompt": prompt, "max_new_tokens": max_new_tokens}) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        seconds = time.perf_counter() - start
        reply = json.loads(line) if line else {"error": "the process stopped: " + self.log.read_text()[-1000:]}
        if "error" in reply:
            raise Clover2Error(f"OpenVINO GenAI ({' '.join(self.args[2:])}): {reply['error']}")
        tokens = reply["tokens"]
        return Run(tokens, seconds, None, decode_s=reply["decode_s"], totals=(reply["steps"], len(tokens) - 1))


def openvino_methods(ov: OpenVino, specs: list[MethodSpec], target: Target, *, max_new_tokens: int, threads: int,
                     log_dir: Path, stack) -> tuple[list[Method], dict]:
    """The OpenVINO methods of `specs`, their pipelines started under `stack` (stopped when it closes),
    and what env.json records of them (the engine's version, the model and its settings)."""
    home, folder = engine_home(target, "OpenVINO")
    model = ov.export(folder, home / "openvino-f32")
    log_dir.mkdir(parents=True, exist_ok=True)
    methods, record = [], {"engine": "OpenVINO GenAI", "threads": threads, "weights": "f32", "drafts": {},
                           "settings": {"": EXACT, ENGINE_DEFAULTS: "the engine's defaults"}}
    for s in (s for s in specs if engine_of(s.name) == "openvino"):
        draft = None
        if s.name == "openvino+eagle3":
            sha, exported = eagle3_export(s, target, home, "specforge", embeddings=True)
            draft = ov.export(exported, home / f"eagle3-{sha[:12]}-openvino-f32", remote_code=True)
            layers = json.loads((exported / "config.json").read_text())["eagle_config"][
                "eagle_aux_hidden_state_layer_ids"]  # outputs read, as OpenVINO GenAI numbers them
            read_layers(draft, layers)
            record["drafts"][s.label] = {"weights_sha256": sha, "openvino": draft.name, "layers_read": layers}
        exact = s.engine != ENGINE_DEFAULTS
        pipeline = stack.enter_context(Pipeline(ov, model, log_dir / f"{s.label.replace('/', '_')}.log",
                                                speculation=speculation(s, draft), threads=threads, exact=exact))
        record["version"] = pipeline.version
        plain = "openvino" + ("" if exact else f"!{ENGINE_DEFAULTS}")
        methods.append(Method(s, lambda prompt, p=pipeline: p.complete(prompt, max_new_tokens),
                              reference="ar" if s.label == plain else plain, draft_weights="float" if draft else ""))
    return methods, record
