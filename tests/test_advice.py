"""The practitioner's box and table (`clover2.research.advice`): generated from a benchmark's files, they
name the fastest method with the command that runs it as measured, and say where an output differed."""

from __future__ import annotations

import json

import pandas as pd

from clover2.research.advice import box, command, table

D = "results/study/drafts"
ENV = {"cpu_name": "Test CPU", "torch_threads": 2, "commit": "abc1234", "date": "2026-12-06T10:00:00",
       "other_load": 0.001, "bench": {"max_new_tokens": 64, "fit": {"top_k": 8}},
       "fitted_trees": {"clover2=clover2-official": {"budget": 1, "depth": 1},
                        "eagle1=eagle1": {"budget": 5, "depth": 3}, "clover2=clover2": {"budget": 0, "depth": 0}}}


def _run(folder, rows: dict[str, tuple[float, float]], identical: float = 1.0, env: dict = ENV):
    """A bench folder: `rows` method -> (speedup, tau), plain decoding at 20 tokens/s."""
    folder.mkdir(parents=True)
    bench = pd.DataFrame([{"method": m, "task": "overall", "temperature": 0.0, "n_prompts": 30, "tau": tau,
                           "tokens_per_s": 20 * s, "speedup": s, "speedup_lo": s - 0.05, "speedup_hi": s + 0.05,
                           "identical_frac": 1.0 if m == "ar" else identical}
                          for m, (s, tau) in {"ar": (1.0, 1.0), **rows}.items()])
    bench.to_csv(folder / "bench.csv", index=False)
    pd.DataFrame([{"method": "suffix+eagle1@fitted=eagle1", "versus": "suffix", "temperature": 0.0,
                   "speed_ratio": 1.12, "speed_ratio_lo": 1.05, "speed_ratio_hi": 1.2},
                  {"method": "clover2@fitted=clover2-official", "versus": "eagle1@fitted=eagle1", "temperature": 0.0,
                   "speed_ratio": 0.92, "speed_ratio_lo": 0.88, "speed_ratio_hi": 0.96},
                  {"method": "pld", "versus": "suffix+eagle1@fitted=eagle1", "temperature": 0.0,
                   "speed_ratio": 0.95, "speed_ratio_lo": 0.9, "speed_ratio_hi": 1.01},
                  {"method": "suffix", "versus": "suffix+eagle1@fitted=eagle1", "temperature": 0.0,
                   "speed_ratio": 0.9, "speed_ratio_lo": 0.85, "speed_ratio_hi": 0.97}]).to_csv(
        folder / "paired.csv", index=False)
    (folder / "env.json").write_text(json.dumps(env))


ROWS = {"pld": (1.2, float("nan")), "suffix": (1.23, float("nan")),
        "clover2@fitted=clover2-official": (1.15, 1.4), "eagle1@fitted=eagle1": (1.25, 1.5),
        "suffix+eagle1@fitted=eagle1": (1.43, 1.8), "clover2@fitted=clover2": (1.0, 1.0),
        "pld+clover2@fitted=clover2": (1.2, 1.3), "clover2@eagle25=clover2": (0.6, 1.7)}


def test_a_fitted_tree_is_run_as_the_static_tree_it_chose():
    assert command("clover2@fitted=clover2-official", ENV) == f"--method clover2@chain1={D}/clover2-official"
    assert command("suffix+eagle1@fitted=eagle1", ENV) == f"--method suffix+eagle1@dynamic:5:3:8={D}/eagle1"
    # a fit that drafts nothing: the copying part alone, or plain decoding, never a chain of 0
    assert command("pld+clover2@fitted=clover2", ENV) == "--method pld"
    assert command("clover2@fitted=clover2", ENV) == "--method ar"
    assert command("clover2@eagle25=clover2", ENV) == f"--method clover2@eagle25={D}/clover2"


def test_the_box_names_the_fastest_exact_method_and_its_command(tmp_path):
    _run(tmp_path / "use" / "float32", ROWS)
    text = box(tmp_path, study_tau=pd.Series({"clover2-official": 1.67}))
    first = text.splitlines()[3]
    assert "the suffix cache with EAGLE-1 (the tree fitted to this machine" in first and "1.43x [1.38, 1.48]" in first
    assert f"`clover2 generate --method suffix+eagle1@dynamic:5:3:8={D}/eagle1`" in first
    assert "Clover-2 (the paper's recipe) 1.15x [1.10, 1.20];" in text
    assert "EAGLE-1 1.43x [1.38, 1.48], 1.12x [1.05, 1.20]." in text  # behind the cache, then over it alone
    # each way of copying gets its own line of the drafts behind it
    assert "- **A draft behind prompt lookup** (the draft proposes where there is nothing to copy; each speed, then " \
        "its ratio to prompt lookup alone): Clover-2 (with this project's value gain) 1.20x [1.15, 1.25]." in text
    assert "Against EAGLE-1" not in first  # the page lists every pairing below
    # a method whose paired interval over the fastest holds 1 is named beside it, one beyond it is not
    assert "Not told apart from it on the same prompts (paired, 95%): prompt lookup 1.20x [1.15, 1.25]." in first
    brief = box(tmp_path, study_tau=pd.Series({"clover2-official": 1.67}), brief=True)  # named, their speeds spanned
    assert "Not told apart from it on the same prompts (paired, 95%): prompt lookup (1.20x)." in brief
    # the brief counts each Clover-2's settings told apart from EAGLE-1, and which way
    assert "Against EAGLE-1 on the same prompts (alone and behind each way of copying, each on its fitted tree): " \
        "Clover-2 (paper's recipe) slower in 1 of 1 (0.92x)." in brief
    assert "Clover-2 over EAGLE-1**, each on its fitted tree, paired by prompt: Clover-2 (paper's recipe) " \
           "0.92x" in text
    assert "every output equalled" in text and "Test CPU" in text and "a prediction, not measured" in text
    assert "bfloat16" not in text.split("Exact")[0]  # no bf16 run: no bf16 line


def test_a_differing_output_and_the_bf16_run_are_said(tmp_path):
    _run(tmp_path / "use" / "float32", ROWS, identical=0.9)
    _run(tmp_path / "use" / "bfloat16", {"eagle1@fitted=eagle1": (1.1, 1.4)}, identical=0.4)
    text = box(tmp_path, study_tau=pd.Series(dtype=float))
    assert "not every output equalled" in text
    assert "only 40%-40% of the speculative outputs equalled bf16 plain decoding's" in text
    assert "the fastest method, EAGLE-1, 1.10x [1.05, 1.15] bf16 plain decoding's speed (float32's fastest: 1.43x " \
           "[1.38, 1.48])" in text
    assert "(median)" in text and "float32 where the output must be plain greedy decoding's" in text
    assert "On a GPU" not in text
    page = table(tmp_path)  # every method, with its command (D: the published drafts' folder), both runs' files
    assert page.count("| method |") == 1 and "../results/use/bfloat16/bench.csv" in page
    assert "| Clover-2 (value gain), 25-node tree | `clover2@eagle25=D/clover2` |" in page
    assert "| Clover-2 (value gain), fitted: no draft tokens | `ar` |" in page


def test_nothing_faster_than_plain_decoding_says_use_plain_decoding(tmp_path):
    _run(tmp_path / "use" / "float32", {"pld": (0.98, float("nan")), "eagle1@fitted=eagle1": (0.9, 1.2)})
    assert "nothing decoded faster than plain decoding beyond its interval" in box(tmp_path)


def test_nothing_measured_says_so(tmp_path):
    assert "Not measured yet" in box(tmp_path) and "Not measured yet" in table(tmp_path)


def test_a_paired_bound_that_rounds_to_1_keeps_its_side():
    from clover2.research.advice import _ratio

    row = pd.Series({"speed_ratio": 0.96, "speed_ratio_lo": 0.919, "speed_ratio_hi": 1.0008})
    assert _ratio(row) == "0.96x [0.92, 1.001]"  # not "1.00", which would hide that the interval holds 1
    assert _ratio(row.replace(1.0008, 0.9962)) == "0.96x [0.92, 0.996]"
    assert _ratio(pd.Series({"speed_ratio": 1.2, "speed_ratio_lo": 1.1, "speed_ratio_hi": 1.3})) == "1.20x [1.10, 1.30]"
