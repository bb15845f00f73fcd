"""Real browser (Debian ``chromium``): an example sets every setting. After Frames and Timing runs are changed, a
click on an example puts them back to its preset's defaults, the page names them, and the next Run reads the
example's frames."""
from __future__ import annotations

from helpers.browser import chromium, served_page, set_slider
from helpers.fakes import FakeEngine, free_port, sample_video


class FramesEngine(FakeEngine):
    """The fake decoder, recording the frame count each Run asks the video reader for."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.asked: list[int] = []

    def load_video(self, path, config, should_stop=None):
        self.asked.append(int(config.num_frames))
        return super().load_video(path, config, should_stop)


def test_changed_frames_then_an_example_runs_with_the_examples_frames():
    exe = chromium()
    from app.page.ui import build_demo
    from app.runs.backend import Backend

    eng = FramesEngine(step_s=0.0)
    backend = Backend(eng)
    preset_frames = backend.default_settings().num_frames          # the fake preset's 4 frames
    demo = build_demo(backend, examples=[[str(sample_video()), "Describe the shapes."]])
    port = free_port()
    demo.queue().launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    with served_page(demo, port, exe) as page:
        page.locator("#run").wait_for(timeout=60_000)
        set_slider(page, "frames", 200)
        set_slider(page, "timing-pairs", 3)
        page.locator("#examples").get_by_text("Describe the shapes.").first.click()
        note = page.locator("#example-note")
        note.get_by_text("Frames (200 →").wait_for(timeout=30_000)
        assert f"Frames (200 → {preset_frames})" in note.inner_text() and "Timing runs (3 → 1)" in note.inner_text()
        assert page.locator("#frames input[type=number]").input_value() == str(preset_frames)
        page.locator("#video video").wait_for(state="attached", timeout=60_000)   # the example is loaded
        page.locator("#run").click()
        page.locator("#status").get_by_text("Done").wait_for(timeout=120_000)
        assert eng.asked == [preset_frames], eng.asked                             # the Run read the example's frames
