"""Writing synthetic clips to disk: an H.264 mp4 and its ground-truth JSON.

Source: PyAV's encoding API (https://pyav.basswood-io.com); no external code.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np

from specvlm.bench.captions import describe
from specvlm.bench.synth import SceneTruth, SynthError

logger = logging.getLogger(__name__)


def write_mp4(path: str | Path, frames: np.ndarray, fps: float, crf: int = 23) -> Path:
    """Write frames as an H.264 (yuv420p) mp4 with PyAV.

    Args:
        path: output file.
        frames: uint8 (T, H, W, 3) RGB; H and W must be even.
        fps: frame rate (Hz); fractional rates are rounded to 1/1000.
        crf: x264 quality (lower = larger file).

    Returns:
        The path written.

    Raises:
        SynthError: odd frame size or wrong dtype/shape.
    """
    from fractions import Fraction

    import av

    if frames.ndim != 4 or frames.shape[-1] != 3 or frames.dtype != np.uint8:
        raise SynthError(f"frames must be uint8 (T,H,W,3), got {frames.dtype} {frames.shape}")
    _, h, w, _ = frames.shape
    if h % 2 or w % 2:
        raise SynthError(f"H.264 yuv420p needs even sizes, got {h}x{w}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(path), mode="w") as out:
        stream = out.add_stream("libx264", rate=Fraction(fps).limit_denominator(1000))
        stream.width, stream.height, stream.pix_fmt = w, h, "yuv420p"
        stream.options = {"crf": str(crf), "preset": "medium"}
        for fr in frames:
            for pkt in stream.encode(av.VideoFrame.from_ndarray(fr, format="rgb24")):
                out.mux(pkt)
        for pkt in stream.encode():
            out.mux(pkt)
    logger.debug("wrote %s (%d frames %dx%d @ %.3g fps)", path, len(frames), w, h, fps)
    return path


def write_truth(path: str | Path, truth: SceneTruth) -> Path:
    """Write ``truth.to_dict()`` and its caption (:func:`~specvlm.bench.captions.describe`) as JSON next
    to a clip; returns the path."""
    path = Path(path)
    path.write_text(json.dumps(truth.to_dict() | {"caption": describe(truth)}, indent=1))
    return path
