"""Draft trees on the device: fixed shapes, no host reads, traceable by ``torch.compile(fullgraph=True)``.

The same trees as the host drafters (the tests' reference ``GreedyDrafter``), built from tensors
only, so a decode engine can run a whole draft step (every level, top-k, rerank, masks) without waiting
for the device and can capture it in a CUDA graph:

* dynamic (EAGLE-2) trees: :func:`dynamic_level` per level, :func:`rerank` + :func:`reindex_parents`
  at the end, or all of it in :func:`dynamic_tree` around a device-side draft call;
* static trees: :func:`static_plan` (host, once per tree spec) + :func:`static_children` per level,
  or :func:`static_tree`;
* chains: :func:`chain_level`, or :func:`chain_tree`;
* masks and positions for verification: :func:`ancestor_matrix`, :func:`verify_bias`, :func:`node_depths`.

Fixed shapes mean a tree always has the same node count for a given configuration. Where the host
drafter would draft fewer nodes (the ``min_prob`` early stop, a static child that does not exist), the
device tree keeps the slot and marks the node invalid (:attr:`DeviceTree.valid`); in greedy trees invalid
nodes come after every valid one, and the valid nodes are exactly the host's tree.
Pass ``torch.where(valid, tokens, -1)`` to the acceptance functions of :mod:`specvlm.spec.deviceaccept`
so an invalid node is never accepted.

Conventions: int64 node indices, float32 scores (cumulative draft log-probabilities), parents-first node
order (``parents[i] < i``, -1 = child of the root), all tensors on one device. Ties in ``topk`` are broken
by the same ``topk`` call the host drafter makes, so the trees match on the same device.

Source: EAGLE-2 (Li et al. 2024) Sec. 4 (dynamic trees, rerank); SpecInfer (Miao et al. 2024) tree
attention; Medusa/EAGLE static trees; docs/design.md §4.8-4.9.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch

DeviceFeed = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
"""feed(tokens (M,), parents (M,), front (F,)) -> float32 (F, V) draft log-probs after each node in
``front`` (node indices into the M nodes drafted so far, parents-first). Device tensors only."""

NextFeed = Callable[[torch.Tensor, int], torch.Tensor]
"""feed_next(token () int64, depth) -> float32 (V,) draft log-probs after a chain node at ``depth``."""


class DeviceTreeError(ValueError):
    """A device tree's input is malformed; the message names the input and what to pass instead."""


@dataclass(frozen=True)
class DeviceTree:
    """A drafted tree on the device.

    Attributes:
        tokens: int64 (N,) drafted token ids (an invalid node holds some in-vocabulary id).
        parents: int64 (N,) parent index, -1 for children of the root; parents[i] < i.
        scores: float32 (N,) cumulative draft log-probability along the path.
        valid: bool (N,) False for slots the host drafter would not have drafted; a valid node's
            parent is valid, and greedy trees put every valid node before every invalid one.
    """

    tokens: torch.Tensor
    parents: torch.Tensor
    scores: torch.Tensor
    valid: torch.Tensor


# --------------------------------------------------------------------------- dynamic trees
def dynamic_level(front_scores: torch.Tensor, logp: torch.Tensor, top_k: int
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One EAGLE-2 expansion: every frontier node's top-k children, best cumulative score first.

    The first level is ``dynamic_level(zeros(1), root_logp[None], top_k)`` (the root's top-k children
    in ``topk`` order); the first ``top_k`` candidates of a level are the next frontier.

    Args:
        front_scores: float32 (F,) cumulative scores of the frontier nodes.
        logp: float32 (F, V) draft log-probs after each frontier node.
        top_k: children per frontier node; k = min(top_k, V).

    Returns:
        (tokens int64 (F*k,), parent_slot int64 (F*k,) index into the frontier, scores float32 (F*k,)),
        ordered by score descending, ties by lower flat index (frontier slot, then ``topk`` rank).

    Source: EAGLE-2 (Li et al. 2024) Sec. 4.1 (expansion by cumulative confidence).
    """
    k = min(top_k, logp.shape[-1])
    child_lp, child_tok = logp.topk(k, dim=-1)
    cand = (front_scores[:, None] + child_lp).flatten()
    order = torch.argsort(cand, descending=True, stable=True)
    return child_tok.flatten()[order], torch.div(order, k, rounding_mode="floor"), cand[order]


def level_alive(alive: torch.Tensor, front_scores: torch.Tensor, min_prob: float) -> torch.Tensor:
    """Whether the next level is drafted: the previous one was and the best frontier score >= log(min_prob).

    Args:
        alive: bool () whether the frontier's level was drafted.
        front_scores: float32 (F,) frontier scores.
        min_prob: ``TreeConfig.min_prob`` (0 = always).

    Returns:
        bool ().

    Source: Mamou et al. 2024 (arXiv 2405.04304), the confidence stop of ``TreeConfig.min_prob``.
    """
    min_logp = math.log(min_prob) if min_prob > 0 else -math.inf
    return alive & (front_scores.max() >= min_logp)


def rerank(scores: torch.Tensor, valid: torch.Tensor, total: int) -> torch.Tensor:
    """The best n = min(total, M) nodes by (valid first, -score, index), in ascending index order.

    With nodes created parents-first and scores non-increasing along every path (cumulative
    log-probs), a parent always ranks before its child, so the kept set is closed under ancestors
    (the host's ancestor completion adds nothing) and ascending index order is parents-first and equals
    the host tree's order. When fewer than n nodes are valid, the best invalid ones fill the rest; with
    ``valid`` closed under ancestors and invalid nodes created last, they come after every valid one.

    Args:
        scores: float32 (M,) cumulative scores.
        valid: bool (M,) which nodes were drafted.
        total: ``TreeConfig.total_tokens``.

    Returns:
        int64 (n,) kept node indices, ascending.

    Source: EAGLE-2 (Li et al. 2024) Sec. 4.2 (reranking).
    """
    return best_first(scores, valid)[:min(total, scores.shape[0])].sort().values


def best_first(scores: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Indices ordered by (valid first, score descending, index ascending).

    Args:
        scores: float32 (M,).
        valid: bool (M,).

    Returns:
        int64 (M,) a permutation.
    """
    by_score = torch.argsort(scores, descending=True, stable=True)
    return by_score[torch.argsort((~valid[by_score]).to(torch.int8), stable=True)]


def reindex_parents(parents: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """Parents of the kept nodes as positions within ``keep``.

    Args:
        parents: int64 (M,) parents of all nodes (-1 = child of the root).
        keep: int64 (n,) kept node indices, closed under ancestors.

    Returns:
        int64 (n,): -1 for children of the root, else the parent's position in ``keep``.
    """
    pos = torch.full_like(parents, -1).scatter(0, keep, torch.arange(keep.shape[0], device=keep.device))
    kept_par = parents[keep]
    return torch.where(kept_par >= 0, pos[kept_par.clamp(min=0)], -1)


def dynamic_tree(root_logp: torch.Tensor, feed: DeviceFeed, depth: int, top_k: int, total_tokens: int,
                 min_prob: float = 0.0) -> DeviceTree:
    """The EAGLE-2 dynamic tree of :meth:`GreedyDrafter.dynamic`, on the device.

    Level 1 = the root's k = min(top_k, V) children; each further level appends all k children of
    each frontier node (the first min(top_k, size) nodes of the previous level) in score order, so
    with V >= top_k there are M = k + (depth - 1) * k * k nodes before the rerank keeps
    min(total_tokens, M).

    Args:
        root_logp: float32 (V,) draft log-probs after the root.
        feed: the draft on frontier nodes (:data:`DeviceFeed`), called depth - 1 times; it returns
            log-probs (<= 0), so scores fall along every path and :func:`rerank` keeps a tree.
        depth, top_k, total_tokens, min_prob: as :class:`specvlm.config.TreeConfig`.

    Returns:
        DeviceTree with min(total_tokens, M) nodes; ``valid`` False for levels past the early stop.

    Source: EAGLE-2 (Li et al. 2024) Sec. 4.1-4.2.
    """
    tok, _, sc = dynamic_level(root_logp.new_zeros(1), root_logp[None], top_k)
    alive = torch.ones((), dtype=torch.bool, device=tok.device)
    tokens, parents, scores, valid = [tok], [torch.full_like(tok, -1)], [sc], [alive.expand(tok.shape[0])]
    start = 0                                    # first node of the previous level
    for _ in range(2, depth + 1):
        width = min(top_k, tok.shape[0])         # the frontier: the previous level's best nodes
        front = torch.arange(start, start + width, device=tok.device)
        alive = level_alive(alive, sc[:width], min_prob)
        logp = feed(torch.cat(tokens), torch.cat(parents), front)
        start += tok.shape[0]
        tok, slot, sc = dynamic_level(sc[:width], logp.float(), top_k)
        tokens, parents, scores = tokens + [tok], parents + [front[slot]], scores + [sc]
        valid.append(alive.expand(tok.shape[0]))
    valid = torch.cat(valid)
    all_par, all_sc = torch.cat(parents), torch.cat(scores)
    keep = rerank(all_sc, valid, total_tokens)
    return DeviceTree(torch.cat(tokens)[keep], reindex_parents(all_par, keep), all_sc[keep], valid[keep])


# --------------------------------------------------------------------------- chains
def chain_level(score: torch.Tensor, logp: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The next chain node: the draft's argmax (first index on ties, like the host chain's ``max``).

    Args:
        score: float32 () the parent's cumulative score (0 for the root).
        logp: float32 (V,) draft log-probs after the parent.

    Returns:
        (token int64 (), score float32 ()).

    Source: EAGLE-2 (Li et al. 2024) Sec. 4 with one child per node.
    """
    lp, tok = logp.max(-1)
    return tok, score + lp


def chain_tree(root_logp: torch.Tensor, feed_next: NextFeed, depth: int, min_prob: float = 0.0) -> DeviceTree:
    """The greedy chain of :meth:`GreedyDrafter.chain` (``feed_next`` path), ``depth`` nodes.

    Node d + 1 is valid iff node d is and its cumulative score >= log(min_prob). Scores are summed in
    float32 (the host sums in float64), so a score within rounding of log(min_prob) may stop differently.
    The host chain without ``feed_next`` is the dynamic tree with ``top_k`` 1, whose ``topk(1)`` may break
    ties unlike ``max``: mirror it with :func:`dynamic_tree` (top_k=1, total_tokens=depth).

    Args:
        root_logp: float32 (V,) draft log-probs after the root.
        feed_next: :data:`NextFeed`, called depth - 1 times.
        depth, min_prob: as :class:`specvlm.config.TreeConfig`.

    Returns:
        DeviceTree, a chain of ``depth`` nodes.

    Source: EAGLE-2 (Li et al. 2024) Sec. 4; Mamou et al. 2024 (early stop).
    """
    min_logp = math.log(min_prob) if min_prob > 0 else -math.inf
    tok, sc = chain_level(root_logp.new_zeros(()), root_logp.float())
    alive = torch.ones((), dtype=torch.bool, device=tok.device)
    toks, scores, valid = [tok], [sc], [alive]
    for d in range(1, depth):
        alive = alive & (sc >= min_logp)
        tok, sc = chain_level(sc, feed_next(tok, d).float())
        toks, scores, valid = toks + [tok], scores + [sc], valid + [alive]
    parents = torch.arange(-1, depth - 1, device=tok.device)
    return DeviceTree(torch.stack(toks), parents, torch.stack(scores), torch.stack(valid))


# --------------------------------------------------------------------------- masks and positions
def ancestor_matrix(parents: torch.Tensor) -> torch.Tensor:
    """Which nodes each node may attend to: itself and its ancestors.

    Transitive closure of "is the parent of" by repeated squaring (ceil(log2 n) float matmuls of 0/1
    matrices, exact for any n since only ``> 0`` is read).

    Args:
        parents: int64 (n,) parents-first (-1 = child of the root).

    Returns:
        bool (n, n): [i, j] True iff j == i or j is an ancestor of i (:func:`specvlm.bench.stepcost.ancestor_mask` on the host).

    Source: SpecInfer (Miao et al. 2024) tree attention; EAGLE-2 (Li et al. 2024) Sec. 4.
    """
    n = parents.shape[0]
    idx = torch.arange(n, device=parents.device)
    reach = ((idx[None, :] == idx[:, None]) | (idx[None, :] == parents[:, None])).float()
    for _ in range(max(n - 1, 1).bit_length()):
        reach = ((reach @ reach) > 0).float()
    return reach > 0


def node_depths(parents: torch.Tensor) -> torch.Tensor:
    """Depth of each node (1 = child of the root); a node's position is the root's position + depth.

    Args:
        parents: int64 (n,) parents-first.

    Returns:
        int64 (n,).
    """
    return ancestor_matrix(parents).sum(-1)


def verify_bias(parents: torch.Tensor, dtype: torch.dtype, anc: torch.Tensor | None = None) -> torch.Tensor:
    """Additive attention bias among [root] + n tree nodes (the cached prefix is handled separately).

    Args:
        parents: int64 (n,) parents-first.
        dtype: the model's float dtype.
        anc: bool (n, n) :func:`ancestor_matrix` of ``parents`` when already computed, else None.

    Returns:
        dtype (n+1, n+1): 0 where allowed, ``finfo(dtype).min`` elsewhere; the root sees itself, a node
        sees the root, its ancestors and itself: the last n+1 columns of
        :func:`specvlm.bench.stepcost.verify_mask` (its host form).

    Source: SpecInfer (Miao et al. 2024) tree attention; docs/design.md §4.9.
    """
    n = parents.shape[0]
    dev = parents.device
    top = (torch.arange(n + 1, device=dev) == 0)[None, :]
    anc = ancestor_matrix(parents) if anc is None else anc
    body = torch.cat([torch.ones(n, 1, dtype=torch.bool, device=dev), anc], dim=1)
    allowed = torch.cat([top, body], dim=0)
    return torch.zeros(n + 1, n + 1, dtype=dtype, device=dev).masked_fill(~allowed, torch.finfo(dtype).min)


@dataclass(frozen=True)
class Topology:
    """A tree's structure as a verify step uses it (root + n nodes).

    Attributes:
        anc: bool (n, n) :func:`ancestor_matrix`.
        depths: int64 (n+1,) 0 for the root, then each node's depth (positions = root's + depth).
        bias: float (1, 1, n+1, n+1) :func:`verify_bias` in the model's dtype.
    """

    anc: torch.Tensor
    depths: torch.Tensor
    bias: torch.Tensor


def tree_topology(parents: torch.Tensor, dtype: torch.dtype) -> Topology:
    """The :class:`Topology` of a tree from its parents (one :func:`ancestor_matrix` for all three parts).

    A fixed tree (a chain, a greedy static tree) computes it once per request; a dynamic tree once per step.

    Args:
        parents: int64 (n,) parents-first (-1 = child of the root).
        dtype: the model's float dtype (of the bias).

    Source: SpecInfer (Miao et al. 2024) tree attention; docs/design.md §4.9.
    """
    anc = ancestor_matrix(parents)
    depths = torch.cat([parents.new_zeros(1), anc.sum(-1)])
    return Topology(anc, depths, verify_bias(parents, dtype, anc)[None, None])
