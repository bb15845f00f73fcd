"""Pure planning math: which frame indices to decode and at what size.

No I/O: :func:`sample_indices` spreads frames uniformly in time (qwen-vl-utils
convention), :func:`fit_pixels` and :func:`model_size` choose the decode size so frames
stay within ``max_pixels``, at least :data:`MIN_SIDE` px a side after
:func:`specvlm.video.ensure_min_side`, and within :data:`MAX_ASPECT`.

Source: qwen-vl-utils ``smart_nframes`` / ``smart_resize``; docs/design.md §8.
"""
from __future__ import annotations

import math

import numpy as np

from specvlm.config import VideoConfig

MIN_SIDE = 28
"""Smallest frame side Qwen2.5-VL's processor accepts (its patch 14 x spatial merge 2)."""


MAX_ASPECT = 200
"""Largest long side / short side ratio Qwen2.5-VL's processor accepts (``smart_resize`` raises above it)."""


def sample_indices(
    total_frames: int,
    num_frames: int | None = None,
    fps: float | None = None,
    native_fps: float | None = None,
    max_frames: int = VideoConfig.max_frames,
    even: bool = False,
    timestamps: np.ndarray | None = None,
) -> np.ndarray:
    """Pick frame indices to decode, uniformly over the whole clip.

    Count: ``fps`` set -> floor(duration * fps) (duration from ``timestamps`` if
    given, else total_frames / native_fps); else ``num_frames``; else all frames.
    The count is capped at ``total_frames`` and ``max_frames``.

    Positions: by count, ``linspace`` over [0, total_frames - 1] rounded half
    up (first and last frame included; the qwen-vl-utils convention), not
    centre-of-segment. By fps, frames at t_0 + k / fps (k = 0..N-1); when that
    count is capped (max_frames or the real frame count) it falls back to the
    linspace over the whole clip. With ``timestamps`` the targets are times in
    seconds and the nearest frames are picked, made unique, so variable frame
    rate samples evenly in time; without them, times are index / native_fps.
    One frame -> index 0.

    ``even=True``: an odd count is rounded down to an even one, at least 2 when
    the clip (and max_frames) allow; a single available frame is duplicated to
    ``[i, i]`` (Qwen2.5-VL temporal patch size 2). Only this case repeats an index.

    Args:
        total_frames: frames in the stream (>= 1).
        num_frames: wanted count (>= 1), used when ``fps`` is None.
        fps: wanted sampling rate (frames/s, > 0).
        native_fps: the stream's average frame rate (frames/s), for ``fps`` mode.
        max_frames: hard cap (>= 1).
        even: round to an even count (see above).
        timestamps: float64 (total_frames,), per-frame times in seconds, non-decreasing.

    Returns:
        int64 array (N,), non-decreasing indices in [0, total_frames).

    Raises:
        ValueError: total_frames < 1, num_frames < 1, max_frames < 1, fps <= 0,
            fps without native_fps/timestamps, or timestamps of the wrong length.

    Source: qwen-vl-utils ``smart_nframes`` / ``_read_video_decord`` (linspace + round).
    """
    total = int(total_frames)
    if total < 1:
        raise ValueError(f"total_frames={total_frames!r}: the video has no frames.")
    if max_frames < 1:
        raise ValueError(f"max_frames={max_frames!r} must be >= 1.")
    ts = None if timestamps is None else np.asarray(timestamps, dtype=np.float64)
    if ts is not None and ts.shape != (total,):
        raise ValueError(f"timestamps has shape {ts.shape}, expected ({total},).")
    step_s = None
    if fps is not None:
        n = _count_by_fps(total, float(fps), native_fps, ts)
        step_s = 1.0 / float(fps) if n <= min(total, int(max_frames)) else None
    elif num_frames is not None:
        if num_frames < 1:
            raise ValueError(f"num_frames={num_frames!r} must be >= 1.")
        n = int(num_frames)
    else:
        n = total
    n = min(n, total, int(max_frames))
    if even and n % 2:
        n = n - 1 if n > 1 else (2 if min(total, max_frames) >= 2 else 1)
    idx = _uniform_positions(total, n, ts, step_s, native_fps)
    if even and n == 1:
        idx = np.repeat(idx, 2)
    return idx.astype(np.int64)


def _uniform_positions(
    total: int, n: int, timestamps: np.ndarray | None, step_s: float | None = None, native_fps: float | None = None
) -> np.ndarray:
    """n strictly increasing frame indices spread uniformly in time (or in index).

    With ``step_s`` the targets are t_0 + k * step_s (fixed-rate sampling), else a
    linspace over the whole clip.
    """
    ar = np.arange(n, dtype=np.int64)
    if timestamps is None or total < 2 or n < 2 or np.any(np.diff(timestamps) < 0):
        if step_s is not None and native_fps:
            pos = ar * step_s * float(native_fps)
        else:
            pos = np.linspace(0, total - 1, n)
        return np.minimum(np.floor(pos + 0.5 + 1e-6).astype(np.int64), total - 1)
    if step_s is not None:
        targets = timestamps[0] + ar * step_s
    else:
        targets = np.linspace(timestamps[0], timestamps[-1], n)
    # Fractional index of each target time, rounded half up: the nearest frame in time,
    # and exactly the index linspace for a constant frame rate (1e-6 absorbs float32 times).
    pos = np.interp(targets, timestamps, np.arange(total, dtype=np.float64))
    idx = np.floor(pos + 0.5 + 1e-6).astype(np.int64)
    # Make indices unique and increasing (nearest-frame picks can collide in a VFR gap).
    idx = np.maximum.accumulate(idx - ar) + ar
    return np.minimum(idx - ar, total - n) + ar


def _count_by_fps(total: int, fps: float, native_fps: float | None, timestamps: np.ndarray | None) -> int:
    if fps <= 0:
        raise ValueError(f"fps={fps!r} must be > 0.")
    if timestamps is not None and total >= 2 and timestamps[-1] > timestamps[0]:
        duration = float(timestamps[-1] - timestamps[0]) * total / (total - 1)
    elif native_fps and native_fps > 0:
        duration = total / float(native_fps)
    else:
        raise ValueError("sampling by fps needs native_fps > 0 or per-frame timestamps.")
    return max(1, int(math.floor(duration * fps + 1e-6)))


def plan_indices(total: int, ts: np.ndarray | None, native_fps: float, config: VideoConfig) -> np.ndarray:
    """:func:`sample_indices` with a :class:`VideoConfig`'s settings; int64 (N,) indices in [0, total)."""
    return sample_indices(
        total,
        num_frames=None if config.fps is not None else config.num_frames,
        fps=config.fps,
        native_fps=native_fps,
        max_frames=config.max_frames,
        even=config.even_frames,
        timestamps=ts,
    )


def valid_times(ts: np.ndarray) -> bool:
    """Finite, non-negative, non-decreasing times that advance (readers return garbage without pts)."""
    if len(ts) == 0 or not np.all(np.isfinite(ts)) or ts[0] < -1e-3 or np.any(np.diff(ts) < -1e-6):
        return False
    return len(ts) < 2 or bool(ts[-1] > ts[0])


def fit_pixels(w: int, h: int, max_pixels: int) -> tuple[int, int]:
    """Largest (w, h) with the same aspect ratio and w * h <= max_pixels (>= 1 each)."""
    if w * h <= max_pixels:
        return w, h
    s = math.sqrt(max_pixels / float(w * h))
    nw, nh = max(1, int(w * s)), max(1, int(h * s))
    while nw * nh > max_pixels and (nw > 1 or nh > 1):
        if nw >= nh:
            nw -= 1
        else:
            nh -= 1
    return nw, nh


def model_size(w: int, h: int, max_pixels: int, min_side: int | None) -> tuple[int, int]:
    """Decode size (w, h) for coded w x h frames: the ``max_pixels`` fit, made fit for the models.

    ``min_side`` None: :func:`fit_pixels` (aspect kept). Otherwise the size is planned for
    :func:`ensure_min_side`, which then repeats pixels a whole factor f = ceil(min_side / s) when
    the short side s is under ``min_side``: s stays at min(coded short side, min_side) rather
    than being downscaled first, and the long side is cut to at most ``MAX_ASPECT * s`` and to
    ``max_pixels // (s * f * f)`` (so the enlarged frame is still within ``max_pixels``), never
    below s. Only such narrow or extreme shapes lose their aspect ratio; ``min_side`` wins over a
    ``max_pixels`` under ``min_side ** 2``.
    """
    fw, fh = fit_pixels(w, h, max_pixels)
    if min_side is None:
        return fw, fh
    if min(fw, fh) >= min_side:
        s, long = min(fw, fh), max(fw, fh)
    else:
        s = min(w, h, min_side)
        long = max(s, round(max(w, h) * s / min(w, h)))
    f = math.ceil(min_side / s)
    long = max(s, min(long, MAX_ASPECT * s, max_pixels // (s * f * f)))
    return (long, s) if w >= h else (s, long)
