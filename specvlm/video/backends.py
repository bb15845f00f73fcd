"""Frame decoders: decord first, PyAV when decord cannot read the file or it is rotated.

Measured with decord 0.6.0 and PyAV 18.1 on Linux:

* decord reads H.264, H.265, VP8, VP9 and MPEG-4 Part 2 (mp4/webm/mkv/avi),
  including variable frame rate (its per-frame timestamps are right).
* decord fails (raises) on AV1, animated GIF and on some frame widths
  (16, 24, 48, 72 px: "DECORDArrayCopyFromTo: The size must exactly match").
  These go through the PyAV fallback, which decodes everything FFmpeg can.
* decord's own rotation handling is wrong (a 270° display matrix comes out
  transposed; ``get_batch`` raises for 90°/270°), so rotated files always use
  PyAV, whose coded frames the loader then turns upright.

Timestamps are seconds from the first video frame, read from the stream
(decord ``get_frame_timestamp`` / PyAV packet and frame pts), never
``index / avg_fps``, so variable frame rate is right. decord returns
AV_NOPTS garbage (about -9.2e17 s) for some files (H.264 in AVI); then the
packet times are used instead.

Only the sampled frames are converted, scaled while decoding; the PyAV path seeks
to the keyframe before each sampled frame when they are far apart, so a long AV1
file decodes a few GOPs, not the whole stream.

Source: docs/design.md §8; decord issues dmlc/decord#51 (rotation) and
dmlc/decord#336 (size mismatch on small widths).
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from specvlm.config import VideoConfig
from specvlm.video.errors import REENCODE_HINT, VideoDecodeError, VideoError, VideoTimeoutError, short_error
from specvlm.video.plan import plan_indices, valid_times
from specvlm.video.probe import VideoInfo, open_container, packet_info, pick_video_stream

logger = logging.getLogger(__name__)

_MAX_BAD_PACKETS = 1000


DECORD_CHUNK = 16
"""Frames decord decodes per call: a time limit or a Stop is seen between chunks."""
_SEEK_MIN_GAP = 250
"""PyAV fallback: seek over gaps of more frames than this between sampled frames (else decode through)."""


@dataclass
class Decoded:
    """Frames one backend decoded, in coded orientation, before the loader turns them upright.

    Attributes:
        frames: uint8 (N, h, w, 3) RGB at the planned decode size.
        timestamps: float64 (N,), seconds from the first frame.
        indices: int64 (N,), the sampled frame indices.
        total_frames: frames in the stream, as the backend counted them.
        last_end_s: end time of the stream's last frame (s).
        backend: ``"decord"`` or ``"pyav"``.
        notes: what the backend changed or skipped, for ``VideoClip.notes``.
        decoded: frames the decoder produced (a long video must not be decoded whole).
    """

    frames: np.ndarray
    timestamps: np.ndarray
    indices: np.ndarray
    total_frames: int
    last_end_s: float
    backend: str
    notes: list[str] = field(default_factory=list)
    decoded: int = 0


def decode(
    info: VideoInfo, size: tuple[int, int], config: VideoConfig, cancel: threading.Event
) -> tuple[Decoded, list[str]]:
    """Decode the planned frames with decord, or with PyAV when decord fails or the stream is rotated.

    Args:
        info: the probed file.
        size: decode size (w, h) in pixels, from :func:`specvlm.video.plan.model_size`.
        config: frame sampling settings.
        cancel: set by the time limit; the PyAV loop stops between frames.

    Returns:
        (the decoded frames, notes saying which backend was used and why).

    Raises:
        VideoDecodeError: neither backend could decode the stream.
        VideoTimeoutError: ``cancel`` was set while decoding.

    Source: docs/design.md §8 (fall back when decord cannot read a file).
    """
    notes: list[str] = []
    if info.rotation == 0:
        try:
            return decode_decord(info, size, config, cancel), notes
        except VideoTimeoutError:  # cancelled between chunks: no fallback
            raise
        except ImportError:
            logger.info("decord is not installed; decoding %s with PyAV", info.path)
        except Exception as e:  # decord raises its own DECORDError / RuntimeError types
            reason = short_error(e)
            # info, not warning: the note below reaches the user via clip.notes (CLI and app show them)
            logger.info("decord could not read %s (%s); falling back to PyAV", info.path, reason)
            notes.append(f"decoded with PyAV, the fallback decoder: the fast decoder cannot read this {info.codec} file")
    else:
        notes.append(f"decoded with PyAV and rotated {info.rotation} degrees counter-clockwise (display matrix)")
    try:
        return decode_pyav(info, size, config, cancel), notes
    except VideoError:
        raise
    except Exception as e:  # av.error.FFmpegError and friends
        raise VideoDecodeError(
            f"{info.path}: the {info.codec} stream could not be decoded ({short_error(e)}); {REENCODE_HINT}."
        ) from e


def decode_decord(info: VideoInfo, size: tuple[int, int], config: VideoConfig,
                  cancel: threading.Event | None = None) -> Decoded:
    """Decode the sampled frames with decord (raises anything decord raises), :data:`DECORD_CHUNK`
    frames per call so that ``cancel`` (a time limit, a Stop) is seen between chunks.

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
    if not valid_times(ts):
        pk_ts, _, step = packet_info(info.path)
        if len(pk_ts) == total and valid_times(pk_ts):
            ts, last_end = pk_ts, float(pk_ts[-1] + step)
            logger.info("%s: decord gave no frame times; using the packet times", info.path)
        else:
            rate = native_fps if native_fps > 0 else 1.0
            ts, last_end = np.arange(total, dtype=np.float64) / rate, total / rate
            notes.append(f"the stream has no usable frame times; assumed a constant {rate:g} fps")
    indices = plan_indices(total, ts, native_fps, config)
    frames = np.concatenate([_decord_chunk(vr, chunk, cancel, info.path)
                             for chunk in np.array_split(indices, max(1, -(-len(indices) // DECORD_CHUNK)))])
    if frames.shape != (len(indices), h, w, 3) or frames.dtype != np.uint8:
        raise RuntimeError(
            f"decord returned frames of shape {frames.shape} {frames.dtype}, expected {(len(indices), h, w, 3)} uint8"
        )
    return Decoded(frames, ts[indices], indices, total, last_end, "decord", notes, decoded=len(indices))


def _decord_chunk(vr: Any, chunk: np.ndarray, cancel: threading.Event | None, path: str) -> np.ndarray:
    """Frames uint8 (n, H, W, 3) of one chunk of sorted indices (after checking ``cancel``)."""
    if cancel is not None and cancel.is_set():
        raise VideoTimeoutError(f"{path}: decoding was cancelled.")
    return vr.get_batch(chunk.tolist()).asnumpy()


def decode_pyav(info: VideoInfo, size: tuple[int, int], config: VideoConfig, cancel: threading.Event) -> Decoded:
    """Decode the sampled frames with PyAV, converting only the kept ones.

    Frames are matched to indices by their pts when every packet has a distinct one; then
    gaps of more than ``_SEEK_MIN_GAP`` frames between sampled frames are skipped by seeking
    to the keyframe before the next one (long videos decode ~N GOPs, not the whole stream).
    Without pts, one forward pass counts frames.
    """
    ts_all, raw_pts, step = packet_info(info.path)
    total = len(ts_all)
    if total < 1:
        raise VideoDecodeError(f"{info.path}: the video stream holds no frames; the file may be truncated or corrupt.")
    have_ts = raw_pts is not None and bool(total < 2 or ts_all[-1] > 0)
    by_pts = have_ts and len(np.unique(raw_pts)) == total
    by_pts_seek = by_pts
    indices = plan_indices(total, ts_all if have_ts else None, info.fps, config)
    wanted = {int(i): int(c) for i, c in zip(*np.unique(indices, return_counts=True))}
    targets = sorted(wanted)
    got: dict[int, tuple[np.ndarray, float]] = {}
    stats: dict[str, int] = {}
    decoded = 0
    container = open_container(info.path)
    try:
        stream = pick_video_stream(container)
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
        raise VideoDecodeError(f"{info.path}: no frame could be decoded; the file may be corrupt; {REENCODE_HINT}.")
    missing += len(indices) - len(frames)
    if missing:
        notes.append(f"only {len(indices) - missing} of {len(indices)} sampled frames could be decoded; "
                     "repeated the nearest earlier one")
        frames = [frames[0]] * (len(indices) - len(frames)) + frames
        times = [times[0]] * (len(indices) - len(times)) + times
    for n in notes:
        logger.info("%s: %s", info.path, n)  # shown to the user once, as clip.notes
    last_end = float(ts_all[-1] + step) if have_ts else total / (info.fps or 1.0)
    return Decoded(np.stack(frames), np.asarray(times, dtype=np.float64), indices, total, last_end, "pyav", notes,
                    decoded=decoded)


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
