"""Typed video errors and the time limit every probe and decode runs under.

Every error subclasses :class:`VideoError` (a ValueError) and has a one-line message
that names the file, the problem and what to do; the app and the CLI show it as is.

Source: docs/design.md §8 (a damaged file must fail clearly, never hang a server).
"""
from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from specvlm.types import Stopped

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

REENCODE_HINT = "re-encode it to H.264 MP4 (e.g. `ffmpeg -i IN -c:v libx264 -pix_fmt yuv420p OUT.mp4`)"


class VideoError(ValueError):
    """A video could not be used; the message names the file, the problem and what to do."""


class VideoFormatError(VideoError):
    """The file is not a usable video (empty, text, image, audio-only, unknown container)."""


class VideoDecodeError(VideoError):
    """The container was recognised but its frames could not be decoded."""


class VideoTimeoutError(VideoError):
    """Probing or decoding took longer than the time limit (corrupt or huge file)."""


def short_error(e: BaseException) -> str:
    """One short line for a backend's exception: its type and last message line, without C++ locations."""
    msg = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
    msg = re.sub(r"\[[0-9:]+\]\s*|\S+\.(?:cc|cpp|h):\d+:\s*", "", msg)  # decord's time + C++ location
    return f"{type(e).__name__}: {msg[:160]}"


def run_with_timeout(fn: Callable[[threading.Event], _T], timeout_s: float | None, path: str,
                     should_stop: Callable[[], bool] | None = None, poll_s: float = 0.05) -> _T:
    """Run fn(cancel_event) in a daemon thread; raise VideoTimeoutError after timeout_s.

    A timed-out thread cannot be killed: it is told to stop (the PyAV loop checks the event
    between frames, the decord path between chunks of frames) and abandoned; a hung decord call
    keeps running in the background until it returns.

    Args:
        fn: the work; it polls the event it is given.
        timeout_s: seconds before giving up (None = no limit; runs inline unless ``should_stop``).
        path: the file, for messages.
        should_stop: polled every ``poll_s`` seconds; True sets the event, waits for the thread to
            reach its next check (up to 5 s) and raises :class:`specvlm.types.Stopped`.

    Raises:
        VideoTimeoutError: the time limit passed.
        Stopped: ``should_stop()`` returned True.
    """
    cancel = threading.Event()
    if timeout_s is None and should_stop is None:
        return fn(cancel)
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn(cancel)
        except BaseException as e:  # re-raised in the caller's thread
            box["error"] = e

    worker = threading.Thread(target=target, name="specvlm-video-decode", daemon=True)
    worker.start()
    end = None if timeout_s is None else time.monotonic() + timeout_s
    while worker.is_alive():
        left = poll_s if end is None else min(poll_s, end - time.monotonic())
        if left <= 0:
            break
        worker.join(left if should_stop is not None else (end - time.monotonic()))
        if should_stop is not None and worker.is_alive() and should_stop():
            cancel.set()
            worker.join(5.0)  # the decoder checks the event between frames / chunks
            raise Stopped(f"{path}: reading the video was stopped.")
    if worker.is_alive():
        cancel.set()
        logger.warning("decoding %s exceeded %.1f s; abandoning the worker thread", path, timeout_s)
        raise VideoTimeoutError(
            f"{path}: reading the video took longer than {timeout_s:g} s; the file may be corrupt or very long. "
            f"Try a shorter clip, fewer frames, or {REENCODE_HINT}."
        )
    if "error" in box:
        raise box["error"]
    return box["value"]
