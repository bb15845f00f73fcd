"""Reference draft trees on the host: the tree type, ancestor and feed masks, root-to-leaf paths.

The decode loop builds trees on the device (:mod:`specvlm.spec.devicetree`); these host versions are the
references the device functions are checked against on many seeds.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from specvlm.bench.stepcost import ancestor_mask  # noqa: F401  (the masks' one home)

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
