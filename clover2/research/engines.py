"""Other CPU engines beside clover2 (`results/engine/`, one `clover2 bench` run with `--llama-cpp` and
`--openvino`): the serving page's table (`engines`) and the sentence the advice box takes from it
(`brief`): what a user who picks an engine rather than clover2's own loop gets on this CPU."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from clover2.drafts.methods import MethodSpec, engine_of, parse_tree
from clover2.research.report import bracket

ENGINE_NAMES = {"ar": "clover2, plain decoding", "pld": "clover2, prompt lookup", "eagle3": "clover2, EAGLE-3",
                "pld+eagle3": "clover2, prompt lookup + EAGLE-3",
                "llama.cpp": "llama.cpp, plain decoding", "llama.cpp+pld": "llama.cpp, prompt lookup",
                "llama.cpp+eagle3": "llama.cpp, EAGLE-3",
                "openvino": "OpenVINO GenAI, plain decoding", "openvino+pld": "OpenVINO GenAI, prompt lookup",
                "openvino+eagle3": "OpenVINO GenAI, EAGLE-3"}
ENGINE_TITLES = {"llama.cpp": "llama.cpp", "openvino": "OpenVINO GenAI"}


@dataclass(frozen=True)
class EngineRun:
    """The engine run's greedy rows over every prompt, its paired ratios and its environment."""

    rows: pd.DataFrame
    pairs: pd.DataFrame
    env: dict

    @classmethod
    def read(cls, results: Path) -> EngineRun | None:
        folder = results / "engine"
        if not (folder / "bench.csv").exists():
            return None
        bench = pd.read_csv(folder / "bench.csv")
        return cls(bench[(bench.task == "overall") & (bench.temperature == 0)].set_index("method", drop=False),
                   pd.read_csv(folder / "paired.csv"), json.loads((folder / "env.json").read_text()))

    def plain(self, method: str) -> str:
        """The method's own engine's plain decoding, at its settings (clover2's: `ar`)."""
        spec = MethodSpec.parse(method)
        return (engine_of(spec.name) or "ar") + ("!defaults" if spec.engine == "defaults" else "")

    def ratio(self, method: str, reference: str = "ar") -> tuple[float, str]:
        """The method's speed over `reference`'s, paired by prompt: the ratio, and as the pages print it."""
        if method == reference:
            return 1.0, "1"
        r = self.pairs[(self.pairs.method == method) & (self.pairs.versus == reference)].iloc[0]
        return r.speed_ratio, f"{r.speed_ratio:.2f}x {bracket(r.speed_ratio_lo, r.speed_ratio_hi, 2)}"

    def fastest(self, home: str | None = None) -> str:
        """The exact method (at f32, not an engine's own numerics) fastest over clover2's plain decoding, of
        every engine or of `home`'s alone ("clover2" for clover2's own methods, plain decoding aside)."""
        exact = [m for m in self.rows.method if MethodSpec.parse(m).engine != "defaults"
                 and (home is None or (engine_of(MethodSpec.parse(m).name) or "clover2") == home and m != "ar")]
        return max(exact, key=lambda m: self.ratio(m)[0])

    @staticmethod
    def name(method: str) -> str:
        spec = MethodSpec.parse(method)
        return ENGINE_NAMES.get(spec.name, spec.name) + tree_words(spec.tree) + (
            ", own numerics" if spec.engine == "defaults" else "")


def tree_words(tree: str) -> str:
    """A method's tree as the table says it: ", 3-token chain", ", tree of 6 (depth 3, top 2)", ", fitted tree"."""
    if tree.startswith("chain"):
        return f", {tree.removeprefix('chain')}-token chain"
    if tree.startswith("dynamic"):
        t = parse_tree(tree)
        return f", tree of {t.budget} (depth {t.depth}, top {t.top_k})"
    return ", fitted tree" if tree else ""


def engines(results: Path) -> str:
    """Other CPU engines beside clover2 (`results/engine`, `clover2 bench --llama-cpp ... --openvino ...`):
    each method's tokens per step, speed over clover2's plain decoding and over its own engine's (geometric
    means of paired per-prompt ratios with 95% intervals), and whether its output equals its reference's."""
    run = EngineRun.read(results)
    if run is None:
        return "Not measured yet: `results/engine/` holds no run.\n"
    rows, env, name, ratio = run.rows, run.env, run.name, run.ratio
    fastest = run.fastest()  # by the page's one speed statistic, over clover2's plain decoding
    said = [f"{ENGINE_TITLES[e]}'s plain decoding runs {ratio(e)[1]} as fast as clover2's"
            for e in ENGINE_TITLES if e in rows.index]
    lead = ("; ".join(said) + ". " if said else "") + (  # (llama.cpp is never capitalised)
        f"The fastest exact method here is {name(fastest)}, {ratio(fastest)[0]:.2f}x clover2's plain decoding"
        + (f" and {ratio(fastest, run.plain(fastest))[0]:.2f}x its engine's" if run.plain(fastest) not in
           (fastest, "ar") else "") + ". ")
    versions = [f"llama.cpp {env['llama_cpp']['version'].removeprefix('version: ')}"] if "llama_cpp" in env else []
    versions += [f"OpenVINO GenAI {env['openvino']['version']}"] if "openvino" in env else []
    numerics = ([f"llama.cpp's {env['llama_cpp']['attention']['!defaults'].partition(': ')[2]}"]
                if "llama_cpp" in env else [])  # an engine's own numerics, where they are not f32
    numerics += ["OpenVINO GenAI's bf16 arithmetic (where the CPU has it) and u8 KV cache"] if "openvino" in env else []
    draft = next((d for e in ("llama_cpp", "openvino") for d in env.get(e, {}).get("drafts", {}).values()), {})
    lines = [lead + f"Measured on {env['cpu_name']} ({env['cpu_count']} cores, {env['torch_threads']} threads "
             f"for each), clover2 commit {env['commit']}, {', '.join(versions)}; every engine at f32 (weights, "
             f"arithmetic, KV cache; \"own numerics\": {'; '.join(numerics)}); {int(rows.n_prompts.max())} "
             "held-out prompts of up to "
             f"{env['bench']['max_new_tokens']} new tokens, greedy, every method interleaved prompt by prompt in one "
             f"run ({env['other_load']:.1%} of the machine used by anything else)"
             + (f"; the EAGLE-3 draft's weights SHA-256 {draft['weights_sha256'][:12]}" if draft else "")
             + ". Speeds are geometric means of per-prompt ratios with 95% bootstrap intervals; \"same output\" "
             "compares each engine's methods with its plain decoding at the same settings, and that with "
             "clover2's.", "",
             "| method | tokens per step | speed over clover2's plain | over its engine's | same output |",
             "|---|---|---|---|---|"]  # one speed statistic (tokens/s per prompt: `bench.csv`)
    lines += [f"| {name(r.method)} | {'–' if pd.isna(r.tau) else f'{r.tau:.2f}'} | {ratio(r.method)[1]} | "
              f"{ratio(r.method, run.plain(r.method))[1] if run.plain(r.method) != 'ar' else '–'} | "
              f"{r.identical_frac:.0%} |" for r in rows.itertuples()]
    return "\n".join(lines) + "\n"


def brief(results: Path) -> str:
    """The advice box's sentence on other engines, where the engine run holds one: each engine's plain decoding
    over clover2's, the fastest one's over clover2's fastest method, and the fastest exact method of all ("" if
    none)."""
    run = EngineRun.read(results)
    plains = [e for e in ENGINE_TITLES if run is not None and e in run.rows.index]
    if not plains:
        return ""
    best, ours, top = run.fastest(), run.fastest("clover2"), max(plains, key=lambda e: run.ratio(e)[0])

    def words(method: str) -> str:  # "OpenVINO GenAI's prompt lookup (5-token chain)"
        engine, _, rest = run.name(method).partition(", ")
        what, _, how = rest.partition(", ")
        return f"{engine}'s {what}" + (f" ({how})" if how else "")

    text = (f"**Another engine first:** in one run on {run.env['cpu_name']} ({{doc}}`serving`), plain decoding ran "
            + " and ".join(run.ratio(e)[1] + (" as fast as clover2's" if i == 0 else "") + f" in {ENGINE_TITLES[e]}"
                           for i, e in enumerate(plains))
            + f"; {ENGINE_TITLES[top]}'s, with no draft, {run.ratio(top, ours)[1]} as fast as clover2's fastest "
              f"method, {words(ours)}")
    if best != top:
        text += (f"; the fastest exact method was {words(best)}, {run.ratio(best)[1]} as fast as clover2's plain "
                 "decoding")
    return text + "."
