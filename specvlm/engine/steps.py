"""Fixed-shape step functions over static KV buffers: plain decode, the draft's tree, verify.

Each step reads and writes only device tensors of fixed shapes held in its state
(:class:`VanillaState`, :class:`SpecState`): token ids, positions, lengths, the drafted tree and a
packed output row. No step reads a value to the host; the decode loop
(:mod:`specvlm.engine.staticloop`) reads the packed output once per step. The same functions run
eagerly on the CPU and are captured in CUDA graphs on a GPU (:mod:`specvlm.engine.graphs`).

A model forward (:func:`static_forward`) goes through transformers' modules with a
:class:`~specvlm.engine.statickv.StaticKV` cache and carries a
:class:`~specvlm.engine.staticattn.StaticAttn` to the attention (the ``specvlm_static`` keyword).

Source: docs/design.md §4.8-4.10 and §11 (gpt-fast's decode_one_token, SGLang's captured EAGLE
draft and verify).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from specvlm.engine.attention import STATIC_KWARG
from specvlm.engine.staticattn import StaticAttn, allowed_bias, causal_bias, key_bias
from specvlm.engine.statickv import StaticKV


@dataclass
class ModelSide:
    """One model's view for the steps: the model, its adapter, its static cache, its positions.

    Attributes:
        model: a ``...ForConditionalGeneration`` model; adapter: its family adapter.
        cache: the request's static cache.
        rope_dims: R, rows of the position ids.
        dtype: the model's float dtype.
    """

    model: Any
    adapter: Any
    cache: StaticKV
    rope_dims: int
    dtype: torch.dtype


def static_forward(side: ModelSide, tokens: torch.Tensor, positions: torch.Tensor, block_index: torch.Tensor,
                   block_bias: torch.Tensor, write: torch.Tensor | None = None) -> torch.Tensor:
    """One language-model forward over n tokens into the static cache (the length is not advanced).

    Args:
        side: the model and its cache.
        tokens: int64 (n,) token ids (the model can embed them).
        positions: int64 (n,) positions (every M-RoPE row the same, as for text tokens).
        block_index: int64 (F,) buffer slots of the block keys (see :class:`StaticAttn`).
        block_bias: float (1, 1, n, F) bias of the n queries over the block.
        write: int64 (n,) slots to write the n tokens to; None = ``length + arange(n)``.

    Returns:
        float (n, vocab) logits.
    """
    model, cache = side.model, side.cache
    emb = model.get_input_embeddings()(tokens[None])
    pos = side.adapter.lm_positions(positions[None].expand(side.rope_dims, -1))
    sa = StaticAttn(key_bias(cache.length, cache.slots, side.dtype), block_index, block_bias)
    cache.cursor.write = write
    try:
        out = side.adapter.language_model(model)(inputs_embeds=emb, position_ids=pos, attention_mask=block_bias,
                                                 cache=cache, use_cache=True, **{STATIC_KWARG: sa})
    finally:
        cache.cursor.write = None
    return model.get_output_embeddings()(out.last_hidden_state[0])


# --------------------------------------------------------------------------- vanilla
@dataclass
class VanillaState:
    """Device state of plain decoding.

    Attributes:
        token: int64 (1,) the last emitted token (the next input).
        pos: int64 scalar, its position.
        out: float64 (2,) packed output of the last step: (next token, its logit margin).
    """

    token: torch.Tensor
    pos: torch.Tensor
    out: torch.Tensor


def vanilla_state(token: torch.Tensor, pos: int, device: torch.device) -> VanillaState:
    """The state before the first decode step (``token`` int64 (1,) on ``device``)."""
    return VanillaState(token.clone(), torch.tensor(pos, dtype=torch.long, device=device),
                        torch.zeros(2, dtype=torch.float64, device=device))


def margin_of(logits: torch.Tensor) -> torch.Tensor:
    """float32 scalar: top-1 minus top-2 of float (V,) logits (as :func:`specvlm.analysis.metrics.logit_margin`)."""
    top = logits.float().topk(2).values
    return top[0] - top[1]


def decode_step(side: ModelSide, st: VanillaState) -> None:
    """One greedy decode step: feed ``st.token`` at ``st.pos``, write the argmax and margin to ``st.out``.

    Afterwards ``st.token`` is the new token, ``st.pos`` its position and the cache one longer.

    Source: gpt-fast ``decode_one_token``; docs/design.md §4.9 (greedy = argmax).
    """
    cache = side.cache
    one = cache.slots[:1] + cache.length
    bias = causal_bias(1, side.dtype, one.device)
    logits = static_forward(side, st.token, st.pos.view(1), one, bias)[-1]
    cache.advance(1)
    nxt = logits.argmax(-1, keepdim=True)
    st.token.copy_(nxt)
    st.pos.add_(1)
    st.out[0] = nxt[0].to(torch.float64)
    st.out[1] = margin_of(logits).to(torch.float64)


# --------------------------------------------------------------------------- speculative
@dataclass
class SpecState:
    """Device state of speculative decoding (fixed shapes; D = max depth, N = tree nodes).

    Attributes:
        pending: int64 (D+1,) tokens not yet in the draft cache (draft-embeddable ids), padded.
        n_pending: int64 scalar, how many of ``pending`` are real (the last is the root).
        root: int64 (1,) the root as the target sees it (the last emitted token).
        pos: int64 scalar, the root's target position.
        tokens: int64 (N,) drafted node tokens; scores: float64 (N,) cumulative draft log-probs.
        valid: bool (N,) nodes that may be accepted (False past an early stop).
        out: int64 (3 + D,) packed result of the last verify: (accepted count, tree size, bonus,
            accepted tokens in path order, padded).
    """

    pending: torch.Tensor
    n_pending: torch.Tensor
    root: torch.Tensor
    pos: torch.Tensor
    tokens: torch.Tensor
    scores: torch.Tensor
    valid: torch.Tensor
    out: torch.Tensor


def spec_state(first: int, pos: int, depth: int, nodes: int, draft_rows: int, substitute: int,
               device: torch.device) -> SpecState:
    """The state before the first speculative step: the prefill's token ``first`` at ``pos``."""
    def z(*shape, dtype=torch.long):
        return torch.zeros(*shape, dtype=dtype, device=device)
    pending = z(depth + 1)
    pending[0] = first if first < draft_rows else substitute
    return SpecState(pending, torch.tensor(1, device=device), torch.tensor([first], device=device),
                     torch.tensor(pos, device=device), z(nodes), z(nodes, dtype=torch.float64),
                     z(nodes, dtype=torch.bool), z(3 + depth))


def feed_pending(side: ModelSide, st: SpecState, offset: int, shared: int) -> torch.Tensor:
    """Feed the pending tokens to the draft (all D+1 slots; the length advances by ``n_pending``).

    Args:
        side: the draft. st: the state. offset: draft position - target position.
        shared: vocabulary size shared with the target (log-probs are over it).

    Returns:
        float32 (shared,) draft log-probs after the root.
    """
    cache, n = side.cache, st.pending.shape[0]
    ar = cache.slots[:n]
    positions = st.pos + offset - (st.n_pending - 1) + ar
    logits = static_forward(side, st.pending, positions, ar + cache.length, causal_bias(n, side.dtype, ar.device))
    cache.advance(st.n_pending)
    row = logits.index_select(0, (st.n_pending - 1).view(1))[0]
    return torch.log_softmax(row[:shared].float(), -1)


def draft_chain(side: ModelSide, st: SpecState, offset: int, shared: int, min_logp: float) -> None:
    """The draft's greedy chain of D nodes into ``st.tokens / scores / valid`` (draft cache rolled back).

    Every level is drafted (fixed shape); a node past the early stop (its parent's cumulative
    log-prob below ``min_logp``) is marked not valid, as the eager chain would not have drafted it.

    Source: docs/design.md §4.8 (chain); early stop: Mamou et al. 2024 (arXiv 2405.04304).
    """
    cache, depth = side.cache, st.tokens.shape[0]
    logp = feed_pending(side, st, offset, shared)
    base = cache.length                      # tree node d (1-based) is written at base + d - 1
    nodes = cache.slots[: max(depth - 1, 1)] + base
    see = torch.ones(depth - 1, depth - 1, dtype=torch.bool, device=nodes.device).tril()
    lp, tok = logp.max(-1)
    score = lp.double()
    st.tokens[0], st.scores[0] = tok, score
    for d in range(1, depth):
        bias = allowed_bias(see[d - 1: d], side.dtype) if depth > 1 else None
        logits = static_forward(side, tok.view(1), (st.pos + offset + d).view(1), nodes, bias,
                                write=nodes[d - 1: d])
        lp, tok = torch.log_softmax(logits[-1, :shared].float(), -1).max(-1)
        score = score + lp.double()
        st.tokens[d], st.scores[d] = tok, score
    st.valid[0] = True
    st.valid[1:] = st.scores[:-1] >= min_logp


def verify_chain(side: ModelSide, st: SpecState, draft_rows: int, substitute: int) -> None:
    """Verify root + chain in one target forward, accept greedily, commit, write ``st.out``; prepare
    the next step's pending tokens and root.

    Source: docs/design.md §4.9-4.10 (greedy acceptance: the longest matching prefix; the bonus is
    the target's argmax after the last accepted node).
    """
    cache, depth = side.cache, st.tokens.shape[0]
    n = depth + 1
    ar = cache.slots[:n]
    toks = torch.cat([st.root, st.tokens])
    logits = static_forward(side, toks, st.pos + ar, ar + cache.length, causal_bias(n, side.dtype, ar.device))
    tgt = logits.argmax(-1)                                          # (n,)
    good = (st.tokens == tgt[:-1]) & st.valid
    acc = good.long().cumprod(0).sum()                               # accepted count, 0..D
    bonus = tgt.index_select(0, acc.view(1))                         # (1,)
    cache.advance(acc + 1)                                           # a chain's path is a prefix: no copy
    st.out[0], st.out[1], st.out[2] = acc, st.valid.long().sum(), bonus[0]
    st.out[3:] = st.tokens
    # the next step: pending = accepted tokens + bonus (draft-embeddable), root = bonus
    nxt = torch.where(ar == acc, bonus, torch.cat([st.tokens, bonus]))
    st.pending.copy_(torch.where(nxt < draft_rows, nxt, torch.full_like(nxt, substitute)))
    st.n_pending.copy_(acc + 1)
    st.root.copy_(bonus)
    st.pos.add_(acc + 1)
