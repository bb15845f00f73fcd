"""specvlm.bench.memory: exact CPU peak from the profiler's allocation events, repeatable across runs."""
from __future__ import annotations

import pytest
import torch

from specvlm.bench.memory import MemoryProbe, allocation_peak_mb, rss_mb

MiB = 2**20


def _work(mib: int) -> torch.Tensor:
    a = torch.ones(mib * MiB // 4)       # mib MiB of float32
    b = a * 2                            # another mib MiB alive at the same time: peak 2 x mib
    del a, b
    return torch.ones(mib * MiB // 16)   # mib / 4 MiB kept after the peak


def test_cpu_peak_is_exact_and_repeatable():
    peaks = []
    for _ in range(3):
        with MemoryProbe("cpu") as mem:
            kept = _work(64)
        assert mem.method == "cpu-allocator"
        peaks.append(mem.delta_mb)
        assert mem.peak_mb >= mem.delta_mb
        del kept
    assert peaks[0] == pytest.approx(128.0, abs=0.5)   # 2 x 64 MiB alive at once, nothing else
    assert max(peaks) - min(peaks) < 0.01              # unlike the resident set, the same work reads the same


def test_small_block_and_nothing_allocated():
    with MemoryProbe("cpu") as mem:
        x = torch.zeros(1024)            # 4 KiB
    assert mem.delta_mb == pytest.approx(4096 / MiB, abs=1e-3)
    with MemoryProbe("cpu") as mem:
        pass
    assert mem.delta_mb == 0.0
    del x


def test_falls_back_to_the_resident_set_inside_another_profiler():
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
        with MemoryProbe("cpu", interval_s=0.001) as mem:
            _work(8)
    assert mem.method == "rss-sampled" and mem.peak_mb > 0 and mem.delta_mb >= 0


def test_allocation_peak_without_allocation_events_is_none():
    class Stub:
        profiler = None
    assert allocation_peak_mb(Stub()) is None
    assert rss_mb() > 0   # /proc/self/statm is readable on the Linux machines the tests run on


def test_base_sets_the_stated_peak_on_the_cpu():
    with MemoryProbe("cpu", base_mb=1000.0) as mem:
        _work(4)
    assert mem.peak_mb == pytest.approx(1000.0 + mem.delta_mb) and mem.delta_mb == pytest.approx(8.0, abs=0.5)


def test_a_probe_can_be_reused_after_falling_back():
    probe = MemoryProbe("cpu", interval_s=0.001)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
        with probe:
            _work(8)
    assert probe.method == "rss-sampled"
    with probe:                                         # no other profiler now: exact again, state reset
        _work(16)
    assert probe.method == "cpu-allocator" and probe.delta_mb == pytest.approx(32.0, abs=0.5)


def test_no_profiler_warning_reaches_stderr(capfd):
    old = torch.ones(MiB // 4)                          # allocated before any probe: its free is "unknown"
    with MemoryProbe("cpu") as mem:
        del old
        _work(4)
    err = capfd.readouterr().err
    assert "unknown size" not in err and "profiler_start" not in err and mem.delta_mb > 0


def test_freeing_an_older_block_never_lowers_the_reading():
    with MemoryProbe("cpu"):
        stale = torch.ones(64 * MiB // 4)   # allocated under one probe, freed outside any probe below
    del stale
    for _ in range(3):
        old = torch.ones(64 * MiB // 4)     # allocated outside: may reuse the address torch still remembers
        with MemoryProbe("cpu") as mem:
            del old
            kept = _work(4)
        assert mem.delta_mb == pytest.approx(8.0, abs=0.5)   # 2 x 4 MiB alive at the peak
        del kept


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_a_cuda_device_without_cuda_is_refused():
    with pytest.raises(ValueError, match="CUDA is not available"):
        MemoryProbe("cuda")
    with pytest.raises(ValueError, match="cuda:1"):
        MemoryProbe(torch.device("cuda", 1))
