"""Writes into a draft's static buffer between steps (re-selection's): copied rows, a partial prefill, the
next feed. Entries go by index after the buffer's length (attention does not depend on the order of cached
entries; RoPE carries their positions), within a capacity fixed per request: nothing here allocates or
reads a value to the host.

Source: docs/design.md §4.7 (original positions), §4.13 (static buffers) and §4.14.
"""
from __future__ import annotations

from typing import Any

import torch

from specvlm.models.adapter import video_lm_kwargs
from specvlm.models.attention import STATIC_KWARG
from specvlm.models.staticattn import StaticAttn, causal_bias, key_bias


def copy_rows(dst: Any, src: Any, positions: torch.Tensor) -> None:
    """Self-SD: ``src``'s keys and values at ``positions`` (P,) written into ``dst`` after its length.

    Args:
        dst, src: :class:`~specvlm.engine.statickv.StaticKV` buffers of the same model (the draft's, the target's).
        positions: int64 (P,) slots of ``src``.

    Source: docs/design.md §7 (per-layer keys/values (B, KV, L, d)); Self-SD drafts with the target's weights.
    """
    n = int(positions.shape[0])
    idx = positions.to(src.slots.device)
    write = dst.slots[:n] + dst.length
    for d, s in zip(dst.layers, src.layers):
        d.keys.index_copy_(-2, write, s.keys.index_select(-2, idx).to(d.keys.device, d.keys.dtype))
        d.values.index_copy_(-2, write, s.values.index_select(-2, idx).to(d.values.device, d.values.dtype))
    dst.advance(n)


def append_video(side: Any, pair: Any, d_in: Any, draft_video: tuple[torch.Tensor, torch.Tensor | None],
                 d_idx: torch.Tensor) -> None:
    """Std-SD: a partial draft prefill of its video tokens ``d_idx`` (A,) at their original (M-RoPE) positions,
    written after the buffer's length (causal among themselves, each seeing the whole buffer).

    Args:
        side: the draft's :class:`~specvlm.engine.steps.ModelSide`; pair: the model pair;
        d_in: the draft's prepared inputs; draft_video: its (embeddings (1, Ld, Dd), side features (S, Vd, Dd)
        or None) of the prompt; d_idx: int64 (A,) the draft's video-token indices.

    Source: docs/design.md §4.7 (draft prefill at original positions) and §10 (DeepStack side features).
    """
    d_idx = torch.sort(d_idx).values
    emb, feats = draft_video
    seq = d_in.video_index[d_idx]
    x = emb[:, seq.to(emb.device)]
    a, cache, ad = int(d_idx.numel()), side.cache, side.adapter
    dev = cache.slots.device
    sa = StaticAttn(key_bias(cache.length, cache.slots, side.dtype), cache.slots[:a] + cache.length,
                    causal_bias(a, side.dtype, dev))
    extra = video_lm_kwargs(ad, torch.ones(a, dtype=torch.bool),
                            None if feats is None else feats[:, d_idx.to(feats.device)])
    ad.language_model(side.model)(inputs_embeds=x, position_ids=ad.lm_positions(d_in.positions[:, seq].to(dev)),
                                  attention_mask=sa.block_bias, cache=cache, use_cache=True,
                                  **{STATIC_KWARG: sa}, **extra)
    cache.advance(a)


def only_bonus(st: Any) -> None:
    """The next draft feeds only the bonus token, the last pending one of ``st`` (a
    :class:`~specvlm.engine.steps.SpecState` after the verify): the draft's buffer holds the accepted path.
    Source: docs/design.md §4.14 (``sync``)."""
    st.pending[:1].copy_(st.pending.index_select(0, st.n_pending.view(1) - 1))
    st.n_pending.fill_(1)
