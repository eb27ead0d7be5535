"""The draft models (the paper's q), one class per architecture, the drafter that grows token
trees with them, and decoding methods by name (`clover2.drafts.methods`).

To add an architecture: subclass `DraftModel` in a module of its own (its `recipe`, its parts, and
its `trunk` and `head_step`, which training and decoding share), then register it below and name it in
`clover2.drafts.config.ARCHS`. The CLI, the profiles, the benchmark's method specs and the notebooks all
take their names from there. The classes load on first use (they need torch; the names do not), so that
the command line's help starts without it.
"""

from __future__ import annotations

import importlib

from clover2.drafts.config import ARCHS

_MODULES = {"DraftModel": "base", "Clover2Draft": "clover", "Clover1Draft": "clover", "Eagle1Draft": "eagle",
            "Eagle3Draft": "eagle3", "Medusa1Draft": "medusa"}  # each class by the module that defines it
__all__ = ["ARCHITECTURES", "ARCHS", "build_draft", "draft_to_load", *_MODULES]


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


def __getattr__(name: str):
    if name in _MODULES:
        return getattr(importlib.import_module(f"clover2.drafts.{_MODULES[name]}"), name)
    if name == "ARCHITECTURES":  # arch name -> class, in ARCHS' order
        classes = {cls.arch: cls for cls in map(__getattr__, _MODULES) if cls.__name__ != "DraftModel"}
        registry = {arch: classes[arch] for arch in ARCHS}
        globals()["ARCHITECTURES"] = registry
        return registry
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def build_draft(config, target, *, d2t=None):
    """A fresh draft of `config.arch` for `target`, initialized as its official code does."""
    registry = globals().get("ARCHITECTURES") or __getattr__("ARCHITECTURES")
    return registry[config.arch].from_target(config, target, d2t=d2t)


def draft_to_load(config, target, *, d2t=None):
    """A draft built as `build_draft` builds one, for trained weights loaded next: without drawing the initial
    values that loading replaces (most of a load's time on a CPU; the global random stream untouched).
    What a load does not set is either borrowed from the target here or computed at construction (the
    rotary frequencies): the caller refuses a state that leaves anything else missing."""
    from transformers.initialization import no_init_weights

    with no_init_weights():
        return build_draft(config, target, d2t=d2t)
