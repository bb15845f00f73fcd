"""Model-ready clips: :func:`load_video` for files, :func:`frames_to_clip` for frames in memory.

:func:`load_video` probes the file, plans the sampled indices and the decode size,
decodes only those frames (decord, else PyAV), turns them upright and enlarges sides
under :data:`MIN_SIDE` (:func:`ensure_min_side`), all in a worker thread with a time
limit. What was changed or capped is reported once, in ``VideoClip.notes`` (the CLI and
the app show them); the logger only repeats it at INFO level.

Source: docs/design.md §2 and §8.
"""
from __future__ import annotations

import dataclasses
import logging
import math
import os
import threading
from collections.abc import Callable

import numpy as np

from specvlm.config import VideoConfig
from specvlm.types import VideoClip
from specvlm.video import backends
from specvlm.video.backends import Decoded
from specvlm.video.errors import VideoError, run_with_timeout
from specvlm.video.plan import MAX_ASPECT, MIN_SIDE, fit_pixels, model_size
from specvlm.video.probe import VideoInfo, probe_video

logger = logging.getLogger(__name__)

def load_video(
    path: str | os.PathLike[str], config: VideoConfig = VideoConfig(), *, timeout_s: float | None = 60.0,
    min_side: int | None = MIN_SIDE, should_stop: Callable[[], bool] | None = None,
) -> VideoClip:
    """Probe a video, then decode only the sampled frames, upright, size-capped and model-ready.

    Steps: probe with PyAV (rejects non-videos); sample indices with
    :func:`sample_indices` using the stream's real frame count and per-frame
    timestamps; decode with decord (``get_batch``), or PyAV when decord fails or
    the stream is rotated; rotate upright; scale frames whose H * W exceeds
    ``config.max_pixels`` down during decoding (aspect kept); enlarge frames with
    a side under ``min_side`` by a whole factor (:func:`ensure_min_side`). For
    narrow shapes the long side is shortened while decoding so that the enlarged
    frame stays within ``config.max_pixels`` and ``MAX_ASPECT`` (e.g. 16x64 px ->
    32x128, 16x2000 -> 32x4000, 16x4000 -> 32x6272 at the default max_pixels).
    Limits applied are recorded in ``clip.notes``. The work runs in a daemon
    thread bounded by ``timeout_s``.

    Args:
        path: the video file.
        config: frame sampling settings (num_frames or fps, max_frames,
            max_pixels, even_frames).
        timeout_s: seconds before giving up (None = no limit, runs inline).
        min_side: smallest frame side (px) after loading, default :data:`MIN_SIDE`
            (what Qwen2.5-VL accepts); None = frames as decoded, only ``max_pixels``
            applied (sides may be under 28 px and any aspect ratio).
        should_stop: polled while decoding; True ends the decoding between frames (PyAV) or
            chunks of :data:`specvlm.video.backends.DECORD_CHUNK` frames (decord) and raises
            :class:`specvlm.types.Stopped` (e.g. the app's Stop button).

    Returns:
        VideoClip with frames uint8 (T, H, W, 3) RGB C-contiguous, timestamps
        float64 (T,) in seconds from the first frame, native_fps (frames/s),
        total_frames, duration (s) and notes. With ``min_side``: min(H, W) >=
        min_side and max(H, W) <= MAX_ASPECT * min(H, W).

    Raises:
        VideoFormatError: empty, text, image, audio-only or unknown file.
        VideoDecodeError: no backend could decode the frames.
        VideoTimeoutError: took longer than ``timeout_s``.
        VideoError: missing or unreadable file.
        Stopped: ``should_stop()`` returned True.
        ValueError: ``min_side`` is not None or an int >= 1.

    Source: docs/design.md §8 (probe first, fall back, cap at the real count).
    """
    if min_side is not None and (isinstance(min_side, bool) or not isinstance(min_side, int) or min_side < 1):
        raise ValueError(f"min_side={min_side!r} must be a whole number of pixels >= 1, or None (off).")
    p = os.fspath(path)
    return run_with_timeout(lambda cancel: _load(p, config, cancel, min_side), timeout_s, p, should_stop)


def _load(path: str, config: VideoConfig, cancel: threading.Event, min_side: int | None) -> VideoClip:
    info = probe_video(path, count_frames=False)
    fit = fit_pixels(info.coded_width, info.coded_height, config.max_pixels)
    size = model_size(info.coded_width, info.coded_height, config.max_pixels, min_side)
    dec, notes = backends.decode(info, size, config, cancel)
    frames = dec.frames
    if info.rotation:
        frames = np.rot90(frames, k=info.rotation // 90, axes=(1, 2))
    frames = np.ascontiguousarray(frames, dtype=np.uint8)
    got = f"{info.width}x{info.height} -> {frames.shape[2]}x{frames.shape[1]}"
    if size != fit:
        notes.append(f"resized {got} (aspect ratio changed) so the model gets sides of at least {min_side} px, "
                     f"at most {MAX_ASPECT}x as long as wide, within max_pixels={config.max_pixels}")
    elif size != (info.coded_width, info.coded_height):
        notes.append(f"downscaled {got} to fit max_pixels={config.max_pixels}")
    notes = _sampling_notes(info, dec, config) + notes + dec.notes
    duration = max(info.duration, dec.last_end_s)
    native_fps = info.fps if info.fps > 0 else (dec.total_frames / duration if duration > 0 else 0.0)
    logger.info("loaded %s: %d frames %s via %s", path, len(frames), frames.shape[1:3], dec.backend)
    clip = VideoClip(
        frames=frames,
        timestamps=np.maximum(dec.timestamps, 0.0),
        path=path,
        native_fps=float(native_fps),
        total_frames=int(dec.total_frames),
        duration=float(duration),
        notes=notes,
    )
    return clip if min_side is None else ensure_min_side(clip, min_side)


def _sampling_notes(info: VideoInfo, dec: Decoded, config: VideoConfig) -> list[str]:
    notes = []
    if config.fps is not None:
        asked = int(math.floor(dec.last_end_s * config.fps + 1e-6))
        what = f"{config.fps:g} fps ({asked} frames)"
    else:
        asked, what = config.num_frames, f"{config.num_frames} frames"
    if asked > config.max_frames:
        notes.append(f"frames capped at max_frames={config.max_frames} (asked for {what})")
    elif asked > dec.total_frames:
        notes.append(f"the video has only {dec.total_frames} frame(s) (asked for {what}); using all of them")
    if config.even_frames and len(set(dec.indices.tolist())) < len(dec.indices):
        notes.append("single frame duplicated to 2 (even_frames)")
    elif config.even_frames and len(dec.indices) < min(asked, config.max_frames, dec.total_frames):
        notes.append(f"{len(dec.indices) + 1} frames rounded down to {len(dec.indices)}: this model reads "
                     "frames in pairs (temporal patch 2)")
    return notes


def ensure_min_side(clip: VideoClip, min_side: int = MIN_SIDE) -> VideoClip:
    """Upscale frames whose shorter side is under ``min_side`` px by a whole factor (pixel repeat).

    Qwen2.5-VL's processor rejects sides under 28 px; repeating pixels keeps the content
    exact and the aspect ratio. The clip is returned unchanged when it is large enough, so a
    second call is a no-op. :func:`load_video` already calls it (and plans the decode size so
    the result stays within ``max_pixels`` and ``MAX_ASPECT``); for in-memory clips of extreme
    shape (e.g. 16x4000 px) the enlarged frames can exceed both, so shorten the long side first.

    Args:
        clip: frames uint8 (T, H, W, 3).
        min_side: smallest allowed side (px).

    Returns:
        The clip, or a copy with frames (T, H * f, W * f, 3), f = ceil(min_side / min(H, W)),
        and a note saying so.
    """
    t, h, w = clip.frames.shape[:3]
    if min(h, w) >= min_side or min(h, w) < 1:
        return clip
    f = math.ceil(min_side / min(h, w))
    frames = np.ascontiguousarray(np.repeat(np.repeat(clip.frames, f, axis=1), f, axis=2))
    note = f"upscaled {w}x{h} -> {w * f}x{h * f} px (the model needs at least {min_side} px a side)"
    return dataclasses.replace(clip, frames=frames, notes=[*clip.notes, note])


def frames_to_clip(frames: np.ndarray, fps: float, *, path: str | None = None) -> VideoClip:
    """Wrap in-memory frames (tests, generators) as a VideoClip at a constant rate.

    Args:
        frames: uint8 (T, H, W, 3) RGB, or (H, W, 3) for a single frame.
        fps: frame rate (frames/s, > 0); timestamps are ``arange(T) / fps``.
        path: optional source name kept on the clip.

    Returns:
        VideoClip with contiguous frames, total_frames T and duration T / fps (s).

    Raises:
        VideoError: wrong shape or dtype, no frames, or fps <= 0.
    """
    arr = np.asarray(frames)
    if arr.ndim == 3:
        arr = arr[None]
    if arr.ndim != 4 or arr.shape[-1] != 3 or arr.shape[0] < 1 or arr.shape[1] < 1 or arr.shape[2] < 1:
        raise VideoError(f"frames have shape {arr.shape}; expected (T, H, W, 3) RGB with T, H, W >= 1.")
    if arr.dtype != np.uint8:
        raise VideoError(
            f"frames have dtype {arr.dtype}; expected uint8 in [0, 255] "
            "(convert e.g. with (x * 255).clip(0, 255).astype(np.uint8))."
        )
    if not fps or fps <= 0 or not math.isfinite(fps):
        raise VideoError(f"fps={fps!r} must be a positive number of frames per second.")
    t = arr.shape[0]
    return VideoClip(
        frames=np.ascontiguousarray(arr),
        timestamps=np.arange(t, dtype=np.float64) / float(fps),
        path=path,
        native_fps=float(fps),
        total_frames=t,
        duration=t / float(fps),
    )
