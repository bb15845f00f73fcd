"""Vanilla and speculative decoding as streaming generators.

``stream(pair, inputs, config)`` is the main API: given inputs from
:func:`specvlm.inputs.prepare`, it yields one :class:`PrefillInfo`, then one
:class:`StepEvent` per target forward (vanilla) or per verify step
(speculative). ``generate()`` consumes it into a :class:`DecodeResult`. Both also
take a clip and a prompt (``stream(pair, clip, prompt, config)``), preparing them first.

The numbered comments in :func:`_stream_speculative` mirror docs/design.md §4.1-4.10.
No state is kept on model objects: caches and positions live in local state.

Source: SpecVLM (Ji et al., EMNLP 2025, arXiv 2508.16201) Sec. 3; EAGLE-2
(Li et al. 2024) for the dynamic tree; Leviathan et al. 2023 for SD.
"""
from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterator

import torch

from specvlm import kv
from specvlm.config import DecodeConfig, SamplingConfig
from specvlm.drafting import draft_substitute, for_draft, make_drafter
from specvlm.fast import set_text_attn_implementation, text_attn_implementation
from specvlm.inputs import VideoInput, as_clip, resolve_call
from specvlm.metrics import Timer, logit_margin, tau as mean_tau, tokens_per_target_forward
from specvlm.models import ModelInputs, ModelPair
from specvlm.models.base import encode_video, video_lm_kwargs
from specvlm.pruning import SCORE_METHODS, prune
from specvlm.regrid import map_keep
from specvlm.sampling import make_generator, process_logits, sample
from specvlm.threads import adapt as adapt_threads
from specvlm.tree import DraftTree, additive_mask, feed_mask, verify_mask
from specvlm.types import DecodeResult, DraftTreeRecord, PrefillInfo, StepEvent

log = logging.getLogger(__name__)



# --------------------------------------------------------------------------- forwards
def _device(model: Any) -> torch.device:
    return model.get_input_embeddings().weight.device


def lm_forward(model: Any, adapter: Any, embeds: torch.Tensor, positions: torch.Tensor, cache: Any,
               mask: torch.Tensor | None = None, rows: slice | None = slice(-1, None),
               extra: dict[str, Any] | None = None) -> torch.Tensor | None:
    """One language-model forward over ``n`` new tokens, appending to ``cache``.

    Args:
        model: a ``...ForConditionalGeneration`` model.
        adapter: its family adapter.
        embeds: float (1, n, D) input embeddings.
        positions: int64 (R, n) position ids.
        cache: KV cache holding P tokens; P + n afterwards.
        mask: float additive (1, 1, n, P + n) or None for plain causal attention.
        rows: which of the n rows to run the LM head on (None = none).
        extra: more language-model keywords for this chunk (the video tokens' side features,
            :func:`specvlm.models.base.video_lm_kwargs`), or None.

    Returns:
        logits float (rows, vocab), or None when ``rows`` is None.
    """
    dev = _device(model)
    out = adapter.language_model(model)(
        inputs_embeds=embeds, position_ids=adapter.lm_positions(positions.to(dev)), attention_mask=mask,
        cache=cache, use_cache=True, **(extra or {}),
    )
    if rows is None:
        return None
    return model.get_output_embeddings()(out.last_hidden_state[0, rows])


def embed_tokens(model: Any, token_ids: list[int] | torch.Tensor) -> torch.Tensor:
    """Token ids -> float (1, n, D) embeddings on the model's device."""
    ids = torch.as_tensor(token_ids, dtype=torch.long, device=_device(model)).reshape(1, -1)
    return model.get_input_embeddings()(ids)


def prompt_video(model: Any, adapter: Any, inputs: ModelInputs) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Prompt embeddings with the video encoder's features at the video positions, and side features.

    The video encoder runs once here (per model).

    Returns:
        (float (1, L, D) embeddings, float (S, V, D) side features or None; see
        :class:`specvlm.models.base.VideoEncoding`).

    Raises:
        ValueError: the encoder's features do not match the prompt's video tokens.
    """
    enc = encode_video(adapter, model, inputs)
    feats = enc.features
    emb = model.get_input_embeddings()(inputs.input_ids.to(_device(model))).clone()
    if feats.shape[0] != inputs.num_video_tokens:
        raise ValueError(f"video features ({feats.shape[0]}) and video tokens ({inputs.num_video_tokens}) do "
                         "not match: the prompt must contain exactly one video placeholder.")
    emb[0, inputs.video_index.to(emb.device)] = feats.to(emb.dtype)
    return emb, enc.side


def prompt_embeds(model: Any, adapter: Any, inputs: ModelInputs) -> torch.Tensor:
    """Prompt embeddings with the video encoder's features at the video positions: float (1, L, D)."""
    return prompt_video(model, adapter, inputs)[0]


def _is_video(inputs: ModelInputs) -> torch.Tensor:
    """Bool (L,): which prompt positions hold video tokens."""
    flags = torch.zeros(inputs.input_ids.shape[1], dtype=torch.bool)
    flags[inputs.video_index] = True
    return flags


# --------------------------------------------------------------------------- prefill
@dataclass
class TargetPrefill:
    """Target state after prefill (docs/design.md §4.1-4.2).

    Attributes:
        cache: target KV cache over the L prompt tokens.
        first_token: greedy token after the prompt.
        embeds: float (1, L, D) prompt embeddings (reused by a Self-SD draft).
        scores: float32 (V,) text-to-video attention scores, or None.
        last_logits: float (vocab,) target logits after the prompt (first token under sampling).
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


def attention_scores(per_layer: list[torch.Tensor], video_index: torch.Tensor) -> torch.Tensor:
    """Text-to-video scores from pass B's attention.

    Args:
        per_layer: per layer float32 (P + q,): attention weights averaged over heads and over
            pass B's q query positions (reduced on the fly by :func:`_score_hooks`).
        video_index: int64 (V,) key positions of the video tokens.

    Returns:
        float32 (V,): mean over layers, read at the video-token positions.

    Source: SpecVLM Sec. 3.2 (verifier-guided importance); docs/design.md §4.2.
    """
    stacked = torch.stack([t.to(per_layer[0].device) for t in per_layer])
    return stacked.mean(0)[video_index.to(stacked.device)].cpu()


def _score_hooks(lm: torch.nn.Module, sink: list[torch.Tensor]) -> list[Any]:
    """Forward hooks that reduce each layer's eager attention weights (B, H, q, k) to (k,) at once.

    Only the current layer's weights are alive at any time, so memory stays O(H x q x L) instead of
    keeping every layer's weights (which would be ~8 GB for a 72B target at 16k tokens).
    """
    def hook(_module, _args, output):
        weights = output[1] if isinstance(output, tuple) and len(output) > 1 else None
        if weights is not None:
            sink.append(weights[0].float().mean(dim=(0, 1)))

    return [layer.self_attn.register_forward_hook(hook) for layer in lm.layers]


def prefill_target(pair: ModelPair, inputs: ModelInputs, with_scores: bool,
                   video: tuple[torch.Tensor, torch.Tensor | None] | None = None) -> TargetPrefill:
    """Two-pass target prefill: pass A up to the last video token, pass B the rest.

    A subtitle transcript after the video (:mod:`specvlm.prompting`) goes into pass A, so the
    scores stay question-to-video attention as in the paper.

    Pass B runs with eager attention only when ``with_scores``; each layer's weights are reduced
    by a forward hook as soon as they exist, so memory stays O(heads x text x L) for one layer.

    ``video`` (the target's :func:`prompt_video` result, e.g. ``(tp.embeds, tp.side)`` of an
    earlier prefill of the same prompt) skips the video encoder, e.g. to prefill the same prompt
    with and without scores.

    Raises:
        ValueError: the prompt has no video tokens.
        RuntimeError: the attention modules returned no weights under eager attention.
    """
    model, ad = pair.target, pair.adapter
    if inputs.num_video_tokens == 0:
        raise ValueError("the prompt contains no video tokens: the chat template must include the video.")
    emb, side = prompt_video(model, ad, inputs) if video is None else video
    L = emb.shape[1]
    last = int(inputs.video_index[-1])
    if inputs.subtitle_mask is not None and bool(inputs.subtitle_mask.any()):
        last = max(last, int(inputs.subtitle_mask.nonzero().max()))  # transcript: pass A, not a score query
    split = min(last + 1, L - 1)
    cache = kv.new_cache(model)
    extra = video_lm_kwargs(ad, _is_video(inputs)[:split], side)  # every video token is in pass A
    lm_forward(model, ad, emb[:, :split], inputs.positions[:, :split], cache, rows=None, extra=extra)
    scores = None
    if with_scores:
        impl = text_attn_implementation(model)
        sink: list[torch.Tensor] = []
        handles = _score_hooks(ad.language_model(model), sink)
        set_text_attn_implementation(model, "eager")
        try:
            logits = lm_forward(model, ad, emb[:, split:], inputs.positions[:, split:], cache)
        finally:
            set_text_attn_implementation(model, impl)
            for h in handles:
                h.remove()
        if not sink:
            raise RuntimeError("no attention weights were returned under eager attention.")
        scores = attention_scores(sink, inputs.video_index)
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
    extra = video_lm_kwargs(pair.draft_adapter, _is_video(inputs)[idx], side)
    cache = kv.new_cache(draft)
    lm_forward(draft, pair.draft_adapter, emb, inputs.positions[:, idx], cache, rows=None, extra=extra)
    return cache, int(idx.numel())


# --------------------------------------------------------------------------- draft side
class DraftRunner:
    """Owns the draft's KV cache during one request: pending tokens, tree feeds, rollback.

    Args:
        pair: the model pair.
        cache: draft cache after draft prefill.
        rope_dims: R, rows of the position ids.
        pos_offset: draft position - target position for the same token (> 0 when the draft's
            prompt holds a subtitle transcript the target's does not).
    """

    def __init__(self, pair: ModelPair, cache: Any, rope_dims: int, pos_offset: int = 0):
        self.pair, self.cache, self.R = pair, cache, rope_dims
        self.offset = int(pos_offset)
        self.model, self.ad = pair.draft, pair.draft_adapter
        self.base = kv.cache_length(cache)
        self.root_pos = 0
        self.slot: dict[int, int] = {}

    def _logp(self, logits: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(logits[..., : self.pair.shared_vocab].float(), -1)

    def feed_pending(self, tokens: list[int], root_pos: int) -> torch.Tensor:
        """Feed tokens not yet in the draft cache, ending with the root at target position ``root_pos``.

        Returns:
            float32 (vocab,) draft log-probs after the root.
        """
        n = len(tokens)
        root_pos = root_pos + self.offset
        pos = torch.arange(root_pos - n + 1, root_pos + 1).expand(self.R, n)
        logits = lm_forward(self.model, self.ad, embed_tokens(self.model, tokens), pos, self.cache)
        self.base = kv.cache_length(self.cache)
        self.root_pos = root_pos
        self.slot = {}
        return self._logp(logits[-1])

    def feed_nodes(self, nodes: list[int], tree: DraftTree) -> torch.Tensor:
        """Feed tree nodes whose ancestors are already fed; returns float32 (F, vocab) log-probs.

        A single node that may see every fed node (always so in a chain) runs without a mask,
        through the plain decode path: no additive 4-D mask to build, fold and apply (measured on the 2-core CPU,
        bundled 1-layer draft, 1.6k cached tokens: 2.08 -> 1.65 ms per draft step).
        """
        n_fed, F = len(self.slot), len(nodes)
        allowed = feed_mask(tree.parents, nodes, {n: s - self.base for n, s in self.slot.items()})
        if F == 1 and bool(allowed.all()):
            mask = None  # a chain node sees every cached token: the plain decode path (no mask to build or apply)
        else:
            dtype = self.model.get_input_embeddings().weight.dtype
            mask = additive_mask(allowed, self.base, dtype, _device(self.model))
        toks = tree.tokens[nodes]
        pos = (self.root_pos + tree.depths[nodes]).expand(self.R, F)
        logits = lm_forward(self.model, self.ad, embed_tokens(self.model, toks), pos, self.cache, mask=mask,
                               rows=slice(None))
        for r, node in enumerate(nodes):
            self.slot[node] = self.base + n_fed + r
        return self._logp(logits)

    def feed_next(self, token: int, depth: int) -> torch.Tensor:
        """Feed one chain node (the child of the last fed node, or of the root), at ``depth``.

        Returns:
            float32 (vocab,) draft log-probs after the node.
        """
        pos = torch.full((self.R, 1), self.root_pos + depth)
        logits = lm_forward(self.model, self.ad, embed_tokens(self.model, [token]), pos, self.cache)
        return self._logp(logits[-1])

    def rollback(self) -> None:
        """Drop every tree node from the draft cache (back to after the pending tokens)."""
        kv.truncate(self.cache, self.base)
        self.slot = {}


# --------------------------------------------------------------------------- helpers
class _Emitter:
    """Tracks generated ids, EOS / max_new_tokens truncation and text deltas."""

    def __init__(self, pair: ModelPair, config: DecodeConfig):
        self.tok = pair.processor.tokenizer
        self.eos = pair.eos_token_ids if config.stop_at_eos else set()
        self.max = config.max_new_tokens
        self.ids: list[int] = []
        self.text = ""
        self.done = False
        self._prefix = self._read = 0

    def take(self, tokens: list[int]) -> list[int]:
        """Append tokens up to the first EOS / the budget; returns those actually emitted."""
        out = []
        for t in tokens:
            if self.done:
                break
            out.append(t)
            self.ids.append(t)
            if t in self.eos or len(self.ids) >= self.max:
                self.done = True
        return out

    def delta(self) -> str:
        """Text for the tokens since the last call (incremental: decodes a short window, not all ids).

        Holds back text that ends in an incomplete UTF-8 sequence (U+FFFD) until it completes or
        the generation ends.
        """
        window = self.tok.decode(self.ids[self._prefix:], skip_special_tokens=True)
        head = self.tok.decode(self.ids[self._prefix:self._read], skip_special_tokens=True)
        if len(window) <= len(head) or (window.endswith("\ufffd") and not self.done):
            return ""
        self._prefix, self._read = self._read, len(self.ids)
        out = window[len(head):]
        self.text += out
        return out


class _Picker:
    """Chooses target tokens: argmax when greedy, else a seeded draw from the processed logits.

    The same :func:`specvlm.sampling.process_logits` (temperature, nucleus) is used by vanilla
    sampling and by verification, so both sample from the same target distribution.
    """

    def __init__(self, sampling: SamplingConfig):
        self.cfg = sampling
        self.greedy = sampling.greedy
        self.gen = None if self.greedy else make_generator(sampling)

    def __call__(self, logits: torch.Tensor) -> int:
        if self.greedy:
            return int(logits.argmax())
        return sample(process_logits(logits.float(), self.cfg).cpu(), self.gen)


def _rope_dims(inputs: ModelInputs) -> int:
    return int(inputs.positions.shape[0])


# --------------------------------------------------------------------------- streams
def stream(pair: ModelPair, inputs: ModelInputs | VideoInput | None, config: DecodeConfig | str | None = None,
           /, *more: Any, prefill: TargetPrefill | None = None, should_stop: Callable[[], bool] | None = None,
           record_trees: bool = False, **clip_form: Any) -> Iterator[PrefillInfo | StepEvent]:
    """Decode one request, streaming events.

    Two forms, one path. Prepared: ``stream(pair, inputs, config)`` with inputs from
    :func:`specvlm.inputs.prepare`. Clip: ``stream(pair, clip, prompt, config, subtitles=...,
    subtitle_mode=..., force_keep=...)`` prepares them first (``inputs=`` skips that, with the
    clip and prompt ignored).

    Args:
        pair: target + draft.
        inputs: prepared ModelInputs (or, in the clip form, a VideoClip or a video file path).
        config: method, budget, pruning and tree settings (default: SpecVLM, paper defaults); in the
            clip form the prompt, with the config after it.
        prefill: a target prefill to reuse (:func:`prefill_target` on ``inputs.for_target()``,
            with scores for the ``specvlm`` and ``attention`` methods); its KV cache is copied, so
            one prefill serves any number of requests on the same inputs.
        should_stop: polled before every step; True ends the stream early.
        record_trees: attach a :class:`DraftTreeRecord` to each speculative StepEvent.
        **clip_form: ``subtitles``, ``subtitle_mode``, ``force_keep`` (see
            :func:`specvlm.inputs.prepare`), ``inputs``, ``prompt``: clip form only.

    Yields:
        One PrefillInfo, then StepEvents (step 0 = the prefill token).

    Raises:
        ValueError (and subclasses): bad prompt, video or settings; a path that is no readable
            video (:class:`specvlm.video.VideoError`); a ``prefill`` of other inputs or without
            the scores the method needs.
        TypeError: neither prepared inputs nor a VideoClip or path; arguments of the other form.

    Source: docs/design.md §2 (one generator that the CLI, app and bench consume).
    """
    adapt_threads()   # one thread while other processes keep the CPUs busy (automatic policy only)
    with torch.inference_mode():
        inputs, config = resolve_call(pair, inputs, config, more, clip_form)
        if config.speculative:
            yield from _stream_speculative(pair, inputs, config, prefill, should_stop, record_trees)
        else:
            yield from _stream_vanilla(pair, inputs, config, prefill, should_stop)


def _prefill(pair: ModelPair, inputs: ModelInputs, with_scores: bool, reuse: TargetPrefill | None) -> TargetPrefill:
    """The target prefill: computed, or a copy of ``reuse`` after checking that it fits ``inputs``."""
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


def _subtitle_tokens(inputs: ModelInputs, seen_by: str) -> int:
    """Transcript tokens in the prompt of ``seen_by`` ("target" or "draft")."""
    hidden = {"target": "draft", "draft": "target"}[seen_by]
    return 0 if inputs.subtitle_mode in (hidden, "none") else inputs.num_subtitle_tokens


def _first_token(pair: ModelPair, config: DecodeConfig, last_logits: torch.Tensor):
    """Emitter, picker, decode clock, the prefill's token and its step-0 StepEvent."""
    em = _Emitter(pair, config)
    pick = _Picker(config.sampling)
    t_dec = time.perf_counter()
    first = pick(last_logits)
    em.take([first])
    return em, pick, t_dec, first, StepEvent(0, [first], 0, [False], em.delta(), num_generated=1,
                                             margin=logit_margin(last_logits))


def _stream_vanilla(pair, inputs, config, reuse, should_stop):
    dev = pair.device
    n_sub = _subtitle_tokens(inputs, "target")
    inputs = inputs.for_target()
    with Timer(dev) as t_pre:
        tp = _prefill(pair, inputs, False, reuse)
    yield PrefillInfo(inputs.input_ids.shape[1], inputs.num_video_tokens, 0, None, t_pre.seconds, 0.0, 0.0,
                      inputs.token_grid, inputs.frames_per_token, n_sub, 0)
    em, pick, t_dec, first, event = _first_token(pair, config, tp.last_logits)
    yield event
    pos, root, step = inputs.next_position, first, 0
    R = _rope_dims(inputs)
    while not em.done and not (should_stop and should_stop()):
        step += 1
        with Timer(dev) as t_v:
            logits = lm_forward(pair.target, pair.adapter, embed_tokens(pair.target, [root]),
                                   torch.full((R, 1), pos), tp.cache)
            root = pick(logits[-1])
        pos += 1
        new = em.take([root])
        yield StepEvent(step, new, 0, [False] * len(new), em.delta(), verify_ms=t_v.ms,
                        elapsed_s=time.perf_counter() - t_dec, num_generated=len(em.ids),
                        margin=logit_margin(logits[-1]))


def _stream_speculative(pair, inputs, config, reuse, should_stop, record_trees):
    dev = pair.device
    method = config.prune.method
    t_in = inputs.for_target()  # without the subtitle transcript in subtitle mode "draft"
    # 4.1-4.2 target prefill in two passes, attention scores from pass B
    with Timer(dev) as t_pre:
        tp = _prefill(pair, t_in, method in SCORE_METHODS, reuse)
    # 4.3-4.6 pruning (pure)
    with Timer() as t_prune:
        pr = prune(tp.scores, config.prune, grid=inputs.token_grid, num_video_tokens=inputs.num_video_tokens,
                   force_keep=inputs.force_keep)
    # 4.7 draft prefill on kept video tokens (+ transcript if the draft sees it), original positions;
    # a draft with its own token grid reads its own prompt, the kept set carried over by overlap
    d_in = inputs.draft_inputs or inputs
    with Timer(pair.draft.device) as t_dpre:
        keep = pr.keep if d_in is inputs else map_keep(pr.keep, inputs.token_grid, d_in.token_grid)
        d_cache, d_len = prefill_draft(pair, d_in, tp, keep, target_inputs=t_in)
    yield PrefillInfo(t_in.input_ids.shape[1], inputs.num_video_tokens, d_len, pr, t_pre.seconds,
                      t_prune.seconds, t_dpre.seconds, inputs.token_grid, inputs.frames_per_token,
                      _subtitle_tokens(inputs, "target"), _subtitle_tokens(d_in, "draft"))
    em, pick, t_dec, first, event = _first_token(pair, config, tp.last_logits)
    yield event
    from specvlm.fastdraft import make_draft_runner  # fused draft forward, DraftRunner where unsupported

    runner = make_draft_runner(pair, d_cache, _rope_dims(d_in), d_in.next_position - t_in.next_position)
    pos, root, pending, step = t_in.next_position, first, [first], 0
    dtype = pair.target.get_input_embeddings().weight.dtype
    d_rows, d_sub = draft_substitute(pair)
    config = replace(config, tree=config.tree.for_prompt(int(t_in.input_ids.shape[1])))  # a long prompt's tree
    drafter = make_drafter(config, pick.gen)  # greedy, or sampled siblings + recursive rejection sampling
    while not em.done and not (should_stop and should_stop()):
        step += 1
        # 4.8 draft tree from the root (pending tokens first enter the draft cache)
        with Timer(pair.draft.device) as t_d:
            draft = drafter.draft(runner, for_draft(pending, d_rows, d_sub), pos)
            tree = draft.tree
        # 4.9 verify: one target forward over root + tree with a 4-D mask, then accept
        with Timer(dev) as t_v:
            Lt = kv.cache_length(tp.cache)
            toks = torch.cat([torch.tensor([root]), tree.tokens])
            positions = (pos + torch.cat([torch.zeros(1, dtype=torch.long), tree.depths])).expand(
                _rope_dims(inputs), -1)
            mask = verify_mask(tree.parents, Lt, dtype, dev)
            logits = lm_forward(pair.target, pair.adapter, embed_tokens(pair.target, toks), positions,
                                   tp.cache, mask=mask, rows=slice(None))
            path, bonus = drafter.accept(draft, logits)
            # 4.10 commit: keep root + accepted nodes in path order
            kv.keep_tail(tp.cache, Lt + 1, torch.tensor(path, dtype=torch.long))
        accepted = [int(tree.tokens[i]) for i in path]
        new = em.take(accepted + [bonus])
        n_acc = min(len(accepted), len(new))
        pending, root, pos = accepted + [bonus], bonus, pos + len(accepted) + 1
        rec = None
        if record_trees:
            rec = DraftTreeRecord(tree.tokens.tolist(), tree.parents.tolist(), tree.scores.tolist(), path, bonus)
        yield StepEvent(step, new, n_acc, [i < n_acc for i in range(len(new))], em.delta(), draft_ms=t_d.ms,
                        verify_ms=t_v.ms, tree_size=tree.size, elapsed_s=time.perf_counter() - t_dec,
                        num_generated=len(em.ids), tree=rec)


def generate(pair: ModelPair, inputs: ModelInputs | VideoInput | None, config: DecodeConfig | str | None = None,
             /, *more: Any, **kwargs: Any) -> DecodeResult:
    """Run :func:`stream` to the end and summarise it (docs/design.md §4.12).

    Args:
        pair: target + draft.
        inputs: prepared ModelInputs (:func:`specvlm.inputs.prepare`), or in the clip form
            ``generate(pair, clip, prompt, config, ...)`` a VideoClip or a video file path (a path
            is loaded with the default VideoConfig, not counted in ``total_s``).
        config: decoding settings (default: SpecVLM, paper defaults); the prompt in the clip form.
        *more: the config in the clip form.
        **kwargs: passed to :func:`stream` (``prefill``, ``should_stop``, ``record_trees``; in the
            clip form also ``subtitles``, ``subtitle_mode``, ``force_keep``, ``inputs``).

    Returns:
        DecodeResult: ids, text, τ (mean accepted length excluding the bonus token),
        tokens per target forward, decode time (s, excludes prefill/scoring/pruning/draft
        prefill), end-to-end time (s, including preparing the prompt in the clip form), tokens/s
        over decode time, per-step accept lengths, and for vanilla the per-token logit margins.

    Raises:
        ValueError (and subclasses): bad prompt, video or settings; a path that is no readable
            video (:class:`specvlm.video.VideoError`).
        TypeError: neither prepared inputs nor a VideoClip or path.
    """
    if isinstance(inputs, (str, os.PathLike)) and kwargs.get("inputs") is None:
        inputs = as_clip(pair, inputs)
    t0 = time.perf_counter()
    run = {k: kwargs.pop(k) for k in ("prefill", "should_stop", "record_trees") if k in kwargs}
    inputs, config = resolve_call(pair, inputs, config, more, kwargs)
    steps: list[StepEvent] = []
    info: PrefillInfo | None = None
    for ev in stream(pair, inputs, config, **run):
        if isinstance(ev, PrefillInfo):
            info = ev
        else:
            steps.append(ev)
    return _summary(pair, config, info, steps, time.perf_counter() - t0)


def _summary(pair: ModelPair, config: DecodeConfig, info: PrefillInfo | None, steps: list[StepEvent],
             total: float) -> DecodeResult:
    """A DecodeResult from a finished stream's events; ``total`` = end-to-end seconds."""
    ids = [t for s in steps for t in s.token_ids]
    verify_steps = [s for s in steps if s.step > 0]
    accept = [s.accept_length for s in verify_steps] if config.speculative else []
    decode_s = steps[-1].elapsed_s if steps else 0.0
    text = pair.processor.tokenizer.decode(ids, skip_special_tokens=True)
    return DecodeResult(
        token_ids=ids, text=text, method=config.method, accept_lengths=accept, tau=mean_tau(accept),
        tokens_per_target_forward=tokens_per_target_forward(max(len(ids) - 1, 0), len(verify_steps)),
        decode_s=decode_s, total_s=total, tokens_per_s=(len(ids) / decode_s) if decode_s > 0 else 0.0,
        draft_s=sum(s.draft_ms for s in steps) / 1e3, verify_s=sum(s.verify_ms for s in steps) / 1e3,
        prefill=info, steps=steps,
        margins=[] if config.speculative else [s.margin for s in steps if s.token_ids],
    )
