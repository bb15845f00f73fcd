"""The app on several devices: one pair per device, Runs overlap, a Run takes a free device and gives it
back on Done, Stop, error or a closed page; the page says which device ran it and how many Runs wait.
Two CPU pairs of the fake engine stand for two GPUs."""
from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest

from helpers.fakes import ROOT, FakeEngine

from app.inputs.settings import RunRequest, RunSettings
from app.runs.backend import Backend
from app.runs.devices import DeviceError, DevicePool, default_devices, parse_devices

pytestmark = pytest.mark.timeout(60)
VIDEO = str(ROOT / "assets" / "videos" / "shapes_short.mp4")


def request(video: str = VIDEO, max_new: int = 12) -> RunRequest:
    return RunRequest(video, "Describe.", RunSettings(preset="Fake tiny (CPU)", num_frames=4, max_new_tokens=max_new))


class Recorder(threading.Thread):
    """Runs one request on the backend in a thread, keeping every update with its time."""

    def __init__(self, backend: Backend, session: str, req: RunRequest):
        super().__init__(daemon=True)
        self.backend, self.session, self.req = backend, session, req
        self.updates: list[tuple[float, dict]] = []

    def run(self) -> None:
        for upd in self.backend.run(self.req, session=self.session):
            self.updates.append((time.perf_counter(), upd))

    def first(self, words: str) -> float | None:
        return next((t for t, u in self.updates if words in str(u.get("status", ""))), None)

    @property
    def last(self) -> dict:
        return self.updates[-1][1]


def wait_for(cond, timeout_s: float = 20.0) -> None:
    end = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.01)


def test_two_devices_run_two_runs_at_once_and_say_where():
    eng = FakeEngine(step_s=0.01)
    b = Backend(eng, devices=["cpu", "cpu"], update_interval_s=0.02)
    assert b.preload() == "" and eng.loads == 2   # one pair per device, loaded at start
    runs = [Recorder(b, s, request(max_new=40)) for s in ("a", "b")]
    for r in runs:
        r.start()
    for r in runs:
        r.join()
    starts = [r.first("Running on") for r in runs]
    ends = [r.updates[-1][0] for r in runs]
    assert max(starts) < min(ends)   # both decoded at the same time
    assert sorted(r.last["device"] for r in runs) == ["cpu #1", "cpu #2"]
    assert all(r.last["status"].startswith("**Done.**") and "Ran on cpu #" in r.last["status"] for r in runs)
    assert eng.loads == 2 and b.pool.free == 2
    statuses = [u.get("status") for u in b.run(request(), session="z", waiting=lambda: 3)]
    assert "Running on **cpu #1**; 3 Runs waiting." in statuses   # the page's queue counts in


def test_one_device_makes_the_second_run_wait_and_say_so():
    b = Backend(FakeEngine(step_s=0.01), update_interval_s=0.02)
    first, second = Recorder(b, "a", request(max_new=40)), Recorder(b, "b", request())
    first.start()
    wait_for(lambda: b.pool.free == 0)
    second.start()
    for r in (first, second):
        r.join()
    waited = [u["status"] for _, u in second.updates if "Waiting for a free device" in str(u.get("status", ""))]
    assert waited == ["Waiting for a free device: all 1 are running; 0 Runs ahead of this one."]
    assert second.updates[-1][0] > first.updates[-1][0] and second.last["status"].startswith("**Done.**")
    assert "Ran on" not in second.last["status"]   # one device: the page names none


def test_stop_error_and_a_closed_page_give_the_device_back():
    eng = FakeEngine(step_s=0.01)
    b = Backend(eng, devices=["cpu", "cpu"], update_interval_s=0.02)
    a, c = Recorder(b, "a", request(max_new=1000)), Recorder(b, "b", request(max_new=1000))
    a.start()
    c.start()
    wait_for(lambda: b.pool.free == 0 and len(b.active_workers()) == 2)
    third = Recorder(b, "c", request())
    third.start()
    wait_for(lambda: third.first("Waiting for a free device") and b.pool.waiting == 1)
    b.stop("a")                              # Stop: a's device goes to the Run waiting in line
    third.join()
    a.join()
    assert a.last["status"].startswith("**Stopped.**") and third.last["device"] == a.last["device"]
    assert third.last["status"].startswith("**Done.**")
    b.stop("b")
    c.join()
    assert b.pool.free == 2 and b.pool.waiting == 0

    bad = Recorder(b, "d", request(video=VIDEO + ".bad"))   # the fake engine cannot read it: the Run fails
    bad.run()
    assert "error" in bad.last and b.pool.free == 2

    gen = b.run(request(max_new=1000), session="e")   # the page closes mid-run: the generator is closed
    for upd in gen:
        if b.pool.free == 1 and "vanilla_stats" in upd:
            break
    gen.close()
    assert b.pool.free == 2 and b.pool.waiting == 0
    wait_for(lambda: not b.active_workers())


def test_a_run_stopped_while_waiting_leaves_the_line():
    b = Backend(FakeEngine(step_s=0.01), update_interval_s=0.02)
    busy = Recorder(b, "a", request(max_new=1000))
    busy.start()
    wait_for(lambda: b.pool.free == 0)
    waiting = Recorder(b, "b", request())
    waiting.start()
    wait_for(lambda: b.pool.waiting == 1)
    b.stop("b")
    waiting.join()
    assert waiting.last["status"].startswith("**Stopped.**") and b.pool.waiting == 0
    b.stop("a")
    busy.join()
    assert b.pool.free == 1


def test_pool_order_labels_and_misuse():
    pool = DevicePool(["cuda:0", "cuda:1"])
    t1, t2, t3 = pool.join(), pool.join(), pool.join()
    assert pool.take(t2, timeout_s=0) is None   # not first in line
    s1, s2 = pool.take(t1), pool.take(t2)
    assert (s1.device, s2.device, pool.ahead(t3), pool.take(t3, timeout_s=0)) == ("cuda:0", "cuda:1", 0, None)
    pool.give(s2)
    assert pool.take(t3).device == "cuda:1" and pool.waiting == 0
    with pytest.raises(RuntimeError, match="twice"):
        pool.give(s1) or pool.give(s1)
    assert [DevicePool(["cpu", "cpu"]).label(s) for s in DevicePool(["cpu", "cpu"]).slots] == ["cpu #1", "cpu #2"]
    with pytest.raises(DeviceError):
        DevicePool([])


def test_devices_flag_and_the_default_device_list():
    assert parse_devices("cuda:0, cuda:1", 2) == ["cuda:0", "cuda:1"] and parse_devices("cpu,cpu", 0) == ["cpu"] * 2
    for text, words in (("", "names no device"), ("cuda:2", "not visible"), ("cuda:0,cuda", "named twice"),
                        ("tpu", "not a device")):
        with pytest.raises(DeviceError, match=words):
            parse_devices(text, 2)
    gb = 2**30
    gpus = [SimpleNamespace(index=0, free_bytes=80 * gb), SimpleNamespace(index=1, free_bytes=10 * gb)]
    preset = SimpleNamespace(target="/nonexistent/model", draft=None, num_frames=16, max_new_tokens=32, name="x")
    assert default_devices(preset, gpus) == ["cuda:0", "cuda:1"]   # size unknown: every GPU
    assert default_devices(preset, []) == [None]


def test_app_py_devices_flag(capsys):
    import importlib.util

    from app.page import gradio_io, ui

    spec = importlib.util.spec_from_file_location("app_main", ROOT / "app.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    parse_args, serving_devices = mod.parse_args, mod.serving_devices
    args = parse_args(["--devices", "cpu,cpu"])
    assert serving_devices(args) == ["cpu", "cpu"] and serving_devices(parse_args(["--device", "cpu"])) == ["cpu"]
    with pytest.raises(SystemExit):
        parse_args(["--device", "cpu", "--devices", "cpu"])
    assert "give one of them" in capsys.readouterr().err
    demo = ui.build_demo(Backend(FakeEngine(), devices=["cpu", "cpu"]), examples=[])
    fns = {fn.api_name: fn for fn in demo.fns.values()}
    assert fns["compare"].concurrency_limit == 2 and fns["compare_json"].concurrency_limit == 2
    assert gradio_io.queued_runs(demo, ui.GPU_QUEUE) == 0   # nothing queued (and no server): the status line's count
