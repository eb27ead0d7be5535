"""Token trees: the shape a draft proposes and the target verifies in one forward.

Node 0 is the *root*: the last committed token, whose successor the target has not computed
yet. Nodes 1..n are draft tokens. Parents precede children, so node order is a topological
order and a root-to-node path is increasing in index. Everything the verifier needs (depths for
the position ids, the ancestor matrix for the attention mask) is built once, when the tree is.

Static presets are given the way EAGLE and Medusa give them: as *rank paths*, where
``(0, 1)`` means "the second-ranked child of the top-ranked child of the root".
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from clover2.decoding.transfer import to_device
from clover2.errors import Clover2Error


@dataclass(frozen=True, eq=False)
class Tree:
    """Topology of a token tree; `parents[0] == -1` (the root), `parents[i] < i` otherwise."""

    parents: tuple[int, ...]
    ranks: tuple[int, ...] | None = None  # sibling rank of each node (rank-path trees only)
    depth: torch.Tensor = field(init=False, repr=False)  # (N,) int64, root = 0
    ancestors: torch.Tensor = field(init=False, repr=False)  # (N, N) bool, [i, j] = j on root..i path
    depths: tuple[int, ...] = field(init=False, repr=False)  # `depth` as Python ints (no tensor read)
    _paths: np.ndarray = field(init=False, repr=False)  # `TreeTensors.paths`, on the host
    _on: dict = field(init=False, repr=False, default_factory=dict)  # device -> its `TreeTensors` there

    def __post_init__(self):
        parents = self.parents
        if not parents or parents[0] != -1 or any(not 0 <= p < i for i, p in enumerate(parents) if i):
            raise Clover2Error(f"not a tree in topological order: parents={parents}")
        n = len(parents)
        depth = np.zeros(n, dtype=np.int64)
        anc = np.eye(n, dtype=bool)
        for i in range(1, n):
            depth[i] = depth[parents[i]] + 1
            anc[i] |= anc[parents[i]]
        object.__setattr__(self, "depth", torch.from_numpy(depth))
        object.__setattr__(self, "ancestors", torch.from_numpy(anc))
        object.__setattr__(self, "depths", tuple(depth.tolist()))
        paths = np.zeros((n, depth.max() + 1), dtype=np.int64)
        for i in range(n):  # root..i, then i repeated: every row as long as the deepest path
            path = np.flatnonzero(anc[i])
            paths[i] = np.concatenate([path, np.full(paths.shape[1] - len(path), i)])
        object.__setattr__(self, "_paths", paths)

    def on(self, device: torch.device) -> TreeTensors:
        """What verification and acceptance read, on `device`; copied there once per tree (a fixed
        preset's once per run), so that a step sends no topology to the device."""
        key = str(device)
        if key not in self._on:
            self._on[key] = TreeTensors(
                depth=to_device(self.depth, device), ancestors=to_device(self.ancestors, device),
                parents=to_device((0, *self.parents[1:]), device), paths=to_device(self._paths, device))
        return self._on[key]

    @property
    def size(self) -> int:
        """Number of nodes, root included: the number of tokens one verification forward processes."""
        return len(self.parents)

    @property
    def max_depth(self) -> int:
        return max(self.depths)

    @property
    def children(self) -> list[list[int]]:
        """`children[i]`: node i's children, in node order (a static preset's rank order)."""
        kids: list[list[int]] = [[] for _ in self.parents]
        for i, p in enumerate(self.parents[1:], start=1):
            kids[p].append(i)
        return kids

    @classmethod
    def from_paths(cls, paths) -> Tree:
        """A tree from rank paths (EAGLE/Medusa `choices`); missing prefixes are an error."""
        ordered = sorted({tuple(p) for p in paths}, key=lambda p: (len(p), p))
        index = {(): 0}
        parents, ranks = [-1], [0]
        for p in ordered:
            if not p or p[:-1] not in index:
                raise Clover2Error(f"rank path {list(p)} has no parent path in the preset")
            index[p] = len(parents)
            parents.append(index[p[:-1]])
            ranks.append(p[-1])
        return cls(parents=tuple(parents), ranks=tuple(ranks))

    @classmethod
    def chain(cls, length: int) -> Tree:
        """A plain chain of `length` draft tokens (classic speculative decoding)."""
        return cls.from_paths([(0,) * d for d in range(1, length + 1)])

    def paths(self) -> list[list[int]]:
        """Root-to-leaf node paths (the retrieval indices of Medusa/EAGLE), root included."""
        is_parent = set(self.parents[1:])
        leaves = [i for i in range(self.size) if i not in is_parent]
        return [self.ancestors[leaf].nonzero().flatten().tolist() for leaf in leaves]


@dataclass(frozen=True)
class TreeTensors:
    """A tree's topology as tensors on one device (`Tree.on`)."""

    depth: torch.Tensor  # (N,) int64
    ancestors: torch.Tensor  # (N, N) bool
    parents: torch.Tensor  # (N,) int64, the root's given as 0
    paths: torch.Tensor  # (N, max_depth + 1) int64: row i = nodes root..i, then i repeated


ROOT_ONLY = Tree(parents=(-1,))

# EAGLE-1's tree (`mc_sim_7b_63` in the EAGLE v1 and Clover-2 code): 25 draft nodes, depth 5.
EAGLE_25 = Tree.from_paths([
    [0], [1], [2], [3], [0, 0], [0, 1], [0, 2], [1, 0], [1, 1], [2, 0], [2, 1], [3, 0],
    [0, 0, 0], [0, 0, 1], [0, 0, 2], [0, 1, 0], [0, 1, 1], [0, 2, 0], [0, 2, 1], [1, 0, 0],
    [0, 0, 0, 0], [0, 0, 0, 1], [0, 0, 0, 2], [0, 0, 0, 0, 0], [0, 0, 0, 0, 1],
])

# Medusa-1's tree (`mc_sim_7b_63` in the Medusa code): 63 draft nodes, depth 4.
MEDUSA_63 = Tree.from_paths([
    [0], [0, 0], [1], [0, 1], [2], [0, 0, 0], [1, 0], [0, 2], [3], [0, 3], [4], [0, 4], [2, 0],
    [0, 5], [0, 0, 1], [5], [0, 6], [6], [0, 7], [0, 1, 0], [1, 1], [7], [0, 8], [0, 0, 2], [3, 0],
    [0, 9], [8], [9], [1, 0, 0], [0, 2, 0], [1, 2], [0, 0, 3], [4, 0], [2, 1], [0, 0, 4], [0, 0, 5],
    [0, 0, 0, 0], [0, 1, 1], [0, 0, 6], [0, 3, 0], [5, 0], [1, 3], [0, 0, 7], [0, 0, 8], [0, 0, 9],
    [6, 0], [0, 4, 0], [1, 4], [7, 0], [0, 1, 2], [2, 0, 0], [3, 1], [2, 2], [8, 0], [0, 5, 0],
    [1, 5], [1, 0, 1], [0, 2, 1], [9, 0], [0, 6, 0], [0, 0, 0, 1], [1, 6], [0, 7, 0],
])

PRESETS: dict[str, Tree] = {"eagle25": EAGLE_25, "medusa63": MEDUSA_63}


def preset(name: str) -> Tree:
    """A named static tree: `eagle25`, `medusa63` or `chainK` (K draft tokens in a row)."""
    if name in PRESETS:
        return PRESETS[name]
    if name.startswith("chain") and name[5:].isdigit() and int(name[5:]) > 0:
        return Tree.chain(int(name[5:]))
    raise Clover2Error(f"unknown tree {name!r}; known: {', '.join(PRESETS)}, chainK (e.g. chain5)")


@dataclass(frozen=True)
class Draft:
    """A proposed token tree: `tokens[i - 1]` is the draft token at node i (the root is not a draft)."""

    tree: Tree
    tokens: torch.Tensor  # (N - 1,) int64
    # (N - 1, V): the distribution each node's token was drawn from, given the siblings drawn before
    # it (what lossless sampling needs); None for deterministic proposals (a one-hot on each token).
    q: torch.Tensor | None = None
    # (N - 1,): each node's cumulative draft log-probability along its path, where the drafter has
    # one (model drafts); what fitting a tree to the hardware ranks nodes by.
    scores: torch.Tensor | None = None

    def __post_init__(self):
        if self.tokens.shape != (self.tree.size - 1,):
            raise ValueError(f"{self.tree.size - 1} draft nodes but tokens of shape {tuple(self.tokens.shape)}")
        if self.q is not None and self.q.shape[0] != self.tree.size - 1:
            raise ValueError(f"{self.tree.size - 1} draft nodes but q of shape {tuple(self.q.shape)}")


NO_DRAFT = Draft(ROOT_ONLY, torch.empty(0, dtype=torch.long))


class TreeBuilder:
    """A token tree while a drafter grows it: nodes are appended under a parent already present.

    Node 0 is the root. `build(keep)` turns any ancestor-closed subset of the nodes into a `Draft`,
    renumbered in (depth, insertion) order so that parents precede children.
    """

    def __init__(self):
        self.parent, self.token, self.depth = [-1], [0], [0]
        self.score: list[float | None] = [0.0]  # cumulative draft log-probability (None: the drafter has none)
        self.q: list[torch.Tensor | None] = [None]  # distribution each token was drawn from (None: deterministic)

    def __len__(self) -> int:
        return len(self.parent)

    def add(self, parent: int, token: int, *, score: float | None = None, q: torch.Tensor | None = None) -> int:
        """Append a node under `parent`; returns its index."""
        self.parent.append(parent)
        self.token.append(token)
        self.depth.append(self.depth[parent] + 1)
        self.score.append(score)
        self.q.append(q)
        return len(self.parent) - 1

    def path(self, node: int) -> list[int]:
        """Nodes from the root's child down to `node` (the root excluded)."""
        out = []
        while node > 0:
            out.append(node)
            node = self.parent[node]
        return out[::-1]

    def order(self, keep: list[int] | None = None) -> list[int]:
        """Nodes `keep` (default: all but the root) in the order `build` numbers them: by depth, then insertion."""
        return sorted(range(1, len(self)) if keep is None else keep, key=lambda i: (self.depth[i], i))

    def build(self, keep: list[int] | None = None) -> Draft:
        """The draft of nodes `keep` (default: all); every kept node's parent must be kept too."""
        keep = self.order(keep)
        index = {0: 0} | {old: k + 1 for k, old in enumerate(keep)}
        missing = [i for i in keep if self.parent[i] not in index]
        if missing:
            raise ValueError(f"nodes {missing[:5]} are kept without their parents")
        tree = Tree(parents=(-1, *(index[self.parent[i]] for i in keep)))
        tokens = torch.tensor([self.token[i] for i in keep], dtype=torch.long)
        qs = [self.q[i] for i in keep]
        q = torch.stack(qs) if qs and qs[0] is not None else None
        scores = [self.score[i] for i in keep]
        return Draft(tree, tokens, q, None if None in scores else torch.tensor(scores))
