"""The prefill phase: the target's two-pass prefill with attention scores (or a copy of a reused one),
pruning, and the draft's prefill on the kept tokens.

Source: SpecVLM (Ji et al., EMNLP 2025, arXiv 2508.16201) Sec. 3.2; docs/design.md §4.1-4.2 and §4.7.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable

import torch

from specvlm.config import DecodeConfig, PruneConfig
from specvlm.engine import kv
from specvlm.engine.measures import Timer
from specvlm.models.attention import ATTN_IMPL, attention_weights, text_attn_implementation
from specvlm.engine.forward import embed_tokens, is_video, lm_forward, prompt_video
from specvlm.models.adapter import video_lm_kwargs
from specvlm.models.pair import ModelPair
from specvlm.models.stopping import stop_between_layers
from specvlm.spec.adaptive import adaptive_drop_rate
from specvlm.spec.grid import map_keep
from specvlm.spec.pruning import SCORE_METHODS, prune
from specvlm.types import ModelInputs, PrefillInfo


@dataclass
class TargetPrefill:
    """Target state after prefill (docs/design.md §4.1-4.2).

    Attributes:
        cache: target KV cache over the L prompt tokens.
        first_token: greedy token after the prompt.
        embeds: float (1, L, D) prompt embeddings (reused by a Self-SD draft).
        scores: float32 (V,) text-to-video attention scores, or None.
        last_logits: float (vocab,) target logits after the prompt (first token under sampling).
        last_row: float32 (V,) the last prompt position's (it chose the first token) attention over the video
            tokens, heads then layers averaged, or None without scores.
        side: float (S, V, D) the video tokens' side features (e.g. DeepStack), or None; reused,
            cut to the kept tokens, by a Self-SD draft.
        draft_video: a Std-SD draft's own :func:`prompt_video` result (float (1, L, Dd)
            embeddings, side features or None), when computed ahead to be shared by several
            requests; None = computed by :func:`prefill_draft`.
    """

    cache: Any
    first_token: int
    embeds: torch.Tensor
    scores: torch.Tensor | None
    last_logits: torch.Tensor | None = None
    side: torch.Tensor | None = None
    draft_video: tuple[torch.Tensor, torch.Tensor | None] | None = None
    last_row: torch.Tensor | None = None


def attention_scores(per_layer: list[torch.Tensor], video_index: torch.Tensor) -> torch.Tensor:
    """Text-to-video scores from pass B's attention.

    Args:
        per_layer: per layer float32 (P + q,): attention weights averaged over heads and over
            pass B's q query positions (reduced on the fly in :func:`prefill_target`).
        video_index: int64 (V,) key positions of the video tokens.

    Returns:
        float32 (V,): mean over layers, read at the video-token positions.

    Source: SpecVLM Sec. 3.2 (verifier-guided importance); docs/design.md §4.2.
    """
    stacked = torch.stack([t.to(per_layer[0].device) for t in per_layer])
    return stacked.mean(0)[video_index.to(stacked.device)].cpu()


def pass_a_length(inputs: ModelInputs) -> int:
    """Tokens in pass A of :func:`prefill_target`: the prompt up to its last video token or, when a subtitle
    transcript follows the video, its last transcript token (the scores stay question-to-video attention);
    at most the prompt length - 1, so pass B has a query.

    Source: docs/design.md §4.1 (two-pass prefill).
    """
    last = int(inputs.video_index[-1])
    if inputs.subtitle_mask is not None and bool(inputs.subtitle_mask.any()):
        last = max(last, int(inputs.subtitle_mask.nonzero().max()))  # transcript: pass A, not a score query
    return min(last + 1, int(inputs.input_ids.shape[1]) - 1)


def prefill_target(pair: ModelPair, inputs: ModelInputs, with_scores: bool,
                   video: tuple[torch.Tensor, torch.Tensor | None] | None = None) -> TargetPrefill:
    """Two-pass target prefill: pass A up to the last video token, pass B the rest.

    A subtitle transcript after the video (:mod:`specvlm.text.prompting`) goes into pass A, so the
    scores stay question-to-video attention as in the paper.

    Pass B runs with eager attention only when ``with_scores``, for this call only
    (:func:`specvlm.models.attention.attention_weights`: no model setting changes, so other requests
    on the same pair are unaffected); each layer's weights are reduced as soon as they exist, so
    memory stays O(heads x text x L) for one layer.

    ``video`` (the target's :func:`prompt_video` result, e.g. ``(tp.embeds, tp.side)`` of an
    earlier prefill of the same prompt) skips the video encoder, e.g. to prefill the same prompt
    with and without scores.

    Raises:
        ValueError: the prompt has no video tokens.
        ValueError: scores asked of a pair not built with this engine's attention.
        RuntimeError: the scoring pass computed no attention weights.
    """
    model, ad = pair.target, pair.adapter
    if inputs.num_video_tokens == 0:
        raise ValueError("the prompt contains no video tokens: the chat template must include the video.")
    emb, side = prompt_video(model, ad, inputs) if video is None else video
    split = pass_a_length(inputs)
    cache = kv.new_cache(model)
    extra = video_lm_kwargs(ad, is_video(inputs)[:split], side)  # every video token is in pass A
    lm_forward(model, ad, emb[:, :split], inputs.positions[:, :split], cache, rows=None, extra=extra)
    scores = None
    if with_scores:
        if text_attn_implementation(model) != ATTN_IMPL:
            raise ValueError("the target's language model does not run this engine's attention: build the pair "
                             "with specvlm.models.pair.pair_from_models or load_pair.")
        sink: list[torch.Tensor] = []   # per layer, pass B's weights averaged over heads and queries
        last: list[torch.Tensor] = []   # per layer, the last prompt position's weights averaged over heads
        with attention_weights(lambda w: (sink.append(w[0].float().mean(dim=(0, 1))),
                                          last.append(w[0, :, -1].float().mean(0)))):
            logits = lm_forward(model, ad, emb[:, split:], inputs.positions[:, split:], cache)
        if not sink:
            raise RuntimeError("no attention weights were computed in the scoring pass.")
        scores = attention_scores(sink, inputs.video_index)
        return TargetPrefill(cache, int(logits[-1].argmax()), emb, scores, logits[-1], side,
                             last_row=attention_scores(last, inputs.video_index))
    else:
        logits = lm_forward(model, ad, emb[:, split:], inputs.positions[:, split:], cache)
    return TargetPrefill(cache, int(logits[-1].argmax()), emb, scores, logits[-1], side)


def prefill_draft(pair: ModelPair, inputs: ModelInputs, target: TargetPrefill, keep: torch.Tensor,
                  target_inputs: ModelInputs | None = None) -> tuple[Any, int]:
    """Draft prefill on all text tokens + the kept video tokens, at their original positions.

    Args:
        inputs: the draft's view of the prompt (with the subtitle transcript unless it is hidden
            from the draft: ``inputs.draft_drop_mask()``).
        keep: int64 (K,) sorted indices into the V video tokens.
        target_inputs: the target's view when it differs from ``inputs`` (subtitle mode
            ``draft``); a Self-SD draft then reuses the target's video features only.

    Returns:
        (draft cache, draft prompt length).

    Source: docs/design.md §4.7 (positions kept, not renumbered).
    """
    L = inputs.input_ids.shape[1]
    seq_keep = torch.ones(L, dtype=torch.bool)
    seq_keep[inputs.video_index] = False
    seq_keep[inputs.video_index[keep]] = True
    drop = inputs.draft_drop_mask()
    if drop is not None:
        seq_keep &= ~drop
    idx = seq_keep.nonzero().flatten()
    draft = pair.draft
    side = target.side
    if pair.self_sd and target_inputs is not None and target_inputs is not inputs:
        emb = embed_tokens(draft, inputs.input_ids).clone()
        feats = target.embeds[0, target_inputs.video_index.to(target.embeds.device)]
        emb[0, inputs.video_index.to(emb.device)] = feats.to(emb.dtype)
    elif pair.self_sd:
        emb = target.embeds
    elif target.draft_video is not None:
        emb, side = target.draft_video
    else:
        emb, side = prompt_video(draft, pair.draft_adapter, inputs)
    emb = emb[:, idx.to(emb.device)]
    if side is not None:  # side features of the kept video tokens, in sequence order
        side = side[:, torch.unique(keep).to(side.device)]
    extra = video_lm_kwargs(pair.draft_adapter, is_video(inputs)[idx], side)
    cache = kv.new_cache(draft)
    lm_forward(draft, pair.draft_adapter, emb, inputs.positions[:, idx], cache, rows=None, extra=extra)
    return cache, int(idx.numel())


def target_prefill(pair: ModelPair, inputs: ModelInputs, with_scores: bool, reuse: TargetPrefill | None) -> TargetPrefill:
    """The target prefill: computed, or a copy of ``reuse`` after checking that it fits ``inputs``.

    Source: docs/design.md §4.1-4.2.
    """
    if reuse is None:
        return prefill_target(pair, inputs, with_scores=with_scores)
    held, L = kv.cache_length(reuse.cache), int(inputs.input_ids.shape[1])
    if held != L:
        raise ValueError(f"prefill holds {held} tokens but the target's prompt has {L}: make it with "
                         "prefill_target(pair, inputs.for_target(), ...) for these inputs.")
    if with_scores and reuse.scores is None:
        raise ValueError("prefill has no attention scores, which this pruning method needs: make it with "
                         "prefill_target(..., with_scores=True).")
    return replace(reuse, cache=kv.clone_cache(pair.target, reuse.cache))


def subtitle_tokens(inputs: ModelInputs, seen_by: str) -> int:
    """Transcript tokens in the prompt of ``seen_by`` ("target" or "draft").

    Source: docs/design.md §2 (subtitle modes).
    """
    hidden = {"target": "draft", "draft": "target"}[seen_by]
    return 0 if inputs.subtitle_mode in (hidden, "none") else inputs.num_subtitle_tokens


@dataclass
class SpeculativePrefill:
    """What the speculative loop starts from (docs/design.md §4.1-4.7).

    Attributes:
        t_in: the target's inputs (without the transcript in subtitle mode ``draft``).
        d_in: the draft's inputs (its own prompt when its token grid differs).
        tp: the target prefill (KV cache of L tokens, last logits, scores).
        d_cache: the draft's KV cache over the kept video tokens; d_len: its length in tokens.
        info: the PrefillInfo event the loop yields first.
    """

    t_in: ModelInputs
    d_in: ModelInputs
    tp: TargetPrefill
    d_cache: Any
    d_len: int
    info: PrefillInfo


def speculative_prefill(pair: ModelPair, inputs: ModelInputs, config: DecodeConfig, reuse: TargetPrefill | None,
                        should_stop: Callable[[], bool] | None) -> SpeculativePrefill:
    """Target prefill (two passes, scores), pruning and the draft prefill on the kept video tokens.

    Raises:
        Stopped: ``should_stop`` turned True between two layers of a prefill.
        ValueError: as :func:`prefill` for a ``reuse`` of other inputs.

    Source: SpecVLM (arXiv 2508.16201) Sec. 3.1-3.2; docs/design.md §4.1-4.7.
    """
    t_in = inputs.for_target()
    # 4.1-4.2 target prefill in two passes, attention scores from pass B
    with Timer(pair.device) as t_pre, stop_between_layers(should_stop):
        tp = target_prefill(pair, t_in, config.prune.method in SCORE_METHODS, reuse)
    # 4.3-4.6 pruning (pure), with r chosen per clip when asked
    with Timer() as t_prune:
        pcfg, why_r = drop_rate_for(config, tp.scores)
        pr = prune(tp.scores, pcfg, grid=inputs.token_grid, num_video_tokens=inputs.num_video_tokens,
                   force_keep=inputs.force_keep)
    # 4.7 draft prefill on kept video tokens (+ transcript if the draft sees it), original positions;
    # a draft with its own token grid reads its own prompt, the kept set carried over by overlap
    d_in = inputs.draft_inputs or inputs
    with Timer(pair.draft.device) as t_dpre, stop_between_layers(should_stop):
        if config.reselect.enabled and not pair.self_sd and tp.draft_video is None:  # kept for re-selection
            tp = replace(tp, draft_video=prompt_video(pair.draft, pair.draft_adapter, d_in))
        keep = pr.keep if d_in is inputs else map_keep(pr.keep, inputs.token_grid, d_in.token_grid)
        d_cache, d_len = prefill_draft(pair, d_in, tp, keep, target_inputs=t_in)
    info = PrefillInfo(int(t_in.input_ids.shape[1]), inputs.num_video_tokens, d_len, pr, t_pre.seconds,
                       t_prune.seconds, t_dpre.seconds, inputs.token_grid, inputs.frames_per_token,
                       subtitle_tokens(inputs, "target"), subtitle_tokens(d_in, "draft"), float(pcfg.drop_rate), why_r)
    return SpeculativePrefill(t_in, d_in, tp, d_cache, d_len, info)


def drop_rate_for(config: DecodeConfig, scores: torch.Tensor | None) -> tuple[PruneConfig, str]:
    """The pruning settings a request uses and one sentence on its r: ``drop_rate``, or with
    ``adaptive_r`` the clip's own r from the Stage I scores (:func:`specvlm.spec.adaptive.adaptive_drop_rate`).

    Source: SpecVLM (arXiv 2508.16201) Sec. 3.2 and 4 (r = 0.9 fixed); docs/design.md §4.3.
    """
    p = config.prune
    if p.method == "none":
        return replace(p, drop_rate=0.0), "r = 0: the draft sees every video token (method none)."
    if not p.adaptive_r:
        return p, f"r = {p.drop_rate:g} as set (fixed drop rate)."
    if scores is None:
        return p, f"r = {p.drop_rate:g} as set: method {p.method} has no attention scores to adapt r from."
    r, why = adaptive_drop_rate(scores, p)
    return replace(p, drop_rate=r), why
