"""What a user meets around a Run (no browser): the SpecVLM panel after Stop during vanilla decoding, the
fixed-length note, the Compare tab's download, the API's old input names, a bad run JSON on the replay box."""
from __future__ import annotations

import logging
from types import SimpleNamespace

import gradio as gr
import pytest

from helpers.fakes import FakeEngine, FakeTokenizer, sample_video

from app.inputs.run_inputs import FIXED_LENGTH_NOTE
from app.inputs.settings import RunRequest, old_name_notes
from app.runs.backend import Backend
from app.views.downloads import comparison_file, comparison_markdown, panel_text
from app.views.plots import plain_text_html, tokens_html


def _demo(backend: Backend):
    from app.page.ui import build_demo
    demo = build_demo(backend, examples=[])
    return demo, {fn.api_name: fn for fn in demo.fns.values() if fn.api_name}


def _by_id(upd: dict) -> dict:
    return {getattr(c, "elem_id", None): v for c, v in upd.items()}


def test_stop_during_vanilla_leaves_no_waiting_panel():
    """Stopped while vanilla decodes: the SpecVLM panel says it never started instead of ``waiting…``; the
    vanilla panel keeps its text."""
    b = Backend(FakeEngine(step_s=0.01), update_interval_s=0.02)
    demo, fns = _demo(b)
    ups = []
    for upd in fns["compare"].fn(str(sample_video()), max_new_tokens=1000, request=SimpleNamespace(session_hash="s"),
                                 progress=lambda *a, **k: None):
        ups.append(_by_id(upd))
        if "decoding" in str(ups[-1].get("vanilla-stats", "")) and len(ups) > 3:
            b.stop("s")
    last = ups[-1]
    assert last["status"].startswith("**Stopped.**")
    assert "waiting…" not in last["spec-text"] and "stopped before it started" in last["spec-text"]
    assert "· stopped ·" in last["spec-stats"]
    shown = panel_text(last["vanilla-text"])
    assert shown and FakeTokenizer().decode(FakeEngine().tokens(5)).startswith(shown[:5])


def test_a_fixed_length_run_says_why_the_text_goes_on_after_the_answer():
    b = Backend(FakeEngine(step_s=0.0), update_interval_s=0.0)
    demo, fns = _demo(b)
    *_, last = fns["compare"].fn(str(sample_video()), max_new_tokens=30, fixed_length=True, request=None,
                                 progress=lambda *a, **k: None)
    assert FIXED_LENGTH_NOTE in _by_id(last)["status"] and "chat turns" in FIXED_LENGTH_NOTE
    *_, last = fns["compare"].fn(str(sample_video()), max_new_tokens=30, request=None, progress=lambda *a, **k: None)
    assert "chat turns" not in _by_id(last)["status"]
    note = demo.specvlm_components["fixed_note"]
    assert "chat turns" in note.value and note.visible is False    # shown while the Fixed length box is ticked


def test_the_compare_download_holds_both_texts_and_the_summary(tmp_path):
    van = plain_text_html("a < b\nsecond line")
    spec = tokens_html([("a", True), (" < b", False), ("\nsecond line", True)], legend=False)
    assert panel_text(van) == panel_text(spec) == "a < b\nsecond line"
    assert panel_text(plain_text_html("", "waiting…")) == ""
    assert comparison_markdown(plain_text_html("", "waiting…"), tokens_html([], placeholder="waiting…"), "") is None
    path = comparison_file(van, spec, "**Outputs identical** ✓", folder=str(tmp_path))
    text = open(path, encoding="utf-8").read()
    assert text.count("a < b\nsecond line") == 2 and "## Vanilla" in text and "## SpecVLM" in text
    assert text.rstrip().endswith("**Outputs identical** ✓")


def test_the_download_button_follows_a_run():
    """The Run event is followed by one that writes the file from the finished panels and shows the button."""
    b = Backend(FakeEngine(step_s=0.0), update_interval_s=0.0)
    demo, _ = _demo(b)
    c = demo.specvlm_components
    fns = [fn for fn in demo.fns.values() if c["compare_download"] in fn.outputs]
    then = [fn for fn in fns if fn.inputs]
    click = [fn for fn in fns if not fn.inputs]   # every Run click hides the last run's file at once
    assert len(click) == 1 and click[0].fn(None)[2] == {"__type__": "update", "visible": False}
    assert len(then) == 1 and [x.elem_id for x in then[0].inputs] == ["vanilla-text", "spec-text", "summary", "status"]
    upd = then[0].fn(plain_text_html("done text"), tokens_html([("done text", True)]), "summary", "**Done.**")
    assert upd["visible"] is True and open(upd["value"], encoding="utf-8").read().count("done text") == 2
    assert then[0].fn(plain_text_html("", "waiting…"), tokens_html([]), "", "**Done.**")["visible"] is False
    held = then[0].fn(plain_text_html("old"), tokens_html([("old", True)]), "s",
                      "**Stopped.** The next run starts now.")
    assert held["visible"] is False and held["value"] is None   # a held Run starts: no file of the stopped one


@pytest.mark.parametrize("given, lam, budget, notes", [
    (dict(lambda_=0.3, max_new_tokens=7), 0.3, 7, 0),
    (dict(top_p=0.2, max_new=5), 0.2, 5, 2),
    (dict(lambda_=0.3, top_p=0.2), 0.2, None, 1),     # both given: the old name's value is used, and said
])
def test_old_input_names_still_set_lambda_and_the_budget(given, lam, budget, notes):
    req = RunRequest.from_inputs({"video": "v.mp4", **given})
    assert req.settings.top_p == lam
    if budget is not None:
        assert req.settings.max_new_tokens == budget
    assert len(old_name_notes(given)) == notes


def test_a_bad_run_json_on_the_replay_box_is_one_line(tmp_path, caplog):
    from app.views.inspect_view import build_inspect_tab
    with gr.Blocks() as demo:
        build_inspect_tab()
    on_upload = next(fn.fn for fn in demo.fns.values() if fn.fn is not None and fn.fn.__name__ == "on_upload")
    bad = tmp_path / "run.json"
    bad.write_text("{not json")
    with caplog.at_level(logging.WARNING, logger="app.views.inspect_view"), pytest.raises(gr.Error) as e:
        on_upload(str(bad))
    assert e.value.print_exception is False                       # Gradio prints no traceback
    assert e.value.__cause__ is None and e.value.__suppress_context__   # and none is chained
    lines = [r.getMessage() for r in caplog.records if r.name == "app.views.inspect_view"]
    assert len(lines) == 1 and "could not read" in lines[0] and "\n" not in lines[0]
