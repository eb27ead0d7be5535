"""The side-by-side benchmark and the cost curve, on a tiny model (no timing assertions)."""

from __future__ import annotations

import numpy as np
import pytest

from clover2.bench import cost_curve, environment, interleaved, make_method, summarize
from clover2.decode import DecodeConfig
from clover2.errors import Clover2Error

from conftest import tiny_target


@pytest.fixture(scope="module")
def runs():
    t = tiny_target("llama")
    cfg = DecodeConfig(max_new_tokens=12)
    methods = {m: make_method(m, t, cfg) for m in ("ar", "pld", "hf")}
    prompts = {"a": [1, 2, 3, 1, 2, 3, 1, 2], "b": [5, 9, 7], "c": [4] * 10}
    return interleaved(methods, prompts, repeats=2, categories={"a": "x", "b": "x", "c": "y"})


def test_every_method_runs_every_prompt_and_repeat(runs):
    assert len(runs) == 3 * 3 * 2
    assert set(runs.method) == {"ar", "pld", "hf"}
    assert runs.identical.all()  # fp32: all three produce the same tokens
    assert (runs[runs.method == "ar"].speedup == 1).all()


def test_summary_has_overall_and_per_category_rows_with_intervals(runs):
    s = summarize(runs)
    assert set(zip(s.method, s.category)) == {(m, c) for m in ("ar", "pld", "hf") for c in ("overall", "x", "y")}
    assert (s.speedup_lo <= s.speedup).all() and (s.speedup <= s.speedup_hi).all()
    ar = s[(s.method == "ar") & (s.category == "overall")].iloc[0]
    assert ar.tau == 1 and ar.speedup == 1 and ar.identical_frac == 1
    assert np.isnan(s[s.method == "hf"].tau).all()  # HF generate reports no steps


def test_unknown_method_and_missing_reference():
    t = tiny_target("llama")
    with pytest.raises(Clover2Error, match="unknown method"):
        make_method("medusa9", t, DecodeConfig())
    with pytest.raises(Clover2Error, match="reference"):
        interleaved({"pld": make_method("pld", t, DecodeConfig(max_new_tokens=2))}, {"a": [1, 2]})


def test_cost_curve_is_relative_to_one_token():
    curve = cost_curve(tiny_target("qwen2"), prefix=20, sizes=(1, 4, 16), repeats=2)
    assert curve.n_tokens.tolist() == [1, 4, 16]
    assert curve.relative.iloc[0] == 1 and (curve.median_ms > 0).all()


def test_environment_records_versions_dtype_and_commit():
    env = environment(tiny_target("llama"))
    assert {"cpu", "torch", "transformers", "dtype", "commit", "torch_threads"} <= set(env)
    assert env["dtype"] == "float32"
