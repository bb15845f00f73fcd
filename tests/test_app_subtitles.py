"""Subtitles and on-screen-text forcing through the app with the real engine on a tiny Qwen2.5-VL (fp32, CPU): uploaded subtitles
reach both runs in every subtitle mode without breaking losslessness, and "always keep on-screen
text tokens" forces the draft to keep the tokens a generated clip's ground truth puts under its text.
"""
from __future__ import annotations

from helpers.app_fakes import RecordingEngine

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from app.inputs.settings import RunRequest, RunSettings
from app.runs.backend import Backend

from specvlm.bench import clipfiles
from specvlm.bench import synth
from specvlm.analysis.text_aware import text_tokens_from_truth
from specvlm.types import PrefillInfo

TINY = "Tiny (in-process)"
SRT = """1
00:00:00,000 --> 00:00:01,000
A red square sits still.

2
00:00:01,000 --> 00:00:02,000
Then it starts to move.
"""


@pytest.fixture(scope="module")
def engine(qwen_tiny):
    from specvlm.models.pair import pair_from_models
    return RecordingEngine(pair_from_models(*qwen_tiny, name="tiny"))


@pytest.fixture(scope="module")
def clip_files(tmp_path_factory):
    """A generated 8-frame clip with burned-in text (.mp4), its ground truth (.json) and subtitles (.srt)."""
    folder = tmp_path_factory.mktemp("issue8")
    frames, truth = synth.generate(5, synth.SceneSpec(num_frames=8, height=112, width=112, fps=4.0, text_prob=1.0,
                                                      num_objects=1, enter_leave_prob=0.0))
    assert truth.text is not None
    video = clipfiles.write_mp4(folder / "clip.mp4", frames, truth.fps)
    truth_path = clipfiles.write_truth(folder / "clip.json", truth)
    srt = folder / "clip.srt"
    srt.write_text(SRT, encoding="utf-8")
    return SimpleNamespace(video=str(video), truth=str(truth_path), srt=str(srt))


def _settings(**kw):
    return RunSettings(**{**dict(preset=TINY, num_frames=8, max_new_tokens=10, depth=3, top_k=2, total_tokens=6), **kw})


def _run(engine, files, **kw):
    srt, truth = kw.pop("srt", None), kw.pop("truth", None)
    b = Backend(engine, device="cpu", dtype="float32", update_interval_s=0.05)
    ups = list(b.run(RunRequest(files.video, "Describe the video.", _settings(**kw), srt=srt, truth=truth),
                     session="s"))
    last = ups[-1]
    assert "error" not in last, last.get("error")
    van, spec = engine.runs["vanilla"], engine.runs["specvlm"]
    return last, van, spec, last.get("record")


def _ids(events):
    return [t for ev in events if not isinstance(ev, PrefillInfo) for t in ev.token_ids]


def _prefill(events) -> PrefillInfo:
    assert isinstance(events[0], PrefillInfo)
    return events[0]


@pytest.fixture(scope="module")
def plain_prompt_tokens(engine, clip_files):
    """Target prompt length without subtitles."""
    _, van, _, _ = _run(engine, clip_files)
    return _prefill(van).num_prompt_tokens


@pytest.mark.parametrize("mode, target_sees, draft_sees", [
    ("both", True, True), ("target", True, False), ("draft", False, True), ("none", False, False),
])
def test_subtitles_reach_both_runs_losslessly_in_every_mode(engine, clip_files, plain_prompt_tokens, mode,
                                                           target_sees, draft_sees):
    last, van, spec, rec = _run(engine, clip_files, srt=clip_files.srt, subtitle_mode=mode)
    assert _ids(van) and _ids(van) == _ids(spec), mode  # greedy, fp32: token-identical
    assert "Outputs identical" in last["summary"]
    pv, ps = _prefill(van), _prefill(spec)
    n = max(pv.target_subtitle_tokens, ps.target_subtitle_tokens, ps.draft_subtitle_tokens)
    assert (n > 0) == (target_sees or draft_sees)
    assert pv.target_subtitle_tokens == ps.target_subtitle_tokens == (n if target_sees else 0)  # vanilla = target
    assert ps.draft_subtitle_tokens == (n if draft_sees else 0)
    assert pv.num_prompt_tokens == ps.num_prompt_tokens == plain_prompt_tokens + (n if target_sees else 0)
    assert (rec.prefill.target_subtitle_tokens, rec.prefill.draft_subtitle_tokens) == \
        (ps.target_subtitle_tokens, ps.draft_subtitle_tokens)
    assert "2 subtitle cues shown to" in last["status"]


def test_keep_text_forces_the_text_tokens(engine, clip_files):
    last, van, spec, rec = _run(engine, clip_files, truth=clip_files.truth, keep_text=True, drop_rate=0.5)
    p = _prefill(spec)
    truth = synth.SceneTruth.from_dict(json.loads(Path(clip_files.truth).read_text()))
    want = text_tokens_from_truth(truth, engine.clips[-1].timestamps, p.token_grid, p.frames_per_token)
    assert 0 < want.numel() <= p.prune.num_kept  # fits the budget, so every text token is forced
    assert p.prune.forced is not None and p.prune.forced.tolist() == sorted(want.tolist())
    assert bool(torch.isin(p.prune.forced, p.prune.keep).all())  # the draft keeps every forced token
    assert _prefill(van).prune is None and _ids(van) == _ids(spec)  # still lossless
    n = p.prune.forced.numel()
    assert f"kept **{n}** on-screen-text token" in last["summary"] and f"kept {n} on-screen-text token" in \
        last["status"]
    k = p.prune.num_kept                                   # the page says what the forced tokens replace
    assert f"count against the draft's {k}-token budget: {n} of its Stage I/II picks gave way" in last["status"]
    assert rec.prefill.prune.forced.tolist() == p.prune.forced.tolist()


def test_keep_text_and_subtitles_together(engine, clip_files):
    last, van, spec, rec = _run(engine, clip_files, srt=clip_files.srt, subtitle_mode="target",
                                truth=clip_files.truth, keep_text=True)
    p = _prefill(spec)
    assert p.prune.forced is not None and p.prune.forced.numel() > 0 and p.target_subtitle_tokens > 0
    assert p.draft_subtitle_tokens == 0 and _ids(van) == _ids(spec)
    # the Inspect record (and so its JSON export) keeps these settings
    assert {"subtitle_mode": "target", "subtitle_cues": 2, "keep_text": True}.items() <= rec.meta.items()
    # and why its failing steps failed, computed after the run on the same (forced, withheld) inputs
    from specvlm.analysis.why import rejections
    refused = {pos for _, pos, _ in rejections(rec.steps)}
    assert rec.why and all(w["position"] in refused and 0.0 <= w["share_unseen"] <= 1.0 for w in rec.why)


def test_keep_text_unchecked_forces_nothing(engine, clip_files):
    last, _, spec, _ = _run(engine, clip_files, truth=clip_files.truth)
    assert _prefill(spec).prune.forced is None and "on-screen-text" not in last["summary"]


def test_bad_inputs_are_readable_and_the_app_keeps_working(engine, clip_files, tmp_path):
    b = Backend(engine, device="cpu", dtype="float32")
    junk = tmp_path / "junk.srt"
    junk.write_bytes(bytes(range(256)) * 4)
    bad_json = tmp_path / "clip.json"
    bad_json.write_text('{"width": 112, "height": 112, "fps": 4.0}')
    for kw, msg in ((dict(srt=str(junk)), "junk.srt"), (dict(truth=str(bad_json)), "'clip.json'")):
        last = list(b.run(RunRequest(clip_files.video, "", _settings(keep_text=True), **kw), session="s"))[-1]
        assert last["status"].startswith("**Error:**") and msg in last["error"], last["error"]
    last = list(b.run(RunRequest(clip_files.video, "", _settings(keep_text=True), srt=clip_files.srt,
                                 truth=clip_files.truth), session="s"))[-1]  # the same backend, good files
    assert last["status"].startswith("**Done.**") and "on-screen-text token" in last["status"]
    assert _ids(engine.runs["vanilla"]) == _ids(engine.runs["specvlm"])
