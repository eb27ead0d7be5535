"""The memory-bandwidth floor of one decoding step: every weight read once per forward.

A decoding step of a small batch reads all of the target's weights and does little arithmetic on
each, so its time is bounded below by weight bytes / memory bandwidth. The bandwidth is measured
here as a large device-to-device copy (what a streaming read can reach on this machine now), not
taken from a data sheet, so the bound is one this machine can approach.
"""

from __future__ import annotations

import statistics

import torch

from clover2.decoding.decode import clock
from clover2.decoding.target import Target


def copy_bandwidth(target: Target, *, mib: int = 256, repeats: int = 5) -> float:
    """Bytes per second of a `mib`-MiB copy on the target's device (read + write counted)."""
    src = torch.ones(mib * 2**18, device=target.device)  # float32: 4 bytes each
    dst = torch.empty_like(src)
    times = []
    for _ in range(repeats + 1):
        start = clock(target)
        dst.copy_(src)
        times.append(clock(target) - start)
    return 2 * src.numel() * 4 / statistics.median(times[1:])


def bandwidth_floor(target: Target) -> dict:
    """The target's weight bytes, the measured bandwidth and the step time they bound."""
    weights = sum(p.numel() * p.element_size() for p in target.model.parameters())
    bandwidth = copy_bandwidth(target)
    return {"weight_bytes": weights, "copy_bandwidth_gb_s": bandwidth / 1e9, "floor_ms": 1e3 * weights / bandwidth}
