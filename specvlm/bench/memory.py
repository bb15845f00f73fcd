"""Peak memory of a block of work, in MiB, on CUDA and on the CPU.

On CUDA the caching allocator keeps exact counters (``torch.cuda.max_memory_allocated``).
On the CPU there is no such counter, and the resident set size is a poor stand-in: glibc keeps
freed blocks resident, so the same run reads tens to a hundred MiB apart depending on what ran
before (docs/benchmark.md). :class:`MemoryProbe` therefore reads the CPU
peak from the torch profiler's allocation events (``profile_memory=True``): every event carries
the CPU allocator's running total of bytes held, so the peak of tensor memory over the block is
exact and repeatable. The profiler slows the block
down, so the benchmark measures memory in an untimed round (:mod:`specvlm.bench.protocol`).

Source: torch.cuda memory statistics (``max_memory_allocated``); torch.profiler (``profile_memory``, allocation events).
"""
from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
from typing import Iterator

import torch

from specvlm.analysis.metrics import peak_memory_mb

log = logging.getLogger(__name__)


def rss_mb() -> float | None:
    """Resident set size of this process in MiB (``/proc/self/statm``), or None where unreadable."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        return None


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """Silence file descriptor 2 (the profiler's C++ backend prints start/stop lines there)."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no real fd 2 (embedded interpreters): nothing to silence
        yield
        return
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def allocation_peak_mb(prof: torch.profiler.profile) -> float | None:
    """Peak of CPU tensor memory held during a profiled block, above its start, in MiB.

    Replays the block's allocation events in time order with a running total of the blocks
    allocated inside the block: frees of blocks allocated before it are ignored (the allocator's own
    running total cannot be trusted for them: torch keeps stale sizes for blocks freed while not
    profiling), so the figure is an upper bound, never low.

    Args:
        prof: a stopped ``torch.profiler.profile(profile_memory=True)``.

    Returns:
        max running total (MiB); 0.0 when nothing was allocated; None when the profiler's results do
        not expose allocation events (another torch version).
    """
    try:
        from torch._C._profiler import _EventType

        stack = list(prof.profiler.kineto_results.experimental_event_tree())
    except (AttributeError, ImportError, RuntimeError):
        return None
    events = []
    while stack:
        ev = stack.pop()
        stack.extend(ev.children)
        if ev.tag == _EventType.Allocation and ev.extra_fields.device.type == "cpu":
            events.append((ev.start_time_ns, int(ev.extra_fields.alloc_size), int(ev.extra_fields.ptr)))
    live: dict[int, int] = {}
    total = peak = 0
    for _, size, ptr in sorted(events, key=lambda e: e[0]):
        if size > 0:
            live[ptr] = size
            total += size
            peak = max(peak, total)
        elif ptr in live:
            total -= live.pop(ptr)
    return peak / 2**20


class MemoryProbe:
    """Peak memory over a ``with`` block, in MiB.

    * CUDA: ``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats``; ``delta_mb``
      subtracts ``memory_allocated`` at the start.
    * CPU: ``delta_mb`` is the peak of tensor memory the block held above its start, from the
      torch profiler's allocation events (:func:`allocation_peak_mb`: exact, repeatable; slows
      the block, so do not time it); ``peak_mb`` = ``base_mb`` (default: the resident set at the
      start) + ``delta_mb``. Pass one ``base_mb`` to probes that should compare (the resident set
      itself drifts up as glibc keeps freed blocks).
      Where the profiler cannot run (one is already active), the resident set is sampled every
      ``interval_s`` by a thread instead (noisy: freed blocks stay resident) and ``method`` says so.

    Limits of the CPU allocator reading: freeing a block allocated before the probe started is not
    counted, so work that frees such a block and allocates a new one reads high (an upper bound,
    never low); allocations of other Python threads are not seen; a profiler started inside the block cancels the probe's trace.
    Use one probe at a time, on the thread doing the work (the benchmark does).

    Raises:
        ValueError: ``device`` is a CUDA device and CUDA is not available (the probe would
            otherwise read the CPU and label it as the GPU).

    Attributes:
        peak_mb: peak during the block (MiB); on a CPU only ``delta_mb`` is exact.
        delta_mb: peak minus the value at the start of the block (MiB).
        method: ``cuda-allocator``, ``cpu-allocator``, ``rss-sampled`` or ``rss-endpoints`` (the
            profiler gave no allocation events: only the start and end were read).
    """

    _primed = False

    def __init__(self, device: torch.device | str | None, interval_s: float = 0.01, base_mb: float | None = None):
        self.base_mb = base_mb
        self.device = torch.device(device) if device is not None else torch.device("cpu")
        if self.device.type == "cuda" and not torch.cuda.is_available():
            raise ValueError(f"MemoryProbe: device {self.device} was asked for but CUDA is not available "
                             "here; pass 'cpu' (or the device the model actually runs on)")
        self.cuda = self.device.type == "cuda"
        self.interval_s = interval_s
        self.peak_mb = self.delta_mb = 0.0
        self.method = "cuda-allocator" if self.cuda else "cpu-allocator"
        self._start = 0.0
        self._prof: torch.profiler.profile | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _sample(self) -> None:
        while not self._stop.wait(self.interval_s):
            v = rss_mb()
            if v is not None:
                self.peak_mb = max(self.peak_mb, v)

    @staticmethod
    def _prime() -> None:
        """Spend torch's one-time "Memory block of unknown size was allocated before the profiling
        started" warning (printed when such a block is freed under the profiler) while stderr is quiet."""
        if MemoryProbe._primed:
            return
        old = torch.empty(1024)
        prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True)
        with _quiet_stderr():
            prof.start()
            del old
            prof.stop()
        MemoryProbe._primed = True

    def __enter__(self) -> "MemoryProbe":
        self.peak_mb = self.delta_mb = 0.0
        self.method = "cuda-allocator" if self.cuda else "cpu-allocator"
        self._stop = threading.Event()
        self._thread = None
        if self.cuda:
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self._start = torch.cuda.memory_allocated(self.device) / 2**20
            return self
        self._start = rss_mb() or peak_memory_mb(None)
        self.peak_mb = self._start
        why = "another profiler is active" if torch.autograd.profiler._is_profiler_enabled else None
        if why is None:
            try:
                self._prime()
            except RuntimeError as exc:
                why = str(exc)
        if why is None:
            prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True)
            try:
                with _quiet_stderr():
                    prof.start()
                self._prof = prof
            except RuntimeError as exc:
                why = str(exc)
        if why is not None:
            log.warning("memory probe: the torch profiler cannot run here (%s); sampling the resident set", why)
            self.method = "rss-sampled"
            self._thread = threading.Thread(target=self._sample, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.device)
            self.peak_mb = peak_memory_mb(self.device)
            self.delta_mb = max(0.0, self.peak_mb - self._start)
            return
        if self._prof is not None:
            with _quiet_stderr():
                self._prof.stop()
            delta = allocation_peak_mb(self._prof)
            self._prof = None
            if delta is not None:
                self.delta_mb = delta
                self.peak_mb = (self.base_mb if self.base_mb is not None else self._start) + delta
                return
            self.method = "rss-endpoints"   # no allocation events: only the start and end can be read
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        end = rss_mb()
        self.peak_mb = max(self.peak_mb, end if end is not None else peak_memory_mb(None))
        self.delta_mb = max(0.0, self.peak_mb - self._start)
