"""The target's static forward without transformers' module stack: the same ops, in the same order.

On a CPU a small target's decode step is mostly per-op fixed cost: Python and ATen dispatch through
the module stack (hooks, keyword plumbing, mask and cache bookkeeping around every layer). For the
plain pre-norm decoder that :func:`specvlm.engine.weights.read_layers` supports,
:func:`target_forward` runs the target's own weights (the module's tensors, no copies) through the
ops its modules run, in the same order and with the same operands: the RMS norm as
``weight * (x * rsqrt(mean(x^2) + eps))``, each projection as ``F.linear``, RoPE as
``q * cos + rotate_half(q) * sin`` (``rotate_half`` as a half flip against a sign-folded sine), the
attention through :func:`specvlm.models.staticattn.static_attention` as the module stack's static
attention does, residual adds after each block. Its logits equal the module stack's static forward
(:func:`specvlm.engine.steps.static_forward` without a fused view); unlike the draft's fused forward
(:mod:`specvlm.engine.staticdraft`) it folds nothing, since the target's output is the product's output.

Used for float32 targets on a CPU (:func:`fused_target`); elsewhere the steps are captured in CUDA
graphs and the module stack's per-op cost does not recur.

Source: docs/design.md §4.13 and §7 (per-forward fixed cost on a CPU); transformers' Qwen2 decoder
layer (the op order mirrored); RoPE (Su et al. 2021).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from specvlm.engine.weights import FusedUnsupported, read_layers, rope_table
from specvlm.engine.statickv import StaticKV
from specvlm.models.staticattn import StaticAttn, static_attention

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TargetLayer:
    """One decoder layer's own tensors (``F.linear`` layout: (out, in) weights).

    Attributes:
        ln1, ln2: float (D,) the input and post-attention RMS-norm weights.
        q, k, v, o: (weight, bias or None) of the attention projections.
        gate, up, down: the MLP's weights (no biases).
    """

    ln1: torch.Tensor
    ln2: torch.Tensor
    q: tuple[torch.Tensor, torch.Tensor | None]
    k: tuple[torch.Tensor, torch.Tensor | None]
    v: tuple[torch.Tensor, torch.Tensor | None]
    o: tuple[torch.Tensor, torch.Tensor | None]
    gate: torch.Tensor
    up: torch.Tensor
    down: torch.Tensor


@dataclass(frozen=True)
class FusedTarget:
    """A target's weights and RoPE table for :func:`target_forward`.

    Attributes:
        layers: one :class:`TargetLayer` per decoder layer.
        heads, kv_heads, head_dim: attention geometry; eps: the RMS norms' epsilon; scale: softmax scale.
        embed: float (V, D) input embedding table; final_norm: float (D,) the last norm's weight.
        head: (weight (V, D), bias or None) of the LM head.
        cos, sin: float (P, head_dim) RoPE rows for positions 0..P-1 (sin with its first half negated).

    Source: docs/design.md §4.13.
    """

    layers: list[TargetLayer]
    heads: int
    kv_heads: int
    head_dim: int
    eps: float
    scale: float
    embed: torch.Tensor
    final_norm: torch.Tensor
    head: tuple[torch.Tensor, torch.Tensor | None]
    cos: torch.Tensor
    sin: torch.Tensor


def fused_target(model: Any, adapter: Any, rope_dims: int, max_position: int) -> FusedTarget | None:
    """The fused view of a target for positions below ``max_position``, or None where the module stack runs.

    None (logged) when the model is not float32 on a CPU, or its decoder is not the plain pre-norm
    stack :func:`specvlm.engine.weights.read_layers` supports (then its reason is logged).

    Args:
        model: the target ``...ForConditionalGeneration``; adapter: its family adapter.
        rope_dims: R, rows of the position ids; max_position: positions the request may use.

    Source: docs/design.md §4.13.
    """
    emb = model.get_input_embeddings().weight
    if emb.device.type != "cpu" or emb.dtype != torch.float32:
        return None
    lm = adapter.language_model(model)
    try:
        if len({t.device for t in lm.parameters()}) > 1:
            raise FusedUnsupported("the target's weights are spread over several devices.")
        read_layers(lm, fuse_limit=0)   # raises on anything but the plain pre-norm decoder
    except FusedUnsupported as e:
        log.info("fused static target not used: %s", e)
        return None
    layers = [_layer(layer) for layer in lm.layers]
    att = lm.layers[0].self_attn
    cfg = lm.config
    hd = int(getattr(att, "head_dim", cfg.hidden_size // cfg.num_attention_heads))
    head = model.get_output_embeddings()
    cos, sin = rope_table(model, lm, adapter, rope_dims, max_position + 1)
    return FusedTarget(layers, int(cfg.num_attention_heads), int(cfg.num_key_value_heads), hd,
                       float(lm.norm.variance_epsilon), float(getattr(att, "scaling", hd ** -0.5)), emb,
                       lm.norm.weight, (head.weight, getattr(head, "bias", None)), cos, sin)


def _layer(layer: Any) -> TargetLayer:
    att, mlp = layer.self_attn, layer.mlp

    def lin(m):
        return m.weight, m.bias
    return TargetLayer(layer.input_layernorm.weight, layer.post_attention_layernorm.weight, lin(att.q_proj),
                       lin(att.k_proj), lin(att.v_proj), lin(att.o_proj), mlp.gate_proj.weight, mlp.up_proj.weight,
                       mlp.down_proj.weight)


def _norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """transformers' RMS norm, op for op: weight * (x * rsqrt(mean(x^2) + eps))."""
    return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x * cos + rotate_half(x) * sin for x float (n, heads, hd); ``sin`` is sign-folded (see FusedTarget)."""
    n, h, hd = x.shape
    return x * cos + x.view(n, h, 2, hd // 2).flip(2).view(n, h, hd) * sin


def target_forward(ft: FusedTarget, cache: StaticKV, sa: StaticAttn, tokens: torch.Tensor, positions: torch.Tensor,
                   write: torch.Tensor) -> torch.Tensor:
    """n tokens through every layer of the target, keys/values written at ``write``; no host reads.

    Args:
        ft: the fused target; cache: its static cache; sa: the step's attention biases and block.
        tokens: int64 (n,) ids; positions: int64 (n,) 1-D positions; write: int64 (n,) buffer slots.

    Returns:
        float (n, vocab) logits.

    Source: transformers' Qwen2 decoder layer (op order); docs/design.md §4.13.
    """
    n, H, KV, hd = tokens.shape[0], ft.heads, ft.kv_heads, ft.head_dim
    x = F.embedding(tokens, ft.embed)
    cos, sin = ft.cos.index_select(0, positions)[:, None], ft.sin.index_select(0, positions)[:, None]
    for lw, layer in zip(ft.layers, cache.layers):
        h = _norm(x, lw.ln1, ft.eps)
        q = _rope(F.linear(h, *lw.q).view(n, H, hd), cos, sin)
        k = _rope(F.linear(h, *lw.k).view(n, KV, hd), cos, sin)
        v = F.linear(h, *lw.v).view(n, KV, hd)
        layer.keys.index_copy_(-2, write, k.transpose(0, 1)[None])
        layer.values.index_copy_(-2, write, v.transpose(0, 1)[None])
        o = static_attention(q.transpose(0, 1)[None], layer.keys, layer.values, sa, ft.scale)
        x = x + F.linear(o.reshape(n, H * hd), *lw.o)
        h = _norm(x, lw.ln2, ft.eps)
        x = x + F.linear(F.silu(F.linear(h, lw.gate)) * F.linear(h, lw.up), lw.down)
    return F.linear(_norm(x, ft.final_norm, ft.eps), *ft.head)
