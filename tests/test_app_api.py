"""The HTTP API as a script meets it (``gradio_client`` against the app launched on 127.0.0.1): named
parameters with defaults (all but the video), integer settings typed as integers, named outputs, plain
values on an error, and ``/compare_json``."""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from helpers.fakes import FakeEngine, free_port, sample_video

from app.inputs.settings import COMPARE_INPUTS, DEFAULT_PROMPT, RunSettings  # noqa: E402


@pytest.fixture(scope="module")
def served():
    from gradio_client import Client

    from app.page.ui import build_demo
    from app.runs.backend import Backend
    video = sample_video()
    demo = build_demo(Backend(FakeEngine(step_s=0.0)), examples=[])
    port = free_port()
    demo.queue().launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    try:
        yield Client(f"http://127.0.0.1:{port}/", verbose=False), video
    finally:
        demo.close()


def test_parameters_named_with_defaults_and_integer_types(served):
    client, _ = served
    api = client.view_api(return_format="dict", print_info=False)["named_endpoints"]
    for name in ("/compare", "/compare_json"):
        params = api[name]["parameters"]
        assert [p["parameter_name"] for p in params] == list(COMPARE_INPUTS)
        assert [p["parameter_name"] for p in params if not p["parameter_has_default"]] == ["video"]
        types = {p["parameter_name"]: p["type"]["type"] for p in params}
        for integer in ("depth", "top_k", "total", "frames", "max_new_tokens", "max_new", "seed"):
            assert types[integer] == "integer", (name, integer, types[integer])
        assert types["drop_rate"] == "number" and types["custom"] == "string"
        defaults = {p["parameter_name"]: p.get("parameter_default") for p in params}   # from app.inputs.settings.FIELDS
        assert defaults["prompt"] == DEFAULT_PROMPT and defaults["hm_mode"] == "Pruning stages"
        assert defaults["seed"] == RunSettings().seed and defaults["fixed_length"] is RunSettings().fixed_length
        assert defaults["lambda_"] == RunSettings().top_p and types["lambda_"] == "number"   # the CLI's names
        assert [defaults[k] for k in ("tree", "depth", "top_k", "total", "min_prob", "frames", "max_new_tokens")] \
            == [None] * 7                                                      # left out: the preset's
        assert defaults["top_p"] is None and defaults["max_new"] is None       # old names: used only when given
    labels = [r["label"] for r in api["/compare"]["returns"]]
    assert labels[:6] == ["Status", "Vanilla text", "Vanilla stats", "SpecVLM text", "SpecVLM stats", "Summary"]
    assert not any(lbl.startswith("value_") for lbl in labels)
    assert [r["label"] for r in api["/compare_json"]["returns"]] == ["Comparison (JSON)"]
    assert "JSON" in api["/compare_json"]["description"]


def test_compare_json_with_only_the_video(served):
    from gradio_client import handle_file
    client, video = served
    out = client.predict(handle_file(str(video)), api_name="/compare_json")
    out = json.loads(out) if isinstance(out, str) else out
    assert out["status"] == "done" and out["error"] is None
    van, spec = out["vanilla"], out["speculative"]
    assert van["text"] and van["text"] == spec["text"] and van["token_ids"] == spec["token_ids"]
    assert out["identical"] is True and out["divergence"] is None
    assert len(van["token_ids"]) == van["tokens"] > 0
    acc = out["accept_lengths"]
    assert acc and out["tau"] == pytest.approx(sum(acc) / len(acc), abs=1e-3)
    assert out["speedup"] > 0 and out["kept_tokens"] < out["video_tokens"]
    json.dumps(out)  # one plain JSON object


def test_the_cli_names_and_the_old_names_of_lambda_and_the_token_budget(served, caplog):
    """``lambda_`` / ``max_new_tokens`` as on the command line; ``top_p`` / ``max_new`` still work, with a note
    in the response and the server log."""
    from gradio_client import handle_file
    client, video = served
    new = client.predict(handle_file(str(video)), lambda_=0.3, max_new_tokens=7, api_name="/compare_json")
    assert new["status"] == "done" and new["vanilla"]["tokens"] == 7
    assert not any("old name" in n for n in new["notes"])
    with caplog.at_level("WARNING", logger="app.page.ui"):
        old = client.predict(handle_file(str(video)), top_p=0.3, max_new=5, api_name="/compare_json")
    assert old["status"] == "done" and old["vanilla"]["tokens"] == 5
    assert old["notes"][:2] == ["'top_p' is the old name of 'lambda_' (as on the command line): it still works, "
                                "use 'lambda_'",
                                "'max_new' is the old name of 'max_new_tokens' (as on the command line): it still "
                                "works, use 'max_new_tokens'"]
    assert any("'max_new' is the old name" in r.getMessage() for r in caplog.records)


def test_compare_with_only_the_video_and_an_error_gives_plain_values(served):
    from gradio_client import handle_file
    client, video = served
    ok = client.predict(handle_file(str(video)), api_name="/compare")
    assert ok[0].startswith("**Done.**") and "Outputs identical" in ok[5]
    bad = client.predict(handle_file(str(video)), custom=" + x", api_name="/compare")
    assert bad[0].startswith("**Error:**") and "custom model field" in bad[0]
    flat = json.dumps(bad, default=str)
    assert "__type__" not in flat
    assert all(v is None or isinstance(v, (str, list, dict)) for v in bad)
    err = client.predict(handle_file(str(video)), custom=" + x", api_name="/compare_json")
    err = json.loads(err) if isinstance(err, str) else err
    assert err["status"] == "error" and "custom model field" in err["error"] and err["vanilla"] is None


@pytest.mark.parametrize("phase,slow,fast", [
    ("frames", dict(frame_s=0.2), dict(frame_s=0.0)),
    ("prefill", dict(prefill_s=10.0), dict(prefill_s=0.0)),
    ("decoding", dict(step_s=0.02), dict(step_s=0.0)),
])
def test_stop_in_each_phase_then_the_next_call_runs(phase, slow, fast, tmp_path):
    """Through the API as through the page: /stop ends a run while it reads the video, prefills or decodes
    (the run returns "stopped"), and a call made at once, while it winds down, waits for it and ends done."""
    from gradio_client import Client, handle_file

    from app.page.ui import build_demo
    from app.runs.backend import Backend
    eng = FakeEngine(step_s=0.0)
    backend = Backend(eng, update_interval_s=0.05)
    demo = build_demo(backend, examples=[])
    port = free_port()
    demo.queue().launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    try:
        client, video = Client(f"http://127.0.0.1:{port}/", verbose=False), handle_file(str(sample_video()))
        for k, v in slow.items():
            setattr(eng, k, v)
        job = client.submit(video, frames=40, max_new=1000, api_name="/compare_json")
        reached = {"frames": lambda: backend.active_workers() and not eng.streams,
                   "prefill": lambda: eng.prefill_layers > 0,
                   "decoding": lambda: eng.stop_polls > 3}[phase]
        _wait_until(reached)
        client.predict(api_name="/stop")
        for k, v in fast.items():
            setattr(eng, k, v)
        # at once; another file (API uploads are deleted when their request ends, and Gradio stores
        # identical files under one path, which the stopped request could delete before this one is queued)
        other = tmp_path / "other.mp4"
        other.write_bytes(sample_video().read_bytes() + b"\0")
        again = client.submit(handle_file(str(other)), frames=40, max_new=12, api_name="/compare_json")
        first, second = (json.loads(r) if isinstance(r, str) else r for r in (job.result(timeout=60),
                                                                               again.result(timeout=60)))
        assert first["status"] == "stopped" and first["identical"] is None, first
        assert second["status"] == "done", second
        assert second["identical"] is True and second["vanilla"]["tokens"] == 12
        if phase == "frames":
            assert eng.frames_read < 40
        if phase == "prefill":
            assert eng.prefill_layers < 10
        assert not backend.active_workers()
    finally:
        demo.close()


def _wait_until(cond, timeout_s: float = 30.0) -> None:
    end = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.02)
