"""The draft's static forward with fused ops over static KV buffers.

A draft of the plain pre-norm decoder :mod:`specvlm.engine.weights` supports runs
its static steps through folded weights (:func:`specvlm.engine.weights.draft_weights`) and
RoPE table (:func:`specvlm.engine.weights.rope_table`) instead of transformers' module stack: a few
fused ops per layer, which on a CPU is most of a small draft's step. Keys and values go into the
request's :class:`~specvlm.engine.statickv.StaticKV` buffers by ``index_copy_`` at device-side slots,
positions are looked up in the RoPE table by device-side index, and attention is
:func:`specvlm.models.staticattn.static_attention`, so the forward keeps fixed shapes and reads
nothing to the host. Other drafts use the module stack (:func:`specvlm.engine.steps.static_forward`).

Source: docs/design.md §4.8 and §7 (per-forward fixed cost on a CPU); RoPE (Su et al. 2021).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from specvlm.engine.weights import FusedUnsupported, _matmul, _rms, draft_weights, rope_table
from specvlm.models.staticattn import StaticAttn, static_attention
from specvlm.engine.statickv import StaticKV


@dataclass(frozen=True)
class FusedDraft:
    """A draft's folded weights and RoPE table for :func:`fused_forward`.

    Attributes:
        layers, dims, head, final_norm: :func:`specvlm.engine.weights.draft_weights`.
        embed: float (Vd, D) the input embedding table.
        cos, sin: float (P, head_dim) RoPE rows for positions 0..P-1 (sin sign-folded).

    Source: docs/design.md §7 (per-forward fixed cost on a CPU).
    """

    layers: list
    dims: Any
    head: tuple
    final_norm: torch.Tensor | None
    embed: torch.Tensor
    cos: torch.Tensor
    sin: torch.Tensor


def fused_draft(pair: Any, rope_dims: int, max_position: int) -> FusedDraft:
    """The fused view of ``pair.draft`` for positions below ``max_position``.

    Raises:
        FusedUnsupported: the draft is not the plain decoder the fused forward implements, or its
            weights are on several devices.

    Source: docs/design.md §7.
    """
    model, ad = pair.draft, pair.draft_adapter
    lm = ad.language_model(model)
    if len({t.device for t in lm.parameters()} | {model.get_input_embeddings().weight.device}) > 1:
        raise FusedUnsupported("the draft's weights are spread over several devices.")
    layers, dims, head, norm = draft_weights(model, lm, int(pair.shared_vocab))
    cos, sin = rope_table(model, lm, ad, rope_dims, max_position + 1)
    return FusedDraft(layers, dims, head, norm, model.get_input_embeddings().weight, cos, sin)


def fused_forward(fd: FusedDraft, cache: StaticKV, sa: StaticAttn, tokens: torch.Tensor, positions: torch.Tensor,
                  write: torch.Tensor, window: int | None = None) -> torch.Tensor:
    """n tokens through every layer of the draft, keys/values written at ``write``; no host reads.

    Args:
        fd: the fused draft; cache: its static cache; sa: the step's attention biases and block.
        tokens: int64 (n,) ids; positions: int64 (n,) 1-D positions; write: int64 (n,) buffer slots.
        window: attend over the first ``window`` slots only (a host bound past every visible slot), None = all.

    Returns:
        float (n, shared vocab) logits.

    Source: docs/design.md §4.8 and §7; RoPE (Su et al. 2021).
    """
    d = fd.dims
    n, H, KV, hd = tokens.shape[0], d.heads, d.kv_heads, d.head_dim
    span = cache.capacity if window is None else min(window, cache.capacity)
    sa = StaticAttn(sa.key_bias[..., :span], sa.block_index, sa.block_bias, sa.tap)   # no visible slot past span
    x = F.embedding(tokens, fd.embed)
    cos, sin = fd.cos.index_select(0, positions)[:, None], fd.sin.index_select(0, positions)[:, None]
    for lw, layer in zip(fd.layers, cache.layers):
        h = _rms(x, lw.ln1, d.eps_sum)
        qkv = torch.cat([_matmul(h, w, b) for w, b in lw.qkv], -1) if len(lw.qkv) > 1 else _matmul(h, *lw.qkv[0])
        qk = qkv[:, : (H + KV) * hd].view(n, H + KV, hd)
        qk = torch.addcmul(qk * cos, qk.view(n, H + KV, 2, hd // 2).flip(2).view(n, H + KV, hd), sin)
        layer.keys.index_copy_(-2, write, qk[:, H:].transpose(0, 1)[None].to(layer.keys.dtype))
        layer.values.index_copy_(-2, write, qkv[:, (H + KV) * hd:].view(n, KV, hd).transpose(0, 1)[None]
                                 .to(layer.values.dtype))
        keys, values = layer.keys[:, :, :span], layer.values[:, :, :span]
        if n == 1 and sa.block_index is None and x.device.type == "cpu":   # one query: grouped matmuls, fewer ops
            att = torch.baddbmm(sa.key_bias[0, 0], qk[0, :H].view(KV, H // KV, hd), keys[0].transpose(1, 2),
                                alpha=d.q_scale)
            o = torch.bmm(torch.softmax(att, -1), values[0]).view(1, H * hd)
        else:
            q = qk[:, :H].transpose(0, 1)[None]                       # (1, H, n, hd)
            o = static_attention(q, keys, values, sa, d.q_scale).reshape(n, H * hd)
        w, b = lw.o
        x = torch.addmm(x, o, w) if b is None else torch.addmm(x + b, o, w)
        h = _rms(x, lw.ln2, d.eps_sum)
        if len(lw.gate_up) == 1:
            gu = torch.mm(h, lw.gate_up[0])
            a = F.silu(gu[:, : d.inter]) * gu[:, d.inter:]
        else:
            a = F.silu(torch.mm(h, lw.gate_up[0])) * torch.mm(h, lw.gate_up[1])
        x = torch.addmm(x, a, lw.down)
    return _matmul(_rms(x, fd.final_norm, d.eps_sum), *fd.head)
