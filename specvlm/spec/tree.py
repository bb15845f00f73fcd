"""Draft trees: the tree type, static tree presets and ancestor / verification masks.

A tree has N drafted nodes below an implicit root (the last emitted token, not
yet in the target cache). Nodes are stored parents-first: ``parents[i] < i``
(or -1 for a child of the root), and ``depths[i]`` = 1 for children of the root.
Trees are built and accepted by the drafters of :mod:`specvlm.spec.drafting`.

Source: EAGLE-2 (Li et al. 2024, dynamic draft trees, Sec. 4); Medusa/EAGLE
static trees; SpecVLM (arXiv 2508.16201) Sec. 3.3; docs/design.md §4.8-4.9.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

# Static trees as lists of paths of child ranks (0 = the draft's top-1 child).
# "official-25": 25 nodes, depth 5 (the EAGLE-style tree shipped with the SpecVLM code).
STATIC_TREES: dict[str, list[tuple[int, ...]]] = {
    "official-25": [
        (0,), (1,), (2,), (3,),
        (0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (2, 0), (2, 1), (3, 0),
        (0, 0, 0), (0, 0, 1), (0, 0, 2), (0, 1, 0), (0, 1, 1), (1, 0, 0), (1, 0, 1), (2, 0, 0),
        (0, 0, 0, 0), (0, 0, 0, 1), (0, 0, 1, 0),
        (0, 0, 0, 0, 0), (0, 0, 0, 0, 1),
    ],
    "binary-15": [p for d in range(1, 5) for p in
                  [tuple(int(b) for b in format(i, f"0{d}b")) for i in range(2 ** d)]][:15],
}

def static_paths(name: str) -> list[tuple[int, ...]]:
    """The rank paths of a static tree preset (:data:`STATIC_TREES`).

    Raises:
        ValueError: unknown preset.
    """
    if name not in STATIC_TREES:
        raise ValueError(f"static tree {name!r} is unknown: use one of {', '.join(STATIC_TREES)}.")
    return STATIC_TREES[name]


FeedFn = Callable[[list[int], "DraftTree"], torch.Tensor]
"""feed(node_ids, tree) -> float32 (len(node_ids), vocab) draft log-probs after each node."""


@dataclass
class DraftTree:
    """A drafted token tree.

    Attributes:
        tokens: int64 (N,) drafted token ids.
        parents: int64 (N,) parent node index, -1 for children of the root; parents[i] < i.
        depths: int64 (N,) 1 for children of the root.
        scores: float32 (N,) cumulative draft log-probability along the path.
    """

    tokens: torch.Tensor
    parents: torch.Tensor
    depths: torch.Tensor
    scores: torch.Tensor

    @property
    def size(self) -> int:
        return int(self.tokens.numel())

    @staticmethod
    def chain(tokens: list[int], scores: list[float]) -> "DraftTree":
        """A chain of ``len(tokens)`` nodes (node i the child of node i - 1) with cumulative ``scores``."""
        n = len(tokens)
        return DraftTree(torch.tensor(tokens, dtype=torch.long), torch.arange(-1, n - 1),
                         torch.arange(1, n + 1), torch.tensor(scores, dtype=torch.float32))

    @staticmethod
    def empty() -> "DraftTree":
        z = torch.zeros(0, dtype=torch.long)
        return DraftTree(z, z.clone(), z.clone(), torch.zeros(0))


def ancestor_mask(parents: torch.Tensor) -> torch.Tensor:
    """Which nodes each node may attend to (its ancestors and itself).

    Args:
        parents: int64 (N,), parents-first order (parents[i] < i or -1).

    Returns:
        bool (N, N): [i, j] True iff j == i or j is an ancestor of i.
    """
    n = int(parents.numel())
    par = parents.tolist()
    if par == list(range(-1, n - 1)):   # a chain: every earlier node is an ancestor
        return torch.ones(n, n, dtype=torch.bool).tril_()
    mask = torch.eye(n, dtype=torch.bool)
    for i in range(n):
        p = par[i]
        if p >= 0:
            mask[i] |= mask[p]
    return mask


def feed_mask(parents: torch.Tensor, nodes: list[int], fed: dict[int, int]) -> torch.Tensor:
    """Which tree nodes each newly fed node may see, when earlier nodes are already in a draft cache.

    Args:
        parents: int64 (N,) tree parents (parents-first order).
        nodes: the F nodes fed now, in feed order; each node's ancestors are fed or among ``nodes``
            earlier in the list.
        fed: node -> its slot (0-based, in feed order) among the tree nodes already in the cache.

    Returns:
        bool (F, len(fed) + F): row r may see slot j iff that slot holds ``nodes[r]`` or one of its
        ancestors.

    Source: EAGLE-2 (Li et al. 2024) tree attention; docs/design.md §4.8.
    """
    par = parents.tolist()
    n_fed, n_new = len(fed), len(nodes)
    slot = dict(fed)
    slot.update({node: n_fed + r for r, node in enumerate(nodes)})
    allowed = torch.zeros(n_new, n_fed + n_new, dtype=torch.bool)
    for r, node in enumerate(nodes):
        p = node
        while p >= 0:
            allowed[r, slot[p]] = True
            p = par[p]
    return allowed


def verify_mask(parents: torch.Tensor, prefix_len: int, dtype: torch.dtype,
                device: torch.device | str = "cpu") -> torch.Tensor:
    """4-D additive mask for verifying [root] + N tree nodes after a cached prefix.

    Args:
        parents: int64 (N,) tree parents.
        prefix_len: P, tokens already in the KV cache (all visible).
        dtype: float dtype of the model (mask values 0 / dtype min).

    Returns:
        float (1, 1, N+1, P+N+1): prefix fully visible; the root sees itself; a node sees the
        root, its ancestors and itself. A bool mask is silently wrong under eager attention.
    """
    n = int(parents.numel())
    allowed = torch.zeros(n + 1, n + 1, dtype=torch.bool)
    allowed[:, 0] = True
    allowed[1:, 1:] = ancestor_mask(parents)
    return additive_mask(allowed, prefix_len, dtype, device)


def additive_mask(allowed: torch.Tensor, prefix_len: int, dtype: torch.dtype,
                  device: torch.device | str = "cpu") -> torch.Tensor:
    """bool (q, k) block after a fully visible prefix -> float (1, 1, q, prefix_len + k)."""
    q, k = allowed.shape
    mask = torch.zeros(q, prefix_len + k, dtype=dtype)
    mask[:, prefix_len:].masked_fill_(~allowed, torch.finfo(dtype).min)
    return mask.to(device)[None, None]


def paths(tree: DraftTree) -> list[list[int]]:
    """Root-to-leaf node-index paths of a tree (leaves = nodes with no children)."""
    par = tree.parents.tolist()
    has_child = set(p for p in par if p >= 0)
    out = []
    for leaf in range(len(par)):
        if leaf in has_child:
            continue
        path, cur = [], leaf
        while cur >= 0:
            path.append(cur)
            cur = par[cur]
        out.append(path[::-1])
    return out
