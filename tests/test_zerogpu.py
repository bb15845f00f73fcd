"""The app on a ZeroGPU Space, emulated on a CPU with the real ``spaces`` package (see
tests/zerogpu_scenario.py): a full Run with the bundled pair, Stop by cancel and by /stop (the
worker's decode ends and the device is released within 10 s), Inspect and Export after a Run.
Plus the plain-data contract of the GPU function and its duration."""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from multiprocessing.reduction import ForkingPickler
from pathlib import Path

import numpy as np
import pytest

from test_app_fakes import FakeEngine, engine_ready

from app.backend import Backend
from app.settings import RunRequest, RunSettings
from app.worker import GpuTime, RunJob, gpu_function, size_factor

ROOT = Path(__file__).resolve().parent.parent


def _roundtrip(obj):
    buf = io.BytesIO()
    ForkingPickler(buf).dump(obj)
    return ForkingPickler.loads(buf.getvalue())


@pytest.fixture(autouse=True)
def _clip(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "clip.mp4").write_bytes(b"\x00" * 16)


def test_the_gpu_function_takes_and_yields_plain_data_only():
    """Every batch the worker yields (and its job) survives ForkingPickler unchanged; no Gradio object."""
    b = Backend(FakeEngine(step_s=0.0), update_interval_s=0.0)
    job, _, _ = b.prepare(RunRequest("clip.mp4", "Describe.", RunSettings(preset="Fake tiny (CPU)", num_frames=4,
                                                                          max_new_tokens=12)))
    assert _roundtrip(job) == job
    batches = list(b.gpu_run(job))
    kinds = set()
    for batch in batches:
        back = _roundtrip(batch)
        assert len(back) == len(batch) and isinstance(back, list)
        for msg, again in zip(batch, back):
            kinds.add(type(msg).__name__)
            assert type(msg).__module__ == "app.worker" and type(again) is type(msg)
            if type(msg).__name__ != "Prefill" or msg.heatmaps is None:
                assert again == msg
            else:
                img, cap = msg.heatmaps["stages"][0]
                np.testing.assert_array_equal(again.heatmaps["stages"][0][0], img)
    assert {"Phase", "ClipReady", "Prefill", "Step", "RunEnd", "Outcome"} <= kinds


def test_gpu_duration_grows_with_frames_tokens_and_model_size():
    from specvlm.config import DecodeConfig, VideoConfig

    def job(frames, tokens, target="assets/model/target"):
        return RunJob("v.mp4", "p", DecodeConfig(max_new_tokens=tokens), VideoConfig(num_frames=frames), (target, None))

    t = GpuTime()
    assert t.seconds(job(8, 24)) == t.min_s
    assert t.seconds(job(64, 256)) < t.seconds(job(128, 512)) < t.seconds(job(128, 512, "Qwen/Qwen2.5-VL-32B-Instruct"))
    assert t.seconds(job(256, 1024, "llava-hf/llava-onevision-qwen2-72b-ov-hf")) == t.max_s
    assert size_factor(("Qwen/Qwen2.5-VL-7B-Instruct", None)) == 1.0 and size_factor(("x/Model-72B", None)) == 8.0


def test_off_zerogpu_the_decorator_changes_nothing(monkeypatch):
    monkeypatch.delenv("SPACES_ZERO_GPU", raising=False)
    fn = Backend(FakeEngine()).worker.run
    assert gpu_function(fn) == fn   # spaces installed, not on ZeroGPU: a no-op


@pytest.fixture(scope="module")
def zerogpu():
    reason = engine_ready()
    if reason:
        pytest.skip(reason)
    pytest.importorskip("spaces")
    env = dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    r = subprocess.run([sys.executable, str(ROOT / "tests" / "zerogpu_scenario.py")], capture_output=True, text=True,
                       cwd=ROOT, env=env, timeout=400)
    line = next((ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")), None)
    assert r.returncode == 0 and line, r.stderr[-3000:]
    return json.loads(line[len("RESULT "):])


@pytest.mark.timeout(420)
def test_zerogpu_full_run_with_the_bundled_pair(zerogpu):
    z = zerogpu
    assert z["decorated"], "spaces.GPU did not wrap the GPU function in ZeroGPU mode"
    assert z["status"].startswith("**Done.**") and "Outputs identical" in z["summary"], z["summary"]
    assert "τ =" in z["summary"] and "kept" in z["summary"] and z["gallery"] > 0
    assert "· done ·" in z["vanilla_stats"] and "· done ·" in z["spec_stats"]
    assert z["updates"] >= 5                      # it streamed, not one final update
    assert z["parent_streams"] == 0 and z["parent_workers"] == 0   # decoded in the worker process only
    assert z["schedules"][0] == GpuTime().min_s and z["schedules"][1] > z["schedules"][0]   # sized per Run
    assert z["releases"] and set(z["releases"]) == {"false"}       # every GPU window released cleanly


@pytest.mark.timeout(420)
def test_zerogpu_inspect_and_export_after_a_run(zerogpu):
    z = zerogpu
    assert z["record_steps"] > 1 and z["record_tokens"] > 0     # the record came back through the outputs
    assert z["export_steps"] == z["record_steps"] and z["export_bytes"] > 1000
    assert "τ =" in z["inspect_summary"] and "video tokens kept" in z["inspect_summary"]


@pytest.mark.timeout(420)
def test_zerogpu_stop_ends_the_worker_and_releases_the_gpu(zerogpu):
    z = zerogpu
    # cancel (what Gradio's cancels= does: close the handler's generator)
    assert z["cancel_release_s"] is not None and z["cancel_release_s"] < 10 and z["cancel_fail"] == "false"
    assert z["cancel_close_s"] < 10 and z["cancel_parent_polls"] == 0   # the engine polled in the worker only
    # /stop (the session's flag closes the worker's generator)
    assert z["stop_message"].startswith("Stopping")
    assert z["stop_release_s"] is not None and z["stop_release_s"] < 10 and z["stop_end_s"] < 10
    assert z["stop_status"].startswith("**Stopped.**") and "· stopped ·" in z["stop_vanilla_stats"]
    assert z["next_status"].startswith("**Done.**") and "Outputs identical" in z["next_summary"]
