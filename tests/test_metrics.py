"""Tests for specvlm.analysis.metrics (docs/design.md §4.12)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from specvlm.analysis.metrics import (Divergence, Timer, compare_outputs, first_divergence, logit_margin,
                                      near_tie_threshold, peak_memory_mb, tau, tokens_per_target_forward)
from specvlm.engine import measures


def test_timer_measures_ms(monkeypatch):
    clock = iter([10.0, 10.25, 20.0, 20.0])
    monkeypatch.setattr(measures, "time", SimpleNamespace(perf_counter=lambda: next(clock)))
    with Timer("cpu") as t:
        assert t.ms == 0.0                      # until the block exits
    assert t.ms == pytest.approx(250.0) and t.seconds == pytest.approx(0.25)
    with Timer() as t2:
        pass
    assert t2.ms == 0.0


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


# --------------------------------------------------------------------------- near-tie vs mismatch
def test_logit_margin_of_crafted_logits():
    logits = torch.tensor([0.5, 3.25, -1.0, 3.0])
    assert logit_margin(logits) == pytest.approx(0.25)
    assert logit_margin(logits.to(torch.bfloat16)) == pytest.approx(0.25)
    assert logit_margin(torch.tensor([2.0, 2.0, 1.0])) == 0.0


@pytest.mark.parametrize("dtype,tie,real", [
    (torch.float32, 5e-4, 2e-3), ("float32", 5e-4, 0.01),
    (torch.bfloat16, 0.375, 0.75), ("bf16", 0.25, 2.0),
    (torch.float16, 0.0625, 0.25), ("float16", 0.1, 1.0),
])
def test_compare_outputs_classifies_by_the_vanilla_margin(dtype, tie, real):
    van = [5, 6, 7, 8]
    assert compare_outputs(van, list(van), [1.0] * 4, dtype) == Divergence(True, None, None, "identical")
    d = compare_outputs(van, [5, 6, 9, 8], [1.0, 1.0, tie, 1.0], dtype)
    assert (d.identical, d.index, d.margin, d.kind) == (False, 2, tie, "near-tie")
    assert d.threshold == near_tie_threshold(dtype) and tie < d.threshold < real
    d = compare_outputs(van, [5, 6, 9, 8], [1.0, 1.0, real, 1.0], dtype)
    assert (d.identical, d.index, d.margin, d.kind) == (False, 2, real, "mismatch")
    assert "mismatch at token 2" in d.describe() and d.to_dict()["kind"] == "mismatch"


def test_compare_outputs_edges():
    # spec stops early: the first missing token is judged by vanilla's margin there
    d = compare_outputs([1, 2, 3], [1, 2], [1.0, 1.0, 1e-5], torch.float32)
    assert (d.index, d.kind) == (2, "near-tie")
    # spec runs past vanilla's end (e.g. past EOS): no vanilla margin, so it is a mismatch
    d = compare_outputs([1, 2], [1, 2, 3], [1.0, 1.0], torch.float32)
    assert (d.index, d.margin, d.kind) == (2, None, "mismatch")
    assert "no vanilla margin" in d.describe()
    assert compare_outputs([], [], [], "fp32").identical
    with pytest.raises(ValueError, match="float64"):
        compare_outputs([1], [2], [0.0], torch.float64)
    # the documented order: fp32 tight, fp16 looser, bf16 loosest
    assert near_tie_threshold(torch.float32) < near_tie_threshold(torch.float16) < near_tie_threshold(torch.bfloat16)
    with pytest.raises(AttributeError):
        Divergence(True, None, None, "identical").kind = "mismatch"      # frozen
