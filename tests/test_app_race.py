"""The race's data from two run records (no browser): each lane's clock is the prefill's measured seconds plus each
step's ``elapsed_s``, its finish the prefill plus the decode time, and the end-to-end speedup the finish times'
ratio beside the decode speedup."""
from __future__ import annotations

import json

import pytest

from helpers.fakes import prefill_info

from app.views.race import end_to_end_speedup, lane, race_data, race_html
from specvlm.analysis.run import RunRecord
from specvlm.types import StepEvent


def _record(spec: bool, times: list[float], per_step: int) -> RunRecord:
    rec = RunRecord()
    rec.add(prefill_info(spec))
    n = 0
    for i, t in enumerate(times):
        k = 1 if i == 0 else per_step
        ids = list(range(n, n + k))
        n += k
        flags = [spec and i > 0 and j < k - 1 for j in range(k)]
        rec.add(StepEvent(i, ids, sum(flags), flags, "x" * k, elapsed_s=t, num_generated=n, pieces=["x"] * k))
    return rec


def test_lanes_put_each_step_at_its_prefill_plus_its_measured_time():
    van = _record(False, [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6], 1)          # 7 tokens
    spec = _record(True, [0.0, 0.15, 0.25], 3)                             # 7 tokens
    v, s = lane("Vanilla", van), lane("SpecVLM", spec)
    info = prefill_info(True)
    start = info.prefill_s + info.prune_s + info.draft_prefill_s
    assert s.prefill_s == pytest.approx(start) and s.times == pytest.approx([start, start + 0.15, start + 0.25])
    assert s.finish_s == pytest.approx(start + 0.25) and v.finish_s == pytest.approx(v.prefill_s + 0.6)
    assert s.pieces[1] == [("x", True), ("x", True), ("x", False)]        # drafted tokens keep their colour
    assert end_to_end_speedup(v, s) == pytest.approx(v.finish_s / s.finish_s)
    data = race_data(van, spec)
    assert json.loads(json.dumps(data)) == data                            # plain JSON for the page
    assert [t for t, _ in data["lanes"][1]["steps"]] == pytest.approx(s.times)
    assert data["decode_speedup"] == pytest.approx(0.6 / 0.25)
    html = race_html(van, spec)
    assert f"finished at <b>{v.finish_s:.2f} s</b>" in html and f"decode alone <b>{0.6 / 0.25:.2f}x</b>" in html
    assert "Replay the race" in html and "replay of the measured runs" in html


def test_no_race_before_both_runs_decoded():
    van = _record(False, [0.0, 0.1], 1)
    assert lane("SpecVLM", RunRecord()) is None and race_data(van, RunRecord()) is None
    assert race_html(van, RunRecord()) == ""


def test_the_verdict_says_why_speculation_lost_end_to_end():
    from app.views.race import _verdict

    assert _verdict(1.4, 1.6) == "**1.40x**, faster than vanilla"
    assert _verdict(0.9, 1.3).endswith("slower than vanilla (its prefill costs more than decoding saves)")
    assert _verdict(0.38, 0.26).endswith("slower than vanilla (its decoding was slower too)")
    assert _verdict(None) == "has no end-to-end time"
