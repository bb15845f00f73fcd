"""The draft's KV-cache owner during one request: pending tokens, tree feeds, rollback.

:class:`DraftRunner` runs the draft through transformers' modules (:func:`lm_forward`);
:func:`make_draft_runner` picks the fused :class:`~specvlm.engine.fastdraft.FastDraftRunner`
where it applies and this runner elsewhere.

Source: docs/design.md §4.8.
"""
from __future__ import annotations

import logging
from typing import Any

import torch

from specvlm.engine import kv
from specvlm.engine.fastdraft import FastDraftRunner, FastDraftUnsupported
from specvlm.engine.forward import device_of, embed_tokens, lm_forward
from specvlm.models.pair import ModelPair
from specvlm.spec.tree import DraftTree, additive_mask, feed_mask

log = logging.getLogger(__name__)


class DraftRunner:
    """Owns the draft's KV cache during one request: pending tokens, tree feeds, rollback.

    Args:
        pair: the model pair.
        cache: draft cache after draft prefill.
        rope_dims: R, rows of the position ids.
        pos_offset: draft position - target position for the same token (> 0 when the draft's
            prompt holds a subtitle transcript the target's does not).
    """

    def __init__(self, pair: ModelPair, cache: Any, rope_dims: int, pos_offset: int = 0):
        self.pair, self.cache, self.R = pair, cache, rope_dims
        self.offset = int(pos_offset)
        self.model, self.ad = pair.draft, pair.draft_adapter
        self.base = kv.cache_length(cache)
        self.root_pos = 0
        self.slot: dict[int, int] = {}

    def _logp(self, logits: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(logits[..., : self.pair.shared_vocab].float(), -1)

    def feed_pending(self, tokens: list[int], root_pos: int) -> torch.Tensor:
        """Feed tokens not yet in the draft cache, ending with the root at target position ``root_pos``.

        Returns:
            float32 (vocab,) draft log-probs after the root.
        """
        n = len(tokens)
        root_pos = root_pos + self.offset
        pos = torch.arange(root_pos - n + 1, root_pos + 1).expand(self.R, n)
        logits = lm_forward(self.model, self.ad, embed_tokens(self.model, tokens), pos, self.cache)
        self.base = kv.cache_length(self.cache)
        self.root_pos = root_pos
        self.slot = {}
        return self._logp(logits[-1])

    def feed_nodes(self, nodes: list[int], tree: DraftTree) -> torch.Tensor:
        """Feed tree nodes whose ancestors are already fed; returns float32 (F, vocab) log-probs.

        A single node that may see every fed node (always so in a chain) runs without a mask,
        through the plain decode path: no additive 4-D mask to build, fold and apply.
        """
        n_fed, F = len(self.slot), len(nodes)
        allowed = feed_mask(tree.parents, nodes, {n: s - self.base for n, s in self.slot.items()})
        if F == 1 and bool(allowed.all()):
            mask = None  # a chain node sees every cached token: the plain decode path (no mask to build or apply)
        else:
            dtype = self.model.get_input_embeddings().weight.dtype
            mask = additive_mask(allowed, self.base, dtype, device_of(self.model))
        toks = tree.tokens[nodes]
        pos = (self.root_pos + tree.depths[nodes]).expand(self.R, F)
        logits = lm_forward(self.model, self.ad, embed_tokens(self.model, toks), pos, self.cache, mask=mask,
                               rows=slice(None))
        for r, node in enumerate(nodes):
            self.slot[node] = self.base + n_fed + r
        return self._logp(logits)

    def feed_next(self, token: int, depth: int) -> torch.Tensor:
        """Feed one chain node (the child of the last fed node, or of the root), at ``depth``.

        Returns:
            float32 (vocab,) draft log-probs after the node.
        """
        pos = torch.full((self.R, 1), self.root_pos + depth)
        logits = lm_forward(self.model, self.ad, embed_tokens(self.model, [token]), pos, self.cache)
        return self._logp(logits[-1])

    def rollback(self) -> None:
        """Drop every tree node from the draft cache (back to after the pending tokens)."""
        kv.truncate(self.cache, self.base)
        self.slot = {}


def make_draft_runner(pair: Any, cache: Any, rope_dims: int, pos_offset: int = 0, fast: bool = True) -> Any:
    """The draft runner for one request: :class:`FastDraftRunner` where supported, else DraftRunner.

    Args:
        pair: the model pair; cache: the draft cache after draft prefill; rope_dims: R;
        pos_offset: draft position - target position; fast: False forces DraftRunner.

    Returns:
        An object with ``feed_pending``, ``feed_nodes`` and ``rollback``.
    """
    if fast:
        try:
            return FastDraftRunner(pair, cache, rope_dims, pos_offset)
        except FastDraftUnsupported as e:
            log.info("fast draft runner not used: %s", e)
    return DraftRunner(pair, cache, rope_dims, pos_offset)
