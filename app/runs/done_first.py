"""A Run's updates from its worker's batches, with **Done** as soon as decoding ends.

After both runs and their comparison, the worker explains the speculative run's failing steps for the Inspect tab
(one more target pass over the prompt, seconds on a long video: :meth:`app.runs.worker.DecodeWorker.run`). The page
does not wait for it: the comparison's arrival is the Run's Done (every panel, the summary, the record, Run
enabled), and the explanation goes on in the background; the Run's last update brings the explained record. Stop,
or a new Run, ends the explanation and the Run stays Done.

Source: docs/design.md §1 (the app), §8 (a Stop button must stop the work).
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

EXPLAINING = "  \n*Inspect: explaining the failing steps in the background (Stop skips it)…*"
"""Added to the Done status while the explanation runs."""


def updates(batches: Iterable[list[Any]], view: Any, progress: Callable[[float, str], None] | None,
            stop: threading.Event, on_done: Callable[[], None]) -> Iterator[dict[str, Any]]:
    """The page's updates for the worker's ``batches`` (:meth:`app.views.run_view.RunView.fold`), the Done update
    as soon as the comparison arrives with a record to explain (without one the Run ends at once).

    Args:
        batches: the worker's message batches.  view: the Run's :class:`app.views.run_view.RunView`.
        progress: ``progress(fraction, description)`` until Done (None: none).
        stop: the Run's stop flag: before Done it ends the Run with "Stopping…", after Done it ends the explanation.
        on_done: called once when Done is sent (the session's Run is then in the background).

    Yields:
        Update dicts; the Done update has ``ui_state`` ``idle`` and ``background`` True (the rest of the Run only
        explains). The caller ends the Run with :meth:`~app.views.run_view.RunView.final`.
    """
    done = False
    for batch in batches:
        upd = view.fold(batch, None if done else progress)
        if stop.is_set():
            if not done:
                yield {**upd, "status": "Stopping…", "ui_state": "stopping"}
            return
        if done:
            upd.pop("status", None)   # Done stays on the page while the explanation runs
        elif view.comparison is not None and view.failure is None and view.record is not None:   # else it ends now
            done = True
            on_done()
            upd = view.final(stopped=False) | {"ui_state": "idle", "background": True}
            upd["status"] += EXPLAINING
        if upd:
            yield upd
        if view.failure is not None:
            return
