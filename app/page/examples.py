"""The page's example rows: the bundled clips, a real-world clip, one that streams long enough
to watch and stop, and a failure case.

Each row fills :data:`EXAMPLE_COLUMNS`. The first row is the streaming example: a bundled clip
with **Fixed length** on and :data:`STREAMING_TOKENS` new tokens, because the bundled model stops
after about 20 tokens (a decode of ~0.2 s on a CPU, over before anyone sees it stream).

The failure case (:data:`FAILURE_CLIP`) is a long clip whose subtitles state a fact the description
reports; its row picks the bundled sparse target drafting for itself (Self-SD) and sends the subtitles to the
target only, so the draft cannot predict the fact, τ falls at those steps and the Inspect tab's "why" names
the withheld cue.

Source: docs/design.md §1 (the app).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from app.inputs.settings import DEFAULT_PROMPT, SUBTITLE_MODES
from specvlm import assets
from specvlm.models.presets import SPARSE_SELF, SPARSE_TARGET

EXAMPLES_DIR = assets.path("videos")
EXAMPLE_COLUMNS = ("video", "prompt", "srt", "truth", "fixed_length", "max_new_tokens", "preset",
                   "subtitle_mode")
"""Components an example row fills, in order (a None from ``fixed_length`` on means the page default)."""
STREAMING_TOKENS = 512
"""New tokens of the streaming example (fixed length): several seconds of decoding on a CPU."""
STREAMING_CLIP = "shapes_short.mp4"
"""The bundled clip of the streaming example (a short prefill, so decoding starts at once)."""
FAILURE_CLIP = "shapes_subtitles.mp4"
"""The bundled clip of the failure case (160 frames; its ``.srt`` says a fact the description reports)."""
FAILURE_SETUP = (SPARSE_SELF, "target")
"""Preset and subtitle mode of the failure case: the sparse target drafting for itself (its drafts copy
a fact from the transcript when they get it), subtitles to the target only."""
FAILURE_LABEL = "Failure case: subtitles withheld from the draft"


def find_examples(folder: Path = EXAMPLES_DIR) -> list[list[Any]]:
    """Example rows ``[video, prompt, subtitles or None, ground truth or None]`` from ``folder/*.mp4``.

    A ``.srt`` with the same stem next to a video is used as its subtitles, a ``.json`` with the
    same stem as its ground truth (written by ``specvlm.bench.clipfiles.write_truth`` for generated clips).
    :data:`FAILURE_CLIP` is left out (:func:`failure_example` sets it up).
    """
    if not folder.is_dir():
        return []
    rows = []
    for mp4 in sorted(folder.glob("*.mp4")):
        if mp4.name == FAILURE_CLIP:
            continue
        srt, truth = mp4.with_suffix(".srt"), mp4.with_suffix(".json")
        rows.append([str(mp4), DEFAULT_PROMPT, str(srt) if srt.exists() else None,
                     str(truth) if truth.exists() else None])
    return rows


def failure_example(folder: Path = EXAMPLES_DIR, sparse_target: Path = SPARSE_TARGET) -> list[list[Any]]:
    """The failure-case row (:data:`FAILURE_CLIP` with its ``.srt`` and ground truth, the preset and
    subtitle mode of :data:`FAILURE_SETUP`), or none when the clip, its subtitles or the sparse pair is missing."""
    clip = folder / FAILURE_CLIP
    srt, truth = clip.with_suffix(".srt"), clip.with_suffix(".json")
    if not (clip.is_file() and srt.is_file() and (Path(sparse_target) / "config.json").is_file()):
        return []
    return [[str(clip), DEFAULT_PROMPT, str(srt), str(truth) if truth.is_file() else None, None, None,
             *FAILURE_SETUP]]


def real_world_examples() -> list[list[Any]]:
    """A real-world example row: gradio's bundled ``world.mp4`` (30 s, 480x270, shipped inside the
    gradio package and found through its public ``gradio.media.get_video``), or none if this gradio
    has no such file. The bundled shapes model gives a shapes-style caption on it (see the model
    card); with a real preset on a GPU it is a real description."""
    try:
        from gradio.media import get_video

        return [[get_video("world.mp4"), DEFAULT_PROMPT, None, None]]
    except (ImportError, ValueError, OSError):
        return []


def streaming_example(max_new_tokens: int, folder: Path = EXAMPLES_DIR) -> list[list[Any]]:
    """The streaming example row (fixed length, ``min(STREAMING_TOKENS, max_new_tokens)`` new tokens),
    or none when :data:`STREAMING_CLIP` is not in ``folder``."""
    clip = folder / STREAMING_CLIP
    if not clip.is_file():
        return []
    return [[str(clip), DEFAULT_PROMPT, None, None, True, min(STREAMING_TOKENS, max_new_tokens)]]


def default_examples(max_new_tokens: int) -> tuple[list[list[Any]], list[str]]:
    """(rows, labels): the streaming example, the bundled clips, the failure case, then the real-world clip."""
    rows = streaming_example(max_new_tokens) + find_examples() + failure_example() + real_world_examples()
    labels = [f"Watch it stream: {row[5]} tokens, fixed length" if len(row) > 4 and row[4]
              else FAILURE_LABEL if Path(row[0]).name == FAILURE_CLIP and len(row) > 7
              else Path(row[0]).name for row in rows]
    return rows, labels


def example_rows(examples: list[list[Any]], max_new_tokens: int, preset: str = "",
                 subtitle_mode: str = SUBTITLE_MODES[0]) -> list[list[Any]]:
    """Rows completed to :data:`EXAMPLE_COLUMNS`: no subtitles or ground truth, EOS honoured, the page's
    default token budget, preset (``preset``) and subtitle mode where a row says nothing or None."""
    fill = [None, None, None, None, False, max_new_tokens, preset, subtitle_mode]
    out = []
    for row in examples:
        row = list(row)[:len(fill)] + fill[len(row):]
        out.append([fill[i] if v is None and i >= 4 else v for i, v in enumerate(row)])
    return out
