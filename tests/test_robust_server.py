"""The launched app under load: 8 concurrent ``gradio_client`` sessions, Stop then run again,
upload limits, and no uploaded file left behind.

Runs the real engine (``specvlm.engine.stream``) on an in-process tiny Qwen2.5-VL (random weights,
fp32, Self-SD), never the bundled model, so it is fast and does not depend on assets. Test
videos are written by PyAV into temporary folders; uploads go to a private GRADIO_TEMP_DIR.
"""
from __future__ import annotations

import html
import re
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import av
import numpy as np
import pytest
from gradio_client import Client, handle_file

from helpers.app_fakes import ProbingFake
from helpers.engines import TINY, TinyEngine
from helpers.fakes import FakeEngine, free_port

from app.inputs.settings import Limits
from app.runs.backend import WORKER_PREFIX, Backend

pytestmark = pytest.mark.timeout(180)

PROMPT = "Describe the video."


def _write_clip(path: Path, n: int = 8, side: int = 56, fps: int = 4) -> str:
    rng = np.random.default_rng(0)
    c = av.open(str(path), "w")
    s = c.add_stream("libx264", rate=fps)
    s.width, s.height, s.pix_fmt = side, side, "yuv420p"
    for _ in range(n):
        for p in s.encode(av.VideoFrame.from_ndarray(rng.integers(0, 255, (side, side, 3), np.uint8), "rgb24")):
            c.mux(p)
    for p in s.encode():
        c.mux(p)
    c.close()
    return str(path)


def _text(panel_html: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", panel_html))


def _args(video, max_new=12, frames=4):
    return (handle_file(video), PROMPT, TINY, "", "specvlm", 0.9, 0.4, "dynamic", 3, 2, 6, frames, max_new,
            "Pruning stages")


def _uploads(folder: Path) -> list[Path]:
    """Files in Gradio's folder other than the gallery images the page fetches after a run
    (Gradio's delete_cache removes those after an hour)."""
    return [p for p in folder.rglob("*") if p.is_file() and p.suffix.lower() not in (".png", ".webp", ".jpg")]


@pytest.fixture
def server(tmp_path, monkeypatch):
    """Launch the app; yields a namespace with url, backend, demo, upload dir and a clip."""
    upload_dir = tmp_path / "gradio"
    scratch = tmp_path / "scratch"  # per-request temporary files (gallery PNGs) go here
    scratch.mkdir()
    monkeypatch.setenv("GRADIO_TEMP_DIR", str(upload_dir))
    from app.page.ui import build_demo

    def launch(engine=None, limits=None, max_file_size=None):
        backend = Backend(engine or TinyEngine(), device="cpu", dtype="float32", update_interval_s=0.05,
                          limits=limits or Limits())
        demo = build_demo(backend, examples=[], scratch_dir=str(scratch))
        port = free_port()
        demo.queue(default_concurrency_limit=1, max_size=64).launch(
            server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True,
            max_file_size=max_file_size)
        state.demos.append(demo)
        return SimpleNamespace(url=f"http://127.0.0.1:{port}/", backend=backend, demo=demo)

    clips = tmp_path / "clips"
    clips.mkdir()
    state = SimpleNamespace(launch=launch, demos=[], upload_dir=upload_dir, clip=_write_clip(clips / "clip.mp4"),
                            clips=clips, scratch=scratch)
    yield state
    for d in state.demos:
        d.close()


def test_eight_concurrent_sessions_match_a_lone_run_and_leave_no_uploads(server):
    app = server.launch()
    lone = Client(app.url, verbose=False).predict(*_args(server.clip), api_name="/compare")
    assert lone[0].startswith("**Done.**"), lone[0]
    want_van, want_spec = _text(lone[1]), _text(lone[3])
    assert want_van and want_van == want_spec
    assert _uploads(server.upload_dir) == []  # the lone run's upload is gone

    clients = [Client(app.url, verbose=False) for _ in range(8)]
    t0 = time.perf_counter()
    jobs = [c.submit(*_args(server.clip), api_name="/compare") for c in clients]
    outs = [j.result(timeout=150) for j in jobs]
    elapsed = time.perf_counter() - t0
    for out in outs:  # every request completed (queued behind the GPU lane), none errored
        status, van, van_stats, spec, spec_stats, summary = out[:6]
        assert status.startswith("**Done.**"), status
        assert (_text(van), _text(spec)) == (want_van, want_spec)
        assert "Outputs identical" in summary
    assert len({c.session_hash for c in clients}) == 8
    assert _uploads(server.upload_dir) == [], "uploads left behind"  # same content = one shared path
    assert list(server.scratch.iterdir()) == [], "request scratch folders left behind"
    assert not app.backend.active_workers()
    print(f"8 concurrent sessions: {elapsed:.1f} s")


def test_stop_during_a_run_ends_the_worker_and_the_next_run_works(server):
    app = server.launch(FakeEngine(step_s=0.02), limits=Limits())
    client = Client(app.url, verbose=False)
    args = list(_args(server.clip, max_new=1000))
    args[2] = "Fake tiny (CPU)"
    job = client.submit(*args, api_name="/compare")
    deadline = time.time() + 60
    while not app.backend.active_workers() and time.time() < deadline:  # decoding has started
        time.sleep(0.02)
    assert app.backend.active_workers(), "the decode never started"
    client.predict(api_name="/stop")  # same session as the running compare
    out = job.result(timeout=60)
    assert "Stopped" in out[0] and "stopped" in out[2]
    assert not [t for t in threading.enumerate() if t.name.startswith(WORKER_PREFIX)]  # the loop really ended
    args[12] = 10
    again = client.predict(*args, api_name="/compare")
    assert again[0].startswith("**Done.**") and "Outputs identical" in again[5]


def test_upload_limits_give_a_message_and_the_server_keeps_serving(server, tmp_path):
    big = _write_clip(server.clips / "big.mp4", n=40, side=128)  # larger than 30 KB; 10 s long
    app = server.launch(ProbingFake(step_s=0.0), limits=Limits(max_upload_mb=0.03, max_duration_s=5))
    client = Client(app.url, verbose=False)
    args = list(_args(big, max_new=8))
    args[2] = "Fake tiny (CPU)"
    out = client.predict(*args, api_name="/compare")
    assert out[0].startswith("**Error:**") and "accepts up to 0.03 MB" in out[0] and "big.mp4" in out[0]
    long = _write_clip(server.clips / "long.mp4", n=28, side=16, fps=4)  # 7 s, small file
    args[0] = _args(long)[0]
    out = client.predict(*args, api_name="/compare")
    assert "7.0 s long" in out[0] and "up to 5.0 s" in out[0]
    args[0] = _args(server.clip)[0]
    out = client.predict(*args, api_name="/compare")
    assert out[0].startswith("**Done.**")
    assert _uploads(server.upload_dir) == []


def test_gradio_rejects_uploads_over_max_file_size(server):
    app = server.launch(FakeEngine(step_s=0.0), max_file_size=1000)  # bytes
    client = Client(app.url, verbose=False)
    args = list(_args(server.clip, max_new=8))
    args[2] = "Fake tiny (CPU)"
    with pytest.raises(Exception, match="(?i)maximum allowed size|exceeds|413"):
        client.predict(*args, api_name="/compare")
    assert client.predict(api_name="/stop") in (None, ())  # still serving


def test_gallery_images_are_written_as_files_in_the_request_folder(tmp_path):
    from PIL import Image

    from app.page.gradio_io import gallery_files, request_scratch
    img = np.arange(6 * 8 * 3, dtype=np.uint8).reshape(6, 8, 3)
    with request_scratch(str(tmp_path)) as d:
        (path, cap), (url, none) = gallery_files([(img, "frames 0-1"), ("http://x/y.png", None)], d)
        assert cap == "frames 0-1" and url == "http://x/y.png" and none is None
        np.testing.assert_array_equal(np.asarray(Image.open(path)), img)
    assert list(tmp_path.iterdir()) == []
