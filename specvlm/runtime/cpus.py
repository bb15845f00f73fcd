"""The CPUs this process may use and how busy other processes keep them.

Reads the scheduler affinity, the cgroup v1/v2 CPU quota and ``/proc/stat``; no torch. The thread
policy (:mod:`specvlm.runtime.threads`) decides from these.

Source: Linux ``sched_getaffinity(2)``; cgroup v2 ``cpu.max`` and cgroup v1 ``cpu.cfs_quota_us`` /
``cpu.cfs_period_us`` (kernel docs, Documentation/admin-guide/cgroup-v2.rst, scheduler/sched-bwc.rst);
``proc(5)`` for ``/proc/stat``.
"""
from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from pathlib import Path


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


def affinity_set() -> set[int] | None:
    """The CPU numbers in this process's scheduler affinity, or None where affinity is unknown."""
    try:
        return set(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None


def usable_cpus(affinity: int, quota: float | None) -> tuple[int, str]:
    """CPUs to plan for: the affinity count capped by the quota (floored, at least 1).

    Returns:
        (cpus, phrase naming the limit).
    """
    cpus, how = max(1, affinity), f"{affinity} in affinity"
    if quota is not None and math.floor(quota) < cpus:
        cpus, how = max(1, math.floor(quota)), f"cgroup quota {quota:g} CPUs"
    return cpus, how


# --------------------------------------------------------------------------- other processes' load
@dataclass(frozen=True)
class CpuSample:
    """CPU time counters at one moment.

    Attributes:
        wall: ``time.monotonic()`` (s).
        busy: busy time summed over this process's CPUs since boot (s, from ``/proc/stat``).
        own: this process's CPU time, user + system, all threads (s).
    """

    wall: float
    busy: float
    own: float


def parse_proc_stat(text: str, cpus: set[int] | None, hz: float) -> float | None:
    """Busy seconds (all states but idle and iowait) summed over ``cpus`` from ``/proc/stat`` text.

    Args:
        text: the file's contents; cpus: CPU numbers to sum (None: the aggregate ``cpu`` line);
        hz: clock ticks per second (``os.sysconf("SC_CLK_TCK")``).

    Returns:
        Seconds, or None when no listed CPU is found.
    """
    total, found = 0, False
    for line in text.splitlines():
        name, _, rest = line.partition(" ")
        if not name.startswith("cpu"):
            continue
        if (cpus is None and name == "cpu") or (cpus is not None and name[3:].isdigit() and int(name[3:]) in cpus):
            f = [int(x) for x in rest.split()[:8]]
            if len(f) < 5:
                continue
            total += sum(f) - f[3] - f[4]
            found = True
    return total / hz if found else None


def cpu_sample(cpus: set[int] | None) -> CpuSample | None:
    """Counters now (None where ``/proc/stat`` cannot be read, e.g. not Linux)."""
    try:
        text = Path("/proc/stat").read_text()
        hz = float(os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, AttributeError):
        return None
    busy = parse_proc_stat(text, cpus, hz)
    if busy is None:
        return None
    t = os.times()
    return CpuSample(time.monotonic(), busy, t.user + t.system)


def foreign_cores(a: CpuSample, b: CpuSample) -> float:
    """Cores other processes kept busy between samples ``a`` and ``b`` (>= 0)."""
    wall = b.wall - a.wall
    if wall <= 0:
        return 0.0
    return max(0.0, ((b.busy - a.busy) - (b.own - a.own)) / wall)
