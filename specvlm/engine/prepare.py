"""Input preparation, separate from decoding: (clip or video file, prompt, subtitles) -> ModelInputs.

:func:`prepare` is the one way a request's prompt is built: the model family's adapter runs the
processor and the chat template once, and the result can be decoded any number of times
(:func:`specvlm.engine.stream.stream` with different methods, settings or a shared target prefill),
like a processor's output fed to ``generate()`` in transformers.

Source: docs/design.md §2 (data flow) and §4.7 (what the draft sees).
"""
from __future__ import annotations

import os
from dataclasses import replace
from typing import Any

import torch

from specvlm.models.pair import ModelPair, with_draft_inputs
from specvlm.types import ModelInputs, VideoClip

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


def for_pair(pair: ModelPair, inputs: ModelInputs) -> ModelInputs:
    """``inputs`` as this pair's draft reads them: without a draft prompt where the draft reads the
    target's (e.g. a Self-SD pair decoding a Std-SD pair's inputs), unchanged where the draft needs its
    own and has it.

    Raises:
        ValueError: the draft reads its own prompt (another video geometry) and ``inputs`` carry none:
            prepare them with this pair.
    """
    if pair.draft_processor is None:
        return inputs if inputs.draft_inputs is None else replace(inputs, draft_inputs=None)
    if inputs.draft_inputs is None:
        raise ValueError("this draft reads its own prompt (another video geometry than the target's) and these "
                         "inputs carry none: prepare them with this pair, specvlm.prepare(pair, clip, prompt).")
    return inputs
