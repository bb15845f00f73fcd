"""The Inspect tab's "why" of a step: explanations recorded after a run, words and maps."""
from __future__ import annotations

import numpy as np
import pytest

from helpers.app_fakes import ClipEngine
from helpers.media import make_clip

from app.runs.facade import SpecvlmFacade
from app.views import why_view as wv
from specvlm.analysis import records as ins
from specvlm.config import DecodeConfig, PruneConfig
from specvlm.engine.prepare import prepare
from specvlm.engine.stream import stream
from specvlm.text.subtitles import Cue

PROMPT = "Describe the video."


@pytest.fixture(scope="module")
def explained(pairs):
    pair = pairs[("qwen", "std")]
    clip = make_clip(num_frames=8, side=112)
    cues = [Cue(0.0, 1.0, "one two three")]
    cfg = DecodeConfig(method="specvlm", max_new_tokens=24, prune=PruneConfig(drop_rate=0.75))
    inputs = prepare(pair, clip, PROMPT, subtitles=cues, subtitle_mode="target")
    events = list(stream(pair, inputs, cfg, record_trees=True))
    eng = SpecvlmFacade()
    rec = eng.make_record(events, cfg, PROMPT, pair, clip)
    return eng.explain(rec, pair, inputs, cues=cues, subtitle_mode="target"), events


def test_the_record_explains_its_rejection_steps_and_survives_json(explained, tmp_path):
    rec, _ = explained
    from specvlm.analysis.why import rejections

    rej = {step: pos for step, pos, _ in rejections(rec.steps)}
    assert rec.why and all(rej[w["step"]] == w["position"] for w in rec.why)
    assert all(0.0 <= w["share_unseen"] <= 1.0 for w in rec.why)
    back = ins.load_json(ins.save_json(rec, tmp_path / "run.json"))
    assert back.why == rec.why                                            # replayable without the model


def test_why_words_and_maps_of_an_explained_step(explained):
    rec, _ = explained
    w = rec.why[0]
    text = wv.why_html(rec, w["step"])
    assert "refused the draft" in text and text.count("Explanation:") == 1
    for key, share in w["shares"].items():                                # every part of the input, with its share
        assert f"{wv.SEGMENT_LABELS[key][0]} <b>{share:.0%}</b>" in text or key == "transcript"
    assert "transcript (withheld from the draft) <b>" in text             # the transcript went to the target only
    assert text.count('data-segment="') == sum(v > 0 for v in w["shares"].values())
    assert f'wrote <b>"{wv.visible_token(rec.token_text[int(w["token_id"])])}"</b>' in text
    assert wv.visible_token(" ") == "␣" and wv.visible_token(" a<b") == "␣a&lt;b" and wv.visible_token("") == "∅"
    maps = wv.why_maps(rec, w["step"], max_images=3)
    assert 1 <= len(maps) <= 3 and all(img.dtype == np.uint8 for img, _ in maps)
    grid = np.asarray(rec.prefill.token_grid).reshape(-1, 3)
    shown = {int(c.split()[1]) // rec.prefill.frames_per_token for _, c in maps}   # "frame <t> ..." captions
    kept_here = [g for g in shown if np.isin(np.nonzero(grid[:, 0] == g)[0], rec.prefill.prune.keep.numpy()).any()]
    green = [(img == np.array(wv.SEEN_RGB, np.uint8)).all(-1).any() for img, _ in maps]
    assert sum(green) == len(kept_here)                                   # the draft's kept cells are outlined
    assert all(c.endswith(" unseen)") and len(c) <= 40 for _, c in maps)  # short enough for a thumbnail


def test_steps_without_an_explanation_say_why(explained):
    rec, _ = explained
    explained_steps = {w["step"] for w in rec.why}
    other = next(s.step for s in rec.verify_steps if s.step not in explained_steps)
    assert "Not explained" in wv.why_html(rec, other) and wv.why_maps(rec, other) == []
    ev = next(s for s in rec.verify_steps if s.step == other)
    assert f"this one accepted {ev.accept_length} draft token" in wv.why_html(rec, other)
    assert wv.why_html(rec, 10_000) == "<i>This run has no verify step 10000.</i>"
    assert wv.why_html(rec, None) == ""


def _with_why(rec, w):
    return ins.RunRecord(rec.settings, rec.prompt, rec.prefill, rec.steps, rec.token_text, rec.timestamps,
                         rec.thumbnails, rec.meta, why=[w])


def test_the_why_names_one_explanation_the_shares_support(explained):
    rec, _ = explained
    base = dict.fromkeys(wv.SEGMENT_LABELS, 0.0)
    w = dict(rec.why[0], word="code", cue=[2.0, 3.5, "The code is 42."], explanation="withheld_transcript",
             shares=base | {"transcript": 0.9, "video_pruned": 0.1})
    text = wv.why_html(_with_why(rec, w), w["step"])
    assert "the withheld transcript</b>" in text and "90%" in text
    assert '"The code is 42."' in text and "(2.0-3.5 s)" in text and "did not get" in text
    assert "pruned video</b>" not in text                                 # one explanation, not two
    w = dict(w, explanation="pruned_video", shares=base | {"video_pruned": 0.7, "transcript": 0.3})
    text = wv.why_html(_with_why(rec, w), w["step"])
    assert "the pruned video</b>" in text and "70%" in text and "The code is 42." not in text
    assert f"kept {rec.prefill.prune.num_kept} of {rec.prefill.num_video_tokens}" in text
    w = dict(w, explanation="seen_input", shares=base | {"question": 0.6, "video_pruned": 0.4})
    text = wv.why_html(_with_why(rec, w), w["step"])
    assert "not a missing input</b>" in text and "question (60%)" in text
    old = {k: v for k, v in w.items() if k not in ("shares", "explanation")}  # a record from before the split
    assert f"{w['share_unseen']:.0%}</b> of the target's video attention" in wv.why_html(_with_why(rec, old), w["step"])


def test_the_comparison_comes_before_the_explanation_and_stop_keeps_it(pairs):
    from app.runs.worker import DecodeWorker, Phase, Record, RunJob
    from app.views.run_view import RunView
    from specvlm.analysis.run import Comparison
    from specvlm.config import VideoConfig
    from specvlm.types import Stopped

    pair = pairs[("qwen", "std")]
    cfg = DecodeConfig(method="specvlm", max_new_tokens=24, prune=PruneConfig(drop_rate=0.75))
    job = RunJob("clip.mp4", PROMPT, cfg, VideoConfig(num_frames=8), ("t", "d"),
                 subtitles=(Cue(0.0, 1.0, "one two three"),), subtitle_mode="target")
    worker = DecodeWorker(ClipEngine(), lambda *a: pair, 0.01)
    msgs = [m for batch in worker.run(job) for m in batch]
    kinds = [type(m).__name__ if not isinstance(m, Phase) else f"Phase:{m.name}" for m in msgs]
    at = kinds.index("Comparison")
    assert kinds.index("Record") < kinds.index("Phase:explain") and at < kinds.index("Phase:explain")  # Inspect first
    records = [m for m in msgs if isinstance(m, Record)]
    assert not records[0].data.get("why") and records[-1].data["why"]      # then comes the explained record
    with pytest.raises(Stopped):                                          # Stop reaches the extra target pass
        eng = ClipEngine()
        inputs = eng.prepare(pair, make_clip(num_frames=8, side=112), PROMPT)
        eng.explain(ins.from_dict(records[0].data), pair, inputs, should_stop=lambda: True)
    view = RunView("SpecVLM", cfg)
    for m in msgs:
        if isinstance(m, Comparison):
            view.fold([m])
    assert not view.final(stopped=True)["status"].startswith("**Stopped")  # a Stop while explaining: Done


def test_browser_why_shows_the_input_shares_and_whole_frame_captions(explained):
    """Real chromium: the why of the default step shows the stacked bar of the target's attention over its
    input, and every caption under the why thumbnails is shown whole (not cut by the gallery's height or
    an ellipsis)."""
    import gradio as gr

    from app.views import inspect_view as iv
    from helpers.browser import chromium, served_page
    from helpers.fakes import free_port

    exe = chromium()
    rec, _ = explained
    rec.why = [w for w in rec.why if int(w["step"]) == iv.default_step(rec)] or rec.why
    with gr.Blocks() as demo:
        st = gr.State(None)
        iv.build_inspect_tab(st)
        demo.load(lambda: rec, None, st)
    port = free_port()
    demo.queue().launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    with served_page(demo, port, exe, viewport=(1280, 1000)) as page:
        step = iv.default_step(rec)
        if wv.step_why(rec, step) is None:                              # show an explained step
            page.locator(f"#{iv.STEP_ID} input").fill(str(rec.why[0]["step"]))
            page.locator(f"#{iv.STEP_ID} input").press("Enter")
        page.locator(".specvlm-why-shares [data-segment]").first.wait_for(timeout=60_000)
        labels = page.locator("#specvlm-inspect-why-maps .caption-label")
        labels.first.wait_for(timeout=30_000)
        page.wait_for_timeout(500)
        cut = page.evaluate("""() => {
            const out = [];
            for (const g of document.querySelectorAll('#specvlm-inspect-why-maps')) {
              const wrap = g.querySelector('.grid-wrap') || g;
              const box = wrap.getBoundingClientRect();
              for (const el of g.querySelectorAll('.caption-label')) {
                const r = el.getBoundingClientRect();
                if (el.scrollWidth > el.clientWidth + 1 || r.bottom > box.bottom + 1 || r.height === 0)
                  out.push([el.textContent, el.scrollWidth, el.clientWidth, r.bottom, box.bottom]);
              }
            }
            return out;
        }""")
        assert labels.count() >= 1 and cut == [], cut
