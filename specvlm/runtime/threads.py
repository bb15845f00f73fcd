"""CPU thread policy: how many intra-op threads torch uses, chosen at start and, when automatic, re-checked per request.

``configure()`` picks torch's intra-op threads from the CPUs this process may really use
(its scheduler affinity and the cgroup v1/v2 CPU quota, not ``os.cpu_count()``), then runs a
short calibration: the same draft-like mix of small ops (1-token linears, a short attention)
with N threads and with 1 thread, interleaved. On a machine whose cores are busy with other
processes, N OpenMP threads wait at every barrier for a thread that is not scheduled, and
many small ops run several times slower than on one thread; the calibration sees that and keeps one
thread. ``threads=`` / ``SPECVLM_THREADS`` override the choice.

A machine that gets busy later is seen at the next request: :func:`adapt` (called by
:func:`specvlm.engine.stream.stream` before every request) reads how much CPU time other processes
took on this process's CPUs since the last request (``/proc/stat`` minus this process's own
time) and runs the request on one thread while they keep at least :data:`CONTENDED_CORES` busy,
returning to the calibrated count once they leave. This holds only when :func:`configure` chose the
count automatically, for more than one thread, and no cgroup quota caps the CPUs (``/proc/stat`` would
count other tenants); otherwise :func:`adapt` does nothing.

OpenMP's wait policy (how long an idle worker spins before it sleeps) is read by the OpenMP
runtime once, when torch's ``libgomp`` is loaded at ``import torch``; torch 2.14 exposes no
runtime setter for it (``torch.set_num_threads`` only changes the team size). So
:func:`omp_env_defaults` bounds the spin (``GOMP_SPINCOUNT``) before torch is imported
(``import specvlm`` calls it), and never overrides a value the user set.

Source: docs/design.md §7 (shared CPUs: OpenMP spin and oversubscription); Linux
``sched_getaffinity(2)``; cgroup v2 ``cpu.max`` and cgroup v1 ``cpu.cfs_quota_us`` /
``cpu.cfs_period_us`` (kernel docs, Documentation/admin-guide/cgroup-v2.rst, scheduler/sched-bwc.rst).
"""
from __future__ import annotations

import logging
import os
import statistics
import sys
import time
from dataclasses import dataclass, replace
from typing import Callable, Mapping

from specvlm.runtime.cpus import affinity_cpus, affinity_set, cgroup_quota, cpu_sample, foreign_cores, usable_cpus

log = logging.getLogger(__name__)

ENV_VAR = "SPECVLM_THREADS"
SPIN_COUNT = "10000"
"""``GOMP_SPINCOUNT`` default: a worker spins briefly before sleeping (libgomp's own default, 300000,
keeps a core busy long after every parallel op, which other processes on a shared machine pay for)."""
GAIN_NEEDED = 0.85
"""The calibration mix on N threads within [this, 1 / this] x its 1-thread time is a tie (a free
machine, N threads kept); slower than that means contended (1 thread)."""
CALIBRATION_BUDGET_S = 0.3
"""Upper bound on the calibration's wall time (seconds)."""
CONTENDED_CORES = 0.5
"""Other processes' CPU use on this process's CPUs (cores, averaged since the last request) from
which a request runs on one thread (:func:`adapt`)."""
RELEASED_CORES = 0.25
"""Other processes' CPU use below which the calibrated thread count comes back."""
SAMPLE_WINDOW_S = 0.05
"""A fresh measuring window (s) when the last sample is older than :data:`STALE_S`."""
STALE_S = 10.0
"""A sample older than this (s) says little about the machine now."""


class ThreadsError(ValueError):
    """A thread count (argument or ``SPECVLM_THREADS``) is not a positive integer."""


@dataclass(frozen=True)
class ThreadChoice:
    """The intra-op thread count chosen for this process and why.

    Attributes:
        threads: torch intra-op threads set (>= 1).
        reason: one short phrase, e.g. ``"contended: 2 threads 4.1 ms vs 1 thread 0.9 ms"``.
        usable: CPUs this process may use (affinity and cgroup quota), >= 1.
        one_ms: calibration mix on 1 thread (ms, median), or None when not measured.
        many_ms: calibration mix on ``usable`` threads (ms, median), or None when not measured.
    """

    threads: int
    reason: str
    usable: int = 1
    one_ms: float | None = None
    many_ms: float | None = None

    def describe(self) -> str:
        """One line for a ``Machine:`` line or the app's status, e.g. ``torch threads 1 of 2 usable CPUs (...)``."""
        return f"torch threads {self.threads} of {self.usable} usable CPU{'s' if self.usable != 1 else ''} ({self.reason})"


# --------------------------------------------------------------------------- choice
def parse_threads(value: int | str | None) -> int | None:
    """A requested thread count: an int >= 1, or None for automatic (None, ``""``, ``"auto"``).

    Raises:
        ThreadsError: anything else.
    """
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "auto", "0")):
        return None
    try:
        n = int(value)
    except (TypeError, ValueError):
        n = 0
    if isinstance(value, bool) or n < 1 or (isinstance(value, float) and value != n):
        raise ThreadsError(f"threads={value!r} is not valid: use a positive integer or 'auto' "
                           f"(argument --threads or {ENV_VAR}).")
    return n


def decide(usable: int, one_ms: float | None, many_ms: float | None) -> tuple[int, str]:
    """Threads from the calibration: ``usable`` unless the machine is contended, else 1.

    A tie on the decode-like mix still keeps ``usable`` threads: a speculative verify forward runs
    several tokens, and its matmuls gain from them while a 1-token decode step does not (docs/benchmark.md).
    Only a clearly slower mix (other processes holding the cores) means 1.

    Args:
        usable: CPUs this process may use (>= 1).
        one_ms / many_ms: median calibration mix on 1 / ``usable`` threads (ms), or None.

    Returns:
        (threads, reason).
    """
    if usable <= 1:
        return 1, "one usable CPU"
    if one_ms is None or many_ms is None:
        return usable, "not calibrated"
    timing = f"{usable} threads {many_ms:.2f} ms vs 1 thread {one_ms:.2f} ms on a decode-like op mix"
    if many_ms <= GAIN_NEEDED * one_ms:
        return usable, f"idle: {timing}"
    if many_ms > one_ms / GAIN_NEEDED:
        return 1, f"contended: {timing}"
    return usable, f"free, kept for multi-token verify forwards: {timing}"


# --------------------------------------------------------------------------- calibration
def _op_mix() -> Callable[[], None]:
    """A decode-like op mix (a few ms on 1 thread): eight layers of 1-token linears, an RMS norm and
    a short grouped attention (each attention is one OpenMP parallel region, where a descheduled
    worker stalls the whole team), then two grouped attentions over 16k cached keys (the part
    that runs faster on several threads when the cores are free)."""
    import torch
    import torch.nn.functional as F

    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, 256, generator=g)
    w1, w2 = torch.randn(704, 256, generator=g), torch.randn(256, 704, generator=g)
    q = torch.randn(1, 2, 2, 64, generator=g)
    ks, vs = torch.randn(1, 2, 128, 64, generator=g), torch.randn(1, 2, 128, 64, generator=g)
    kl, vl = torch.randn(1, 2, 16384, 64, generator=g), torch.randn(1, 2, 16384, 64, generator=g)

    def mix() -> None:
        h = x
        for _ in range(8):
            h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
            F.scaled_dot_product_attention(q, ks, vs)
            h = F.linear(F.silu(F.linear(h, w1)), w2)
        F.scaled_dot_product_attention(q, kl, vl)
        F.scaled_dot_product_attention(q, kl, vl)

    return mix


def calibrate(threads: int, rounds: int = 5, budget_s: float = CALIBRATION_BUDGET_S) -> tuple[float, float]:
    """Median ms of the op mix on 1 thread and on ``threads`` threads, interleaved round by round.

    Stops early when ``budget_s`` is spent (at least one round each). Leaves torch's thread
    count as it found it.

    Returns:
        (one_ms, many_ms).
    """
    import torch

    before = torch.get_num_threads()
    mix, one, many = _op_mix(), [], []
    start = time.perf_counter()
    try:
        with torch.inference_mode():
            for r in range(rounds + 1):
                for n, sink in ((1, one), (threads, many)):
                    torch.set_num_threads(n)
                    t = time.perf_counter()
                    mix()
                    if r:  # round 0 warms both settings up
                        sink.append((time.perf_counter() - t) * 1e3)
                if r and time.perf_counter() - start > budget_s:
                    break
    finally:
        torch.set_num_threads(before)
    return statistics.median(one), statistics.median(many)


def configure(threads: int | None = None, *, environ: Mapping[str, str] | None = None,
              reserve: int = 0, share: int = 1) -> ThreadChoice:
    """Choose and set torch's intra-op threads for this process (call once at start).

    Args:
        threads: an explicit count (>= 1); None reads ``SPECVLM_THREADS`` (a count, or
            ``auto`` / unset for automatic).
        environ: environment to read (``os.environ`` when None).
        reserve: CPUs the automatic choice leaves to the process's other threads (the app's web
            server and page updates run beside the decode: on 2 CPUs, 2 intra-op threads next to
            them stall at every OpenMP barrier, as with another process; docs/benchmark.md). Never
            below one thread.
        share: processes started together on this machine that split its CPUs (the ranks of a
            ``torchrun`` job on this node): the automatic choice takes usable CPUs // ``share``
            threads without calibration, and the per-request policy stays off (the other ranks are
            expected load, not contention to avoid).

    Returns:
        :class:`ThreadChoice` (also logged at INFO).

    Raises:
        ThreadsError: ``threads`` or ``SPECVLM_THREADS`` is not a positive integer or ``auto``.
    """
    import torch

    env = os.environ if environ is None else environ
    affinity, quota = affinity_cpus(), cgroup_quota()
    usable, how = usable_cpus(affinity, quota)
    requested = parse_threads(threads) if threads is not None else parse_threads(env.get(ENV_VAR))
    if requested is not None:
        source = "--threads" if threads is not None else ENV_VAR
        choice = ThreadChoice(requested, f"set by {source}", usable)
    elif share > 1:
        n = max(1, usable // share - max(0, int(reserve)))
        choice = ThreadChoice(n, f"{usable} usable CPUs shared by {share} ranks on this machine; {how}", usable)
    else:
        top = max(1, usable - max(0, int(reserve)))   # the most threads the automatic choice may use
        one = many = None
        if top > 1:
            one, many = calibrate(top)
            n, why = decide(top, one, many)
        elif usable > 1:
            n, why = 1, f"{usable - 1} of {usable} CPUs kept for the app's server and page updates"
        else:
            n, why = decide(1, None, None)
        choice = ThreadChoice(n, f"{why}; {how}" if usable > 1 else f"{why} ({how})", usable, one, many)
        reserve = usable - top
    torch.set_num_threads(choice.threads)
    log.info("%s", choice.describe())
    global _POLICY
    _POLICY = None
    if requested is None and share <= 1 and usable - reserve > 1 and (quota is None or quota >= affinity):
        _POLICY = _Adaptive(choice, usable - reserve, affinity_set())
    return choice


# --------------------------------------------------------------------------- per request
class _Adaptive:
    """The automatic policy's state between requests (one per process, set by :func:`configure`)."""

    def __init__(self, choice: ThreadChoice, idle_threads: int, cpus: set[int] | None):
        self.choice, self.idle_threads, self.cpus = choice, idle_threads, cpus
        self.last = cpu_sample(cpus)

    def step(self, sample_window_s: float = SAMPLE_WINDOW_S) -> ThreadChoice:
        now = cpu_sample(self.cpus)
        if now is None:
            return self.choice
        if self.last is None or now.wall - self.last.wall > STALE_S:
            time.sleep(sample_window_s)
            self.last, now = now, cpu_sample(self.cpus) or now
        other = foreign_cores(self.last, now)
        self.last = now
        n = self.choice.threads
        if other >= CONTENDED_CORES and n > 1:
            n, why = 1, f"contended now: other processes kept {other:.1f} of these CPUs busy"
        elif other < RELEASED_CORES and n != self.idle_threads:
            n, why = self.idle_threads, f"free again: other processes kept {other:.1f} CPUs busy"
        else:
            return self.choice
        import torch

        torch.set_num_threads(n)
        self.choice = replace(self.choice, threads=n, reason=why)
        log.info("%s", self.choice.describe())
        return self.choice


_POLICY: _Adaptive | None = None


def adapt() -> ThreadChoice | None:
    """Re-check the machine before a request and set torch's threads for it (automatic policy only).

    A no-op (returns None) unless :func:`configure` chose the count automatically for several
    usable CPUs that the cgroup quota does not cap (on a quota-capped container ``/proc/stat``
    also counts other tenants). Costs one ``/proc/stat`` read, plus a :data:`SAMPLE_WINDOW_S`
    wait when the last request is more than :data:`STALE_S` ago.

    Returns:
        The :class:`ThreadChoice` in effect now (its reason says why it changed), or None.
    """
    return None if _POLICY is None else _POLICY.step()


def omp_env_defaults(environ: Mapping[str, str] | None = None, torch_loaded: bool | None = None) -> dict[str, str]:
    """OpenMP settings to put in the environment before torch (and its OpenMP runtime) loads.

    Bounds the spin of idle OpenMP workers (``GOMP_SPINCOUNT``) unless the user set
    ``GOMP_SPINCOUNT`` or ``OMP_WAIT_POLICY``; nothing once torch is imported (the runtime
    has read its settings by then).

    Args:
        environ: environment to inspect (``os.environ`` when None).
        torch_loaded: whether torch is imported (checked in ``sys.modules`` when None).

    Returns:
        {name: value} to set (possibly empty); the caller sets them.
    """
    env = os.environ if environ is None else environ
    loaded = ("torch" in sys.modules) if torch_loaded is None else torch_loaded
    if loaded or "GOMP_SPINCOUNT" in env or "OMP_WAIT_POLICY" in env:
        return {}
    return {"GOMP_SPINCOUNT": SPIN_COUNT}
