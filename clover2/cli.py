"""`clover2` command line: targets, prepare-target, generate, bench, cost-curve."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from clover2.errors import Clover2Error


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return args.func(args) or 0
    except Clover2Error as e:
        print(f"clover2: error: {e}", file=sys.stderr)
        return 2


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="clover2", description=__doc__)
    sub = p.add_subparsers(required=True, metavar="COMMAND")

    s = sub.add_parser("targets", help="list the built-in targets")
    s.set_defaults(func=_targets)

    s = sub.add_parser("prepare-target", help="fetch and convert a built-in target into the cache")
    s.add_argument("--target", default="smollm2-135m-instruct")
    s.set_defaults(func=_prepare)

    s = sub.add_parser("generate", help="generate answers to prompts, printing one JSON object per prompt")
    _target_args(s)
    s.add_argument("--method", default="ar", choices=["ar", "pld"], help="ar: plain decoding; pld: prompt lookup")
    src = s.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompt", help="one user turn")
    src.add_argument("--prompts", type=Path, help='JSONL: {"id", "prompt"} or {"id", "turns": [...]} per line')
    _decode_args(s)
    s.add_argument("--json", action="store_true", help="print JSON lines (default: the text only)")
    s.set_defaults(func=_generate)

    s = sub.add_parser("bench", help="methods against plain decoding, interleaved prompt by prompt")
    _target_args(s)
    s.add_argument("--prompts", type=Path, required=True)
    s.add_argument("--methods", default="ar,pld,hf,hf-pld", help="comma-separated; 'ar' is the reference")
    s.add_argument("--repeats", type=int, default=1)
    _decode_args(s)
    s.add_argument("--out", type=Path, required=True, help="folder for runs.csv, summary.csv, env.json")
    s.set_defaults(func=_bench)

    s = sub.add_parser("cost-curve", help="target forward time for N new tokens over a cached prefix")
    _target_args(s)
    s.add_argument("--prefix", type=int, default=200)
    s.add_argument("--repeats", type=int, default=7)
    s.add_argument("--out", type=Path, required=True)
    s.set_defaults(func=_cost_curve)
    return p


def _target_args(s):
    s.add_argument("--target", default="smollm2-135m-instruct", help="built-in name, checkpoint folder or hub id")
    s.add_argument("--adapter", type=Path, help="a LoRA adapter folder (peft) to merge into the target")
    s.add_argument("--dtype", default="auto", help="auto (bf16 where the hardware has it), float32, bfloat16")
    s.add_argument("--device", default="cpu")


def _decode_args(s):
    s.add_argument("--max-new-tokens", type=int, default=256)
    s.add_argument("--temperature", type=float, default=0.0, help="only 0 (greedy) for now")
    s.add_argument("--stop", action="append", default=[], help="a stop string (repeatable)")


def _load(args):
    from clover2.target import load_target

    return load_target(args.target, dtype=args.dtype, device=args.device, adapter=args.adapter)


def _decode_config(args):
    from clover2.decode import DecodeConfig

    if args.temperature != 0:
        raise Clover2Error("only --temperature 0 (greedy) is implemented so far")
    return DecodeConfig(max_new_tokens=args.max_new_tokens, stop_strings=tuple(args.stop))


def _targets(args):
    from clover2.target import BUILTIN_TARGETS

    for name, spec in BUILTIN_TARGETS.items():
        print(f"{name}\t{spec.about}\t(from PyPI: {spec.package}=={spec.version})")


def _prepare(args):
    from clover2.target import BUILTIN_TARGETS, _unknown_target_message, prepare_builtin

    if args.target not in BUILTIN_TARGETS:
        raise Clover2Error(_unknown_target_message(args.target))
    print(prepare_builtin(args.target))


def _generate(args):
    from clover2.drafters import NoDrafter, PromptLookupDrafter
    from clover2.prompts import PromptRecord, conversation_json, read_prompts, run_conversation

    config = _decode_config(args)
    records = read_prompts(args.prompts) if args.prompts else [PromptRecord(id="0", turns=(args.prompt,))]
    target = _load(args)
    make = NoDrafter if args.method == "ar" else PromptLookupDrafter
    for record in records:
        result = conversation_json(target, record, run_conversation(target, make, record, config))
        print(json.dumps(result) if args.json else result["text"], flush=True)


def _bench(args):
    from clover2.bench import environment, interleaved, make_method, summarize
    from clover2.files import write_csv, write_json
    from clover2.prompts import read_prompts

    config = _decode_config(args)
    records = read_prompts(args.prompts)
    target = _load(args)
    names = [m.strip() for m in args.methods.split(",") if m.strip()]
    methods = {name: make_method(name, target, config) for name in names}
    prompts = {r.id: target.encode_chat([{"role": "user", "content": r.turns[0]}]) for r in records}
    runs = interleaved(methods, prompts, repeats=args.repeats, categories={r.id: r.category for r in records})
    summary = summarize(runs)
    write_csv(args.out / "runs.csv", runs)
    write_csv(args.out / "summary.csv", summary)
    write_json(args.out / "env.json", environment(target) | {"max_new_tokens": config.max_new_tokens,
                                                             "prompts": str(args.prompts), "repeats": args.repeats})
    print(summary.to_string(index=False, float_format=lambda x: f"{x:.3f}"))


def _cost_curve(args):
    from clover2.bench import cost_curve, environment
    from clover2.files import write_csv, write_json

    target = _load(args)
    curve = cost_curve(target, prefix=args.prefix, repeats=args.repeats)
    write_csv(args.out / "cost_curve.csv", curve)
    write_json(args.out / "cost_curve_env.json", environment(target) | {"prefix": args.prefix})
    print(curve.to_string(index=False, float_format=lambda x: f"{x:.3f}"))


if __name__ == "__main__":
    sys.exit(main())
