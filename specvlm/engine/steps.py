"""Fixed-shape step functions over static KV buffers: plain decode, the draft's tree, verify.

Each step reads and writes only device tensors of fixed shapes held in its state
(:class:`VanillaState`, :class:`SpecState`): token ids, positions, lengths, the drafted tree and a
packed output row. No step reads a value to the host; the decode loop
(:mod:`specvlm.engine.loop`) reads the packed output once per step. The same functions run
eagerly on the CPU and are captured in CUDA graphs on a GPU (:mod:`specvlm.engine.graphs`).

A model forward (:func:`static_forward`) goes through transformers' modules with a
:class:`~specvlm.engine.statickv.StaticKV` cache and carries a
:class:`~specvlm.models.staticattn.StaticAttn` to the attention (the ``specvlm_static`` keyword).

Source: docs/design.md §4.8-4.10 and §4.13 (gpt-fast's decode_one_token, SGLang's captured EAGLE
draft and verify).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

from specvlm.models.attention import STATIC_KWARG
from specvlm.models.staticattn import StaticAttn, allowed_bias, causal_bias, key_bias
from specvlm.config import SamplingConfig, TreeConfig
from specvlm.engine.sampledsteps import (Noise, SampledShape, accept_sampled, draft_sampled, new_noise,
                                         sample_from, sampled_shape)
from specvlm.engine.staticdraft import FusedDraft, fused_forward
from specvlm.engine.statictarget import FusedTarget, target_forward
from specvlm.engine.statickv import StaticKV
from specvlm.spec.deviceaccept import chain_accept, greedy_accept, pack, path_tokens
from specvlm.spec.devicestatic import StaticPlan, static_plan, static_tree
from specvlm.spec.devicetree import (DeviceFeed, NextFeed, Topology, ancestor_matrix, chain_tree, dynamic_tree,
                                     tree_topology)
from specvlm.spec.tree import static_paths


@dataclass
class ModelSide:
    """One model's view for the steps: the model, its adapter, its static cache, its positions.

    Attributes:
        model: a ``...ForConditionalGeneration`` model; adapter: its family adapter.
        cache: the request's static cache.
        rope_dims: R, rows of the position ids.
        dtype: the model's float dtype.
        fused: the draft's fused forward (:mod:`specvlm.engine.staticdraft`), the target's
            (:mod:`specvlm.engine.statictarget`), or None = the module stack.
        tap: handed every layer's queries of each forward (:attr:`StaticAttn.tap`), or None.
        window: a host bound on the slots a fused draft's forwards can see (set per step on a CPU), or None.

    Source: docs/design.md §4.13.
    """

    model: Any
    adapter: Any
    cache: StaticKV
    rope_dims: int
    dtype: torch.dtype
    fused: FusedDraft | FusedTarget | None = None
    tap: Callable[[torch.Tensor, float], None] | None = None
    window: int | None = None


def static_forward(side: ModelSide, tokens: torch.Tensor, positions: torch.Tensor, block_index: torch.Tensor | None,
                   block_bias: torch.Tensor | None, write: torch.Tensor | None = None,
                   visible: torch.Tensor | None = None, bias: torch.Tensor | None = None) -> torch.Tensor:
    """One language-model forward over n tokens into the static cache (the length is not advanced).

    Args:
        side: the model and its cache.
        tokens: int64 (n,) token ids (the model can embed them).
        positions: int64 (n,) positions (every M-RoPE row the same, as for text tokens).
        block_index: int64 (F,) buffer slots of the block keys (see :class:`StaticAttn`), or None.
        block_bias: float (1, 1, n, F) bias of the n queries over the block, or None.
        write: int64 (n,) slots to write the n tokens to; None = ``length + arange(n)``.
        visible: with no block, int64 scalar: every query sees slots [0, visible) (one token, or one
            chain node after its contiguous ancestors); None = slots below the length, plus the block.
        bias: the (1, 1, 1, cap) key bias of ``visible`` (:func:`key_bias`) when the step computed it
            already, else None.

    Returns:
        float (n, vocab) logits.

    Source: docs/design.md §4.13; transformers' ``AttentionInterface`` keywords.
    """
    model, cache = side.model, side.cache
    if bias is None:
        bias = key_bias(cache.length if visible is None else visible, cache.slots, side.dtype)
    sa = StaticAttn(bias, block_index, block_bias, side.tap)
    if side.fused is not None:
        slots = write if write is not None else cache.slots[: tokens.shape[0]] + cache.length
        if block_index is not None:
            sa = _one_mask(side.fused, sa, tokens.shape[0])
        return (target_forward(side.fused, cache, sa, tokens, positions, slots) if isinstance(side.fused, FusedTarget)
                else fused_forward(side.fused, cache, sa, tokens, positions, slots, side.window))
    emb = model.get_input_embeddings()(tokens[None])
    pos = side.adapter.lm_positions(positions[None].expand(side.rope_dims, -1))
    cache.cursor.write = write
    try:
        mask = block_bias if block_bias is not None else bias   # a 4-D mask: transformers builds none
        out = side.adapter.language_model(model)(inputs_embeds=emb, position_ids=pos, attention_mask=mask,
                                                 cache=cache, use_cache=True, **{STATIC_KWARG: sa})
    finally:
        cache.cursor.write = None
    return model.get_output_embeddings()(out.last_hidden_state[0])


ONE_MASK_ROWS = 24
"""Folded query rows (tokens x query heads per KV head) up to which a block forward on a CPU attends in one
masked attention call over the whole buffer instead of prefix + block merged by log-sum-exp (fewer ops per
layer; past it, the split is as fast or faster at long prompts: docs/benchmark.md, *The engine on a CPU*)."""


def _one_mask(fused: FusedDraft | FusedTarget, sa: StaticAttn, n: int) -> StaticAttn:
    """``sa`` as one (1, 1, G*n, cap) bias over the buffer (prefix bias with the block's columns set), folded
    per query head of a KV head (G), when G*n <= :data:`ONE_MASK_ROWS` on a CPU; else ``sa`` unchanged (on a
    GPU a float mask would keep SDPA off its flash kernel: the unmasked prefix and the block merge there).

    Source: docs/design.md §4.13 (tree attention over a static buffer).
    """
    heads, kv = (fused.dims.heads, fused.dims.kv_heads) if isinstance(fused, FusedDraft) else (fused.heads,
                                                                                             fused.kv_heads)
    g = heads // kv
    if g * n > ONE_MASK_ROWS or sa.key_bias.device.type != "cpu":
        return sa
    cap = sa.key_bias.shape[-1]
    full = sa.key_bias.expand(1, 1, n, cap).index_copy(-1, sa.block_index, sa.block_bias.to(sa.key_bias.dtype))
    if g > 1:
        full = full[:, :, None].expand(1, 1, g, n, cap).reshape(1, 1, g * n, cap)
    return StaticAttn(full, None, None, sa.tap)


# --------------------------------------------------------------------------- vanilla
@dataclass
class VanillaState:
    """Device state of plain decoding.

    Attributes:
        token: int64 (1,) the last emitted token (the next input).
        pos: int64 scalar, its position.
        out: float64 (2,) packed output of the last step: (next token, its logit margin).
        sampling: the sampling settings, None when greedy; noise: its noise buffers, or None.

    Source: gpt-fast ``decode_one_token`` (static inputs and outputs).
    """

    token: torch.Tensor
    pos: torch.Tensor
    out: torch.Tensor
    sampling: SamplingConfig | None = None
    noise: Noise | None = None


def vanilla_state(token: torch.Tensor, pos: int, device: torch.device,
                  sampling: SamplingConfig | None = None) -> VanillaState:
    """The state before the first decode step (``token`` int64 (1,) on ``device``).

    Source: docs/design.md §4.13.
    """
    sampled = sampling is not None and not sampling.greedy
    return VanillaState(token.clone(), torch.tensor(pos, dtype=torch.long, device=device),
                        torch.zeros(2, dtype=torch.float64, device=device), sampling if sampled else None,
                        new_noise(None, 0, device) if sampled else None)


def margin_of(logits: torch.Tensor) -> torch.Tensor:
    """float32 scalar: top-1 minus top-2 of float (V,) logits (as :func:`specvlm.analysis.metrics.logit_margin`).

    Source: docs/design.md §4.11 (the logit margin at a divergence).
    """
    top = logits.float().topk(2).values
    return top[0] - top[1]


def decode_step(side: ModelSide, st: VanillaState) -> None:
    """One decode step: feed ``st.token`` at ``st.pos``, write the next token (argmax, or a draw with
    ``st.noise`` when sampling) and the logit margin to ``st.out``.

    Afterwards ``st.token`` is the new token, ``st.pos`` its position and the cache one longer.

    Source: gpt-fast ``decode_one_token``; docs/design.md §4.9 (greedy = argmax).
    """
    cache = side.cache
    logits = static_forward(side, st.token, st.pos.view(1), None, None, visible=cache.length + 1)[-1]
    cache.advance(1)
    nxt = logits.argmax(-1, keepdim=True) if st.sampling is None else sample_from(logits, st.sampling, st.noise)
    st.token.copy_(nxt)
    st.pos.add_(1)
    st.out[0] = nxt[0].to(torch.float64)
    st.out[1] = margin_of(logits).to(torch.float64)


# --------------------------------------------------------------------------- speculative
@dataclass(frozen=True)
class TreeShape:
    """A draft tree's fixed shape for the static steps.

    Attributes:
        config: the tree settings (:class:`specvlm.config.TreeConfig`).
        nodes: N, nodes every step verifies (invalid ones included).
        depth: D, the longest path (accepted tokens per step at most).
        plan: the static tree's plan, or None.
        pending_bias: float (1, 1, D+1, D+1) causal bias of the pending tokens' feed.
        topology: the verified tree's :class:`Topology` when it is the same every step (a chain, a
            greedy static tree), else None (computed per step).

    Source: docs/design.md §4.8 and §4.13 (fixed tree sizes).
    """

    config: TreeConfig
    nodes: int
    depth: int
    vocab: int
    drafted: int
    pending_bias: torch.Tensor
    plan: StaticPlan | None = None
    sampled: SampledShape | None = None
    topology: Topology | None = None


def tree_shape(config: TreeConfig, vocab: int, device: torch.device,
               sampling: SamplingConfig | None = None, dtype: torch.dtype = torch.float32) -> TreeShape:
    """The fixed shape of ``config``'s trees over a draft vocabulary of ``vocab`` ids.

    Args:
        config: the tree; vocab: the vocabulary shared by draft and target; device: where plans live;
        sampling: the sampling settings (None or temperature 0: greedy trees);
        dtype: the models' float dtype (of the attention biases).

    Raises:
        ValueError: an unknown or malformed static preset.

    Source: docs/design.md §4.8 and §4.13.
    """
    plan = static_plan(static_paths(config.static_preset), device) if config.shape == "static" else None
    depth = len(plan.levels) if plan is not None else config.depth
    pend = causal_bias(depth + 1, dtype, device)
    if sampling is not None and not sampling.greedy:
        sh = sampled_shape(config, sampling, vocab, plan, depth)
        return TreeShape(config, sh.nodes, depth, vocab, sh.drafted, pend, plan, sh)
    if plan is not None:
        n = int(plan.parents.shape[0])
        return TreeShape(config, n, depth, vocab, n, pend, plan, topology=tree_topology(plan.parents, dtype))
    if config.shape == "chain":
        chain = tree_topology(torch.arange(-1, depth - 1, device=device), dtype)
        return TreeShape(config, depth, depth, vocab, depth, pend, topology=chain)
    k = min(config.top_k, vocab)
    drafted = k + (depth - 1) * k * k
    return TreeShape(config, min(config.total_tokens, drafted), depth, vocab, drafted, pend)


@dataclass
class SpecState:
    """Device state of speculative decoding (fixed shapes; D = max depth, N = tree nodes).

    Attributes:
        pending: int64 (D+1,) tokens not yet in the draft cache (draft-embeddable ids), padded.
        n_pending: int64 scalar, how many of ``pending`` are real (the last is the root).
        root: int64 (1,) the root as the target sees it (the last emitted token).
        pos: int64 scalar, the root's target position.
        tokens, parents: int64 (N,) the drafted tree (parents-first, -1 = child of the root);
        scores: float32 (N,) cumulative draft log-probs; valid: bool (N,) nodes that may be accepted
            (False past an early stop; every valid node before every invalid one).
        path: int64 (D,) the accepted node indices of the last verify, root-first, -1 padded.
        out: int64 (D + 3,) packed result of the last verify: (accepted count, accepted tokens
            padded to D, bonus) as :func:`specvlm.spec.deviceaccept.pack`, then the tree size.
        noise: the sampling noise buffers (:mod:`specvlm.engine.sampledsteps`), None when greedy.

    Source: docs/design.md §4.13; SGLang's EAGLE state buffers.
    """

    pending: torch.Tensor
    n_pending: torch.Tensor
    root: torch.Tensor
    pos: torch.Tensor
    tokens: torch.Tensor
    parents: torch.Tensor
    scores: torch.Tensor
    valid: torch.Tensor
    path: torch.Tensor
    out: torch.Tensor
    noise: Noise | None = None

    def tensors(self) -> list[torch.Tensor]:
        """Every state tensor (saved and restored around a CUDA graph's warm-up run)."""
        return [self.pending, self.n_pending, self.root, self.pos, self.tokens, self.parents, self.scores,
                self.valid, self.path, self.out]


def spec_state(first: int, pos: int, shape: TreeShape, draft_rows: int, substitute: int,
               device: torch.device) -> SpecState:
    """The state before the first speculative step: the prefill's token ``first`` at ``pos``.

    Source: docs/design.md §4.13.
    """
    def z(*size, dtype=torch.long):
        return torch.zeros(*size, dtype=dtype, device=device)
    d, n = shape.depth, shape.nodes
    pending = z(d + 1)
    pending[0] = first if first < draft_rows else substitute
    noise = new_noise(shape.sampled, shape.vocab, device) if shape.sampled is not None else None
    return SpecState(pending, torch.tensor(1, device=device), torch.tensor([first], device=device),
                     torch.tensor(pos, device=device), z(n), z(n), z(n, dtype=torch.float32),
                     z(n, dtype=torch.bool), z(d), z(d + 3), noise)


def _logp(logits: torch.Tensor, shared: int) -> torch.Tensor:
    return torch.log_softmax(logits[..., :shared].float(), -1)


def feed_pending(side: ModelSide, st: SpecState, offset: int, shared: int,
                 bias: torch.Tensor | None = None, root: bool = False) -> torch.Tensor:
    """Feed the pending tokens to the draft (all D+1 slots; the length advances by ``n_pending``).

    Args:
        side: the draft. st: the state. offset: draft position - target position.
        shared: vocabulary size shared with the target (log-probs are over it).
        bias: the (1, 1, D+1, D+1) causal bias (:attr:`TreeShape.pending_bias`), or None = built here.
        root: only the root is ever pending (a synced draft holds the rest, docs/design.md §4.14): one slot is fed.

    Returns:
        float32 (shared,) draft log-probs after the root.

    Source: docs/design.md §4.10 (the draft catches up on the accepted tokens).
    """
    cache, n = side.cache, st.pending.shape[0]
    if root:
        logits = static_forward(side, st.pending[:1], (st.pos + offset).view(1), None, None, visible=cache.length + 1)
        cache.advance(1)
        return _logp(logits[0], shared)
    ar = cache.slots[:n]
    positions = st.pos + offset - (st.n_pending - 1) + ar
    bias = causal_bias(n, side.dtype, ar.device) if bias is None else bias
    logits = static_forward(side, st.pending, positions, ar + cache.length, bias)
    cache.advance(st.n_pending)
    return _logp(logits.index_select(0, (st.n_pending - 1).view(1))[0], shared)


def _tree_feed(side: ModelSide, st: SpecState, offset: int, shared: int) -> DeviceFeed:
    """The draft on tree nodes (:data:`DeviceFeed`): drafted node i lives at slot length + i."""
    cache = side.cache
    prefix = key_bias(cache.length, cache.slots, side.dtype)   # the same at every level of the step

    def feed(tokens: torch.Tensor, parents: torch.Tensor, front: torch.Tensor) -> torch.Tensor:
        slots = cache.slots[: tokens.shape[0]] + cache.length
        anc = ancestor_matrix(parents)
        depth = anc.sum(-1)[front]
        logits = static_forward(side, tokens[front], st.pos + offset + depth, slots,
                                allowed_bias(anc[front], side.dtype), write=slots[front], bias=prefix)
        return _logp(logits, shared)
    return feed


def _chain_feed(side: ModelSide, st: SpecState, offset: int, shared: int, shape_depth: int) -> NextFeed:
    """The draft on one chain node (:data:`NextFeed`): node d (1-based) lives at slot length + d - 1."""
    cache = side.cache
    d_max = max(shape_depth, 2)
    visible = cache.length + cache.slots[1:d_max]                       # node d sees slots [0, length + d)
    rows = key_bias(visible[:, None], cache.slots, side.dtype).view(d_max - 1, 1, 1, 1, -1)   # one op per step
    slots, positions = visible - 1, st.pos + offset + cache.slots[1:d_max]

    def feed_next(tok: torch.Tensor, d: int) -> torch.Tensor:
        logits = static_forward(side, tok.view(1), positions[d - 1:d], None, None, write=slots[d - 1:d],
                                bias=rows[d - 1])
        return _logp(logits[-1], shared)
    return feed_next


def draft_step(side: ModelSide, st: SpecState, shape: TreeShape, offset: int, shared: int, root: bool = False) -> None:
    """Feed the pending tokens (``root``: only the root, :func:`feed_pending`), draft the whole tree into ``st``
    (every level), roll the draft back.

    Tree nodes are written past the draft's length, so the rollback is not advancing over them.

    Source: docs/design.md §4.8; EAGLE-2 (Li et al. 2024) Sec. 4.
    """
    root_logp = feed_pending(side, st, offset, shared, shape.pending_bias, root)
    c = shape.config
    if shape.sampled is not None:
        tree = draft_sampled(root_logp, _tree_feed(side, st, offset, shared), c, shape.plan, shape.sampled,
                             shape.depth, st.noise)
    elif c.shape == "chain":
        tree = chain_tree(root_logp, _chain_feed(side, st, offset, shared, c.depth), c.depth, c.min_prob)
    elif c.shape == "static":
        tree = static_tree(root_logp, _tree_feed(side, st, offset, shared), shape.plan)
    else:
        tree = dynamic_tree(root_logp, _tree_feed(side, st, offset, shared), c.depth, c.top_k, c.total_tokens,
                            c.min_prob)
    st.tokens.copy_(tree.tokens)
    st.parents.copy_(tree.parents)
    st.scores.copy_(tree.scores)
    st.valid.copy_(tree.valid)


def verify_step(side: ModelSide, st: SpecState, shape: TreeShape, draft_rows: int, substitute: int) -> None:
    """Verify root + tree in one target forward, accept (greedy, or recursive rejection sampling when
    sampled), commit, write ``st.out``; prepare the next step's pending tokens, root and position.

    Source: docs/design.md §4.9-4.11 (acceptance; commit = root + accepted path in path order).
    """
    cache, d = side.cache, shape.depth
    n = shape.nodes + 1
    ar = cache.slots[:n]
    topo = shape.topology if shape.topology is not None else tree_topology(st.parents, side.dtype)
    logits = static_forward(side, torch.cat([st.root, st.tokens]), st.pos + topo.depths, ar + cache.length,
                            topo.bias)
    drafted = torch.where(st.valid, st.tokens, -1)
    if shape.sampled is not None:
        path, acc, bonus = accept_sampled(logits, drafted, st.parents, shape.sampled, d, st.noise)
    elif shape.config.shape == "chain":
        path, acc, bonus = chain_accept(drafted, logits.argmax(-1))
    else:
        path, acc, bonus = greedy_accept(drafted, st.parents, logits.argmax(-1), d, topo.anc)
    if shape.config.shape == "chain":
        cache.advance(acc + 1)                   # a chain's path is a prefix of the block: nothing moves
    else:
        cache.commit(torch.cat([ar[:1], path + 1]), acc + 1)   # padding (-1) reads slot 0: never kept
    toks = path_tokens(st.tokens, path)
    st.out.copy_(torch.cat([pack(acc, toks, bonus), st.valid.sum().view(1)]))
    st.path.copy_(path)
    nxt = torch.where(ar[: d + 1] == acc, bonus, torch.cat([toks, bonus.view(1)]))
    st.pending.copy_(torch.where((nxt >= 0) & (nxt < draft_rows), nxt, torch.full_like(nxt, substitute)))
    st.n_pending.copy_(acc + 1)
    st.root.copy_(bonus.view(1))
    st.pos.add_(acc + 1)
