"""Acceptance on the device: greedy and recursive rejection sampling, one packed result per step.

Fixed shapes, no host reads, traceable by ``torch.compile(fullgraph=True)``. Each acceptance returns
``path`` (node indices root-first, padded with -1 to ``max_depth``), ``accept_len`` and the ``bonus``
token; :func:`pack` puts the accepted tokens and the bonus in one int64 tensor, the only value a decode
engine reads back per speculative step (:func:`unpack` on the host side). A node whose token is -1
is never accepted (invalid slots of a :class:`specvlm.spec.devicetree.DeviceTree`).

Randomness: a ``torch.Generator`` cannot enter a ``fullgraph`` trace, so the sampled functions take
uniform noise drawn by the caller, e.g. ``torch.rand(shape, generator=g, device=dev)`` (one kernel, no
host read) just before the call.

Source: SpecInfer (Miao et al. 2024) / Medusa tree verification; Jeon et al. 2024, "Recursive
Speculative Decoding" (sampled trees); docs/design.md §4.9-4.11.
"""
from __future__ import annotations

import torch

from specvlm.spec.devicetree import DeviceTreeError, ancestor_matrix


# --------------------------------------------------------------------------- greedy
def greedy_accept(tokens: torch.Tensor, parents: torch.Tensor, target_argmax: torch.Tensor, max_depth: int
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The longest path whose drafted tokens equal the target's greedy tokens (:func:`specvlm.spec.drafters.greedy_accept`).

    A node is on the path iff it and every ancestor carry the target's argmax after their parent and
    are the first sibling with that token (the host keeps the first of duplicate siblings).

    Args:
        tokens: int64 (n,) drafted tokens (-1 = never accepted).
        parents: int64 (n,) parents-first (-1 = child of the root).
        target_argmax: int64 (n+1,) the target's argmax after the root (row 0) and after each node.
        max_depth: path slots; at least the tree's depth (deeper nodes are never accepted).

    Returns:
        (path int64 (max_depth,) node indices root-first padded with -1, accept_len int64 (),
        bonus int64 () the target's argmax after the last accepted node).

    Source: SpecInfer (Miao et al. 2024) / Medusa tree verification; docs/design.md §4.9.
    """
    n = tokens.shape[0]
    idx = torch.arange(n, device=tokens.device)
    same = (parents[:, None] == parents[None, :]) & (tokens[:, None] == tokens[None, :])
    first = ~(same & (idx[None, :] < idx[:, None])).any(-1)
    good = (tokens == target_argmax[parents + 1]) & first
    anc = ancestor_matrix(parents)
    depth = anc.sum(-1)
    ok = ~(anc & ~good[None, :]).any(-1) & (depth <= max_depth)
    levels = torch.arange(1, max_depth + 1, device=tokens.device)
    hit = ok[None, :] & (depth[None, :] == levels[:, None])
    none = torch.full((max_depth, 1), -1, dtype=torch.long, device=tokens.device)
    path = torch.cat([none, torch.where(hit, idx[None, :], -1)], dim=1).amax(-1)
    accept_len = ok.sum()
    return path, accept_len, _after(path, accept_len, target_argmax)


def _after(path: torch.Tensor, accept_len: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """rows[1 + last accepted node] (rows[0] when none was accepted)."""
    ext = torch.cat([path.new_full((1,), -1), path])
    last = ext.index_select(0, accept_len.view(1))
    return rows.index_select(0, last + 1).squeeze(0)


# --------------------------------------------------------------------------- the step's one read
def path_tokens(tokens: torch.Tensor, path: torch.Tensor) -> torch.Tensor:
    """The tokens of ``path`` (int64 (max_depth,), -1 padded), -1 where the path is padded."""
    if tokens.shape[0] == 0:
        return torch.full_like(path, -1)
    return torch.where(path >= 0, tokens[path.clamp(min=0)], -1)


def pack(accept_len: torch.Tensor, path_toks: torch.Tensor, bonus: torch.Tensor) -> torch.Tensor:
    """One int64 (max_depth + 2,) tensor: [accept_len, path tokens (max_depth, -1 padded), bonus].

    The engine reads it once per step (``.tolist()``) and passes it to :func:`unpack`.
    """
    return torch.cat([accept_len.view(1), path_toks, bonus.view(1)]).long()


def unpack(packed: list[int]) -> tuple[list[int], int]:
    """(accepted draft tokens, bonus token) from the host copy of :func:`pack`'s tensor.

    Raises:
        DeviceTreeError: ``packed`` is shorter than 2 or its length field does not fit.
    """
    if len(packed) < 2 or not 0 <= packed[0] <= len(packed) - 2:
        raise DeviceTreeError(f"packed step result {packed!r} is malformed: pass the list read from pack()'s tensor.")
    return list(packed[1:1 + packed[0]]), int(packed[-1])
