"""Background load: busy worker processes that compete for the CPUs while the benchmark is timed.

``python -m specvlm bench --background-load N`` measures how the methods behave on a machine
that other work keeps busy (a shared CPU Space, a laptop running other programs) instead of
suffering it by chance. Each worker is a separate Python process spinning a pure-Python loop
(no torch, no numpy: it competes for cores, not for memory bandwidth). Workers are bounded
three ways: :class:`BackgroundLoad` stops them when its block ends (normally, on an error or on
Ctrl-C; they run in their own session, so a terminal's Ctrl-C reaches only the benchmark), each
one exits by itself after ``max_s`` seconds, and each one exits within a fraction of a second
once the benchmark process is gone.
"""
from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

LOAD_KIND = "pure-Python spin"
"""What each worker runs (said in the report's ``Machine:`` line)."""

DEFAULT_MAX_S = 6 * 3600.0
"""A worker's own time limit in s: the longest benchmark (a 16k sweep on a slow CPU) fits in it."""

_SPIN = (
    "import os, time\n"
    "parent, end = int({parent}), time.monotonic() + float({max_s})\n"
    "while time.monotonic() < end and os.getppid() == parent:\n"
    "    for _ in range(20000):\n"
    "        pass\n"
)


@dataclass(frozen=True)
class LoadSummary:
    """What a finished :class:`BackgroundLoad` did.

    Attributes:
        workers: N, worker processes started.
        kind: what each worker ran (:data:`LOAD_KIND`).
        wall_s: seconds from start to stop.
        cpu_s: CPU seconds (user + system) the workers used, from their exit accounting; about
            ``workers * wall_s`` when each had a core to itself.
        pids: the workers' process ids (all ended and reaped when the summary exists).
    """

    workers: int
    kind: str
    wall_s: float
    cpu_s: float
    pids: tuple[int, ...]

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready dict (the report's ``meta.background_load``)."""
        return {"workers": self.workers, "kind": self.kind, "wall_s": round(self.wall_s, 3),
                "cpu_s": round(self.cpu_s, 3), "pids": list(self.pids)}


class BackgroundLoad:
    """Context manager that runs ``workers`` busy processes for the duration of its block.

    Args:
        workers: N >= 0 (0: nothing is started; :attr:`summary` stays None).
        max_s: each worker's own time limit in s (> 0), in case the block never ends.

    Attributes:
        pids: process ids of the running workers (empty before the block and after it).
        summary: a :class:`LoadSummary` once the block has ended (None for 0 workers).

    Raises:
        ValueError: ``workers`` < 0 or ``max_s`` <= 0.
        OSError: a worker process could not be started (the ones already started are stopped).
    """

    def __init__(self, workers: int, max_s: float = DEFAULT_MAX_S):
        if workers < 0 or not max_s > 0:
            raise ValueError(f"background_load={workers}, max_s={max_s}: give >= 0 workers and a time limit > 0 s.")
        self.workers, self.max_s = int(workers), float(max_s)
        self.pids: tuple[int, ...] = ()
        self.summary: LoadSummary | None = None
        self._procs: list[subprocess.Popen] = []
        self._t0 = 0.0

    def __enter__(self) -> "BackgroundLoad":
        self._t0 = time.perf_counter()
        code = _SPIN.format(parent=os.getpid(), max_s=self.max_s)
        try:
            for _ in range(self.workers):
                self._procs.append(subprocess.Popen(
                    [sys.executable, "-S", "-c", code], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL, start_new_session=True, close_fds=True))
        except BaseException:
            self._stop()
            raise
        self.pids = tuple(p.pid for p in self._procs)
        if self.workers:
            log.info("background load: %d worker processes (%s), pids %s", self.workers, LOAD_KIND, self.pids)
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop()

    def alive(self) -> int:
        """Workers still running now (asked without reaping them, so their CPU time stays countable)."""
        flags = os.WEXITED | os.WNOHANG | os.WNOWAIT
        return sum(os.waitid(os.P_PID, p.pid, flags) is None for p in self._procs)

    def _stop(self) -> None:
        """Terminate, then kill what is left after 2 s, and reap every worker (idempotent)."""
        if not self._procs:
            return
        procs, self._procs = self._procs, []
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        cpu = 0.0
        for p in procs:
            cpu += _reap(p)
        self.summary = LoadSummary(self.workers, LOAD_KIND, time.perf_counter() - self._t0, cpu,
                                   tuple(p.pid for p in procs))
        self.pids = ()
        log.info("background load stopped: %.1f CPU s over %.1f s", self.summary.cpu_s, self.summary.wall_s)


def _reap(proc: subprocess.Popen, grace_s: float = 2.0) -> float:
    """Wait for ``proc`` (SIGKILL after ``grace_s``), reap it, and return its CPU seconds (user + system)."""
    deadline = time.monotonic() + grace_s
    while True:
        try:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        except ChildProcessError:  # already reaped (e.g. by Popen.poll): no accounting left
            return 0.0
        if pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            return usage.ru_utime + usage.ru_stime
        if time.monotonic() > deadline:
            proc.kill()
            deadline = float("inf")
        time.sleep(0.01)

