"""Verification: one target forward over a draft tree, and acceptance of a path.

Notation follows the speculative-decoding papers (Leviathan et al. 2023): p is the target,
q the draft. At temperature 0 the target's choice after node i is argmax p(. | path to i); a
draft node is accepted when its token equals the target's choice after its parent and its
parent is accepted. The step commits the deepest accepted node's path plus one *bonus* token,
the target's own choice after that node, so every step yields at least one token (tau >= 1).
At temperature > 0, `clover2.decoding.sampling.accept_tree` walks the tree by recursive rejection sampling.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from clover2.decoding.sampling import SamplingConfig, accept_tree, warp
from clover2.decoding.target import Target, TargetOutput
from clover2.decoding.tree import Draft


@dataclass(frozen=True)
class Accepted:
    path: torch.Tensor  # (k + 1,) node indices root..deepest accepted node
    tokens: list[int]  # the k accepted draft tokens followed by the bonus token


def verify(target: Target, cache, root: int, draft: Draft, *, hidden: bool = False,
           layers: tuple[int, ...] = ()) -> TargetOutput:
    """Run the target once over [root] + draft tokens, each attending to the prefix and its ancestors
    (with `hidden`, returning the states a draft reads: `layers`, see `Target.forward`)."""
    ids = torch.cat([torch.tensor([root]), draft.tokens])  # (N,)
    return cache.run(target, ids, cache.get_seq_length() + draft.tree.depth, draft.tree.ancestors, hidden=hidden,
                     layers=layers)


def accept_greedy(draft: Draft, logits: torch.Tensor) -> Accepted:
    """The longest draft path that matches the target's argmax, plus the bonus token.

    `logits`: `(N, V)`, row i = the target's logits after node i.
    """
    tree = draft.tree
    choice = logits.argmax(-1).cpu()  # (N,) target's greedy token after each node
    match = torch.ones(tree.size, dtype=torch.bool)
    match[1:] = draft.tokens == choice[list(tree.parents[1:])]
    ok = ~(tree.ancestors & ~match).any(1)  # node and all its ancestors match
    best = int(torch.where(ok, tree.depth, -1).argmax())
    path = tree.ancestors[best].nonzero().flatten()
    tokens = draft.tokens[path[1:] - 1].tolist() + [int(choice[best])]
    return Accepted(path=path, tokens=tokens)


def accept(draft: Draft, logits: torch.Tensor, sampling: SamplingConfig, generator: torch.Generator) -> Accepted:
    """Greedy acceptance at temperature 0, recursive rejection sampling otherwise. `logits`: `(N, V)`."""
    if sampling.greedy:
        return accept_greedy(draft, logits)
    p = warp(logits, sampling).cpu()  # (N, V) the target's sampling distribution after each node
    q = draft.q if draft.q is not None else F.one_hot(draft.tokens, p.shape[-1]).float()
    path, last = accept_tree(draft.tree.children, draft.tokens, q.cpu(), p, generator)
    nodes = torch.tensor(path)
    return Accepted(path=nodes, tokens=draft.tokens[nodes[1:] - 1].tolist() + [last])


def accepted_nodes(draft: Draft, continuation: list[int]) -> list[bool]:
    """Per draft node (1..N-1): whether its path equals the start of the target's greedy continuation,
    which is exactly when greedy verification accepts it."""
    out = []
    for i in range(1, draft.tree.size):
        path = draft.tree.ancestors[i].nonzero().flatten().tolist()  # root .. i (topological order)
        tokens = [int(draft.tokens[j - 1]) for j in path[1:]]
        out.append(tokens == continuation[:len(tokens)])
    return out
