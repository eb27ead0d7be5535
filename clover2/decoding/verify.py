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
from clover2.decoding.transfer import to_device
from clover2.decoding.tree import Draft


@dataclass(frozen=True)
class Accepted:
    path: list[int]  # node indices root..deepest accepted node
    tokens: list[int]  # the k accepted draft tokens followed by the bonus token


def verify(target: Target, cache, root: int, draft: Draft, *, hidden: bool = False,
           layers: tuple[int, ...] = ()) -> TargetOutput:
    """Run the target once over [root] + draft tokens, each attending to the prefix and its ancestors
    (with `hidden`, returning the states a draft reads: `layers`, see `Target.forward`)."""
    tree = draft.tree.on(target.device)
    ids = torch.cat([to_device([root], draft.tokens.device), draft.tokens])  # (N,)
    return cache.run(target, ids, cache.get_seq_length() + tree.depth, tree.ancestors, hidden=hidden, layers=layers)


def accept_greedy(draft: Draft, logits: torch.Tensor) -> Accepted:
    """The longest draft path that matches the target's argmax, plus the bonus token.

    `logits`: `(N, V)`, row i = the target's logits after node i. Computed where the logits are; the
    host reads the result once (on a GPU, the step's one wait for the target).
    """
    tree = draft.tree.on(logits.device)
    tokens = torch.cat([tree.parents[:1], to_device(draft.tokens, logits.device)])  # (N,), the root's a placeholder
    choice = logits.argmax(-1)  # (N,) the target's greedy token after each node
    match = tokens == choice[tree.parents]
    match[0] = True
    ok = ~(tree.ancestors & ~match).any(1)  # node and all its ancestors match
    best = torch.where(ok, tree.depth, -1).argmax()
    path = tree.paths[best]  # root..best, padded with best
    read = torch.cat([tree.depth[best, None], path, tokens[path], choice[best, None]]).tolist()
    depth, width = read[0], len(path)
    path_ids, path_tokens = read[1:2 + depth], read[1 + width:2 + width + depth]
    return Accepted(path=path_ids, tokens=path_tokens[1:] + [read[-1]])


def accept(draft: Draft, logits: torch.Tensor, sampling: SamplingConfig, generator: torch.Generator) -> Accepted:
    """Greedy acceptance at temperature 0, recursive rejection sampling otherwise. `logits`: `(N, V)`."""
    if sampling.greedy:
        return accept_greedy(draft, logits)
    p = warp(logits, sampling).cpu()  # (N, V) the target's sampling distribution after each node
    tokens = draft.tokens.cpu()
    q = draft.q if draft.q is not None else F.one_hot(tokens, p.shape[-1]).float()
    path, last = accept_tree(draft.tree.children, tokens, q.cpu(), p, generator)
    return Accepted(path=path, tokens=[int(tokens[i - 1]) for i in path[1:]] + [last])


def accepted_nodes(draft: Draft, continuation: list[int]) -> list[bool]:
    """Per draft node (1..N-1): whether its path equals the start of the target's greedy continuation,
    which is exactly when greedy verification accepts it."""
    out = []
    for i in range(1, draft.tree.size):
        path = draft.tree.ancestors[i].nonzero().flatten().tolist()  # root .. i (topological order)
        tokens = [int(draft.tokens[j - 1]) for j in path[1:]]
        out.append(tokens == continuation[:len(tokens)])
    return out
