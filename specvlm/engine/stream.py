"""Vanilla and speculative decoding as streaming generators: the events of a request.

``stream(pair, inputs, config)`` is the main API: given inputs from
:func:`specvlm.engine.prepare.prepare`, it yields one :class:`PrefillInfo`, then one
:class:`StepEvent` per target forward (vanilla) or per verify step
(speculative). ``generate(pair, inputs, config)`` consumes it into a :class:`DecodeResult`.

One request in order: prepare (:mod:`specvlm.engine.prepare`) -> prefill (:mod:`specvlm.engine.prefill`:
the target, scoring and pruning, the draft) -> loop (:mod:`specvlm.engine.loop`: a vanilla step, or draft
-> verify -> accept -> commit, with re-selection between steps) -> events (:mod:`specvlm.engine.emit`, here). No state is kept on model objects: caches and positions live in local state.

Source: SpecVLM (Ji et al., EMNLP 2025, arXiv 2508.16201) Sec. 3; EAGLE-2
(Li et al. 2024) for the dynamic tree; Leviathan et al. 2023 for SD; gpt-fast's generate.py.
"""
from __future__ import annotations

import time
from typing import Callable, Iterator

import torch

from specvlm.config import DecodeConfig
from specvlm.engine import loop
from specvlm.engine.measures import summarize
from specvlm.engine.prefill import TargetPrefill
from specvlm.engine.prepare import for_pair
from specvlm.runtime.threads import adapt as adapt_threads
from specvlm.models.pair import ModelPair
from specvlm.types import DecodeResult, ModelInputs, PrefillInfo, StepEvent, Stopped


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
    events = (loop.stream_speculative(pair, inputs, config, prefill, should_stop, record_trees)
              if config.speculative else loop.stream_vanilla(pair, inputs, config, prefill, should_stop))
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
