"""The attention the engine runs, registered through transformers' public extension points.

* ``specvlm_gqa`` attention (registered with ``AttentionInterface``): for short
  queries (decode, tree verify, tree drafting) with an explicit mask it folds the
  query heads that share a KV head into the query axis, so SDPA runs on the KV
  heads directly: no ``repeat_kv`` copy of the whole cache per step. A plain decode
  step (one query, no mask) is folded the same way. Everything else is delegated to
  transformers' own SDPA path.
* Per call, without touching the model's configuration: :func:`attention_weights` makes the
  forwards run inside it return eager attention weights (the target's scoring pass), and
  :func:`plain_sdpa` makes them run transformers' stock SDPA path (the benchmark's Hugging Face
  peers). Both hold for the calling thread only, so requests on other threads (another
  ``stream()`` on the same pair) keep the fast path.

Source: docs/design.md §7 (profile: masked sdpa path copies KV to every head);
grouped-query attention (Ainslie et al. 2023).
"""
from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from transformers import AttentionInterface, AttentionMaskInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import sdpa_mask

from specvlm.models import stopping
from specvlm.models.staticattn import attend_lse, merge_lse, static_attention

ATTN_IMPL = "specvlm_gqa"
STATIC_KWARG = "specvlm_static"
"""The language model's keyword that carries a static step's :class:`~specvlm.models.staticattn.StaticAttn`
down to every layer's attention (transformers passes extra keywords through to the attention function)."""
MAX_GROUPED_QUERY = 256


_FOLDED = threading.local()
_TAP = threading.local()    # .sink: None, or a query_tap sink; per thread
_MODE = threading.local()   # .value: None (the fast path), ("weights", sink) or ("sdpa", None); per thread
_FLASH_CPU = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)
MIN_SPLIT_PREFIX = 12288
"""Fully visible prefixes shorter than this are not split off: one masked SDPA call on the folded
rows is as fast or faster there; the split pays on long prefixes with many queries (docs/benchmark.md,
*Measurements behind the engine's choices*)."""


@dataclass(frozen=True)
class _Folded:
    """A forward's mask prepared once for all layers: visible prefix length + folded block mask."""

    source: torch.Tensor      # the model's mask object (kept alive: identity checks stay safe)
    key: tuple
    prefix: int               # keys [0, prefix) are visible to every query (no mask needed)
    mask: torch.Tensor        # (mb, KV, G*n, L - prefix) additive float or bool


def _visible_prefix(mask: torch.Tensor) -> int:
    """Length of the leading key range that every query row may see (mask (mb, 1, n, L))."""
    blocked = ~mask if mask.dtype == torch.bool else mask != 0
    cols = blocked.flatten(0, 2).any(0).nonzero()
    return int(cols[0]) if cols.numel() else int(mask.shape[-1])


def _fold(attention_mask: torch.Tensor, kvh: int, g: int, L: int, dtype: torch.dtype, split: bool) -> _Folded:
    """Fold a (mb, 1, n, >=L) mask to (mb, KV, G*n, ·), once per forward (every layer gets the same
    mask object, so the last fold is reused by identity)."""
    last = getattr(_FOLDED, "entry", None)
    key = (kvh, g, L, dtype, split)
    if last is not None and last.source is attention_mask and last.key == key:
        return last
    mask = attention_mask[..., :L]
    if mask.dtype != torch.bool:
        mask = mask.to(dtype)
    prefix = _visible_prefix(mask) if split else 0
    if prefix < MIN_SPLIT_PREFIX or prefix >= L:
        prefix = 0
    mask = mask[..., prefix:]
    mb, n = mask.shape[0], mask.shape[2]
    folded = mask[:, :, None].expand(mb, kvh, g, n, L - prefix).reshape(mb, kvh, g * n, L - prefix)
    entry = _Folded(attention_mask, key, prefix, folded)
    _FOLDED.entry = entry
    return entry


@contextlib.contextmanager
def _mode(value: tuple) -> Iterator[None]:
    before = getattr(_MODE, "value", None)
    _MODE.value = value
    try:
        yield
    finally:
        _MODE.value = before


def attention_weights(sink: Callable[[torch.Tensor], None]) -> contextlib.AbstractContextManager[None]:
    """Within this block, on this thread, ``specvlm_gqa`` layers compute eager attention, as
    transformers' ``eager`` implementation does (same ops, same numbers), and hand each layer's
    weights to ``sink`` as soon as they exist, in layer order.

    Args:
        sink: called with each layer's attention weights, (B, H, n, L) in the model's dtype; only one
            layer's weights are alive at a time, so memory stays O(H x n x L).

    Source: docs/design.md §4.2 (the scoring pass needs the attention weights).
    """
    return _mode(("weights", sink))


@contextlib.contextmanager
def query_tap(sink: Callable[[torch.Tensor, float], None]) -> Iterator[None]:
    """Within this block, on this thread, every ``specvlm_gqa`` layer hands its query states to ``sink``
    before attending (the attention itself is unchanged), in layer order: a verify forward's queries,
    scored later against the cached keys for one row only (:mod:`specvlm.engine.reselect`).

    Args:
        sink: called with (query (B, H, n, d) after RoPE, the attention scale) per layer.

    Source: docs/design.md §4.9 (the verify forward); the row's attention as :func:`attention_weights` defines it.
    """
    before = getattr(_TAP, "sink", None)
    _TAP.sink = sink
    try:
        yield
    finally:
        _TAP.sink = before


def plain_sdpa() -> contextlib.AbstractContextManager[None]:
    """Within this block, on this thread, ``specvlm_gqa`` layers run transformers' stock SDPA path
    (what ``attn_implementation="sdpa"`` runs), e.g. for ``model.generate()`` as a reference."""
    return _mode(("sdpa", None))


def _eager_with_weights(module, query, key, value, attention_mask, dropout, scaling, sink):
    """transformers' eager attention (``eager_attention_forward`` of the Qwen2, Llama and Qwen-VL text
    models: repeat KV, QK^T * scale + additive mask, float32 softmax, @ V), from this engine's mask.

    Args:
        query: (B, H, n, d); key/value: (B, KV, L, d); attention_mask: bool (True = visible) or additive
            float (B|1, 1, n, >=L), or None (no key hidden from any query when n == 1; causal otherwise).

    Returns:
        (attn_output (B, n, H, d), None); the weights (B, H, n, L) in the query's dtype go to ``sink``.
    """
    b, h, n, d = query.shape
    kvh, L = key.shape[1], key.shape[-2]
    g = h // kvh
    keys = key[:, :, None].expand(b, kvh, g, L, d).reshape(b, h, L, d)
    values = value[:, :, None].expand(b, kvh, g, L, d).reshape(b, h, L, d)
    if scaling is None:
        scaling = d ** -0.5
    weights = torch.matmul(query, keys.transpose(2, 3)) * scaling
    mask = attention_mask
    if mask is None and n > 1:   # causal: query i sees keys up to L - n + i
        mask = torch.ones(n, L, dtype=torch.bool, device=query.device).tril(L - n)[None, None]
    if mask is not None:
        mask = mask[..., :L]
        if mask.dtype == torch.bool:
            mask = torch.where(mask, torch.tensor(0.0, device=mask.device, dtype=query.dtype),
                               torch.finfo(query.dtype).min)
        weights = weights + mask
    weights = F.softmax(weights, dim=-1, dtype=torch.float32).to(query.dtype)
    weights = F.dropout(weights, p=dropout, training=module.training)
    out = torch.matmul(weights, values).transpose(1, 2).contiguous()
    sink(weights)
    return out, None


def gqa_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None, **kwargs):
    """Attention for short masked queries (tree verify, draft tree feeds) without repeating KV per head.

    Query heads that share a KV head are folded into the query axis (B, KV, G*n, d), so each KV
    head is read once. On the CPU the fully visible prefix (the prompt and committed tokens: all
    but the last few keys) needs no mask: it goes through the fused flash kernel, which also
    returns its log-sum-exp, and the short masked tail is computed directly; the two parts are
    merged exactly by their log-sum-exps (the standard split-softmax identity, as in
    FlashAttention's block merge, Dao et al. 2022). Elsewhere one masked
    ``scaled_dot_product_attention`` call on the folded rows does it. The mask is folded once per
    forward and shared by all layers. Timings of the variants: docs/benchmark.md.

    Args:
        query: (B, H, n, d); key/value: (B, KV, L, d); attention_mask: (B|1, 1, n, L) additive float
            or bool (True = visible), or None.

    Returns:
        (attn_output (B, n, H, d), None). One unmasked query (a decode step): folded too
        (:func:`_decode_attention`). Longer unmasked queries (prefill) or long masked ones:
        transformers' SDPA path.
    """
    static = kwargs.get(STATIC_KWARG)
    if static is not None:   # a static step (specvlm.engine.steps): buffer prefix + block, merged by LSE
        return static_attention(query, key, value, static, scaling), None
    stopping.check()   # the decoder layers' stop check (a prefill inside stop_between_layers)
    tap = getattr(_TAP, "sink", None)
    if tap is not None:
        tap(query, scaling if scaling is not None else query.shape[-1] ** -0.5)
    mode, sink = getattr(_MODE, "value", None) or (None, None)
    if mode == "weights":
        return _eager_with_weights(module, query, key, value, attention_mask, dropout, scaling, sink)
    if mode == "sdpa":
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                      scaling=scaling, is_causal=is_causal, **kwargs)
    b, h, n, d = query.shape
    kvh, L = key.shape[1], key.shape[-2]
    if attention_mask is None and n == 1 and kvh < h:
        return _decode_attention(query, key, value, scaling)
    if attention_mask is None or n > MAX_GROUPED_QUERY or kvh == h or attention_mask.dim() != 4 \
            or attention_mask.shape[1] != 1:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                      scaling=scaling, is_causal=is_causal, **kwargs)
    g = h // kvh
    split = _FLASH_CPU is not None and query.device.type == "cpu" and query.dtype == torch.float32
    fold = _fold(attention_mask, kvh, g, L, query.dtype, split)
    q = query.reshape(b, kvh, g * n, d)
    P = fold.prefix
    if P == 0:
        out = F.scaled_dot_product_attention(q, key, value, attn_mask=fold.mask, scale=scaling)
    else:
        scale = scaling if scaling is not None else d ** -0.5
        o_pre, lse_pre = attend_lse(q, key[:, :, :P], value[:, :, :P], None, scale)
        tail = fold.mask
        if tail.dtype == torch.bool:   # finite: a row may see no tail key
            tail = torch.zeros((), dtype=q.dtype).masked_fill(~tail, torch.finfo(q.dtype).min)
        o_tail, lse_tail = attend_lse(q, key[:, :, P:], value[:, :, P:], tail, scale)
        out = merge_lse(o_pre, lse_pre, o_tail, lse_tail)
    return out.view(b, h, n, d).transpose(1, 2).contiguous(), None


def _decode_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                      scaling: float | None) -> tuple[torch.Tensor, None]:
    """One unmasked query token (a decode step): query heads folded onto their KV head.

    transformers' SDPA path passes ``enable_gqa=True`` here, and the CPU flash kernel then
    runs one work item per *query* head, each streaming its KV head's whole cache: every KV
    head is read ``H / KV`` times. Folded, each KV head is read once.

    Args:
        query: (B, H, 1, d); key/value: (B, KV, L, d).

    Returns:
        (attn_output (B, 1, H, d), None).
    """
    b, h, _, d = query.shape
    q = query.reshape(b, key.shape[1], h // key.shape[1], d)
    out = F.scaled_dot_product_attention(q, key, value, scale=scaling)
    return out.reshape(b, h, 1, d).transpose(1, 2).contiguous(), None


AttentionInterface.register(ATTN_IMPL, gqa_attention)
AttentionMaskInterface.register(ATTN_IMPL, sdpa_mask)


def text_attn_implementation(model) -> str:
    """The attention implementation of ``model``'s language model."""
    return model.config.get_text_config(decoder=True)._attn_implementation


def use_fast_attention(model) -> None:
    """Set ``model``'s language model to the ``specvlm_gqa`` attention, once, when a pair is built
    (:func:`specvlm.models.pair.pair_from_models`); the vision tower keeps its own. Outside this
    engine the model behaves as with SDPA (everything but short masked queries is transformers' SDPA
    path; :func:`plain_sdpa` gives exactly that path)."""
    if text_attn_implementation(model) != ATTN_IMPL:
        model.set_attn_implementation({"text_config": ATTN_IMPL})
