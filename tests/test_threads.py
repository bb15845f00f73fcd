"""CPU thread policy: quota parsing, the choice logic and the overrides (no timing asserted)."""
from __future__ import annotations

import pytest
import torch

from specvlm.runtime import threads
from specvlm.runtime.cpus import (CpuSample, cgroup_quota, foreign_cores, parse_cfs, parse_cpu_max, parse_proc_stat,
                                 usable_cpus)
from specvlm.runtime.threads import (ThreadChoice, ThreadsError, adapt, configure, decide, omp_env_defaults,
                                    parse_threads)


@pytest.fixture(autouse=True)
def _restore_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_parse_cpu_max():
    assert parse_cpu_max("max 100000\n") is None
    assert parse_cpu_max("150000 100000\n") == 1.5
    assert parse_cpu_max("200000 100000") == 2.0
    assert parse_cpu_max("garbage") is None
    assert parse_cpu_max("") is None


def test_parse_cfs():
    assert parse_cfs("-1\n", "100000\n") is None
    assert parse_cfs("50000", "100000") == 0.5
    assert parse_cfs("x", "100000") is None


def test_cgroup_v2_quota_from_own_group_and_ancestor(tmp_path):
    (tmp_path / "app" / "worker").mkdir(parents=True)
    (tmp_path / "cpu.max").write_text("max 100000\n")
    (tmp_path / "app" / "cpu.max").write_text("300000 100000\n")
    (tmp_path / "app" / "worker" / "cpu.max").write_text("max 100000\n")
    assert cgroup_quota(tmp_path, "0::/app/worker\n") == 3.0


def test_cgroup_v1_quota(tmp_path):
    d = tmp_path / "cpu,cpuacct" / "docker" / "abc"
    d.mkdir(parents=True)
    (d / "cpu.cfs_quota_us").write_text("150000\n")
    (d / "cpu.cfs_period_us").write_text("100000\n")
    text = "4:memory:/docker/abc\n3:cpu,cpuacct:/docker/abc\n0::/\n"
    assert cgroup_quota(tmp_path, text) == 1.5


def test_no_quota_anywhere(tmp_path):
    assert cgroup_quota(tmp_path, "1:cpu:/\n0::/\n") is None


def test_usable_cpus_takes_the_tighter_limit():
    assert usable_cpus(8, None) == (8, "8 in affinity")
    assert usable_cpus(8, 2.5) == (2, "cgroup quota 2.5 CPUs")
    assert usable_cpus(2, 4.0) == (2, "2 in affinity")
    assert usable_cpus(4, 0.5)[0] == 1


def test_parse_threads():
    assert parse_threads(None) is None
    assert parse_threads("auto") is None
    assert parse_threads(" ") is None
    assert parse_threads("3") == 3
    assert parse_threads(2) == 2
    for bad in ("-1", "two", 1.5, True, -3):
        with pytest.raises(ThreadsError, match="positive integer"):
            parse_threads(bad)


def test_decide():
    assert decide(1, None, None) == (1, "one usable CPU")
    n, why = decide(2, 10.0, 6.0)
    assert n == 2 and why.startswith("idle")
    n, why = decide(2, 10.0, 40.0)
    assert n == 1 and why.startswith("contended") and "40.00 ms" in why
    n, why = decide(4, 10.0, 9.5)
    assert n == 4 and why.startswith("free, kept for multi-token verify")
    assert decide(2, None, None) == (2, "not calibrated")


def test_configure_explicit_and_env(monkeypatch):
    monkeypatch.setattr(threads, "calibrate", lambda *a, **k: pytest.fail("no calibration when set"))
    c = configure(1)
    assert (c.threads, c.reason) == (1, "set by --threads") and torch.get_num_threads() == 1
    c = configure(environ={"SPECVLM_THREADS": "2"})
    assert (c.threads, c.reason) == (2, "set by SPECVLM_THREADS") and torch.get_num_threads() == 2
    with pytest.raises(ThreadsError):
        configure(environ={"SPECVLM_THREADS": "lots"})


def test_configure_auto_adapts_to_contention(monkeypatch):
    monkeypatch.setattr(threads, "affinity_cpus", lambda: 4)
    monkeypatch.setattr(threads, "cgroup_quota", lambda: 2.0)
    monkeypatch.setattr(threads, "calibrate", lambda n, **k: (3.0, 12.0))
    c = configure(environ={})
    assert c.threads == 1 and c.usable == 2 and "contended" in c.reason and "cgroup quota 2" in c.reason
    assert torch.get_num_threads() == 1
    assert c.describe().startswith("torch threads 1 of 2 usable CPUs (contended")
    monkeypatch.setattr(threads, "calibrate", lambda n, **k: (3.0, 1.8))
    assert configure(environ={"SPECVLM_THREADS": "auto"}).threads == 2


def test_calibrate_is_bounded_and_restores_threads():
    torch.set_num_threads(1)
    one, many = threads.calibrate(2, rounds=1, budget_s=0.0)
    assert one > 0 and many > 0 and torch.get_num_threads() == 1


def test_omp_env_defaults():
    assert omp_env_defaults({}, torch_loaded=False) == {"GOMP_SPINCOUNT": threads.SPIN_COUNT}
    assert omp_env_defaults({}, torch_loaded=True) == {}
    assert omp_env_defaults({"OMP_WAIT_POLICY": "PASSIVE"}, torch_loaded=False) == {}
    assert omp_env_defaults({"GOMP_SPINCOUNT": "0"}, torch_loaded=False) == {}


def test_choice_is_frozen():
    with pytest.raises(AttributeError):
        ThreadChoice(1, "x").threads = 2


STAT = """cpu  400 0 100 1000 50 0 0 0 0 0
cpu0 100 0 50 500 25 0 0 0 0 0
cpu1 300 0 50 500 25 0 0 0 0 0
intr 12345
"""


def test_parse_proc_stat_sums_busy_ticks_of_the_listed_cpus():
    assert parse_proc_stat(STAT, None, 100.0) == 5.0          # 400 + 100 busy ticks (idle, iowait excluded)
    assert parse_proc_stat(STAT, {1}, 100.0) == 3.5
    assert parse_proc_stat(STAT, {0, 1}, 100.0) == 5.0
    assert parse_proc_stat(STAT, {7}, 100.0) is None
    assert parse_proc_stat("", None, 100.0) is None


def test_foreign_cores_subtracts_this_process():
    a, b = CpuSample(10.0, 100.0, 5.0), CpuSample(12.0, 103.0, 6.0)
    assert foreign_cores(a, b) == pytest.approx(1.0)       # 3 busy CPU s over 2 s, 1 of them ours
    assert foreign_cores(a, CpuSample(12.0, 100.5, 6.0)) == 0.0   # never negative
    assert foreign_cores(a, a) == 0.0


def _policy(monkeypatch, samples):
    """An automatic policy on 2 CPUs whose /proc/stat readings come from ``samples``."""
    feed = iter(samples)
    monkeypatch.setattr(threads, "cpu_sample", lambda cpus: next(feed))
    monkeypatch.setattr(threads, "affinity_cpus", lambda: 2)
    monkeypatch.setattr(threads, "cgroup_quota", lambda: None)
    monkeypatch.setattr(threads, "calibrate", lambda n, **k: (6.0, 4.0))
    return configure(environ={})


def test_adapt_runs_on_one_thread_while_others_keep_the_cpus_busy(monkeypatch):
    s = [CpuSample(0.0, 0.0, 0.0),            # at configure()
         CpuSample(1.0, 1.9, 0.4),            # 1.5 other cores busy: one thread
         CpuSample(2.0, 3.3, 0.8),            # still 1.0: stays at one
         CpuSample(3.0, 3.8, 1.2),            # 0.1: back to the calibrated two
         CpuSample(4.0, 4.5, 1.6)]            # 0.3: between the thresholds, unchanged
    assert _policy(monkeypatch, s).threads == 2 and torch.get_num_threads() == 2
    c = adapt()
    assert c.threads == 1 and torch.get_num_threads() == 1 and "contended now" in c.reason and "1.5" in c.reason
    assert adapt().threads == 1
    c = adapt()
    assert c.threads == 2 and torch.get_num_threads() == 2 and "free again" in c.reason
    assert adapt() is c                                         # settled: the same choice


def test_adapt_measures_a_fresh_window_after_a_pause(monkeypatch):
    slept = []
    monkeypatch.setattr(threads.time, "sleep", slept.append)
    s = [CpuSample(0.0, 0.0, 0.0),
         CpuSample(100.0, 5.0, 1.0),           # 100 s later: too old to judge, measure a fresh window
         CpuSample(100.05, 5.1, 1.0)]          # 2 other cores busy in it
    _policy(monkeypatch, s)
    assert adapt().threads == 1 and slept == [threads.SAMPLE_WINDOW_S]


def test_adapt_is_off_when_the_user_set_the_count_or_a_quota_caps_the_cpus(monkeypatch):
    monkeypatch.setattr(threads, "cpu_sample", lambda cpus: pytest.fail("no /proc/stat reading"))
    configure(2)
    assert adapt() is None and torch.get_num_threads() == 2
    monkeypatch.setattr(threads, "affinity_cpus", lambda: 8)
    monkeypatch.setattr(threads, "cgroup_quota", lambda: 2.0)   # other tenants' load would show in /proc/stat
    monkeypatch.setattr(threads, "calibrate", lambda n, **k: (6.0, 4.0))
    assert configure(environ={}).threads == 2 and adapt() is None


def test_stream_adapts_threads_before_each_request(monkeypatch, pairs):
    import specvlm.engine.stream as dec
    from helpers.media import make_clip
    from specvlm.config import DecodeConfig
    from specvlm.engine.prepare import prepare

    pair = pairs[("qwen", "self")]
    inputs = prepare(pair, make_clip(), "describe this video")
    calls = []
    monkeypatch.setattr(dec, "adapt_threads", lambda: calls.append(1))
    assert list(dec.stream(pair, inputs, DecodeConfig(max_new_tokens=2), should_stop=lambda: True)) == []
    assert calls == [1]
    with pytest.raises(TypeError, match="prepared ModelInputs, got NoneType"):
        next(dec.stream(pair, None))
    assert calls == [1]   # a request refused before it starts does not re-check the machine


def test_reserve_leaves_cpus_to_the_apps_own_threads(monkeypatch):
    monkeypatch.setattr(threads, "affinity_cpus", lambda: 2)
    monkeypatch.setattr(threads, "cgroup_quota", lambda: None)
    monkeypatch.setattr(threads, "calibrate", lambda n, **k: pytest.fail("nothing to calibrate on one thread"))
    c = configure(environ={}, reserve=1)
    assert c.threads == 1 and torch.get_num_threads() == 1 and c.usable == 2
    assert c.describe() == ("torch threads 1 of 2 usable CPUs (1 of 2 CPUs kept for the app's server and page "
                            "updates; 2 in affinity)")
    assert adapt() is None                                         # nothing to adapt between 1 and 1
    assert configure(environ={"SPECVLM_THREADS": "2"}, reserve=1).threads == 2   # an explicit count wins
    seen = []
    monkeypatch.setattr(threads, "affinity_cpus", lambda: 4)
    monkeypatch.setattr(threads, "calibrate", lambda n, **k: seen.append(n) or (6.0, 4.0))
    monkeypatch.setattr(threads, "cpu_sample", lambda cpus: CpuSample(0.0, 0.0, 0.0))
    c = configure(environ={}, reserve=1)
    assert seen == [3] and c.threads == 3 and c.usable == 4 and adapt() is c
