"""A Run's extra inputs: subtitle cues and a generated clip's ground truth, and the notes they give
the status line ("2 subtitle cues shown to the target only", "no on-screen-text tokens were forced: ...",
what a fixed-length Run writes after its answer).

Source: docs/design.md §1 (the app).
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from app.inputs.settings import RunRequest, UserError, check_subtitle_mode

FIXED_LENGTH_NOTE = ("fixed length: decoding goes on past the end-of-text token, where a model writes whatever "
                     "followed an answer in its training; the bundled model writes more chat turns there "
                     "(\"user … assistant …\" questions and answers it invents)")
"""The input note of a fixed-length Run (it explains the text after the answer)."""


def cues_text(cues: list[Any]) -> str:
    """Readable cues, one per line: ``[00:01.0 - 00:03.5] text``."""
    return "\n".join(f"[{_mmss(c.start_s)} - {_mmss(c.end_s)}] {c.text}" for c in cues)


def request_extras(request: RunRequest, load_cues: Callable[[str | None], list[Any]],
                   load_truth: Callable[[str | None], dict[str, Any] | None],
                   ) -> tuple[list[Any], str, dict[str, Any] | None, list[str]]:
    """(subtitle cues, subtitle mode, ground truth to force, input notes) from a request's uploads.

    Args:
        request: the Run.  load_cues / load_truth: the backend's readers (they raise UserError).

    Raises:
        UserError: bad subtitle mode, unreadable .srt, or a malformed ground-truth .json.
    """
    s, srt, truth_path = request.settings, request.srt, request.truth
    mode = check_subtitle_mode(s.subtitle_mode)
    notes: list[str] = []
    try:
        cues = load_cues(srt)
    except ImportError as e:
        raise UserError(f"The subtitle reader is not installed: {e}") from e
    if cues:
        who = {"both": "both models", "target": "the target (and vanilla) only", "draft": "the draft only",
               "none": "neither model (ignored)"}[mode]
        notes.append(f"{len(cues)} subtitle cue{'s' if len(cues) != 1 else ''} shown to {who}")
    elif srt:
        notes.append(f"the subtitle file {Path(srt).name!r} has no cues, so no transcript was added")
    truth = None
    if s.keep_text:
        d = load_truth(truth_path)
        if d is None:
            notes.append("no on-screen-text tokens were forced: no ground-truth .json was given "
                         "(only generated clips have one)")
        elif not d.get("text"):
            notes.append(f"no on-screen-text tokens were forced: {Path(truth_path).name!r} says the clip has "
                         "no burned-in text")
        else:
            truth = d
    if s.fixed_length:
        notes.append(FIXED_LENGTH_NOTE)
    return cues, mode, truth, notes


def _mmss(t: float) -> str:
    m, s = divmod(float(t), 60)
    return f"{int(m):02d}:{s:04.1f}"
