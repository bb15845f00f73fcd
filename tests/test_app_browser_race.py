"""Real browser (Debian ``chromium`` via the ``playwright`` package): the race of the two finished runs.

After a Run both lanes replay on one clock from each run's start: the page's race data holds exactly the runs' own
times (each step at its prefill's seconds plus the step's measured ``elapsed_s``, as the engine yielded them), the
block says it is a replay of the measured runs, shows both finish times, the end-to-end speedup beside the decode
speedup, plays once to the same texts as the live panels, with tokens appearing at their times, and plays again
from 0 s on *Replay the race*. Screenshots go to ``artifacts/`` (git-ignored).
"""
from __future__ import annotations

import pytest

from helpers.browser import chromium, launched, served_page, set_slider
from helpers.fakes import ROOT, FakeEngine, TickClock, free_port, sample_video
from specvlm.types import PrefillInfo, StepEvent

TICK_S = 0.05
"""Seconds the fake's decode clock moves per read: 40 vanilla tokens take about 2 s on the race clock."""


class RecordingEngine(FakeEngine):
    """The fake engine, keeping every event each stream yielded (by method)."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.events: dict[str, list] = {}

    def stream(self, pair, inputs, config, should_stop):
        kept = self.events.setdefault(config.method, [])
        for ev in super().stream(pair, inputs, config, should_stop):
            kept.append(ev)
            yield ev


def _expected(events: list) -> tuple[float, list[float]]:
    """(race start of decoding, time of each step) straight from a stream's events."""
    info = next(e for e in events if isinstance(e, PrefillInfo))
    start = info.prefill_s + info.prune_s + info.draft_prefill_s
    return start, [start + e.elapsed_s for e in events if isinstance(e, StepEvent)]


RACE_JS = ("() => { const el = document.querySelector('#race .specvlm-race');"
           " return el ? JSON.parse(el.dataset.race) : null; }")
LANES_JS = """() => [...document.querySelectorAll('#race .race-lane')].map((l) => [
  l.querySelector('.race-text').textContent, l.querySelector('.race-state').textContent,
  document.querySelector('#race .race-clock').textContent])"""


@pytest.fixture(scope="module")
def chrome():
    with launched(chromium()) as browser:
        yield browser


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_the_race_replays_the_measured_runs_on_one_clock(chrome, theme):
    eng = RecordingEngine(step_s=0.0, clock=TickClock(TICK_S))
    from app.page.ui import build_demo
    from app.runs.backend import Backend
    demo = build_demo(Backend(eng), examples=[])
    port = free_port()
    demo.queue().launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    with served_page(demo, port, chrome, viewport=(1280, 900)) as page:
        page.goto(f"http://127.0.0.1:{port}/?__theme={theme}", wait_until="domcontentloaded", timeout=60_000)
        page.locator("#run").wait_for(timeout=60_000)
        page.locator("#video input[type=file]").set_input_files(str(sample_video()))
        page.locator("#video video").wait_for(state="attached", timeout=60_000)
        set_slider(page, "max-new-tokens", 40)
        page.locator("#run").click()
        page.locator("#status").get_by_text("Done").wait_for(timeout=120_000)
        page.locator("#race .specvlm-race").wait_for(timeout=30_000)
        data = page.evaluate(RACE_JS)
        mid = _mid_replay(page)
        page.wait_for_function("() => document.querySelector('#race .specvlm-race').dataset.played === '1'",
                               timeout=60_000)
        played = page.evaluate(LANES_JS)
        panels = [page.locator(f"#{p} .specvlm-tokens").inner_text() for p in ("vanilla-text", "spec-text")]
        block = page.locator("#race").inner_text()
        summary = page.locator("#summary").inner_text()
        page.locator("#race .race-replay").click()                        # plays again from 0 s
        page.wait_for_timeout(150)
        again = page.evaluate(LANES_JS)
        page.wait_for_function("() => document.querySelector('#race .specvlm-race').dataset.played === '2'",
                               timeout=60_000)
        replayed = page.evaluate(LANES_JS)
        page.locator("#race").scroll_into_view_if_needed()
        shot = ROOT / "artifacts" / f"app_race_{theme}.png"
        shot.parent.mkdir(exist_ok=True)
        page.screenshot(path=str(shot))
    van, spec = (data["lanes"][i] for i in (0, 1))
    for ln, method in ((van, "vanilla"), (spec, "specvlm")):
        start, times = _expected(eng.events[method])
        assert ln["prefill_s"] == pytest.approx(start, abs=1e-9)
        assert [t for t, _ in ln["steps"]] == pytest.approx(times, abs=1e-9)          # the runs' own times
        assert ln["finish_s"] == pytest.approx(times[-1], abs=1e-9)
        assert f"{ln['name']} finished at {ln['finish_s']:.2f} s" in block
    e2e, dec = van["finish_s"] / spec["finish_s"], data["decode_speedup"]
    assert data["end_to_end_speedup"] == pytest.approx(e2e)
    assert f"{e2e:.2f}x" in block and f"decode alone {dec:.2f}x" in block            # both ratios, side by side
    assert "replay of the measured runs" in block and "Replay the race" in block
    assert f"end to end {e2e:.2f}x" in summary
    assert [p[0] for p in played] == panels                                        # both lanes played whole
    assert all("finished at" in p[1] for p in played)
    assert played[0][2] == played[1][2] == f"{max(van['finish_s'], spec['finish_s']):.2f} s"
    assert mid, "the replay was never caught between its start and its end"
    for clock, counts in mid:                                                      # tokens appear at their times
        for ln, shown in zip((van, spec), counts):
            due = lambda t: sum(len(p) for s, p in ln["steps"] if s <= t)  # noqa: E731
            assert due(clock - 0.1) <= shown <= due(clock + 0.1), (clock, shown, ln["name"])
    assert len(again[0][0]) < len(panels[0]) and again[0][2] != played[0][2]       # the replay starts over
    assert [p[0] for p in replayed] == panels


def _mid_replay(page) -> list[tuple[float, list[int]]]:
    """(clock, tokens shown per lane) samples while the first replay plays."""
    out = []
    for _ in range(40):
        got = page.evaluate("""() => { const el = document.querySelector('#race .specvlm-race');
          if (!el || el.dataset.playing !== '1') return null;
          const clock = parseFloat(el.querySelector('.race-clock').textContent);
          return [clock, [...el.querySelectorAll('.race-state')].map((s) => {
            const m = /(\\d+) tokens/.exec(s.textContent); return m ? Number(m[1]) : 0; })]; }""")
        if got is not None:
            out.append(got)
        page.wait_for_timeout(50)
    return out
