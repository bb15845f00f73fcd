"""``python app.py`` as a ZeroGPU Space starts it, on a CPU (run by tests/test_zerogpu.py).

The real ``spaces`` package in ZeroGPU mode (``SPACES_ZERO_GPU=true``) talks to a stand-in for its
device API (a loopback HTTP server answering ``/schedule``, ``/allow``, ``/release``,
``/startup-report``; it can refuse a Run for quota, and the driver kills a Run's worker process, whose
pid ``/allow`` announced, as ZeroGPU does when a Run's time is up). Then ``app.py`` runs as ``__main__``
(``runpy``): it picks its device and dtype itself, loads the default pair at start, in this process, to
``cuda`` under the ``spaces`` CUDA emulation, and ``spaces`` packs the weights to disk when the server
launches.

Only what needs the NVIDIA driver is stood in, in the worker process ``spaces`` forks for each Run:
``init`` (CUDA start-up) does nothing, ``unpatch`` keeps the emulation on, and ``move`` reads the
packed weights back into CPU memory behind the same emulated ``cuda`` tensors, with the emulation's
(thread-local) torch modes entered in every thread the worker starts; so the Run's "cuda" work runs on
the CPU through the emulation. Everything else is the package's own code: the fork, pickling of the
job and of every yielded batch, the stop event, the release calls.

A thread drives the page's handlers as Gradio calls them, then the page's Run through the server with
``gradio_client`` (its streamed outputs folded as the browser folds them: an update without a value
leaves a component as it was), prints one JSON line (``RESULT {...}``) with what the test asserts and
ends the server.

``--stand-in TARGET DRAFT``: the bundled presets load these folders instead of ``assets/model`` (random stand-ins
with the bundled tokenizer and processor, :mod:`helpers.bundled_like`), so the Space's mechanics cost the same
whatever the bundled model's size.
"""
from __future__ import annotations

import _thread
import json
import os
import runpy
import signal
import sys
import tempfile
import threading
import time
import traceback
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import parse_qs, urlparse

ROOT = Path(__file__).resolve().parents[1]
CALLS: list[tuple[float, str, dict]] = []
SCRIPT = {"quota": False}
"""What the stand-in does to the next Run: refuse it for quota."""


class DeviceAPI(BaseHTTPRequestHandler):
    """Stand-in for the ZeroGPU device API: every schedule succeeds at once on device 0 unless SCRIPT says."""

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        url = urlparse(self.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        CALLS.append((time.perf_counter(), url.path, query))
        status, body = 200, b""
        if url.path == "/schedule" and SCRIPT["quota"]:
            SCRIPT["quota"] = False
            status, body = 429, json.dumps({"left": 12, "wait": 600}).encode()
        elif url.path == "/schedule":
            body = json.dumps(dict(idle=True, nvidiaIndex=0, nvidiaUUID="GPU-standin", allowToken="token")).encode()
        self.send_response(status)
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


# ---- the worker process: the emulation stays on, packed weights come back to CPU memory -----------

def install_worker_standins() -> None:
    """Replace the three functions of ``spaces.zero.torch`` that need the NVIDIA driver in the worker."""
    import threading as th

    import torch

    import spaces.zero.torch as device
    from spaces.zero.torch import patching

    def keep_emulation() -> None:  # instead of unpatch(): the worker keeps emulating cuda on the CPU
        pass

    def no_driver(nvidia_uuid: str) -> None:  # instead of init(): no CUDA start-up
        pass

    def weights_to_cpu(callback=None) -> None:  # instead of move(): packed weights back behind their fakes
        for pack in patching.tensor_packs:
            entries = [e for batch in pack.batches for e in batch] + list(pack.big_tensors)
            with open(pack.path(), "rb") as fh:
                for meta, size, aligned in entries:
                    data = torch.frombuffer(bytearray(fh.read(aligned)[:size]), dtype=torch.uint8)
                    real = torch.empty(0, dtype=meta.dtype).set_(data.untyped_storage(), 0, meta.shape, meta.stride())
                    for fake in pack.fakes[meta]:
                        patching.cuda_aliases[fake] = real
        run = th.Thread.run

        def emulated_run(self) -> None:  # the torch modes are thread-local: enter them in every new thread
            patching.enter_mode()
            run(self)

        th.Thread.run = emulated_run

    device.unpatch, device.init, device.move = keep_emulation, no_driver, weights_to_cpu


# ---- the driver: the page's handlers, called as Gradio calls them ----------------------------------

def drive(captured: dict, out: dict) -> None:
    from helpers.fakes import sample_video
    from helpers.served import through_server

    from app.views import inspect_view
    from specvlm.analysis.records import RunRecord, load_json

    while "demo" not in captured or not getattr(captured["demo"], "server_port", None):
        time.sleep(0.1)
    demo, backend = captured["demo"], captured["backend"]
    out.update(port=demo.server_port, decorated=hasattr(backend.gpu_run, "zerogpu"),
               presets=backend.preset_names(), default_preset=backend.default_settings().preset)
    out.update(loaded=captured["loaded"], loaded_target=captured["loaded_target"], footer=captured.get("note", ""))
    compare = next(fn.fn for fn in demo.fns.values() if fn.api_name == "compare")
    key = {id(c): name for name, c in demo.specvlm_components.items()}
    video = str(sample_video())

    def run(max_new: int, session: str | None = None, frames: int = 8):
        request = SimpleNamespace(session_hash=session) if session else None
        for u in compare(video, "Describe this video in detail.", out["default_preset"], "", max_new_tokens=max_new,
                         frames=frames, request=request, progress=lambda *a, **k: None):
            yield {key[id(c)]: v for c, v in u.items()}

    def decoding(u: dict) -> bool:
        stats = u.get("vanilla_stats", "")
        return "decoding" in stats and " 0 tokens" not in stats

    # 1. A whole Run, decoded in the worker process.
    t0 = time.perf_counter()
    ups = list(run(24))
    last = ups[-1]
    record = next((u["record"] for u in ups if isinstance(u.get("record"), RunRecord)), None)
    out.update(run_s=time.perf_counter() - t0, updates=len(ups), status=last["status"], summary=last["summary"],
               vanilla_stats=last["vanilla_stats"], spec_stats=last["spec_stats"],
               waiting=[u["status"] for u in ups if "ZeroGPU device" in str(u.get("status", ""))],
               parent_streams=len(captured["streams"]), parent_workers=len(backend.active_workers()),
               gallery=len(last["gallery"]), record_steps=len(record.steps) if record else 0,
               record_tokens=sum(len(s.token_ids) for s in record.steps) if record else 0)

    # 2. Inspect and Export from the record the Run returned.
    path = inspect_view.export_record(record)
    again = load_json(path)
    out.update(export_steps=len(again.steps), inspect_summary=inspect_view._refresh(again)[0],
               export_bytes=os.path.getsize(path))

    # 3. The page is closed mid-run (Gradio closes the handler's generator).
    gen = run(400)
    for u in gen:
        if decoding(u):
            break
    t0 = time.perf_counter()
    gen.close()
    out["closed_close_s"] = time.perf_counter() - t0
    out["closed_release_s"], out["closed_fail"] = releases_after(t0)

    # 4. Stop through /stop (the session's flag closes the worker's generator).
    ups, t0 = [], None
    for u in run(400, session="s1"):
        ups.append(u)
        if t0 is None and decoding(u):
            t0 = time.perf_counter()
            out["stop_message"] = backend.stop("s1")
    out.update(stop_end_s=time.perf_counter() - t0, stop_status=ups[-1]["status"],
               stop_vanilla_stats=ups[-1]["vanilla_stats"])
    out["stop_release_s"], out["stop_fail"] = releases_after(t0)

    # 5. ZeroGPU kills the worker process mid-run (as when the reserved time is up).
    ups = []
    for u in run(400, session="s2"):
        ups.append(u)
        if decoding(u) and "killed_pid" not in out:
            out["killed_pid"] = int([q for _, p, q in CALLS if p == "/allow"][-1]["pid"])
            os.kill(out["killed_pid"], signal.SIGKILL)
    texts = [u.get("vanilla_html", "") for u in ups if u.get("vanilla_html")]
    out.update(killed_status=ups[-1]["status"], killed_vanilla_stats=ups[-1].get("vanilla_stats", ""),
               killed_text_kept=bool(texts) and texts[-1] == ups[-1].get("vanilla_html"))

    # 6. The visitor's quota is used up.
    SCRIPT["quota"] = True
    ups = list(run(24))
    out["quota_status"] = ups[-1]["status"]

    # 7. The next Run works.
    ups = list(run(12))
    out.update(next_status=ups[-1]["status"], next_summary=ups[-1]["summary"],
               releases=[q.get("fail") for _, p, q in CALLS if p == "/release"],
               schedules=[(int(q.get("durationSeconds", 0)), q.get("gpuSize")) for _, p, q in CALLS
                          if p == "/schedule"])

    # 8. The page's Run through the server, its outputs folded as the browser folds them.
    out.update(through_server(demo.server_port, video))


def main() -> None:
    from helpers.fakes import free_port

    # its own upload folder: Gradio files identical uploads under one path, which another server's cleanup could delete
    os.environ.update(GRADIO_SERVER_PORT=str(free_port()), GRADIO_TEMP_DIR=tempfile.mkdtemp(prefix="space-uploads-"))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.update(SPACES_ZERO_GPU="true", SPACES_ZERO_DEVICE_API_URL=start_device_api(),
                      ZEROGPU_OFFLOAD_DIR=tempfile.mkdtemp(prefix="zerogpu-tensors-"))
    import spaces  # noqa: F401  (before torch, as app.py does)
    install_worker_standins()
    flags = sys.argv[1:]
    if flags[:1] == ["--stand-in"]:
        from helpers.bundled_like import bundled_like_presets

        from specvlm.models.presets import PRESETS
        PRESETS.update(bundled_like_presets(*flags[1:3]))

    import app.runs.facade
    import app.page.ui

    captured: dict = {"streams": []}
    build_demo, stream = app.page.ui.build_demo, app.runs.facade.SpecvlmFacade.stream

    def capturing_build_demo(backend, *a, **k):  # in the main thread, after loading, before the launch
        captured["backend"], captured["note"] = backend, k.get("footer", "")
        (target, draft, _, dtype), pair = next(iter(backend._pairs.items()))
        p = next(pair.target.parameters())
        captured["loaded"] = dict(asked=[backend.pool.slots[0].device, dtype], devices=len(backend.pool),
                                  device=str(p.device), dtype=str(p.dtype))
        captured["loaded_target"] = target
        captured["demo"] = build_demo(backend, *a, **k)
        return captured["demo"]

    def counting_stream(self, *a, **k):
        captured["streams"].append(os.getpid())  # the worker process changes only its own copy of this list
        return stream(self, *a, **k)

    app.page.ui.build_demo, app.runs.facade.SpecvlmFacade.stream = capturing_build_demo, counting_stream
    out: dict = {}

    def driver() -> None:
        try:
            drive(captured, out)
            print("RESULT " + json.dumps(out), flush=True)
        except BaseException:
            traceback.print_exc()
            print("RESULT-ERROR " + json.dumps(out, default=str), flush=True)
        finally:
            _thread.interrupt_main()  # ends app.py's server loop
            threading.Timer(30, os._exit, (3,)).start()  # and the process, should the server loop not end

    # interrupt_main() raises KeyboardInterrupt only where SIGINT has Python's handler; a shell starts a
    # background job with SIGINT ignored, and Python then leaves it ignored.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    threading.Thread(target=driver, name="zerogpu-driver", daemon=True).start()
    sys.argv = ["app.py"]
    try:
        runpy.run_path(str(ROOT / "app.py"), run_name="__main__")
    except KeyboardInterrupt:
        pass
    import multiprocessing
    for child in multiprocessing.active_children():  # spaces' worker processes hold this process's stdout
        child.kill()
    os._exit(0)


if __name__ == "__main__":
    main()
