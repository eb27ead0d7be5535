"""What every draft model (the paper's q) shares: the frozen parts it borrows from the target, and
the interface the trainer and the drafter call.

Notation: `h_t` is the target's last hidden state before the final norm at position t, `x_{t+1}`
the token that follows it, `E` a token embedding. Draft head i, read at position t, predicts
x_{t+2+i}: head 0 proposes the children of the tree's root, head i the nodes at depth i+1.

The LM head is always the target's, frozen. With `draft_vocab = k` it keeps only the rows of the
k most frequent training tokens (`d2t` maps draft ids back to target ids), which cuts the
dominant cost of drafting on a CPU.

A subclass per architecture (`clover.py`, `eagle.py`, `medusa.py`) implements:

- `features(h)`: the space the draft reads the target's state in: the pre-norm state h (Clover), the
  normed feature that enters the LM head (EAGLE-1 and Medusa, as their official code), or a
  projection of several target layers' inputs (EAGLE-3, whose `layers_read` names them);
- training: `_heads(x, next_ids, steps)`, the per-head vectors fed to the LM head (teacher forcing)
  for `steps` heads (training-time test: the unrolled decode steps, `TrainConfig.ttt_steps`);
- decoding: `advance` (the sequence part, over newly committed positions), `root_logits` (depth 0)
  and `step` (the states of a batch of tree nodes from their parents' states and their own tokens,
  and the logits of their children). The drafter (`clover2.drafts.drafter`) grows the tree and
  keeps the per-node states; a model only computes.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import nn
from transformers import DynamicCache

from clover2.decoding.hf_compat import final_norm_like
from clover2.decoding.target import Target
from clover2.drafts.config import DraftConfig
from clover2.errors import Clover2Error

# Parameter-name prefixes of the parts copied from the target: rebuilt from it at load time, never stored.
BORROWED = ("lm_head.", "embed.", "target_norm.")


@dataclass(frozen=True)
class TreeAttention:
    """For drafts whose step attends over the tree (EAGLE-1): where the nodes of one call sit.

    The draft's KV cache holds `committed` sequence entries, then one entry per tree node already
    stepped; `visible[r]` lists the cache slots of row r's tree ancestors (the root excluded: it is
    committed), which row r attends to besides the sequence and itself.
    """

    committed: int
    visible: list[list[int]]


class DraftModel(nn.Module):
    """A draft for one target: trainable parts, plus frozen copies of what it borrows from the target."""

    arch: ClassVar[str]  # the registry name (clover2.drafts.ARCHITECTURES)
    recipe: ClassVar[dict] = {}  # the architecture's own DraftConfig fields
    attends_to_tree: ClassVar[bool] = False  # does `step` need a TreeAttention and the draft cache?

    def __init__(self, config: DraftConfig, target_config, *, d2t: torch.Tensor | None = None):
        super().__init__()
        self.config = config
        text = target_config.get_text_config()
        self.target_config = text
        H, V = text.hidden_size, text.vocab_size
        vocab = len(d2t) if d2t is not None else V
        # Frozen parts borrowed from the target (buffers: they load with the draft, never train).
        self.register_buffer("d2t", d2t if d2t is not None else torch.arange(V), persistent=True)
        self.lm_head = nn.Linear(H, vocab, bias=False).requires_grad_(False)
        self.embed = nn.Embedding(V, H).requires_grad_(False)
        self.target_norm = copy.deepcopy(final_norm_like(text)).requires_grad_(False)

    @classmethod
    def from_target(cls, config: DraftConfig, target: Target, *, d2t: torch.Tensor | None = None) -> DraftModel:
        """A fresh draft for `target`: borrowed parts copied, trained parts initialized as the official code does."""
        model = cls(config, target.config, d2t=d2t).to(target.device)
        tm = target.model
        with torch.no_grad():
            head = tm.get_output_embeddings().weight.float()
            model.lm_head.weight.copy_(head[model.d2t])
            emb = head if config.embedding == "lm_head" else tm.get_input_embeddings().weight.float()
            model.embed.weight.copy_(emb)
            model.target_norm.load_state_dict(tm.get_decoder().norm.state_dict())
            model._init_from(tm)
        return model.float()

    def _init_from(self, target_model: nn.Module) -> None:
        """Copy target weights into the trained parts that start from them (none by default)."""

    def adapt_to(self, hidden: torch.Tensor) -> None:
        """Set data-dependent constants from a sample of target states `(n, H)` before training (none by default)."""

    # -- training -----------------------------------------------------------------------------

    def forward(self, h: torch.Tensor, next_ids: torch.Tensor, *, steps: int = 0) -> list[torch.Tensor]:
        """Per trained head i, the vectors fed to the LM head at positions 0..T-1-i (Medusa: 0..T-1).

        `h`: `(B, T, H)` target states (`(B, T, len(layers_read) * H)` for a draft that reads several
        layers); `next_ids`: `(B, T)`, next_ids[:, t] = x_{t+1}. Head i's output at t predicts
        x_{t+2+i}. `steps`: how many heads (depths) to train, 0 for the architecture's own
        (`trained_heads`; see `check_steps`). In training, the input features get uniform noise of
        half-width input_noise * 512 / T (EAGLE-1's; T is the padded batch length here).
        """
        steps = steps or self.trained_heads
        self.check_steps(steps)
        x = self.features(h)
        if self.config.input_noise and self.training:
            x = x + (torch.rand_like(x) - 0.5) * (2 * self.config.input_noise * 512 / x.shape[1])
        return self._heads(x, next_ids, steps)

    def check_steps(self, steps: int) -> None:
        """Refuse a number of trained heads this draft cannot have (training-time test's `ttt_steps`)."""
        if steps < 1 or (self.max_tree_depth is not None and steps > self.max_tree_depth):
            raise Clover2Error(f"a {self.arch} draft trains 1 to {self.max_tree_depth or 'any number of'} heads, "
                               f"not {steps}")

    @classmethod
    def layers_read(cls, target_config) -> tuple[int, ...]:
        """The target layers whose inputs the draft reads, concatenated (empty: the last hidden state)."""
        return ()

    @property
    def hidden_layers(self) -> tuple[int, ...]:
        return self.layers_read(self.target_config)

    def features(self, h: torch.Tensor) -> torch.Tensor:
        """The target's state as this draft reads it (default: the pre-norm state itself)."""
        return h

    def _heads(self, x: torch.Tensor, next_ids: torch.Tensor, steps: int) -> list[torch.Tensor]:
        raise NotImplementedError

    @property
    def trained_heads(self) -> int:
        """Heads with a loss of their own."""
        return self.config.num_heads

    def regression_targets(self, h: torch.Tensor) -> torch.Tensor:
        """What head outputs are regressed to: the target's normed state (the vector its LM head reads)."""
        return self.target_norm(h)

    def logits(self, o: torch.Tensor) -> torch.Tensor:
        """Draft-vocabulary logits (float32) from head outputs."""
        return self.lm_head(o).float()

    # -- decoding -----------------------------------------------------------------------------

    @property
    def max_tree_depth(self) -> int | None:
        """The deepest tree this draft can grow (None: any depth)."""
        return None

    def new_cache(self) -> DynamicCache:
        return DynamicCache()

    def advance(self, h: torch.Tensor, next_ids: torch.Tensor, cache: DynamicCache) -> torch.Tensor:
        """Feed newly committed positions (`(1, n, H)` states, `(1, n)` following tokens); the root state `(1, H)`."""
        raise NotImplementedError

    def root_logits(self, root: torch.Tensor) -> torch.Tensor:
        """Draft logits `(1, V_draft)` of the root's children, from the root state `(1, H)`."""
        raise NotImplementedError

    def step(self, parents: torch.Tensor, tokens: torch.Tensor, depth: int, *, cache: DynamicCache,
             attention: TreeAttention | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """States `(n, H)` of n tree nodes at `depth` >= 1 from their parents' states `(n, H)` and their
        tokens `(n,)`, and the draft logits `(n, V_draft)` of their children."""
        raise NotImplementedError


def copy_layers(target_model: nn.Module, block: nn.Module, which: str | int) -> None:
    """Initialize a `decoder_stack`'s layers as `DraftConfig.init_layer` says: target layer `which`
    in every layer (an integer), the target's "last" or "first" layers in order, or "random" (as built)."""
    if which == "random":
        return
    layers = target_model.get_decoder().layers
    L, n = len(layers), len(block.layers)
    if isinstance(which, int):
        if not -L <= which < L:
            raise Clover2Error(f"init_layer {which}: the target has {L} layers")
        source = [which % L] * n
    else:
        source = range(L - n, L) if which == "last" else range(n)
    for mine, theirs in zip(block.layers, source):
        missing = mine.load_state_dict(layers[theirs].state_dict(), strict=False).missing_keys
        if missing:  # a part the draft's layer has and the target's lacks (a norm it drops is fine)
            raise Clover2Error(f"init_layer: target layer {theirs} lacks {missing[:3]}")
