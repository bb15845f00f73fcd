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
def greedy_accept(tokens: torch.Tensor, parents: torch.Tensor, target_argmax: torch.Tensor, max_depth: int,
                  anc: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The longest path whose drafted tokens equal the target's greedy tokens (the tests' host ``greedy_accept``).

    A node is on the path iff it and every ancestor carry the target's argmax after their parent and
    are the first sibling with that token (the host keeps the first of duplicate siblings).

    Args:
        tokens: int64 (n,) drafted tokens (-1 = never accepted).
        parents: int64 (n,) parents-first (-1 = child of the root).
        target_argmax: int64 (n+1,) the target's argmax after the root (row 0) and after each node.
        max_depth: path slots; at least the tree's depth (deeper nodes are never accepted).
        anc: bool (n, n) ``ancestor_matrix(parents)`` when already computed, else None.

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
    anc = ancestor_matrix(parents) if anc is None else anc
    depth = anc.sum(-1)
    ok = ~(anc & ~good[None, :]).any(-1) & (depth <= max_depth)
    levels = torch.arange(1, max_depth + 1, device=tokens.device)
    hit = ok[None, :] & (depth[None, :] == levels[:, None])
    none = torch.full((max_depth, 1), -1, dtype=torch.long, device=tokens.device)
    path = torch.cat([none, torch.where(hit, idx[None, :], -1)], dim=1).amax(-1)
    accept_len = ok.sum()
    return path, accept_len, _after(path, accept_len, target_argmax)


def chain_accept(tokens: torch.Tensor, target_argmax: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`greedy_accept` for a chain (node i's parent is node i - 1): the longest matching prefix.

    Args:
        tokens: int64 (D,) drafted chain tokens (-1 = never accepted).
        target_argmax: int64 (D+1,) the target's argmax after the root (row 0) and after each node.

    Returns:
        (path int64 (D,) = 0..accept_len-1 then -1, accept_len int64 (), bonus int64 ()), as ``greedy_accept``.

    Source: Leviathan et al. 2023 (greedy chain verification); docs/design.md §4.9.
    """
    idx = torch.arange(tokens.shape[0], device=tokens.device)
    accept_len = (tokens == target_argmax[:-1]).cumprod(0).sum()
    return torch.where(idx < accept_len, idx, -1), accept_len, target_argmax.index_select(0, accept_len.view(1))[0]


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


# --------------------------------------------------------------------------- sampled
def sample_token(p: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """One token from weights ``p`` by inverse CDF (:func:`specvlm.spec.sampling.sample` on the device).

    Args:
        p: float (V,) non-negative weights, not necessarily normalised.
        u: float32 () uniform in [0, 1).

    Returns:
        int64 () token with probability p[i] / sum(p); never a zero-weight token.
    """
    c = p.float().cumsum(0)
    i = torch.searchsorted(c, c[-1:] * u, right=True).squeeze(0)
    last = torch.where(p > 0, torch.arange(p.shape[0], device=p.device), -1).amax()
    return torch.where(i >= p.shape[0], last, i)


def _children_of(node: torch.Tensor, tokens: torch.Tensor, parents: torch.Tensor, width: int) -> torch.Tensor:
    """int64 (width,) the first ``width`` children of ``node`` with a token >= 0, by index; -1 padded."""
    n = tokens.shape[0]
    idx = torch.arange(n, device=tokens.device)
    key = torch.where((parents == node) & (tokens >= 0), idx, n + idx)
    first = key.topk(min(width, n), largest=False).values
    first = torch.cat([first, first.new_full((width - first.shape[0],), n)])
    return torch.where(first < n, first, -1)


def _residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """normalize(max(0, p - q)), or ``p`` when that is all zero (the tests' host ``residual``)."""
    r = (p - q).clamp(min=0.0)
    s = r.sum()
    return torch.where(s > 0, r / torch.where(s > 0, s, 1.0), p)


def _try_children(p: torch.Tensor, q: torch.Tensor, kids: torch.Tensor, tokens: torch.Tensor, u: torch.Tensor
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """One node of recursive rejection sampling: (the target's residual after the rejections, accepted child or -1)."""
    q = q / torch.where(q.sum() > 0, q.sum(), 1.0)
    vocab = torch.arange(q.shape[0], device=q.device)
    drawn = torch.zeros_like(q, dtype=torch.bool)
    nxt = kids.new_full((), -1)
    for j in range(kids.shape[0]):
        c = kids[j]
        live = (c >= 0) & (nxt < 0)
        x = tokens.index_select(0, c.clamp(min=0).view(1))
        qj = q.masked_fill(drawn, 0.0)
        qj = qj / torch.where(qj.sum() > 0, qj.sum(), 1.0)
        accepted = (u[j] * qj.gather(0, x) < p.gather(0, x)).squeeze(0)
        nxt = torch.where(live & accepted, c, nxt)
        rejected = live & ~accepted
        p = torch.where(rejected, _residual(p, qj), p)
        drawn = drawn | (rejected & (vocab == x))
    return p, nxt


def sampled_accept(tokens: torch.Tensor, parents: torch.Tensor, target_probs: torch.Tensor,
                   draft_probs: torch.Tensor, uniforms: torch.Tensor, max_depth: int, max_children: int
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Recursive rejection sampling (the tests' host ``verify_tree``) on the device.

    From the root: try the node's children in index order (= draw order); child j with token x is
    accepted with probability min(1, p(x) / q_j(x)), q_j = the node's draft row without the earlier
    siblings' tokens, renormalised; a rejection replaces p by normalize(max(0, p - q_j)). An accepted
    child becomes the node (with its full target row); when every child is rejected, the bonus token is
    drawn from the last p. The output keeps the target's distribution exactly (see ``verify_tree``),
    provided siblings were drawn without replacement from their parent's draft row.

    Args:
        tokens: int64 (n,) drafted tokens; -1 = not drafted (never tried).
        parents: int64 (n,) parents-first (-1 = child of the root).
        target_probs: float32 (n+1, V) processed target probs: row 0 after the root, 1+i after node i.
        draft_probs: float32 (n+1, Vd) the draft rows children were drawn from (Vd <= V, zero-padded).
        uniforms: float32 (max_depth + 1, max_children + 1) in [0, 1): row d for the node at depth d,
            column j for its j-th child, the last column for the bonus draw.
        max_depth: at least the tree's depth.
        max_children: at least the largest number of children of one node.

    Returns:
        (path int64 (max_depth,) root-first, -1 padded; accept_len int64 (); bonus int64 ()).

    Source: Jeon et al. 2024, "Recursive Speculative Decoding", Sec. 3 and Algorithm 1; Leviathan et
    al. 2023 (the single rejection step).
    """
    vocab = target_probs.shape[-1]
    q_all = torch.nn.functional.pad(draft_probs.float(), (0, vocab - draft_probs.shape[-1]))
    node = parents.new_full((), -1)
    done = torch.zeros((), dtype=torch.bool, device=tokens.device)
    bonus, path = node.clone(), []
    for d in range(max_depth + 1):
        row = (node + 1).view(1)
        kids = _children_of(node, tokens, parents, max_children if d < max_depth else 0)
        p, nxt = _try_children(target_probs.float().index_select(0, row).squeeze(0),
                               q_all.index_select(0, row).squeeze(0), kids, tokens, uniforms[d])
        stop = ~done & (nxt < 0)
        bonus = torch.where(stop, sample_token(p, uniforms[d, -1]), bonus)
        path.append(torch.where(done | stop, -1, nxt))
        node = torch.where(done | stop, node, nxt)
        done = done | stop
    path_t = torch.stack(path[:max_depth]) if max_depth else parents.new_zeros(0)
    return path_t, (path_t >= 0).sum(), bonus
