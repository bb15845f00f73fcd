"""Reference drafters on the host (the device trees are checked against them): build a draft tree, then
accept against the target's logits.

A :class:`Drafter` has two methods, like transformers' candidate generators:
:meth:`Drafter.draft` builds one step's tree with the draft model (through a draft runner's
``feed_pending`` / ``feed_nodes`` / ``rollback``), and :meth:`Drafter.accept` picks the accepted
path and the next token from the target's verify logits. Two implementations:

* :class:`GreedyDrafter` (temperature 0): deterministic top-k children (EAGLE-2 dynamic trees,
  static trees of child ranks, chains) and greedy acceptance (the longest path that matches the
  target's argmax). Greedy output equals vanilla greedy output.
* :class:`SampledDrafter` (temperature > 0): children drawn without replacement from the draft's
  processed distribution and recursive rejection sampling (:func:`specvlm.spec.sampling.verify_tree`),
  so the output keeps the target's distribution exactly.

The tree shape (``TreeConfig.shape``) is dispatched once, in :meth:`Drafter.build`; static trees
share one builder whose child choice is the drafter's (:meth:`Drafter.pick`).

Source: EAGLE-2 (Li et al. 2024) Sec. 4 (dynamic trees); Jeon et al. 2024, "Recursive
Speculative Decoding" (sampled trees); SpecVLM (arXiv 2508.16201) Sec. 3.3; docs/design.md §4.8-4.11.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

from specvlm.config import TreeConfig
from specvlm.spec.tree import child_counts as _child_counts
from specvlm.spec.tree import static_paths

from helpers.hosttree import DraftTree, FeedFn

NextFn = Callable[[int, int], torch.Tensor]
"""feed_next(token, depth) -> float32 (vocab,) draft log-probs after one chain node: the child of
the node fed just before (of the root at depth 1); a draft runner's ``feed_next``."""


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
                :func:`specvlm.engine.draft.make_draft_runner`).
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
            feed: runs the draft on nodes whose ancestors are fed (:data:`specvlm.spec.tree.FeedFn`).
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
            spec: rank paths (:data:`specvlm.spec.tree.STATIC_TREES`); every prefix present, the
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
