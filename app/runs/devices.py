"""The app's devices: one model pair per device, one Run at a time on each.

A Run takes a free device from the :class:`DevicePool` before it loads or decodes, and gives it
back when it ends (done, stopped or failed). With N devices the page serves N Runs at once
(Gradio's ``concurrency_limit`` on the GPU events is N); the rest wait in the pool, and each
waiting Run is told how many Runs are ahead of it.

Source: Gradio's queuing guide (``concurrency_id`` / ``concurrency_limit``: one worker per device).
"""
from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Generator
from typing import Any, Sequence

log = logging.getLogger(__name__)


class DeviceError(ValueError):
    """A ``--devices`` list that names no device, repeats a GPU, or a GPU that is not there."""


@dataclasses.dataclass(frozen=True)
class Slot:
    """One place a Run can decode: a device and the index of its pair in the backend's cache.

    Attributes:
        index: 0..N-1 (two slots may share a device, e.g. two CPU pairs).
        device: ``cuda:i``, ``cpu``, or None (the engine picks: CUDA when available).
    """

    index: int
    device: str | None


class DevicePool:
    """Free devices, handed out first come, first served.

    Args:
        devices: one entry per pair (None: the engine's default device); at least one.

    Raises:
        DeviceError: an empty list.
    """

    def __init__(self, devices: Sequence[str | None]):
        if not devices:
            raise DeviceError("no device to run on: give --devices, e.g. cuda:0,cuda:1 or cpu.")
        names = list(devices)
        self.slots = tuple(Slot(i, d) for i, d in enumerate(names))
        self._labels = {}
        for s in self.slots:
            base = s.device or "the default device"
            self._labels[s.index] = f"{base} #{names[:s.index + 1].count(s.device)}" if names.count(s.device) > 1 \
                else base
        self._free = list(self.slots)
        self._cond = threading.Condition()
        self._queue: list[object] = []   # tickets of waiting Runs, oldest first

    def __len__(self) -> int:
        return len(self.slots)

    def label(self, slot: Slot) -> str:
        """The slot's name on the page (``cuda:1``; ``cpu #2`` when slots share a device)."""
        return self._labels[slot.index]

    @property
    def waiting(self) -> int:
        """Runs waiting for a device now."""
        with self._cond:
            return len(self._queue)

    @property
    def free(self) -> int:
        """Devices free now."""
        with self._cond:
            return len(self._free)

    def join(self) -> object:
        """Queue a Run for a device; returns its ticket (:meth:`take` with it, :meth:`leave` at the end)."""
        ticket = object()
        with self._cond:
            self._queue.append(ticket)
        return ticket

    def ahead(self, ticket: object) -> int:
        """Runs queued before ``ticket`` (0: it gets the next free device)."""
        with self._cond:
            return self._queue.index(ticket)

    def take(self, ticket: object, timeout_s: float = 0.2) -> Slot | None:
        """The next free device for ``ticket`` once it is first in line; None after ``timeout_s``
        (ask again, or :meth:`leave` when the Run was stopped)."""
        with self._cond:
            if not (self._free and self._queue[0] is ticket):
                self._cond.wait(timeout_s)
            if self._free and self._queue[0] is ticket:
                self._queue.pop(0)
                self._cond.notify_all()
                return self._free.pop(0)
            return None

    def leave(self, ticket: object) -> None:
        """Drop ``ticket`` from the line (no-op once it took a device)."""
        with self._cond:
            if ticket in self._queue:
                self._queue.remove(ticket)
                self._cond.notify_all()

    def give(self, slot: Slot) -> None:
        """Return a device taken with :meth:`take` (exactly once per take)."""
        with self._cond:
            if slot in self._free:
                raise RuntimeError(f"{slot} was given back twice")
            self._free.append(slot)
            self._free.sort(key=lambda s: s.index)
            self._cond.notify_all()


def wait_in_line(pool: DevicePool, stopped: Callable[[], bool]) -> Generator[dict[str, str], None, Slot | None]:
    """Wait in line for a free device, yielding a status update whenever the number of Runs ahead changes.

    Args:
        pool: the devices.
        stopped: polled while waiting; True leaves the line.

    Yields:
        ``{"status": "Waiting for a free device: ..."}`` (nothing when a device is free at once).

    Returns:
        The slot (give it back with :meth:`DevicePool.give`), or None when stopped first.
    """
    ticket = pool.join()
    shown = None
    try:   # the first look does not wait, so a Run that must wait says so at once
        while (slot := pool.take(ticket, timeout_s=0.0 if shown is None else 0.2)) is None:
            if stopped():
                return None
            ahead = pool.ahead(ticket)
            if ahead != shown:
                shown = ahead
                yield {"status": f"Waiting for a free device: all {len(pool)} are running; {ahead} Run"
                                 f"{'s' if ahead != 1 else ''} ahead of this one."}
        return slot
    finally:   # also when the Run's generator is closed (page closed, Stop cancelled the event)
        pool.leave(ticket)


def parse_devices(text: str, cuda_count: int) -> list[str]:
    """``"cuda:0,cuda:1"`` -> the device list; ``cpu`` may repeat (one pair per entry).

    Args:
        text: comma list of ``cpu``, ``cuda`` or ``cuda:i``.
        cuda_count: visible CUDA devices.

    Raises:
        DeviceError: an empty list, an unknown name, a GPU that is not visible, or a GPU named twice.
    """
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        raise DeviceError(f"--devices {text!r} names no device: give e.g. cuda:0,cuda:1 or cpu.")
    out = []
    for t in items:
        name = "cuda:0" if t == "cuda" else t
        if name != "cpu":
            idx = name.split(":", 1)[1] if name.startswith("cuda:") else ""
            if not idx.isdigit():
                raise DeviceError(f"--devices: {t!r} is not a device; use cpu, cuda or cuda:N.")
            if int(idx) >= cuda_count:
                raise DeviceError(f"--devices: {t} is not visible ({cuda_count} CUDA device(s)); "
                                  "check CUDA_VISIBLE_DEVICES or use cpu.")
            if name in out:
                raise DeviceError(f"--devices: {t} is named twice; one pair per GPU.")
        out.append(name)
    return out


def gpus_that_fit(needed_bytes: float | None, gpus: Sequence[Any]) -> list[str]:
    """``cuda:i`` of every GPU with at least ``needed_bytes`` free (all of them when the need is unknown).

    Args:
        needed_bytes: the pair's estimated memory in bytes (:func:`specvlm.models.fit.preset_estimate`), or None.
        gpus: :func:`specvlm.models.fit.detect_gpus` (objects with ``index`` and ``free_bytes``).
    """
    return [f"cuda:{g.index}" for g in gpus if needed_bytes is None or g.free_bytes >= needed_bytes]


def default_devices(preset: Any, gpus: Sequence[Any]) -> list[str | None]:
    """One entry per GPU that holds ``preset``'s pair by itself; ``[None]`` (the engine's default device,
    one pair) with fewer than two GPUs, or when no single GPU holds it (the pair is then spread over all).

    Args:
        preset: a :class:`specvlm.models.presets.Preset` (its target, draft, frames, token budget), or None.
        gpus: :func:`specvlm.models.fit.detect_gpus`.
    """
    from specvlm.models.fit import preset_estimate

    if len(gpus) < 2:
        return [None]
    est = preset_estimate(preset) if preset is not None else None
    fit = gpus_that_fit(est.total if est is not None else None, gpus)
    if not fit:
        log.info("no single GPU holds %s: one pair over all GPUs", getattr(preset, "name", "the preset"))
        return [None]
    return list(fit)
