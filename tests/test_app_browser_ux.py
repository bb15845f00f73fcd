"""Real browser (Debian ``chromium`` via the ``playwright`` package): what a new user meets in the first minutes.

A GIF is accepted by the video box; an HEVC and a GIF upload get an H.264 preview in the player and a
note instead of the red "Video not playable" toast, while the run reads the uploaded file; after Run
the live panels are in view at 1400x1000, Stop is prominent only while a run is active, and the heatmap
captions are not cut off.
"""
from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

from helpers.browser import chromium, served_page, set_slider
from helpers.fakes import ProbingEngine, free_port


def _gif(path: Path) -> Path:
    from PIL import Image
    frames = [Image.fromarray(np.full((48, 64, 3), (40 * i, 90, 200 - 30 * i), np.uint8)) for i in range(6)]
    frames[0].save(path, save_all=True, append_images=frames[1:], duration=100, loop=0)
    return path


def _hevc(path: Path) -> Path:
    import imageio_ffmpeg
    exe = imageio_ffmpeg.get_ffmpeg_exe()
    r = subprocess.run([exe, "-v", "error", "-y", "-f", "lavfi", "-i", "testsrc=size=64x48:rate=10:duration=1",
                        "-c:v", "libx265", "-x265-params", "log-level=error", "-pix_fmt", "yuv420p", str(path)],
                       capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        pytest.skip(f"this FFmpeg cannot encode HEVC: {r.stderr.strip()[-200:]}")
    return path


def _upload(page, path: Path, fmt: str) -> None:
    """Upload through the video box; the player gets the H.264 preview and the page says why."""
    page.locator("#video input[type=file]").set_input_files(str(path))
    page.locator("#video-note").get_by_text("H.264 preview").wait_for(timeout=120_000)
    assert fmt in page.locator("#video-note").inner_text()
    page.wait_for_function("() => { const v = document.querySelector('#video video');"
                           " return v && /-preview-[0-9a-f]+\\.mp4/.test(v.currentSrc || v.src); }", timeout=60_000)


def test_gif_and_hevc_uploads_then_run_layout(tmp_path):
    exe = chromium()
    from app.page.ui import build_demo
    from app.runs.backend import Backend
    gif, hevc = _gif(tmp_path / "anim.gif"), _hevc(tmp_path / "clip_hevc.mp4")
    eng = ProbingEngine(step_s=0.02)
    demo = build_demo(Backend(eng), examples=[])
    port = free_port()
    demo.queue().launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    with served_page(demo, port, exe) as page:
        page.locator("#run").wait_for(timeout=60_000)
        stop_cls = lambda: page.locator("#stop").get_attribute("class") or ""  # noqa: E731
        assert "secondary" in stop_cls() and "specvlm-running" not in stop_cls()  # nothing runs: plain
        accept = page.locator("#video input[type=file]").get_attribute("accept") or ""
        assert ".gif" in accept and ".mkv" in accept

        _upload(page, gif, "GIF")                       # accepted (was: "Invalid file type")
        page.reload(wait_until="domcontentloaded")      # a fresh page: the video box takes a new file
        page.locator("#run").wait_for(timeout=60_000)
        _upload(page, hevc, "HEVC")                     # a preview instead of the red toast
        page.wait_for_timeout(1500)
        body = page.locator("body").inner_text()
        assert "not playable" not in body and "Invalid file type" not in body

        set_slider(page, "max-new-tokens", 160)
        page.evaluate("window.scrollTo(0, 0)")
        bg = "() => getComputedStyle(document.querySelector('#stop')).backgroundColor"
        page.add_style_tag(content="#stop { transition: none !important; }")  # colours as the class says
        idle = page.evaluate(bg)
        page.locator("#run").click()
        red = page.wait_for_function(     # red while the run is active (read in the same frame as the class)
            f"idle => ({bg})() !== idle ? ({bg})() : null", arg=idle, timeout=30_000).json_value()
        page.locator("#vanilla-stats").get_by_text("decoding").wait_for(timeout=60_000)
        assert page.evaluate(bg) == red                 # still red once the run's own updates arrive
        assert "Error" not in page.locator("#status").inner_text(), page.locator("#status").inner_text()
        top = page.evaluate("() => document.getElementById('live-panels').getBoundingClientRect().top")
        assert -2 <= top < 300, top                     # the live panels are in view, near the top (sub-pixel)
        for panel in ("#vanilla-stats", "#spec-stats"):
            page.locator(panel).get_by_text("done", exact=False).wait_for(timeout=120_000)
        page.wait_for_function("() => !document.querySelector('#stop').classList.contains('specvlm-running')",
                               timeout=30_000)          # plain again once the run ended
        page.wait_for_function(f"idle => ({bg})() === idle", arg=idle, timeout=10_000)
        plain = page.evaluate(bg)
        assert red != plain, (red, plain)
        assert eng.read and Path(eng.read[-1]).name == hevc.name  # the run read the upload, not the preview

        page.locator("#heatmaps .caption-label").first.wait_for(timeout=30_000)
        cut = page.evaluate("""() => Array.from(document.querySelectorAll('#heatmaps .caption-label'))
            .filter(e => e.scrollWidth > e.clientWidth + 1 || e.scrollHeight > e.clientHeight + 1).length""")
        n = page.locator("#heatmaps .caption-label").count()
        assert n >= 1 and cut == 0, (n, cut)            # captions wrap instead of being cut off
        body = page.locator("body").inner_text()
        assert "not playable" not in body
