"""A greedy decoding step waits on the device at most twice: counted on the CPU, where every read of a
tensor's values into Python (`item`, `tolist`, `cpu`, `numpy`, `nonzero`, `bool`/`int`/`float`/index
conversion) is one the host would wait for on a GPU. What cannot be counted this way (an operation
whose output size depends on values, inside PyTorch) the code avoids by construction."""

from __future__ import annotations

import contextlib

import pytest
import torch
from test_decode_exact import PROMPTS

from clover2.decoding.decode import DecodeConfig, speculative_steps
from clover2.decoding.drafter import NoDrafter
from clover2.decoding.tree import EAGLE_25
from clover2.drafts import ARCHITECTURES, build_draft
from clover2.drafts.config import DraftConfig
from clover2.drafts.drafter import DynamicTree, ModelDrafter

READS = ("item", "tolist", "cpu", "numpy", "nonzero", "__bool__", "__int__", "__float__", "__index__")


@contextlib.contextmanager
def counted_reads(monkeypatch):
    """Counts every read of a tensor's values into Python while it is open: `count[0]`."""
    count = [0]
    for name in READS:
        method = getattr(torch.Tensor, name)

        def counting(self, *args, _method=method, **kwargs):
            count[0] += 1
            return _method(self, *args, **kwargs)
        monkeypatch.setattr(torch.Tensor, name, counting)
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


def test_the_counter_counts_what_the_old_decoder_read(monkeypatch):
    """The counter is not blind: reads of the kinds the decoder used to make are counted."""
    with counted_reads(monkeypatch) as count:
        x = torch.arange(4)
        x.tolist(), int(x[0]), x.argmax().item(), x.cpu(), bool(x[1]), [0, 1][x[1]], x.nonzero()
    assert count[0] >= 7


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
