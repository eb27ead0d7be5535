"""Committing an accepted tree path into the target's KV cache, without recomputation.

After a verification forward the cache holds `past` committed entries followed by one entry per
tree node. Keeping the accepted root-to-node path means moving those entries to `past, past+1,
...` and dropping the rest, layer by layer, in place.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache


def commit_path(cache: DynamicCache, past: int, path: torch.Tensor) -> None:
    """Keep entries `past + path` (node indices, increasing) right after the first `past` entries."""
    keep = int(path.numel())
    contiguous = int(path[-1]) == keep - 1  # the path is nodes 0..k-1: nothing moves
    for layer in cache.layers:
        if not contiguous:
            src = past + path.to(layer.keys.device)
            layer.keys[:, :, past:past + keep] = layer.keys[:, :, src]
            layer.values[:, :, past:past + keep] = layer.values[:, :, src]
        layer.keys = layer.keys[:, :, :past + keep]
        layer.values = layer.values[:, :, :past + keep]

