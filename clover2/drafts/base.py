"""What every draft model (the paper's q) shares: the frozen parts it borrows from the target, and
the interface the trainer and the drafter call.

Notation: `h_t` is the target's last hidden state before the final norm at position t, `x_{t+1}`
the token that follows it, `E` a token embedding. Draft head i, read at position t, predicts
x_{t+2+i}: head 0 proposes the children of the tree's root, head i the nodes at depth i+1.

The LM head is always the target's, frozen. With `draft_vocab = k` it keeps only the rows of the
k most frequent training tokens (`d2t` maps draft ids back to target ids), which cuts the
dominant cost of drafting on a CPU.

Each architecture (`clover.py`, `eagle.py`, `eagle3.py`, `medusa.py`) is written once, as three parts
that training and decoding share:

- `features(h)`: the space the draft reads the target's state in: the pre-norm state h (Clover), the
  normed feature that enters the LM head (EAGLE-1 and Medusa, as their official code), or a
  projection of several target layers' inputs (EAGLE-3, whose `layers_read` names them);
- `trunk(x, e)`: the sequence part, what it computes once per committed position t from the
  features x_t and the embedding e = E(x_{t+1}): the state s_t of the tree's root at t;
- `head_step(s, e, depth)`: one step down the tree, a node's state from its parent's state and
  the embedding of the node's own token; `read(s, e, depth)` (default: s itself) is the vector the
  LM head reads from a state at `depth` (e: the node's token embedding, None at the root).

Training (`forward`) runs the trunk over the teacher-forced sequence and unrolls `head_step` over
the depths on it (each depth pairs the state at t with the data's token x_{t+1+depth}, as the path
that verification accepts does); decoding (`advance`, `root_logits`, `step`) calls the same parts
on the committed positions and on the tree's nodes, so the two agree by construction (tested).
The drafter (`clover2.drafts.drafter`) grows the tree and keeps the per-node states; a model only
computes. A draft whose step attends over the tree (EAGLE-1 and EAGLE-3: `attends_to_tree`) keeps its
decoder layers in `self.block`: they read the committed sequence from the draft's own KV cache and,
in the tree, a node's ancestors and itself (`TreeAttention`; in training the same keys, through
`clover2.drafts.ttt`); its `trunk` and `head_step` pass the attention arguments they are given
(`where`) on to the layers.
"""

from __future__ import annotations

import contextlib
import copy
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import nn
from transformers import DynamicCache

from clover2.decoding.hf_compat import final_norm_like
from clover2.decoding.target import Target
from clover2.drafts.config import DraftConfig
from clover2.drafts.ttt import unrolling
from clover2.errors import Clover2Error

# Parameter-name prefixes of the parts copied from the target: rebuilt from it at load time, never stored.
BORROWED = ("lm_head.", "embed.", "target_norm.")


@dataclass(frozen=True)
class TreeAttention:
    """For drafts whose step attends over the tree (EAGLE-1, EAGLE-3): where the nodes of one call sit.

    The draft's KV cache holds `committed` sequence entries, then one entry per tree node already
    stepped; `visible[r, j]` says whether row r sees tree entry j (its tree ancestors; the root is
    committed), which it attends to besides the sequence and itself.
    """

    committed: int
    visible: torch.Tensor  # (n, tree entries so far) bool, on the draft's device


class DraftModel(nn.Module):
    """A draft for one target: trainable parts, plus frozen copies of what it borrows from the target."""

    arch: ClassVar[str]  # the registry name (clover2.drafts.ARCHITECTURES)
    recipe: ClassVar[dict] = {}  # the architecture's own DraftConfig fields
    attends_to_tree: ClassVar[bool] = False  # does `head_step` attend over the tree (layers in `self.block`)?
    shared_children: ClassVar[bool] = False  # are a depth's children the same for every node (Medusa)?

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

    # -- what an architecture defines -----------------------------------------------------------

    def features(self, h: torch.Tensor) -> torch.Tensor:
        """The target's state as this draft reads it (default: the pre-norm state itself)."""
        return h

    def trunk(self, x: torch.Tensor, e: torch.Tensor, **where) -> torch.Tensor:
        """Root states `(B, T, H)` from features `x` `(B, T, ·)` and `e` `(B, T, H)`, e[:, t] = E(x_{t+1}).
        `where`: the attention arguments of the draft's layers (`run_stack`'s), if it has any."""
        raise NotImplementedError

    def head_step(self, s: torch.Tensor, e: torch.Tensor, depth: int, **where) -> torch.Tensor:
        """States at `depth` >= 1 from the parents' states `s` `(B, n, H)` and the nodes' token embeddings `e`."""
        raise NotImplementedError

    def read(self, s: torch.Tensor, e: torch.Tensor | None, depth: int) -> torch.Tensor:
        """The vector the LM head reads from a state at `depth` (`e`: its token's embedding, None at the root)."""
        return s

    @property
    def trained_heads(self) -> int:
        """Depths with a loss of their own."""
        return self.config.num_heads

    @property
    def max_tree_depth(self) -> int | None:
        """The deepest tree this draft can grow (None: any depth)."""
        return None

    @classmethod
    def layers_read(cls, target_config) -> tuple[int, ...]:
        """The target layers whose inputs the draft reads, concatenated (empty: the last hidden state)."""
        return ()

    def logits(self, o: torch.Tensor) -> torch.Tensor:
        """Draft-vocabulary logits (float32) from the vectors `read` gives."""
        return self.lm_head(o).float()

    # -- training -----------------------------------------------------------------------------

    def forward(self, h: torch.Tensor, next_ids: torch.Tensor, *, steps: int = 0) -> list[torch.Tensor]:
        """Per trained depth j, the vectors fed to the LM head at positions 0..T-1-j.

        `h`: `(B, T, H)` target states (`(B, T, len(layers_read) * H)` for a draft that reads several
        layers); `next_ids`: `(B, T)`, next_ids[:, t] = x_{t+1}. Depth j's output at t predicts
        x_{t+2+j}. `steps`: how many depths to train, 0 for the architecture's own
        (`trained_heads`; see `check_steps`). In training, the input features get uniform noise of
        half-width input_noise * 512 / T (EAGLE-1's; T is the padded batch length here).
        """
        steps = steps or self.trained_heads
        self.check_steps(steps)
        x = self.features(h)
        if self.config.input_noise and self.training:
            x = x + (torch.rand_like(x) - 0.5) * (2 * self.config.input_noise * 512 / x.shape[1])
        e, T = self.embed(next_ids), x.shape[1]
        positions = torch.arange(T, device=x.device)[None]
        with unrolling(self.block) if self.attends_to_tree else contextlib.nullcontext({}) as where:
            s = self.trunk(x, e, position_ids=positions, **where)
            outs = [self.read(s, None, 0)]
            for j in range(1, min(steps, T)):  # the state at t with the token x_{t+1+j}, at position t + j
                n = T - j
                e_j = e[:, j:]
                s = self.head_step(s[:, :n], e_j, j, position_ids=positions[:, j:], **where)
                outs.append(self.read(s, e_j, j))
        return outs

    def check_steps(self, steps: int) -> None:
        """Refuse a number of trained depths this draft cannot have (training-time test's `ttt_steps`)."""
        if steps < 1 or (self.max_tree_depth is not None and steps > self.max_tree_depth):
            raise Clover2Error(f"a {self.arch} draft trains 1 to {self.max_tree_depth or 'any number of'} heads, "
                               f"not {steps}")

    @property
    def hidden_layers(self) -> tuple[int, ...]:
        return self.layers_read(self.target_config)

    def regression_targets(self, h: torch.Tensor) -> torch.Tensor:
        """What head outputs are regressed to: the target's normed state (the vector its LM head reads)."""
        return self.target_norm(h)

    # -- decoding -----------------------------------------------------------------------------

    def new_cache(self) -> DynamicCache:
        return DynamicCache()

    def advance(self, h: torch.Tensor, next_ids: torch.Tensor, cache: DynamicCache) -> torch.Tensor:
        """Feed newly committed positions (`(1, n, H)` states, `(1, n)` following tokens); the root state `(1, H)`."""
        past = cache.get_seq_length()
        positions = torch.arange(past, past + h.shape[1], device=h.device)[None]
        return self.trunk(self.features(h), self.embed(next_ids), cache=cache, position_ids=positions)[:, -1]

    def root_logits(self, root: torch.Tensor) -> torch.Tensor:
        """Draft logits `(1, V_draft)` of the root's children, from the root state `(1, H)`."""
        return self.logits(self.read(root, None, 0))

    def step(self, parents: torch.Tensor, tokens: torch.Tensor, depth: int, *, cache: DynamicCache | None,
             attention: TreeAttention | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """States `(n, H)` of n tree nodes at `depth` >= 1 from their parents' states `(n, H)` and their
        tokens `(n,)`, and the draft logits `(n, V_draft)` of their children."""
        e = self.embed(tokens)[None]  # (1, n, H)
        where = _tree_attention(attention, cache, depth, e) if self.attends_to_tree else {}
        s = self.head_step(parents[None], e, depth, **where)[0]
        if self.shared_children:  # every node's children are the same: compute them once
            return s, self.logits(self.read(s[:1], e[0, :1], depth)).expand(len(tokens), -1)
        return s, self.logits(self.read(s, e[0], depth))


def _tree_attention(attention: TreeAttention, cache: DynamicCache, depth: int, e: torch.Tensor) -> dict:
    """The layers' attention arguments for n tree nodes at `depth`: each appends one entry to the
    draft cache and sees the committed sequence, its ancestors' entries and its own."""
    past, n = cache.get_seq_length(), e.shape[1]
    mask = torch.full((n, past + n), torch.finfo(e.dtype).min, device=e.device)
    mask[:, :attention.committed] = 0  # the committed sequence is visible; of the tree entries, only...
    mask[:, attention.committed:past].masked_fill_(attention.visible, 0)  # ...its ancestors'...
    rows = torch.arange(n, device=e.device)
    mask[rows, past + rows] = 0  # ...and the node's own
    positions = torch.full((1, n), attention.committed + depth - 1, device=e.device)
    return dict(cache=cache, position_ids=positions, attention_mask=mask[None, None])


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
