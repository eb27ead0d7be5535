"""clover2: Clover-2 draft models and an exactly lossless tree speculative decoder (arXiv 2408.00264).

The public API, importable from `clover2` directly (loaded on first use, so `import clover2` is fast).
Three lines answer with a draft (a method written as every command writes it, NAME[@TREE][=DRAFT]):

    import clover2
    target = clover2.load_target("smollm2-135m-instruct")  # float32 on a CPU: the exact path
    print(clover2.chat(target, "clover2@chain1=results/study/drafts/clover2", "Why is the sky blue?"))

and the engine underneath, piece by piece:

    from clover2 import load_target, load_draft, ModelDrafter, DecodeConfig, generate, preset
    target = load_target("smollm2-135m-instruct")  # as given; kernels="auto" measures the fastest linear kernels
    drafter = ModelDrafter(load_draft("drafts/clover2", target), preset("eagle25"))
    out = generate(target, drafter, target.encode_chat([{"role": "user", "content": "Hi!"}]), DecodeConfig())

Layers, each a subpackage that imports only the ones above it in this list:
`decoding` (the engine: target, tree, verify, sampling, cache, decode loop, drafters),
`drafts` (the draft models, the drafter that grows trees with them, and methods by name), `training`
(tasks, data, losses, the train loop), `measure` (benchmark, cost curve, tree fitting, replays,
provenance) and `research` (the notebooks' study, the designed study, figures and runs; needs
the `book` extra).
"""

from __future__ import annotations

import importlib

try:
    from clover2._version import __version__  # written by setuptools-scm at install time
except ImportError:  # a source tree that was never installed
    __version__ = "0+unknown"

_EXPORTS = {
    "Clover2Error": "clover2.errors",
    "Target": "clover2.decoding.target", "load_target": "clover2.decoding.target",
    "DecodeConfig": "clover2.decoding.decode", "generate": "clover2.decoding.decode",
    "speculative_steps": "clover2.decoding.decode", "Generation": "clover2.decoding.decode",
    "SamplingConfig": "clover2.decoding.sampling",
    "Tree": "clover2.decoding.tree", "Draft": "clover2.decoding.tree", "preset": "clover2.decoding.tree",
    "Drafter": "clover2.decoding.drafter", "NoDrafter": "clover2.decoding.drafter",
    "PromptLookupDrafter": "clover2.decoding.prompt_lookup",
    "DraftConfig": "clover2.drafts.config", "DynamicTree": "clover2.drafts.drafter",
    "ModelDrafter": "clover2.drafts.drafter", "load_draft": "clover2.drafts.checkpoint",
    "MethodSpec": "clover2.drafts.methods", "chat": "clover2.drafts.methods",
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'clover2' has no attribute {name!r}")
