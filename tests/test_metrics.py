"""Tests for specvlm.metrics (DESIGN 4.12)."""
from __future__ import annotations

import time

import pytest
import torch

from specvlm.metrics import Timer, first_divergence, peak_memory_mb, tau, tokens_per_target_forward


def test_timer_measures_ms():
    with Timer("cpu") as t:
        time.sleep(0.01)
    assert 5.0 <= t.ms < 1000.0
    assert t.seconds == pytest.approx(t.ms / 1000.0)
    with Timer() as t2:
        pass
    assert t2.ms >= 0.0


def test_timer_syncs_on_cuda(monkeypatch):
    calls = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: calls.append(device))
    with Timer("cuda:0"):
        pass
    assert calls == ["cuda:0", "cuda:0"]
    calls.clear()
    with Timer("cpu"):
        pass
    assert calls == []


def test_tau_and_tokens_per_forward():
    assert tau([]) == 0.0
    assert tau([3, 4, 5]) == pytest.approx(4.0)
    assert tau([0, 1]) == pytest.approx(0.5)
    assert tokens_per_target_forward(15, 3) == pytest.approx(5.0)
    assert tokens_per_target_forward(0, 0) == 0.0
    with pytest.raises(ValueError):
        tokens_per_target_forward(-1, 2)


@pytest.mark.parametrize("a,b,expected", [
    ([1, 2, 3], [1, 2, 3], None),
    ([], [], None),
    ([1, 2, 3], [1, 9, 3], 1),
    ([5], [6], 0),
    ([1, 2], [1, 2, 3], 2),
    ([1, 2, 3], [1], 1),
    ([], [4], 0),
])
def test_first_divergence(a, b, expected):
    assert first_divergence(a, b) == expected


def test_peak_memory_cpu():
    mb = peak_memory_mb("cpu")
    assert 1.0 < mb < 1e6
    assert peak_memory_mb() == pytest.approx(mb, rel=0.5)
