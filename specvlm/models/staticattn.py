"""Attention over a static KV buffer: the cached prefix and the new block, merged by log-sum-exp.

A fixed-shape step writes its n new keys/values into a preallocated buffer of ``cap`` slots
(:mod:`specvlm.engine.statickv`) and attends in two parts:

* the **prefix**: every buffer slot before the device-side length, through one attention call
  whose only mask is a key-validity bias broadcast as (1, 1, 1, cap) (0 for valid slots, a large
  negative number for the rest, including the n slots just written);
* the **block**: the n new keys, gathered back from the buffer at their device-side write slots,
  with an (n, n) additive bias (causal for plain tokens, ancestors-and-self for a tree).

The two softmaxes are merged exactly by their log-sum-exps (the split-softmax identity of
FlashAttention's block merge). Query heads that share a KV head are folded into the query axis
(B, KV, G*n, d), so each KV head is read once and nothing is repeated per head.

:func:`attend_lse` and :func:`merge_lse` are shared with the prefill's grouped-query attention
(:func:`specvlm.models.attention.gqa_attention`).

Source: Dao et al. 2022 (FlashAttention, block merge by log-sum-exp); vLLM / SGLang tree attention
(only an n x n bias for the tree block); grouped-query attention (Ainslie et al. 2023).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

_FLASH_CPU = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)


@dataclass(frozen=True)
class StaticAttn:
    """What every layer's attention needs for one static step (the same for all layers).

    Attributes:
        key_bias: float (1, 1, 1, cap) additive bias over the buffer's slots: 0 below the
            device-side length, a large negative number elsewhere; the model's dtype. With no block it
            may instead hold one row per folded query row, (1, 1, G*n, cap) (G query heads per KV
            head, head-major), e.g. a tree block's bias merged into the buffer's.
        block_index: int64 (F,) buffer slots of the block's keys: the n tokens written by this
            step, and for a draft tree level also the tree nodes written by earlier levels; None when
            every query sees exactly the slots ``key_bias`` leaves visible (one token, a chain node).
        block_bias: float (1, 1, n, F) additive bias of the n queries over the block (0 = visible), or None.
        tap: called with each layer's queries (B, H, n, d) after RoPE and the softmax scale, in layer
            order, before attending (a verify's queries, kept for re-selection), or None.

    Source: docs/design.md §4.13; vLLM tree attention (an n x n bias for the tree block).
    """

    key_bias: torch.Tensor
    block_index: torch.Tensor | None
    block_bias: torch.Tensor | None
    tap: Callable[[torch.Tensor, float], None] | None = None


def attend_lse(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor | None,
               scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax attention and its log-sum-exp per query row.

    On the CPU in float32 the fused flash kernel computes both; elsewhere a matmul, a masked
    log-sum-exp and a softmax do (no data-dependent shapes, capturable).

    Args:
        q: float (B, KV, M, d) folded queries; k, v: float (B, KV, S, d).
        bias: additive float broadcastable to (B, KV, M, S), or None.
        scale: the softmax scale.

    Returns:
        (out float (B, KV, M, d), lse float32 (B, KV, M)).

    Source: Dao et al. 2022 (the log-sum-exp each attention block carries for merging).
    """
    if _FLASH_CPU is not None and q.device.type == "cpu" and q.dtype == torch.float32:
        if bias is None:
            out, lse = _FLASH_CPU(q, k, v, scale=scale)[:2]
        else:
            out, lse = _FLASH_CPU(q, k, v, attn_mask=bias.to(q.dtype), scale=scale)[:2]
        return out, lse.float()
    s = torch.matmul(q, k.transpose(-1, -2)).float().mul_(scale)
    if bias is not None:
        s = s + bias.float()
    lse = torch.logsumexp(s, dim=-1)
    out = torch.matmul(torch.softmax(s, dim=-1).to(v.dtype), v)
    return out, lse


def merge_lse(o1: torch.Tensor, lse1: torch.Tensor, o2: torch.Tensor, lse2: torch.Tensor) -> torch.Tensor:
    """Merge two softmax-attention parts over disjoint key sets into the attention over their union.

    Args:
        o1, o2: float (..., M, d) the parts' outputs; lse1, lse2: float32 (..., M) their log-sum-exps.

    Returns:
        float (..., M, d) in ``o1``'s dtype.

    Source: Dao et al. 2022 (FlashAttention, block merge by log-sum-exp).
    """
    lse = torch.logaddexp(lse1, lse2)
    w1 = torch.exp(lse1 - lse)[..., None]
    w2 = torch.exp(lse2 - lse)[..., None]
    return (o1.float() * w1 + o2.float() * w2).to(o1.dtype)


def static_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, sa: StaticAttn,
                     scaling: float | None) -> torch.Tensor:
    """One layer's attention for a static step: buffer prefix + new block, merged by log-sum-exp.

    Args:
        query: float (B, H, n, d) the step's queries.
        key, value: float (B, KV, cap, d) the whole buffer (the n new entries already written).
        sa: the step's biases and write slots.
        scaling: softmax scale (None = d ** -0.5).

    Returns:
        float (B, n, H, d) attention output (transformers' layout).

    Source: Dao et al. 2022 (block merge by log-sum-exp); Ainslie et al. 2023 (grouped-query
    attention); docs/design.md §4.13.
    """
    b, h, n, d = query.shape
    kvh = key.shape[1]
    g = h // kvh
    scale = scaling if scaling is not None else d ** -0.5
    if sa.tap is not None:
        sa.tap(query, scale)
    q = query.reshape(b, kvh, g * n, d)
    if sa.block_index is None:   # one part: the visible slots already include the new ones
        out = F.scaled_dot_product_attention(q, key, value, attn_mask=sa.key_bias.to(q.dtype), scale=scale)
        return out.view(b, h, n, d).transpose(1, 2).contiguous()
    o_pre, lse_pre = attend_lse(q, key, value, sa.key_bias, scale)
    k_new = key.index_select(-2, sa.block_index)
    v_new = value.index_select(-2, sa.block_index)
    f = sa.block_index.shape[0]
    bias = sa.block_bias[:, :, None].expand(1, 1, g, n, f).reshape(1, 1, g * n, f)
    o_blk, lse_blk = attend_lse(q, k_new, v_new, bias, scale)
    out = merge_lse(o_pre, lse_pre, o_blk, lse_blk)
    return out.view(b, h, n, d).transpose(1, 2).contiguous()


def neg_bias(dtype: torch.dtype) -> float:
    """The additive value of a hidden key: the dtype's minimum (finite, so an all-hidden row stays finite).

    Source: docs/design.md §7 (finite additive masks).
    """
    return torch.finfo(dtype).min


def key_bias(length: torch.Tensor, slots: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """(1, 1, 1, cap) bias: 0 for slots below ``length``, :func:`neg_bias` elsewhere.

    Args:
        length: int64 scalar device tensor (valid slots); slots: int64 (cap,) = arange(cap).

    Source: docs/design.md §4.13.
    """
    zero = torch.zeros((), dtype=dtype, device=slots.device)
    return torch.where(slots < length, zero, neg_bias(dtype)).view(1, 1, 1, -1)


def causal_bias(n: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """(1, 1, n, n) bias of a plain causal block (token i sees tokens 0..i).

    Source: docs/design.md §4.9.
    """
    ok = torch.ones(n, n, dtype=torch.bool, device=device).tril()
    return allowed_bias(ok, dtype)


def allowed_bias(allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """(1, 1, n, F) additive bias from a bool (n, F) visibility matrix (True = visible).

    Source: docs/design.md §4.9.
    """
    zero = torch.zeros((), dtype=dtype, device=allowed.device)
    return torch.where(allowed, zero, neg_bias(dtype))[None, None]
