"""Sampling at temperature > 0: the target's warped distribution, and lossless tree acceptance.

Notation as in Leviathan et al. (2023) and Chen et al. (2023): p is the target's distribution, q the
draft's. Every draft node c carries the distribution q_c its token was drawn from *given the siblings
drawn before it*: for children sampled without replacement, q with the earlier siblings removed and
renormalized; for deterministic proposals (prompt lookup, top-k), a one-hot on the token.

**Recursive rejection sampling over the tree** (SpecInfer's multi-candidate scheme, generalized to
any such sequence of proposals). At a node whose target distribution is p, keep a residual r = p.
Try the children in order: accept child c with probability min(1, r(x_c) / q_c(x_c)); on rejection
set r <- norm(max(0, r - q_c)). If a child is accepted, continue from it with its own p; if all are
rejected, draw the correction token from r. By induction over the children, the token emitted at
each position is distributed exactly as p: given that child c is reached, it is accepted as x with
probability q_c(x) min(1, r(x)/q_c(x)) = min(q_c(x), r(x)), and otherwise the output follows
norm(r - min(r, q_c)); the two add up to r(x). The bonus token after the deepest accepted node is
drawn from that node's p.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from clover2.errors import Clover2Error


@dataclass(frozen=True)
class SamplingConfig:
    temperature: float = 0.0  # 0: greedy (argmax); > 0: sample from softmax(logits / temperature)
    top_k: int = 0  # keep the k most likely tokens (0: all)
    top_p: float = 1.0  # keep the smallest set of most likely tokens with this much mass (1: all)
    seed: int = 0  # seeds the torch.Generator every sampling decision draws from

    def __post_init__(self):
        if self.temperature < 0 or self.top_k < 0 or not 0 < self.top_p <= 1:
            raise Clover2Error(f"need temperature >= 0, top_k >= 0, 0 < top_p <= 1: {self}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


def warp(logits: torch.Tensor, config: SamplingConfig) -> torch.Tensor:
    """The target's sampling distribution p from its logits: temperature, then top-k, then top-p.

    The same function serves plain sampling and verification, so both sample the same p.
    `(..., V) -> (..., V)` probabilities (float32).
    """
    logits = logits.float() / config.temperature
    if config.top_k and config.top_k < logits.shape[-1]:
        kth = logits.topk(config.top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    if config.top_p < 1:
        sorted_p, order = probs.sort(dim=-1, descending=True)
        before = sorted_p.cumsum(-1) - sorted_p  # mass strictly before each token
        drop = torch.zeros_like(probs).scatter(-1, order, (before >= config.top_p).float()).bool()
        probs = probs.masked_fill(drop, 0)
        probs = probs / probs.sum(-1, keepdim=True)
    return probs


def sample(probs: torch.Tensor, generator: torch.Generator) -> int:
    return int(torch.multinomial(probs, 1, generator=generator))


def accept_tree(children: Sequence[Sequence[int]], tokens: torch.Tensor, q: torch.Tensor, p: torch.Tensor,
                generator: torch.Generator) -> tuple[list[int], int]:
    """Recursive rejection sampling down a token tree.

    `children`: each node's children in the order they were drawn (`Tree.children`);
    `tokens`: `(N-1,)` draft tokens of nodes 1..N-1; `q`: `(N-1, V)` the distribution node i's token
    was drawn from (given its earlier siblings); `p`: `(N, V)` the target's warped distribution after
    each node. Returns the accepted path (node indices, root first) and the final token, drawn from
    the residual of the last node tried (a correction) or from the deepest node's p (a bonus).
    """
    node, path = 0, [0]
    while True:
        r, accepted = p[node], None
        for c in children[node]:
            x, qc = int(tokens[c - 1]), q[c - 1]
            if float(qc[x]) <= 0:
                raise ValueError(f"draft node {c} has token {x}, which its reported q gives probability 0")
            if float(torch.rand((), generator=generator)) * float(qc[x]) < float(r[x]):
                accepted = c  # accepted with probability min(1, r(x) / q_c(x))
                break
            residual = torch.clamp(r - qc, min=0)
            total = float(residual.sum())
            if total > 0:  # total == 0 only if q_c == r, where a rejection has probability 0
                r = residual / total
        if accepted is None:
            return path, sample(r, generator)  # correction (all rejected) or bonus (a leaf)
        node = accepted
        path.append(node)


def draw_without_replacement(q: torch.Tensor, k: int,
                             generator: torch.Generator) -> tuple[list[int], list[torch.Tensor]]:
    """Up to k distinct tokens drawn one by one from q, each from q with the earlier ones removed.

    Returns the tokens and, for each, the distribution it was drawn from (what `accept_tree` needs).
    Fewer than k come back when q has fewer than k tokens with mass.
    """
    remaining, tokens, dists = q.clone(), [], []
    for _ in range(k):
        total = float(remaining.sum())
        if total <= 0:
            break
        dist = remaining / total
        x = sample(dist, generator)
        tokens.append(x)
        dists.append(dist)
        remaining[x] = 0
    return tokens, dists
