"""The draft models (the paper's q), one class per architecture, the drafter that grows token
trees with them, and decoding methods by name (`clover2.drafts.methods`).

To add an architecture: subclass `DraftModel` in a module of its own (its `recipe`, its parts, and
its `trunk` and `head_step`, which training and decoding share), then register it below. The CLI,
the profiles, the benchmark's method specs and the notebooks all take their names from here.
"""

from clover2.drafts.base import DraftModel
from clover2.drafts.clover import Clover1Draft, Clover2Draft
from clover2.drafts.eagle import Eagle1Draft
from clover2.drafts.eagle3 import Eagle3Draft
from clover2.drafts.medusa import Medusa1Draft

ARCHITECTURES: dict[str, type[DraftModel]] = {m.arch: m for m in (Clover2Draft, Clover1Draft, Eagle1Draft, Eagle3Draft,
                                                                      Medusa1Draft)}


def build_draft(config, target, *, d2t=None) -> DraftModel:
    """A fresh draft of `config.arch` for `target`, initialized as its official code does."""
    return ARCHITECTURES[config.arch].from_target(config, target, d2t=d2t)
