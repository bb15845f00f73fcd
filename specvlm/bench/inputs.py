"""Benchmark inputs: generated clips sized to a video token count, video files and dataset samples.

Source: SpecVLM (arXiv 2508.16201) Sec. 4 (speedup against video length); the procedural scenes of
:mod:`specvlm.bench.synth`.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from specvlm.bench.settings import BenchError, BenchInput
from specvlm.config import VideoConfig
from specvlm.types import VideoClip

log = logging.getLogger(__name__)

MIN_SYNTHETIC_SIDE = 56
"""Smallest generated frame side (px): the procedural scenes need room for their shapes."""


def _synthetic_frames(num_frames: int, side: int, seed: int) -> np.ndarray:
    """uint8 (T, side, side, 3) frames from the procedural generator (moving shapes)."""
    from specvlm.bench import synth

    spec = synth.SceneSpec(num_frames=max(2, num_frames), height=max(MIN_SYNTHETIC_SIDE, side),
                            width=max(MIN_SYNTHETIC_SIDE, side))
    frames, _ = synth.generate(seed, spec)
    return frames[:num_frames]


def max_video_tokens(pair: Any) -> int | None:
    """The target's ``max_position_embeddings`` (tokens), or None where its config does not say."""
    cfg = pair.target.config
    cfg = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
    n = getattr(cfg, "max_position_embeddings", None)
    return int(n) if n else None


def synthetic_clip(pair: Any, num_tokens: int, *, side: int = 224, seed: int = 0, fps: float = 2.0) -> VideoClip:
    """A generated clip sized to give about ``num_tokens`` video tokens with the pair's processor.

    Two small probe clips (2k and 4k frames, k = frames per video token along time) give
    the processor's video tokens per frame and fixed overhead; the frame count is solved
    from them and rounded to a multiple of k.

    Args:
        pair: the ModelPair (its adapter and processor decide the token count).
        num_tokens: wanted video tokens V (>= 1).
        side: frame side in px (the processor may resize).
        seed: scene seed.
        fps: frame rate of the clip (frames/s).

    Returns:
        VideoClip of T frames, uint8 (T, side, side, 3).

    Raises:
        BenchError: the processor's token count does not grow with the frame count; ``num_tokens``
            below the smallest clip (one frame group) or at/above the target's
            ``max_position_embeddings``; ``side`` under :data:`MIN_SYNTHETIC_SIDE`.
    """
    from specvlm.video import frames_to_clip

    if side < MIN_SYNTHETIC_SIDE:
        raise BenchError(f"synthetic frame side {side} px: give at least {MIN_SYNTHETIC_SIDE} px.")
    limit = max_video_tokens(pair)
    if limit is not None and num_tokens >= limit:
        raise BenchError(f"{num_tokens} video tokens: the target's max_position_embeddings is {limit}; ask for "
                         "fewer video tokens (leave room for the prompt and the answer).")
    from specvlm.engine.prepare import prepare

    k = max(1, int(pair.frames_per_token))
    counts = []
    for t in (2 * k, 4 * k):
        clip = frames_to_clip(_synthetic_frames(t, side, seed), fps)
        counts.append(prepare(pair, clip, "probe").num_video_tokens)
    per_frame = (counts[1] - counts[0]) / (2 * k)
    if per_frame <= 0:
        raise BenchError("the processor's video token count does not grow with the number of frames.")
    base = counts[0] - per_frame * 2 * k
    smallest = int(round(base + per_frame * k))
    if num_tokens < smallest:
        raise BenchError(f"{num_tokens} video tokens: the smallest generated clip for this model gives {smallest} "
                         f"({k} frame{'s' if k > 1 else ''} of {side}x{side} px); ask for at least {smallest}"
                         + (", or a smaller --synthetic-side." if side > MIN_SYNTHETIC_SIDE else "."))
    frames = max(k, int(round((num_tokens - base) / per_frame / k)) * k)
    log.info("synthetic clip: %d frames of %dx%d px for ~%d video tokens", frames, side, side, num_tokens)
    return frames_to_clip(_synthetic_frames(frames, side, seed), fps, path=f"synthetic-{num_tokens}")


@dataclass(frozen=True)
class PlannedInput:
    """A benchmark input known by name before its video is read or generated.

    A distributed run names every input on every rank, then reads only its own shard.

    Attributes:
        name: the input's name in the report (file name, dataset sample id, ``synthetic-N``).
        make: reads or generates the clip and returns the :class:`BenchInput` (may raise
            ``VideoError`` or :class:`BenchError`).
    """

    name: str
    make: Callable[[], BenchInput]


def plan_files(videos: Sequence[str], prompt: str, vcfg: VideoConfig) -> list[PlannedInput]:
    """One planned input per video file, named by its file name (nothing is read yet)."""
    from specvlm.video import load_video

    return [PlannedInput(Path(v).name, lambda v=v: BenchInput(Path(v).name, load_video(v, vcfg), prompt))
            for v in videos]


def plan_dataset(name: str, root: str | None, num_samples: int, seed: int, vcfg: VideoConfig) -> list[PlannedInput]:
    """A seeded subset of a local copy of a paper benchmark (:mod:`specvlm.bench.datasets`), with its references;
    the annotation files are read and the videos' presence checked now, the videos themselves later.

    Raises:
        BenchError: no ``root``. specvlm.bench.datasets.DatasetError: missing files.
    """
    from specvlm.bench.datasets import load_dataset
    from specvlm.video import load_video

    if not root:
        raise BenchError("--dataset needs --data-root (the folder of the local copy).")
    return [PlannedInput(s.id, lambda s=s: BenchInput(s.id, load_video(s.video, vcfg), s.prompt, s.answer))
            for s in load_dataset(name, root, num_samples, seed)]


def plan_synthetic(pair: Any, lengths: Sequence[int], prompt: str, *, side: int, fps: float,
                   sweep: bool = False) -> list[PlannedInput]:
    """Generated clips of about each length in video tokens (``synthetic-N``, or ``sweep-N`` for a sweep).

    Clips of a sweep share one scene seed (only the length changes); other clips get seeds 0, 1, ...

    Raises:
        BenchError: a frame rate that is not a positive finite number (now); a length the pair cannot
            hold (see :func:`synthetic_clip`), when the clip is made.
    """
    if lengths and not (fps > 0 and np.isfinite(fps)):
        raise BenchError(f"--synthetic-fps={fps}: give a frame rate > 0 (e.g. 8 for the bundled model).")
    prefix = "sweep" if sweep else "synthetic"
    return [PlannedInput(f"{prefix}-{n}", lambda i=i, n=n: BenchInput(
        f"{prefix}-{n}", synthetic_clip(pair, n, side=side, seed=0 if sweep else i, fps=fps), prompt, sweep=sweep))
        for i, n in enumerate(lengths)]
