"""Sampled draft trees on the device: children drawn without replacement, fixed shapes, no host reads.

The device counterparts of the host reference ``SampledDrafter``'s trees (in the tests). Children of a node are
the first draws of Gumbel-top-k over its processed draft row q (the law of sequential draws without
replacement), so :func:`specvlm.spec.deviceaccept.sampled_accept` keeps the target's distribution. A
node the host drafter would not draw (q's support exhausted, the budget spent, the ``min_prob`` stop)
keeps its slot and is marked invalid; pass ``torch.where(tree.valid, tree.tokens, -1)`` to
``sampled_accept``. Randomness is caller-drawn uniform noise (a ``torch.Generator`` cannot enter a
``fullgraph`` trace): ``torch.rand(shape, generator=g, device=dev)`` with the shapes of
:func:`static_noise_shape` / :func:`dynamic_noise_shape`.

Source: Jeon et al. 2024, "Recursive Speculative Decoding" (trees drawn without replacement); Kool et
al. 2019 ("Stochastic Beams and Where to Find Them", Gumbel-top-k); EAGLE-2 (Li et al. 2024) Sec. 4
(frontier expansion); docs/design.md §4.8, §4.11.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from specvlm.config import SamplingConfig
from specvlm.spec.devicestatic import StaticLevel, StaticPlan
from specvlm.spec.devicetree import DeviceFeed, DeviceTree, DeviceTreeError, best_first, reindex_parents
from specvlm.spec.sampling import process_logits


@dataclass(frozen=True)
class SampledTree:
    """A sampled tree and the rows its children were drawn from.

    Attributes:
        tree: the tree (N nodes, valid ones first, parents-first).
        draft_probs: float32 (N+1, Vd): row 0 = the root's q, row 1+i = node i's q (zeros where node
            i has no children), the ``draft_probs`` of :func:`specvlm.spec.deviceaccept.sampled_accept`.
    """

    tree: DeviceTree
    draft_probs: torch.Tensor


def gumbel_draws(q: torch.Tensor, k: int, uniforms: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """k draws without replacement per row: the top-k of log q + Gumbel noise, in draw order.

    Args:
        q: float32 (F, V) probabilities (rows need not be normalised).
        k: draws per row (<= V).
        uniforms: float32 (F, V) in [0, 1).

    Returns:
        (tokens int64 (F, k), drawn bool (F, k)): ``drawn`` False past the row's support.

    Source: Kool et al. 2019, Gumbel-top-k (its order has the law of sequential draws without replacement).
    """
    gumbel = -torch.log(-torch.log(uniforms.clamp(min=torch.finfo(torch.float32).tiny)))
    tok = (q.float().log() + gumbel).topk(k, dim=-1).indices
    return tok, q.gather(-1, tok) > 0


def sampled_static_children(q: torch.Tensor, level: StaticLevel, uniforms: torch.Tensor
                            ) -> tuple[torch.Tensor, torch.Tensor]:
    """A static level's children drawn without replacement: child (slot, rank) = draw ``rank`` of row ``slot``.

    Args:
        q: float32 (F, V) processed draft probabilities after each node of ``level.fed``.
        level: the plan's level (:func:`specvlm.spec.devicestatic.static_plan`).
        uniforms: float32 (F, V) in [0, 1).

    Returns:
        (tokens int64 (C,), drawn bool (C,)): ``drawn`` False where q's support is smaller than the
        parent's child count (the host draws fewer children there).

    Raises:
        DeviceTreeError: V is smaller than a parent's child count.

    Source: Jeon et al. 2024; Kool et al. 2019.
    """
    if q.shape[-1] < level.counts[-1]:
        raise DeviceTreeError(f"q has {q.shape[-1]} tokens but the static tree needs {level.counts[-1]} "
                              "children of one node: use a smaller tree.")
    tok, drawn = gumbel_draws(q, level.counts[-1], uniforms)
    return tok[level.slot, level.rank], drawn[level.slot, level.rank]


def static_noise_shape(plan: StaticPlan, vocab: int) -> tuple[int, int, int]:
    """Shape of :func:`sampled_static_tree`'s noise: (levels, most fed rows in a level, draft vocab)."""
    return len(plan.levels), max(lv.fed.shape[0] for lv in plan.levels), vocab


def sampled_static_tree(root_logits: torch.Tensor, feed: DeviceFeed, cfg: SamplingConfig, plan: StaticPlan,
                        noise: torch.Tensor) -> SampledTree:
    """The sampled static tree of ``SampledDrafter.static``, on the device.

    Args:
        root_logits: float (Vd,) draft logits (or log-probs) after the root.
        feed: the draft on a level's fed nodes; returns logits, processed here with ``cfg``.
        cfg: the sampling config (:func:`specvlm.spec.sampling.process_logits`).
        plan: :func:`specvlm.spec.devicestatic.static_plan` of the tree.
        noise: float32 :func:`static_noise_shape` uniforms in [0, 1).

    Returns:
        SampledTree in the plan's node order; a child is valid iff drawn and its parent is valid.

    Source: Jeon et al. 2024, Sec. 3; Kool et al. 2019.
    """
    n = plan.parents.shape[0]
    q = process_logits(root_logits, cfg)[None]
    probs = q.new_zeros(n + 1, q.shape[-1])
    tokens, scores, valid = [], [], [torch.ones(1, dtype=torch.bool, device=q.device)]
    for i, level in enumerate(plan.levels):
        if i:
            q = process_logits(feed(torch.cat(tokens), plan.parents[:level.start], level.fed), cfg)
        probs = probs.index_copy(0, level.fed + 1, q)
        tok, drawn = sampled_static_children(q, level, noise[i, :q.shape[0]])
        parent_row = level.fed[level.slot] + 1
        scores.append(torch.cat([q.new_zeros(1)] + scores)[parent_row] + q[level.slot, tok].log())
        valid.append(drawn & torch.cat(valid)[parent_row])
        tokens.append(tok)
    return SampledTree(DeviceTree(torch.cat(tokens), plan.parents, torch.cat(scores), torch.cat(valid)[1:]), probs)


# --------------------------------------------------------------------------- dynamic
def slot_choice(q: torch.Tensor, scores: torch.Tensor, valid: torch.Tensor, top_k: int, budget: torch.Tensor
                ) -> torch.Tensor:
    """Which (frontier node, draw) slots get a child: the host's ``_slot_counts`` as a mask.

    Slot (f, j) has key scores[f] + log(j-th largest q[f]); among slots of valid nodes with j below the
    row's support, the best min(top_k, budget) by (key descending, f, j) are chosen. Keys fall with j, so
    each node's chosen slots are a prefix j = 0 .. c_f - 1 (c_f = its child count).

    Args:
        q: float32 (F, V) processed draft rows of the frontier.
        scores: float32 (F,) frontier scores (cumulative log q).
        valid: bool (F,) which frontier slots hold drafted nodes.
        top_k: the frontier width and the most children per level.
        budget: int64 () nodes left under ``total_tokens``.

    Returns:
        bool (F, k), k = min(top_k, V).

    Source: EAGLE-2 (Li et al. 2024) Sec. 4.1 (expansion by cumulative confidence).
    """
    k = min(top_k, q.shape[-1])
    top_q = q.topk(k, dim=-1).values
    ok = (valid[:, None] & (top_q > 0)).flatten()
    key = (scores[:, None] + top_q.clamp_min(0).log()).flatten()
    order = best_first(key, ok)
    rank = torch.empty_like(order).scatter(0, order, torch.arange(order.shape[0], device=q.device))
    return ((rank < budget.clamp(max=top_k)) & ok).view(-1, k)


def dynamic_noise_shape(depth: int, top_k: int, total_tokens: int, vocab: int) -> tuple[int, int, int]:
    """Shape of :func:`sampled_dynamic_tree`'s noise: (depth, min(top_k, total_tokens), draft vocab)."""
    return depth, min(top_k, total_tokens), vocab


def sampled_dynamic_tree(root_logits: torch.Tensor, feed: DeviceFeed, cfg: SamplingConfig, depth: int, top_k: int,
                         total_tokens: int, noise: torch.Tensor, min_prob: float = 0.0) -> SampledTree:
    """The sampled dynamic tree of ``SampledDrafter.dynamic``, on the device.

    Level 1: min(top_k, support, total_tokens) draws from the root's q. Each further level: the
    frontier = the previous level's nodes by score, :func:`slot_choice` gives each its child count
    (from scores and q only, never from the children drawn), and the children are its first draws.
    The stop conditions (budget spent, empty level, best score below log(min_prob)) make later levels
    invalid. Every level has w = min(top_k, total_tokens) slots (the first min(.., V)); valid nodes are
    moved first (order kept) and the tree cut to min(total_tokens, slots).

    Args:
        root_logits: float (Vd,) draft logits (or log-probs) after the root.
        feed: the draft on the frontier (:data:`specvlm.spec.devicetree.DeviceFeed`), logits out.
        cfg: the sampling config (:func:`specvlm.spec.sampling.process_logits`).
        depth, top_k, total_tokens, min_prob: as :class:`specvlm.config.TreeConfig`.
        noise: float32 :func:`dynamic_noise_shape` uniforms in [0, 1).

    Returns:
        SampledTree in the host's node order, valid nodes first.

    Source: EAGLE-2 (Li et al. 2024) Sec. 4.1; Jeon et al. 2024, Sec. 3; Kool et al. 2019.
    """
    q = process_logits(root_logits, cfg)[None]
    tok, drawn = gumbel_draws(q, min(top_k, total_tokens, q.shape[-1]), noise[0, :1])
    lv = (tok[0], torch.full_like(tok[0], -1), q[0, tok[0]].log(), drawn[0])
    levels, rows = [lv], [(q, tok.new_full((1,), -1))]
    budget, alive, start = total_tokens - drawn.sum(), torch.ones_like(drawn[0, 0]), 0
    min_logp = math.log(min_prob) if min_prob > 0 else -math.inf
    for d in range(1, depth):
        order = best_first(lv[2], lv[3])
        front, f_sc, f_valid = order + start, lv[2][order], lv[3][order]
        alive = alive & (budget > 0) & f_valid[0] & (f_sc[0] >= min_logp)
        start += lv[0].shape[0]
        q = process_logits(feed(torch.cat([x[0] for x in levels]), torch.cat([x[1] for x in levels]), front), cfg)
        rows.append((q, front))
        lv = _expand(q, front, f_sc, slot_choice(q, f_sc, f_valid & alive, top_k, budget), noise[d, :q.shape[0]],
                     min(top_k, total_tokens))
        levels.append(lv)
        budget = budget - lv[3].sum()
    return _compact([torch.cat(x) for x in zip(*levels)], rows, total_tokens)


def _expand(q: torch.Tensor, front: torch.Tensor, f_sc: torch.Tensor, chosen: torch.Tensor, uniforms: torch.Tensor,
            width: int) -> tuple[torch.Tensor, ...]:
    """A level's nodes (tokens, parents, scores, valid), ``width`` slots: chosen slots in (frontier, draw) order."""
    k = chosen.shape[1]
    draws, _ = gumbel_draws(q, k, uniforms)
    flat = torch.argsort((~chosen.flatten()).to(torch.int8), stable=True)[:min(width, chosen.numel())]
    slot = torch.div(flat, k, rounding_mode="floor")
    tok = draws.flatten()[flat]
    return tok, front[slot], f_sc[slot] + q[slot, tok].log(), chosen.flatten()[flat]


def _compact(nodes: list[torch.Tensor], rows: list[tuple[torch.Tensor, torch.Tensor]], total: int) -> SampledTree:
    """Valid nodes first (order kept), at most ``total`` nodes, with the draft rows re-indexed alike."""
    tokens, parents, scores, valid = nodes
    keep = torch.argsort((~valid).to(torch.int8), stable=True)[:min(total, valid.shape[0])]
    probs = rows[0][0].new_zeros(valid.shape[0] + 1, rows[0][0].shape[-1])
    for q, ids in rows:
        probs = probs.index_copy(0, ids + 1, q)
    probs = probs[torch.cat([keep.new_zeros(1), keep + 1])]
    return SampledTree(DeviceTree(tokens[keep], reindex_parents(parents, keep), scores[keep], valid[keep]), probs)
