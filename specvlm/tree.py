"""Draft trees: building (dynamic, static, chain), ancestor masks, greedy acceptance.

A tree has N drafted nodes below an implicit root (the last emitted token, not
yet in the target cache). Nodes are stored parents-first: ``parents[i] < i``
(or -1 for a child of the root), and ``depths[i]`` = 1 for children of the root.

Building is pure given a ``feed`` callback that runs the draft on a batch of
nodes and returns their next-token log-probabilities; the callback owns the
draft's KV cache and attention mask.

Source: EAGLE-2 (Li et al. 2024, dynamic draft trees, Sec. 4); Medusa/EAGLE
static trees; SpecVLM (arXiv 2508.16201) Sec. 3.3; DESIGN 4.8-4.9.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch

from specvlm.config import TreeConfig

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
    mask = torch.eye(n, dtype=torch.bool)
    par = parents.tolist()
    for i in range(n):
        p = par[i]
        if p >= 0:
            mask[i] |= mask[p]
    return mask


def verify_mask(parents: torch.Tensor, prefix_len: int, dtype: torch.dtype,
                device: torch.device | str = "cpu") -> torch.Tensor:
    """4-D additive mask for verifying [root] + N tree nodes after a cached prefix.

    Args:
        parents: int64 (N,) tree parents.
        prefix_len: P, tokens already in the KV cache (all visible).
        dtype: float dtype of the model (mask values 0 / dtype min).

    Returns:
        float (1, 1, N+1, P+N+1): prefix fully visible; the root sees itself; a node sees the
        root, its ancestors and itself. A bool mask is silently wrong under eager (DESIGN 7).
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


def greedy_accept(tree: DraftTree, target_tokens: torch.Tensor) -> tuple[list[int], int]:
    """Longest path whose drafted tokens equal the target's greedy tokens.

    Args:
        tree: the verified tree (N nodes).
        target_tokens: int64 (N+1,): the target's argmax after the root (row 0) and after each node.

    Returns:
        (accepted node indices root-first, bonus token id). Children of one node have distinct
        tokens, so the matching path is unique.

    Source: SpecInfer / Medusa tree verification; DESIGN 4.9.
    """
    tgt = target_tokens.tolist()
    toks = tree.tokens.tolist()
    children: dict[int, dict[int, int]] = {}
    for i, p in enumerate(tree.parents.tolist()):
        children.setdefault(p, {}).setdefault(toks[i], i)
    path, cur, row = [], -1, 0
    while True:
        nxt = children.get(cur, {}).get(tgt[row])
        if nxt is None:
            return path, tgt[row]
        path.append(nxt)
        cur, row = nxt, nxt + 1


def _add(nodes: list, token: int, parent: int, depth: int, score: float) -> int:
    nodes.append((token, parent, depth, score))
    return len(nodes) - 1


def _finish(nodes: list, keep: list[int]) -> DraftTree:
    """Re-index kept nodes parents-first (by depth, then creation order)."""
    keep = sorted(set(keep), key=lambda i: (nodes[i][2], i))
    new_of = {old: new for new, old in enumerate(keep)}
    toks, pars, deps, scs = [], [], [], []
    for old in keep:
        t, p, d, s = nodes[old]
        toks.append(t)
        pars.append(new_of[p] if p >= 0 else -1)
        deps.append(d)
        scs.append(s)
    if not keep:
        return DraftTree.empty()
    return DraftTree(torch.tensor(toks), torch.tensor(pars), torch.tensor(deps),
                     torch.tensor(scs, dtype=torch.float32))


def _view(nodes: list) -> DraftTree:
    """The tree of all nodes so far (creation order is already parents-first)."""
    if not nodes:
        return DraftTree.empty()
    t, p, d, s = zip(*nodes)
    return DraftTree(torch.tensor(t), torch.tensor(p), torch.tensor(d), torch.tensor(s, dtype=torch.float32))


def build_dynamic(root_logp: torch.Tensor, feed: FeedFn, depth: int, top_k: int, total_tokens: int,
                  min_prob: float = 0.0) -> DraftTree:
    """EAGLE-2 dynamic tree.

    Level 1 = the root's top-k children. At each further level the frontier (at most
    ``top_k`` nodes) is fed to the draft in one forward; each frontier node proposes its
    top-k children, scored by cumulative log-probability, and the best ``top_k`` children
    form the next frontier. Finally all drafted nodes are reranked by cumulative
    log-probability and the best ``total_tokens`` are kept, with their ancestors.

    Args:
        root_logp: float (vocab,) draft log-probs after the root.
        feed: runs the draft on frontier nodes (see :data:`FeedFn`).
        depth: levels (max drafted tokens on a path).
        top_k: children per node and frontier width.
        total_tokens: nodes kept after reranking.
        min_prob: stop before a level whose best frontier node has a cumulative draft
            probability below this (0 = never stop early; see ``TreeConfig.min_prob``).

    Returns:
        DraftTree with at most ``total_tokens`` nodes (ancestors of kept nodes always kept).

    Source: EAGLE-2 (Li et al. 2024), Sec. 4.1-4.2; early stop: Mamou et al. 2024 (arXiv 2405.04304).
    """
    min_logp = math.log(min_prob) if min_prob > 0 else -math.inf
    nodes: list = []
    lp, tok = (t.cpu() for t in root_logp.float().topk(min(top_k, root_logp.numel())))
    frontier = [_add(nodes, int(t), -1, 1, float(s)) for s, t in zip(lp.tolist(), tok.tolist())]
    for d in range(2, depth + 1):
        if max(nodes[i][3] for i in frontier) < min_logp:
            break
        logp = feed(frontier, _view(nodes)).float()
        base = torch.tensor([nodes[i][3] for i in frontier])[:, None]
        k = min(top_k, logp.shape[-1])
        child_lp, child_tok = (t.cpu() for t in logp.topk(k, dim=-1))  # one device sync per level
        cand = (base + child_lp).flatten()
        order = torch.argsort(cand, descending=True, stable=True)
        new = []
        for flat in order.tolist():
            fi, ci = divmod(flat, k)
            idx = _add(nodes, int(child_tok[fi, ci]), frontier[fi], d, float(cand[flat]))
            new.append(idx)
        frontier = new[:top_k]
    order = sorted(range(len(nodes)), key=lambda i: (-nodes[i][3], i))[:total_tokens]
    keep = set()
    for i in order:
        while i >= 0 and i not in keep:
            keep.add(i)
            i = nodes[i][1]
    return _finish(nodes, list(keep))


def build_static(root_logp: torch.Tensor, feed: FeedFn, spec: list[tuple[int, ...]]) -> DraftTree:
    """Static tree: node with path (r1, ..., rd) is the r_d-th best child of path (r1, ..., r_{d-1}).

    Args:
        root_logp: float (vocab,) draft log-probs after the root.
        feed: runs the draft on the nodes of one level that have children.
        spec: list of rank paths, every prefix of a path also present.

    Returns:
        DraftTree with len(spec) nodes.

    Raises:
        ValueError: a path's prefix is missing from ``spec``.
    """
    spec = sorted(set(spec), key=lambda p: (len(p), p))
    have = set(spec)
    for p in spec:
        if len(p) > 1 and p[:-1] not in have:
            raise ValueError(f"static tree path {p} has no parent {p[:-1]} in the tree.")
    nodes: list = []
    node_of: dict[tuple[int, ...], int] = {}
    logp_of: dict[tuple[int, ...], torch.Tensor] = {(): root_logp.float()}
    max_d = max((len(p) for p in spec), default=0)
    for d in range(1, max_d + 1):
        level = [p for p in spec if len(p) == d]
        for p in level:
            parent_lp = logp_of[p[:-1]]
            lp, tok = parent_lp.topk(p[-1] + 1)
            par = node_of.get(p[:-1], -1)
            base = nodes[par][3] if par >= 0 else 0.0
            node_of[p] = _add(nodes, int(tok[-1]), par, d, base + float(lp[-1]))
        expand = [p for p in level if any(len(q) == d + 1 and q[:-1] == p for q in spec)]
        if expand:
            out = feed([node_of[p] for p in expand], _view(nodes)).float()
            for p, row in zip(expand, out):
                logp_of[p] = row
    return _finish(nodes, list(range(len(nodes))))


def build_tree(root_logp: torch.Tensor, feed: FeedFn, config: TreeConfig) -> DraftTree:
    """Dispatch on ``config.shape``: dynamic, static (``config.static_preset``) or chain (``config.depth``).

    Raises:
        ValueError: unknown static preset.
    """
    if config.shape == "chain":
        return build_dynamic(root_logp, feed, config.depth, 1, config.depth, config.min_prob)
    if config.shape == "static":
        if config.static_preset not in STATIC_TREES:
            raise ValueError(f"static tree {config.static_preset!r} is unknown: use one of {', '.join(STATIC_TREES)}.")
        return build_static(root_logp, feed, STATIC_TREES[config.static_preset])
    return build_dynamic(root_logp, feed, config.depth, config.top_k, config.total_tokens, config.min_prob)
