"""Reference lossless sampling on the host: draws without replacement, residuals and recursive rejection
sampling over a tree (the device versions, :mod:`specvlm.spec.deviceaccept`, are checked against them).

Source: Leviathan et al. 2023; Chen et al. 2023; Jeon et al. 2024 ("Recursive Speculative Decoding");
docs/design.md §4.11.
"""
from __future__ import annotations

import torch

from specvlm.spec.sampling import _uniform, sample


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

    Why it is exact: one level of step 2 is a standard rejection step (Leviathan et al. 2023,
    Algorithm 1: P(emit x) = min(p, q)(x) + (1 - sum min(p, q)) * (p - q)+(x) / sum (p - q)+ = p(x)):
    given the earlier siblings, x_j ~ q_j, so the token emitted by "accept x_j or else sample
    from normalize(max(0, p - q_j))" has law p. A chain is the tree with one child per node. The "or else" branch is realised by recursing on
    the next sibling with target p' = residual(p, q_j) and ends with a sample from the final
    residual, which by induction on the number of remaining siblings emits a token with law p'.
    Hence the token emitted at a node has exactly the target's law p given the prefix, and by
    the chain rule so does every generated sequence. Drawing siblings *with* replacement from
    the full q, or taking the deterministic top-k with the full q as the proposal
    (a deliberately naive verifier in the tests), breaks the premise "x_j ~ q_j" and biases the output. A token
    rejected as x_j has p' (x_j) = 0 afterwards, so it is never emitted twice nor sampled after.

    Requirements on the tree (met by :class:`specvlm.spec.drafters.SampledDrafter`):
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
        (accepted node indices root-first, next token id), like :func:`specvlm.spec.drafters.greedy_accept`.

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
