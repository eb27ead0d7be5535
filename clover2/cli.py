"""`clover2` command line: targets, prepare-target, prepare-data, train, generate, bench, notebooks, study, cost-curve."""

from __future__ import annotations

import argparse
import functools
import json
import sys
from pathlib import Path

from clover2.decoding.builtin import DEFAULT_TARGET
from clover2.decoding.cache import ENGINES
from clover2.errors import Clover2Error


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


PROFILE_HELP = "profile: a shipped name (cpu, cpu-full, smoke, paper-vicuna7b, paper-llama3-8b) or a YAML path " \
               "(default: $CLOVER2_PROFILE, else cpu)"
KERNELS_HELP = ("the linear kernels of the target and the drafts: auto (per row count, the one measured fastest on "
                "this machine, cached), or one forced everywhere: stock, packed (oneDNN) or mkl (MKL packed GEMM)")


def _parser() -> argparse.ArgumentParser:
    from clover2 import __version__
    from clover2.training.data import SOURCES

    p = argparse.ArgumentParser(prog="clover2", description=__doc__, formatter_class=_Help)
    p.add_argument("--version", action="version", version=f"clover2 {__version__} ({_commit()})")
    sub = p.add_subparsers(required=True, metavar="COMMAND")
    sub.add_parser = functools.partial(sub.add_parser, formatter_class=_Help)

    s = sub.add_parser("targets", help="list the built-in targets")
    s.set_defaults(func=_targets)

    s = sub.add_parser("prepare-target", help="fetch and convert a built-in target into the cache")
    s.add_argument("--target", default=DEFAULT_TARGET, help="a built-in target name")
    s.set_defaults(func=_prepare)

    s = sub.add_parser("generate", help="generate answers to prompts, printing one JSON object per prompt")
    _target_args(s)
    s.add_argument("--method", default="ar", choices=_generate_methods(),
                   help="ar: plain decoding; pld: prompt lookup; suffix: a suffix cache; tr: Token Recycling; "
                        "a draft architecture, pld+ARCH or suffix+ARCH (prompt lookup or the suffix cache, else the "
                        "draft) or union+ARCH (the suffix cache, prompt lookup and the draft in one tree); the "
                        "last four need --draft")
    _draft_args(s)
    src = s.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompt", help="one user turn")
    src.add_argument("--prompts", type=Path, help='JSONL: {"id", "prompt"} or {"id", "turns": [...]} per line')
    _decode_args(s)
    s.add_argument("--json", action="store_true", help="print JSON lines (default: the text only)")
    s.set_defaults(func=_generate)

    s = sub.add_parser("bench", help="tasks x methods x temperatures against plain decoding, interleaved")
    s.add_argument("--profile", help=PROFILE_HELP + "; its bench section is run")
    s.add_argument("--target", help="override the profile's target (built-in name, folder or hub id)")
    s.add_argument("--adapter", type=Path, help="a LoRA adapter folder (peft) to merge into the target")
    s.add_argument("--dtype", help="override the profile's dtype (auto, float32, bfloat16)")
    s.add_argument("--device", help="override the profile's device")
    s.add_argument("--chat-template", help="override the profile's chat template (vicuna, or a Jinja file)")
    s.add_argument("--kernels", default="auto", help=KERNELS_HELP)
    s.add_argument("--draft-weights", help="the drafts' linear weights while decoding: auto (int8 on a CPU), "
                                           "float or int8 (overrides the profile)")
    s.add_argument("--tasks", help="comma-separated tasks (mt_bench, translation, summarization, qa, gsm8k, rag, "
                   "humaneval) or prompts .jsonl files, e.g. Spec-Bench's question.jsonl")
    s.add_argument("--prompts", type=Path, help="one prompts JSONL file as the only task")
    s.add_argument("--n-per-task", type=int, help="seeded sample per task (per category of a .jsonl file)")
    s.add_argument("--methods", help="comma-separated NAME[@TREE][/TEMPERATURE][!ENGINE][=DRAFT_PATH]; eager 'ar' at "
                   "each temperature is the reference; TREE: eagle25, medusa63, chainK, dynamic:B:D:K or fitted; "
                   "ENGINE: static or graphs (CUDA graphs on a GPU)")
    s.add_argument("--drafts", type=Path, help="folder with one trained draft per architecture "
                   "(default: $CLOVER2_CACHE/drafts/<profile>)")
    s.add_argument("--max-new-tokens", type=int, help="override the profile's cap on new tokens per prompt")
    s.add_argument("--repeats", type=int, help="override the profile's repeats of every prompt")
    s.add_argument("--top-p", type=float, help="for methods at temperature > 0")
    s.add_argument("--top-k", type=int, help="for methods at temperature > 0")
    s.add_argument("--seed", type=int, help="override the profile's seed (task samples and sampling)")
    s.add_argument("--out", type=Path, required=True, help="folder for bench.csv, runs.csv, env.json")
    s.set_defaults(func=_bench)

    s = sub.add_parser("prepare-data", help="ShareGPT labelled by the target (hidden states, top-k), and a held-out set")
    s.add_argument("--profile", help=PROFILE_HELP)
    s.add_argument("--out", type=Path, help="data folder (default: $CLOVER2_CACHE/data/<profile>); "
                                            "the held-out set goes to OUT-eval")
    s.add_argument("--sharegpt", type=Path, help="a full ShareGPT JSON file instead of the wheel's copy")
    s.set_defaults(func=_prepare_data)

    s = sub.add_parser("train", help="train a draft on prepared data (torchrun for several processes)")
    s.add_argument("--profile", help=PROFILE_HELP)
    s.add_argument("--arch", required=True, choices=_architectures())
    s.add_argument("--data", type=Path, action="append",
                   help="data folder (default: $CLOVER2_CACHE/data/<profile>); repeat it to train on a mix; "
                        "held-out evaluation reads --eval, else the first DATA-eval where it exists")
    s.add_argument("--eval", type=Path, help="held-out data folder (default: DATA-eval)")
    s.add_argument("--out", type=Path, help="draft folder (default: $CLOVER2_CACHE/drafts/<profile>/<arch>)")
    s.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                   help="override a draft config field (the ablations), e.g. extraction=after")
    s.add_argument("--max-minutes", type=float, help="override the profile's training time budget")
    s.add_argument("--max-steps", type=int, help="override the profile's step budget")
    s.add_argument("--sources", choices=SOURCES, nargs="+",
                   help="train on these parts of the data only (default: the profile's train.sources)")
    s.add_argument("--ttt-steps", type=int, help="training-time test: train this many heads, each on the draft's own "
                                                 "states (default: the profile's train.ttt_steps; 0: the architecture's own)")
    s.set_defaults(func=_train)

    s = sub.add_parser("curves", help="learning curves: replay every snapshot of long training runs (greedy tau, untimed)")
    s.add_argument("--profile", help=PROFILE_HELP)
    s.add_argument("--run", action="append", required=True, metavar="NAME=FOLDER",
                   help="a draft's training folder, whose snapshots/ are measured (repeat per draft)")
    s.add_argument("--out", type=Path, required=True, help="folder for the curves' CSV tables")
    s.add_argument("--n-per-task", type=int, default=10, help="benchmark prompts per task")
    s.add_argument("--dev-per-task", type=int, help="dev prompts per task (default: the profile's data.dev_per_task)")
    s.add_argument("--max-new-tokens", type=int, help="default: the profile's bench.max_new_tokens")
    s.set_defaults(func=_curves)

    s = sub.add_parser("coverage", help="how much of each task's answers the k most frequent training tokens cover")
    s.add_argument("--profile", help=PROFILE_HELP)
    s.add_argument("--data", type=Path, action="append", required=True, help="training data folder (repeat for a mix)")
    s.add_argument("--eval", type=Path, required=True, help="held-out data folder (answers per task)")
    s.add_argument("--sizes", default="1024,2048,4096,8192,16384,32768", help="draft vocabulary sizes, comma-separated")
    s.add_argument("--out", type=Path, help="a CSV for the table")
    s.set_defaults(func=_coverage)

    s = sub.add_parser("notebooks", help="execute the notebooks with papermill into RESULTS/<profile>/notebooks")
    s.add_argument("--profile", help=PROFILE_HELP)
    s.add_argument("--notebooks", type=Path, default=Path("notebooks"), help="the notebooks of a clover2 checkout")
    s.add_argument("--results", type=Path, help="results root (default: $CLOVER2_RESULTS, else ./results)")
    s.add_argument("--only", action="append", help="run only this notebook (repeatable), e.g. 04_speedup")
    s.add_argument("-p", "--parameter", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"),
                   help="an extra notebook parameter (YAML value), e.g. -p target /models/vicuna-7b")
    s.add_argument("--dry-run", action="store_true",
                   help="the profile's study at the smoke profile's sizes, in fp32 on the CPU, into RESULTS/<profile>-dry")
    s.set_defaults(func=_notebooks)

    s = sub.add_parser("study", help="the designed study (book/protocol.md): run what is left, or say what is done")
    s.add_argument("action", choices=["run", "status", "report", "publish", "check"],
                   help="run: train and replay every run still to do, in order, resuming; status: one line per run; "
                        "report: the results page and its tables from what has finished; publish: seed 0 of each arm "
                        "into RESULTS/<profile>/drafts (bf16); check: replay the published drafts against their committed tau")
    s.add_argument("--profile", default="study", help="a profile with a design section")
    s.add_argument("--results", type=Path, help="results root (default: $CLOVER2_RESULTS, else ./results)")
    s.set_defaults(func=_study)

    s = sub.add_parser("cost-curve", help="target forward time for N new tokens over a cached prefix")
    _target_args(s)
    s.add_argument("--prefix", type=int, default=200, help="tokens already in the cache")
    s.add_argument("--repeats", type=int, default=7, help="timed rounds over all sizes (after one warm-up)")
    s.add_argument("--engine", default="eager", choices=ENGINES, help="the target's KV cache (clover2.decoding.cache)")
    s.add_argument("--out", type=Path, required=True, help="folder for cost_curve.csv, kernels.csv (each kernel's "
                   "time per row count, when --kernels auto measured them) and cost_curve_env.json")
    s.set_defaults(func=_cost_curve)
    return p


def _architectures() -> list[str]:
    from clover2.drafts import ARCHITECTURES

    return list(ARCHITECTURES)


def _generate_methods() -> list[str]:
    from clover2.measure.methods import BASELINES, HYBRIDS, UNIONS

    return [*BASELINES, "suffix", "tr", *_architectures(), *HYBRIDS, *UNIONS]


def _commit() -> str:
    from clover2.measure.provenance import commit

    return f"commit {commit()}"


def _draft_args(s):
    s.add_argument("--draft", type=Path, help="a trained draft folder (for the draft methods)")
    s.add_argument("--tree", default="eagle25", help="a preset (eagle25, medusa63, chainK) or dynamic:BUDGET:DEPTH:TOPK")


def _target_args(s):
    s.add_argument("--target", default=DEFAULT_TARGET, help="built-in name, checkpoint folder or hub id")
    s.add_argument("--adapter", type=Path, help="a LoRA adapter folder (peft) to merge into the target")
    s.add_argument("--dtype", default="auto", help="auto (bf16 where the hardware has it), float32, bfloat16")
    s.add_argument("--device", default="cpu")
    s.add_argument("--chat-template", help="a chat template for a tokenizer without one: vicuna, or a Jinja file")
    s.add_argument("--kernels", default="auto", help=KERNELS_HELP)


def _decode_args(s):
    s.add_argument("--max-new-tokens", type=int, default=256, help="cap on new tokens per answer")
    s.add_argument("--temperature", type=float, default=0.0, help="0: greedy; > 0: sampling (lossless)")
    s.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling mass (1: off)")
    s.add_argument("--top-k", type=int, default=0, help="sample among the k most likely tokens (0: off)")
    s.add_argument("--seed", type=int, default=0, help="seed of the sampling generator")
    s.add_argument("--stop", action="append", default=[], help="a stop string (repeatable)")


def _load(args):
    from clover2.decoding.target import load_target

    return load_target(args.target, dtype=args.dtype, device=args.device, adapter=args.adapter,
                       chat_template=args.chat_template, kernels=args.kernels)


def _decode_config(args):
    from clover2.decoding.decode import DecodeConfig
    from clover2.decoding.sampling import SamplingConfig

    sampling = SamplingConfig(temperature=args.temperature, top_p=args.top_p, top_k=args.top_k, seed=args.seed)
    return DecodeConfig(max_new_tokens=args.max_new_tokens, stop_strings=tuple(args.stop), sampling=sampling)


def _targets(args):
    from clover2.decoding.builtin import BUILTIN_TARGETS

    for name, spec in BUILTIN_TARGETS.items():
        print(f"{name}\t{spec.about}\t(from PyPI: {spec.package}=={spec.version})")


def _prepare(args):
    from clover2.decoding.target import prepare_builtin

    print(prepare_builtin(args.target))


def _generate(args):
    from clover2.decoding.prompts import PromptRecord, conversation_json, read_prompts, run_conversation
    from clover2.measure.methods import TREE_METHODS, MethodSpec, drafter_factory

    config = _decode_config(args)
    records = read_prompts(args.prompts) if args.prompts else [PromptRecord(id="0", turns=(args.prompt,))]
    spec = MethodSpec.parse(args.method + (f"@{args.tree}" if args.method in TREE_METHODS else ""))
    if spec.is_draft and args.draft is None:
        raise Clover2Error(f"--method {args.method} needs --draft PATH (a folder written by `clover2 train`)")
    target = _load(args)
    spec = MethodSpec(spec.name, spec.tree, config.sampling.temperature, args.draft)
    make = drafter_factory(spec, target, sampling=config.sampling)
    for record in records:
        result = conversation_json(target, record, run_conversation(target, make, record, config))
        print(json.dumps(result) if args.json else result["text"], flush=True)


def _bench(args):
    from dataclasses import replace

    from clover2.decoding.target import load_target
    from clover2.measure.bench import run_bench
    from clover2.paths import cache_root
    from clover2.profiles import load_profile

    profile = load_profile(args.profile)
    split = lambda text: tuple(x.strip() for x in text.split(",") if x.strip())  # noqa: E731
    overrides = {"tasks": split(args.tasks) if args.tasks else (str(args.prompts),) if args.prompts else None,
                 "methods": split(args.methods) if args.methods else None, "n_per_task": args.n_per_task,
                 "max_new_tokens": args.max_new_tokens, "repeats": args.repeats, "top_p": args.top_p,
                 "top_k": args.top_k, "seed": args.seed, "draft_weights": args.draft_weights}
    config = replace(profile.bench, **{k: v for k, v in overrides.items() if v is not None})
    target = load_target(args.target or profile.target, dtype=args.dtype or profile.dtype,
                         device=args.device or profile.device, adapter=args.adapter,
                         chat_template=args.chat_template or profile.chat_template, kernels=args.kernels)
    drafts = args.drafts or cache_root() / "drafts" / profile.name
    table = run_bench(target, config, drafts, args.out)
    print(table.to_string(index=False, float_format=lambda x: f"{x:.3f}"))


def _prepare_data(args):
    from clover2.paths import cache_root
    from clover2.profiles import load_profile
    from clover2.training.corpora import sharegpt_conversations
    from clover2.training.data import prepare_data, split_corpus
    from clover2.training.tasks import benchmark_texts
    from clover2.training.train import setup_distributed

    profile = load_profile(args.profile)
    rank, world = setup_distributed()
    target = profile.load_target()
    out = args.out or cache_root() / "data" / profile.name
    training, held = split_corpus(sharegpt_conversations(args.sharegpt), benchmark_texts())
    prepare_data(target, held, out.with_name(out.name + "-eval"), profile.data.held_out_set(), rank=rank, world=world)
    meta = prepare_data(target, training, out, profile.data, rank=rank, world=world)
    if rank == 0:
        print(json.dumps({k: meta[k] for k in ("tokens", "response_tokens", "bytes_per_token", "hash",
                                                "label_tokens_per_s")}))


def _train(args):
    from dataclasses import replace

    from clover2.paths import cache_root
    from clover2.profiles import load_profile
    from clover2.training.train import setup_distributed, train

    profile = load_profile(args.profile)
    overrides = dict(_parse_setting(s) for s in args.set)
    draft_config = profile.draft_config(args.arch, **overrides)
    train_config = profile.train_config(args.arch)
    if args.max_minutes is not None:
        train_config = replace(train_config, max_minutes=args.max_minutes)
    if args.max_steps is not None:
        train_config = replace(train_config, max_steps=args.max_steps)
    if args.sources:
        train_config = replace(train_config, sources=tuple(args.sources))
    if args.ttt_steps is not None:
        train_config = replace(train_config, ttt_steps=args.ttt_steps)
    rank, _ = setup_distributed()
    target = profile.load_target()
    data = args.data or [cache_root() / "data" / profile.name]
    out = args.out or cache_root() / "drafts" / profile.name / args.arch
    held = data[0].with_name(data[0].name + "-eval")
    metrics = train(target, data, out, draft_config, train_config, eval_dir=args.eval or (held if held.exists() else None))
    if rank == 0:
        print(json.dumps({"out": str(out), **{k: round(v, 4) for k, v in metrics.items()}}))


def _curves(args):
    from clover2.profiles import load_profile
    from clover2.research.curves import run

    profile = load_profile(args.profile)
    runs = dict(_parse_run(s) for s in args.run)
    dev = profile.data.dev_per_task if args.dev_per_task is None else args.dev_per_task
    if dev < 1:
        raise Clover2Error("curves: give --dev-per-task (the profile's data.dev_per_task is 0)")
    tables = run(profile.load_target(), runs, args.out, tasks=profile.bench.tasks, n_per_task=args.n_per_task,
                 dev_per_task=dev, max_new_tokens=args.max_new_tokens or profile.bench.max_new_tokens,
                 seed=profile.data.seed)
    print(tables["taus"].to_string(index=False, float_format=lambda x: f"{x:.3f}") if "taus" in tables
          else "no snapshot to measure yet")


def _study(args):
    import pandas as pd

    from clover2.files import write_csv, write_text
    from clover2.measure.provenance import machine
    from clover2.research.design import Experiment
    from clover2.research.study import Study
    from clover2.research.verdicts import analyze, page

    # stock kernels: the study's replays give the same tokens on every machine and session it spans
    experiment = Experiment(Study.open(args.profile, results=args.results / args.profile if args.results else None,
                                       kernels="stock"))
    if args.action == "run":
        experiment.run()
    if args.action == "publish":
        for folder in experiment.publish():
            print(folder)
        return
    if args.action == "check":
        table = experiment.check_published()
        print(table.to_string(index=False))
        if not table.empty and (table.difference.abs() > 0.01).any():
            raise Clover2Error("a published draft's tau differs from the committed one by more than 0.01")
        return
    table = experiment.status()
    if args.action == "report":
        runs = experiment.records()
        replays = pd.read_csv(experiment.replays_csv) if experiment.replays_csv.exists() else pd.DataFrame()
        tables = analyze(experiment.design, runs, replays, experiment.dev())
        for name, df in tables.items():
            write_csv(experiment.study.results / f"{name}.csv", df)
        cpus = ", ".join(sorted(set(runs.cpu))) if len(runs) else machine()["cpu_name"]
        commits = ", ".join(sorted(set(runs.commit))) if len(runs) else "-"
        write_text(experiment.study.results / "README.md", page(experiment.design, tables, table, machine=cpus, commits=commits))
        print(experiment.study.results / "README.md")
        return
    print(table.to_string(index=False))
    left = table[table.state != "done"]
    print(f"{len(table) - len(left)} of {len(table)} runs done; {int(left.steps.sum())} training steps left "
          f"(+ {int(left.steps.isna().sum())} runs whose rate is not chosen yet); "
          f"{int((table.to_replay != '').sum())} runs to replay")


def _coverage(args):
    from clover2.profiles import load_profile
    from clover2.training.data import DistillData
    from clover2.training.vocab import coverage, ranked_tokens

    target = load_profile(args.profile).load_target()
    data, held = DistillData(*args.data), DistillData(args.eval)
    for d in (data, held):
        d.check_target(target)
    V = target.config.get_text_config().vocab_size
    sizes = [int(k) for k in args.sizes.split(",")] + [V]
    table = coverage(ranked_tokens(data, V, list(range(len(data.sequences)))), held, sizes)
    wide = table.pivot(index="category", columns="size", values="coverage")
    print(wide.to_string(float_format=lambda x: f"{x:.3f}"))
    if args.out:
        from clover2.files import write_text

        write_text(args.out, table.to_csv(index=False))


def _parse_run(text: str) -> tuple[str, Path]:
    name, sep, folder = text.partition("=")
    if not sep or not Path(folder).is_dir():
        raise Clover2Error(f"--run takes NAME=FOLDER with an existing training folder, got {text!r}")
    return name, Path(folder)


def _parse_setting(text: str) -> tuple[str, object]:
    key, sep, value = text.partition("=")
    if not sep:
        raise Clover2Error(f"--set takes FIELD=VALUE, got {text!r}")
    import yaml

    return key.strip(), yaml.safe_load(value)


def _notebooks(args):
    import yaml

    from clover2.profiles import dry_run_profile
    from clover2.research.notebooks import run_notebooks

    parameters = {k: yaml.safe_load(v) for k, v in args.parameter}
    profile = str(dry_run_profile(args.profile)) if args.dry_run else args.profile
    for path in run_notebooks(profile, source=args.notebooks, results=args.results, only=args.only,
                              parameters=parameters):
        print(path)


def _cost_curve(args):
    import pandas as pd

    from clover2.files import write_csv, write_json
    from clover2.measure.fit import cost_curve
    from clover2.measure.provenance import environment

    target = _load(args)
    curve = cost_curve(target, prefix=args.prefix, repeats=args.repeats, engine=args.engine)
    write_csv(args.out / "cost_curve.csv", curve)
    write_csv(args.out / "kernels.csv", pd.DataFrame(target.kernel_record()["timings"]))  # what the kernels were chosen from
    write_json(args.out / "cost_curve_env.json", environment(target) | {"prefix": args.prefix, "engine": args.engine})
    print(curve.to_string(index=False, float_format=lambda x: f"{x:.3f}"))


if __name__ == "__main__":
    sys.exit(main())
