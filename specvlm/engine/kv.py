"""The prefill's KV caches over transformers' public Cache API (the decode loop copies them into static
buffers, :mod:`specvlm.engine.statickv`).

:class:`PreallocLayer` / :func:`new_cache`: a KV cache that writes into a preallocated
buffer (grown geometrically) instead of concatenating the whole cache on every chunk (a
DynamicCache re-concatenates every time, docs/design.md §7). A rollback (:func:`truncate`, the
step-cost measurements') slices a view of the same buffer.

Per-layer tensors live in ``cache.layers[i].keys / .values`` with shape
(B, kv_heads, L, head_dim) (docs/design.md §7).

Source: docs/design.md §4.1 and §7.
"""
from __future__ import annotations

import torch
from transformers import DynamicCache
from transformers.cache_utils import Cache, DynamicLayer


class PreallocLayer(DynamicLayer):
    """A DynamicLayer whose keys/values are views into a growing preallocated buffer.

    ``keys``/``values`` keep shape (B, kv_heads, L, head_dim); ``crop`` and slicing
    in this module keep working because they only shorten the view.
    """

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        super().lazy_initialization(key_states, value_states)
        self._kbuf = self._vbuf = None

    def _ensure(self, need: int, like_k: torch.Tensor, like_v: torch.Tensor) -> None:
        cap = 0 if self._kbuf is None else self._kbuf.shape[-2]
        if need <= cap:
            return
        new_cap = max(need + 256, int(cap * 1.25))
        kb = like_k.new_empty(*like_k.shape[:-2], new_cap, like_k.shape[-1])
        vb = like_v.new_empty(*like_v.shape[:-2], new_cap, like_v.shape[-1])
        cur = self.get_seq_length()
        if cur:
            kb[..., :cur, :] = self.keys
            vb[..., :cur, :] = self.values
        self._kbuf, self._vbuf = kb, vb
        self.keys, self.values = kb[..., :cur, :], vb[..., :cur, :]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        cur = self.get_seq_length()
        n = cur + key_states.shape[-2]
        self._ensure(n, key_states, value_states)
        self._kbuf[..., cur:n, :] = key_states
        self._vbuf[..., cur:n, :] = value_states
        self.keys, self.values = self._kbuf[..., :n, :], self._vbuf[..., :n, :]
        return self.keys, self.values


class PreallocCache(DynamicCache):
    """DynamicCache made of :class:`PreallocLayer` layers (one per decoder layer)."""

    def __init__(self, num_layers: int):
        Cache.__init__(self, layers=[PreallocLayer() for _ in range(num_layers)])


def new_cache(model) -> PreallocCache:
    """An empty preallocating cache for ``model``'s text decoder (:class:`PreallocCache`)."""
    return PreallocCache(model.config.get_text_config(decoder=True).num_hidden_layers)


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
