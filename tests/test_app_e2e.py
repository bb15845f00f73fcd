"""End to end: launch the app on a free local port and drive ``/compare`` with gradio_client.

One run over the fake engine and one over the real engine with the bundled CPU preset (random stand-ins of the
bundled pair with its tokenizer and processor, :mod:`helpers.bundled_like`: the app's path is under test here, the
bundled model itself in tests/test_bundled_model.py).
"""
from __future__ import annotations

import html
import re

from gradio_client import Client, handle_file

from helpers.fakes import FakeEngine, free_port, real_engine, sample_video

from app.runs.backend import Backend


def _text(panel_html: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", panel_html))


def _compare(backend: Backend, preset: str, frames: int, max_new: int, extra: tuple = ()):
    """Launch, call /compare once, close; returns the outputs tuple (``extra``: arguments after the
    heatmap mode: temperature, nucleus, seed, subtitles, subtitle mode, ground truth, keep text)."""
    from app.page.ui import build_demo
    video = sample_video()
    demo = build_demo(backend, examples=[])
    port = free_port()
    demo.queue().launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    try:
        client = Client(f"http://127.0.0.1:{port}/", verbose=False)
        return client.predict(handle_file(str(video)), "Describe this video in detail.",
                              preset, "", "specvlm", 0.9, 0.4, "dynamic", 5, 4, 16, frames, max_new,
                              "Pruning stages", *extra, api_name="/compare")
    finally:
        demo.close()


def _check(out, want_tokens: int | None):
    status, van_html, van_stats, spec_html, spec_stats, summary, gallery, legend, accept, times, race = out
    assert status.startswith("**Done.**"), status
    van, spec = _text(van_html), _text(spec_html)
    assert van and van == spec
    assert "Outputs identical" in summary and "Decode speedup" in summary and "τ =" in summary
    assert "tokens / target forward" in summary and "→" in summary and "prefill" in summary
    for stats in (van_stats, spec_stats):
        assert "tok/s" in stats and "· done ·" in stats
    if want_tokens is not None:
        assert f"{want_tokens} tokens" in van_stats
    assert gallery and gallery[0]["image"] and "kept" in gallery[0]["caption"]
    assert accept["type"] == "plotly" and "running" in accept["plot"]
    assert times["type"] == "plotly" and "Vanilla" in times["plot"]
    assert "replay of the measured runs" in race and race.count("finished at") >= 2 and "decode alone" in race


def test_e2e_fake_engine():
    _check(_compare(Backend(FakeEngine(step_s=0.001)), "Fake tiny (CPU)", 4, 20), want_tokens=20)


def test_e2e_real_engine_bundled_model():
    engine, preset = real_engine()
    backend = Backend(engine, device="cpu", dtype="float32")  # fp32: greedy SD must match vanilla exactly
    _check(_compare(backend, preset, 8, 24), want_tokens=None)


def test_speculative_run_leaves_an_inspection_record():
    """After a comparison the session's RunRecord (per-step draft trees) is ready for the Inspect tab."""
    from app.inputs.settings import RunRequest, RunSettings
    from specvlm.analysis.records import step_tree

    engine, preset = real_engine()
    backend = Backend(engine, device="cpu", dtype="float32")
    video = sample_video()
    settings = RunSettings(preset=preset, num_frames=8, max_new_tokens=16)
    ups = list(backend.run(RunRequest(str(video), "Describe the video.", settings), session="s1"))
    rec = ups[-1]["record"]  # the record is an output of the run (the page keeps it in a gr.State)
    with_record = [u for u in ups if "record" in u]     # at Done, then explained for Inspect at the end
    assert rec is not None and with_record[0].get("background") and with_record[1:] == [ups[-1]]
    steps = [s for s in rec.steps if s.step > 0]
    assert steps and sum(len(s.token_ids) for s in rec.steps) == 16
    tree = step_tree(rec, steps[0].step)
    assert tree.nodes and sum(n.accepted for n in tree.nodes) == steps[0].accept_length


def test_e2e_subtitles_and_ground_truth_reach_the_engine(tmp_path):
    """/compare takes the .srt, who sees it, a ground-truth .json and the keep-text box as its last arguments."""
    import json

    srt = tmp_path / "clip.srt"
    srt.write_text("1\n00:00:00,000 --> 00:00:01,000\nHello\n")
    truth = tmp_path / "clip.json"
    truth.write_text(json.dumps(dict(width=32, height=32, fps=2.0, text=dict(start_frame=0, end_frame=4,
                                                                             box=[0, 0, 16, 8]))))
    eng = FakeEngine(step_s=0.001)
    out = _compare(Backend(eng), "Fake tiny (CPU)", 4, 12,
                   (0.0, 1.0, 0, handle_file(str(srt)), "draft", handle_file(str(truth)), True))
    status, summary = out[0], out[5]
    assert status.startswith("**Done.**") and "shown to the draft only" in status, status
    assert "kept 4 on-screen-text tokens" in status and "kept **4** on-screen-text tokens" in summary
    (kw,) = eng.prepare_kwargs    # prepared once for both runs
    assert kw["subtitle_mode"] == "draft" and len(kw["subtitles"]) == 1
    assert kw["truth"]["text"]["box"] == [0, 0, 16, 8]
