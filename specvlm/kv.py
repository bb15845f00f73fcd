"""KV-cache commit and rollback over transformers' public Cache API.

Per-layer tensors live in ``cache.layers[i].keys / .values`` with shape
(B, kv_heads, L, head_dim) (docs/design.md §7).

Source: docs/design.md §4.10 (commit = keep prefix + accepted path, in path order).
"""
from __future__ import annotations

import torch
from transformers import DynamicCache


def new_cache(model) -> DynamicCache:
    """An empty preallocating cache for ``model``'s text decoder (see :mod:`specvlm.fast`)."""
    from specvlm.fast import prealloc_cache

    return prealloc_cache(model)


def clone_cache(model, cache: DynamicCache) -> DynamicCache:
    """A new cache for ``model`` holding a copy of every token in ``cache`` (the original is untouched).

    Args:
        model: the model the cache belongs to (for :func:`new_cache`).
        cache: per layer keys / values (B, kv_heads, L, head_dim).

    Returns:
        An independent cache of the same L tokens.
    """
    out = new_cache(model)
    for i, layer in enumerate(cache.layers):
        out.update(layer.keys.clone(), layer.values.clone(), i)
    return out


def cache_length(cache: DynamicCache) -> int:
    """Tokens currently held (L)."""
    return int(cache.get_seq_length())


def truncate(cache: DynamicCache, length: int) -> None:
    """Roll back to the first ``length`` tokens (no-op if already that short).

    Raises:
        ValueError: negative length.
    """
    if length < 0:
        raise ValueError(f"cannot truncate a cache to {length} tokens.")
    drop = cache_length(cache) - length
    if drop > 0:
        cache.crop(-drop)


def keep_tail(cache: DynamicCache, prefix_len: int, tail_index: torch.Tensor) -> None:
    """Keep ``prefix_len`` tokens plus the tail entries ``prefix_len + tail_index``, in that order.

    Only the tail is gathered and rewritten, so the cost is O(tail), not O(L), when
    ``tail_index`` is a prefix of the tail (the usual case after a chain accept).

    Args:
        cache: the cache holding prefix + N tail tokens.
        prefix_len: P, tokens kept as they are.
        tail_index: int64 (A,), indices in [0, N) of tail tokens to keep, in path order.
    """
    a = int(tail_index.numel())
    for layer in cache.layers:
        if not getattr(layer, "is_initialized", True) or layer.keys is None:
            continue
        idx = tail_index.to(layer.keys.device) + prefix_len
        if a and not torch.equal(idx, torch.arange(prefix_len, prefix_len + a, device=idx.device)):
            layer.keys[..., prefix_len:prefix_len + a, :] = layer.keys.index_select(-2, idx)
            layer.values[..., prefix_len:prefix_len + a, :] = layer.values.index_select(-2, idx)
        layer.keys = layer.keys[..., : prefix_len + a, :]
        layer.values = layer.values[..., : prefix_len + a, :]
