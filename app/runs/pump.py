"""Blocking engine work in its own thread, handed to a generator in batches, so a close reaches it.

The video reader and the engine's event stream block for seconds at a time (decoding frames, a
long prefill). :func:`pump` runs such work in a daemon thread and yields what it produced at most
every ``interval_s`` (and an empty batch at least every :data:`HEARTBEAT_S`), so the generator
that consumes it is never stuck inside the work: when that generator is closed (Stop, a closed
page; on ZeroGPU the ``spaces`` worker process closes it), the work is told to stop through its
``should_stop`` callback and the thread is joined before the close returns. The engine polls
``should_stop`` between frames, between prefill layers and before every decode step, so a
stopped run leaves no thread and uses no CPU or GPU afterwards.

Source: docs/design.md §8 (a Stop button must stop the work, not only the UI).
"""
from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

log = logging.getLogger(__name__)

HEARTBEAT_S = 0.5
"""Longest time without a yield (an empty batch), so a close reaches the work during a long prefill."""


def pump(work: Callable[[Callable[[], bool]], Iterable[Any]], name: str,
         interval_s: float) -> Iterator[tuple[list[Any], bool]]:
    """Run ``work(should_stop)`` in a thread named ``name``; yield ``(items, finished)`` batches.

    Args:
        work: called once in the thread with a ``should_stop() -> bool`` callback; it returns an
            iterable whose items are handed over in order (e.g. the engine's event stream, or a
            one-item list holding a decoded clip).
        name: the thread's name (``app.runs.worker.WORKER_PREFIX`` + the run's name).
        interval_s: minimum seconds between non-empty batches (items are collected meanwhile).

    Yields:
        ``(items, finished)``: the items produced since the last batch (possibly none: a heartbeat
        at least every :data:`HEARTBEAT_S`), and True on the last batch, after the work returned.

    Raises:
        BaseException: whatever ``work`` raised, re-raised here in the consumer's thread (after
            the thread ended).
    """
    q: queue.Queue = queue.Queue()
    done, stop = object(), threading.Event()

    def run() -> None:
        try:
            for item in work(stop.is_set):
                q.put(item)
        except BaseException as e:  # handed to the consumer
            q.put(e)
        finally:
            q.put(done)

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    pending: list[Any] = []
    last, finished = time.perf_counter(), False
    try:
        while not finished:
            for it in _drain(q, interval_s):
                if isinstance(it, BaseException):
                    raise it
                if it is done:
                    finished = True
                else:
                    pending.append(it)
            now = time.perf_counter()
            if finished or (pending and now - last >= interval_s) or now - last >= HEARTBEAT_S:
                batch, pending, last = pending, [], now
                yield batch, finished
    finally:
        if not finished:
            stop.set()  # closed (Stop, a closed page) or an error: end the work too
        join(thread)


def _drain(q: queue.Queue, timeout: float) -> list[Any]:
    """Block up to ``timeout`` for one item, then take everything queued."""
    try:
        items = [q.get(timeout=max(timeout, 0.01))]
    except queue.Empty:
        return []
    while True:
        try:
            items.append(q.get_nowait())
        except queue.Empty:
            return items


def join(thread: threading.Thread, warn_every_s: float = 30.0) -> None:
    """Wait for a work thread to end (the engine polls its stop flag between frames, prefill layers
    and steps; one slow layer or step can still take a while on a large model)."""
    while True:
        thread.join(warn_every_s)
        if not thread.is_alive():
            return
        log.warning("waiting for thread %s to end (a slow layer or step in progress)", thread.name)
