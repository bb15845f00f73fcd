"""Subtitles in the prompt: per-frame-group transcript lines after the video.

Layout chosen (both families)::

    <video placeholder>Subtitles:
    [t=0.0s] cue text of frame group 0
    [t=1.0-2.5s] cue text shared by frame groups 2..5
    <question>

For every sampled frame group (one frame for LLaVA-OneVision, the two frames of
one temporal token for Qwen2.5-VL, whose cues are joined) the text of every cue
overlapping the group's time span (:func:`specvlm.text.subtitles.cues_for_frames`)
becomes one timestamped line; consecutive groups with identical text share one
line with a time range, and groups without a cue get no line.

Why a timestamped transcript after the video and not subtitles interleaved
between per-group videos:

* One video, one placeholder: the video features, the placeholder count, the
  token grid and the absolute-time temporal M-RoPE positions of Qwen2.5-VL are
  exactly those of the prompt without subtitles (``get_rope_index`` over the full
  prompt puts the transcript after the video's last position). Splitting the
  video into one video per frame group would restart each group's temporal
  position at the running text offset, so the spacing between groups would be
  set by the subtitle lengths instead of by time, and LLaVA-OneVision would
  gain one newline token per group: different inputs from the same frames.
* It is the Video-MME "with subtitles" protocol (transcript after the frames,
  before the question); the timestamps keep the cue-to-frame alignment
  readable for the model and for a person inspecting the prompt.
* The transcript is one contiguous text block, so it can be dropped from one
  side cleanly: :attr:`ModelInputs.subtitle_mask` marks its tokens.

Subtitle modes (:data:`SUBTITLE_MODES`):

* ``both``: target and draft see the transcript.
* ``target``: the draft's prefill skips the transcript tokens, other tokens keep
  their original positions (like pruned video tokens, docs/design.md §4.7).
* ``draft``: the target sees the prompt without the transcript (token-identical
  to the prompt without subtitles, same positions); the draft sees it. Decode
  positions of the draft run ahead of the target's by the transcript length,
  exactly as if the draft decoded its own prompt. Lossless: only the target
  chooses tokens (see :meth:`ModelInputs.for_target`).
* ``none``: subtitles ignored.

Source: Video-MME (Fu et al. 2024) subtitle protocol; docs/design.md §4.7 (kept
tokens keep their positions).
"""
from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from specvlm.text.subtitles import Cue, frame_spans, cues_for_frames
from specvlm.types import SubtitlePromptError  # noqa: F401  (raised here; importable from here too)

log = logging.getLogger(__name__)

SUBTITLE_MODES = ("both", "target", "draft", "none")
"""Who sees the subtitle transcript: both models, the target only, the draft only, nobody."""

HEADER = "Subtitles:"


@dataclass(frozen=True)
class SubtitleLine:
    """One transcript line.

    Attributes:
        first_group: first frame group (token time step) the line belongs to.
        last_group: last frame group (inclusive).
        start_s: time of the first frame of ``first_group`` (s).
        end_s: time of the first frame of ``last_group`` (s).
        text: the cue text (overlapping cues joined with a space).
    """

    first_group: int
    last_group: int
    start_s: float
    end_s: float
    text: str

    def render(self) -> str:
        """``[t=12.0s] text`` or ``[t=12.0-14.5s] text``."""
        span = f"{self.start_s:.1f}s" if self.first_group == self.last_group else \
            f"{self.start_s:.1f}-{self.end_s:.1f}s"
        return f"[t={span}] {self.text}"


class PromptError(ValueError):
    """A prompt that is not text, is empty, or is longer than allowed."""


def check_prompt(prompt: Any, *, max_chars: int | None = None) -> str:
    """The one prompt check of the library, the CLI and the app.

    Args:
        prompt: the user's question or instruction.
        max_chars: the most characters allowed, or None for no limit.

    Returns:
        ``prompt`` unchanged.

    Raises:
        PromptError: not a string, empty or only whitespace, or longer than ``max_chars``.
    """
    if not isinstance(prompt, str):
        raise PromptError(f"The prompt must be text, got {type(prompt).__name__}.")
    if not prompt.strip():
        raise PromptError("The prompt is empty: type a question or instruction about the video.")
    if max_chars is not None and len(prompt) > max_chars:
        raise PromptError(f"The prompt is {len(prompt)} characters long; this server accepts up to {max_chars}. "
                          "Shorten it.")
    return prompt


def check_mode(mode: str) -> str:
    """Validate a subtitle mode; raises SubtitlePromptError naming the valid ones."""
    if mode not in SUBTITLE_MODES:
        raise SubtitlePromptError(f"subtitle_mode {mode!r} is unknown: use one of {', '.join(SUBTITLE_MODES)}.")
    return mode


def subtitle_lines(cues: Sequence[Cue], timestamps: Sequence[float] | np.ndarray, frames_per_group: int = 1,
                   *, merge_repeats: bool = True) -> list[SubtitleLine]:
    """Transcript lines, one per frame group with a cue (consecutive repeats merged).

    Args:
        cues: cues in any order, overlaps allowed.
        timestamps: float (T,) sampled-frame times (s).
        frames_per_group: frames per video token along time (2 for Qwen2.5-VL).
        merge_repeats: merge consecutive groups with the same text into one line.

    Returns:
        list[SubtitleLine] in time order; empty when no cue overlaps a frame.
    """
    t = np.asarray(timestamps, dtype=np.float64).reshape(-1)
    texts = cues_for_frames(cues, t, frames_per_group)
    lines: list[SubtitleLine] = []
    for g, text in enumerate(texts):
        if not text:
            continue
        ts = float(t[min(g * frames_per_group, len(t) - 1)])
        prev = lines[-1] if lines else None
        if merge_repeats and prev is not None and prev.text == text and prev.last_group == g - 1:
            lines[-1] = replace(prev, last_group=g, end_s=ts)
        else:
            lines.append(SubtitleLine(g, g, ts, ts, text))
    return lines


def no_transcript_note(cues: Sequence[Cue] | None, timestamps: Sequence[float] | np.ndarray) -> str | None:
    """Why a non-empty subtitle file added no transcript, or None when it adds one (or has no cues).

    The prompt gets a transcript line only for cues overlapping a sampled frame's time span
    (:func:`specvlm.text.subtitles.cues_for_frames`); a file for another video, or one offset past the
    sampled clip, overlaps none. Used by the CLI and the app so both say the same thing.

    Args:
        cues: the parsed cues (any order), or None.
        timestamps: float (T,) sampled-frame times (s).

    Returns:
        a one-line note naming the sampled span (s) and the first cue's start (s), or None.
    """
    t = np.asarray(timestamps, dtype=np.float64).reshape(-1)
    if not cues or t.size == 0 or subtitle_lines(cues, t):
        return None
    end = float(frame_spans(t)[1][-1])
    first = min(float(c.start_s) for c in cues)
    return (f"no subtitle cue overlaps the video's sampled frames (0-{end:.1f} s; the first cue starts at "
            f"{first:.1f} s), so no transcript was added")


def subtitle_block(cues: Sequence[Cue] | None, timestamps: Sequence[float] | np.ndarray,
                   frames_per_group: int = 1) -> str:
    """The transcript text placed after the video: ``"Subtitles:\\n[t=..] ..\\n"``, or "" without cues."""
    if not cues:
        return ""
    lines = subtitle_lines(cues, timestamps, frames_per_group)
    if not lines:
        return ""
    return HEADER + "\n" + "".join(line.render() + "\n" for line in lines)


def user_text(prompt: str, block: str) -> str:
    """The user turn's text: transcript block then the question (leading whitespace removed so
    the block's last newline never merges with the question in a byte-level BPE)."""
    return block + prompt.lstrip() if block else prompt


def subtitle_mask(input_ids: torch.Tensor, tokenizer: Any, text: str, block: str) -> torch.Tensor:
    """Bool (L,) mask of the transcript's tokens in the processed ids.

    The templated ``text`` (one video placeholder) is tokenized with character offsets; tokens
    inside the block's character span are the transcript. Everything after the video placeholder
    is identical in the processed ids (the processor only expands the placeholder), so the block
    is located from the end.

    Raises:
        SubtitlePromptError: the block is missing, a token straddles its edges, or the processed
            ids' tail differs from the text's tokenization.
    """
    L = int(input_ids.shape[-1])
    mask = torch.zeros(L, dtype=torch.bool)
    if not block:
        return mask
    start = text.rfind(block)
    if start < 0:
        raise SubtitlePromptError("the subtitle transcript is missing from the templated prompt.")
    end = start + len(block)
    enc = tokenizer(text, return_offsets_mapping=True, add_special_tokens=False)
    ids, offs = list(enc["input_ids"]), [tuple(o) for o in enc["offset_mapping"]]
    inside = [i for i, (a, b) in enumerate(offs) if a >= start and b <= end and b > a]
    straddle = [i for i, (a, b) in enumerate(offs) if a < start < b or a < end < b]
    if not inside or straddle:
        raise SubtitlePromptError("the subtitle transcript does not tokenize on its own (a token straddles its "
                                  "edge): this tokenizer/chat template is not supported with subtitles.")
    first = inside[0]
    tail = ids[first:]
    got = input_ids.reshape(-1)[L - len(tail):].tolist()
    if got != tail:
        raise SubtitlePromptError("the processed prompt differs from its tokenization after the video; "
                                  "cannot locate the subtitle tokens.")
    mask[L - len(tail): L - len(tail) + len(inside)] = True
    return mask
