"""Real browser: Debian ``chromium`` driven by the ``playwright`` package (never the Playwright browser download).

Uploads a clip, presses Run on the real engine with the bundled preset (random stand-ins of its pair,
:mod:`helpers.bundled_like`), waits for both panels to finish, checks that the heatmap gallery and the plotly
charts rendered, and saves a screenshot to ``artifacts/`` (git-ignored). With SPECVLM_UPDATE_SCREENSHOT=1 the Run
uses the bundled pair itself and the screenshot is also copied to ``docs/screenshot.png``.
"""
from __future__ import annotations

import os
import shutil

import pytest

from helpers.browser import chromium, launched, served_page, set_slider
from helpers.fakes import ROOT, FakeEngine, free_port, real_engine, sample_video, stream_endings


@pytest.fixture(scope="module")
def chrome():
    """One Chromium for this module's pages."""
    with launched(chromium()) as browser:
        yield browser


def test_browser_upload_run_and_render(chrome, tmp_path):
    from app.page.ui import build_demo
    from app.runs.backend import Backend
    video = sample_video()
    engine, _ = real_engine(bundled=os.environ.get("SPECVLM_UPDATE_SCREENSHOT") == "1")   # the docs show its text
    backend = Backend(engine, device="cpu", dtype="float32")
    demo = build_demo(backend)
    port = free_port()
    demo.queue().launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    shot = ROOT / "artifacts" / "app_browser.png"
    shot.parent.mkdir(exist_ok=True)
    with served_page(demo, port, chrome) as page:
        page.locator("#run").wait_for(timeout=60_000)
        page.locator("#video input[type=file]").set_input_files(str(video))
        page.locator("#video video").wait_for(state="attached", timeout=60_000)  # preview ready
        set_slider(page, "max-new-tokens", 64)
        set_slider(page, "frames", 8)
        page.locator("#run").click()
        for panel in ("#vanilla-stats", "#spec-stats"):
            page.locator(panel).get_by_text("done", exact=False).wait_for(timeout=240_000)
        page.locator("#status").get_by_text("Done").wait_for(timeout=60_000)
        assert "Outputs identical" in page.locator("#summary").inner_text()
        spec = page.locator("#spec-text")
        assert spec.locator(".tok").count() > 0
        assert page.locator("#vanilla-text").inner_text().strip() == spec.inner_text().strip()
        page.locator("#heatmaps img").first.wait_for(timeout=30_000)
        assert page.locator("#heatmaps img").count() >= 1
        for plot in ("#accept-plot", "#time-plot"):
            page.locator(f"{plot} .js-plotly-plot").first.wait_for(timeout=30_000)
            assert page.locator(f"{plot} .main-svg").count() >= 1
        assert page.locator("#accept-plot .bars path").count() >= 1  # the bars were drawn
        page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000
    if os.environ.get("SPECVLM_UPDATE_SCREENSHOT") == "1":  # opt-in: tests never touch tracked files
        (ROOT / "docs").mkdir(exist_ok=True)
        shutil.copyfile(shot, ROOT / "docs" / "screenshot.png")


def test_browser_stop_then_error(chrome):
    """Stop (its own queue) ends a long decode mid-way; then a bad setting shows a readable error."""
    from app.page.ui import build_demo
    from app.runs.backend import Backend
    eng = FakeEngine(step_s=0.01)
    demo = build_demo(Backend(eng), examples=[])
    port = free_port()
    demo.queue().launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    with served_page(demo, port, chrome) as page:
        page.locator("#run").wait_for(timeout=60_000)
        page.locator("#video input[type=file]").set_input_files(str(sample_video()))
        page.locator("#video video").wait_for(state="attached", timeout=60_000)
        set_slider(page, "max-new-tokens", 1024)  # ~10 s per run at 10 ms per token
        page.locator("#run").click()
        page.locator("#vanilla-stats").get_by_text("decoding").wait_for(timeout=30_000)
        page.locator("#stop").click()
        page.locator("#status").get_by_text("Stopped").wait_for(timeout=10_000)
        assert "stopped" in page.locator("#vanilla-stats").inner_text()
        assert eng.streams == ["vanilla"]  # SpecVLM never started
        assert stream_endings(eng) == ["stopped"]  # the engine loop ended through its stop check
        page.locator("#custom-model-box").get_by_text("Custom model").first.click()   # a collapsed section
        page.locator("#custom-model textarea, #custom-model input").first.fill(" + x")
        page.locator("#run").click()  # a bad setting: a readable error, the server keeps running
        page.locator("#status").get_by_text("custom model field").wait_for(timeout=30_000)
