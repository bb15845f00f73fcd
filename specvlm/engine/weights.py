"""A decoder's weights as few, fused operands: what the fused static forwards read.

On a CPU a small model's step is mostly per-op fixed cost: Python and ATen dispatch through
transformers' module stack. The fused forwards (:mod:`specvlm.engine.staticdraft` for the draft,
:mod:`specvlm.engine.statictarget` for the target) run the same decoder layers with the module's
own weights, read once per model through public module attributes (:func:`read_layers`,
:func:`draft_weights`). A small model gets folded copies laid out as right-hand matmul operands:
q/k/v and gate/up fused into one matrix each, each RMS-norm weight multiplied into the matmul after
it, the attention scale into the query rows (a one-row product with a contiguous (in, out) matrix is
cheaper on a CPU than ``F.linear``'s transposed read). RoPE comes from a position table built once
per model with the model's own rotary module (:func:`rope_table`).

Supported: pre-norm decoder layers with ``self_attn.{q,k,v,o}_proj`` linears, no per-head q/k
norms, a gated SiLU MLP (``mlp.{gate,up,down}_proj``), RMS norms with a plain ``weight``, full
attention in every layer, a ``rotary_emb`` whose cos/sin depend only on the position (Qwen2 /
Qwen2.5-VL / LLaVA-OneVision's Qwen2 / Llama-style text stacks), all on one device. Anything else
raises :class:`FusedUnsupported` and runs through the module stack.

Source: docs/design.md §4.13 and §7 (per-forward fixed cost on a CPU); grouped-query attention
(Ainslie et al. 2023); RoPE (Su et al. 2021).
"""
from __future__ import annotations

import copy
import weakref
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

FUSE_LIMIT_BYTES = 256 * 2**20
"""Fuse q/k/v and gate/up weights into one matrix only when the fused copies stay under this
(bytes); larger drafts keep separate matmuls on the model's own tensors (no second copy)."""
GROW = 512
"""Extra positions allocated whenever the position table grows."""


class FusedUnsupported(ValueError):
    """The model's layers are not the plain pre-norm decoder the fused forwards implement."""


@dataclass(frozen=True)
class _Layer:
    """One decoder layer's weights as right-hand matmul operands (in, out).

    Small drafts get folded copies: the RMS-norm weight multiplied into the matmul after it and
    the attention scale into the query rows (``ln1``/``ln2`` are then None). Larger drafts keep
    the module's own tensors (transposed views, no copy) and apply norm and scale separately.
    """

    ln1: torch.Tensor | None
    ln2: torch.Tensor | None
    qkv: tuple[tuple[torch.Tensor, torch.Tensor | None], ...]   # one fused (w_t, b) or three
    o: tuple[torch.Tensor, torch.Tensor | None]
    gate_up: tuple[torch.Tensor, ...]                           # one fused w_t or (gate_t, up_t)
    down: torch.Tensor


@dataclass(frozen=True)
class _Dims:
    heads: int
    kv_heads: int
    head_dim: int
    inter: int
    eps_sum: float   # the norms' eps times the hidden size (see _rms)
    scale: float
    q_scale: float   # multiplier still to apply to the queries (1.0 when folded into the weights)


def _linear(mod: Any, name: str) -> tuple[torch.Tensor, torch.Tensor | None]:
    lin = getattr(mod, name, None)
    if not isinstance(lin, torch.nn.Linear):
        raise FusedUnsupported(f"the draft layer has no linear {name!r}: it runs through the module stack.")
    return lin.weight, lin.bias


def _norm_weight(norm: Any) -> torch.Tensor:
    w = getattr(norm, "weight", None)
    if w is None or getattr(norm, "variance_epsilon", None) is None:
        raise FusedUnsupported("the draft's norm is not an RMS norm with a weight: it runs through the module stack.")
    # what the norm computes, checked in float32 on a copy: in bf16 or fp16 the module's own rounding (float32
    # inside, cast back) differs from F.rms_norm's by more than any tolerance that still tells norms apart
    probe = copy.deepcopy(norm).to(torch.float32)
    x = torch.randn(1, w.shape[0], generator=torch.Generator().manual_seed(0)).to(device=w.device)
    want = F.rms_norm(x, (w.shape[0],), w.to(torch.float32), norm.variance_epsilon)
    if not torch.allclose(probe(x), want, rtol=1e-3, atol=1e-4):
        raise FusedUnsupported("the draft's norm is not weight * x / rms(x): it runs through the module stack.")
    return w


def read_layers(lm: Any, fuse_limit: int = FUSE_LIMIT_BYTES) -> tuple[list[_Layer], _Dims]:
    """Read the decoder layers' weights through public module attributes.

    Args:
        lm: the text decoder stack (``layers``, ``norm``, ``rotary_emb``, ``config``).
        fuse_limit: bytes up to which the layers get folded, fused copies (see :class:`_Layer`).

    Returns:
        (per-layer weights, dimensions).

    Raises:
        FusedUnsupported: a layer is not the supported pre-norm attention + gated-SiLU decoder.
    """
    cfg = lm.config
    kinds = set(getattr(cfg, "layer_types", None) or ["full_attention"])
    if kinds != {"full_attention"} or getattr(cfg, "hidden_act", "silu") != "silu":
        raise FusedUnsupported("the draft uses sliding-window layers or a non-SiLU MLP: it runs through the module stack.")
    if not hasattr(lm, "rotary_emb") or not hasattr(lm, "norm") or not hasattr(lm, "layers"):
        raise FusedUnsupported("the draft's text model has no rotary_emb / norm / layers: it runs through the module stack.")
    with torch.no_grad():
        return _read_layers(lm, cfg, fuse_limit)


def _read_layers(lm: Any, cfg: Any, fuse_limit: int) -> tuple[list[_Layer], _Dims]:
    params = sum(p.numel() * p.element_size() for p in lm.layers.parameters())
    fold = params <= fuse_limit
    att0 = lm.layers[0].self_attn
    head_dim = int(getattr(att0, "head_dim", cfg.hidden_size // cfg.num_attention_heads))
    scale = float(getattr(att0, "scaling", head_dim ** -0.5))
    out = []
    for layer in lm.layers:
        att, mlp = getattr(layer, "self_attn", None), getattr(layer, "mlp", None)
        if att is None or mlp is None or any(hasattr(att, a) for a in ("q_norm", "k_norm")):
            raise FusedUnsupported("the draft layer has per-head q/k norms or no self_attn/mlp: it runs through the module stack.")
        q, k, v = (_linear(att, n) for n in ("q_proj", "k_proj", "v_proj"))
        gate, up, down = (_linear(mlp, n) for n in ("gate_proj", "up_proj", "down_proj"))
        if gate[1] is not None or up[1] is not None or down[1] is not None:
            raise FusedUnsupported("the draft's MLP has biases: it runs through the module stack.")
        root_d = float(cfg.hidden_size) ** 0.5   # _rms divides by sqrt(sum x^2): the weights carry sqrt(D)
        ln1 = _norm_weight(layer.input_layernorm) * root_d
        ln2 = _norm_weight(layer.post_attention_layernorm) * root_d
        o_w, o_b = _linear(att, "o_proj")
        if fold:   # x/rms(x) @ (diag(ln) W^T): the norm weight and the query scale live in the copy
            w = torch.cat([q[0] * scale, k[0], v[0]])
            bias = None if q[1] is None else torch.cat([q[1] * scale, k[1], v[1]])
            qkv = (((w * ln1).t().contiguous(), bias),)
            gate_up = ((torch.cat([gate[0], up[0]]) * ln2).t().contiguous(),)
            out.append(_Layer(None, None, qkv, (o_w.t().contiguous(), o_b), gate_up, down[0].t().contiguous()))
        else:
            qkv = tuple((w.t(), b) for w, b in (q, k, v))
            out.append(_Layer(ln1, ln2, qkv, (o_w.t(), o_b), (gate[0].t(), up[0].t()), down[0].t()))
    dims = _Dims(int(cfg.num_attention_heads), int(cfg.num_key_value_heads), head_dim,
                 int(lm.layers[0].mlp.down_proj.in_features), float(lm.norm.variance_epsilon) * cfg.hidden_size,
                 scale, 1.0 if fold else scale)
    return out, dims


def _rms(x: torch.Tensor, weight: torch.Tensor | None, eps_sum: float) -> torch.Tensor:
    """RMS norm as x / sqrt(sum(x^2) + D * eps), times ``weight`` (which carries the sqrt(D)).

    ``weight`` is None when it was folded into the next matmul (:func:`read_layers`).
    """
    h = x * torch.rsqrt(torch.sum(x * x, -1, keepdim=True).add_(eps_sum))
    return h if weight is None else h.mul_(weight)


def _matmul(h: torch.Tensor, w_t: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
    return torch.mm(h, w_t) if b is None else torch.addmm(b, h, w_t)


@dataclass(frozen=True)
class _Weights:
    layers: list[_Layer]
    dims: _Dims
    head: tuple[torch.Tensor, torch.Tensor | None]   # (D, vocab) right operand and bias
    final_norm: torch.Tensor | None                  # None when folded into ``head``
    source: tuple[int, ...]                          # data pointers of the tensors read


_WEIGHTS: "weakref.WeakKeyDictionary[Any, dict[tuple[int, int], _Weights]]" = weakref.WeakKeyDictionary()


def draft_weights(model: Any, lm: Any, vocab: int) -> tuple[list[_Layer], _Dims, tuple, torch.Tensor | None]:
    """The draft's layer weights as :mod:`specvlm.engine.staticdraft` uses them, read once per model.

    Folded copies (:func:`read_layers`) are kept with the model (weakly) and reused by every
    request; they are read again when a parameter tensor is replaced (e.g. another checkpoint
    loaded into the module). Stale weights could only make drafts worse, never the output wrong:
    the target verifies every drafted token.

    Args:
        model: the draft ``...ForConditionalGeneration``; lm: its text decoder stack;
        vocab: rows of the LM head to keep (the pair's shared vocabulary).

    Returns:
        (layers, dims, (head right operand (D, vocab), bias or None), final norm weight or None).

    Raises:
        FusedUnsupported: as :func:`read_layers`.
    """
    head = model.get_output_embeddings()
    tensors = list(lm.parameters()) + [head.weight]
    source = tuple(t.data_ptr() for t in tensors)
    key = (FUSE_LIMIT_BYTES, vocab)
    held = _WEIGHTS.get(model, {}).get(key)
    if held is None or held.source != source:
        layers, dims = read_layers(lm, FUSE_LIMIT_BYTES)
        norm = _norm_weight(lm.norm) * float(lm.config.hidden_size) ** 0.5
        w, b = head.weight[:vocab], None if getattr(head, "bias", None) is None else head.bias[:vocab]
        with torch.no_grad():
            folded = layers[0].ln1 is None
            head_op = ((w * norm).t().contiguous() if folded else w.t(), b)
        held = _Weights(layers, dims, head_op, None if folded else norm, source)
        _WEIGHTS.setdefault(model, {})[key] = held
    return held.layers, held.dims, held.head, held.final_norm


_ROPE: "weakref.WeakKeyDictionary[Any, dict[int, tuple[torch.Tensor, torch.Tensor]]]" = weakref.WeakKeyDictionary()


def rope_table(model: Any, lm: Any, adapter: Any, rope_dims: int, need: int) -> tuple[torch.Tensor, torch.Tensor]:
    """RoPE cos and sign-folded sin for 1-D positions 0..P-1 (P >= ``need``), kept with the model.

    Built with the model's own rotary module (every M-RoPE row at the same position, as for text
    tokens and tree nodes) and grown by at least :data:`GROW` rows when a longer position is asked
    for, so requests share it instead of rebuilding it.

    Args:
        model: the draft model (the cache key); lm: its text decoder stack; adapter: its family
        adapter (``lm_positions``); rope_dims: R, rows of the position ids; need: positions needed.

    Returns:
        (cos, sin) float (P, head_dim) in the model's dtype; ``sin`` has its first half negated, so
        rotate_half(x) * sin = flip(x halves) * sin.
    """
    tables = _ROPE.setdefault(model, {})
    held = tables.get(rope_dims)
    if held is not None and held[0].shape[0] >= need:
        return held
    emb = model.get_input_embeddings().weight
    n = max(need + GROW, 2 * held[0].shape[0] if held is not None else 0)
    with torch.no_grad():
        rows = torch.arange(n, device=emb.device).expand(rope_dims, n)
        cos, sin = lm.rotary_emb(emb[:1][None], adapter.lm_positions(rows))
        cos, sin = cos.reshape(n, -1), sin.reshape(n, -1)
        h = sin.shape[-1] // 2
        tables[rope_dims] = (cos, torch.cat([-sin[:, :h], sin[:, h:]], -1))
    return tables[rope_dims]
