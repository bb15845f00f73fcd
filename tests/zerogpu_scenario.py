"""The app under the real ``spaces`` package in ZeroGPU mode, on a CPU (run by tests/test_zerogpu.py).

``spaces`` is imported with ``SPACES_ZERO_GPU=true`` against a stand-in for its device API (a local
HTTP server answering ``/schedule``, ``/allow``, ``/release``, ``/startup-report``); only the two
functions that talk to the NVIDIA driver in the worker process (``spaces.zero.torch.init`` and
``move``) are replaced by no-ops. Everything else is the package's own code: the Run's GPU function
runs in a worker process forked by ``spaces``, its argument and every batch it yields go through
``multiprocessing``'s ``ForkingPickler`` (``spaces.utils.SimpleQueue``), and a close of the parent's
generator reaches the worker through ``spaces``' stop event.

Prints one JSON line (``RESULT {...}``) with what the test asserts.
"""
from __future__ import annotations

import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace
from urllib.parse import parse_qs, urlparse

CALLS: list[tuple[float, str, dict]] = []


class DeviceAPI(BaseHTTPRequestHandler):
    """Stand-in for the ZeroGPU device API: every schedule succeeds at once on device 0."""

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        url = urlparse(self.path)
        CALLS.append((time.perf_counter(), url.path, {k: v[0] for k, v in parse_qs(url.query).items()}))
        body = b""
        if url.path == "/schedule":
            body = json.dumps(dict(idle=True, nvidiaIndex=0, nvidiaUUID="GPU-standin", allowToken="token")).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


def start_device_api() -> str:
    server = ThreadingHTTPServer(("127.0.0.1", 0), DeviceAPI)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}"


def releases_after(t0: float, timeout_s: float = 20.0) -> tuple[float | None, str | None]:
    """(seconds from t0 to the first /release after t0, its fail flag), waiting up to timeout_s."""
    deadline = time.perf_counter() + timeout_s
    while time.perf_counter() < deadline:
        for t, path, q in list(CALLS):
            if path == "/release" and t >= t0:
                return t - t0, q.get("fail")
        time.sleep(0.02)
    return None, None


def main() -> None:
    os.environ["SPACES_ZERO_GPU"] = "true"
    os.environ["SPACES_ZERO_DEVICE_API_URL"] = start_device_api()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import spaces  # before torch, as on a Space
    import spaces.zero.torch as device
    device.init = lambda nvidia_uuid: None      # the worker's CUDA initialisation (needs the driver)
    device.move = lambda callback=None: None    # moving packed weights to the GPU

    from test_app_fakes import FakeEngine, real_engine, sample_video

    from app.backend import Backend
    from app.ui import build_demo
    from specvlm.analysis.records import RunRecord, load_json

    out: dict = {"spaces": spaces.__name__}
    video = str(sample_video())
    engine, preset, bundled = real_engine()
    parent_streams: list[int] = []
    real_stream = engine.stream

    def counting_stream(*a, **k):
        parent_streams.append(os.getpid())  # a list the worker process changes only in its own copy
        return real_stream(*a, **k)

    engine.stream = counting_stream
    backend = Backend(engine, device="cpu", dtype="float32", update_interval_s=0.05)
    out["decorated"] = hasattr(backend.gpu_run, "zerogpu")

    def handler(b: Backend, preset_name: str):
        """The page's /compare handler over ``b`` (called as Gradio calls it, with component names mapped)."""
        demo = build_demo(b, examples=[])
        compare = next(fn.fn for fn in demo.fns.values() if fn.api_name == "compare")
        key = {id(c): name for name, c in demo.specvlm_components.items()}

        def run(max_new: int, request=None):
            for u in compare(video, "Describe this video in detail.", preset_name, "", max_new=max_new, frames=8,
                             request=request, progress=lambda *a, **k: None):
                yield {key[id(c)]: v for c, v in u.items()}
        run.backend = b
        return run

    run = handler(backend, preset)

    # 1. A full Run with the bundled pair.
    t0 = time.perf_counter()
    ups = list(run(24))
    last = ups[-1]
    record = next((u["record"] for u in ups if isinstance(u.get("record"), RunRecord)), None)
    out.update(bundled=bundled, run_s=time.perf_counter() - t0, updates=len(ups), status=last["status"],
               summary=last["summary"], vanilla_stats=last["vanilla_stats"], spec_stats=last["spec_stats"],
               parent_streams=len(parent_streams), parent_workers=len(backend.active_workers()),
               gallery=len(last["gallery"]), record_steps=len(record.steps) if record else 0,
               record_tokens=sum(len(s.token_ids) for s in record.steps) if record else 0)

    # 2. Inspect and Export from the record the Run returned.
    from app import inspect_view
    path = inspect_view.export_record(record)
    again = load_json(path)
    summary = inspect_view._refresh(again)[0]
    out.update(export_steps=len(again.steps), inspect_summary=summary, export_bytes=os.path.getsize(path))

    # 3. Stop by cancelling the Run event (Gradio closes the handler's generator), on a long run.
    slow = FakeEngine(step_s=0.05)  # a long run: 1000 tokens at 50 ms per step unless stopped
    run = handler(Backend(slow, update_interval_s=0.05), "Fake tiny (CPU)")
    gen = run(1000)
    n = 0
    for u in gen:
        n += 1
        stats = u.get("vanilla_stats", "")
        if "decoding" in stats and " 0 tokens" not in stats:
            break
    t0 = time.perf_counter()
    gen.close()
    close_s = time.perf_counter() - t0
    release_s, fail = releases_after(t0)
    out.update(cancel_updates=n, cancel_close_s=close_s, cancel_release_s=release_s, cancel_fail=fail,
               cancel_parent_polls=slow.stop_polls)

    # 4. Stop through /stop (the session's flag in this process closes the worker's generator).
    req = SimpleNamespace(session_hash="s1")
    gen = run(1000, request=req)
    ups = []
    t0 = None
    for u in gen:
        ups.append(u)
        stats = ups[-1].get("vanilla_stats", "")
        if t0 is None and "decoding" in stats and " 0 tokens" not in stats:
            t0 = time.perf_counter()
            out["stop_message"] = run.backend.stop("s1")
    stop_s = time.perf_counter() - t0
    release_s, fail = releases_after(t0)
    out.update(stop_updates=len(ups), stop_end_s=stop_s, stop_release_s=release_s, stop_fail=fail,
               stop_status=ups[-1]["status"], stop_vanilla_stats=ups[-1]["vanilla_stats"])

    # 5. The next Run works.
    ups = list(run(10))
    out.update(next_status=ups[-1]["status"], next_summary=ups[-1]["summary"],
               releases=[q.get("fail") for _, p, q in CALLS if p == "/release"],
               schedules=[int(q.get("durationSeconds", 0)) for _, p, q in CALLS if p == "/schedule"])
    print("RESULT " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
