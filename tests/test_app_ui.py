"""App without models: plot functions, the backend over a fake engine, and build_demo wiring."""
from __future__ import annotations

import html
import re
import threading
from pathlib import Path

import numpy as np
import plotly.graph_objects as go
import pytest

from helpers.app_fakes import MarginEngine
from helpers.fakes import STAGE1, STAGE2, FakeEngine, prefill_info, stream_endings

from app.inputs.model_messages import parse_model_spec
from app.inputs.settings import Limits, RunRequest, RunSettings, UserError, build_configs
from app.runs.backend import Backend
from app.views import plots
from app.views.run_view import OUTPUT_KEYS, pick_heatmaps


def _blend(base, rgb, a=plots.OVERLAY_ALPHA):
    return [round(base * (1 - a) + c * a) for c in rgb]


def _text_of(panel_html: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", panel_html))


# ---- plots -------------------------------------------------------------------------------

def test_stage_overlay_colours_at_known_tokens():
    info = prefill_info(spec=True)  # grid 2 groups x 4 x 4, 32 px frames -> 8 px cells
    frames = np.full((4, 32, 32, 3), 128, np.uint8)
    p = info.prune
    items = plots.heatmap_gallery(frames, info.token_grid, keep=p.keep, stage1=p.stage1, stage2=p.stage2,
                                  frames_per_token=2, timestamps=[0, 0.5, 1, 1.5], max_side=None)
    assert len(items) == 2  # one image per frame group (2 frames per token)
    img0, cap0 = items[0]
    assert img0.shape == (32, 32, 3) and img0.dtype == np.uint8
    assert list(img0[4, 4]) == _blend(128, plots.STAGE1_RGB)  # token 0: row 0 col 0, Stage I
    assert list(img0[12, 12]) == _blend(128, plots.STAGE1_RGB)  # token 5: row 1 col 1
    assert list(img0[4, 28]) == _blend(128, plots.STAGE2_RGB)  # token 3: row 0 col 3, Stage II
    assert list(img0[4, 12]) == [round(128 * plots.DROPPED_DIM)] * 3  # token 1 dropped, dimmed
    img1, cap1 = items[1]
    assert list(img1[4, 12]) == _blend(128, plots.STAGE2_RGB)  # token 17 = group 1, row 0, col 1
    assert list(img1[28, 20]) == _blend(128, plots.STAGE2_RGB)  # token 30 = group 1, row 3, col 2
    assert cap0.startswith("frames 0-1 (0.0-0.5 s)") and "kept 4/16 (I 3, II 1)" in cap0
    assert cap1.startswith("frames 2-3")


def test_single_stage_and_unpruned_overlays():
    grid = np.array([[0, r, c] for r in range(2) for c in range(2)])
    frames = np.full((1, 8, 8, 3), 100, np.uint8)
    (img, _), = plots.heatmap_gallery(frames, grid, keep=[1], max_side=None)  # e.g. "attention"
    assert list(img[1, 5]) == _blend(100, plots.KEPT_RGB)
    assert list(img[1, 1]) == [30, 30, 30]
    (img, cap), = plots.heatmap_gallery(frames, grid, max_side=None)  # no pruning: all kept
    assert list(img[6, 6]) == _blend(100, plots.KEPT_RGB) and "kept 4/4" in cap
    grid_nl = np.concatenate([grid, [[0, -1, -1]]])  # LLaVA-OV's trailing newline token has no cell
    (img, cap), = plots.heatmap_gallery(frames, grid_nl, keep=[1, 4], max_side=None)
    assert "kept 1/4" in cap and list(img[1, 5]) == _blend(100, plots.KEPT_RGB)


def test_score_overlay_uses_colormap_and_requires_scores():
    info = prefill_info(spec=True)
    frames = np.zeros((4, 32, 32, 3), np.uint8)
    items = plots.heatmap_gallery(frames, info.token_grid, scores=info.prune.scores, mode="scores",
                                  frames_per_token=2, max_side=None)
    img = items[0][0]
    lo = plots.score_colormap(np.array(0.0)) * 0.6
    assert list(img[4, 4]) == [round(float(c)) for c in lo]  # token 0 has the lowest score
    assert img[28, 28].sum() > img[4, 4].sum()  # later tokens score higher
    with pytest.raises(ValueError, match="raw scores"):
        plots.heatmap_gallery(frames, info.token_grid, mode="scores")
    with pytest.raises(ValueError, match="unknown"):
        plots.heatmap_gallery(frames, info.token_grid, mode="bogus")


def test_gallery_downscales_and_caps_images():
    grid = np.array([[f, 0, 0] for f in range(40)])
    frames = np.zeros((40, 600, 800, 3), np.uint8)
    items = plots.heatmap_gallery(frames, grid, max_images=8, max_side=200)
    assert len(items) == 8 and items[0][0].shape == (150, 200, 3)


def test_accept_length_figure_traces():
    fig = plots.accept_length_figure([3, 1, 0, 4], ["a b c d", "e f", "g", "<h>"], max_depth=5)
    assert isinstance(fig, go.Figure)
    bar, zero, line = fig.data
    assert bar.type == "bar" and bar.name == "accepted length" and list(bar.y) == [3, 1, 0, 4]
    assert zero.type == "bar" and list(zero.x) == [3] and list(zero.y) == [plots.ZERO_STUB]   # step 3 is drawn
    assert zero.marker.color != bar.marker.color and list(zero.customdata) == ["g"] and fig.layout.barmode == "overlay"
    assert [t.name for t in plots.accept_length_figure([1, 2]).data] == ["accepted length", "running τ"]
    assert line.type == "scatter" and line.name == "running τ"
    assert list(fig.layout.xaxis.range) == [0.5, 4.5]                     # the axis starts at step 1
    assert np.allclose(line.y, [3, 2, 4 / 3, 2])
    assert list(bar.customdata)[3] == "&lt;h&gt;" and "customdata" in bar.hovertemplate
    assert "τ = 2.00" in fig.layout.title.text
    assert fig.layout.xaxis.dtick == 1 and fig.layout.xaxis.tickformat == "d"   # no 0.5-step ticks
    assert plots.accept_length_figure([2] * 40).layout.xaxis.dtick == 4
    assert len(plots.accept_length_figure([]).data) == 0


def test_tokens_over_time_figure_traces():
    fig = plots.tokens_over_time_figure({"Vanilla": ([0.1, 0.2], [1, 2]), "SpecVLM": ([0.1], [4]), "x": ([], [])})
    assert [t.name for t in fig.data] == ["Vanilla", "SpecVLM"]
    assert list(fig.data[1].y) == [4]


def test_tokens_html_colours_and_escapes():
    out = plots.tokens_html([("Hi", False), (" <b>", True), ("", True)], legend=True)
    assert out.count('class="tok tok-draft"') == 1 and out.count('class="tok tok-target"') == 1
    assert plots.DRAFT_BG in out and plots.TARGET_BG in out and "accepted from draft" in out
    body = out.split('class="specvlm-tokens"')[1]
    assert _text_of("<x " + body) .endswith("Hi <b>")


# ---- backend over the fake engine ----------------------------------------------------------

@pytest.fixture(autouse=True)
def _video_files(tmp_path, monkeypatch):
    """The fake engine decodes nothing, but the backend checks that the upload exists."""
    monkeypatch.chdir(tmp_path)
    for name in ("clip.mp4", "broken.bad", "a.srt", "x.bad.srt", "b.late.srt"):
        (tmp_path / name).write_bytes(b"\x00" * 16)


def _settings(**kw):
    return RunSettings(**{**dict(preset="Fake tiny (CPU)", num_frames=4, max_new_tokens=24), **kw})


def _run(backend, **kw):
    ups = list(backend.run(RunRequest(kw.pop("video", "clip.mp4"), "Describe.", _settings(**kw)), session="s"))
    return ups, ups[-1]


def test_every_run_starts_by_clearing_what_the_last_one_showed():
    """The first update of a Run empties both panels, stats, summary, charts and heatmaps (a Run held while the
    last one stopped otherwise shows the stopped run's results while it reads the video)."""
    b = Backend(FakeEngine(step_s=0.0), update_interval_s=0.0)
    _run(b)
    first = next(iter(b.run(RunRequest("clip.mp4", "Describe.", _settings()), session="s")))
    assert first["status"] == "Starting…" and first["ui_state"] == "running" and "record" not in first
    assert _text_of(first["vanilla_html"]) == _text_of(first["spec_html"]) == "waiting…"
    assert first["vanilla_stats"] == first["spec_stats"] == first["summary"] == "" and first["gallery"] == []
    assert first["heatmaps"] is None
    for key in ("accept_plot", "time_plot"):
        assert isinstance(first[key], go.Figure) and all(len(t.x or ()) == 0 for t in first[key].data)


def test_backend_run_streams_both_panels_and_summary():
    eng = FakeEngine(step_s=0.0)
    b = Backend(eng, update_interval_s=0.0)
    ups, last = _run(b)
    assert set(OUTPUT_KEYS) <= set(last) and "error" not in last
    assert eng.streams == ["vanilla", "specvlm"]  # sequential, vanilla first
    assert any("vanilla_html" in u and "spec_html" not in u for u in ups)  # streamed separately
    assert _text_of(last["vanilla_html"]) == _text_of(last["spec_html"]) != ""
    assert "Outputs identical" in last["summary"] and "Decode speedup" in last["summary"]
    assert "32 → 6" in last["summary"] and "τ =" in last["summary"]
    assert "tok-draft" in last["spec_html"] and "tok-target" in last["spec_html"]
    assert len(last["gallery"]) == 2 and "one video token covers 2" in last["heatmap_legend"].lower()
    gallery, legend = pick_heatmaps(last["heatmaps"], "Raw attention scores")
    assert len(gallery) == 2 and "attention" in legend
    _run(b)
    assert eng.loads == 1  # the pair is cached across requests


def test_backend_reports_divergence():
    eng = FakeEngine(step_s=0.0, spec_tokens=FakeEngine().tokens(10)[:5] + [1, 2, 3, 4, 5])
    _, last = _run(Backend(eng, update_interval_s=0.0), max_new_tokens=10)
    assert "Outputs differ from token 5" in last["summary"]


@pytest.mark.parametrize("margin, words", [
    (1e-4, "a **near-tie** (the target's top-1 minus top-2 logit margin there is 0.0001, below 0.001 for float32)"),
    (3.0, "a **mismatch** (the target's top-1 minus top-2 logit margin there is 3, not below 0.001 for float32)"),
    (None, "a **mismatch** (vanilla recorded no logit margin there)"),
])
def test_summary_classifies_a_divergence_by_the_vanilla_margin(margin, words):
    eng = MarginEngine(margin, step_s=0.0, spec_tokens=FakeEngine().tokens(10)[:5] + [1, 2, 3, 4, 5])
    _, last = _run(Backend(eng, update_interval_s=0.0), max_new_tokens=10)
    assert "Outputs differ from token 5" in last["summary"] and words in last["summary"], last["summary"]


@pytest.mark.parametrize("kw, msg", [
    (dict(drop_rate=1.5), "drop_rate"),
    (dict(depth=0), "depth"),
    (dict(depth="abc"), "whole number"),
    (dict(method="bogus"), "unknown"),
    (dict(method="vanilla"), "speculative method"),
    (dict(video=None), "Upload a video"),
    (dict(video="broken.bad"), "Could not read the video: broken.bad: no video stream"),
    (dict(preset="Fake big (GPU)"), "needs a CUDA GPU"),
    (dict(preset="nope"), "Unknown preset"),
    (dict(preset="Fake missing"), "needs the model folder /nonexistent/specvlm/model, which is missing"),
    (dict(custom_model="  + x"), "custom model"),
])
def test_backend_errors_are_readable_and_final(kw, msg):
    _, last = _run(Backend(FakeEngine(step_s=0.0)), **kw)
    assert msg in last["error"] and last["status"].startswith("**Error:**")


def test_backend_load_failure_is_readable():
    _, last = _run(Backend(FakeEngine(fail_load=True)), custom_model="org/model + org/draft")
    assert "Could not load model 'org/model' with draft 'org/draft'" in last["error"]
    assert "Hub is unreachable" in last["error"]


def test_parse_model_spec():
    assert parse_model_spec(" a/b ") == ("a/b", None)
    assert parse_model_spec("a/b + c/d") == ("a/b", "c/d")
    assert parse_model_spec("a/b, c/d") == ("a/b", "c/d")
    with pytest.raises(UserError):
        parse_model_spec(" ")


def test_stop_ends_the_engine_loop():
    eng = FakeEngine(step_s=0.01)
    b = Backend(eng, update_interval_s=0.02)
    gen = b.run(RunRequest("clip.mp4", "", _settings(max_new_tokens=1000)), session="u1")
    assert b.stop("other") == "Nothing is running."
    stopped_at = None
    for upd in gen:
        if stopped_at is None and "tokens" in upd.get("vanilla_stats", "") and "0 tokens" not in upd["vanilla_stats"]:
            assert "Stopping" in b.stop("u1")
            stopped_at = eng.stop_polls
        last = upd
    assert stopped_at is not None
    assert eng.streams == ["vanilla"]  # the speculative run never started
    assert stream_endings(eng) == ["stopped"]  # the engine loop itself ended, through its stop check
    assert "Stopped" in last["status"] and "stopped" in last["vanilla_stats"]
    assert b.stop("u1") == "Nothing is running."  # ready for the next run
    _, last = _run(b, max_new_tokens=5)
    assert "Outputs identical" in last["summary"]


def test_closing_the_page_stops_the_worker():
    eng = FakeEngine(step_s=0.01)
    gen = Backend(eng, update_interval_s=0.02).run(RunRequest("clip.mp4", "", _settings(max_new_tokens=1000)))
    for _ in gen:
        if eng.stop_polls > 2:   # the engine is decoding
            break
    gen.close()  # what Gradio does when the client disconnects
    assert stream_endings(eng) == ["stopped"]   # the worker's engine loop ended, through its stop check


def test_subtitles_text():
    b = Backend(FakeEngine())
    assert b.subtitles_text("a.srt") == "[00:01.0 - 00:02.5] Hello there"
    assert b.subtitles_text(None) == ""
    with pytest.raises(UserError, match="subtitle file"):
        b.subtitles_text("x.bad.srt")


# ---- build_demo wiring ---------------------------------------------------------------------

def test_build_demo_wires_components(tmp_path):
    import gradio as gr

    from app.page.ui import GPU_QUEUE, build_demo
    vid = tmp_path / "clip.mp4"
    vid.write_bytes(b"\x00")
    b = Backend(FakeEngine())
    demo = build_demo(b, examples=[[str(vid), "Describe.", None]], footer="torch threads 1 of 2 usable CPUs (set)")
    assert isinstance(demo, gr.Blocks)
    ids = {blk.elem_id: blk for blk in demo.blocks.values() if getattr(blk, "elem_id", None)}
    for name in ("video", "prompt", "srt", "srt-text", "preset", "custom-model", "method", "drop-rate", "top-p",
                 "tree", "depth", "top-k", "total-tokens", "frames", "max-new-tokens", "run", "stop", "status",
                 "vanilla-text", "spec-text", "vanilla-stats", "spec-stats", "summary", "accept-plot",
                 "time-plot", "heatmap-mode", "heatmaps", "examples"):
        assert name in ids, name
    assert ids["prompt"].value == "Describe this video in detail."
    assert "torch threads 1 of 2 usable CPUs" in ids["footer"].value
    assert ids["preset"].value == "Fake tiny (CPU)" and ("Fake big (GPU)", "Fake big (GPU)") in ids["preset"].choices
    assert (ids["drop-rate"].value, ids["top-p"].value, ids["tree"].value) == (0.9, 0.4, "dynamic")
    assert ids["drop-rate"].maximum == 0.999 and ids["drop-rate"].step == 0.001   # the same range as the CLI
    assert (ids["depth"].value, ids["top-k"].value, ids["total-tokens"].value) == (5, 4, 16)
    assert ids["max-new-tokens"].value == 128 and ids["method"].value == "specvlm"
    fns = {fn.api_name: fn for fn in demo.fns.values()}
    compare = fns["compare"]
    assert compare.concurrency_id == GPU_QUEUE and compare.concurrency_limit == 1
    assert [c.elem_id for c in compare.inputs][:3] == ["video", "prompt", "preset"]
    assert [o.elem_id for o in compare.outputs[len(OUTPUT_KEYS):]] == ["run", "stop", "repeat-timing"]
    assert compare.trigger_mode == "always_last"  # a Run clicked while the last one stops is held, not dropped
    assert not any(fn.cancels for fn in demo.fns.values())  # Stop asks the run to stop; nothing is cancelled
    assert fns["stop"].concurrency_id != GPU_QUEUE  # Stop is never queued behind a decode
    handler = {fn.name: fn for fn in demo.fns.values()}
    on_preset, on_preset_chosen = handler["on_preset"].fn, handler["on_preset_chosen"].fn
    md, *tree = on_preset("Fake big (GPU)")
    assert "needs a CUDA GPU" in md
    assert [t["value"] for t in tree] == ["chain", 9, 4, 16, 0.05]      # the preset's tuned tree fills the widgets
    assert [t["value"] for t in on_preset("Fake tiny (CPU)")[1:]] == ["dynamic", 5, 4, 16, 0.0]   # none: the library's
    frames, max_new = on_preset_chosen("Fake big (GPU)")
    assert frames["value"] == 4 and max_new["value"] == 128
    # frames and token budget follow a preset the user picks (input), not one an example row sets (change),
    # so the streaming example keeps its 512 tokens after an example with another preset
    assert [t[1] for t in handler["on_preset_chosen"].targets] == ["input"]
    assert [t[1] for t in handler["on_preset"].targets] == ["change"]
    comps = demo.specvlm_components
    assert comps["gallery"] is ids["heatmaps"] and comps["accept_plot"] is ids["accept-plot"]


def test_sampling_settings_reach_the_decode_config():
    dec, _ = build_configs(RunSettings(preset="x", temperature=0.7, top_p_sampling=0.9, seed=3), Limits())
    assert dec.sampling.temperature == 0.7 and dec.sampling.top_p_sampling == 0.9 and dec.sampling.seed == 3
    with pytest.raises(UserError, match="temperature"):
        build_configs(RunSettings(preset="x", temperature=9.0), Limits())


def test_early_stop_setting_reaches_the_tree_config():
    dec, _ = build_configs(RunSettings(preset="x", tree_shape="chain", depth=12, min_prob=0.5), Limits())
    assert dec.tree.shape == "chain" and dec.tree.depth == 12 and dec.tree.min_prob == 0.5
    assert build_configs(RunSettings(preset="x"), Limits())[0].tree.min_prob == 0.0


# ---- subtitles and on-screen-text forcing ----------------------------------------------

def _truth_file(path, text=True):
    """A minimal ground-truth .json (what specvlm.bench.clipfiles.write_truth writes, trimmed to what forcing needs)."""
    import json
    d = dict(seed=1, width=32, height=32, num_frames=8, fps=2.0, background="flat", objects=[],
             text=dict(text="HI", start_frame=0, end_frame=8, box=[4, 4, 20, 12]) if text else None)
    path.write_text(json.dumps(d))
    return str(path)


def _compare_fn(backend):
    """The ``/compare`` handler of a page built over ``backend`` (called directly, no server)."""
    from app.page.ui import build_demo
    demo = build_demo(backend, examples=[])
    fns = {fn.api_name: fn for fn in demo.fns.values()}
    return fns["compare"], demo.specvlm_components


def _call(fn, *args, **kw):
    """Drive a compare generator to its end; returns its updates keyed by component elem_id."""
    ups = [{comp.elem_id: v for comp, v in upd.items()}
           for upd in fn(*args, request=None, progress=lambda *a, **k: None, **kw)]
    return ups[-1]


BASE_ARGS = ("clip.mp4", "Describe.", "Fake tiny (CPU)", "", "specvlm", 0.9, 0.4, "dynamic", 5, 4, 16, 4, 12,
             "Pruning stages", 0.0, 1.0, 0)


def test_compare_inputs_end_with_subtitles_truth_early_stop_fixed_length_and_timing():
    compare, comps = _compare_fn(Backend(FakeEngine(step_s=0.0)))
    ids = [c.elem_id for c in compare.inputs]
    assert ids[-14:-5] == ["srt", "subtitle-mode", "truth", "keep-text", "api-min-prob", "fixed-length",
                           "timing-pairs", "old-top-p", "old-max-new"]   # old names of lambda_, max_new_tokens
    # the tree, frames and budget: hidden twins without a value (an API caller who leaves them out gets the preset's)
    assert [ids[i] for i in (7, 8, 11, 12)] == ["api-tree", "api-depth", "api-frames", "api-max-new-tokens"]
    assert all(c.value is None and not c.visible for c in compare.inputs if c.elem_id.startswith("api-"))
    assert ids[-5:] == ["reselect", "reselect-min-share", "reselect-step-tokens", "reselect-total-tokens",
                        "adaptive-r"]                             # beyond the paper, appended after them
    assert "engine" not in comps                                  # one decoding engine: no switch on the page
    from app.inputs.settings import Limits, RunSettings, build_configs
    assert build_configs(RunSettings(reselect=True), Limits())[0].reselect.enabled
    assert ids[:3] == ["video", "prompt", "preset"] and ids[16] == "seed"  # old positions unchanged
    radio = comps["subtitle_mode"]
    assert radio.value == "both" and [v for _, v in radio.choices] == ["both", "target", "draft", "none"]
    assert comps["keep_text"].value is False and comps["truth"].file_types is None  # any file: the page says why
    assert comps["min_prob"].value == 0.0 and comps["min_prob"].maximum < 1.0
    assert comps["reselect"].value is False and comps["adaptive_r"].value is False   # paper defaults


def test_compare_passes_subtitles_mode_and_truth_to_the_engine(tmp_path):
    eng = FakeEngine(step_s=0.0)
    compare, _ = _compare_fn(Backend(eng, update_interval_s=0.0))
    truth = _truth_file(tmp_path / "clip.json")
    last = _call(compare.fn, *BASE_ARGS, "a.srt", "target", truth, True)
    (kw,) = eng.prepare_kwargs    # prepared once; both runs stream from it (vanilla prunes nothing)
    assert [c.text for c in kw["subtitles"]] == ["Hello there"] and kw["subtitle_mode"] == "target"
    assert kw["truth"]["text"]["box"] == [4, 4, 20, 12] and eng.streams == ["vanilla", "specvlm"]
    assert "kept **4** on-screen-text tokens" in last["summary"]
    assert "kept 4 on-screen-text tokens" in last["status"] and "1 subtitle cue shown to the target" in last["status"]


def test_compare_with_fewer_args_keeps_working():
    """API callers that pass the first 14 arguments only get no subtitles and no forcing."""
    eng = FakeEngine(step_s=0.0)
    compare, _ = _compare_fn(Backend(eng, update_interval_s=0.0))
    last = _call(compare.fn, *BASE_ARGS[:14])
    assert last["status"].startswith("**Done.**") and eng.prepare_kwargs == [{}]


def test_settings_reach_the_engine_through_backend_run(tmp_path):
    eng = FakeEngine(step_s=0.0)
    b = Backend(eng, update_interval_s=0.0)
    ups = list(b.run(RunRequest("clip.mp4", "Describe.", _settings(subtitle_mode="Draft only"), srt="a.srt"),
                     session="s"))
    assert "error" not in ups[-1] and [k["subtitle_mode"] for k in eng.prepare_kwargs] == ["draft"]
    eng.prepare_kwargs.clear()
    _run(b)  # no .srt, no forcing: the engine is called exactly as before
    assert eng.prepare_kwargs == [{}]


@pytest.mark.parametrize("truth, why", [
    (None, "no ground-truth .json was given"),
    ("notext", "says the clip has no burned-in text"),
])
def test_keep_text_without_usable_truth_still_runs(tmp_path, truth, why):
    eng = FakeEngine(step_s=0.0)
    path = _truth_file(tmp_path / "notext.json", text=False) if truth else None
    ups = list(Backend(eng, update_interval_s=0.0).run(RunRequest("clip.mp4", "Describe.", _settings(keep_text=True),
                                                                  truth=path), session="s"))
    last = ups[-1]
    assert "error" not in last and "Outputs identical" in last["summary"]
    assert "no on-screen-text tokens were forced" in last["status"] and why in last["status"]
    assert all("truth" not in k for k in eng.prepare_kwargs) and "on-screen-text" not in last["summary"]


def test_truth_is_ignored_unless_keep_text(tmp_path):
    eng = FakeEngine(step_s=0.0)
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    ups = list(Backend(eng, update_interval_s=0.0).run(RunRequest("clip.mp4", "", _settings(), truth=str(bad))))
    assert "error" not in ups[-1] and eng.prepare_kwargs == [{}]


@pytest.mark.parametrize("content, msg", [
    ("{not json", "is not valid JSON (Expecting property name enclosed in double quotes at line 1"),
    ("[1, 2]", "expected a JSON object, got list"),
    ('{"width": 32, "height": 32}', "missing key 'fps'"),
    ('{"width": 32, "height": 32, "fps": 2}', "missing key 'text'"),
    ('{"width": 32, "height": 32, "fps": 0, "text": null}', "'fps' must be a positive number"),
    ('{"width": 32, "height": 32, "fps": 2, "text": {"start_frame": 0, "end_frame": 2}}', "missing key 'text.box'"),
    ('{"width": 32, "height": 32, "fps": 2, "text": {"start_frame": 0, "end_frame": 2, "box": [1, 2]}}',
     "'text.box' must be 4 numbers"),
])
def test_malformed_truth_gives_a_readable_error_then_the_app_keeps_working(tmp_path, content, msg):
    eng = FakeEngine(step_s=0.0)
    b = Backend(eng, update_interval_s=0.0)
    bad = tmp_path / "truth.json"
    bad.write_text(content)
    last = list(b.run(RunRequest("clip.mp4", "", _settings(keep_text=True), truth=str(bad)), session="s"))[-1]
    assert last["status"].startswith("**Error:**") and "'truth.json'" in last["error"] and msg in last["error"]
    assert eng.streams == [] and eng.loads == 0  # refused before any model work
    _, last = _run(b)
    assert "Outputs identical" in last["summary"]


def test_malformed_srt_gives_a_readable_error_then_the_app_keeps_working(tmp_path):
    eng = FakeEngine(step_s=0.0)
    compare, _ = _compare_fn(Backend(eng, update_interval_s=0.0))
    last = _call(compare.fn, *BASE_ARGS, "x.bad.srt", "both", None, False)
    assert last["status"] == "**Error:** Could not read the subtitle file: line 1: not a cue number"
    assert eng.streams == []
    last = _call(compare.fn, *BASE_ARGS, "gone.srt", "both", None, False)
    assert "'gone.srt' is no longer on the server" in last["status"]
    last = _call(compare.fn, *BASE_ARGS, "a.srt", "both", None, False)
    assert last["status"].startswith("**Done.**") and "1 subtitle cue shown to both models" in last["status"]
    last = _call(compare.fn, *BASE_ARGS, "b.late.srt", "both", None, False)
    assert last["status"].startswith("**Done.**") and "subtitle cue shown" not in last["status"]
    assert "no subtitle cue overlaps the video's sampled frames" in last["status"]


def test_bad_subtitle_mode_is_refused():
    b = Backend(FakeEngine(step_s=0.0))
    from app.inputs.settings import check_subtitle_mode
    assert check_subtitle_mode("Target only") == "target" and check_subtitle_mode("none") == "none"
    assert check_subtitle_mode(None) == "both"
    _, last = _run(b, subtitle_mode="everyone")
    assert "subtitles go to 'everyone'" in last["error"]


def test_examples_carry_the_ground_truth_sidecar(tmp_path):
    from app.page.examples import example_rows, find_examples
    folder = tmp_path / "examples"
    folder.mkdir()
    for stem in ("a", "b"):
        (folder / f"{stem}.mp4").write_bytes(b"\x00")
    (folder / "a.json").write_text("{}")
    (folder / "b.srt").write_text("")
    rows = find_examples(folder)
    assert [r[2:] for r in rows] == [[None, str(folder / "a.json")], [str(folder / "b.srt"), None]]
    assert example_rows([["v.mp4", "p", None]], 128, "P", "both") == [["v.mp4", "p", None, None, False, 128, "P", "both"]]
    assert example_rows([["v.mp4", "p", "s.srt", None, None, None, "Q", "target"]], 64, "P") == [
        ["v.mp4", "p", "s.srt", None, False, 64, "Q", "target"]]
    bundled = {Path(r[0]).stem: r for r in find_examples()}
    if "shapes_text" in bundled:
        assert bundled["shapes_text"][3].endswith("shapes_text.json")


def test_the_failure_case_example_picks_the_sparse_pair_and_withholds_the_subtitles_from_the_draft(tmp_path):
    from app.page.examples import FAILURE_CLIP, FAILURE_SETUP, example_rows, failure_example, find_examples
    from specvlm.models.presets import SPARSE_SELF
    folder, model = tmp_path / "videos", tmp_path / "target"
    folder.mkdir()
    model.mkdir()
    clip = folder / FAILURE_CLIP
    clip.write_bytes(b"\x00")
    assert failure_example(folder, model) == []                  # no subtitles, no sparse pair: not offered
    clip.with_suffix(".srt").write_text("1\n00:00:01,000 --> 00:00:02,000\nThe flag is green.\n")
    assert failure_example(folder, model) == []
    (model / "config.json").write_text("{}")
    (row,) = example_rows(failure_example(folder, model), 128, "Default preset")
    assert row == [str(clip), row[1], str(clip.with_suffix(".srt")), None, False, 128, SPARSE_SELF, "target"]
    assert FAILURE_SETUP == (SPARSE_SELF, "target") and find_examples(folder) == []   # not also a plain row


def test_the_first_example_streams_long_enough_to_watch():
    from app.page.examples import FAILURE_LABEL, STREAMING_CLIP, default_examples
    rows, labels = default_examples(max_new_tokens=300)
    first = rows[0]
    assert Path(first[0]).name == STREAMING_CLIP and first[4] is True and first[5] == 300  # capped by the limit
    assert labels[0] == "Watch it stream: 300 tokens, fixed length"
    assert labels[1:] == [FAILURE_LABEL if len(r) > 7 else Path(r[0]).name for r in rows[1:]]
    compare, comps = _compare_fn(Backend(FakeEngine(step_s=0.0), limits=Limits(max_new_tokens=300)))
    assert comps["fixed_length"].value is False  # the checkbox itself starts off


def test_a_real_world_example_is_offered():
    from app.page.examples import real_world_examples
    from specvlm.video import probe_video

    rows = real_world_examples()
    assert len(rows) == 1 and Path(rows[0][0]).name == "world.mp4"
    info = probe_video(rows[0][0])
    assert info.has_video and info.duration > 10 and info.width >= 320   # a real clip the reader can open


def test_a_finished_run_does_not_stop_the_next_one(monkeypatch):
    """The worker can still be winding down after its end marker was drained: that is not a Stop
    (it used to set the stop flag, so the speculative run ended at once as "stopped")."""
    real_thread = threading.Thread

    class LingeringThread(real_thread):
        def is_alive(self):  # alive until joined, however long the work took
            return not getattr(self, "joined", False) or super().is_alive()

        def join(self, timeout=None):
            super().join(timeout)
            self.joined = True

    monkeypatch.setattr(threading, "Thread", LingeringThread)
    eng = FakeEngine(step_s=0.0)
    _, last = _run(Backend(eng, update_interval_s=0.0))
    assert eng.streams == ["vanilla", "specvlm"] and last["status"].startswith("**Done.**")
    assert "Outputs identical" in last["summary"]


def test_preset_info_shows_project_paths_relative():
    from app.inputs.model_messages import shown_name as _shown
    from specvlm.models.presets import PRESETS
    root = Path(__file__).resolve().parents[1]
    assert _shown(str(root / "assets" / "model" / "target")) == "assets/model/target"
    assert _shown("Qwen/Qwen2.5-VL-7B-Instruct") == "Qwen/Qwen2.5-VL-7B-Instruct"
    from app.runs.facade import SpecvlmFacade
    b = Backend(SpecvlmFacade())
    bundled = next(n for n, p in PRESETS.items() if not p.requires_cuda and p.draft)
    text, _, _ = b.preset_info(bundled)
    assert str(root) not in text and "assets/model/target" in text and "assets/model/draft" in text


def test_a_stopped_runs_upload_stays_for_the_run_held_behind_it():
    """The page holds a Run clicked while the last one stops, so no request refers to its video meanwhile: the
    stopped run keeps the upload for it (even if the page's own hold is gone), and the next run lets it go."""
    import uuid
    from types import SimpleNamespace

    from app.page.ui import build_demo, gradio_upload_dir
    b = Backend(FakeEngine(step_s=0.01), update_interval_s=0.02)
    demo = build_demo(b, examples=[])
    compare = next(fn.fn for fn in demo.fns.values() if fn.api_name == "compare")
    folder = Path(gradio_upload_dir()) / f"test-{uuid.uuid4().hex[:8]}"
    folder.mkdir(parents=True)
    video = folder / "clip.mp4"
    video.write_bytes(b"\x00" * 16)
    request = SimpleNamespace(session_hash="held")
    run = compare(str(video), max_new=1000, request=request, progress=lambda *a, **k: None)
    for upd in run:
        if any("decoding" in str(v) for v in upd.values()):
            b.stop("held")
            assert b.queue_next("held")   # Run clicked while it stops
            break
    for _ in run:
        pass
    assert video.exists()                  # kept for the held Run
    for _ in compare(str(video), max_new=4, request=request, progress=lambda *a, **k: None):
        pass
    assert not video.exists()              # that Run used it; nothing holds it any more


def test_a_speedup_before_both_runs_finished_says_so():
    from app.views.run_view import RunPanel
    from app.views.summary import summary_md
    from specvlm.analysis.run import RunRecord
    from specvlm.types import StepEvent

    def record(elapsed, accept):   # 10 tokens in ``elapsed`` seconds
        steps, n = [StepEvent(0, [1], 0, [False], "a", num_generated=1)], 1
        for i, a in enumerate(accept):
            n += a + 1
            steps.append(StepEvent(i + 1, [1] * (a + 1), a, [True] * a + [False], "b", num_generated=n,
                                   elapsed_s=elapsed * (i + 1) / len(accept)))
        return RunRecord(steps=steps)

    van = RunPanel("Vanilla", record(1.0, [0] * 9), done=True)
    spec = RunPanel("SpecVLM", record(0.5, [3, 4]), done=False, stopped=True)
    assert "**Decode speedup 2.00x** (tokens/s ratio so far, before a run finished)" in summary_md(van, spec)
    spec.done = True
    assert "**Decode speedup 2.00x** (tokens/s ratio)" in summary_md(van, spec)


def test_an_empty_panel_says_which_part_of_the_work_runs():
    from app.runs.progress import LayerProgress
    from app.views.run_view import RunView
    view = RunView("SpecVLM", None)
    upd = view.fold([LayerProgress("vanilla", 12, 39)], None)
    assert upd["status"].startswith("Prefill (vanilla)")
    assert _text_of(upd["vanilla_html"]) == _text_of(upd["spec_html"]) == "waiting · prefill (vanilla): part 12 of 39"
    upd = view.step_update("vanilla")                       # vanilla decodes: the prefill's count is over
    assert _text_of(upd["spec_html"]) == "waiting · vanilla decoding"
    view.runs["vanilla"].done = True
    upd = view.fold([LayerProgress("spec", 3, 40, 2.5)], None)
    assert "vanilla_html" not in upd                        # a finished panel keeps its text
    assert _text_of(upd["spec_html"]) == "waiting · prefill + pruning (SpecVLM): part 3 of 40 · 2 s"
    assert set(view.fold([LayerProgress("explain", 1, 9)], None)) == {"status"}


def test_an_example_resets_what_it_does_not_name_and_says_what_the_person_had_changed():
    from app.page.examples import RESET, example_reset, settings_values

    presets = {"A": RunSettings(preset="A", num_frames=32, max_new_tokens=128, tree_shape="chain", depth=4),
               "B": RunSettings(preset="B", num_frames=16, max_new_tokens=64, tree_shape="chain", depth=12)}
    defaults = lambda p: settings_values(presets[p])   # noqa: E731
    row = ["v.mp4", "p", None, None, False, 64, "B", "both"]
    current = defaults("A") | {"frames": 256.0, "timing_pairs": 5}      # the person changed two settings on A
    values, note = example_reset(row, current, defaults, {"frames": "Frames", "timing_pairs": "Timing runs"})
    assert set(values) == set(RESET) and "frames" in values and "preset" not in values
    assert (values["frames"], values["depth"], values["timing_pairs"]) == (16, 12, 1)   # B's defaults
    assert note == ("*This example reset settings you had changed to its preset's defaults: "
                    "Frames (256 → 16), Timing runs (5 → 1).*")
    assert example_reset(row, defaults("A"), defaults, {})[1] == ""     # A's own defaults: nothing to say
    # the click may already have set the preset to the example's (B) while the settings still hold A's defaults:
    # A's values are not the person's changes when A is one of the page's example presets
    on_b = defaults("A") | {"preset": "B"}
    assert example_reset(row, on_b, defaults, {"depth": "Depth"}, presets=["A", "B"])[1] == ""
    changed = on_b | {"frames": 256.0}
    assert example_reset(row, changed, defaults, {"frames": "Frames"}, presets=["A", "B"])[1] == (
        "*This example reset settings you had changed to its preset's defaults: Frames (256 → 16).*")
