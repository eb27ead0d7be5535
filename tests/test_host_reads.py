"""A greedy decoding step waits on the device at most twice: counted on the CPU, where every read of a
tensor's values into Python (`item`, `tolist`, `cpu`, `numpy`, `nonzero`, `bool`/`int`/`float`/index
conversion) is one the host would wait for on a GPU, and so is every blocking copy to a device that
clover2's code makes (`torch.tensor(..., device=...)`, `.to(device)` without `non_blocking`: PyTorch
synchronizes the stream after one; `clover2.decoding.transfer.to_device` copies without; the
target's own modeling code moves only what already lives on its device). What cannot be counted this
way (an operation whose output size depends on values, inside PyTorch) the code avoids by construction."""

from __future__ import annotations

import contextlib
import sys

import pytest
import torch
from test_decode_exact import PROMPTS

from clover2.decoding.decode import DecodeConfig, speculative_steps
from clover2.decoding.drafter import NoDrafter
from clover2.decoding.transfer import to_device
from clover2.decoding.tree import EAGLE_25
from clover2.drafts import ARCHITECTURES, build_draft
from clover2.drafts.config import DraftConfig
from clover2.drafts.drafter import DynamicTree, ModelDrafter

READS = ("item", "tolist", "cpu", "numpy", "nonzero", "__bool__", "__int__", "__float__", "__index__")


def _by_clover2() -> bool:
    """Is the call being counted made by clover2's code? (Frames: this, the counting wrapper, its caller.)"""
    return sys._getframe(2).f_globals.get("__name__", "").startswith("clover2.")


@contextlib.contextmanager
def counted_reads(monkeypatch):
    """Counts, while it is open, every read of a tensor's values into Python and every blocking copy
    to a device: `count[0]`."""
    count = [0]
    for name in READS:
        method = getattr(torch.Tensor, name)

        def counting(self, *args, _method=method, **kwargs):
            count[0] += 1
            return _method(self, *args, **kwargs)
        monkeypatch.setattr(torch.Tensor, name, counting)
    to, tensor = torch.Tensor.to, torch.tensor

    def blocking_to(self, *args, **kwargs):
        to_a_device = "device" in kwargs or any(isinstance(a, (torch.device, str, torch.Tensor)) for a in args)
        count[0] += _by_clover2() and to_a_device and not kwargs.get("non_blocking")
        return to(self, *args, **kwargs)

    def tensor_on_a_device(*args, **kwargs):
        count[0] += _by_clover2() and kwargs.get("device") is not None
        return tensor(*args, **kwargs)
    monkeypatch.setattr(torch.Tensor, "to", blocking_to)
    monkeypatch.setattr(torch, "tensor", tensor_on_a_device)
    yield count
    monkeypatch.undo()


def reads_per_step(target, drafter, monkeypatch, *, engine="eager", new_tokens=24) -> list[int]:
    """The host reads of each decoding step after the prefill (the draft's proposal, the target's
    forward, acceptance and commit); a drafter must have proposed a tree at every step but the last."""
    prompt = PROMPTS[3][:40]
    counts = []
    with torch.inference_mode(), counted_reads(monkeypatch) as count:
        steps = speculative_steps(target, drafter, prompt, DecodeConfig(max_new_tokens=new_tokens, engine=engine))
        next(steps)  # the prefill
        while True:
            before = count[0]
            try:
                step = next(steps)
            except StopIteration:
                break
            counts.append((count[0] - before, step.draft_nodes))
    assert len(counts) > 3
    if not isinstance(drafter, NoDrafter):
        assert all(nodes for _, nodes in counts[:-1]), "every step but the last should verify a tree"
    return [reads for reads, _ in counts]


def test_the_counter_counts_reads_and_blocking_copies(monkeypatch):
    """The counter is not blind: reads of the kinds the decoder used to make are counted, and so is a
    blocking copy that clover2's code makes; a non-blocking one and a dtype change are not."""
    x = torch.arange(4)
    with counted_reads(monkeypatch) as count:
        x.tolist(), int(x[0]), x.argmax().item(), x.cpu(), bool(x[1]), [0, 1][x[1]], x.nonzero()
        x.to(torch.float64), to_device(x, "cpu"), x.to("cpu"), torch.tensor([1], device="cpu")  # not clover2's
        exec("x.to('cpu'); torch.tensor([1], device='cpu')", {"__name__": "clover2.anywhere", "x": x, "torch": torch})
    assert count[0] == 9


@pytest.mark.parametrize("engine", ["eager", "static"])
@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_a_greedy_step_of_a_five_deep_static_tree_reads_the_device_once(tiny, monkeypatch, arch, engine):
    """The tree grows on the device; the host reads the accepted path and tokens, once."""
    torch.manual_seed(0)
    model = build_draft(DraftConfig.for_arch(arch, num_heads=5), tiny).eval()
    assert EAGLE_25.max_depth == 5
    assert max(reads_per_step(tiny, ModelDrafter(model, EAGLE_25), monkeypatch, engine=engine)) <= 1


@pytest.mark.parametrize("arch", ["clover2", "eagle1"])
def test_a_greedy_step_of_a_five_deep_dynamic_tree_reads_the_device_twice(tiny, monkeypatch, arch):
    """EAGLE-2's tree grows on the device; the host reads its shape, then the accepted path: two reads."""
    torch.manual_seed(0)
    model = build_draft(DraftConfig.for_arch(arch, num_heads=5), tiny).eval()
    drafter = ModelDrafter(model, DynamicTree(budget=24, depth=5, top_k=8))
    assert max(reads_per_step(tiny, drafter, monkeypatch)) <= 2


def test_plain_decoding_reads_the_device_once_a_step(tiny, monkeypatch):
    assert max(reads_per_step(tiny, NoDrafter(), monkeypatch)) <= 1
