"""Real browser (Debian ``chromium`` via the ``playwright`` package): what an upload of the wrong kind says,
at once and in one line: an audio-only file in the video box, a subtitle file in the ground-truth box."""
from __future__ import annotations

import subprocess

from helpers.browser import chromium, served_page
from helpers.fakes import ProbingEngine, free_port

from app.page.layout import MORE_INPUTS


def test_wrong_uploads_say_why_before_run(tmp_path):
    exe = chromium()
    import imageio_ffmpeg
    from app.page.ui import build_demo
    from app.runs.backend import Backend
    audio = tmp_path / "song.mp4"
    subprocess.run([imageio_ffmpeg.get_ffmpeg_exe(), "-v", "error", "-y", "-f", "lavfi", "-i",
                    "sine=frequency=440:duration=1", "-c:a", "aac", str(audio)], check=True, timeout=60)
    srt = tmp_path / "talk.srt"
    srt.write_text("1\n00:00:01,000 --> 00:00:02,000\nHello\n")
    eng = ProbingEngine(step_s=0.0)
    demo = build_demo(Backend(eng), examples=[])
    port = free_port()
    demo.queue().launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    with served_page(demo, port, exe) as page:
        page.locator("#run").wait_for(timeout=60_000)
        page.locator("#more-inputs").get_by_text(MORE_INPUTS).first.click()   # the ground truth box is in there
        page.wait_for_function("() => { const i = document.querySelector('#truth input[type=file]');"
                               " return i && i.accept === '.json'; }", timeout=30_000)  # the picker's filter
        page.locator("#video input[type=file]").set_input_files(str(audio))
        note = page.locator("#video-note")
        note.get_by_text("Cannot use this video").wait_for(timeout=60_000)
        assert "audio-only" in note.inner_text() and str(tmp_path) not in note.inner_text()
        page.locator("#truth input[type=file]").set_input_files(str(srt))
        truth_note = page.locator("#truth-note")
        truth_note.get_by_text("takes a .json file").wait_for(timeout=60_000)
        said = truth_note.inner_text()
        assert "'talk.srt' is not one" in said and "Subtitles (.srt)" in said
        assert page.locator("#truth").get_by_text("Error", exact=True).count() == 0  # no bare red badge
        assert eng.read == []   # nothing was decoded: no Run was pressed
