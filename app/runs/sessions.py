"""Each browser session's active Run: its stop flag, and whether another Run waits for it.

One Run per session: a second Run from the same session stops the first. Stop sets the flag; the
Run notices it within one batch, says "Stopping…", ends its worker and then ends "Stopped". A Run
clicked while the previous one stops is held by the page (Gradio's ``trigger_mode="always_last"``)
and sent when the stopping run ends; :meth:`RunRegistry.queue_next` records it, so the stopping
run can say "the next run starts now" and keep Run disabled until it does.

Source: docs/design.md §8 (a Stop button must stop the work, not only the UI).
"""
from __future__ import annotations

import threading
import time

QUEUED_FOR_S = 60.0
"""How long a Run clicked while the previous run stops counts as waiting for it (seconds)."""


class RunRegistry:
    """Stop flags of the sessions' active Runs, and the Runs waiting for one to stop."""

    def __init__(self) -> None:
        self._stops: dict[str, threading.Event] = {}
        self._queued: dict[str, float] = {}  # session -> when a Run was clicked while its run stopped
        self._background: set[str] = set()  # sessions whose Run is Done and explains its steps for Inspect

    def start(self, sid: str) -> threading.Event:
        """A Run of ``sid`` starts: the session's previous Run is told to stop; returns the new stop flag."""
        prev = self._stops.get(sid)
        if prev is not None:
            prev.set()
        stop = self._stops[sid] = threading.Event()
        self._queued.pop(sid, None)  # this is the Run that was waited for
        return stop

    def finish(self, sid: str, stop: threading.Event) -> None:
        """The Run that owns ``stop`` ended (its flag stays set: nothing polls it any more)."""
        stop.set()
        if self._stops.get(sid) is stop:
            del self._stops[sid]
            self._background.discard(sid)

    def background(self, sid: str) -> None:
        """The session's Run is Done and only explains its failing steps for Inspect: a Run clicked now ends that
        (:meth:`queue_next`)."""
        self._background.add(sid)

    def stop(self, sid: str) -> bool:
        """Tell the session's Run to stop; False when none is running."""
        ev = self._stops.get(sid)
        if ev is None:
            return False
        ev.set()
        return True

    def queue_next(self, sid: str, wait_s: float = 0.5) -> bool:
        """A Run was clicked while the session's Run is active. The page disables Run while a run
        decodes, so that run is stopping, or its Stop is still on the way: this waits up to ``wait_s``
        for the flag; a Run that is Done and explaining in the background is told to stop. Returns whether the
        click waits for a stopping run (then it is recorded)."""
        ev = self._stops.get(sid)
        if ev is not None and sid in self._background:
            ev.set()   # the next Run starts once the explanation has stopped
        if ev is None or not ev.wait(wait_s):
            return False
        self._queued[sid] = time.monotonic()
        return True

    def end_state(self, sid: str) -> str:
        """The page's state once the session's Run ends: ``queued`` when a Run waits for it (the record
        is consumed; stale after :data:`QUEUED_FOR_S`), else ``idle``."""
        at = self._queued.pop(sid, None)
        return "queued" if at is not None and time.monotonic() - at < QUEUED_FOR_S else "idle"
