"""CUDA graphs: a function captured once per input shape and replayed, as gpt-fast does by hand.

A small model's forward on a GPU is bound by kernel launches, not by memory bandwidth: an eager
SmolLM2-135M step spends far longer launching its kernels than reading its weights. A captured graph launches
the whole forward at once. The price is fixed shapes and fixed addresses: `GraphCache` keeps, per
shape of its arguments, static copies of the input tensors (each call copies its inputs into
them), a memory pool and the outputs the capture produced (each replay overwrites them, so
a caller must consume them before the next call). Every state the function reads or writes between
calls (a static KV cache) must live at fixed addresses too, and every position-dependent value
must arrive as a tensor input, never as a Python number baked into the capture.

Disabled (on a CPU, or for the eager reference), it simply calls the function.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.utils import _pytree as pytree

WARMUP = 2  # eager runs on a side stream before capture (lazy initialization, cuBLAS workspaces)


class GraphCache:
    def __init__(self, fn: Callable, *, enabled: bool):
        self.fn, self.enabled = fn, enabled
        self.graphs: dict[tuple, tuple[torch.cuda.CUDAGraph, list, object]] = {}

    def __call__(self, *args, **kwargs):
        if not self.enabled:
            return self.fn(*args, **kwargs)
        leaves, spec = pytree.tree_flatten((args, kwargs))
        key = (spec, *((x.shape, x.dtype) if torch.is_tensor(x) else x for x in leaves))
        if key not in self.graphs:
            self.graphs[key] = self._capture(leaves, spec)
        graph, static, out = self.graphs[key]
        for s, x in zip(static, leaves):
            if torch.is_tensor(x):
                s.copy_(x)
        graph.replay()
        return out

    def _capture(self, leaves: list, spec):
        static = [x.clone() if torch.is_tensor(x) else x for x in leaves]
        args, kwargs = pytree.tree_unflatten(static, spec)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(WARMUP):
                self.fn(*args, **kwargs)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):  # a pool of its own: its outputs outlive other shapes' replays
            out = self.fn(*args, **kwargs)
        return graph, static, out
