"""The draft configuration: one frozen dataclass for every architecture, stored beside each checkpoint.

Each architecture's own recipe (`DraftModel.recipe` of its class) sets the fields it differs in;
the profile's `draft` section and the ablations override single fields on top of it.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from clover2.errors import Clover2Error

ARCHS = ("clover2", "clover1", "eagle1", "eagle3", "medusa")  # every architecture; clover2.drafts has their classes


@dataclass(frozen=True)
class DraftConfig:
    arch: str = "clover2"  # one of ARCHS
    num_heads: int = 5  # draft depths: tokens proposed ahead of the root along one path
    aug_layers: int = 2  # decoder layers in the Augmenting Block (EAGLE-1: its single layer)
    extraction: str = "before"  # fuse the next token "before" the Augmenting Block (Clover-2) or "after" (Clover-1)
    output_projector: bool = True  # FC projectors between the state and the head norm (Clover-2)
    embedding: str = "lm_head"  # token embedding: frozen copy of the "lm_head" (official) or the target's "input" one
    draft_vocab: int = 0  # 0: the full vocabulary; k: the k most frequent training tokens
    # How the decoder layers start. An integer i: target layer i copied into every layer (the official
    # Clover-2 code: 0 at its HEAD, -1 at its earlier commit 934e306); "last" / "first": the target's
    # last / first layers, one each, in order (this project's earlier choice); "random": fresh (EAGLE-1).
    init_layer: str | int = "last"
    # distill: soft CE + regression (Clover-2); hard: CE on the data; eagle: EAGLE-1's; eagle3: soft CE
    # against the target renormalized over the draft vocabulary, where its top-1 lies inside (EAGLE-3's)
    loss: str = "distill"
    ce_weight: float = 1.0  # weight of the cross-entropy term
    regression_weight: float = 10.0  # weight of SmoothL1 to the target's (normed) hidden state
    head_decay: float = 0.7  # head i's loss is scaled by head_decay ** i
    # Training noise on the input features: uniform, half-width input_noise * 512 / T for sequences
    # of T tokens (EAGLE-1's official AddUniformNoise with std 0.2); 0: none (Clover-2, Medusa).
    input_noise: float = 0.0
    # Scale of Attention Decoder #0's value path (the token entering the trunk). 1 is the official
    # code. 0 means "auto" (a departure, validated only with the token fused *before* the block): the
    # ratio of the target's hidden-state RMS to the embedding RMS, measured on the training data, so
    # that the token is not drowned in a large residual stream.
    value_gain: float = 1.0

    def __post_init__(self):
        choices = {"arch": ARCHS, "extraction": ("before", "after"), "embedding": ("lm_head", "input"),
                   "loss": ("distill", "hard", "eagle", "eagle3")}
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise Clover2Error(f"draft config: {name}={getattr(self, name)!r}, expected one of {allowed}")
        if not (self.init_layer in ("last", "first", "random") or type(self.init_layer) is int):
            raise Clover2Error(f"draft config: init_layer={self.init_layer!r}, expected 'last', 'first', 'random' "
                               "or a target layer index")
        if (self.num_heads < 1 or self.aug_layers < 0 or self.draft_vocab < 0 or self.input_noise < 0
                or self.value_gain < 0):
            raise Clover2Error(f"draft config: num_heads >= 1, aug_layers, draft_vocab, input_noise, value_gain >= 0 "
                               f"needed: {self}")
        if self.value_gain == 0 and self.extraction == "after":
            raise Clover2Error("draft config: the auto value gain (value_gain: 0) is calibrated for the token fused "
                               "before the Augmenting Block; with extraction 'after' use value_gain: 1 (official)")

    @classmethod
    def for_arch(cls, arch: str, **overrides) -> DraftConfig:
        """Each architecture's own recipe; `overrides` switch single parts (the ablations)."""
        from clover2.drafts import ARCHITECTURES  # the classes (their recipes), which import this module

        if arch not in ARCHS:
            raise Clover2Error(f"unknown architecture {arch!r}; known: {', '.join(ARCHS)}")
        unknown = set(overrides) - {f.name for f in fields(cls)}
        if unknown:
            raise Clover2Error(f"unknown draft config fields: {sorted(unknown)}")
        return cls(arch=arch, **(ARCHITECTURES[arch].recipe | overrides))
