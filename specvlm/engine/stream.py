"""Vanilla and speculative decoding as streaming generators.

``stream(pair, inputs, config)`` is the main API: given inputs from
:func:`specvlm.engine.prepare.prepare`, it yields one :class:`PrefillInfo`, then one
:class:`StepEvent` per target forward (vanilla) or per verify step
(speculative). ``generate(pair, inputs, config)`` consumes it into a :class:`DecodeResult`.

The numbered comments in :func:`_stream_speculative` mirror docs/design.md §4.1-4.10.
No state is kept on model objects: caches and positions live in local state.

Source: SpecVLM (Ji et al., EMNLP 2025, arXiv 2508.16201) Sec. 3; EAGLE-2
(Li et al. 2024) for the dynamic tree; Leviathan et al. 2023 for SD.
"""
from __future__ import annotations

import logging
import time
from contextlib import nullcontext
from dataclasses import replace
from typing import Callable, Iterator

import torch

from specvlm.config import DecodeConfig
from specvlm.engine import kv, reselect, staticloop
from specvlm.engine.draft import make_draft_runner
from specvlm.engine.forward import commit, embed_tokens, lm_forward, verify_tree
from specvlm.engine.loopparts import first_token as _first_token
from specvlm.engine.loopparts import prefill as _prefill
from specvlm.engine.loopparts import rope_dims as _rope_dims
from specvlm.engine.loopparts import speculative_prefill
from specvlm.engine.loopparts import subtitle_tokens as _subtitle_tokens
from specvlm.engine.measures import Timer, logit_margin, summarize
from specvlm.engine.prefill import TargetPrefill
from specvlm.engine.prepare import for_pair
from specvlm.models.stopping import stop_between_layers
from specvlm.engine.threads import adapt as adapt_threads
from specvlm.models.pair import ModelPair
from specvlm.spec.drafters import make_drafter
from specvlm.spec.drafting import draft_substitute, for_draft
from specvlm.spec.grid import map_keep
from specvlm.types import DecodeResult, DraftTreeRecord, ModelInputs, PrefillInfo, StepEvent, Stopped

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------- streams
def stream(pair: ModelPair, inputs: ModelInputs, config: DecodeConfig | None = None, *,
           prefill: TargetPrefill | None = None, should_stop: Callable[[], bool] | None = None,
           record_trees: bool = False) -> Iterator[PrefillInfo | StepEvent]:
    """Decode one request, streaming events.

    ``inputs`` come from :func:`specvlm.engine.prepare.prepare` (the clip, prompt, subtitles and
    forced tokens go there), so one preparation serves any number of decodes.

    Only the engine's own work runs under ``torch.inference_mode()``: the mode is entered around each
    resume of the decode loop, so the caller's code between two events runs in the caller's mode.

    Args:
        pair: target + draft.
        inputs: prepared ModelInputs.
        config: method, budget, pruning and tree settings (default: SpecVLM, paper defaults).
        prefill: a target prefill to reuse (:func:`specvlm.engine.prefill.prefill_target` on
            ``inputs.for_target()``, with scores for the ``specvlm`` and ``attention`` methods); its KV
            cache is copied, so one prefill serves any number of requests on the same inputs.
        should_stop: polled before every step and, during the prefills, before every layer of the
            models (:func:`specvlm.models.stopping.stop_between_layers`); True ends the stream early,
            before its PrefillInfo when the prefill was running.
        record_trees: attach a :class:`DraftTreeRecord` to each speculative StepEvent.

    Yields:
        One PrefillInfo, then StepEvents (step 0 = the prefill token).

    Raises:
        TypeError: ``inputs`` are not prepared ModelInputs.
        ValueError (and subclasses): inputs prepared for a draft of another video geometry; a
            ``prefill`` of other inputs or without the scores the method needs.

    Source: docs/design.md §2 (one generator that the CLI, app and bench consume).
    """
    if not isinstance(inputs, ModelInputs):
        raise TypeError(f"inputs must be prepared ModelInputs, got {type(inputs).__name__}: call "
                        "specvlm.prepare(pair, clip_or_path, prompt) first and pass its result.")
    config = config or DecodeConfig()
    if config.speculative:
        inputs = for_pair(pair, inputs)
    adapt_threads()   # one thread while other processes keep the CPUs busy (automatic policy only)
    if config.engine == "static":
        events = (staticloop.stream_speculative(pair, inputs, config, prefill, should_stop, record_trees)
                  if config.speculative else staticloop.stream_vanilla(pair, inputs, config, prefill, should_stop))
        yield from _in_inference_mode(events)
        return
    if config.speculative:
        events = _stream_speculative(pair, inputs, config, prefill, should_stop, record_trees)
    else:
        events = _stream_vanilla(pair, inputs, config, prefill, should_stop)
    yield from _in_inference_mode(events)


def _in_inference_mode(events: Iterator[PrefillInfo | StepEvent]) -> Iterator[PrefillInfo | StepEvent]:
    """``events``, each resume of it under ``torch.inference_mode()``; the consumer's code between two
    events runs in the mode it chose (its tensors are normal tensors)."""
    try:
        while True:
            with torch.inference_mode():
                try:
                    event = next(events, None)
                except Stopped:   # raised between prefill layers: the stream just ends
                    return
            if event is None:
                return
            yield event
    finally:
        with torch.inference_mode():
            events.close()


def _stream_vanilla(pair, inputs, config, reuse, should_stop):
    dev = pair.device
    n_sub = _subtitle_tokens(inputs, "target")
    inputs = inputs.for_target()
    with Timer(dev) as t_pre, stop_between_layers(should_stop):
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
        new, pieces = em.emit([root])
        yield StepEvent(step, new, 0, [False] * len(new), "".join(pieces), verify_ms=t_v.ms,
                        elapsed_s=time.perf_counter() - t_dec, num_generated=len(em.ids),
                        margin=logit_margin(logits[-1]), pieces=pieces)


def _stream_speculative(pair, inputs, config, reuse, should_stop, record_trees):
    dev = pair.device
    sp = speculative_prefill(pair, inputs, config, reuse, should_stop)   # 4.1-4.7
    t_in, d_in, tp, d_cache = sp.t_in, sp.d_in, sp.tp, sp.d_cache
    yield sp.info
    em, pick, t_dec, first, event = _first_token(pair, config, tp.last_logits)
    rs = _reselect_state(config, sp)
    if rs is None:
        yield event
    runner = make_draft_runner(pair, d_cache, _rope_dims(d_in), d_in.next_position - t_in.next_position)
    if rs is not None:   # beyond the paper: before the first draft
        grids = (t_in.token_grid, d_in.token_grid) if rs.draft_held is not None else None
        with Timer(pair.draft.device) as t_r:
            event.added, event.unseen_share = reselect.begin(rs, pair, runner, tp, (t_in, d_in), tp.draft_video,
                                                             grids)
        event.draft_ms = t_r.ms   # in the decode clock, as every step's re-selection
        yield event
    pos, root, pending, step = t_in.next_position, first, [first], 0
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
            with rs.capture() if rs is not None else nullcontext():   # the verify's queries, for re-selection
                logits = verify_tree(pair.target, pair.adapter, tp.cache, root, tree, pos, _rope_dims(inputs))
            path, bonus = drafter.accept(draft, logits)
            commit(tp.cache, Lt, path)  # 4.10 commit: keep root + accepted nodes in path order
        added, share, re_ms = _reselect(rs, pair, runner, sp, tree, path)   # beyond the paper: refused steps
        accepted = [int(tree.tokens[i]) for i in path]
        new, pieces = em.emit(accepted + [bonus])
        n_acc = min(len(accepted), len(new))
        synced = rs is not None and rs.synced                # the draft's cache already holds the accepted path
        pending, root, pos = ([bonus] if synced else accepted + [bonus]), bonus, pos + len(accepted) + 1
        rec = None
        if record_trees:
            rec = DraftTreeRecord(tree.tokens.tolist(), tree.parents.tolist(), tree.scores.tolist(), path, bonus)
        yield StepEvent(step, new, n_acc, [i < n_acc for i in range(len(new))], "".join(pieces),
                        draft_ms=t_d.ms + re_ms, verify_ms=t_v.ms, tree_size=tree.size,
                        elapsed_s=time.perf_counter() - t_dec, num_generated=len(em.ids), tree=rec, pieces=pieces,
                        added=added, unseen_share=share)


def _reselect_state(config: DecodeConfig, sp) -> reselect.ReselectState | None:
    """The request's re-selection state (None when off), in both token grids when the draft has its own."""
    pr, t_in, d_in = sp.info.prune, sp.t_in, sp.d_in
    if not config.reselect.enabled:
        return None
    own = d_in.token_grid.shape != t_in.token_grid.shape or not torch.equal(d_in.token_grid, t_in.token_grid)
    d_keep = map_keep(pr.keep, t_in.token_grid, d_in.token_grid) if own else None
    return reselect.start(config.reselect, pr.keep, pr.num_video_tokens, d_keep, d_in.num_video_tokens)


def _reselect(rs, pair, runner, sp, tree, path) -> tuple[list[int], float | None, float]:
    """:func:`specvlm.engine.reselect.step` after a verify: (added, unseen share, its cost in ms)."""
    if rs is None:
        return [], None, 0.0
    grids = (sp.t_in.token_grid, sp.d_in.token_grid) if rs.draft_held is not None else None
    with Timer(pair.draft.device) as t_r:
        added, share = reselect.step(rs, pair, runner, sp.tp.cache, tree, path, sp.t_in, sp.d_in,
                                     sp.tp.draft_video, grids)
    return added, share, t_r.ms


def generate(pair: ModelPair, inputs: ModelInputs, config: DecodeConfig | None = None, *,
             prefill: TargetPrefill | None = None, should_stop: Callable[[], bool] | None = None,
             record_trees: bool = False) -> DecodeResult:
    """Run :func:`stream` to the end and summarise it (docs/design.md §4.12).

    Args:
        pair, inputs, config, prefill, should_stop, record_trees: as :func:`stream`.

    Returns:
        DecodeResult: ids, text, τ (mean accepted length excluding the bonus token),
        tokens per target forward, decode time (s, excludes prefill/scoring/pruning/draft
        prefill), end-to-end time of the stream (s), tokens/s over decode time, per-step accept
        lengths, and for vanilla the per-token logit margins.

    Raises:
        TypeError, ValueError: as :func:`stream`.
    """
    config = config or DecodeConfig()
    t0 = time.perf_counter()
    steps: list[StepEvent] = []
    info: PrefillInfo | None = None
    for ev in stream(pair, inputs, config, prefill=prefill, should_stop=should_stop, record_trees=record_trees):
        if isinstance(ev, PrefillInfo):
            info = ev
        else:
            steps.append(ev)
    return _summary(pair, config, info, steps, time.perf_counter() - t0)


def _summary(pair: ModelPair, config: DecodeConfig, info: PrefillInfo | None, steps: list[StepEvent],
             total: float) -> DecodeResult:
    """A DecodeResult from a finished stream's events; ``total`` = the stream's wall time (s)."""
    ids = [t for s in steps for t in s.token_ids]
    m = summarize(steps, config.speculative)
    return DecodeResult(
        token_ids=ids, text=pair.processor.tokenizer.decode(ids, skip_special_tokens=True), method=config.method,
        accept_lengths=m.accept_lengths, tau=m.tau, tokens_per_target_forward=m.tokens_per_target_forward,
        decode_s=m.decode_s, total_s=total, tokens_per_s=m.tokens_per_s, draft_s=m.draft_s, verify_s=m.verify_s,
        prefill=info, steps=steps, margins=[] if config.speculative else [s.margin for s in steps if s.token_ids],
    )
