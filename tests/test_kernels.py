"""Linear kernels chosen by measurement: every candidate computes what the stock kernel computes,
the choice follows the timings, and a cached choice is trusted only when it is whole and current."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import torch
from conftest import FAMILIES, hf_greedy, tiny_target

from clover2.decoding import kernels as K
from clover2.decoding.decode import DecodeConfig, generate
from clover2.decoding.drafter import NoDrafter
from clover2.decoding.target import with_kernels
from clover2.errors import Clover2Error

CPU_KERNELS = K.available(torch.float32, "cpu")


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CLOVER2_CACHE", str(tmp_path / "cache"))  # measured plans land here


@pytest.mark.parametrize("family", FAMILIES)
def test_every_kernel_computes_what_stock_computes_at_every_row_count(family):
    stock = tiny_target(family, kernels="stock")
    ids = torch.randint(0, 96, (1, 70), generator=torch.Generator().manual_seed(1))
    for kernel in (*CPU_KERNELS, "auto"):
        other = tiny_target(family, kernels=kernel)
        assert other.kernels == kernel and all(k in CPU_KERNELS for k in other.kernel_plan.kernels)
        with torch.inference_mode():
            for n in (1, 2, 3, 5, 8, 16, 40, 70):
                torch.testing.assert_close(other.model(input_ids=ids[:, :n]).logits,
                                           stock.model(input_ids=ids[:, :n]).logits, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("family", FAMILIES)
def test_plain_decoding_on_every_kernel_equals_stock_hf_greedy(family):
    stock = tiny_target(family, kernels="stock")
    prompt = list(range(5, 25))
    want = hf_greedy(stock, prompt, 40)
    for kernel in (*CPU_KERNELS, "auto"):
        assert generate(tiny_target(family, kernels=kernel), NoDrafter(), prompt,
                        DecodeConfig(max_new_tokens=40)).output_ids == want, kernel


def test_the_choice_follows_the_timings_and_the_dispatch_follows_the_choice():
    assert {"packed", "mkl"} <= set(CPU_KERNELS), "this CPU build lacks oneDNN or MKL"
    fastest = {1: "mkl", 2: "packed", 4: "packed", 8: "stock", 16: "stock", 32: "packed", 64: "mkl"}
    timer = lambda kernel, rows: 1.0 if kernel == fastest[rows] else 2.0 + rows  # noqa: E731
    target = with_kernels(tiny_target("llama", kernels="stock"), "auto", timer=timer)
    plan = target.kernel_plan
    assert plan.kernels == tuple(fastest[b] for b in K.BUCKETS) and plan.source == "measured"
    assert plan.describe() == "mkl@1,packed@2,stock@8,packed@32,mkl@64"
    assert {r["kernel"] for r in target.kernel_record()["timings"]} == set(CPU_KERNELS)
    dispatch = target.model.kernel_dispatch
    assert [dispatch.kernel(r) for r in (1, 2, 3, 7, 8, 31, 32, 63, 64, 1000)] == \
        ["mkl", "packed", "packed", "packed", "stock", "stock", "packed", "packed", "mkl", "mkl"]
    lin = target.model.lm_head  # the prepared weights of unused kernels are freed, the used ones kept
    assert lin.prepared["packed"] is not None and lin.prepared["mkl"] is not None
    assert not (tmp := list((K.cache_root() / "kernels").glob("*.json"))), f"a faked timing was cached: {tmp}"


def test_a_measured_choice_is_cached_and_a_corrupt_or_stale_one_is_measured_again(monkeypatch):
    monkeypatch.setattr(K, "other_share", lambda start: 0.0)  # an idle machine, whatever runs beside the tests
    first = tiny_target("qwen2", kernels="auto")
    assert first.kernel_plan.source == "measured"
    (path,) = (K.cache_root() / "kernels").glob("*.json")
    again = tiny_target("qwen2", kernels="auto")
    assert again.kernel_plan.source == "cached" and again.kernel_plan.kernels == first.kernel_plan.kernels
    stored = json.loads(path.read_text())
    for broken in ("{not json", json.dumps(stored | {"key": stored["key"] | {"torch": "0.1"}}),
                   json.dumps(stored | {"plan": {"kernels": ["fast"] * 7, "buckets": list(K.BUCKETS)}})):
        path.write_text(broken)
        with pytest.warns(UserWarning, match="unusable"):
            assert tiny_target("qwen2", kernels="auto").kernel_plan.source == "measured"
        assert json.loads(path.read_text())["key"] == stored["key"]  # rewritten whole
    other_shape = tiny_target("qwen2", vocab=128, kernels="auto")  # another model shape: its own measurement
    assert other_shape.kernel_plan.source == "measured" and len(list(path.parent.glob("*.json"))) == 2


def test_a_choice_measured_under_load_serves_its_run_but_is_not_cached(monkeypatch):
    monkeypatch.setattr(K, "other_share", lambda start: 0.5)
    with pytest.warns(UserWarning, match="not cached"):
        target = tiny_target("llama", kernels="auto")
    assert target.kernel_plan.source == "measured" and not (K.cache_root() / "kernels").exists()


def test_kernels_too_close_to_tell_apart_are_timed_again_before_the_choice(monkeypatch):
    """At one row stock and packed first measure within CLOSE of each other: that bucket alone gets
    more rounds, which find packed faster; the other buckets are decided at once."""
    monkeypatch.setattr(K, "other_share", lambda start: 0.0)  # an idle machine: one measurement
    calls = []

    def timer(kernel, rows):
        calls.append((kernel, rows))
        if rows > 1:
            return 1.0 if kernel == "stock" else 3.0
        later = calls.count(("packed", 1)) > 6  # packed's first 6 rounds (the warm-up and 5) look like stock's
        return {"stock": 1.0, "packed": 0.5 if later else 1.01}.get(kernel, 3.0)
    plan = with_kernels(tiny_target("llama", kernels="stock"), "auto", timer=timer).kernel_plan
    assert plan.kernels[:2] == ("packed", "stock")
    assert calls.count(("stock", 1)) == 11 and calls.count(("stock", 2)) == 6  # 5 more rounds at one row only


def test_a_measurement_under_load_is_taken_again(monkeypatch):
    loads = iter([0.5, 0.0])
    monkeypatch.setattr(K, "other_share", lambda start: next(loads))
    attempt = []

    def timer(kernel, rows):  # the first (loaded) measurement finds mkl fastest, the second packed
        attempt.append(None)
        fastest = "mkl" if len(attempt) <= len(CPU_KERNELS) * len(K.BUCKETS) * 6 else "packed"
        return 1.0 if kernel == fastest else 2.0
    plan = with_kernels(tiny_target("llama", kernels="stock"), "auto", timer=timer).kernel_plan
    assert plan.kernels == ("packed",) * len(K.BUCKETS) and next(loads, "spent") == "spent"


def _curve(one_ms: float, two_ms: float) -> pd.DataFrame:
    return pd.DataFrame({"n_tokens": [1, 2, 4], "median_ms": [one_ms, two_ms, 12.0],
                         "relative": [1.0, two_ms / one_ms, 12.0 / one_ms]})


@pytest.mark.parametrize("curves, again, failed", [
    ([_curve(10.0, 8.0), _curve(5.0, 8.0)], 1, []),  # contradicted once: measured again, then consistent
    ([_curve(10.0, 8.0)] * 3, 2, ["eager"])])  # contradicted every time: measured again twice, then reported
def test_the_benchmark_measures_again_a_kernel_choice_its_cost_curve_contradicts(monkeypatch, curves, again, failed):
    """A 1-token forward dearer than a 2-token one in the benchmark's cost curve means the kernel
    choice failed: the kernels are measured again (not taken from the cache) and the curve with them."""
    import clover2.measure.bench as bench

    monkeypatch.setattr(K, "other_share", lambda start: 0.0)
    target = tiny_target("qwen2", kernels="auto")
    assert tiny_target("qwen2", kernels="auto").kernel_plan.source == "cached"
    given = iter(curves)
    monkeypatch.setattr(bench, "cost_curve", lambda target, **kw: next(given))
    with pytest.warns(UserWarning, match="measuring the kernels again"):
        out, check = bench.checked_cost_curves(target, ["eager"])
    assert check == {"kernels_measured_again": again, "one_token_dearer_than_two": failed}
    assert out["eager"] is curves[-1] and target.kernel_plan.source == "measured"
    stock = tiny_target("qwen2", kernels="stock")  # nothing chosen, nothing to measure again
    monkeypatch.setattr(bench, "cost_curve", lambda target, **kw: _curve(10.0, 8.0))
    with pytest.warns(UserWarning, match="still costs more"):
        assert bench.checked_cost_curves(stock, ["eager"])[1]["kernels_measured_again"] == 0


def test_prepared_layers_still_backpropagate():
    lin = torch.nn.Linear(8, 4)
    K.install(lin, K.KernelPlan.uniform("packed"))
    x = torch.randn(5, 8, requires_grad=True)
    lin(x).sum().backward()  # a gradient takes the stock kernel
    assert x.grad is not None and lin.weight.grad is not None
    with torch.no_grad():
        torch.testing.assert_close(lin(x), torch.nn.functional.linear(x, lin.weight, lin.bias))


def test_kernel_choice_is_checked():
    with pytest.raises(Clover2Error, match="unknown kernels"):
        K.check_mode("fast", torch.float32, "cpu")
    with pytest.raises(Clover2Error, match="cannot compute"):
        K.check_mode("mkl", torch.float16, "cpu")
    assert K.available(torch.float16, "cpu") == ("stock",)
    assert K.available(torch.float32, "cuda") == ("stock",)
    with pytest.raises(Clover2Error, match="one of"):
        K.KernelPlan(("stock",))
    target = tiny_target("llama", dtype=torch.float16, kernels="auto")  # nothing to choose from: stock, not measured
    assert target.kernel_plan.kernels == ("stock",) * len(K.BUCKETS)


def test_a_target_is_loaded_as_given_unless_measured_kernels_are_asked_for(tmp_path):
    """The library leaves the user's nn.Linear alone by default; the research profiles measure (and say so)."""
    from dataclasses import fields

    from clover2.decoding.target import load_target
    from clover2.profiles import Profile

    tiny_target("llama").model.save_pretrained(tmp_path / "m")
    plain = load_target(str(tmp_path / "m"), dtype="float32")
    linears = [m for m in plain.model.modules() if isinstance(m, torch.nn.Linear)]
    assert plain.kernels == "stock" and linears and not any("forward" in vars(m) for m in linears)
    other = [k for k in K.available(torch.float32, torch.device("cpu")) if k != "stock"]
    if other:
        forced = load_target(str(tmp_path / "m"), dtype="float32", kernels=other[0])
        assert any("forward" in vars(m) for m in forced.model.modules() if isinstance(m, torch.nn.Linear))
    assert next(f for f in fields(Profile) if f.name == "kernels").default == "auto"  # what the research measures
