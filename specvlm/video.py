"""Video reading: probe, frame sampling and decoding into a :class:`VideoClip`.

Flow (DESIGN 2, 8): :func:`probe_video` opens the container with PyAV and reads
the stream metadata plus the first frame (for rotation); :func:`load_video`
then decodes only the sampled frames with decord, or with PyAV when decord
cannot read the file, and enlarges frames with a side under :data:`MIN_SIDE`
(:func:`ensure_min_side`). Everything runs in a worker thread with a time limit.
What was changed or capped is reported once, in ``VideoClip.notes`` (the CLI and
the app show them); the logger only repeats it at INFO level.

Backends (measured with decord 0.6.0 and PyAV 18.1 on Linux):

* decord reads H.264, H.265, VP8, VP9 and MPEG-4 Part 2 (mp4/webm/mkv/avi),
  including variable frame rate (its per-frame timestamps are right).
* decord fails (raises) on AV1, animated GIF and on some frame widths
  (16, 24, 48, 72 px: "DECORDArrayCopyFromTo: The size must exactly match").
  These go through the PyAV fallback, which decodes everything FFmpeg can.
* decord's own rotation handling is wrong (a 270° display matrix comes out
  transposed; ``get_batch`` raises for 90°/270°), so rotated files always use
  PyAV, which returns coded frames that are then turned upright with
  ``np.rot90`` (matches ``ffmpeg``'s autorotate for 90/180/270).

Timestamps are seconds from the first video frame, read from the stream
(decord ``get_frame_timestamp`` / PyAV packet and frame pts), never
``index / avg_fps``, so variable frame rate is right. decord returns
AV_NOPTS garbage (about -9.2e17 s) for some files (H.264 in AVI); then the
packet times are used instead.

Memory and work stay bounded for 4K and long videos: only the sampled frames
are converted, scaled to ``max_pixels`` while decoding; the PyAV fallback
seeks to the keyframe before each sampled frame when they are far apart, so a
long AV1 file decodes a few GOPs, not the whole stream.

Source: DESIGN.md sections 2 and 8; decord issues dmlc/decord#51 (rotation) and
dmlc/decord#336 (size mismatch on small widths).
"""
from __future__ import annotations

import dataclasses
import logging
import math
import os
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np

from specvlm.config import VideoConfig
from specvlm.types import VideoClip

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

_REENCODE_HINT = "re-encode it to H.264 MP4 (e.g. `ffmpeg -i IN -c:v libx264 -pix_fmt yuv420p OUT.mp4`)"
_MAX_BAD_PACKETS = 1000
_SEEK_MIN_GAP = 250
"""PyAV fallback: seek over gaps of more frames than this between sampled frames (else decode through)."""
MIN_SIDE = 28
"""Smallest frame side Qwen2.5-VL's processor accepts (its patch 14 x spatial merge 2)."""
MAX_ASPECT = 200
"""Largest long side / short side ratio Qwen2.5-VL's processor accepts (``smart_resize`` raises above it)."""
_TEXT_CODECS = frozenset({"ansi", "bintext", "xbin", "idf", "text", "subrip", "ass", "webvtt"})


class VideoError(ValueError):
    """A video could not be used; the message names the file, the problem and what to do."""


class VideoFormatError(VideoError):
    """The file is not a usable video (empty, text, image, audio-only, unknown container)."""


class VideoDecodeError(VideoError):
    """The container was recognised but its frames could not be decoded."""


class VideoTimeoutError(VideoError):
    """Probing or decoding took longer than the time limit (corrupt or huge file)."""


@dataclass(frozen=True)
class VideoInfo:
    """What :func:`probe_video` found in a file.

    Attributes:
        path: the file.
        container: FFmpeg demuxer name (e.g. ``mov,mp4,m4a,3gp,3g2,mj2``, ``matroska,webm``, ``gif``).
        codec: video codec name (e.g. ``h264``, ``vp9``, ``av1``); empty without video.
        width: displayed (upright) width in pixels, after rotation.
        height: displayed (upright) height in pixels, after rotation.
        coded_width: width of the frames as stored in the stream.
        coded_height: height of the frames as stored in the stream.
        rotation: counter-clockwise degrees (0, 90, 180, 270) that turn a coded
            frame upright; ``np.rot90(frame, rotation // 90)`` does it.
        fps: the stream's average frame rate (frames/s); 0.0 if unknown.
        num_frames: frames in the stream (from the container index, else from
            counting packets, else estimated as duration * fps).
        frames_estimated: True when ``num_frames`` is the duration * fps estimate.
        duration: stream duration in seconds (0.0 if unknown).
        has_video: the file has a (non cover-art) video stream.
        has_audio: the file has an audio stream.
    """

    path: str
    container: str
    codec: str
    width: int
    height: int
    coded_width: int
    coded_height: int
    rotation: int
    fps: float
    num_frames: int
    frames_estimated: bool
    duration: float
    has_video: bool
    has_audio: bool


# ----------------------------------------------------------------------------- probe


def _check_file(path: str) -> None:
    if not os.path.exists(path):
        raise VideoError(f"{path}: no such file; check the path.")
    if not os.path.isfile(path):
        raise VideoError(f"{path}: is not a regular file; pass a video file.")
    if os.path.getsize(path) == 0:
        raise VideoFormatError(f"{path}: the file is empty (0 bytes); the upload or copy may have failed, try again.")


def _open_container(path: str) -> Any:
    import av

    try:
        return av.open(path, mode="r", metadata_errors="replace")
    except av.error.InvalidDataError as e:
        raise VideoFormatError(
            f"{path}: not a recognised video container, or a truncated/corrupt file (FFmpeg: {e.strerror}); "
            f"use a complete video file such as MP4/H.264, or {_REENCODE_HINT}."
        ) from e
    except PermissionError as e:
        raise VideoError(f"{path}: permission denied; check the file's permissions.") from e
    except Exception as e:  # FFmpegError, OSError, or anything a damaged header triggers
        raise VideoFormatError(f"{path}: could not be opened as a video ({_short_error(e)}); {_REENCODE_HINT}.") from e


def _pick_video_stream(container: Any) -> Any | None:
    import av

    for s in container.streams.video:
        if not (s.disposition & av.stream.Disposition.attached_pic):
            return s
    return None


def _first_frame_rotation(path: str, container: Any, stream: Any) -> int:
    """Decode the first frame to read its display-matrix rotation (CCW degrees, 0..270)."""
    import av

    try:
        for frame in container.decode(stream):
            return int(round(float(frame.rotation or 0) / 90.0)) % 4 * 90
    except av.error.FFmpegError as e:
        raise VideoDecodeError(
            f"{path}: the {stream.codec_context.name} video stream could not be decoded ({e}); "
            f"the file may be corrupt, or {_REENCODE_HINT}."
        ) from e
    raise VideoDecodeError(f"{path}: the video stream holds no decodable frames; the file may be truncated or corrupt.")


def _count_packets(path: str) -> int:
    """Video packets (= frames) in the file, by demuxing a fresh container; no decoding."""
    container = _open_container(path)
    try:
        stream = _pick_video_stream(container)
        return sum(1 for p in container.demux(stream) if p.size)
    finally:
        container.close()


def _reject_non_video(path: str, container: Any, stream: Any | None, has_audio: bool) -> None:
    fmt = container.format.name
    if fmt == "tty" or (stream is not None and stream.codec_context.name in _TEXT_CODECS):
        raise VideoFormatError(
            f"{path}: looks like a text file, not a video; give a video file (MP4, WebM, MKV, ...)."
        )
    if fmt == "image2" or fmt.endswith("_pipe"):
        codec = stream.codec_context.name if stream is not None else fmt
        raise VideoFormatError(f"{path}: is a still image ({codec}), not a video; "
                               "give a video file (MP4, WebM, MKV, ...).")
    if stream is None:
        what = "an audio-only file" if has_audio else "a file without a video stream"
        raise VideoFormatError(f"{path}: has no video stream ({what}); upload a file with a video track.")


def probe_video(
    path: str | os.PathLike[str], *, count_frames: bool = True, require_video: bool = True,
    timeout_s: float | None = None,
) -> VideoInfo:
    """Read a video's metadata with PyAV without decoding its frames (only the first).

    Args:
        path: the video file.
        count_frames: when the container has no frame count (WebM, MKV, GIF),
            count packets by demuxing (no decoding); False estimates duration * fps.
        require_video: raise for files without a video stream; False returns a
            VideoInfo with ``has_video=False`` for audio-only files.
        timeout_s: seconds before giving up with :class:`VideoTimeoutError` (None = no
            limit, runs inline); a damaged file must not hang a server.

    Returns:
        VideoInfo.

    Raises:
        VideoFormatError: empty, text, still image, audio-only, or unknown container.
        VideoDecodeError: the video stream has no decodable frame.
        VideoError: missing file or permission denied.
        VideoTimeoutError: took longer than ``timeout_s``.

    Source: FFmpeg display matrix convention (``av_display_rotation_get``), via
    PyAV ``VideoFrame.rotation``.
    """
    path = os.fspath(path)
    if timeout_s is not None:
        return _run_with_timeout(
            lambda cancel: probe_video(path, count_frames=count_frames, require_video=require_video), timeout_s, path
        )
    _check_file(path)
    container = _open_container(path)
    try:
        return _probe_open(path, container, count_frames, require_video)
    except VideoError:
        raise
    except Exception as e:  # damaged stream data; never leak a raw PyAV/Unicode error
        raise VideoDecodeError(f"{path}: the file looks damaged ({_short_error(e)}); {_REENCODE_HINT}.") from e
    finally:
        container.close()


def _probe_open(path: str, container: Any, count_frames: bool, require_video: bool) -> VideoInfo:
    stream = _pick_video_stream(container)
    has_audio = len(container.streams.audio) > 0
    if stream is None and not require_video and container.format.name != "tty":
        return VideoInfo(
            path=path, container=container.format.name, codec="", width=0, height=0, coded_width=0,
            coded_height=0, rotation=0, fps=0.0, num_frames=0, frames_estimated=False,
            duration=_container_seconds(container), has_video=False, has_audio=has_audio,
        )
    _reject_non_video(path, container, stream, has_audio)
    return _describe(path, container, stream, has_audio, count_frames)


def _container_seconds(container: Any) -> float:
    return float(container.duration) / 1e6 if container.duration else 0.0


def _describe(path: str, container: Any, stream: Any, has_audio: bool, count_frames: bool) -> VideoInfo:
    cc = stream.codec_context
    codec = getattr(cc.codec, "canonical_name", None) or cc.name
    rate = stream.average_rate or stream.guessed_rate or stream.base_rate
    fps = float(rate) if rate else 0.0
    if stream.duration and stream.time_base:
        duration = float(stream.duration * stream.time_base)
    else:
        duration = _container_seconds(container)
    rotation = _first_frame_rotation(path, container, stream)
    frames, estimated = int(stream.frames or 0), False
    if frames <= 0 and (count_frames or container.format.name == "gif"):
        frames = _count_packets(path)
    if frames <= 0:
        frames, estimated = max(1, int(round(duration * fps))), True
    if fps <= 0 and duration > 0:
        fps = frames / duration
    if duration <= 0 and fps > 0:
        duration = frames / fps
    if container.format.name == "gif" and frames <= 1:
        raise VideoFormatError(f"{path}: is a still image (single-frame GIF), not a video; "
                               "give a video file (MP4, WebM, MKV, ...).")
    w, h = int(cc.width), int(cc.height)
    if w <= 0 or h <= 0:
        raise VideoDecodeError(
            f"{path}: the video stream reports no frame size; the file may be corrupt, {_REENCODE_HINT}."
        )
    dw, dh = (h, w) if rotation in (90, 270) else (w, h)
    return VideoInfo(
        path=path, container=container.format.name, codec=codec, width=dw, height=dh, coded_width=w,
        coded_height=h, rotation=rotation, fps=fps, num_frames=frames, frames_estimated=estimated,
        duration=duration, has_video=True, has_audio=has_audio,
    )


# ----------------------------------------------------------------------------- sampling


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


def sample_indices(
    total_frames: int,
    num_frames: int | None = None,
    fps: float | None = None,
    native_fps: float | None = None,
    max_frames: int = 256,
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


# ----------------------------------------------------------------------------- decoding helpers


def _fit_pixels(w: int, h: int, max_pixels: int) -> tuple[int, int]:
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


def _model_size(w: int, h: int, max_pixels: int, min_side: int | None) -> tuple[int, int]:
    """Decode size (w, h) for coded w x h frames: the ``max_pixels`` fit, made fit for the models.

    ``min_side`` None: :func:`_fit_pixels` (aspect kept). Otherwise the size is planned for
    :func:`ensure_min_side`, which then repeats pixels a whole factor f = ceil(min_side / s) when
    the short side s is under ``min_side``: s stays at min(coded short side, min_side) rather
    than being downscaled first, and the long side is cut to at most ``MAX_ASPECT * s`` and to
    ``max_pixels // (s * f * f)`` (so the enlarged frame is still within ``max_pixels``), never
    below s. Only such narrow or extreme shapes lose their aspect ratio; ``min_side`` wins over a
    ``max_pixels`` under ``min_side ** 2``.
    """
    fw, fh = _fit_pixels(w, h, max_pixels)
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


def _run_with_timeout(fn: Callable[[threading.Event], _T], timeout_s: float | None, path: str) -> _T:
    """Run fn(cancel_event) in a daemon thread; raise VideoTimeoutError after timeout_s.

    A timed-out thread cannot be killed: it is told to stop (the PyAV loop checks
    the event between frames) and abandoned; a hung decord call keeps running in
    the background until it returns.
    """
    cancel = threading.Event()
    if timeout_s is None:
        return fn(cancel)
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn(cancel)
        except BaseException as e:  # re-raised in the caller's thread
            box["error"] = e

    worker = threading.Thread(target=target, name="specvlm-video-decode", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        cancel.set()
        logger.warning("decoding %s exceeded %.1f s; abandoning the worker thread", path, timeout_s)
        raise VideoTimeoutError(
            f"{path}: reading the video took longer than {timeout_s:g} s; the file may be corrupt or very long. "
            f"Try a shorter clip, fewer frames, or {_REENCODE_HINT}."
        )
    if "error" in box:
        raise box["error"]
    return box["value"]


@dataclass
class _Decoded:
    frames: np.ndarray  # uint8 (N, h, w, 3), coded orientation
    timestamps: np.ndarray  # float64 (N,)
    indices: np.ndarray  # int64 (N,)
    total_frames: int
    last_end_s: float  # end time of the last frame of the stream, s
    backend: str
    notes: list[str] = field(default_factory=list)
    decoded: int = 0  # frames the decoder produced (to check that long videos are not decoded whole)


def _plan(total: int, ts: np.ndarray, native_fps: float, config: VideoConfig) -> np.ndarray:
    return sample_indices(
        total,
        num_frames=None if config.fps is not None else config.num_frames,
        fps=config.fps,
        native_fps=native_fps,
        max_frames=config.max_frames,
        even=config.even_frames,
        timestamps=ts,
    )


def _valid_times(ts: np.ndarray) -> bool:
    """Finite, non-negative, non-decreasing times that advance (readers return garbage without pts)."""
    if len(ts) == 0 or not np.all(np.isfinite(ts)) or ts[0] < -1e-3 or np.any(np.diff(ts) < -1e-6):
        return False
    return len(ts) < 2 or bool(ts[-1] > ts[0])


def _decode_decord(info: VideoInfo, size: tuple[int, int], config: VideoConfig) -> _Decoded:
    """Decode the sampled frames with decord (raises anything decord raises).

    decord reports AV_NOPTS garbage (about -9.2e17 s) as frame times for some files (H.264 in
    AVI); then the times come from the packets (PyAV demux, no decoding), else from the frame rate.
    """
    from decord import VideoReader, cpu

    w, h = size
    kwargs = {} if (w, h) == (info.coded_width, info.coded_height) else {"width": w, "height": h}
    vr = VideoReader(info.path, ctx=cpu(0), **kwargs)
    total = len(vr)
    if total < 1:
        raise RuntimeError("decord found no frames")
    spans = np.asarray(vr.get_frame_timestamp(np.arange(total)), dtype=np.float64)
    ts, last_end = spans[:, 0], float(spans[-1, 1])
    native_fps = float(vr.get_avg_fps() or info.fps)
    notes: list[str] = []
    if not _valid_times(ts):
        pk_ts, _, step = _packet_info(info.path)
        if len(pk_ts) == total and _valid_times(pk_ts):
            ts, last_end = pk_ts, float(pk_ts[-1] + step)
            logger.info("%s: decord gave no frame times; using the packet times", info.path)
        else:
            rate = native_fps if native_fps > 0 else 1.0
            ts, last_end = np.arange(total, dtype=np.float64) / rate, total / rate
            notes.append(f"the stream has no usable frame times; assumed a constant {rate:g} fps")
    indices = _plan(total, ts, native_fps, config)
    frames = vr.get_batch(indices.tolist()).asnumpy()
    if frames.shape != (len(indices), h, w, 3) or frames.dtype != np.uint8:
        raise RuntimeError(
            f"decord returned frames of shape {frames.shape} {frames.dtype}, expected {(len(indices), h, w, 3)} uint8"
        )
    return _Decoded(frames, ts[indices], indices, total, last_end, "decord", notes, decoded=len(indices))


def _packet_info(path: str) -> tuple[np.ndarray, np.ndarray | None, float]:
    """Per-packet times of the video stream, demuxed without decoding.

    Returns:
        (times in s from the first frame, sorted; raw pts sorted, int64 in the stream's
        time base, or None when some packet has no pts/dts; median frame step in s).
        Without usable pts the times are all zero.
    """
    container = _open_container(path)
    try:
        stream = _pick_video_stream(container)
        tb = float(stream.time_base)
        pts = [p.pts if p.pts is not None else p.dts for p in container.demux(stream) if p.size]
    finally:
        container.close()
    if not pts or any(p is None for p in pts):
        return np.zeros(len(pts)), None, 0.0
    raw = np.sort(np.asarray(pts, dtype=np.int64))
    known = raw.astype(np.float64) * tb
    step = float(np.median(np.diff(known))) if len(known) > 1 else 0.0
    return known - known[0], raw, step


def _packet_times(path: str) -> tuple[np.ndarray, float]:
    """Presentation times (s, from the first frame) of every video packet, sorted; and frame step."""
    ts, _, step = _packet_info(path)
    return ts, step


def _iter_frames(
    path: str, container: Any, stream: Any, cancel: threading.Event, stats: dict[str, int]
) -> Iterator[Any]:
    """Decoded frames in presentation order, skipping packets FFmpeg rejects (like the ffmpeg CLI)."""
    import av

    for packet in container.demux(stream):
        if cancel.is_set():
            raise VideoTimeoutError(f"{path}: decoding was cancelled after the time limit.")
        try:
            decoded = packet.decode()
        except av.error.InvalidDataError:
            stats["bad_packets"] = stats.get("bad_packets", 0) + 1
            if stats["bad_packets"] > _MAX_BAD_PACKETS:
                raise
            continue
        yield from decoded


def _frame_index(raw_pts: np.ndarray, pts: int) -> int:
    """Index of the packet whose pts is nearest to a decoded frame's pts."""
    i = int(np.searchsorted(raw_pts, pts))
    if i >= len(raw_pts) or (i > 0 and pts - raw_pts[i - 1] < raw_pts[i] - pts):
        i -= 1
    return i


def _decode_pyav(info: VideoInfo, size: tuple[int, int], config: VideoConfig, cancel: threading.Event) -> _Decoded:
    """Decode the sampled frames with PyAV, converting only the kept ones.

    Frames are matched to indices by their pts when every packet has a distinct one; then
    gaps of more than ``_SEEK_MIN_GAP`` frames between sampled frames are skipped by seeking
    to the keyframe before the next one (long videos decode ~N GOPs, not the whole stream).
    Without pts, one forward pass counts frames.
    """
    ts_all, raw_pts, step = _packet_info(info.path)
    total = len(ts_all)
    if total < 1:
        raise VideoDecodeError(f"{info.path}: the video stream holds no frames; the file may be truncated or corrupt.")
    have_ts = raw_pts is not None and bool(total < 2 or ts_all[-1] > 0)
    by_pts = have_ts and len(np.unique(raw_pts)) == total
    by_pts_seek = by_pts
    indices = _plan(total, ts_all if have_ts else None, info.fps, config)
    wanted = {int(i): int(c) for i, c in zip(*np.unique(indices, return_counts=True))}
    targets = sorted(wanted)
    got: dict[int, tuple[np.ndarray, float]] = {}
    stats: dict[str, int] = {}
    decoded = 0
    container = _open_container(info.path)
    try:
        stream = _pick_video_stream(container)
        stream.thread_type = "AUTO"
        k, last, seeked, start = 0, -1, set(), None
        while k < len(targets):
            tgt, before = targets[k], None
            if by_pts_seek and tgt - last > _SEEK_MIN_GAP and tgt not in seeked:
                seeked.add(tgt)
                before = last
                container.seek(int(raw_pts[tgt]), stream=stream, backward=True, any_frame=False)
            more = False
            for frame in _iter_frames(info.path, container, stream, cancel, stats):
                decoded += 1
                if by_pts and frame.pts is not None:
                    i = _frame_index(raw_pts, int(frame.pts))
                    t = float(ts_all[i])
                    if before is not None and i <= before:  # keyframes too sparse: seeking went back
                        by_pts_seek = False
                    before = None
                else:
                    i = last + 1
                    ft = frame.time if frame.time is not None else (float(ts_all[i]) if i < total else 0.0)
                    start = ft if start is None else start
                    t = ft - start if have_ts else i / (info.fps or 1.0)
                last = i
                if i in wanted and i not in got:
                    got[i] = (frame.to_ndarray(format="rgb24", width=size[0], height=size[1]), t)
                while k < len(targets) and targets[k] <= i:
                    k += 1
                if k >= len(targets):
                    break
                if by_pts_seek and targets[k] - i > _SEEK_MIN_GAP and targets[k] not in seeked:
                    more = True  # seek ahead
                    break
            if not more:
                break
    finally:
        container.close()
    frames: list[np.ndarray] = []
    times: list[float] = []
    missing = 0
    for i in indices.tolist():
        if i in got:
            arr, t = got[i]
        elif frames:
            arr, t = frames[-1], times[-1]
            missing += 1
        else:
            continue
        frames.append(arr)
        times.append(t)
    notes = [f"skipped {stats['bad_packets']} damaged video packet(s)"] if stats else []
    if not frames:
        raise VideoDecodeError(f"{info.path}: no frame could be decoded; the file may be corrupt; {_REENCODE_HINT}.")
    missing += len(indices) - len(frames)
    if missing:
        notes.append(f"only {len(indices) - missing} of {len(indices)} sampled frames could be decoded; "
                     "repeated the nearest earlier one")
        frames = [frames[0]] * (len(indices) - len(frames)) + frames
        times = [times[0]] * (len(indices) - len(times)) + times
    for n in notes:
        logger.info("%s: %s", info.path, n)  # shown to the user once, as clip.notes
    last_end = float(ts_all[-1] + step) if have_ts else total / (info.fps or 1.0)
    return _Decoded(np.stack(frames), np.asarray(times, dtype=np.float64), indices, total, last_end, "pyav", notes,
                    decoded=decoded)


def _short_error(e: BaseException) -> str:
    msg = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
    msg = re.sub(r"\[[0-9:]+\]\s*|\S+\.(?:cc|cpp|h):\d+:\s*", "", msg)  # decord's time + C++ location
    return f"{type(e).__name__}: {msg[:160]}"


def _decode(
    info: VideoInfo, size: tuple[int, int], config: VideoConfig, cancel: threading.Event
) -> tuple[_Decoded, list[str]]:
    notes: list[str] = []
    if info.rotation == 0:
        try:
            return _decode_decord(info, size, config), notes
        except ImportError:
            logger.info("decord is not installed; decoding %s with PyAV", info.path)
        except Exception as e:  # decord raises its own DECORDError / RuntimeError types
            reason = _short_error(e)
            # info, not warning: the note below reaches the user via clip.notes (CLI and app show them)
            logger.info("decord could not read %s (%s); falling back to PyAV", info.path, reason)
            notes.append(f"decoded with PyAV: decord could not read this {info.codec} file ({reason})")
    else:
        notes.append(f"decoded with PyAV and rotated {info.rotation} degrees counter-clockwise (display matrix)")
    try:
        return _decode_pyav(info, size, config, cancel), notes
    except VideoError:
        raise
    except Exception as e:  # av.error.FFmpegError and friends
        raise VideoDecodeError(
            f"{info.path}: the {info.codec} stream could not be decoded ({_short_error(e)}); {_REENCODE_HINT}."
        ) from e


# ----------------------------------------------------------------------------- public loaders


def _sampling_notes(info: VideoInfo, dec: _Decoded, config: VideoConfig) -> list[str]:
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


def _load(path: str, config: VideoConfig, cancel: threading.Event, min_side: int | None) -> VideoClip:
    info = probe_video(path, count_frames=False)
    fit = _fit_pixels(info.coded_width, info.coded_height, config.max_pixels)
    size = _model_size(info.coded_width, info.coded_height, config.max_pixels, min_side)
    dec, notes = _decode(info, size, config, cancel)
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


def load_video(
    path: str | os.PathLike[str], config: VideoConfig = VideoConfig(), *, timeout_s: float | None = 60.0,
    min_side: int | None = MIN_SIDE,
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
        ValueError: ``min_side`` is not None or an int >= 1.

    Source: DESIGN.md section 8 (probe first, fallback, cap at real count).
    """
    if min_side is not None and (isinstance(min_side, bool) or not isinstance(min_side, int) or min_side < 1):
        raise ValueError(f"min_side={min_side!r} must be a whole number of pixels >= 1, or None (off).")
    p = os.fspath(path)
    return _run_with_timeout(lambda cancel: _load(p, config, cancel, min_side), timeout_s, p)


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
