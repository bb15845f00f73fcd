"""The live charts and the status line's progress bar while SpecVLM decodes (fake engine, no model, no browser): the
charts are sent as soon as the first verify step arrives and then at least twice a second; every status line while
decoding names the same phase and count as the progress reported with it, and carries that progress as its bar."""
from __future__ import annotations

import re
import time

import pytest

from helpers.fakes import FakeEngine

from app.inputs.settings import PLOT_INTERVAL_S, RunRequest, RunSettings
from app.runs.backend import Backend
from app.views.progress_bar import BAR_CLASS, status_with_bar

SPEC_STEP_S = 0.03
"""Seconds per SpecVLM verify step (vanilla decodes at once): ~70 steps, about 2 s of SpecVLM decoding."""


class SlowSpecEngine(FakeEngine):
    """The fake engine whose vanilla run is instant and whose speculative run takes ``SPEC_STEP_S`` per step."""

    def stream(self, pair, inputs, config, should_stop):
        self.step_s = 0.0 if config.method == "vanilla" else SPEC_STEP_S
        return super().stream(pair, inputs, config, should_stop)


@pytest.fixture(autouse=True)
def _clip(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "clip.mp4").write_bytes(b"\x00" * 16)


def test_charts_come_with_the_first_verify_step_and_then_twice_a_second():
    assert PLOT_INTERVAL_S < 0.5
    s = RunSettings(preset="Fake tiny (CPU)", num_frames=4, max_new_tokens=200, fixed_length=True)
    reported: list[tuple[float, str]] = []
    timed = []
    for upd in Backend(SlowSpecEngine()).run(RunRequest("clip.mp4", "Describe.", s), session="s",
                                             progress=lambda f, d: reported.append((f, d))):
        timed.append((time.perf_counter(), upd, list(reported)))
    spec = [(t, u) for t, u, _ in timed if u.get("status", "").startswith("SpecVLM decoding")]
    assert len(spec) >= 5
    first = next(u for _, u in spec if "τ" in u["spec_stats"])              # the first update with verify steps
    assert first.get("accept_plot") is not None and "τ =" in first["accept_plot"].layout.title.text
    charts = [t for t, u in spec if "accept_plot" in u and "time_plot" in u]
    gaps = [b - a for a, b in zip(charts, charts[1:])]
    print(f"SpecVLM decoding {spec[-1][0] - spec[0][0]:.2f} s, {len(charts)} chart updates, gaps "
          f"{[round(g, 2) for g in gaps]}")
    assert len(charts) >= 4 and max(gaps) < 0.75 and sum(gaps) / len(gaps) <= 0.5, gaps   # twice a second


def test_each_status_line_carries_the_progress_reported_with_it():
    s = RunSettings(preset="Fake tiny (CPU)", num_frames=4, max_new_tokens=60)
    reported: list[tuple[float, str]] = []
    checked = 0
    for upd in Backend(FakeEngine(step_s=0.01)).run(RunRequest("clip.mp4", "Describe.", s), session="s",
                                                      progress=lambda f, d: reported.append((f, d))):
        status = upd.get("status", "")
        if BAR_CLASS not in status:
            continue
        frac, desc = reported[-1]
        words = status.split("\n\n")[0]
        assert status == status_with_bar(words, frac, desc)                 # the bar is the last progress
        m = re.match(r"(Vanilla|SpecVLM) decoding: (\d+) of 60 tokens", words)
        if m:
            assert words == desc                                            # same phase, same count
            checked += 1
    assert checked >= 2
    assert BAR_CLASS not in upd["status"] and "Done" in upd["status"]      # the end has no bar
