"""SubRip (.srt) subtitles: tolerant parsing and alignment with sampled frames.

Real-world .srt files come with a UTF-8 BOM, in cp1252 or latin-1, with CRLF
line ends, ``.`` instead of ``,`` before the milliseconds, timestamps without
hours, and overlapping or unordered cues (docs/design.md §8). :func:`parse_srt` repairs
the encoding and the timestamp lines, then parses with the maintained ``srt``
library, skipping garbled blocks (logged), and returns cues sorted by start.
Overlapping cues are kept.

Source: docs/design.md §8; the ``srt`` library (https://github.com/cdown/srt).
"""
from __future__ import annotations

import codecs
import logging
import os
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import srt

logger = logging.getLogger(__name__)

# [hh:]mm:ss[(,|.)fff] -- hours optional, fraction optional.
_TS = r"(?:(\d{1,3}):)?(\d{1,2}):(\d{1,2})(?:[,.](\d{1,3}))?"
_TIMING_LINE = re.compile(rf"^[ \t]*{_TS}[ \t]*-+>[ \t]*{_TS}(.*)$", re.MULTILINE)
_TAG = re.compile(r"<[^>\n]*>|\{\\[^}\n]*\}")  # <i>, <font ...>, {\an8}


class SubtitleError(ValueError):
    """The subtitle file is unreadable (binary, wrong format); the message names it and says what to do."""


@dataclass(frozen=True)
class Cue:
    """One subtitle cue.

    Attributes:
        start_s: start time in seconds.
        end_s: end time in seconds (> start_s).
        text: the cue text, formatting tags removed, lines joined with newlines.
    """

    start_s: float
    end_s: float
    text: str


def _decode(data: bytes, name: str) -> str:
    """Bytes -> text: UTF-16 by BOM, else utf-8-sig, then cp1252, then latin-1."""
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        try:
            return data.decode("utf-16")
        except UnicodeDecodeError:
            pass
    for encoding in ("utf-8-sig", "cp1252", "latin-1"):
        try:
            text = data.decode(encoding)
        except UnicodeDecodeError:
            continue
        if encoding != "utf-8-sig":
            logger.info("%s: not valid UTF-8, decoded as %s", name, encoding)
        return text
    raise AssertionError("latin-1 decodes any bytes")  # pragma: no cover


def _looks_binary(text: str) -> bool:
    if "\x00" in text:
        return True
    sample = text[:4096]
    controls = sum(1 for ch in sample if ord(ch) < 32 and ch not in "\r\n\t\f")
    return controls > max(4, len(sample) // 50)


def _canonical_ts(h: str | None, m: str, s: str, frac: str | None) -> str:
    ms = int((frac or "0").ljust(3, "0")[:3])  # '.5' is half a second
    return f"{int(h or 0):02d}:{int(m):02d}:{int(s):02d},{ms:03d}"


def _normalise_timing(text: str) -> str:
    """Rewrite every timing line to ``HH:MM:SS,mmm --> HH:MM:SS,mmm``."""

    def fix(m: re.Match[str]) -> str:
        g = m.groups()
        return f"{_canonical_ts(*g[0:4])} --> {_canonical_ts(*g[4:8])}{g[8]}"

    return _TIMING_LINE.sub(fix, text)


def _clean(content: str) -> str:
    lines = (_TAG.sub("", line).strip() for line in content.splitlines())
    return "\n".join(line for line in lines if line)


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@contextmanager
def _srt_warnings() -> Iterator[list[str]]:
    """Collect the ``srt`` library's own warnings instead of letting them reach the root logger.

    ``srt.parse(ignore_errors=True)`` logs "Skipped unparseable SRT data: ..." on its module
    logger; :func:`parse_srt` re-logs those under the file's name when some cues parse, and
    drops them when none do (the SubtitleError then says it all).
    """
    lib = logging.getLogger("srt")
    handler, propagate = _Collect(), lib.propagate
    lib.addHandler(handler)
    lib.propagate = False
    try:
        yield handler.messages
    finally:
        lib.removeHandler(handler)
        lib.propagate = propagate


def _split_absorbed(content: str) -> tuple[str, str]:
    """Split off a garbled block that the lenient parser merged into a cue's text.

    ``srt.parse(ignore_errors=True)`` appends a block whose timing line does not parse
    (e.g. ``2`` / ``garbage --> nonsense`` / ``text``) to the previous cue. Such text is
    recognised by a line holding ``-->``; it and a block number just before it are cut.

    Returns:
        (the cue's own text, the cut-off text or "").
    """
    lines = content.split("\n")
    for i, line in enumerate(lines):
        if "-->" in line:
            cut = i - 1 if i > 0 and lines[i - 1].strip().isdigit() else i
            return "\n".join(lines[:cut]), "\n".join(lines[cut:])
    return content, ""


def parse_srt(data: bytes | str, *, name: str = "<subtitles>") -> list[Cue]:
    """Parse SubRip text into cues sorted by (start, end).

    Tolerates a UTF-8 BOM, UTF-16 with BOM, cp1252/latin-1 bytes, CRLF, ``.``
    before the milliseconds, missing hours and unordered or overlapping cues
    (overlaps are kept). Garbled blocks between valid cues are skipped and
    logged (also those the lenient parser would merge into the previous cue's text);
    cues with no text or with end <= start are dropped.

    Args:
        data: file bytes (encoding detected) or already-decoded text.
        name: file name used in messages.

    Returns:
        list[Cue]; empty for an empty or whitespace-only input.

    Raises:
        SubtitleError: binary content, or non-empty text with no parseable cue.

    Source: ``srt.parse(..., ignore_errors=True)`` after encoding and timestamp repair.
    """
    text = _decode(data, name) if isinstance(data, (bytes, bytearray)) else str(data)
    text = text.lstrip("\ufeff").replace("\r\n", "\n").replace("\r", "\n")
    if not text.strip():
        return []
    if _looks_binary(text):
        raise SubtitleError(f"{name}: looks like a binary file, not SubRip subtitles; upload a .srt text file.")
    try:
        with _srt_warnings() as skipped:
            subs = list(srt.parse(_normalise_timing(text), ignore_errors=True))
    except (srt.SRTParseError, srt.TimestampParseError, ValueError) as e:
        raise SubtitleError(f"{name}: could not be parsed as SubRip ({e}); check the file is a .srt.") from e
    cues = []
    for sub in subs:
        content, garbled = _split_absorbed(sub.content)
        if garbled:
            logger.warning("%s: skipping a garbled block after cue %s: %r", name, sub.index, garbled[:80])
        start, end, body = sub.start.total_seconds(), sub.end.total_seconds(), _clean(content)
        if not body or end <= start or start < 0:
            logger.warning("%s: skipping cue %s (%.3f -> %.3f s, %d chars)", name, sub.index, start, end, len(body))
            continue
        cues.append(Cue(start, end, body))
    if not cues:  # the srt library's "Skipped unparseable SRT data" lines are not repeated
        raise SubtitleError(
            f"{name}: no subtitle cues found; a .srt needs blocks like "
            "'1' / '00:00:01,000 --> 00:00:02,500' / 'text'."
        )
    for message in skipped:
        logger.warning("%s: %s", name, message)
    cues.sort(key=lambda c: (c.start_s, c.end_s))
    return cues


def load_srt(path: str | os.PathLike[str]) -> list[Cue]:
    """Read and parse a .srt file (see :func:`parse_srt`).

    Args:
        path: the .srt file.

    Returns:
        list[Cue] sorted by start; empty for an empty file.

    Raises:
        SubtitleError: missing/unreadable file, binary content or no cue.
    """
    p = os.fspath(path)
    try:
        with open(p, "rb") as f:
            data = f.read()
    except OSError as e:
        raise SubtitleError(f"{p}: could not be read ({e.strerror}); check the path.") from e
    return parse_srt(data, name=p)


def frame_spans(timestamps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Time span each sampled frame stands for: [t_i, t_{i+1}); the first starts at min(0, t_0), the
    last lasts one median frame gap.

    Args:
        timestamps: float (T,) frame times (s), T >= 1, non-decreasing.

    Returns:
        (starts, ends): float64 (T,) each, in seconds.
    """
    t = np.asarray(timestamps, dtype=np.float64)
    gap = float(np.median(np.diff(t))) if len(t) > 1 else 1.0
    starts = t.copy()
    starts[0] = min(0.0, t[0])
    ends = np.append(t[1:], t[-1] + max(gap, 1e-3))
    return starts, ends


def cues_for_frames(
    cues: Sequence[Cue],
    timestamps: Sequence[float] | np.ndarray,
    frames_per_group: int = 1,
    *,
    sep: str = " ",
) -> list[str]:
    """Subtitle text for each frame, or each group of consecutive frames.

    Frame i stands for the interval [t_i, t_{i+1}) (the first from 0 s, the last
    lasting one median frame gap), so a short cue between two sampled frames is
    not lost. A group of ``frames_per_group`` frames (2 for Qwen2.5-VL's
    temporal patch) covers the union of its frames' intervals; the last group
    may be shorter. The text of every cue overlapping the interval is joined
    with ``sep`` in start order, newlines inside a cue become spaces, and
    repeated texts are kept once.

    Args:
        cues: cues (any order).
        timestamps: float (T,), frame times in seconds, non-decreasing.
        frames_per_group: frames per group (>= 1).
        sep: separator between cue texts.

    Returns:
        list[str] of length ceil(T / frames_per_group); "" where no cue overlaps.

    Raises:
        ValueError: frames_per_group < 1.
    """
    if frames_per_group < 1:
        raise ValueError(f"frames_per_group={frames_per_group!r} must be >= 1.")
    t = np.asarray(timestamps, dtype=np.float64).reshape(-1)
    if t.size == 0:
        return []
    starts, ends = frame_spans(t)
    ordered = sorted(cues, key=lambda c: (c.start_s, c.end_s))
    out = []
    for g in range(0, len(t), frames_per_group):
        lo, hi = starts[g], ends[min(g + frames_per_group, len(t)) - 1]
        texts: list[str] = []
        for c in ordered:
            if c.start_s < hi and c.end_s > lo:
                line = " ".join(c.text.split())
                if line not in texts:
                    texts.append(line)
        out.append(sep.join(texts))
    return out
