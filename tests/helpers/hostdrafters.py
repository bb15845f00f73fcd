"""The two drafters and their choice: greedy top-k trees, and sampled trees with rejection sampling.

* :class:`GreedyDrafter` (temperature 0): deterministic top-k children and greedy acceptance
  (:func:`greedy_accept`, the longest path that matches the target's argmax).
* :class:`SampledDrafter` (temperature > 0): children drawn without replacement from the draft's
  processed distribution and recursive rejection sampling (:func:`specvlm.spec.sampling.verify_tree`).

:func:`make_drafter` picks one per request. The shared machinery (:class:`~specvlm.spec.drafting.Drafter`,
tree shapes) is in :mod:`specvlm.spec.drafting`.

Source: EAGLE-2 (Li et al. 2024) Sec. 4; Jeon et al. 2024, "Recursive Speculative Decoding";
docs/design.md §4.8-4.11.
"""
from __future__ import annotations

import math

import torch

from specvlm.config import DecodeConfig, SamplingConfig, TreeConfig
from helpers.hostdrafting import Draft, Drafter, NextFn, _Nodes
from specvlm.spec.sampling import process_logits

from helpers.hostsampling import _draw, verify_tree
from helpers.hosttree import DraftTree, FeedFn


# --------------------------------------------------------------------------- greedy
def greedy_accept(tree: DraftTree, target_tokens: torch.Tensor) -> tuple[list[int], int]:
    """Longest path whose drafted tokens equal the target's greedy tokens.

    Args:
        tree: the verified tree (N nodes).
        target_tokens: int64 (N+1,): the target's argmax after the root (row 0) and after each node.

    Returns:
        (accepted node indices root-first, bonus token id). Children of one node have distinct
        tokens, so the matching path is unique.

    Source: SpecInfer / Medusa tree verification; docs/design.md §4.9.
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


class GreedyDrafter(Drafter):
    """Deterministic top-k drafting and greedy acceptance (temperature 0).

    Source: EAGLE-2 (Li et al. 2024) Sec. 4.1-4.2; docs/design.md §4.8-4.9.
    """

    def pick(self, row: torch.Tensor, k: int) -> tuple[list[int], list[float]]:
        """The ``k`` most probable children (log-prob order)."""
        lp, tok = row.topk(min(k, row.numel()))
        return tok.tolist(), lp.tolist()

    def dynamic(self, root_logp: torch.Tensor, feed: FeedFn, depth: int, top_k: int, total_tokens: int,
                min_prob: float = 0.0) -> Draft:
        """EAGLE-2 dynamic tree.

        Level 1 = the root's top-k children. At each further level the frontier (at most
        ``top_k`` nodes) is fed to the draft in one forward; each frontier node proposes its
        top-k children, scored by cumulative log-probability, and the best ``top_k`` children
        form the next frontier. Finally all drafted nodes are reranked by cumulative
        log-probability and the best ``total_tokens`` are kept, with their ancestors.

        Args:
            root_logp: float (Vd,) draft log-probs after the root.
            feed: runs the draft on frontier nodes (see :data:`specvlm.spec.tree.FeedFn`).
            depth: levels (max drafted tokens on a path).
            top_k: children per node and frontier width.
            total_tokens: nodes kept after reranking.
            min_prob: stop before a level whose best frontier node has a cumulative draft
                probability below this (0 = never stop early; see ``TreeConfig.min_prob``).

        Returns:
            Draft whose tree has at most ``total_tokens`` nodes (ancestors of kept nodes kept).

        Source: EAGLE-2 (Li et al. 2024), Sec. 4.1-4.2; early stop: Mamou et al. 2024 (arXiv 2405.04304).
        """
        min_logp = math.log(min_prob) if min_prob > 0 else -math.inf
        nodes = _Nodes(False)
        lp, tok = (t.cpu() for t in root_logp.float().topk(min(top_k, root_logp.numel())))
        frontier = nodes.add(-1, tok.tolist(), lp.tolist())
        for d in range(2, depth + 1):
            if max(nodes.scores[i] for i in frontier) < min_logp:
                break
            logp = feed(frontier, nodes.view()).float()
            base = torch.tensor([nodes.scores[i] for i in frontier])[:, None]
            k = min(top_k, logp.shape[-1])
            child_lp, child_tok = (t.cpu() for t in logp.topk(k, dim=-1))  # one device sync per level
            cand = (base + child_lp).flatten()
            order = torch.argsort(cand, descending=True, stable=True).tolist()
            new = []
            for flat in order:
                fi, ci = divmod(flat, k)
                new.append(nodes.append(frontier[fi], int(child_tok[fi, ci]), float(cand[flat])))
            frontier = new[:top_k]
        order = sorted(range(len(nodes.toks)), key=lambda i: (-nodes.scores[i], i))[:total_tokens]
        keep: set[int] = set()
        for i in order:
            while i >= 0 and i not in keep:
                keep.add(i)
                i = nodes.pars[i]
        return Draft(nodes.view(list(keep)))

    def chain(self, root_logp: torch.Tensor, feed: FeedFn, feed_next: NextFn | None, depth: int,
              min_prob: float) -> Draft:
        """Greedy chain: each node is the draft's argmax after the previous one.

        The same tree as :meth:`dynamic` with ``top_k`` = 1 (stop before a node whose parent's
        cumulative draft probability is below ``min_prob``), built with one single-query draft
        forward per level (``feed_next``) and no per-level tree bookkeeping.

        Args:
            root_logp: float (Vd,) draft log-probs after the root.
            feed: used only when ``feed_next`` is None.
            feed_next: ``feed_next(token, depth)`` -> float32 (Vd,) log-probs after that node.
            depth: at most this many nodes.
            min_prob: early-stop threshold (``TreeConfig.min_prob``; 0 = never).

        Returns:
            Draft whose tree is a chain of 1..``depth`` nodes.

        Source: EAGLE-2 (Li et al. 2024) Sec. 4 with one child per node; early stop: Mamou et
        al. 2024 (arXiv 2405.04304).
        """
        if feed_next is None:
            return super().chain(root_logp, feed, feed_next, depth, min_prob)
        min_logp = math.log(min_prob) if min_prob > 0 else -math.inf
        lp, tok = root_logp.max(-1)
        toks, scores = [int(tok)], [float(lp)]
        while len(toks) < depth and scores[-1] >= min_logp:
            lp, tok = feed_next(toks[-1], len(toks)).max(-1)
            toks.append(int(tok))
            scores.append(scores[-1] + float(lp))
        return Draft(DraftTree.chain(toks, scores))

    def accept(self, draft: Draft, target_logits: torch.Tensor) -> tuple[list[int], int]:
        """Greedy acceptance on the target's argmax per row (:func:`greedy_accept`)."""
        return greedy_accept(draft.tree, target_logits.argmax(-1).cpu())


# --------------------------------------------------------------------------- sampled
class SampledDrafter(Drafter):
    """Children drawn without replacement; recursive rejection sampling (temperature > 0).

    Args:
        tree: the tree shape.
        sampling: the sampling config (target's and draft's processing: temperature, nucleus).
        generator: the request's generator (draws and acceptance consume it in a fixed order).

    Source: Jeon et al. 2024, "Recursive Speculative Decoding", Sec. 3 and Algorithm 1.
    """

    record_rows = True

    def __init__(self, tree: TreeConfig, sampling: SamplingConfig, generator: torch.Generator):
        super().__init__(tree)
        self.sampling, self.gen = sampling, generator

    def row(self, logits: torch.Tensor) -> torch.Tensor:
        """The draft's processed distribution q (:func:`specvlm.spec.sampling.process_logits`)."""
        return process_logits(logits, self.sampling)

    def pick(self, row: torch.Tensor, k: int) -> tuple[list[int], list[float]]:
        """min(k, support) sequential draws without replacement from q, with their log q."""
        toks = _draw(row, min(k, int((row > 0).sum())), self.gen)
        return toks, row[toks].log().tolist() if toks else []

    def dynamic(self, root_logp: torch.Tensor, feed: FeedFn, depth: int, top_k: int, total_tokens: int,
                min_prob: float = 0.0) -> Draft:
        """Dynamic (EAGLE-2-like) tree with children sampled without replacement.

        Level 1: the root's children, min(top_k, support, total_tokens) draws from q_root. Level
        d >= 2: the frontier = the best ``top_k`` nodes of level d-1 by cumulative log q is fed to
        the draft in one call; each candidate slot (frontier node v, j-th draw) gets the key
        score(v) + log(j-th largest q_v), and the best min(top_k, remaining budget) slots decide
        how many children each frontier node gets (always a prefix j = 0..c-1, since keys fall
        with j); then the children are drawn. So each level has at most ``top_k`` nodes, and the
        tree at most ``total_tokens``.

        Exactness (:func:`specvlm.spec.sampling.verify_tree`): a node's child count depends only on
        nodes drawn at earlier levels and on q_v, never on the values of its own children, and
        the children are sequential draws without replacement from q_v. EAGLE-2's final rerank by
        the drawn children's own scores would violate this and is therefore not done; the
        ``min_prob`` stop also uses only nodes already drawn.

        Args / Returns: as :meth:`GreedyDrafter.dynamic`; the Draft carries the draft rows.

        Source: EAGLE-2 (Li et al. 2024) Sec. 4 for the frontier expansion; Jeon et al. 2024 for
        drawing siblings without replacement.
        """
        budget = int(total_tokens)
        q_root = self.row(root_logp)
        nodes = _Nodes(True)
        level = nodes.add(-1, *self.pick(q_root, min(top_k, budget)), q_root)
        budget -= len(level)
        for _ in range(2, depth + 1):
            if budget <= 0 or not level:
                break
            frontier = sorted(level, key=lambda i: (-nodes.scores[i], i))[:top_k]
            if min_prob > 0 and nodes.scores[frontier[0]] < math.log(min_prob):
                break
            q = self.row(feed(frontier, nodes.view()))
            counts = _slot_counts(q, [nodes.scores[i] for i in frontier], top_k, budget)
            level = []
            for f, node in enumerate(frontier):
                level += nodes.add(node, *self.pick(q[f], counts[f]), q[f])
            budget -= len(level)
        return nodes.draft(q_root)

    def accept(self, draft: Draft, target_logits: torch.Tensor) -> tuple[list[int], int]:
        """Recursive rejection sampling on the processed target probabilities: exact target law."""
        probs = process_logits(target_logits.float().cpu(), self.sampling)
        return verify_tree(draft.tree.parents, draft.tree.tokens, probs, draft.draft_probs.to(probs.device),
                           self.gen)


def _slot_counts(q: torch.Tensor, scores: list[float], top_k: int, budget: int) -> list[int]:
    """Children per frontier node: the best min(top_k, budget) slots by score + log(j-th largest q)."""
    k = min(top_k, q.shape[-1])
    top_q = q.topk(k, dim=-1).values.clamp_min(0).log().cpu()
    slots = []
    for f, score in enumerate(scores):
        for j in range(min(k, int((q[f] > 0).sum()))):
            slots.append((-(score + float(top_q[f, j])), f, j))
    slots.sort()
    counts = [0] * len(scores)
    for _, f, _ in slots[:min(top_k, budget)]:
        counts[f] += 1
    return counts


def make_drafter(config: DecodeConfig, generator: torch.Generator | None = None) -> Drafter:
    """The drafter for a request: greedy at temperature 0, else sampled with the request's generator.

    Raises:
        ValueError: sampling without a generator.
    """
    if config.sampling.greedy:
        return GreedyDrafter(config.tree)
    if generator is None:
        raise ValueError("sampled drafting needs the request's generator: pass specvlm.spec.sampling.make_generator(cfg).")
    return SampledDrafter(config.tree, config.sampling, generator)
