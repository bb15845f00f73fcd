"""Real browser (Debian ``chromium`` via the ``playwright`` package): Stop ends the work in every phase,
and a Run clicked right after it starts on its own and ends Done, with no second click.

The engine is the test fake, with a slow video reader and a slow prefill that poll ``should_stop``
between frames and between "layers" as the real engine does (``tests/test_stop_engine.py`` checks
the real reader and prefill). Each phase: Run, wait until the page shows the phase, Stop, Run at once
(while the stopped run is still winding down: the page holds that click), then wait for Done.
"""
from __future__ import annotations


import pytest

from helpers.browser import STATUS_LOG_JS, assert_order, chromium, served_page, set_slider, wait_until
from helpers.fakes import FakeEngine, free_port, sample_video


@pytest.fixture(scope="module")
def page_and_engine():
    exe = chromium()
    from app.page.ui import build_demo
    from app.runs.backend import Backend
    eng = FakeEngine(step_s=0.0)
    demo = build_demo(Backend(eng, update_interval_s=0.05), examples=[])
    port = free_port()
    demo.queue().launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    with served_page(demo, port, exe) as page:
        page.locator("#run").wait_for(timeout=60_000)
        page.locator("#video input[type=file]").set_input_files(str(sample_video()))
        page.locator("#video video").wait_for(state="attached", timeout=60_000)
        wait_until(lambda: any(slot == "video" for _, slot in demo.specvlm_janitor._held))  # page shows it
        set_slider(page, "frames", 40)
        set_slider(page, "max-new-tokens", 1000)
        page.evaluate(STATUS_LOG_JS)
        eng.janitor = demo.specvlm_janitor  # for failure messages
        yield page, eng


def _stop_then_run(page, eng, phase_text: str, slow: dict, fast: dict) -> list[str]:
    """Run with ``slow`` engine timings, Stop once the status shows ``phase_text``, click Run at once
    with ``fast`` timings; returns the status lines seen from the first Run to the second Done."""
    for k, v in slow.items():
        setattr(eng, k, v)
    page.evaluate("() => { window.__statuses = []; }")
    page.locator("#run").click()
    page.wait_for_function("() => { const r = document.querySelector('#run');"
                           " return r.disabled && r.innerText.trim() === 'Running…'; }", timeout=30_000)
    try:
        page.wait_for_function("t => (window.__statuses || []).some(s => s.includes(t))", arg=phase_text,
                               timeout=60_000)
    except Exception as e:
        raise AssertionError(f"never saw {phase_text!r}; the page showed {page.evaluate('() => window.__statuses')}, "
                             f"status now {page.locator('#status').inner_text()!r}") from e
    page.locator("#stop").click()
    for k, v in fast.items():
        setattr(eng, k, v)
    page.locator("#run").click()  # at once: the stopped run is still winding down
    try:
        page.wait_for_function("() => { const s = window.__statuses || [];"
                               " const i = s.findIndex(t => t.startsWith('Stopped.'));"
                               " return i >= 0 && s.slice(i).some(t => t.startsWith('Done.')); }", timeout=60_000)
    except Exception as e:
        raise AssertionError(f"no Done after the Stop; the page showed {page.evaluate('() => window.__statuses')}, "
                             f"held {eng.janitor._held}, deleted {eng.janitor.deleted}, "
                             f"Run: {page.locator('#run').inner_text()!r}") from e
    seen = page.evaluate("() => window.__statuses")
    page.wait_for_function("() => !document.querySelector('#run').disabled", timeout=30_000)
    assert page.locator("#run").inner_text().strip() == "Run"
    assert "Outputs identical" in page.locator("#summary").inner_text()
    return seen


def test_stop_while_reading_the_video_then_run(page_and_engine):
    page, eng = page_and_engine
    before = eng.frames_read
    seen = _stop_then_run(page, eng, "Decoding video frames", dict(frame_s=0.2), dict(frame_s=0.0))
    assert eng.frames_read - before < 40   # the reader stopped between frames, it did not read all 40
    assert_order(seen, "Decoding video frames", "Stopping", "Stopped.", "Done.")
    assert eng.streams[-2:] == ["vanilla", "specvlm"]  # only the second run decoded


def test_stop_during_prefill_then_run(page_and_engine):
    page, eng = page_and_engine
    before, streams = eng.prefill_layers, len(eng.streams)
    seen = _stop_then_run(page, eng, "Prefill (vanilla)", dict(prefill_s=8.0, stop_lag_s=2.0),
                          dict(prefill_s=0.0, stop_lag_s=0.0))
    assert eng.prefill_layers - before < 10  # the prefill stopped between layers
    # the stopped prefill takes 2 s more to end, so the Run click lands while it winds down: it waits, visibly
    assert_order(seen, "Prefill (vanilla)", "Stopping", "Waiting for the previous run to stop",
           "Stopped. The next run starts now", "Done.")
    assert eng.streams[streams:] == ["vanilla", "vanilla", "specvlm"]  # the stopped one never reached SpecVLM


def test_stop_while_decoding_then_run(page_and_engine):
    page, eng = page_and_engine
    streams = len(eng.streams)
    seen = _stop_then_run(page, eng, "Vanilla decoding", dict(step_s=0.02), dict(step_s=0.0))
    assert_order(seen, "Vanilla decoding", "Stopping", "Stopped.", "Done.")
    assert eng.streams[streams:] == ["vanilla", "vanilla", "specvlm"]


def test_the_summary_offers_a_timing_repeat_that_runs_the_median(page_and_engine):
    page, eng = page_and_engine   # the runs above are a fraction of a second: the caveat and the offer show
    assert "Timing caveat" in page.locator("#summary").inner_text()
    streams = len(eng.streams)
    page.locator("#repeat-timing").click()
    page.locator("#summary").get_by_text("median of 5 interleaved pairs of runs").first.wait_for(timeout=60_000)
    assert eng.streams[streams:] == ["vanilla", "specvlm"] * 5
    assert page.locator("#timing-pairs input[type=number]").input_value() == "5"
    page.wait_for_function("() => { const b = document.getElementById('repeat-timing');"
                           " return !b || b.offsetParent === null; }", timeout=30_000)  # no offer at 5 pairs


def test_a_run_held_while_the_last_one_stops_starts_with_empty_panels(page_and_engine):
    """Stop during vanilla decoding, Run at once: while the held Run reads the video, both panels say
    ``waiting…`` and the summary and download of the stopped run are gone."""
    page, eng = page_and_engine
    eng.step_s = 0.02
    page.evaluate("() => { window.__statuses = []; }")
    page.locator("#run").click()
    page.wait_for_function("() => /\\w/.test((document.querySelector('#vanilla-text') || {}).innerText || '')"
                           " && !document.querySelector('#vanilla-text').innerText.includes('waiting')", timeout=60_000)
    page.locator("#stop").click()
    eng.step_s, eng.frame_s = 0.0, 0.15     # the held Run reads its 40 frames for ~6 s
    try:
        page.locator("#run").click()
        page.wait_for_function("() => { const s = window.__statuses || []; const i = s.findIndex(t => "
                               "t.startsWith('Stopped.')); return i >= 0 && s.slice(i).some(t => "
                               "t.startsWith('Decoding video frames')); }", timeout=60_000)
        panels = [page.locator(p).inner_text().strip() for p in ("#vanilla-text", "#spec-text")]
        summary, download = page.locator("#summary").inner_text(), page.locator("#compare-download")
        shown = download.count() and download.is_visible()
        page.locator("#status").get_by_text("Done").wait_for(timeout=60_000)
    finally:
        eng.frame_s = 0.0
    assert panels == ["waiting…", "waiting…"], panels
    assert "not compared" not in summary and not summary.strip(), summary
    assert not shown
