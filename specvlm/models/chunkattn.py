"""A long causal prefill's attention cut into query chunks, with a stop check between chunks.

One decoder layer's attention over a long video prompt is a single kernel call of many seconds on a CPU,
so a stop check per layer (:mod:`specvlm.models.stopping`) cannot answer sooner than that. Inside
:func:`~specvlm.models.stopping.stop_between_layers`, :func:`causal_attention` runs the same attention as
query chunks of about equal work, polling the stop check between them; its output is bitwise the output of
the single call (transformers' SDPA path: ``is_causal=True``, ``enable_gqa=True``) on CPUs whose kernel runs
AVX-512, which a test checks; on AVX2 CPUs the masked chunks round differently from the causal call, within
float32 rounding (~2e-7) of it. Vanilla and speculative decoding prefill through the same path, so their
outputs compare as before.

How it stays exact: PyTorch's CPU flash kernel computes every query row by the same blocked online softmax
over the same key blocks whether the row comes in one call or in a chunk, as long as the chunk sees the
same keys ``[0, q1)`` with the keys after the row masked (``is_causal`` aligns to the top-left corner, so
only the first chunk can use it). The later chunks pass their causal mask as a strided view of one vector:
with the chunk's query rows reversed, row ``r`` hides key ``c`` exactly when ``r + c >= q1``, so the mask
is ``buf[r + c]`` (strides ``(1, 1)``) and costs ``O(q1)`` memory instead of ``O(chunk x q1)``.

It applies only where that was verified: CPU, float32, no dropout, an empty cache (query length = key
length) and a module with grouped-query heads (``num_key_value_groups``), as transformers' decoder layers
have. Everything else keeps the single call.

Source: PyTorch ``scaled_dot_product_attention`` (``is_causal`` top-left alignment); FlashAttention's
blocked online softmax (Dao et al. 2022).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from specvlm.models import stopping

CHUNK_WORK = 2 ** 33
"""Work per chunk: query-key pairs x query heads x head dim (the bundled model: ~2^25 pairs, 8 chunks per
layer on a 256-frame prompt)."""
ROW_ALIGN = 256
"""Chunk boundaries are multiples of this many query rows (the CPU kernel's query block at long lengths)."""


def chunk_bounds(n: int, heads: int, head_dim: int, work: int | None = None, align: int | None = None) -> list[int]:
    """Query-row boundaries ``[0, b1, ..., n]`` of about equal causal work (row ``r`` sees ``r + 1`` keys).

    Args:
        n: query rows (= keys: an empty cache).
        heads: query heads; head_dim: their size.
        work: the work per chunk (None: :data:`CHUNK_WORK`).
        align: the boundaries' multiple (None: :data:`ROW_ALIGN`).

    Returns:
        ascending boundaries, each inner one a positive multiple of ``align`` at least ``align`` rows
        before ``n``; ``[0, n]`` (one chunk) when the whole fits ``work``.

    Source: this module (equal areas under the causal triangle: ``b_i = n * sqrt(i / k)``).
    """
    work = CHUNK_WORK if work is None else work
    align = ROW_ALIGN if align is None else align
    total = n * (n + 1) // 2 * heads * head_dim
    k = max(1, math.ceil(total / max(work, 1)))
    inner = {int(n * math.sqrt(i / k)) // align * align for i in range(1, k)}
    return [0, *sorted(b for b in inner if 0 < b <= n - align), n]


def applies(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, dropout: float,
            is_causal: bool | None) -> bool:
    """Whether :func:`causal_attention` replaces transformers' single SDPA call for this unmasked query:
    inside a stop-checked block on this thread, CPU float32, no dropout, a causal module with grouped-query
    heads, an empty cache and more than one chunk.

    Args:
        module: the attention module (its ``is_causal`` and ``num_key_value_groups``).
        query: (B, H, n, d); key: (B, KV, L, d).
        dropout: the attention dropout probability.
        is_causal: the caller's causal flag (None: the module's).

    Source: this module (no external reference).
    """
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    n, L = query.shape[-2], key.shape[-2]
    return (stopping.active() and causal and dropout == 0.0 and n == L and hasattr(module, "num_key_value_groups")
            and checks_per_layer(n, query.shape[1], query.shape[-1], query.device, query.dtype) > 1)


def checks_per_layer(n: int, heads: int, head_dim: int, device: torch.device | str, dtype: torch.dtype) -> int:
    """Stop checks one decoder layer's attention makes over an ``n``-token prompt from an empty cache inside
    :func:`~specvlm.models.stopping.stop_between_layers`: one at its start, plus one between every two chunks
    where :func:`causal_attention` applies (CPU, float32), so the number of chunks there, else 1.

    Source: this module (no external reference).
    """
    if torch.device(device).type != "cpu" or dtype != torch.float32:
        return 1
    return len(chunk_bounds(n, heads, head_dim)) - 1


def model_checks_per_layer(model: torch.nn.Module, n: int) -> int:
    """:func:`checks_per_layer` for the language model of ``model`` (its text config's heads and head size,
    its parameters' device and dtype) on an ``n``-token prompt.

    Source: this module (no external reference).
    """
    cfg = model.config.get_text_config(decoder=True)
    heads = int(cfg.num_attention_heads)
    head_dim = int(getattr(cfg, "head_dim", None) or cfg.hidden_size // heads)
    param = next(model.parameters())
    return checks_per_layer(n, heads, head_dim, param.device, param.dtype)


def causal_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                     scaling: float | None) -> torch.Tensor:
    """Causal attention of a whole prompt in query chunks (:func:`chunk_bounds`), with
    :func:`specvlm.models.stopping.check` between chunks.

    Args:
        query: float32 (B, H, n, d); key/value: float32 (B, KV, n, d), KV dividing H.
        scaling: the softmax scale (None: ``d ** -0.5``).

    Returns:
        float32 (B, n, H, d), what ``scaled_dot_product_attention(query, key, value, is_causal=True,
        enable_gqa=True, scale=scaling)`` transposed to (B, n, H, d) gives: bitwise with AVX-512 kernels, within
        float32 rounding with AVX2 ones.

    Raises:
        Stopped: the thread's ``should_stop`` returned True between two chunks.

    Source: this module's docstring (why the chunks are exact).
    """
    b, h, n, d = query.shape
    bounds = chunk_bounds(n, h, d)
    out = query.new_empty(b, n, h, d)
    first = bounds[1]
    out[:, :first] = F.scaled_dot_product_attention(
        query[:, :, :first], key[:, :, :first], value[:, :, :first], is_causal=True, scale=scaling,
        enable_gqa=True).transpose(1, 2)
    for q0, q1 in zip(bounds[1:], bounds[2:]):
        stopping.check()
        rows = q1 - q0
        buf = query.new_zeros(rows + q1 - 1)
        buf[q1:] = float("-inf")
        mask = buf.as_strided((rows, q1), (1, 1))   # reversed row r hides key c iff r + c >= q1
        part = F.scaled_dot_product_attention(query[:, :, q0:q1].flip(2), key[:, :, :q1], value[:, :, :q1],
                                              attn_mask=mask, scale=scaling, enable_gqa=True)
        out[:, q0:q1] = part.flip(2).transpose(1, 2)
    return out
