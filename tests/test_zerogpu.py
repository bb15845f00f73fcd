"""The app on a ZeroGPU Space.

``app.py`` started as a Space starts it, under the real ``spaces`` package in ZeroGPU mode against a
stand-in device API (tests/zerogpu_space.py): the default pair (random stand-ins of the bundled pair with
its tokenizer and processor, :mod:`helpers.bundled_like`: the Space's mechanics, not the model, are under
test) loads at start to emulated ``cuda`` in bf16 (no device or dtype given), a whole Run decodes in the
worker process ``spaces`` forks, Stop releases the device within 2 s, Inspect and Export work from the
returned record, a killed worker and a used-up quota each give one line with the partial texts kept.
Plus, without ``spaces``: the plain-data contract of the GPU function, its size and duration, the
presets ZeroGPU can run, and how a Run ends
(Done only with both outcomes; ZeroGPU's errors in the user's terms)."""
from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from multiprocessing.reduction import ForkingPickler
from pathlib import Path

import gradio as gr
import numpy as np
import pytest

from helpers.fakes import FakeEngine, FakeTokenizer

from app.inputs.settings import RunRequest, RunSettings
from app.runs import zerogpu
from app.runs.backend import Backend
from app.runs.worker import RunJob

ROOT = Path(__file__).resolve().parent.parent


def _roundtrip(obj):
    buf = io.BytesIO()
    ForkingPickler(buf).dump(obj)
    return ForkingPickler.loads(buf.getvalue())


@pytest.fixture(autouse=True)
def _clip(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "clip.mp4").write_bytes(b"\x00" * 16)


def _job(frames: int, tokens: int, target: str, draft: str | None = None) -> RunJob:
    from specvlm.config import DecodeConfig, VideoConfig
    return RunJob("v.mp4", "p", DecodeConfig(max_new_tokens=tokens), VideoConfig(num_frames=frames),
                  (target, draft))


def _request(max_new: int = 12) -> RunRequest:
    return RunRequest("clip.mp4", "Describe.", RunSettings(preset="Fake tiny (CPU)", num_frames=4,
                                                           max_new_tokens=max_new))


# ---- the GPU function: plain data, size, duration -------------------------------------------------

def test_the_gpu_function_takes_and_yields_plain_data_only():
    """Every batch the worker yields (and its job) survives ForkingPickler unchanged; no Gradio object."""
    b = Backend(FakeEngine(step_s=0.0), update_interval_s=0.0)
    job, _, _ = b.prepare(_request())
    assert _roundtrip(job) == job
    batches = list(b.gpu_run(job))
    kinds = set()
    for batch in batches:
        back = _roundtrip(batch)
        assert len(back) == len(batch) and isinstance(back, list)
        for msg, again in zip(batch, back):
            kinds.add(type(msg).__name__)
            assert type(msg).__module__ in ("app.runs.worker", "app.runs.timing", "app.runs.progress",
                                            "specvlm.analysis.run")
            assert type(again) is type(msg)
            if type(msg).__name__ != "Heatmaps":
                assert again == msg
            else:
                img, cap = msg.data["stages"][0]
                np.testing.assert_array_equal(again.data["stages"][0][0], img)
            if type(msg).__name__ == "RunEvents":   # the engine's own events, as plain data
                assert all(type(ev).__name__ in ("dict", "StepEvent") for ev in msg.events)
    assert {"Phase", "ClipReady", "Heatmaps", "RunEvents", "Comparison"} <= kinds


def _zerogpu_default_job(monkeypatch) -> RunJob:
    """The default ZeroGPU Run: the default preset with the frames and new tokens the page suggests there (its
    graphs are captured inside the GPU task)."""
    from specvlm.models.presets import GPU_DEFAULTS, PRESETS

    class Engine(FakeEngine):
        def presets(self):
            return dict(PRESETS)

        def default_preset(self):
            return GPU_DEFAULTS[0]   # with CUDA (ZeroGPU's emulation says so), the models cached or the Hub up

    monkeypatch.setattr(zerogpu, "active", lambda: True)
    d = Backend(Engine()).default_settings()
    assert d.preset == GPU_DEFAULTS[0]
    assert (d.num_frames, d.max_new_tokens) == (zerogpu.DEFAULT_FRAMES, zerogpu.DEFAULT_NEW_TOKENS) == (64, 128)
    p = PRESETS[d.preset]
    return _job(d.num_frames, d.max_new_tokens, p.target, p.draft)


@pytest.mark.filterwarnings("ignore:Error while reading infos from Nvidia driver FS")  # spaces, without a GPU
def test_the_default_zerogpu_run_needs_under_a_minute_and_the_duration_grows_with_the_work(monkeypatch):
    from specvlm.models.presets import PRESETS, QWEN7_SELF

    t, p = zerogpu.GpuTime(), PRESETS[QWEN7_SELF]
    default = _zerogpu_default_job(monkeypatch)
    # 10 s start + 64 frames * 0.22 s + 2 runs * 128 tokens * 0.075 s * 1.31 (8B + 2B weights over a 7B's)
    # + 10 s graph capture = 59.3 s
    assert zerogpu.weight_factor(default) == pytest.approx((8.77 + 2.13) * 2 / 16.6)
    assert t.seconds(default) == 60 and zerogpu.reserved_seconds(default) <= 60
    self7 = _job(64, 128, p.target)
    assert t.seconds(self7) == 54
    paper = _job(p.num_frames, p.max_new_tokens, p.target)    # 128 frames, 256 tokens: over a minute
    assert t.seconds(paper) == 87
    assert t.seconds(_job(8, 24, "assets/model/target")) == 26   # 10 + 1.76 + 3.6 + 10 (graph capture)
    assert t.seconds(_job(32, 128, p.target)) < t.seconds(self7) < t.seconds(_job(64, 256, p.target))
    assert t.seconds(_job(64, 256, p.target)) < t.seconds(paper)
    big = t.seconds(_job(64, 128, "Qwen/Qwen3-VL-30B-A3B-Instruct", "Qwen/Qwen3-VL-8B-Instruct"))
    assert t.seconds(default) < big < t.max_s    # ~80 GB of weights read per step: slower per token
    assert t.seconds(_job(256, 1024, "llava-hf/llava-onevision-qwen2-72b-ov-hf")) == t.max_s
    assert zerogpu.weight_factor(_job(16, 16, "someone/Custom-VL-72B")) == pytest.approx(72 * 2e9 / 16.6e9)
    assert zerogpu.weight_factor(_job(16, 16, "someone/custom-vl")) == 1.0
    monkeypatch.setattr(zerogpu, "active", lambda: False)
    assert zerogpu.default_budget(128, 256) == (128, 256)    # elsewhere the presets' own settings


def test_what_spaces_is_asked_for_and_what_it_reserves_on_the_rtx_pro_6000(monkeypatch):
    """spaces stretches a ``large`` request by the hardware's duration factor (1.5 on the RTX Pro 6000): the app
    asks for the estimate over it, so what is reserved (and counted against the quota) is the estimate."""
    default = _zerogpu_default_job(monkeypatch)
    monkeypatch.setattr(zerogpu, "duration_factor", lambda size: 1.5 if size == "large" else 1.0)
    assert zerogpu.requested_seconds(default) == 40 and zerogpu.reserved_seconds(default) == 60   # 60 s needed
    moe = _job(128, 256, "Qwen/Qwen3-VL-30B-A3B-Instruct", "Qwen/Qwen3-VL-8B-Instruct")   # xlarge: not stretched
    assert zerogpu.requested_seconds(moe) == zerogpu.reserved_seconds(moe) == zerogpu.GpuTime().seconds(moe)
    assert zerogpu.reserve_note(default) == "reserves up to 60 s of GPU time"
    assert zerogpu.reserve_note(moe) == (f"reserves up to {zerogpu.reserved_seconds(moe)} s of GPU time on a whole "
                                         "GPU (xlarge: it counts twice against the daily quota)")


def test_xlarge_only_for_pairs_over_the_large_size():
    from specvlm.models.presets import PRESETS, QWEN7_SELF

    p = PRESETS[QWEN7_SELF]
    assert zerogpu.gpu_size(_job(p.num_frames, p.max_new_tokens, p.target)) == "large"  # ~21 GB
    moe = _job(128, 256, "Qwen/Qwen3-VL-30B-A3B-Instruct", "Qwen/Qwen3-VL-8B-Instruct")
    assert zerogpu.job_estimate(moe).total > zerogpu.LARGE_BYTES and zerogpu.gpu_size(moe) == "xlarge"
    assert zerogpu.gpu_size(_job(128, 256, "someone/unknown-model")) == "large"   # size unknown: the default


def test_zerogpu_offers_only_presets_that_fit_the_whole_gpu():
    from specvlm.models.fit import preset_estimate
    from specvlm.models.presets import PRESETS

    offered = zerogpu.fitting_presets(PRESETS)
    assert "Qwen2.5-VL-7B Self-SD" in offered and "Qwen3-VL-30B-A3B + 8B draft" in offered
    for name in ("LLaVA-OneVision-72B + 7B draft", "Qwen2.5-VL-32B + 7B draft", "Qwen3-VL-32B + 8B draft"):
        assert name not in offered and preset_estimate(PRESETS[name]).total > zerogpu.XLARGE_BYTES
    assert list(offered) == [n for n in PRESETS if n in offered]   # the presets' order


@pytest.mark.filterwarnings("ignore:Error while reading infos from Nvidia driver FS")  # spaces, without a GPU
def test_the_dropdown_and_the_page_on_zerogpu(monkeypatch):
    from specvlm.models.presets import PRESETS, QWEN7_SELF

    class Engine(FakeEngine):
        def presets(self):
            return dict(PRESETS)

    monkeypatch.setattr(zerogpu, "active", lambda: True)
    b = Backend(Engine())
    names = b.preset_names()
    assert QWEN7_SELF in names and "LLaVA-OneVision-72B + 7B draft" not in names
    text, frames, tokens = b.preset_info(QWEN7_SELF)
    assert "On ZeroGPU a Run with these frames and new tokens reserves up to 54 s of GPU time." in text   # static
    assert (frames, tokens) == (64, 128)
    assert "whole GPU (xlarge" in b.preset_info("Qwen3-VL-30B-A3B + 8B draft")[0]
    monkeypatch.setattr(zerogpu, "active", lambda: False)
    assert len(b.preset_names()) == len(PRESETS) and "reserves" not in b.preset_info(QWEN7_SELF)[0]
    assert b.preset_info(QWEN7_SELF)[1] == PRESETS[QWEN7_SELF].num_frames


def test_on_zerogpu_the_library_loads_weights_in_the_calling_thread_for_the_load_only(monkeypatch):
    """``specvlm.load_pair`` on a ZeroGPU Space (``spaces`` imported, ``SPACES_ZERO_GPU`` true) loads with
    ``HF_DEACTIVATE_ASYNC_LOAD=1`` (what transformers' loader reads) and restores it after; elsewhere it is
    left alone."""
    import types

    from specvlm.models import loading

    seen = []

    def fake_load(path, device, dtype, device_map):
        seen.append(os.environ.get("HF_DEACTIVATE_ASYNC_LOAD"))
        raise loading.ModelLoadError("stop here")

    monkeypatch.setattr(loading, "_load_one", fake_load)
    monkeypatch.setattr(loading, "plan_device_map", lambda *a: None)
    monkeypatch.setitem(sys.modules, "spaces", types.ModuleType("spaces"))
    monkeypatch.setenv("SPACES_ZERO_GPU", "true")
    monkeypatch.delenv("HF_DEACTIVATE_ASYNC_LOAD", raising=False)
    with pytest.raises(loading.ModelLoadError):
        loading.load_pair("t", "d", device="cpu")
    assert seen == ["1"] and "HF_DEACTIVATE_ASYNC_LOAD" not in os.environ
    monkeypatch.setenv("HF_DEACTIVATE_ASYNC_LOAD", "0")
    with loading.synchronous_loading():
        assert os.environ["HF_DEACTIVATE_ASYNC_LOAD"] == "1"
    assert os.environ["HF_DEACTIVATE_ASYNC_LOAD"] == "0"
    monkeypatch.delitem(sys.modules, "spaces")           # SPACES_ZERO_GPU without spaces: not ZeroGPU
    monkeypatch.delenv("HF_DEACTIVATE_ASYNC_LOAD")
    with pytest.raises(loading.ModelLoadError):
        loading.load_pair("t", "d", device="cpu")
    assert seen == ["1", None]


def test_off_zerogpu_the_gpu_function_is_the_worker_itself(monkeypatch):
    monkeypatch.delenv("SPACES_ZERO_GPU", raising=False)
    fn = Backend(FakeEngine()).worker.run
    assert zerogpu.gpu_function(fn) == fn and not zerogpu.active()


# ---- how a Run ends ----------------------------------------------------------------------------

def _cut(b: Backend, after_steps: int, error: Exception | None):
    """Make ``b``'s GPU function stop after ``after_steps`` vanilla steps: end, or raise ``error``."""
    import dataclasses

    from specvlm.types import StepEvent
    run = b.gpu_run

    def cut(job):
        seen = 0
        for batch in run(job):
            out = []
            for m in batch:
                if type(m).__name__ == "RunEvents" and m.run == "vanilla":
                    evs = []
                    for ev in m.events:
                        evs.append(ev)
                        seen += isinstance(ev, StepEvent)
                        if seen == after_steps:
                            yield out + [dataclasses.replace(m, events=tuple(evs), finished=False)]
                            if error is not None:
                                raise error
                            return
                out.append(m)
            yield out
    b.gpu_run = cut


def test_a_gpu_function_that_ends_early_is_an_error_not_done():
    b = Backend(FakeEngine(step_s=0.0), update_interval_s=0.0)
    _cut(b, 5, None)
    ups = list(b.run(_request(12)))
    last = ups[-1]
    assert last["status"] == ("**Error:** The GPU work ended after 5 of 12 vanilla tokens without both results: "
                              "try again.")
    assert FakeTokenizer().decode(FakeEngine().tokens(5)) in last["vanilla_html"]   # the partial text stays
    assert "· error ·" in last["vanilla_stats"] and "5 tokens" in last["vanilla_stats"]
    assert "Outputs identical" not in last["summary"] and last["error"] == last["status"].removeprefix("**Error:** ")


def test_zerogpu_aborting_the_worker_when_its_time_is_up(monkeypatch):
    monkeypatch.setattr(zerogpu, "reserve_note", lambda job: "reserves up to 0 s of GPU time")
    monkeypatch.setattr(zerogpu, "reserved_seconds", lambda job: 0)
    b = Backend(FakeEngine(step_s=0.0), update_interval_s=0.0)
    _cut(b, 3, gr.Error("GPU task aborted", title="ZeroGPU worker error"))
    ups = list(b.run(_request(12)))
    assert "Waiting for a ZeroGPU device: this Run reserves up to 0 s of GPU time…" in [u.get("status") for u in ups]
    assert ups[-1]["status"] == ("**Error:** The GPU time ran out (0 s reserved) after 3 of 12 vanilla tokens: "
                                 "try fewer frames or fewer new tokens.")
    assert FakeTokenizer().decode(FakeEngine().tokens(3)) in ups[-1]["vanilla_html"]


@pytest.mark.parametrize("error, reserved, elapsed, line", [
    (gr.Error("GPU task aborted", title="ZeroGPU worker error"), 45, 50.0,
     "The GPU time ran out (45 s reserved) after 14 of 128 vanilla tokens: try fewer frames or fewer new tokens."),
    (gr.Error("GPU task aborted", title="ZeroGPU worker error"), 45, 3.2,
     "The GPU worker stopped after 14 of 128 vanilla tokens (GPU task aborted after 3 s): try again, or fewer "
     "frames or fewer new tokens."),
    (gr.Error("You have exceeded your free ZeroGPU quota (60s requested vs. 12s left). Try again in 0:10:00.",
              title="ZeroGPU quota exceeded"), 45, 0.1,
     "Your ZeroGPU quota is used up: it resets 24 h after first use; signing in to Hugging Face (or PRO) gives "
     "more. ZeroGPU says: You have exceeded your free ZeroGPU quota (60s requested vs. 12s left). Try again in "
     "0:10:00."),
    (gr.Error("The requested GPU duration (400s) is larger than the maximum allowed", title="ZeroGPU illegal duration"),
     400, 0.1, "This Run asks for more GPU time than ZeroGPU allows: try fewer frames or fewer new tokens (The "
               "requested GPU duration (400s) is larger than the maximum allowed)."),
    (gr.Error("No GPU was available after 60s", title="ZeroGPU queue timeout"), 45, 60.0,
     "No ZeroGPU device was free (No GPU was available after 60s): try again in a minute."),
    (gr.Error("Something else"), 45, 1.0, None),
    (RuntimeError("CUDA error"), 45, 1.0, None),
])
def test_zerogpu_errors_in_one_line(error, reserved, elapsed, line):
    assert zerogpu.abort_message(error, "after 14 of 128 vanilla tokens", reserved, elapsed) == line


# ---- app.py on a ZeroGPU Space (real spaces, stand-in device API) ---------------------------------

@pytest.fixture(scope="module")
def stand_in(tmp_path_factory) -> tuple[str, str]:
    """(target, draft) folders: random stand-ins of the bundled pair (its tokenizer, processor and special ids)."""
    from helpers.bundled_like import bundled_like_pair

    return tuple(map(str, bundled_like_pair(tmp_path_factory.mktemp("bundled-like"))))


def _start_space(*flags: str) -> dict:
    """Run tests/zerogpu_space.py (``app.py`` started as a Space starts it) and return its RESULT line."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    for name in ("SPECVLM_THREADS", "HF_DEACTIVATE_ASYNC_LOAD", "SPACES_ZERO_GPU"):
        env.pop(name, None)
    try:
        r = subprocess.run([sys.executable, str(ROOT / "tests" / "zerogpu_space.py"), *flags], capture_output=True,
                           text=True, cwd=ROOT, env=env, timeout=400)
    except subprocess.TimeoutExpired as e:
        out = [(x or b"").decode(errors="replace") if isinstance(x, bytes) else (x or "") for x in (e.stdout, e.stderr)]
        pytest.fail(f"zerogpu_space.py ran past 400 s; stdout tail:\n{out[0][-3000:]}\nstderr tail:\n{out[1][-6000:]}")
    line = next((ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")), None)
    assert r.returncode == 0 and line, (r.stdout[-2000:], r.stderr[-4000:])
    return json.loads(line[len("RESULT "):])


@pytest.fixture(scope="module")
def space(stand_in):
    return _start_space("--stand-in", *stand_in)


@pytest.fixture(scope="module")
def plain_space(stand_in):
    """``app.py``'s ``serve`` in this process without ``spaces`` (``python app.py`` itself runs as a subprocess in
    tests/test_app_server_log.py): the page's Run through the server, as :func:`_start_space` reports it."""
    import torch

    from helpers.fakes import free_port, sample_video
    from helpers.served import app_main, through_server

    from helpers.bundled_like import bundled_like_presets

    from specvlm.models.presets import PRESETS
    from specvlm.runtime import threads

    before = torch.get_num_threads()
    with pytest.MonkeyPatch.context() as mp:
        for name in ("SPECVLM_THREADS", "HF_DEACTIVATE_ASYNC_LOAD", "SPACES_ZERO_GPU"):
            mp.delenv(name, raising=False)
        for name, preset in bundled_like_presets(*stand_in).items():
            mp.setitem(PRESETS, name, preset)
        demo = app_main().serve(["--port", str(free_port())])
        try:
            return through_server(demo.server_port, str(sample_video()))
        finally:
            demo.close()
            torch.set_num_threads(before)      # serve() chose the process's threads and policy
            threads._POLICY = None


@pytest.mark.timeout(420)
def test_app_py_on_zerogpu_loads_to_emulated_cuda_at_start(space, stand_in):
    from specvlm.models.presets import BUNDLED_STD

    assert space["decorated"], "spaces.GPU did not wrap the GPU function in ZeroGPU mode"
    assert space["default_preset"] == BUNDLED_STD   # offline: the bundled pair, the 7B is not cached
    assert space["loaded_target"] == stand_in[0]    # here its stand-in (tests/zerogpu_space.py --stand-in)
    assert space["loaded"]["asked"] == [None, None] and space["loaded"]["devices"] == 1   # app.py chose them
    assert space["loaded"]["device"] == "cuda:0" and space["loaded"]["dtype"] == "torch.bfloat16"
    assert "Models load on the first Run" not in space["footer"]


@pytest.mark.timeout(420)
def test_app_py_on_zerogpu_runs_in_the_worker_to_done(space):
    z = space
    assert z["status"].startswith("**Done.**") and "Outputs identical" in z["summary"], z["summary"]
    assert "τ =" in z["summary"] and "kept" in z["summary"] and z["gallery"] > 0
    assert "· done ·" in z["vanilla_stats"] and "· done ·" in z["spec_stats"]
    assert z["updates"] >= 5                      # it streamed, not one final update
    assert z["parent_streams"] == 0 and z["parent_workers"] == 0   # decoded in the worker process only
    reserved, t = z["schedules"][0][0], zerogpu.GpuTime()
    assert z["waiting"] == [f"Waiting for a ZeroGPU device: this Run reserves up to {reserved} s of GPU time…"]
    # sized per Run (a short bundled Run: the floor, plus the graph capture of the static engine, CUDA's default),
    # size large (the default)
    assert t.min_s < reserved <= t.min_s + t.capture_s and z["schedules"][0][1] is None
    assert z["schedules"][1][0] > z["schedules"][0][0]
    assert z["next_status"].startswith("**Done.**") and "Outputs identical" in z["next_summary"]


@pytest.mark.timeout(420)
def test_app_py_on_zerogpu_inspect_and_export_from_the_record(space):
    z = space
    assert z["record_steps"] > 1 and z["record_tokens"] > 0     # the record came back through the outputs
    assert z["export_steps"] == z["record_steps"] and z["export_bytes"] > 1000
    assert "τ =" in z["inspect_summary"] and "video tokens kept" in z["inspect_summary"]


@pytest.mark.timeout(420)
def test_app_py_on_zerogpu_stop_and_a_closed_page_release_the_device(space):
    z = space
    assert z["closed_release_s"] is not None and z["closed_fail"] == "false"   # released, as a success
    assert z["stop_message"].startswith("Stopping")
    assert z["stop_release_s"] is not None and z["stop_fail"] == "false"
    assert z["stop_status"].startswith("**Stopped.**") and "· stopped ·" in z["stop_vanilla_stats"]
    decoded = [int(n) for n in re.findall(r"(\d+) tokens", z["stop_vanilla_stats"])]
    assert decoded and 0 < decoded[0] < 400, z["stop_vanilla_stats"]   # ended by Stop, not by its 400-token budget


@pytest.mark.timeout(420)
def test_app_py_on_zerogpu_a_killed_worker_and_a_used_up_quota_give_one_line(space):
    z = space
    assert z["killed_status"].startswith("**Error:** The GPU worker stopped after ")
    assert "of 400 vanilla tokens (GPU task aborted after" in z["killed_status"]
    assert "· error ·" in z["killed_vanilla_stats"] and z["killed_text_kept"]
    assert z["quota_status"].startswith("**Error:** Your ZeroGPU quota is used up: it resets 24 h after first use")
    assert "true" in z["releases"]                # the killed Run's device released as failed
    assert z["next_status"].startswith("**Done.**")   # and the next Run gets a fresh worker


def test_the_capture_term_is_added_to_every_run():
    t = zerogpu.GpuTime()
    assert t.seconds(_job(16, 32, "assets/model/target")) == 29                       # 18.3 s + 10 s capture
    assert zerogpu.GpuTime(capture_s=3.0).seconds(_job(16, 32, "assets/model/target")) == 22


@pytest.mark.timeout(420)
@pytest.mark.parametrize("mode", ["zerogpu", "plain"])
def test_app_py_the_finished_page_keeps_both_texts(mode, request):
    """The page's Run through the server (``gradio_client``), folded as the browser folds it: after Done both
    panels show the run's output (what ``/compare_json`` returns for the same inputs), on ZeroGPU and off it."""
    z = request.getfixturevalue("space" if mode == "zerogpu" else "plain_space")
    assert z["served_status"].startswith("**Done.**") and z["json_status"] == "done"
    assert z["json_vanilla"] and z["json_vanilla"] == z["json_spec"]
    assert z["served_vanilla"] == z["json_vanilla"]
    assert z["served_spec"] == z["json_spec"]
    assert z["json_vanilla"] in z["served_streamed"][:-1]   # it streamed in before the last update
