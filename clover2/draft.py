"""Draft models (the paper's q): Clover-2, Clover-1, EAGLE-1 and Medusa-1 in one module family.

Notation: `h_t` is the target's last hidden state before the final norm at position t, `x_{t+1}`
the token that follows it, `E` a token embedding. Draft head i, read at position t, predicts
x_{t+2+i}: head 0 proposes the children of the tree's root, head i the nodes at depth i+1.

- **Clover-2** (as the official code does it): an Attention Decoder fuses h_t with E(x_{t+1})
  *before* a 2-layer Augmenting Block of the target's own decoder-layer class (causal over the
  sequence, initialized from target layers, followed by its own norm), then an FC output
  projector and a shared head norm feed the frozen LM head. Heads i >= 1 are one regressive RNN
  step, shared across heads: the Attention Decoder #1 fuses the previous head's state with the
  embedding of the token chosen at the previous depth, and FC([state; E(token)]) projects it.
- **Clover-1** (reconstructed: the paper body is not reachable): the same parts without Clover-2's
  enhancements: the token is fused *after* a 1-layer Augmenting Block, no output projector (the
  state goes straight to the head norm and LM head), and no distillation (hard labels only).
- **EAGLE-1**: FC over [E(x_{t+1}); h_t], one decoder layer, regressing h_{t+1}; the target's own
  norm and LM head turn a predicted feature into logits. Deeper tokens come from feeding the
  predicted feature back, attending to the tree's ancestors in the draft's own KV cache.
- **Medusa-1**: one residual block per head on the target's normed state, each into the frozen
  LM head (shared here; Medusa-1 trains one LM head per head, which on a CPU budget costs more
  than the whole rest of the draft).

The LM head is always the target's, frozen. With `draft_vocab = k` it keeps only the rows of the
k most frequent training tokens (`d2t` maps draft ids back to target ids), which cuts the
dominant cost of drafting on a CPU.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, fields

import torch
import torch.nn.functional as F
from torch import nn
from transformers import AutoModel

from clover2.errors import Clover2Error
from clover2.target import Target, cache_kwarg

ARCHS = ("clover2", "clover1", "eagle1", "medusa")


@dataclass(frozen=True)
class DraftConfig:
    arch: str = "clover2"  # clover2 | clover1 | eagle1 | medusa
    num_heads: int = 5  # draft depths: tokens proposed ahead of the root along one path
    aug_layers: int = 2  # decoder layers in the Augmenting Block (EAGLE-1: its single layer)
    extraction: str = "before"  # fuse the next token "before" the Augmenting Block (Clover-2) or "after" (Clover-1)
    output_projector: bool = True  # FC projectors between the state and the head norm (Clover-2)
    embedding: str = "lm_head"  # token embedding: frozen copy of the "lm_head" (official) or the target's "input" one
    draft_vocab: int = 0  # 0: the full vocabulary; k: the k most frequent training tokens
    init_layer: str = "last"  # Augmenting Block starts from the target's "last" layers or its "first" ones
    loss: str = "distill"  # distill: soft CE + regression (Clover-2); hard: CE on the data; eagle: EAGLE-1's
    ce_weight: float = 1.0  # weight of the cross-entropy term
    regression_weight: float = 10.0  # weight of SmoothL1 to the target's (normed) hidden state
    head_decay: float = 0.7  # head i's loss is scaled by head_decay ** i
    input_noise: float = 0.0  # uniform noise half-width on input features (EAGLE-1 trains with 0.1)
    # Scale of Attention Decoder #0's value path (the token entering the trunk). 1 is the official
    # code; 0 means "auto": the ratio of the target's hidden-state RMS to the embedding RMS, measured
    # on the training data, so that the token is not drowned in a large residual stream.
    value_gain: float = 1.0

    def __post_init__(self):
        choices = {"arch": ARCHS, "extraction": ("before", "after"), "embedding": ("lm_head", "input"),
                   "init_layer": ("last", "first"), "loss": ("distill", "hard", "eagle")}
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise Clover2Error(f"draft config: {name}={getattr(self, name)!r}, expected one of {allowed}")
        if self.num_heads < 1 or self.aug_layers < 0 or self.draft_vocab < 0:
            raise Clover2Error(f"draft config: num_heads >= 1, aug_layers >= 0, draft_vocab >= 0 needed: {self}")

    @classmethod
    def for_arch(cls, arch: str, **overrides) -> DraftConfig:
        """Each architecture's own recipe; `overrides` switch single parts (the ablations)."""
        presets = {
            "clover2": {},
            "clover1": dict(extraction="after", output_projector=False, aug_layers=1, loss="hard",
                            regression_weight=0.0),
            "eagle1": dict(aug_layers=1, embedding="input", loss="eagle", ce_weight=0.1, regression_weight=1.0,
                           head_decay=1.0, input_noise=0.1),
            "medusa": dict(aug_layers=0, output_projector=False, loss="hard", regression_weight=0.0),
        }
        if arch not in presets:
            raise Clover2Error(f"unknown --arch {arch!r}; known: {', '.join(ARCHS)}")
        known = {f.name for f in fields(cls)}
        unknown = set(overrides) - known
        if unknown:
            raise Clover2Error(f"unknown draft config fields: {sorted(unknown)}")
        return cls(arch=arch, **(presets[arch] | overrides))

    @property
    def trained_heads(self) -> int:
        """Heads with a loss of their own: EAGLE-1 learns one step and reuses it at every depth."""
        return 1 if self.arch == "eagle1" else self.num_heads


class AttentionDecoder(nn.Module):
    """Clover's Attention Decoder: the state queries one key, the token embedding.

    With a single key, attention reduces to a per-head gate: the cosine of query and key scales
    the value (no softmax, no output projection), added to the state. Starts near identity.
    """

    def __init__(self, hidden: int, heads: int, eps: float):
        super().__init__()
        self.heads = heads
        self.register_buffer("gain", torch.ones(()))  # scale of the value path (see DraftConfig.value_gain)
        self.norm = nn.RMSNorm(hidden, eps=eps)
        self.q, self.k, self.v = (nn.Linear(hidden, hidden) for _ in range(3))
        with torch.no_grad():
            for lin, eye in ((self.q, 1.0), (self.k, 1.0), (self.v, 0.0)):
                lin.weight.uniform_(0, 0.01).add_(eye * torch.eye(hidden))
                lin.bias.zero_()

    def forward(self, h: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
        split = lambda x: x.unflatten(-1, (self.heads, -1))  # noqa: E731  (..., H) -> (..., nh, dh)
        gate = F.cosine_similarity(split(self.q(self.norm(h))), split(self.k(e)), dim=-1)  # (..., nh)
        return h + self.gain * (gate[..., None] * split(self.v(e))).flatten(-2)


class ResBlock(nn.Module):
    """Medusa's head block: x + SiLU(W x), W zero-initialized (the head starts as the LM head)."""

    def __init__(self, hidden: int):
        super().__init__()
        self.linear = nn.Linear(hidden, hidden)
        nn.init.zeros_(self.linear.weight)
        nn.init.zeros_(self.linear.bias)

    def forward(self, x):
        return x + F.silu(self.linear(x))


def _near_identity(lin: nn.Linear, hidden: int) -> nn.Linear:
    with torch.no_grad():
        lin.weight.uniform_(0, 0.01)
        lin.weight[:, :hidden] += torch.eye(hidden)
        lin.bias.zero_()
    return lin


class DraftModel(nn.Module):
    """A draft for one target: trainable parts, plus frozen copies of what it borrows from the target."""

    def __init__(self, config: DraftConfig, target_config, *, d2t: torch.Tensor | None = None):
        super().__init__()
        self.config = config
        text = target_config.get_text_config()
        self.target_config = text
        H, V, eps = text.hidden_size, text.vocab_size, getattr(text, "rms_norm_eps", 1e-6)
        vocab = len(d2t) if d2t is not None else V
        # Frozen parts borrowed from the target (buffers: they load with the draft, never train).
        self.register_buffer("d2t", d2t if d2t is not None else torch.arange(V), persistent=True)
        self.lm_head = nn.Linear(H, vocab, bias=False).requires_grad_(False)
        self.embed = nn.Embedding(V, H).requires_grad_(False)
        norm = _final_norm_like(text)  # built once: each build allocates a throwaway base model
        self.target_norm = copy.deepcopy(norm).requires_grad_(False)
        c = config
        if c.arch == "medusa":
            self.heads = nn.ModuleList(ResBlock(H) for _ in range(c.num_heads))
            return
        self.block = _decoder_stack(text, c.aug_layers, final_norm=c.arch != "eagle1")
        if c.arch == "eagle1":
            self.fc = nn.Linear(2 * H, H)
            return
        self.ad0 = AttentionDecoder(H, text.num_attention_heads, eps)
        self.ad1 = AttentionDecoder(H, text.num_attention_heads, eps)
        self.head_norm = copy.deepcopy(norm)
        if c.output_projector:
            self.fc0 = _near_identity(nn.Linear(H, H), H)
            self.fc1 = _near_identity(nn.Linear(2 * H, H), H)

    # -- construction from a target ---------------------------------------------------------

    @classmethod
    def from_target(cls, config: DraftConfig, target: Target, *, d2t: torch.Tensor | None = None) -> DraftModel:
        """A fresh draft, initialized the way the official code initializes Clover-2."""
        model = cls(config, target.config, d2t=d2t).to(target.device)
        tm = target.model
        with torch.no_grad():
            head = tm.get_output_embeddings().weight.float()
            model.lm_head.weight.copy_(head[model.d2t])
            emb = head if config.embedding == "lm_head" else tm.get_input_embeddings().weight.float()
            model.embed.weight.copy_(emb)
            norm = tm.get_decoder().norm.state_dict()
            model.target_norm.load_state_dict(norm)
            if hasattr(model, "head_norm"):
                model.head_norm.load_state_dict(norm)
            if hasattr(model, "block"):
                layers = tm.get_decoder().layers
                n = len(model.block.layers)
                source = range(len(layers) - n, len(layers)) if config.init_layer == "last" else range(n)
                for mine, theirs in zip(model.block.layers, source):
                    mine.load_state_dict(layers[theirs].state_dict())
                if config.arch != "eagle1":
                    model.block.norm.load_state_dict(norm)
        return model.float()

    # -- training: teacher forcing over whole sequences --------------------------------------

    def forward(self, h: torch.Tensor, next_ids: torch.Tensor) -> list[torch.Tensor]:
        """Per trained head i, the vectors fed to the LM head at positions 0..T-1-i.

        `h`: `(B, T, H)` pre-norm target states; `next_ids`: `(B, T)`, next_ids[:, t] = x_{t+1}.
        Head i's output at t predicts x_{t+2+i} (EAGLE-1: its single output predicts x_{t+2}).
        """
        c = self.config
        if c.input_noise and self.training:
            h = h + (torch.rand_like(h) - 0.5) * 2 * c.input_noise
        if c.arch == "medusa":
            s = self.target_norm(h)
            return [head(s) for head in self.heads]
        e = self.embed(next_ids)  # (B, T, H): E(x_{t+1})
        if c.arch == "eagle1":
            return [self.target_norm(self.feature(h, e))]
        s = self.trunk(h, e)
        outs = [self.project(s, None)]
        for i in range(1, c.num_heads):
            s, e_i = s[:, :-1], e[:, i:]  # state at t paired with E(x_{t+1+i})
            s = self.ad1(s, e_i)
            outs.append(self.project(s, e_i))
        return outs

    def trunk(self, h, e, *, cache=None, position_ids=None, attention_mask=None):
        """Clover's sequence part: Attention Decoder #0 and the Augmenting Block, in either order."""
        if self.config.extraction == "before":
            return self._block(self.ad0(h, e), cache, position_ids, attention_mask)
        return self.ad0(self._block(h, cache, position_ids, attention_mask), e)

    def feature(self, h, e, *, cache=None, position_ids=None, attention_mask=None):
        """EAGLE-1: the predicted next pre-norm feature from [E(x_{t+1}); h_t]."""
        return self._block(self.fc(torch.cat([e, h], -1)), cache, position_ids, attention_mask)

    def project(self, s: torch.Tensor, e: torch.Tensor | None) -> torch.Tensor:
        """Clover: the vector the LM head reads, from a head state (and, for heads >= 1, the token)."""
        if self.config.output_projector:
            s = self.fc0(s) if e is None else self.fc1(torch.cat([s, e], -1))
        return self.head_norm(s)

    def logits(self, o: torch.Tensor) -> torch.Tensor:
        """Draft-vocabulary logits (float32) from head outputs."""
        return self.lm_head(o).float()

    # -- inference: the drafter's per-step calls --------------------------------------------

    def new_cache(self):
        from transformers import DynamicCache

        return DynamicCache()

    def advance(self, h: torch.Tensor, next_ids: torch.Tensor, cache) -> torch.Tensor:
        """Feed newly committed positions (`(1, n, H)` states, `(1, n)` following tokens); the root state `(1, H)`."""
        if self.config.arch == "medusa":
            return self.target_norm(h[:, -1])
        past = cache.get_seq_length()
        pos = torch.arange(past, past + h.shape[1], device=h.device)[None]
        e = self.embed(next_ids)
        s = (self.feature if self.config.arch == "eagle1" else self.trunk)(h, e, cache=cache, position_ids=pos)
        return s[:, -1]

    def expander(self, root: torch.Tensor, cache):
        """A function (nodes, their parents, their tokens, depth) -> draft logits for their children."""
        arch, committed = self.config.arch, cache.get_seq_length()
        states: dict[int, torch.Tensor] = {0: root[0]}
        entry: dict[int, int] = {}  # EAGLE-1: node -> its slot in the draft KV cache
        parent_of: dict[int, int] = {}

        def expand(nodes: list[int], parents: list[int], tokens: torch.Tensor, depth: int) -> torch.Tensor:
            if arch == "medusa":
                return self.logits(self.heads[depth](root)).expand(len(nodes), -1)
            if depth == 0:
                o = self.target_norm(root) if arch == "eagle1" else self.project(root, None)
                return self.logits(o)
            e = self.embed(tokens)  # (n, H)
            prev = torch.stack([states[p] for p in parents])
            if arch == "eagle1":
                s = self._eagle_nodes(nodes, parents, prev, e, cache, committed, depth, entry, parent_of)
                out = self.target_norm(s)
            else:
                s = self.ad1(prev, e)
                out = self.project(s, e)
            for row, n in enumerate(nodes):
                states[n] = s[row]
            return self.logits(out)
        return expand

    def _eagle_nodes(self, nodes, parents, prev, e, cache, committed, depth, entry, parent_of):
        """One EAGLE-1 step for tree nodes: each attends to the context and its own ancestors."""
        past = cache.get_seq_length()
        n = len(nodes)
        mask = torch.zeros(1, 1, n, past + n, device=e.device)
        mask[..., committed:] = torch.finfo(mask.dtype).min
        for row, (node, parent) in enumerate(zip(nodes, parents)):
            entry[node] = past + row
            mask[0, 0, row, past + row] = 0
            a = parent
            while a in entry:  # ancestors with entries (the root has none: it is committed)
                mask[0, 0, row, entry[a]] = 0
                a = parent_of.get(a, -1)
            parent_of[node] = parent
        pos = torch.full((1, n), committed + depth - 1, device=e.device)
        return self.feature(prev[None], e[None], cache=cache, position_ids=pos, attention_mask=mask)[0]



    def _block(self, z, cache, position_ids, attention_mask):
        kwargs = {} if cache is None else {cache_kwarg(type(self.block)): cache, "use_cache": True}
        return self.block(inputs_embeds=z, position_ids=position_ids, attention_mask=attention_mask,
                          **kwargs).last_hidden_state

    def regression_targets(self, h: torch.Tensor) -> torch.Tensor:
        """What head outputs are regressed to: the normed state (Clover) or the raw feature (EAGLE-1)."""
        return h if self.config.arch == "eagle1" else self.target_norm(h)


def _final_norm_like(text_config) -> nn.Module:
    """A fresh final norm of the target's own class (RMSNorm variants differ across families)."""
    stack = _decoder_stack(text_config, 0, final_norm=True)
    return stack.norm


def _decoder_stack(text_config, n_layers: int, *, final_norm: bool) -> nn.Module:
    """`n_layers` decoder layers of the target's own class, as its base model without embeddings."""
    cfg = copy.deepcopy(text_config)
    cfg.num_hidden_layers = n_layers
    if getattr(cfg, "layer_types", None):
        cfg.layer_types = ["full_attention"] * n_layers
    cfg.use_cache = True
    stack = AutoModel.from_config(cfg, attn_implementation="sdpa")
    stack.embed_tokens = None  # inputs arrive as vectors
    if not final_norm:
        stack.norm = nn.Identity()
    return stack
