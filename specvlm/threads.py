"""CPU thread policy: how many intra-op threads torch uses, chosen once per process.

``configure()`` picks torch's intra-op threads from the CPUs this process may really use
(its scheduler affinity and the cgroup v1/v2 CPU quota, not ``os.cpu_count()``), then runs a
short calibration: the same draft-like mix of small ops (1-token linears, a short attention)
with N threads and with 1 thread, interleaved. On a machine whose cores are busy with other
processes, N OpenMP threads wait at every barrier for a thread that is not scheduled, and
many small ops run 10-50x slower than on one thread; the calibration sees that and keeps one
thread. ``threads=`` / ``SPECVLM_THREADS`` override the choice.

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
import math
import os
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

log = logging.getLogger(__name__)

ENV_VAR = "SPECVLM_THREADS"
SPIN_COUNT = "10000"
"""``GOMP_SPINCOUNT`` default: a worker spins ~10-30 us before sleeping (libgomp's own default,
300000, burns up to ~1 ms of a core after every parallel op, which other processes on a shared
machine pay for)."""
GAIN_NEEDED = 0.85
"""N threads are kept only when the calibration mix runs in <= this share of its 1-thread time."""
CALIBRATION_BUDGET_S = 0.3
"""Upper bound on the calibration's wall time (seconds)."""


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


# --------------------------------------------------------------------------- CPUs this process may use
def parse_cpu_max(text: str) -> float | None:
    """CPUs allowed by a cgroup v2 ``cpu.max`` line (``"max 100000"`` or ``"150000 100000"``).

    Returns:
        quota / period in CPUs (e.g. 1.5), or None when unlimited or unreadable.
    """
    parts = text.split()
    if len(parts) < 1 or parts[0] == "max":
        return None
    try:
        quota, period = int(parts[0]), int(parts[1]) if len(parts) > 1 else 100000
    except ValueError:
        return None
    return quota / period if quota > 0 and period > 0 else None


def parse_cfs(quota_text: str, period_text: str) -> float | None:
    """CPUs allowed by cgroup v1 ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` (quota -1 = unlimited).

    Returns:
        quota / period in CPUs, or None when unlimited or unreadable.
    """
    try:
        quota, period = int(quota_text.strip()), int(period_text.strip())
    except ValueError:
        return None
    return quota / period if quota > 0 and period > 0 else None


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def cgroup_quota(root: Path = Path("/sys/fs/cgroup"), proc_cgroup: str | None = None) -> float | None:
    """The tightest CPU quota (CPUs) over this process's cgroup and its ancestors, v2 or v1.

    Args:
        root: the cgroup mount point.
        proc_cgroup: the text of ``/proc/self/cgroup`` (read when None).

    Returns:
        CPUs (float) or None when no quota applies or nothing is readable.
    """
    if proc_cgroup is None:
        proc_cgroup = _read(Path("/proc/self/cgroup")) or ""
    found: list[float] = []
    for line in proc_cgroup.splitlines():
        hier, _, rest = line.partition(":")
        ctrls, _, rel = rest.partition(":")
        v2 = hier == "0" and ctrls == ""
        if not v2 and "cpu" not in ctrls.split(","):
            continue
        rel_parts = [p for p in rel.strip().split("/") if p]
        bases = [root] if v2 else [root / "cpu", root / "cpu,cpuacct", root / "cpuacct,cpu"]
        for base in bases:
            for depth in range(len(rel_parts), -1, -1):
                d = base.joinpath(*rel_parts[:depth])
                if v2:
                    q = parse_cpu_max(_read(d / "cpu.max") or "max")
                else:
                    qt, pt = _read(d / "cpu.cfs_quota_us"), _read(d / "cpu.cfs_period_us")
                    q = parse_cfs(qt, pt) if qt and pt else None
                if q is not None:
                    found.append(q)
    return min(found) if found else None


def affinity_cpus() -> int:
    """CPUs in this process's scheduler affinity (``os.cpu_count()`` where affinity is unknown)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def usable_cpus(affinity: int, quota: float | None) -> tuple[int, str]:
    """CPUs to plan for: the affinity count capped by the quota (floored, at least 1).

    Returns:
        (cpus, phrase naming the limit).
    """
    cpus, how = max(1, affinity), f"{affinity} in affinity"
    if quota is not None and math.floor(quota) < cpus:
        cpus, how = max(1, math.floor(quota)), f"cgroup quota {quota:g} CPUs"
    return cpus, how


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
    """Threads from the calibration: ``usable`` when they pay off, else 1.

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
    return 1, f"no gain from threads: {timing}"


# --------------------------------------------------------------------------- calibration
def _op_mix() -> Callable[[], None]:
    """A decode-like op mix (~2-4 ms on 1 thread): eight layers of 1-token linears, an RMS norm and
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


def configure(threads: int | None = None, *, environ: Mapping[str, str] | None = None) -> ThreadChoice:
    """Choose and set torch's intra-op threads for this process (call once at start).

    Args:
        threads: an explicit count (>= 1); None reads ``SPECVLM_THREADS`` (a count, or
            ``auto`` / unset for automatic).
        environ: environment to read (``os.environ`` when None).

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
    else:
        one = many = None
        if usable > 1:
            one, many = calibrate(usable)
        n, why = decide(usable, one, many)
        choice = ThreadChoice(n, f"{why}; {how}" if usable > 1 else f"{why} ({how})", usable, one, many)
    torch.set_num_threads(choice.threads)
    log.info("%s", choice.describe())
    return choice


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
