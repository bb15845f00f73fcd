"""Input preparation, separate from decoding: (clip or video file, prompt, subtitles) -> ModelInputs.

:func:`prepare` is the one way a request's prompt is built: the model family's adapter runs the
processor and the chat template once, and the result can be decoded any number of times
(:func:`specvlm.engine.stream.stream` with different methods, settings or a shared target prefill).

Source: docs/design.md §2 (data flow) and §4.7 (what the draft sees).
"""
from __future__ import annotations

import os
from dataclasses import replace
from typing import Any

import torch

from specvlm.config import DecodeConfig
from specvlm.types import ModelInputs
from specvlm.models.pair import ModelPair, with_draft_inputs
from specvlm.types import VideoClip

VideoInput = VideoClip | str | os.PathLike
"""A request's video: a sampled clip, or a video file to load with the default settings."""


def as_clip(pair: ModelPair, clip: VideoInput) -> VideoClip:
    """The request's clip: a path is loaded with :func:`specvlm.video.load_video`, a clip passes through.

    A path gets the default :class:`~specvlm.config.VideoConfig` (16 frames, ``max_pixels``
    448 * 448), with ``even_frames`` when the model reads frames in pairs (Qwen2.5-VL), as the
    CLI does; for other settings load the clip yourself and pass it.

    Args:
        pair: the models (for their frames per token).
        clip: a VideoClip (frames uint8 (T, H, W, 3)) or a video file path (str or PathLike).

    Returns:
        The VideoClip.

    Raises:
        TypeError: something that is neither a clip nor a path.
        specvlm.video.VideoError: the file is missing or not a readable video.

    Source: docs/design.md §2 (video file -> frames + timestamps).
    """
    if isinstance(clip, (str, os.PathLike)):
        from specvlm.config import VideoConfig
        from specvlm.video import load_video

        return load_video(clip, VideoConfig(even_frames=pair.frames_per_token == 2))
    if not hasattr(clip, "frames"):
        raise TypeError(f"clip must be a VideoClip or a video file path, got {type(clip).__name__}; "
                        "pass a path, or specvlm.video.load_video(path).")
    return clip


def prepare(pair: ModelPair, clip: VideoInput, prompt: str, *, subtitles: list | None = None,
            subtitle_mode: str = "both", force_keep: Any = None) -> ModelInputs:
    """Build one request's :class:`~specvlm.types.ModelInputs` with the target's processor.

    Args:
        pair: target + draft (the target's adapter and processor build the prompt).
        clip: sampled frames (VideoClip, frames uint8 (T, H, W, 3)), or a video file path loaded
            with the default VideoConfig (:func:`as_clip`).
        prompt: user text.
        subtitles: cues put in the prompt as a timestamped transcript after the video
            (:mod:`specvlm.text.prompting`); None or empty = none.
        subtitle_mode: who sees the transcript: ``both``, ``target``, ``draft`` or ``none``
            (checked only when there are cues).
        force_keep: int (F,) video-token indices (raster order of the video placeholders) the
            draft must always keep, e.g. the tokens covering on-screen text
            (:func:`specvlm.analysis.text_aware.text_tokens_from_truth`); they take part of the keep budget
            (:func:`specvlm.spec.pruning.select_video_tokens`). None = none.

    Returns:
        ModelInputs: input_ids int64 (1, L), positions int64 (R, L), video_index int64 (V,),
        token_grid int64 (V, 3), ``force_keep`` int64 (F,) when given, and ``draft_inputs`` (the
        draft's own prompt) when the draft reads video at another geometry
        (:func:`specvlm.models.pair.with_draft_inputs`).

    Raises:
        ValueError (and subclasses): empty prompt, unreadable video, bad subtitle mode, a clip the
            processor refuses; a path that is no readable video (:class:`specvlm.video.VideoError`).
        TypeError: ``clip`` is neither a VideoClip nor a path.

    Source: docs/design.md §2 (adapter.prepare: HF processor, chat template).
    """
    clip = as_clip(pair, clip)
    with torch.inference_mode():
        if subtitles:
            inputs = pair.adapter.prepare(pair.processor, pair.target, clip, prompt, subtitles=subtitles,
                                          subtitle_mode=subtitle_mode)
        else:
            inputs = pair.adapter.prepare(pair.processor, pair.target, clip, prompt)
        inputs = with_draft_inputs(pair, inputs, clip, prompt, subtitles, subtitle_mode)
    return with_force_keep(inputs, force_keep)


def with_force_keep(inputs: ModelInputs, force_keep: Any) -> ModelInputs:
    """``inputs`` with ``force_keep`` (int, any shape, flattened to int64 (F,)); unchanged for None."""
    if force_keep is None:
        return inputs
    return replace(inputs, force_keep=torch.as_tensor(force_keep, dtype=torch.long).reshape(-1))


_CLIP_FORM = ("config", "prompt", "inputs", "subtitles", "subtitle_mode", "force_keep")


def resolve_call(pair: ModelPair, first: Any, second: Any, more: tuple,
                 clip_form: dict) -> tuple[ModelInputs, DecodeConfig]:
    """(inputs, config) of a :func:`specvlm.engine.stream.stream` call in the prepared or the clip form.

    Prepared: ``(inputs, config)``. Clip: ``(clip, prompt, config)`` plus keywords ``subtitles``,
    ``subtitle_mode``, ``force_keep`` and ``inputs`` (prepared inputs that skip :func:`prepare`).
    For a speculative config the inputs carry the draft's own prompt when its video geometry
    differs (written from the clip), and none where the draft reads the target's prompt.

    Raises:
        TypeError: unknown keywords, or clip-form arguments with prepared inputs; no clip or path.
        ValueError (and subclasses): as :func:`prepare`; a draft that needs its own prompt
            without a clip to write it from.
    """
    unknown = sorted(set(clip_form) - set(_CLIP_FORM))
    if unknown:
        raise TypeError(f"stream() got unexpected keyword arguments {', '.join(unknown)}.")
    if isinstance(first, ModelInputs):
        config = clip_form.pop("config", second) or DecodeConfig()
        if more or clip_form:
            raise TypeError("stream(pair, inputs, config) takes prepared inputs and a config only: put prompt, "
                            "subtitles and force_keep into specvlm.engine.prepare.prepare(...).")
        return (_draft_view(pair, first) if config.speculative else first), config
    prompt = clip_form.pop("prompt", second)
    config = clip_form.pop("config", more[0] if more else None) or DecodeConfig()
    inputs = clip_form.pop("inputs", None)
    force_keep = clip_form.pop("force_keep", None)
    if inputs is None:
        return prepare(pair, first, prompt, force_keep=force_keep, **clip_form), config
    inputs = with_force_keep(inputs, force_keep)
    if config.speculative:  # inputs prepared without the draft's own prompt: written from the clip
        clip = None if first is None else as_clip(pair, first)
        inputs = _draft_view(pair, inputs, clip, prompt, clip_form.get("subtitles"),
                             clip_form.get("subtitle_mode", "both"))
    return inputs, config


def _draft_view(pair: ModelPair, inputs: ModelInputs, clip: Any = None, prompt: str = "",
                subtitles: list | None = None, subtitle_mode: str = "both") -> ModelInputs:
    """``inputs`` as this pair's draft reads them: with the draft's own prompt where its video
    geometry differs (written from ``clip`` when missing), without one where the draft reads the
    target's prompt (e.g. a Self-SD pair made from a Std-SD pair's inputs).

    Raises:
        ValueError: the draft needs its own prompt, it is missing and no clip was given.
    """
    if pair.draft_processor is None:
        return inputs if inputs.draft_inputs is None else replace(inputs, draft_inputs=None)
    return with_draft_inputs(pair, inputs, clip, prompt, subtitles, subtitle_mode)
