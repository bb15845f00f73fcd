"""CPU thread policy: quota parsing, the choice logic and the overrides (no timing asserted)."""
from __future__ import annotations

import pytest
import torch

from specvlm import threads
from specvlm.threads import (ThreadChoice, ThreadsError, cgroup_quota, configure, decide, omp_env_defaults,
                             parse_cfs, parse_cpu_max, parse_threads, usable_cpus)


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
    assert n == 1 and why.startswith("no gain")
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
