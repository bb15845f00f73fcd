"""Static draft trees on the device: a plan built once on the host, then fixed-shape levels.

A static tree (:data:`specvlm.spec.tree.STATIC_TREES`) is a list of rank paths: path (r_1, ..., r_d) is
the r_d-th child of path (r_1, ..., r_{d-1}). Its shape never changes, so :func:`static_plan` turns it,
once per tree, into index tensors in the reference drafter's node order (level by level, parents in node
order, children in rank order; the tests' host ``Drafter.static``). Each step then needs only
:func:`static_children` per level (greedy, the host's ``topk`` with each parent's own child count), or
the whole tree in :func:`static_tree`; sampled static trees are in :mod:`specvlm.spec.devicesampled`.
No host reads, traceable by ``torch.compile(fullgraph=True)``.

Source: Medusa (Cai et al. 2024) / EAGLE (Li et al. 2024) static trees; docs/design.md §4.8.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from specvlm.spec.devicetree import DeviceFeed, DeviceTree, DeviceTreeError
from specvlm.spec.tree import child_counts


@dataclass(frozen=True)
class StaticLevel:
    """One level of a static tree: which fed rows its children come from.

    Attributes:
        fed: int64 (F,) nodes whose draft rows give this level's children, in feed order (-1 = the root).
        slot: int64 (C,) each child's parent as a row of ``fed``.
        rank: int64 (C,) each child's rank among its siblings (0 = the draft's top-1).
        count: int64 (C,) the child count of each child's parent.
        counts: the distinct values of ``count``, ascending.
        start: the level's first node index (its children are nodes start .. start + C - 1).
    """

    fed: torch.Tensor
    slot: torch.Tensor
    rank: torch.Tensor
    count: torch.Tensor
    counts: tuple[int, ...]
    start: int


@dataclass(frozen=True)
class StaticPlan:
    """A static tree's fixed structure on the device.

    Attributes:
        parents: int64 (N,) parents-first (-1 = child of the root), the host drafter's node order.
        levels: one :class:`StaticLevel` per depth, root level first.
    """

    parents: torch.Tensor
    levels: tuple[StaticLevel, ...]


def static_plan(spec: list[tuple[int, ...]], device: torch.device | str = "cpu") -> StaticPlan:
    """The plan of a static tree spec (host work, once per tree; not for the decode loop).

    Args:
        spec: rank paths (:func:`specvlm.spec.tree.static_paths`).
        device: where the plan's tensors live.

    Returns:
        StaticPlan whose node order equals the host drafter's.

    Raises:
        ValueError: a path's prefix is missing or a node's child ranks have gaps.
    """
    kids = child_counts(spec)
    node_of: dict[tuple[int, ...], int] = {}
    parents: list[int] = []
    levels = []
    todo: list[tuple[int, ...]] = [()]
    while todo:
        fed, cols = [node_of.get(p, -1) for p in todo], ([], [], [])
        start = len(parents)
        for s, par in enumerate(todo):
            for r in range(kids[par]):
                node_of[par + (r,)] = len(parents)
                parents.append(node_of.get(par, -1))
                for col, v in zip(cols, (s, r, kids[par])):
                    col.append(v)
        t = [torch.tensor(c, dtype=torch.long, device=device) for c in (fed, *cols)]
        levels.append(StaticLevel(*t, tuple(sorted(set(cols[2]))), start))
        todo = [p for p in node_of if len(p) == len(todo[0]) + 1 and p in kids]
    return StaticPlan(torch.tensor(parents, dtype=torch.long, device=device), tuple(levels))


def static_children(logp: torch.Tensor, level: StaticLevel) -> tuple[torch.Tensor, torch.Tensor]:
    """A level's greedy children: child (slot, rank) = rank-th of ``logp[slot].topk(count)``.

    Each parent's own child count is the ``topk`` width, as in the host drafter (``topk`` may order ties
    differently for different widths).

    Args:
        logp: float32 (F, V) draft log-probs after each node of ``level.fed``.
        level: the plan's level.

    Returns:
        (tokens int64 (C,), log-probs float32 (C,)).

    Raises:
        DeviceTreeError: V is smaller than a parent's child count.

    Source: Medusa (Cai et al. 2024) / EAGLE (Li et al. 2024) static trees.
    """
    if logp.shape[-1] < level.counts[-1]:
        raise DeviceTreeError(f"logp has {logp.shape[-1]} tokens but the static tree needs {level.counts[-1]} "
                              "children of one node: use a smaller tree.")
    tok = torch.zeros_like(level.slot)
    lp = logp.new_zeros(level.slot.shape[0])
    for k in level.counts:
        vals, idx = logp.topk(k, dim=-1)
        rank = level.rank.clamp(max=k - 1)
        here = level.count == k
        tok = torch.where(here, idx[level.slot, rank], tok)
        lp = torch.where(here, vals[level.slot, rank], lp)
    return tok, lp


def static_tree(root_logp: torch.Tensor, feed: DeviceFeed, plan: StaticPlan) -> DeviceTree:
    """The greedy static tree of the host reference drafter (``Drafter.static``), on the device.

    Args:
        root_logp: float32 (V,) draft log-probs after the root.
        feed: the draft on a level's fed nodes (:data:`specvlm.spec.devicetree.DeviceFeed`).
        plan: :func:`static_plan` of the tree.

    Returns:
        DeviceTree in the host's node order, all nodes valid; scores summed in float32 (the host sums
        in float64, so they may differ in the last bit).

    Source: Medusa (Cai et al. 2024) / EAGLE (Li et al. 2024) static trees.
    """
    tokens, scores, rows = [], [], root_logp.float()[None]
    node_scores = root_logp.new_zeros(1).float()
    for i, level in enumerate(plan.levels):
        if i:
            rows = feed(torch.cat(tokens), plan.parents[:level.start], level.fed).float()
            node_scores = torch.cat([root_logp.new_zeros(1).float(), torch.cat(scores)])
        tok, lp = static_children(rows, level)
        tokens.append(tok)
        scores.append(node_scores[level.fed[level.slot] + 1] + lp)
    n = plan.parents.shape[0]
    return DeviceTree(torch.cat(tokens), plan.parents, torch.cat(scores),
                      torch.ones(n, dtype=torch.bool, device=plan.parents.device))
