"""Held-out clip sets of the re-selection evaluation (:mod:`training.eval_reselect`).

Three sets, frames generated in memory from a seed:

* ``long``: the long sparse-information clips of :mod:`training.eval_sparse` (128 frames of 168x168 px =
  2,304 video tokens: small objects, a flash on a few frames, brief small text, distractors) with a subtitle
  track whose one fact cue the description reports; the transcript goes to both models.
* ``text``: the same long scenes with **burned-in text on every clip** (small white glyphs on black, ~8% of
  the frame height, shown on 4-10 frames) and no subtitles: the fact the description reports that only a
  few video tokens hold is that text (``"... text 7. ..."``).
* ``short``: the 16-frame clips of :mod:`training.eval_bundled` (large objects, half with a subtitle track):
  the no-harm set.

Seeds: ``seed_base`` (default 3x10^9) + :data:`SET_OFFSETS` ``[set]`` + index. Training draws seeds below
10^8, :mod:`training.eval_bundled` uses 10^9 + i and 1.5x10^9 + i, :mod:`training.eval_sparse` 1.7x10^9 + i
and 2.2x10^9 + i, the sample clips 2x10^9 + i (i < 10^3): the ranges from 3x10^9 on are disjoint from all of
them for fewer than 2.5x10^8 clips per set.

Source: the bundled sparse pair's data recipe (assets/model_sparse/README.md).
"""
from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import numpy as np

from specvlm.bench import synth
from training import eval_clips
from training.data import TRAIN_SEED_LIMIT
from training import eval_sparse as es
from training import scenes

SETS = ("long", "text", "short")
SEED_BASE = 3_000_000_000
"""First seed of the re-selection evaluation's clips (above every other range the repository uses)."""
SET_OFFSETS = {"short": 0, "text": 250_000_000, "long": eval_clips.LONG_SEED_OFFSET}
"""Seed offset of each set from the seed base (``short`` and ``long`` as :mod:`training.eval_sparse`)."""


@dataclasses.dataclass(frozen=True)
class ClipSettings:
    """Shape of the evaluated clips.

    Attributes:
        seed_base: first seed (>= 10^8, :data:`training.eval_bundled.TRAIN_SEED_LIMIT`).
        long_frames, long_side, long_fps: frames, side (px) and frame rate of the ``long`` and ``text`` clips.
        short_frames: frames of the ``short`` clips.
    """

    seed_base: int = SEED_BASE
    long_frames: int = 128
    long_side: int = 168
    long_fps: float = 8.0
    short_frames: int = 16

    def __post_init__(self) -> None:
        if self.seed_base < TRAIN_SEED_LIMIT:
            raise ValueError(f"seed_base {self.seed_base} overlaps the training seeds (below "
                             f"{TRAIN_SEED_LIMIT}); pass a larger one")


def clip_seed(kind: str, index: int, settings: ClipSettings) -> int:
    """The scene seed of clip ``index`` of set ``kind``."""
    return settings.seed_base + SET_OFFSETS[kind] + index


def make_clip(kind: str, index: int, settings: ClipSettings) -> tuple[np.ndarray, synth.SceneTruth]:
    """Held-out clip ``index`` of set ``kind`` (one of :data:`SETS`).

    Returns:
        frames uint8 (T, H, W, 3) and the truth (objects, on-screen text, subtitle cues and fact).

    Raises:
        ValueError: an unknown set.
    """
    if kind not in SETS:
        raise ValueError(f"unknown clip set {kind!r}; use one of {', '.join(SETS)}")
    if kind in ("long", "short"):
        ns = SimpleNamespace(**dataclasses.asdict(settings))
        return es.make_clip(kind, index, ns)
    spec = scenes.SparseSpec(num_frames=settings.long_frames, height=settings.long_side,
                             width=settings.long_side, fps=settings.long_fps, text_prob=1.0)
    return scenes.sparse_scene(clip_seed(kind, index, settings), spec)
