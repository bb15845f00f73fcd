"""How much a Run's speedup means: repeated, interleaved timing runs and the machine's load.

One short run on a shared CPU says little: a decode of 0.2 s is a handful of steps, and other
processes that keep the cores busy slow the many small ops of a draft step far more than plain
decoding (docs/design.md §7). The worker can repeat the vanilla / speculative pair of runs
(interleaved: vanilla, speculative, vanilla, speculative, ...) and the summary then reports the
median of the per-pair speedups (:func:`specvlm.analysis.metrics.speedup` and
:func:`~specvlm.analysis.metrics.median_speedup`, through the run record's comparison); it also measures how much CPU other processes used while the
runs decoded (``/proc/stat``, through :mod:`specvlm.runtime.cpus`). :func:`speed_note` turns both into
one sentence for the summary when the speedup should not be trusted as it stands.

Source: SpecVLM (arXiv 2508.16201) Sec. 4.12 (speedup = vanilla decode time / method decode time
on the same input); docs/design.md §7 (shared CPUs).
"""
from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from typing import Any

from specvlm.runtime.cpus import cpu_sample, foreign_cores

MIN_DECODE_S = 0.5
"""A decode shorter than this (seconds, either run) is too short for its speedup to mean much."""
BUSY_CORES = 0.5
"""Other processes' CPU use (cores, averaged over the runs) from which the machine counts as busy."""
SUGGESTED_REPEATS = 5
"""Runs the page offers to repeat when a speedup is noisy (the median of this many pairs)."""
MAX_REPEATS = 9
"""Most interleaved pairs of runs one request may ask for."""


@dataclasses.dataclass(frozen=True)
class PairTiming:
    """One more interleaved pair of runs, timed only (their text is the first pair's, greedy).

    Attributes:
        index: 2 for the second pair, ... (the first pair is the streamed one).
        total: pairs asked for.
        speedup: the pair's decode speedup (:func:`specvlm.analysis.run.run_speedup`; None when a run
            decoded nothing).
    """

    index: int
    total: int
    speedup: float | None


@dataclasses.dataclass(frozen=True)
class MachineLoad:
    """Other processes' CPU use while the runs decoded: cores (None when unknown or on a GPU)."""

    other_cores: float | None


def speed_note(decode_s: Sequence[float], other_cores: float | None, pairs: int) -> str:
    """One sentence on why a speedup should not be trusted as it stands ("" when nothing says so).

    Args:
        decode_s: decode seconds of the runs of the first pair (vanilla, speculative).
        other_cores: other processes' CPU use during the runs (cores), or None.
        pairs: interleaved pairs the speedup is the median of (1 = a single pair).
    """
    reasons = []
    short = min(decode_s) if decode_s else 0.0
    longer = ""
    if short < MIN_DECODE_S:
        longer = ", or ask for more new tokens with Fixed length on for a longer decode"
        reasons.append(f"a decode took only {short:.2f} s (a handful of steps, so timer and scheduling noise "
                       "weigh heavily)")
    if other_cores is not None and other_cores >= BUSY_CORES:
        reasons.append(f"other processes kept {other_cores:.1f} CPU cores busy while it ran")
    if not reasons:
        return ""
    if pairs > 1:
        return f"Timing caveat: {'; '.join(reasons)}. The speedup is the median of {pairs} interleaved pairs of runs."
    return (f"Timing caveat: {'; '.join(reasons)}, so this single run's speedup may be far off. Repeat the "
            f"measurement (the median of {SUGGESTED_REPEATS} interleaved runs){longer}.")


class LoadMeter:
    """Measures other processes' CPU use on this process's CPUs between :meth:`start` and :meth:`stop`
    (``specvlm.runtime.cpus.cpu_sample``); every method is a no-op where ``/proc/stat`` is unreadable."""

    def __init__(self) -> None:
        self._first: Any = None

    @staticmethod
    def _sample() -> Any:
        cpus = set(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
        return cpu_sample(cpus)

    def start(self) -> None:
        """Take the first sample."""
        self._first = self._sample()

    def stop(self) -> MachineLoad:
        """Other processes' average CPU use (cores) since :meth:`start`."""
        last = self._sample()
        if self._first is None or last is None:
            return MachineLoad(None)
        return MachineLoad(round(foreign_cores(self._first, last), 2))
