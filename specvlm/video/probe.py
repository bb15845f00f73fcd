"""Container facts: what a file holds, read with PyAV without decoding (only the first frame).

:func:`probe_video` rejects non-videos (text, still images, audio-only files) with typed
errors, reads the stream's codec, size, rotation (display matrix), frame rate, frame count
and duration; :func:`packet_info` reads every video packet's presentation time by demuxing.

Source: docs/design.md §8 (probe first, cap frames at the real count); FFmpeg's display
matrix convention (``av_display_rotation_get``).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from specvlm.video.errors import (
    REENCODE_HINT,
    VideoDecodeError,
    VideoError,
    VideoFormatError,
    run_with_timeout,
    short_error,
)

_TEXT_CODECS = frozenset({"ansi", "bintext", "xbin", "idf", "text", "subrip", "ass", "webvtt"})


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
        return run_with_timeout(
            lambda cancel: probe_video(path, count_frames=count_frames, require_video=require_video), timeout_s, path
        )
    _check_file(path)
    container = open_container(path)
    try:
        return _probe_open(path, container, count_frames, require_video)
    except VideoError:
        raise
    except Exception as e:  # damaged stream data; never leak a raw PyAV/Unicode error
        raise VideoDecodeError(f"{path}: the file looks damaged ({short_error(e)}); {REENCODE_HINT}.") from e
    finally:
        container.close()


def _check_file(path: str) -> None:
    if not os.path.exists(path):
        raise VideoError(f"{path}: no such file; check the path.")
    if not os.path.isfile(path):
        raise VideoError(f"{path}: is not a regular file; pass a video file.")
    if os.path.getsize(path) == 0:
        raise VideoFormatError(f"{path}: the file is empty (0 bytes); the upload or copy may have failed, try again.")


def open_container(path: str) -> Any:
    """Open ``path`` with PyAV for reading; raises VideoFormatError / VideoError with a fix to try."""
    import av

    try:
        return av.open(path, mode="r", metadata_errors="replace")
    except av.error.InvalidDataError as e:
        raise VideoFormatError(
            f"{path}: not a recognised video container, or a truncated/corrupt file (FFmpeg: {e.strerror}); "
            f"use a complete video file such as MP4/H.264, or {REENCODE_HINT}."
        ) from e
    except PermissionError as e:
        raise VideoError(f"{path}: permission denied; check the file's permissions.") from e
    except Exception as e:  # FFmpegError, OSError, or anything a damaged header triggers
        raise VideoFormatError(f"{path}: could not be opened as a video ({short_error(e)}); {REENCODE_HINT}.") from e


def pick_video_stream(container: Any) -> Any | None:
    """The container's first video stream that is not cover art, or None."""
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
            f"the file may be corrupt, or {REENCODE_HINT}."
        ) from e
    raise VideoDecodeError(f"{path}: the video stream holds no decodable frames; the file may be truncated or corrupt.")


def _count_packets(path: str) -> int:
    """Video packets (= frames) in the file, by demuxing a fresh container; no decoding."""
    container = open_container(path)
    try:
        stream = pick_video_stream(container)
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


def _probe_open(path: str, container: Any, count_frames: bool, require_video: bool) -> VideoInfo:
    stream = pick_video_stream(container)
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
            f"{path}: the video stream reports no frame size; the file may be corrupt, {REENCODE_HINT}."
        )
    dw, dh = (h, w) if rotation in (90, 270) else (w, h)
    return VideoInfo(
        path=path, container=container.format.name, codec=codec, width=dw, height=dh, coded_width=w,
        coded_height=h, rotation=rotation, fps=fps, num_frames=frames, frames_estimated=estimated,
        duration=duration, has_video=True, has_audio=has_audio,
    )


def packet_info(path: str) -> tuple[np.ndarray, np.ndarray | None, float]:
    """Per-packet times of the video stream, demuxed without decoding.

    Returns:
        (times in s from the first frame, sorted; raw pts sorted, int64 in the stream's
        time base, or None when some packet has no pts/dts; median frame step in s).
        Without usable pts the times are all zero.
    """
    container = open_container(path)
    try:
        stream = pick_video_stream(container)
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
