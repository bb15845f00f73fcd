"""Fixed-length runs, repeated timing pairs and the summary's timing caveat (fake engine, no model)."""
from __future__ import annotations

import pytest

from helpers.fakes import FakeEngine

from app.inputs.settings import Limits, RunRequest, RunSettings, UserError, build_configs
from app.runs.backend import Backend
from app.runs.timing import MIN_DECODE_S, SUGGESTED_REPEATS, LoadMeter, speed_note
from app.views.summary import comparison_json
from specvlm.analysis.metrics import median_speedup


@pytest.fixture(autouse=True)
def _clip(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "clip.mp4").write_bytes(b"\x00" * 16)


def _run(backend, **kw):
    s = RunSettings(**{**dict(preset="Fake tiny (CPU)", num_frames=4, max_new_tokens=20), **kw})
    views: list = []
    ups = list(backend.run(RunRequest("clip.mp4", "Describe.", s), session="s", views=views))
    return ups[-1], views[0]


def test_fixed_length_ignores_eos_up_to_the_token_budget():
    assert build_configs(RunSettings(preset="x", fixed_length=True), Limits())[0].stop_at_eos is False
    assert build_configs(RunSettings(preset="x"), Limits())[0].stop_at_eos is True
    eng = FakeEngine(step_s=0.0, eos_at=5)      # the model "ends" after 5 tokens
    b = Backend(eng, update_interval_s=0.0)
    _, view = _run(b)
    assert view.runs["vanilla"].record.num_generated == view.runs["spec"].record.num_generated == 5
    last, view = _run(b, fixed_length=True)
    assert view.runs["vanilla"].record.num_generated == view.runs["spec"].record.num_generated == 20
    assert "Outputs identical" in last["summary"]


def test_timing_pairs_run_interleaved_and_report_the_median():
    eng = FakeEngine(step_s=0.0)
    last, view = _run(Backend(eng, update_interval_s=0.0), timing_pairs=3)
    assert eng.streams == ["vanilla", "specvlm"] * 3           # interleaved pairs
    assert [p.index for p in view.pairs] == [2, 3]
    speed = view.speed()
    assert len(speed.runs) == 3 and speed.speedup == pytest.approx(median_speedup(speed.runs))
    assert "median of 3 interleaved pairs of runs" in last["summary"]
    assert view.runs["vanilla"].record.num_generated == 20                # the panels show the first pair only
    out = comparison_json(view)
    assert len(out["speedup_runs"]) == 3 and out["speedup"] == pytest.approx(speed.speedup, rel=1e-3)


@pytest.mark.parametrize("pairs,words", [(0, "timing runs=0 must be 1 to 9"), (10, "timing runs=10"),
                                         (2.5, "timing_pairs must be a whole number")])
def test_timing_pairs_out_of_range_are_refused(pairs, words):
    with pytest.raises(UserError, match=words):
        build_configs(RunSettings(preset="x", timing_pairs=pairs), Limits())


def test_a_short_decode_gets_a_caveat_and_the_page_offers_a_repeat():
    last, view = _run(Backend(FakeEngine(step_s=0.0), update_interval_s=0.0))
    assert view.runs["vanilla"].record.decode_s < MIN_DECODE_S
    assert "Timing caveat: a decode took only" in last["summary"] and last["speed_note"]
    assert f"median of {SUGGESTED_REPEATS} interleaved runs" in last["summary"]
    assert "Timing caveat" in comparison_json(view)["speed_note"]
    from app.page.ui import _button_updates, build_demo
    c = build_demo(Backend(FakeEngine()), examples=[]).specvlm_components
    assert _button_updates(c, "idle", last["speed_note"], 1)[c["repeat"]]["visible"] is True
    assert _button_updates(c, "idle", "", 1)[c["repeat"]]["visible"] is False
    assert _button_updates(c, "running", None, 1)[c["run"]]["interactive"] is False


def test_speed_note_names_short_decodes_and_busy_cpus():
    assert speed_note([2.0, 1.0], 0.1, 1) == ""
    busy = speed_note([2.0, 1.0], 1.6, 1)
    assert "other processes kept 1.6 CPU cores busy" in busy and "may be far off" in busy
    assert "Fixed length" not in busy and "Fixed length" in speed_note([0.2, 0.1], None, 1)  # only for short ones
    both = speed_note([0.2, 0.1], 1.0, 5)
    assert "only 0.10 s" in both and "median of 5 interleaved pairs" in both


def test_load_meter_measures_other_processes():
    m = LoadMeter()
    m.start()
    load = m.stop()
    assert load.other_cores is not None and load.other_cores >= 0.0   # /proc/stat is readable here (Linux)
