"""Real browser (Debian ``chromium`` via the ``playwright`` package) over the real engine and the bundled preset
(random stand-ins of its pair with its tokenizer and processor, :mod:`helpers.bundled_like`): Stop during a long
prefill, then a Run clicked at once ends Done with no second click."""
from __future__ import annotations

from helpers.browser import STATUS_LOG_JS, assert_order, chromium, served_page, set_slider, wait_until
from helpers.fakes import free_port


def test_real_engine_stop_during_a_long_prefill_then_run(tmp_path):
    """The bundled preset, 256 frames of world.mp4 (a prefill of ~22k video tokens): Stop 1 s into it, click Run
    at once and lower the frames meanwhile; the held click runs with 8 frames and ends Done."""
    exe = chromium()
    from gradio.media import get_video
    from app.page.ui import build_demo
    from app.runs.backend import Backend
    from helpers.bundled_like import stand_in_engine
    backend = Backend(stand_in_engine(), device="cpu", dtype="float32", update_interval_s=0.1)
    demo = build_demo(backend, examples=[])
    port = free_port()
    demo.queue().launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    with served_page(demo, port, exe) as page:
        page.locator("#run").wait_for(timeout=60_000)
        page.locator("#video input[type=file]").set_input_files(get_video("world.mp4"))
        page.locator("#video video").wait_for(state="attached", timeout=60_000)
        wait_until(lambda: any(slot == "video" for _, slot in demo.specvlm_janitor._held))
        set_slider(page, "frames", 256)
        set_slider(page, "max-new-tokens", 16)
        page.evaluate(STATUS_LOG_JS)
        page.locator("#run").click()
        page.locator("#status p").get_by_text("Prefill (vanilla)").wait_for(timeout=120_000)
        page.wait_for_timeout(1000)
        page.locator("#stop").click()
        page.locator("#run").click()            # held until the stopped run has ended
        set_slider(page, "frames", 8)          # read when the held click is sent
        page.wait_for_function("() => { const s = window.__statuses || [];"
                               " const i = s.findIndex(t => t.startsWith('Stopped.'));"
                               " return i >= 0 && s.slice(i).some(t => t.startsWith('Done.')); }",
                               timeout=180_000)
        seen = page.evaluate("() => window.__statuses")
        assert "Outputs identical" in page.locator("#summary").inner_text()
    assert_order(seen, "Prefill (vanilla)… 256 frames", "Stopping", "Stopped.", "Prefill (vanilla)… 8 frames", "Done.")
    assert not backend.active_workers()
