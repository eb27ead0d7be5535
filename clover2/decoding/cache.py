"""The target's KV cache during decoding: a forward over new tokens arranged as a tree, and the commit
of the accepted path, without recomputation. Two engines share that interface:

- `TreeCache` (engine `eager`, the reference and what the paper measured): a `DynamicCache` that
  grows by concatenation; each forward sees exactly the committed prefix plus the new tokens.
- `StaticTreeCache` (engines `static` and `graphs`): the keys and values live in preallocated
  buffers (transformers' `StaticCache`), every forward runs at a fixed *bucket* of new tokens
  (1, 2, 4, ..., 128, padded) over the whole buffer, masked. Fixed shapes and fixed addresses are
  what CUDA graphs need: with `graphs` on a CUDA device each bucket's forward is captured once
  (`clover2.decoding.graphs`) and then replayed, which removes the per-kernel launch cost that
  dominates small targets on a GPU. On a CPU `graphs` runs the same static path uncaptured.

After a forward the cache holds `past` committed entries followed by one entry per new token (and,
for a static cache, the padding's). `commit(past, path)` moves the kept root-to-node path to
`past, past + 1, ...` and forgets the rest.
"""

from __future__ import annotations

import copy
import math
from dataclasses import replace

import torch
from transformers import DynamicCache, StaticCache

from clover2.decoding.engines import ENGINES
from clover2.decoding.graphs import GraphCache
from clover2.decoding.transfer import to_device
from clover2.errors import Clover2Error

BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128)  # new tokens per static forward: a tree pads up to the next one


class TreeCache(DynamicCache):
    """The eager engine: a `DynamicCache` of full layers (sliding windows are enforced by the mask)."""

    def run(self, target, ids: torch.Tensor, positions: torch.Tensor, visible: torch.Tensor | None, *,
            hidden: bool = False, layers: tuple[int, ...] = (), logits_to_keep: int = 0):
        """One target forward of new tokens `ids` `(n,)` at `positions` `(n,)`, new token i seeing the
        committed prefix and the new tokens j with `visible[i, j]` (its ancestors and itself); with
        `hidden`, the states a draft reads (`layers`: see `Target.forward`).

        `visible=None`: a causal run (positions consecutive from the prefix's length), masked by the
        model itself, which lets attention skip the masked half (a long prefill ~20% faster on a CPU)."""
        past, n, device = self.get_seq_length(), len(ids), target.device
        if visible is None:
            mask = None
        else:
            mask = torch.zeros(1, 1, n, past + n, dtype=target.dtype, device=device)
            mask[0, 0, :, past:].masked_fill_(~to_device(visible, device), torch.finfo(target.dtype).min)
        return target.forward(to_device(ids, device)[None], to_device(positions, device)[None], mask, self,
                              logits_to_keep=logits_to_keep, hidden=hidden, layers=layers)

    def commit(self, past: int, path: list[int]) -> None:
        """Keep entries `past + path` (node indices, increasing) right after the first `past` entries."""
        keep = move_path(self.layers, past, path)
        for layer in self.layers:
            layer.keys = layer.keys[:, :, :past + keep]
            layer.values = layer.values[:, :, :past + keep]


def move_path(layers, past: int, path: list[int]) -> int:
    """Move the entries `past + path` to `past, past + 1, ...` in every layer; return how many."""
    keep = len(path)
    if path[-1] != keep - 1:  # the path is nodes 0..k-1: nothing moves
        src = to_device(path, layers[0].keys.device) + past  # one copy to the device per step
        for layer in layers:
            src = to_device(src, layer.keys.device)  # (a model split over devices)
            layer.keys[:, :, past:past + keep] = layer.keys[:, :, src]
            layer.values[:, :, past:past + keep] = layer.values[:, :, src]
    return keep


class StaticTreeCache:
    """The static engines: preallocated keys and values for `capacity` tokens, forwards at bucketed
    sizes, captured as CUDA graphs per bucket when `graphs` is set and the target is on a GPU.

    One instance per engine serves every generation of one target, so that captured graphs keep
    their buffers: `for_target` hands it out emptied, and replaces it by a larger one when a
    generation needs more room.
    """

    def __init__(self, target, capacity: int, *, graphs: bool):
        self.target, self.capacity = target, capacity
        config = copy.deepcopy(target.config.get_text_config())
        config.layer_types = ["full_attention"] * config.num_hidden_layers  # windows: enforced by the mask
        config.sliding_window = None
        self.kv = StaticCache(config=config, max_cache_len=capacity)
        self.length = 0  # entries in use: the committed ones, then the last forward's until `commit`
        self.graphed = graphs and target.device.type == "cuda"
        self._forward = GraphCache(self._forward_at, enabled=self.graphed)
        self.captured: set[tuple[bool, tuple[int, ...]]] = set()  # (hidden, layers) whose buckets are captured

    def capture(self, hidden: bool, layers: tuple[int, ...] = ()) -> None:
        """Capture every bucket's forward (returning these states) now, not inside a timed step; it
        writes only what `length` 0 drops. Nothing to do uncaptured or once done."""
        if not self.graphed or (hidden, layers) in self.captured:
            return
        for size in BUCKETS:
            self.run(self.target, torch.zeros(size, dtype=torch.long), torch.zeros(size, dtype=torch.long),
                     torch.eye(size, dtype=torch.bool), hidden=hidden, layers=layers)
            self.length = 0
        self.captured.add((hidden, layers))

    @classmethod
    def for_target(cls, target, capacity: int, *, graphs: bool, hidden: bool = False,
                   layers: tuple[int, ...] = ()) -> StaticTreeCache:
        """The target's reusable cache of at least `capacity` tokens (rounded up to a multiple of 256),
        captured for plain forwards and for those returning the states `hidden` and `layers` ask for."""
        engine = "graphs" if graphs else "static"
        kept = target.engine_state.get(engine)
        if kept is None or kept.capacity < capacity:
            kept = cls(target, 256 * math.ceil(capacity / 256), graphs=graphs)
            target.engine_state[engine] = kept
        kept.capture(False)
        kept.capture(hidden, layers if hidden else ())
        kept.length = 0
        return kept

    def get_seq_length(self) -> int:
        return self.length

    def crop(self, max_length: int) -> None:
        """As `DynamicCache.crop`: keep the first `max_length` entries (negative: drop that many)."""
        self.length = max_length if max_length >= 0 else self.length + max_length

    @torch.inference_mode()  # its buffers are inference tensors, whoever calls first
    def run(self, target, ids: torch.Tensor, positions: torch.Tensor, visible: torch.Tensor | None, *,
            hidden: bool = False, layers: tuple[int, ...] = (), logits_to_keep: int = 0):
        """As `TreeCache.run` (`visible=None`: causal, masked here as any other pattern). Up to the
        largest bucket the forward runs padded to the next bucket (padding tokens sit at the first
        new position, see only themselves and are never committed); a longer input (a long
        prefill) runs once at its own size, uncaptured."""
        n, past, device = len(ids), self.length, target.device
        visible = torch.ones(n, n, dtype=torch.bool).tril() if visible is None else visible
        size = next((b for b in BUCKETS if b >= n), n)
        if past + size > self.capacity:
            raise Clover2Error(f"static cache of {self.capacity} tokens is full ({past} + {size})")
        ids_b = torch.zeros(1, size, dtype=torch.long, device=device)
        ids_b[0, :n] = to_device(ids, device)
        pos_b = torch.full((1, size), past, dtype=torch.long, device=device)
        pos_b[0, :n] = to_device(positions, device)
        mask = torch.full((1, 1, size, self.capacity), torch.finfo(target.dtype).min, dtype=target.dtype, device=device)
        mask[0, 0, :n, :past] = 0
        mask[0, 0, :n, past:past + n].masked_fill_(to_device(visible, device), 0)
        pad = torch.arange(n, size, device=device)
        mask[0, 0, pad, past + pad] = 0
        masks = target.layer_masks(mask, pos_b, first_new=past)  # per layer type, outside any capture
        start = to_device(past, device)
        run = self._forward if size in BUCKETS else self._forward_at
        out = run(ids_b, pos_b, masks, start, hidden=hidden, layers=layers)
        self.length = past + n  # as a dynamic cache: the new entries count until `commit`
        keep = slice(n - logits_to_keep, n) if logits_to_keep else slice(0, n)
        return replace(out, logits=out.logits[:, keep], hidden=None if out.hidden is None else out.hidden[:, :n])

    @torch.inference_mode()
    def commit(self, past: int, path: list[int]) -> None:
        self.length = past + move_path(self.kv.layers, past, path)

    def _forward_at(self, ids, positions, masks, start: torch.Tensor, *, hidden: bool, layers: tuple[int, ...]):
        """The target's forward writing its keys and values from slot `start` on. transformers' static
        layers write at a device counter each; it is set from the tensor `start` here, inside what
        is captured, so that a replay writes where its inputs say."""
        for layer in self.kv.layers:
            if layer.is_initialized:  # the first forward initializes each layer, at slot 0
                layer.cumulative_length.copy_(start)
        return self.target.forward(ids, positions, masks, self.kv, hidden=hidden, layers=layers)


def new_cache(target, engine: str = "eager", *, capacity: int = 0, hidden: bool = False,
              layers: tuple[int, ...] = ()):
    """An empty cache of the given engine; a static one holds at least `capacity` tokens (and a
    graphed one has captured the forwards that return the states `hidden` and `layers` ask for)."""
    if engine == "eager":
        return TreeCache()
    if engine in ("static", "graphs"):
        return StaticTreeCache.for_target(target, capacity, graphs=engine == "graphs", hidden=hidden, layers=layers)
    raise Clover2Error(f"unknown engine {engine!r}; use one of: {', '.join(ENGINES)}")
