"""Uploaded files: checks before any model work (video, subtitles, ground truth) and
:class:`UploadJanitor`, which deletes uploads as soon as nobody needs them.

Every check raises :class:`app.inputs.settings.UserError` with one message naming the file (its name,
never the server's temporary folder).

Source: docs/design.md §8 (video and subtitle traps); docs/design.md §1 (the app).
"""
from __future__ import annotations

import contextlib
import filecmp
import json
import logging
import math
import os
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from app.inputs.settings import MAX_TRUTH_MB, MB, Limits, UserError, duration_text

log = logging.getLogger(__name__)


def upload_name(error: Exception, path: str | None) -> str:
    """The error's message with the server-side path of an upload (a temp folder) shortened to the file's name."""
    text = str(error)
    return text.replace(str(path), Path(path).name) if path else text


def check_upload(path: str, what: str, max_mb: float) -> str:
    """The file's name after checking it is still there and not over ``max_mb``.

    Raises:
        UserError: missing or too large.
    """
    name = Path(path).name
    try:
        size = Path(path).stat().st_size
    except OSError:
        raise UserError(f"The {what} {name!r} is no longer on the server; upload it again.") from None
    if size > max_mb * MB:
        raise UserError(f"The {what} {name!r} is {size / MB:.1f} MB; {what}s over {max_mb:g} MB are not accepted.")
    return name


def check_video(video: Any, limits: Limits, probe: Callable[[str], Any] | None) -> str:
    """Validate an uploaded video before any model work: present, size and duration limits, readable.

    Args:
        video: the upload's path (None or "" when nothing was uploaded).
        limits: the server's limits.
        probe: ``probe(path) -> VideoInfo`` (duration in seconds), or None to skip probing.

    Returns:
        The path.

    Raises:
        UserError: missing, too large, too long, or not a readable video (message names the file).
    """
    if not video:
        raise UserError("Upload a video (or click an example) first.")
    path = str(video)
    p = Path(path)
    name = p.name
    if not p.is_file():
        raise UserError(f"The video {name!r} is no longer on the server (uploads are removed after use); "
                        "upload it again.")
    size = p.stat().st_size
    if size > limits.max_upload_mb * MB:
        raise UserError(f"The video {name!r} is {size / MB:.1f} MB; this server accepts up to "
                        f"{limits.max_upload_mb:g} MB. Trim or compress it and try again.")
    if probe is None:
        return path
    try:
        info = probe(path)
    except ImportError as e:
        raise UserError(f"The video reader is not installed: {e}") from e
    except ValueError as e:  # VideoError and friends
        raise UserError(f"Could not read the video: {upload_name(e, path)}") from e
    dur = float(getattr(info, "duration", 0.0) or 0.0)
    if dur > limits.max_duration_s:
        raise UserError(f"The video {name!r} is {duration_text(dur)} long; this server accepts up to "
                        f"{duration_text(limits.max_duration_s)}. Trim it and try again.")
    return path


BOXES = {"subtitle": (".srt", "Subtitles (.srt)"), "ground-truth": (".json", "Ground truth (.json)")}
"""Upload box -> (the file type it takes, its label on the page)."""


def check_box(path: str, box: str) -> None:
    """Refuse a file dropped on the wrong upload box (the boxes accept any file, so the page can say why).

    Args:
        path: the uploaded file.  box: a :data:`BOXES` key.

    Raises:
        UserError: the file's type is not the box's, naming the box it belongs in when it is the other kind.
    """
    ext, _ = BOXES[box]
    name, got = Path(path).name, Path(path).suffix.lower()
    if got == ext:
        return
    other = next((label for b, (e, label) in BOXES.items() if e == got and b != box), None)
    where = f" It looks like a file for the {other} box: drop it there." if other else ""
    raise UserError(f"The {box} box takes a {ext} file; {name!r} is not one.{where}")


def load_truth(path: str | None) -> dict[str, Any] | None:
    """The ground truth of a generated clip (``specvlm.bench.clipfiles.write_truth``'s JSON), or None without a file.

    Only what forcing needs is checked: ``width``, ``height``, ``fps`` and ``text`` (null, or an
    object with ``start_frame``, ``end_frame`` and a 4-number ``box``).

    Raises:
        UserError: not a .json, missing, too large, not JSON, or missing / malformed keys (message names the file).
    """
    if not path:
        return None
    check_box(path, "ground-truth")
    name = check_upload(path, "ground-truth file", MAX_TRUTH_MB)
    try:
        d = json.loads(Path(path).read_bytes().decode("utf-8-sig"))
    except UnicodeDecodeError:
        raise UserError(f"The ground-truth file {name!r} is not UTF-8 text; upload the .json written next to "
                        "a generated clip.") from None
    except json.JSONDecodeError as e:
        raise UserError(f"The ground-truth file {name!r} is not valid JSON ({e.msg} at line {e.lineno}, "
                        f"column {e.colno}).") from None
    problem = truth_problem(d)
    if problem:
        raise UserError(f"The ground-truth file {name!r} is not a generated clip's truth: {problem}.")
    return d


def _positive(v: Any) -> bool:
    return not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v) and v > 0


def truth_problem(d: Any) -> str:
    """What is wrong with a ground-truth dict for forcing text tokens ("" if nothing)."""
    if not isinstance(d, dict):
        return f"expected a JSON object, got {type(d).__name__}"
    for key in ("width", "height", "fps"):
        if key not in d:
            return f"missing key {key!r}"
        if not _positive(d[key]):
            return f"{key!r} must be a positive number, got {d[key]!r}"
    if "text" not in d:
        return "missing key 'text' (null when the clip has no burned-in text)"
    t = d["text"]
    if t is None:
        return ""
    if not isinstance(t, dict):
        return f"'text' must be an object or null, got {type(t).__name__}"
    for key in ("start_frame", "end_frame", "box"):
        if key not in t:
            return f"missing key 'text.{key}'"
    for key in ("start_frame", "end_frame"):
        if isinstance(t[key], bool) or not isinstance(t[key], (int, float)):
            return f"'text.{key}' must be a number, got {t[key]!r}"
    box = t["box"]
    if not (isinstance(box, list) and len(box) == 4
            and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in box)):
        return f"'text.box' must be 4 numbers [x0, y0, x1, y1], got {box!r}"
    return ""


class UploadJanitor:
    """Deletes uploaded input files (videos, subtitles) as soon as nobody needs them.

    A file is needed while a browser session shows it (:meth:`hold`; released by a new upload
    or when the page closes, :meth:`release_session`), while a request uses it (:meth:`using`),
    or while a queued request refers to it (``queued()``, e.g. Gradio's pending events; None
    there means "unknown" and keeps the file). API requests hold nothing, so their upload is
    deleted when the request ends. Never deleted: files outside ``upload_dir`` and copies of
    ``protected`` files (the examples, which Gradio caches by content and shares between users).

    Args:
        upload_dir: the folder uploads land in (Gradio's upload / cache folder).
        protected: files whose byte-identical copies are kept.
        queued: ``() -> set of paths`` referenced by queued requests, or None if unknown.
    """

    def __init__(self, upload_dir: str | os.PathLike[str], protected: Iterable[str | os.PathLike[str]] = (),
                 queued: Callable[[], set[str] | None] | None = None) -> None:
        self.upload_dir = Path(upload_dir).resolve()
        self._protected: dict[int, list[Path]] = {}
        for f in protected:
            fp = Path(f)
            if fp.is_file():
                self._protected.setdefault(fp.stat().st_size, []).append(fp)
        self.queued = queued
        self._held: dict[tuple[str, str], str] = {}
        self._using: Counter[str] = Counter()
        self._lock = threading.RLock()
        self.deleted: list[str] = []

    def _key(self, path: str | os.PathLike[str] | None) -> str | None:
        if not path:
            return None
        try:
            p = Path(path).resolve()
        except (OSError, RuntimeError):
            return None
        return str(p) if p.is_relative_to(self.upload_dir) and p != self.upload_dir else None

    def hold(self, session: str | None, slot: str, path: str | None) -> None:
        """The session's ``slot`` (e.g. ``"video"``) now shows ``path`` (None: nothing); the file it
        showed before is deleted if no one else needs it."""
        key = (session or "default", slot)
        with self._lock:
            old = self._held.pop(key, None)
            new = self._key(path)
            if new:
                self._held[key] = new
            if old and old != new:
                self._collect([old])

    def release_session(self, session: str | None) -> None:
        """The page closed: drop everything it held."""
        sid = session or "default"
        with self._lock:
            old = [v for (s, _), v in self._held.items() if s == sid]
            for k in [k for k in self._held if k[0] == sid]:
                del self._held[k]
            self._collect(old)

    @contextlib.contextmanager
    def using(self, paths: Iterable[str | None]) -> Iterator[None]:
        """Mark files in use for the duration of a request; afterwards delete the unneeded ones."""
        keys = [k for k in (self._key(p) for p in paths) if k]
        with self._lock:
            self._using.update(keys)
        try:
            yield
        finally:
            with self._lock:
                self._using.subtract(keys)
                self._using += Counter()  # drop zero counts
                self._collect(keys)

    def _needed(self, key: str, queued: set[str] | None) -> bool:
        if self._using[key] > 0 or key in self._held.values():
            return True
        if queued is None or key in queued:
            return True
        p = Path(key)
        try:
            size = p.stat().st_size
        except OSError:
            return False
        return any(_same_file(p, q) for q in self._protected.get(size, ()))

    def _queued_keys(self) -> set[str] | None:
        try:
            queued = self.queued() if self.queued is not None else set()
            return None if queued is None else {self._key(q) or q for q in queued}
        except Exception:
            log.warning("could not list queued requests; keeping uploads for now", exc_info=True)
            return None

    def _collect(self, keys: Iterable[str]) -> None:
        keys = [k for k in dict.fromkeys(keys) if k]
        if not keys:
            return
        queued = self._queued_keys()
        for key in keys:
            if self._needed(key, queued):
                continue
            p = Path(key)
            try:
                p.unlink(missing_ok=True)
                self.deleted.append(key)
                parent = p.parent
                if parent != self.upload_dir and parent.is_relative_to(self.upload_dir) and not any(parent.iterdir()):
                    parent.rmdir()
            except OSError as e:
                log.warning("could not delete upload %s: %s", key, e)


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve() or filecmp.cmp(a, b, shallow=False)
    except OSError:
        return False
