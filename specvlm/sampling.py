"""Lossless sampling: logits processing, sampling and speculative verification that keeps
the target distribution exactly (DESIGN 4.11).

Pure functions over tensors. All randomness comes from one ``torch.Generator`` per request
(:func:`make_generator`), consumed in a fixed order, so the same seed, method and settings give
the same output. Every random number is a single uniform ``u ~ U[0, 1)`` drawn with
``torch.rand((), generator=g, device=g.device)``: the probabilities may live on any device.

Conventions shared with :mod:`specvlm.tree`:

* Rows of ``target_probs`` / ``draft_probs``: row 0 = after the root (the last emitted token),
  row ``1 + i`` = after tree node ``i``.
* Children of a node are tried in increasing node index, which the samplers here make equal
  to the order in which they were drawn (without replacement) from the draft.
* Draft probabilities may cover fewer tokens than the target's (shared vocabulary); they are
  zero-padded to the target's width.

Source: Leviathan et al. 2023 ("Fast Inference from Transformers via Speculative Decoding");
Chen et al. 2023 ("Accelerating LLM Decoding with Speculative Sampling"); Jeon et al. 2024
("Recursive Speculative Decoding: Accelerating LLM Inference via Sampling Without
Replacement"); Holtzman et al. 2020 (nucleus sampling); DESIGN 4.8-4.11.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from specvlm.config import ConfigError, SamplingConfig, TreeConfig  # noqa: F401 (re-exported)
from specvlm.tree import STATIC_TREES, DraftTree, FeedFn



# --------------------------------------------------------------------------- config
def make_generator(cfg: SamplingConfig | int, device: torch.device | str = "cpu") -> torch.Generator:
    """A fresh generator seeded with ``cfg.seed`` (or an int seed); one per request."""
    seed = cfg if isinstance(cfg, int) else cfg.seed
    g = torch.Generator(device=device)
    g.manual_seed(int(seed))
    return g


# --------------------------------------------------------------------------- logits -> probs
def process_logits(logits: torch.Tensor, cfg: SamplingConfig) -> torch.Tensor:
    """Temperature, then nucleus (top-p) filtering, renormalised.

    The one processing used by vanilla sampling, by the target in verification and (with the
    draft's config) by the draft. Log-probabilities are valid input (``log_softmax`` only shifts
    each row by a constant, which neither step sees).

    Args:
        logits: float (..., V) logits or log-probs; ``-inf`` entries are allowed.
        cfg: temperature (0 = one-hot argmax, first index on ties) and ``top_p_sampling``.

    Returns:
        float32 (..., V) probabilities summing to 1 per row. Nucleus keeps, per row, the
        smallest set of most probable tokens whose mass is >= ``top_p_sampling`` (sorted
        descending, a token is kept iff the mass strictly before it is < top_p; ties broken
        by lower token id first).

    Source: Holtzman et al. 2020 (nucleus sampling), Sec. 3.1.
    """
    x = logits.float()
    if cfg.greedy:
        return torch.zeros_like(x).scatter_(-1, x.argmax(-1, keepdim=True), 1.0)
    probs = torch.softmax(x / float(cfg.temperature), dim=-1)
    if cfg.top_p_sampling >= 1.0:
        return probs
    sp, idx = torch.sort(probs, dim=-1, descending=True, stable=True)
    before = sp.cumsum(-1) - sp
    keep_sorted = before < cfg.top_p_sampling
    keep_sorted[..., 0] = True
    keep = torch.zeros_like(keep_sorted).scatter_(-1, idx, keep_sorted)
    probs = probs * keep
    return probs / probs.sum(-1, keepdim=True)


# --------------------------------------------------------------------------- sampling
def _uniform(generator: torch.Generator) -> float:
    """One float in [0, 1) from ``generator`` (drawn on the generator's device)."""
    return float(torch.rand((), generator=generator, device=generator.device))


def sample(probs: torch.Tensor, generator: torch.Generator) -> int:
    """One token from a categorical distribution by inverse CDF (one uniform per call).

    Args:
        probs: float (V,) non-negative weights (normalisation not required), any device.
        generator: the request's generator.

    Returns:
        Token id with probability probs[i] / sum(probs); never a zero-weight token.
    """
    p = probs.float()
    c = p.cumsum(-1)
    i = int(torch.searchsorted(c, c[-1:] * _uniform(generator), right=True))
    # right=True never lands on a zero-weight token (its CDF equals its predecessor's), except
    # past the end when u * total rounds onto the last CDF value.
    if i >= p.numel():
        i = int(torch.nonzero(p > 0)[-1])
    return i


def exclude(probs: torch.Tensor, tokens: list[int] | torch.Tensor) -> torch.Tensor:
    """``probs`` with ``tokens`` removed, renormalised: the distribution of the next draw
    without replacement.

    Args:
        probs: float (V,) draft distribution q of a node.
        tokens: token ids already drawn as earlier siblings.

    Returns:
        float32 (V,) q_j(x) = q(x) / (1 - sum_{y in tokens} q(y)) for x not in tokens, else 0.
    """
    q = probs.float()
    if len(tokens):
        q = q.index_fill(0, torch.as_tensor(tokens, dtype=torch.long, device=q.device), 0.0)
    return q / q.sum()


def sample_without_replacement(probs: torch.Tensor, k: int,
                               generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw ``k`` distinct tokens by sequential renormalised draws.

    Draw j (0-based) samples from q_j = :func:`exclude` (q, tokens[:j]), i.e. q with the earlier
    draws removed and renormalised. This is the Plackett-Luce / successive-sampling scheme; its
    law equals Gumbel-top-k (the order of argsorted log q + Gumbel noise), but it costs one
    uniform per draw instead of V Gumbels. Recursive rejection sampling (:func:`verify_tree`)
    needs exactly these q_j: sibling j is compared against the residual target with q_j.

    Args:
        probs: float (V,) draft distribution q.
        k: number of draws; must not exceed the support size of q.
        generator: the request's generator.

    Returns:
        (tokens int64 (k,) in draw order, draw_probs float32 (k, V) with draw_probs[j] = q_j).

    Raises:
        ValueError: k exceeds the number of tokens with non-zero probability.

    Source: Jeon et al. 2024, Sec. 3 (sampling without replacement for draft trees); Kool et al.
    2019 ("Stochastic Beams and Where to Find Them") for the Gumbel-top-k equivalence.
    """
    support = int((probs > 0).sum())
    if k > support:
        raise ValueError(f"cannot draw {k} distinct tokens from a distribution with support {support}.")
    q = probs.float() / probs.float().sum()
    toks = _draw(q, k, generator)
    draws = torch.stack([exclude(q, toks[:j]) for j in range(k)]) if k else q.new_zeros(0, q.numel())
    return torch.tensor(toks, dtype=torch.long), draws


def _draw(q: torch.Tensor, k: int, generator: torch.Generator) -> list[int]:
    """The draws of :func:`sample_without_replacement` (k <= support), without the rows."""
    w = q.float().clone()
    toks = []
    for _ in range(k):
        t = sample(w, generator)  # sample() renormalises: w is q_j up to a constant
        toks.append(t)
        w[t] = 0.0
    return toks


def _pad(q: torch.Tensor, width: int) -> torch.Tensor:
    """Zero-pad draft probabilities (..., Vd) to the target's width (..., Vt)."""
    vd = q.shape[-1]
    if vd > width:
        raise ValueError(f"draft distribution covers {vd} tokens but the target only {width}: "
                         "compare over the shared vocabulary.")
    q = q.float()
    return q if vd == width else torch.nn.functional.pad(q, (0, width - vd))


def residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """normalize(max(0, p - q)): the target's distribution after rejecting a draw from q.

    Args:
        p: float (V,) target distribution.
        q: float (V,) the distribution the rejected token was drawn from.

    Returns:
        float32 (V,). If p <= q everywhere (then p == q and a rejection has probability 0; it can
        only come from rounding) ``p`` itself is returned.
    """
    r = (p.float() - q.float()).clamp_(min=0.0)
    s = float(r.sum())
    return r / s if s > 0 else p.float()


def _accept(p_x: float, q_x: float, generator: torch.Generator) -> bool:
    """True with probability min(1, p_x / q_x) (q_x > 0); u * q < p avoids the division."""
    return _uniform(generator) * q_x < p_x


# --------------------------------------------------------------------------- chain verification
def verify_chain(target_probs: torch.Tensor, draft_probs: torch.Tensor, draft_tokens: torch.Tensor,
                 generator: torch.Generator) -> tuple[int, int]:
    """Standard speculative rejection sampling over a drafted chain.

    For i = 0..n-1: accept x_i with probability min(1, p_i(x_i) / q_i(x_i)); at the first
    rejection emit a token from normalize(max(0, p_i - q_i)) and stop; if all n are accepted
    emit a bonus token from p_n. Each emitted token is distributed exactly as the target's
    p_i given the prefix: P(emit x) = min(p, q)(x) + (1 - sum min(p, q)) * (p - q)+(x) / sum (p - q)+
    = p(x), since sum (p - q)+ = 1 - sum min(p, q).

    Args:
        target_probs: float (n+1, V) processed target probs (:func:`process_logits`),
            row i = after the root and the first i drafted tokens.
        draft_probs: float (n, Vd) the draft distributions x_i was drawn from (Vd <= V).
        draft_tokens: int64 (n,) drafted tokens, x_i ~ draft_probs[i].
        generator: the request's generator (one uniform per tested token + one per emitted).

    Returns:
        (number of accepted draft tokens in 0..n, next token: the correction or bonus token).

    Source: Leviathan et al. 2023, Algorithm 1; Chen et al. 2023, Algorithm 2.
    """
    n = int(draft_tokens.numel())
    q_all = _pad(draft_probs, target_probs.shape[-1])
    toks = draft_tokens.tolist()
    for i in range(n):
        p, q, x = target_probs[i], q_all[i], toks[i]
        if not _accept(float(p[x]), float(q[x]), generator):
            return i, sample(residual(p, q), generator)
    return n, sample(target_probs[n], generator)


# --------------------------------------------------------------------------- tree verification
def _children(parents: list[int]) -> dict[int, list[int]]:
    ch: dict[int, list[int]] = {}
    for i, p in enumerate(parents):
        ch.setdefault(p, []).append(i)
    return ch


def verify_tree(tree_parents: torch.Tensor, tree_tokens: torch.Tensor, target_probs: torch.Tensor,
                draft_probs: torch.Tensor, generator: torch.Generator) -> tuple[list[int], int]:
    """Recursive rejection sampling (RRS) over a tree whose siblings were drawn without replacement.

    Algorithm, starting at the root with p = target_probs[row of the node]:

    1. Let c_1..c_m be the node's children in drawing order (increasing node index), x_j their
       tokens, q the node's draft distribution and q_j = q with x_1..x_{j-1} removed and
       renormalised (:func:`exclude`) -- the law x_j was drawn from given the earlier siblings.
    2. For j = 1..m: accept c_j with probability min(1, p(x_j) / q_j(x_j)). If accepted, append
       c_j to the path and restart step 1 at c_j with the *full* target row of c_j. If rejected,
       p <- normalize(max(0, p - q_j)) (:func:`residual`) and try the next sibling.
    3. If every child was rejected (or the node has none), emit a token sampled from the current
       p (the last residual, or the full row for a leaf): the next token. Stop.

    Why it is exact: one level of step 2 is a standard rejection step (see :func:`verify_chain`):
    given the earlier siblings, x_j ~ q_j, so the token emitted by "accept x_j or else sample
    from normalize(max(0, p - q_j))" has law p. The "or else" branch is realised by recursing on
    the next sibling with target p' = residual(p, q_j) and ends with a sample from the final
    residual, which by induction on the number of remaining siblings emits a token with law p'.
    Hence the token emitted at a node has exactly the target's law p given the prefix, and by
    the chain rule so does every generated sequence. Drawing siblings *with* replacement from
    the full q, or taking the deterministic top-k with the full q as the proposal
    (:func:`verify_tree_naive`), breaks the premise "x_j ~ q_j" and biases the output. A token
    rejected as x_j has p' (x_j) = 0 afterwards, so it is never emitted twice nor sampled after.

    Requirements on the tree (met by :func:`build_sampled_tree` / :func:`build_sampled_static`):
    for every node, the number of children is decided before they are drawn, and they are
    sequential draws without replacement from the recorded draft row.

    Args:
        tree_parents: int64 (N,) parents-first (-1 = child of the root).
        tree_tokens: int64 (N,) drafted tokens.
        target_probs: float (N+1, V) processed target probs: row 0 after the root, row 1+i after
            node i (:func:`process_logits` of the verify forward's logits).
        draft_probs: float (N+1, Vd) draft distribution each node's children were drawn from,
            same row layout (rows of nodes without children are ignored).
        generator: the request's generator.

    Returns:
        (accepted node indices root-first, next token id), like :func:`specvlm.tree.greedy_accept`.

    Source: Jeon et al. 2024, "Recursive Speculative Decoding", Sec. 3 (recursive rejection
    sampling) and Algorithm 1; Leviathan et al. 2023 for the single rejection step.
    """
    children = _children(tree_parents.tolist())
    toks = tree_tokens.tolist()
    V = target_probs.shape[-1]
    path: list[int] = []
    node = -1
    while True:
        row = node + 1
        p = target_probs[row].float()
        kids = children.get(node, [])
        if kids:
            q = _pad(draft_probs[row], V)
            q = q / q.sum()
            drawn: list[int] = []
            nxt = None
            for c in kids:
                x = toks[c]
                qj = exclude(q, drawn) if drawn else q
                if _accept(float(p[x]), float(qj[x]), generator):
                    nxt = c
                    break
                p = residual(p, qj)
                drawn.append(x)
            if nxt is not None:
                path.append(nxt)
                node = nxt
                continue
        return path, sample(p, generator)


def verify_tree_naive(tree_parents: torch.Tensor, tree_tokens: torch.Tensor, target_probs: torch.Tensor,
                      draft_probs: torch.Tensor, generator: torch.Generator) -> tuple[list[int], int]:
    """DELIBERATELY WRONG tree verification, kept only to prove the tests have power.

    Meant for deterministic top-k children (e.g. :func:`specvlm.tree.build_dynamic`): each child
    is accepted with min(1, p(x) / q(x)) using the full draft q and the full target p for every
    sibling; if all are rejected the next token comes from normalize(max(0, p - q)). Neither the
    proposal law (top-k is not a sample from q) nor the per-sibling target is right, so the output
    distribution differs from the target's. Do not use for decoding.

    Args / Returns: as :func:`verify_tree`.
    """
    children = _children(tree_parents.tolist())
    toks = tree_tokens.tolist()
    V = target_probs.shape[-1]
    path: list[int] = []
    node = -1
    while True:
        row = node + 1
        p = target_probs[row].float()
        kids = children.get(node, [])
        if not kids:
            return path, sample(p, generator)
        q = _pad(draft_probs[row], V)
        q = q / q.sum()
        nxt = next((c for c in kids if _accept(float(p[toks[c]]), float(q[toks[c]]), generator)), None)
        if nxt is None:
            return path, sample(residual(p, q), generator)
        path.append(nxt)
        node = nxt


# --------------------------------------------------------------------------- tree building
@dataclass
class SampledTree:
    """A draft tree drawn for sampling, with what verification needs.

    Attributes:
        tree: the drafted tree (parents-first; siblings in drawing order).
        draft_probs: float32 (N+1, Vd): row 0 = the draft distribution the root's children were
            drawn from, row 1+i = node i's (zeros for nodes without children).
    """

    tree: DraftTree
    draft_probs: torch.Tensor


class _Builder:
    """Nodes in creation order (parents-first, siblings consecutive in draw order)."""

    def __init__(self, root_q: torch.Tensor):
        self.toks: list[int] = []
        self.pars: list[int] = []
        self.deps: list[int] = []
        self.scores: list[float] = []
        self.dists: dict[int, torch.Tensor] = {}
        self.root_q = root_q

    def view(self) -> DraftTree:
        if not self.toks:
            return DraftTree.empty()
        return DraftTree(torch.tensor(self.toks, dtype=torch.long), torch.tensor(self.pars, dtype=torch.long),
                         torch.tensor(self.deps, dtype=torch.long),
                         torch.tensor(self.scores, dtype=torch.float32))

    def draw(self, parent: int, q: torch.Tensor, k: int, generator: torch.Generator) -> list[int]:
        """Draw k children of ``parent`` without replacement from q; returns their node ids."""
        if k <= 0:
            return []
        self.dists[parent + 1] = q
        toks = _draw(q, k, generator)
        base = self.scores[parent] if parent >= 0 else 0.0
        depth = self.deps[parent] + 1 if parent >= 0 else 1
        logq = q[toks].log().tolist()
        out = []
        for t, lq in zip(toks, logq):
            self.toks.append(int(t))
            self.pars.append(parent)
            self.deps.append(depth)
            self.scores.append(base + float(lq))
            out.append(len(self.toks) - 1)
        return out

    def finish(self) -> SampledTree:
        n = len(self.toks)
        dp = self.root_q.new_zeros(n + 1, self.root_q.numel())
        for row, q in self.dists.items():
            dp[row] = q
        return SampledTree(self.view(), dp)


def _support(q: torch.Tensor) -> torch.Tensor:
    return (q > 0).sum(-1)


def build_sampled_tree(root_logp: torch.Tensor, feed: FeedFn, depth: int, top_k: int,
                       generator: torch.Generator, cfg: SamplingConfig,
                       total_tokens: int | None = None, min_prob: float = 0.0) -> SampledTree:
    """Dynamic (EAGLE-2-like) draft tree with children sampled without replacement.

    Level 1: the root's children, min(top_k, support, total_tokens) draws without replacement
    from q_root = process_logits(root_logp, cfg). Level d >= 2: the frontier = the best
    ``top_k`` nodes of level d-1 by cumulative draft log-probability (sum of log q of the drawn
    tokens along the path) is fed to the draft in one call; each candidate slot (frontier node v,
    j-th draw) gets the key score(v) + log(j-th largest q_v), and the best min(top_k, remaining
    budget) slots decide how many children each frontier node gets (always a prefix j = 0..c-1,
    since keys fall with j); then the children are drawn. So each level has at most ``top_k``
    nodes, and the tree at most ``total_tokens``.

    Exactness (see :func:`verify_tree`): a node's child count depends only on nodes drawn at
    earlier levels and on q_v, never on the values of its own children, and the children are
    sequential draws without replacement from q_v. EAGLE-2's final rerank by the drawn children's
    own scores would violate this and is therefore not done. ``top_k = 1`` gives a chain.

    Args:
        root_logp: float (Vd,) draft log-probs (or logits) after the root.
        feed: ``feed(node_ids, tree) -> float32 (F, Vd)`` draft log-probs after each node
            (:data:`specvlm.tree.FeedFn`, e.g. ``DraftRunner.feed_nodes``); called once per
            level >= 2 with the frontier, whose ancestors are already fed.
        depth: maximum drafted tokens on a path (>= 1).
        top_k: children per expanded node and nodes per level (>= 1).
        generator: the request's generator.
        cfg: the draft's sampling config (usually the target's; any q keeps exactness).
        total_tokens: node budget (None = depth * top_k).
        min_prob: stop before a level whose best frontier node has a cumulative draft
            probability below this (0 = never). The decision uses only nodes already drawn, like
            the child counts, so exactness is kept.

    Returns:
        SampledTree: tree (scores = cumulative log q) and the recorded draft rows.

    Source: EAGLE-2 (Li et al. 2024) Sec. 4 for the frontier expansion; Jeon et al. 2024 for
    drawing siblings without replacement.
    """
    budget = depth * top_k if total_tokens is None else int(total_tokens)
    q_root = process_logits(root_logp, cfg)
    b = _Builder(q_root)
    level = b.draw(-1, q_root, min(top_k, int(_support(q_root)), budget), generator)
    budget -= len(level)
    for _ in range(2, depth + 1):
        if budget <= 0 or not level:
            break
        frontier = sorted(level, key=lambda i: (-b.scores[i], i))[:top_k]
        if min_prob > 0 and b.scores[frontier[0]] < math.log(min_prob):
            break
        q = process_logits(feed(frontier, b.view()), cfg)
        k = min(top_k, q.shape[-1])
        top_q = q.topk(k, dim=-1).values.clamp_min(0).log().cpu()
        slots = []
        for f, node in enumerate(frontier):
            for j in range(min(k, int(_support(q[f])))):
                slots.append((-(b.scores[node] + float(top_q[f, j])), f, j))
        slots.sort()
        counts = [0] * len(frontier)
        for _, f, _ in slots[:min(top_k, budget)]:
            counts[f] += 1
        level = []
        for f, node in enumerate(frontier):
            level += b.draw(node, q[f], counts[f], generator)
        budget -= len(level)
    return b.finish()


def build_sampled_static(root_logp: torch.Tensor, feed: FeedFn, spec: list[tuple[int, ...]],
                         generator: torch.Generator, cfg: SamplingConfig) -> SampledTree:
    """Static-shape draft tree with children sampled without replacement.

    Path (r_1, ..., r_d) is the r_d-th draw (0-based, without replacement) among the children of
    path (r_1, ..., r_{d-1}); the child count is fixed by ``spec`` (capped by the support of q),
    so it never depends on the drawn values. Nodes whose rank exceeds the support are dropped
    with their descendants.

    Args:
        root_logp: float (Vd,) draft log-probs after the root.
        feed: see :func:`build_sampled_tree`; called once per level with the nodes to expand.
        spec: rank paths (e.g. :data:`specvlm.tree.STATIC_TREES`); every prefix present and the
            children of each path ranked 0..m-1 without gaps.
        generator: the request's generator.
        cfg: the draft's sampling config.

    Returns:
        SampledTree.

    Raises:
        ValueError: a path's prefix is missing or a node's child ranks have gaps.
    """
    spec = sorted(set(spec), key=lambda p: (len(p), p))
    have = set(spec)
    kids: dict[tuple[int, ...], int] = {}
    for p in spec:
        if len(p) > 1 and p[:-1] not in have:
            raise ValueError(f"static tree path {p} has no parent {p[:-1]} in the tree.")
        kids[p[:-1]] = kids.get(p[:-1], 0) + 1
    for par, m in kids.items():
        if any(par + (r,) not in have for r in range(m)):
            raise ValueError(f"static tree children of {par} must be ranked 0..{m - 1} without gaps.")
    q_root = process_logits(root_logp, cfg)
    b = _Builder(q_root)
    node_of: dict[tuple[int, ...], int] = {}
    q_of: dict[tuple[int, ...], torch.Tensor] = {(): q_root}
    todo = [()]  # paths of the current level that have children in spec
    while todo:
        for par in todo:
            q = q_of[par]
            ids = b.draw(node_of.get(par, -1), q, min(kids[par], int(_support(q))), generator)
            for r, i in enumerate(ids):
                node_of[par + (r,)] = i
        todo = [p for p in node_of if len(p) == len(todo[0]) + 1 and p in kids]
        if todo:
            out = process_logits(feed([node_of[p] for p in todo], b.view()), cfg)
            for p, row in zip(todo, out):
                q_of[p] = row
    return b.finish()


def build_sampled(root_logp: torch.Tensor, feed: FeedFn, config: TreeConfig, cfg: SamplingConfig,
                  generator: torch.Generator) -> SampledTree:
    """Sampling counterpart of :func:`specvlm.tree.build_tree`: dispatch on ``config.shape``.

    chain -> :func:`build_sampled_tree` with top_k = 1; static -> :func:`build_sampled_static`
    on ``STATIC_TREES[config.static_preset]``; dynamic -> :func:`build_sampled_tree` with
    ``config.depth``, ``config.top_k``, ``config.total_tokens``; all but static stop early at
    ``config.min_prob``.

    Raises:
        ValueError: unknown static preset.
    """
    if config.shape == "chain":
        return build_sampled_tree(root_logp, feed, config.depth, 1, generator, cfg, config.depth, config.min_prob)
    if config.shape == "static":
        if config.static_preset not in STATIC_TREES:
            raise ValueError(f"static tree {config.static_preset!r} is unknown: use one of {', '.join(STATIC_TREES)}.")
        return build_sampled_static(root_logp, feed, STATIC_TREES[config.static_preset], generator, cfg)
    return build_sampled_tree(root_logp, feed, config.depth, config.top_k, generator, cfg, config.total_tokens,
                              config.min_prob)


def sampled_accept(st: SampledTree, target_logits: torch.Tensor, cfg: SamplingConfig,
                   generator: torch.Generator) -> tuple[list[int], int]:
    """Sampling counterpart of :func:`specvlm.tree.greedy_accept` for the decode loop.

    Args:
        st: the sampled tree (N nodes) and its draft rows.
        target_logits: float (N+1, V) verify-forward logits (row 0 after the root).
        cfg: the target's sampling config (the same as vanilla sampling uses).
        generator: the request's generator.

    Returns:
        (accepted node indices root-first, next token id).
    """
    probs = process_logits(target_logits, cfg)
    return verify_tree(st.tree.parents, st.tree.tokens, probs, st.draft_probs.to(probs.device), generator)

