"""One drafting interface: build a draft tree, then accept against the target's logits.

A :class:`Drafter` has two methods, like transformers' candidate generators:
:meth:`Drafter.draft` builds one step's tree with the draft model (through a draft runner's
``feed_pending`` / ``feed_nodes`` / ``rollback``), and :meth:`Drafter.accept` picks the accepted
path and the next token from the target's verify logits. Two implementations:

* :class:`GreedyDrafter` (temperature 0): deterministic top-k children (EAGLE-2 dynamic trees,
  static trees of child ranks, chains) and greedy acceptance (the longest path that matches the
  target's argmax). Greedy output equals vanilla greedy output.
* :class:`SampledDrafter` (temperature > 0): children drawn without replacement from the draft's
  processed distribution and recursive rejection sampling (:func:`specvlm.sampling.verify_tree`),
  so the output keeps the target's distribution exactly.

The tree shape (``TreeConfig.shape``) is dispatched once, in :meth:`Drafter.build`; static trees
share one builder whose child choice is the drafter's (:meth:`Drafter.pick`).

Source: EAGLE-2 (Li et al. 2024) Sec. 4 (dynamic trees); Jeon et al. 2024, "Recursive
Speculative Decoding" (sampled trees); SpecVLM (arXiv 2508.16201) Sec. 3.3; docs/design.md §4.8-4.11.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import torch

from specvlm.config import DecodeConfig, SamplingConfig, TreeConfig
from specvlm.sampling import _draw, process_logits, verify_tree
from specvlm.tree import DraftTree, FeedFn, static_paths

NextFn = Callable[[int, int], torch.Tensor]
"""feed_next(token, depth) -> float32 (vocab,) draft log-probs after one chain node: the child of
the node fed just before (of the root at depth 1); see ``FastDraftRunner.feed_next``."""


@dataclass
class Draft:
    """One step's drafted tree and what its verification needs.

    Attributes:
        tree: the drafted tree (N nodes, parents-first; siblings in the order they were picked).
        draft_probs: float32 (N+1, Vd) for sampled drafting: row 0 = the distribution the root's
            children were drawn from, row 1+i = node i's (zeros for nodes without children);
            None for greedy drafting.
    """

    tree: DraftTree
    draft_probs: torch.Tensor | None = None


# --------------------------------------------------------------------------- padded vocabularies
def draft_substitute(pair: Any) -> tuple[int, int]:
    """How the draft embeds target tokens it has no row for: (draft rows, substitute id).

    In Std-SD the target's LM head can be larger than the draft's embedding table (padded
    vocabularies: Qwen2.5-VL-7B 152,064 vs 3B 151,936). The target may emit such an id (sampled,
    or greedy when its head favours a padding row); the draft then sees the tokenizer's pad id
    in its place (else its unk id, else 0). Only the draft's context changes, so later drafts
    may be accepted less often; the target still decides every token, so the output does not.

    Args:
        pair: the ModelPair.

    Returns:
        (Vd, substitute): ids >= Vd are replaced by ``substitute`` (< Vd) before the draft
        embeds them.

    Source: docs/design.md §4 (padded vocabularies within a family).
    """
    rows = int(pair.draft.get_input_embeddings().weight.shape[0])
    tok = getattr(pair.processor, "tokenizer", None)
    for name in ("pad_token_id", "unk_token_id"):
        tid = getattr(tok, name, None)
        if isinstance(tid, int) and 0 <= tid < rows:
            return rows, tid
    return rows, 0


def for_draft(tokens: list[int], rows: int, substitute: int) -> list[int]:
    """``tokens`` with every id >= ``rows`` replaced by ``substitute`` (see :func:`draft_substitute`)."""
    return [t if t < rows else substitute for t in tokens]


# --------------------------------------------------------------------------- tree records
class _Nodes:
    """Drafted nodes in creation order (parents before children), with the rows their children came from."""

    def __init__(self, record_rows: bool):
        self.toks: list[int] = []
        self.pars: list[int] = []
        self.deps: list[int] = []
        self.scores: list[float] = []
        self.rows: dict[int, torch.Tensor] | None = {} if record_rows else None

    def add(self, parent: int, tokens: list[int], logq: list[float], row: torch.Tensor | None = None) -> list[int]:
        """Append children of ``parent`` (-1 = the root); returns their node ids."""
        if self.rows is not None and row is not None and tokens:
            self.rows[parent + 1] = row
        base = self.scores[parent] if parent >= 0 else 0.0
        depth = self.deps[parent] + 1 if parent >= 0 else 1
        out = []
        for t, lq in zip(tokens, logq):
            self.toks.append(int(t))
            self.pars.append(parent)
            self.deps.append(depth)
            self.scores.append(base + float(lq))
            out.append(len(self.toks) - 1)
        return out

    def append(self, parent: int, token: int, score: float) -> int:
        """Append one child of ``parent`` with an absolute cumulative score; returns its node id."""
        self.toks.append(int(token))
        self.pars.append(parent)
        self.deps.append(self.deps[parent] + 1 if parent >= 0 else 1)
        self.scores.append(float(score))
        return len(self.toks) - 1

    def view(self, keep: list[int] | None = None) -> DraftTree:
        """The tree of all nodes, or of ``keep`` (closed under ancestors) re-indexed parents-first."""
        order = range(len(self.toks)) if keep is None else sorted(set(keep), key=lambda i: (self.deps[i], i))
        new_of = {old: new for new, old in enumerate(order)}
        if not new_of:
            return DraftTree.empty()
        return DraftTree(torch.tensor([self.toks[i] for i in order], dtype=torch.long),
                         torch.tensor([new_of[self.pars[i]] if self.pars[i] >= 0 else -1 for i in order],
                                      dtype=torch.long),
                         torch.tensor([self.deps[i] for i in order], dtype=torch.long),
                         torch.tensor([self.scores[i] for i in order], dtype=torch.float32))

    def draft(self, root_row: torch.Tensor) -> Draft:
        """The finished Draft (with the recorded rows when recording)."""
        if self.rows is None:
            return Draft(self.view())
        probs = root_row.new_zeros(len(self.toks) + 1, root_row.numel())
        for r, q in self.rows.items():
            probs[r] = q
        return Draft(self.view(), probs)


# --------------------------------------------------------------------------- the interface
class Drafter:
    """Builds one step's draft tree and accepts it against the target's logits.

    Subclasses choose a node's children (:meth:`pick`), build dynamic trees (:meth:`dynamic`)
    and accept (:meth:`accept`); shape dispatch and static trees are shared.

    Args:
        tree: the tree shape.
    """

    record_rows = False

    def __init__(self, tree: TreeConfig):
        self.cfg = tree

    def draft(self, runner: Any, pending: list[int], root_pos: int) -> Draft:
        """One step's tree: feed the pending tokens, build, and roll the draft cache back.

        Args:
            runner: the request's draft runner (``feed_pending``, ``feed_nodes``, ``rollback``;
                :func:`specvlm.fastdraft.make_draft_runner`).
            pending: token ids not yet in the draft cache, ending with the root (ids the draft
                cannot embed already replaced: :func:`for_draft`).
            root_pos: the root's target position.

        Returns:
            The Draft; the runner's cache holds the pending tokens and no tree node.
        """
        root_logp = runner.feed_pending(pending, root_pos)
        try:
            return self.build(root_logp, runner.feed_nodes, getattr(runner, "feed_next", None))
        finally:
            runner.rollback()

    def build(self, root_logp: torch.Tensor, feed: FeedFn, feed_next: NextFn | None = None) -> Draft:
        """Dispatch on the tree shape: chain (top_k 1), static (``static_preset``) or dynamic.

        Args:
            root_logp: float (Vd,) draft log-probs after the root.
            feed: runs the draft on nodes whose ancestors are fed (:data:`specvlm.tree.FeedFn`).
            feed_next: runs the draft on one chain node (:data:`NextFn`), the cheaper call a
                greedy chain uses; None = chains go through ``feed`` too.

        Raises:
            ValueError: unknown static preset, or a preset with orphans or gaps in its ranks.
        """
        c = self.cfg
        if c.shape == "static":
            return self.static(root_logp, feed, static_paths(c.static_preset))
        if c.shape == "chain":
            return self.chain(root_logp, feed, feed_next, c.depth, c.min_prob)
        return self.dynamic(root_logp, feed, c.depth, c.top_k, c.total_tokens, c.min_prob)

    def row(self, logits: torch.Tensor) -> torch.Tensor:
        """The distribution children are picked from (greedy: the log-probs themselves)."""
        return logits.float()

    def pick(self, row: torch.Tensor, k: int) -> tuple[list[int], list[float]]:
        """Up to ``k`` distinct children of a node and their log-scores (draw order)."""
        raise NotImplementedError

    def dynamic(self, root_logp: torch.Tensor, feed: FeedFn, depth: int, top_k: int, total_tokens: int,
                min_prob: float) -> Draft:
        """A dynamic tree (see the subclasses)."""
        raise NotImplementedError

    def chain(self, root_logp: torch.Tensor, feed: FeedFn, feed_next: NextFn | None, depth: int,
              min_prob: float) -> Draft:
        """A chain: the dynamic tree with one child per node (``top_k`` = 1, ``depth`` nodes)."""
        return self.dynamic(root_logp, feed, depth, 1, depth, min_prob)

    def accept(self, draft: Draft, target_logits: torch.Tensor) -> tuple[list[int], int]:
        """(accepted node indices root-first, next token id) from verify logits float (N+1, V)."""
        raise NotImplementedError

    def static(self, root_logp: torch.Tensor, feed: FeedFn, spec: list[tuple[int, ...]]) -> Draft:
        """Static tree: path (r_1, ..., r_d) is the r_d-th child picked for path (r_1, ..., r_{d-1}).

        Each node's child count is fixed by ``spec`` (capped by what :meth:`pick` can give, so a
        sampled node with a small support has fewer children, dropping their subtrees); the draft
        is fed once per level with the nodes that have children.

        Args:
            root_logp: float (Vd,) draft log-probs after the root.
            feed: see :meth:`build`.
            spec: rank paths (:data:`specvlm.tree.STATIC_TREES`); every prefix present, the
                children of each path ranked 0..m-1 without gaps.

        Raises:
            ValueError: a path's prefix is missing or a node's child ranks have gaps.
        """
        kids = _child_counts(spec)
        root = self.row(root_logp)
        nodes = _Nodes(self.record_rows)
        node_of: dict[tuple[int, ...], int] = {}
        row_of: dict[tuple[int, ...], torch.Tensor] = {(): root}
        todo: list[tuple[int, ...]] = [()]  # paths of the current level that have children in spec
        while todo:
            for par in todo:
                toks, logq = self.pick(row_of[par], kids[par])
                for r, i in enumerate(nodes.add(node_of.get(par, -1), toks, logq, row_of[par])):
                    node_of[par + (r,)] = i
            todo = [p for p in node_of if len(p) == len(todo[0]) + 1 and p in kids]
            if todo:
                out = self.row(feed([node_of[p] for p in todo], nodes.view()))
                for p, r in zip(todo, out):
                    row_of[p] = r
        return nodes.draft(root)


def _child_counts(spec: list[tuple[int, ...]]) -> dict[tuple[int, ...], int]:
    """Children per path of a static tree spec; raises ValueError for orphans and rank gaps."""
    have = set(spec)
    kids: dict[tuple[int, ...], int] = {}
    for p in sorted(have, key=lambda q: (len(q), q)):
        if len(p) > 1 and p[:-1] not in have:
            raise ValueError(f"static tree path {p} has no parent {p[:-1]} in the tree.")
        kids[p[:-1]] = kids.get(p[:-1], 0) + 1
    for par, m in kids.items():
        if any(par + (r,) not in have for r in range(m)):
            raise ValueError(f"static tree children of {par} must be ranked 0..{m - 1} without gaps.")
    return kids


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
            feed: runs the draft on frontier nodes (see :data:`specvlm.tree.FeedFn`).
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
        """The draft's processed distribution q (:func:`specvlm.sampling.process_logits`)."""
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

        Exactness (:func:`specvlm.sampling.verify_tree`): a node's child count depends only on
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
        raise ValueError("sampled drafting needs the request's generator: pass specvlm.sampling.make_generator(cfg).")
    return SampledDrafter(config.tree, config.sampling, generator)
