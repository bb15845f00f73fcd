"""CPU/GPU speed-ups through transformers' public extension points.

* :class:`PreallocLayer` / :func:`prealloc_cache`: a KV cache that writes into a
  preallocated buffer (grown geometrically) instead of concatenating the whole
  cache on every step. Rollback and commit slice views of the same buffer.
* ``specvlm_gqa`` attention (registered with ``AttentionInterface``): for short
  queries (decode, tree verify, tree drafting) with an explicit mask it folds the
  query heads that share a KV head into the query axis, so SDPA runs on the KV
  heads directly: no ``repeat_kv`` copy of the whole cache per step. Everything
  else is delegated to transformers' own SDPA path.

Source: DESIGN 7 (profile: masked sdpa path copies KV to every head; DynamicCache
re-concatenates every step); grouped-query attention (Ainslie et al. 2023).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers import AttentionInterface, AttentionMaskInterface, DynamicCache
from transformers.cache_utils import Cache, DynamicLayer
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import sdpa_mask

ATTN_IMPL = "specvlm_gqa"
MAX_GROUPED_QUERY = 256


class PreallocLayer(DynamicLayer):
    """A DynamicLayer whose keys/values are views into a growing preallocated buffer.

    ``keys``/``values`` keep shape (B, kv_heads, L, head_dim); ``crop`` and slicing
    from :mod:`specvlm.kv` keep working because they only shorten the view.
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


def prealloc_cache(model) -> PreallocCache:
    """An empty :class:`PreallocCache` for ``model``'s text decoder."""
    cfg = model.config.get_text_config(decoder=True)
    return PreallocCache(cfg.num_hidden_layers)


def gqa_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None, **kwargs):
    """Attention for short masked queries without repeating KV per head.

    Query heads that share a KV head are folded into the query axis, so one batched matmul per KV
    head reads the cache once; the additive mask is broadcast over the folded heads in place.

    Args:
        query: (B, H, n, d); key/value: (B, KV, L, d); attention_mask: (B|1, 1, n, L) additive float
            or bool (True = visible), or None.

    Returns:
        (attn_output (B, n, H, d), None). Long queries or no mask: transformers' SDPA path.
    """
    b, h, n, d = query.shape
    kvh, L = key.shape[1], key.shape[-2]
    if attention_mask is None or n > MAX_GROUPED_QUERY or kvh == h or attention_mask.dim() != 4 \
            or attention_mask.shape[1] != 1:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                      scaling=scaling, is_causal=is_causal, **kwargs)
    g = h // kvh
    scale = scaling if scaling is not None else d ** -0.5
    mask = attention_mask[..., :L]
    if mask.dtype == torch.bool:
        mask = torch.zeros(mask.shape, dtype=query.dtype, device=mask.device).masked_fill_(
            ~mask, torch.finfo(query.dtype).min)
    scores = torch.matmul(query.reshape(b, kvh, g * n, d), key.transpose(-1, -2))  # (B, KV, G*n, L)
    scores.mul_(scale).view(b, kvh, g, n, L).add_(mask[:, :, None].to(scores.dtype))
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(value.dtype)
    out = torch.matmul(probs, value)  # (B, KV, G*n, d)
    return out.view(b, h, n, d).transpose(1, 2).contiguous(), None


AttentionInterface.register(ATTN_IMPL, gqa_attention)
AttentionMaskInterface.register(ATTN_IMPL, sdpa_mask)


def text_attn_implementation(model) -> str:
    """The attention implementation of ``model``'s language model."""
    return model.config.get_text_config(decoder=True)._attn_implementation


def set_text_attn_implementation(model, impl: str) -> None:
    """Switch only the language model's attention (the vision tower keeps its own)."""
    model.set_attn_implementation({"text_config": impl})


def use_fast_attention(model) -> None:
    """Switch ``model``'s language model to the ``specvlm_gqa`` attention (SDPA for everything but
    short masked queries); the vision tower and ``generate()`` outside our engine are unaffected
    apart from that."""
    set_text_attn_implementation(model, ATTN_IMPL)
