"""Pre-packed linear layers (the default CPU path) compute what the stock kernels compute."""

from __future__ import annotations

import pytest
import torch
from conftest import FAMILIES, hf_greedy, tiny_target

from clover2.decoding.decode import DecodeConfig, generate
from clover2.decoding.drafter import NoDrafter
from clover2.decoding.packed import pack_linears, packing_available, resolve_kernels
from clover2.errors import Clover2Error

needs_onednn = pytest.mark.skipif(not packing_available(torch.float32, "cpu"), reason="no oneDNN on this CPU build")


@needs_onednn
@pytest.mark.parametrize("family", FAMILIES)
def test_packed_forward_matches_stock_for_every_row_count(family):
    stock, packed = tiny_target(family, kernels="stock"), tiny_target(family, kernels="packed")
    assert (stock.kernels, packed.kernels) == ("stock", "packed")
    ids = torch.randint(0, 96, (1, 40), generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        for n in (1, 2, 3, 8, 16, 40):
            a = stock.model(input_ids=ids[:, :n]).logits
            b = packed.model(input_ids=ids[:, :n]).logits
            torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-4)


@needs_onednn
@pytest.mark.parametrize("family", FAMILIES)
def test_packed_plain_decoding_equals_stock_hf_greedy(family):
    stock, packed = tiny_target(family, kernels="stock"), tiny_target(family, kernels="packed")
    prompt = list(range(5, 25))
    assert generate(packed, NoDrafter(), prompt, DecodeConfig(max_new_tokens=40)).output_ids == \
        hf_greedy(stock, prompt, 40)


@needs_onednn
def test_packed_layers_still_backpropagate():
    lin = torch.nn.Linear(8, 4)
    pack_linears(lin)
    x = torch.randn(5, 8, requires_grad=True)  # enough rows for the packed kernel
    lin(x).sum().backward()  # falls back to F.linear when a gradient is needed
    assert x.grad is not None and lin.weight.grad is not None
    with torch.no_grad():
        torch.testing.assert_close(lin(x), torch.nn.functional.linear(x, lin.weight, lin.bias))


def test_kernel_choice_is_checked():
    with pytest.raises(Clover2Error, match="unknown kernels"):
        resolve_kernels("fast", torch.float32, "cpu")
    with pytest.raises(Clover2Error, match="needs a CPU"):
        resolve_kernels("packed", torch.float16, "cpu")
    assert resolve_kernels("auto", torch.float16, "cpu") == "stock"
    assert resolve_kernels("stock", torch.float32, "cpu") == "stock"
