"""Video reading: probe a file, plan the sampled frames, decode them into a :class:`VideoClip`.

Modules, by job:

* :mod:`specvlm.video.probe`: container facts (:func:`probe_video`, :class:`VideoInfo`).
* :mod:`specvlm.video.plan`: pure index and size math (:func:`sample_indices`,
  :data:`MIN_SIDE`, :data:`MAX_ASPECT`).
* :mod:`specvlm.video.backends`: the decord and PyAV decoders.
* :mod:`specvlm.video.load`: :func:`load_video`, :func:`ensure_min_side`, :func:`frames_to_clip`.
* :mod:`specvlm.video.errors`: typed errors and the time limit.

Source: docs/design.md §2 and §8.
"""
from specvlm.video.errors import VideoDecodeError, VideoError, VideoFormatError, VideoTimeoutError
from specvlm.video.load import ensure_min_side, frames_to_clip, load_video
from specvlm.video.plan import MAX_ASPECT, MIN_SIDE, sample_indices
from specvlm.video.probe import VideoInfo, probe_video

__all__ = [
    "MAX_ASPECT",
    "MIN_SIDE",
    "VideoDecodeError",
    "VideoError",
    "VideoFormatError",
    "VideoInfo",
    "VideoTimeoutError",
    "ensure_min_side",
    "frames_to_clip",
    "load_video",
    "probe_video",
    "sample_indices",
]
