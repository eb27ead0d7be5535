"""Host data to the device without making the host wait for the device.

A plain copy to a CUDA device (`torch.tensor(x, device=...)`, `x.to(device)`) waits until the
device has finished its queued work (PyTorch synchronizes the stream after a blocking copy), so one
in the middle of a decoding step stalls the host as a read does. `to_device` stages host data in
pinned memory and copies it asynchronously, in stream order; on a CPU, or for data already on the
device, it copies nothing.
"""

from __future__ import annotations

import torch


def to_device(data, device: torch.device | str, dtype: torch.dtype | None = None) -> torch.Tensor:
    """`data` (a tensor, a number or a list of them) as a tensor on `device`, copied without a wait."""
    x = torch.as_tensor(data, dtype=dtype)
    if x.device.type == "cpu" and torch.device(device).type == "cuda":
        x = x.pin_memory()
    return x.to(device, non_blocking=True)
