"""Run records: building from a stream, JSON round trip, step trees and the Inspect tab's functions."""
from __future__ import annotations

import html
import json
import math
import re

import pytest
import torch

from helpers.media import make_clip

from app.views import inspect_view as iv
from specvlm.analysis import records as ins
from specvlm.config import DecodeConfig
from specvlm.engine.stream import stream
from specvlm.models.pair import pair_from_models
from specvlm.text.subtitles import Cue
from specvlm.types import DraftTreeRecord, PrefillInfo, PruneResult, StepEvent
from specvlm.engine.prepare import prepare

PROMPT = "describe this video in detail"


def _known_events():
    """A hand-made run: step 1 accepts 'B','C' then diverges; step 2 rejects every first token."""
    lt = lambda xs: torch.tensor(xs, dtype=torch.long)  # noqa: E731
    pr = PruneResult(lt([0, 3]), lt([0]), lt([3]), torch.tensor([0.5, 0.1, 0.1, 0.3]), 4, "specvlm")
    info = PrefillInfo(20, 4, 18, pr, 0.1, 0.01, 0.02, lt([[0, 0, 0], [0, 0, 1], [0, 1, 0], [0, 1, 1]]), 2)
    # nodes: 0 'B' (root child, p .6), 1 'X' (root child, p .3), 2 'C' (child of 0, p .5),
    #        3 'D' (child of 2, p .5), 4 'Y' (child of 2, p .25); target accepts 0, 2 then says 'E'
    lp = [math.log(.6), math.log(.3), math.log(.6 * .5), math.log(.6 * .5 * .5), math.log(.6 * .5 * .25)]
    t1 = DraftTreeRecord([11, 12, 13, 14, 15], [-1, -1, 0, 2, 2], lp, [0, 2], 16)
    t2 = DraftTreeRecord([12, 13], [-1, -1], [math.log(.5), math.log(.4)], [], 17)
    return [info,
            StepEvent(0, [10], 0, [False], "A"),
            StepEvent(1, [11, 13, 16], 2, [True, True, False], "BCE", 4.0, 6.0, 5, 0.1, 4, t1),
            StepEvent(2, [17], 0, [False], "F", 3.0, 5.0, 2, 0.2, 5, t2)]


TEXTS = {10: "A", 11: "B", 12: "X", 13: "C", 14: "D", 15: "Y", 16: "E", 17: "F"}


class _Tok:
    def decode(self, ids):
        return "".join(TEXTS[i] for i in ids)


@pytest.fixture(scope="module")
def known():
    cfg = DecodeConfig(method="specvlm", max_new_tokens=5)
    return ins.record_from_events(_known_events(), cfg, prompt="p", tokenizer=_Tok())


def test_known_step_tree(known):
    t = ins.step_tree(known, 1)
    assert (t.root_token, t.root_text, t.target_token, t.target_text) == (10, "A", 16, "E")
    assert t.accepted_path == [0, 2] and t.accept_length == 2 and t.diverged_at == 2
    got = [(n.index, n.parent, n.depth, n.text, round(n.draft_prob, 6), n.accepted, n.diverged, n.target_text)
           for n in t.nodes]
    assert got == [(0, -1, 1, "B", 0.6, True, False, None), (1, -1, 1, "X", 0.3, False, False, None),
                   (2, 0, 2, "C", 0.5, True, False, None), (3, 2, 3, "D", 0.5, False, True, "E"),
                   (4, 2, 3, "Y", 0.25, False, True, "E")]
    assert t.nodes[4].path_prob == pytest.approx(.6 * .5 * .25)
    t2 = ins.step_tree(known, 2)
    assert t2.diverged_at == -1 and t2.root_text == "E" and all(n.diverged for n in t2.nodes)
    assert t2.nodes[0].target_token == 17
    with pytest.raises(ins.RecordError, match="no draft tree"):
        ins.step_tree(known, 0)
    with pytest.raises(ins.RecordError, match="not in this run"):
        ins.step_tree(known, 9)


def test_known_record_round_trip_and_queries(known, tmp_path):
    path = ins.save_json(known, tmp_path / "run.json")
    raw = json.loads(open(path).read())
    assert raw["format"] == "specvlm-run" and raw["version"] == ins.RECORD_VERSION
    back = ins.load_json(path)
    assert ins.to_dict(back) == ins.to_dict(known)
    assert ins.step_tree(back, 1) == ins.step_tree(known, 1)  # no tokenizer needed after import
    assert back.tau == 1.0 and back.accept_lengths == [2, 0] and back.text == "ABCEF"
    info = back.prefill
    assert info.prune.keep.tolist() == [0, 3] and info.token_grid.shape == (4, 3) and info.frames_per_token == 2
    rows = ins.lowest_accept_steps(back, 5, context_chars=2)
    assert [(r["step"], r["accept_length"], r["before"], r["text"], r["after"]) for r in rows] == [
        (2, 0, "CE", "F", ""), (1, 2, "A", "BCE", "F")]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": "other"}))
    with pytest.raises(ins.RecordError, match="not a SpecVLM run"):
        ins.load_json(bad)
    bad.write_text(json.dumps(raw | {"version": ins.RECORD_VERSION + 1}))
    with pytest.raises(ins.RecordError, match="version"):
        ins.load_json(bad)
    bad.write_text("{not json")
    with pytest.raises(ins.RecordError, match="could not read"):
        ins.load_json(bad)


def test_view_functions_on_the_known_record(known):
    fig = iv.accept_chart(known, selected=2)
    bar = fig.data[0]
    assert list(bar.x) == [1, 2] and list(bar.y) == [2, iv.ZERO_BAR]
    assert [list(c) for c in bar.customdata] == [[1, "BCE", 2], [2, "F", 0]]
    page = iv.tree_html(ins.step_tree(known, 1))
    assert page.count('class="tree-node tree-accepted"') == 2 and page.count("tree-rejected") == 2
    assert "target: <b>E</b>" in page and "p=0.60" in page and "p=0.25" in page
    assert iv.lowest_table(known, 1) == [[2, 0, 2, "ABCE", "F", ""]]
    colored = iv.accept_colored_html(known)
    spans = re.findall(r'<span class="acc-tok"[^>]*>(.*?)</span>', colored)
    assert html.unescape("".join(spans)) == known.text
    assert 'data-step="1" data-accept="2"' in colored
    assert len(iv.prune_maps(known)) == 1  # one frame group, grey canvas without thumbnails
    assert iv.default_step(known) == 2 and "τ = 1.00" in iv.summary_md(known)
    assert "no draft tree" in iv.step_view(known, 0)


@pytest.fixture(scope="module")
def tiny_run(qwen_tiny):
    pair = pair_from_models(*qwen_tiny)
    clip = make_clip()
    cues = [Cue(0.0, 1.0, "a red circle"), Cue(0.5, 2.0, "the number seven")]
    cfg = DecodeConfig(method="specvlm", max_new_tokens=40, stop_at_eos=False)
    events = list(stream(pair, prepare(pair, clip, PROMPT, subtitles=cues, subtitle_mode="target"),
                         cfg, record_trees=True))
    rec = ins.record_from_events(events, cfg, prompt=PROMPT, tokenizer=pair.processor.tokenizer, clip=clip,
                                 meta={"subtitle_mode": "target"})
    return pair, events, rec


def test_tiny_run_record_matches_the_events(tiny_run, tmp_path):
    pair, events, rec = tiny_run
    info, steps = events[0], events[1:]
    assert rec.prefill is info                     # the record keeps the stream's own PrefillInfo
    back = ins.prefill_from_dict(ins.prefill_to_dict(info))
    assert torch.equal(back.prune.keep, info.prune.keep) and torch.equal(back.prune.scores, info.prune.scores)
    assert rec.prefill.target_subtitle_tokens > 0 and rec.prefill.draft_subtitle_tokens == 0
    assert rec.accept_lengths == [s.accept_length for s in steps[1:]]
    assert len(rec.thumbnails) == 4 and rec.frames().shape[0] == 8 and rec.timestamps[1] == 0.25
    back = ins.load_json(ins.save_json(rec, tmp_path / "tiny.json"))
    assert ins.to_dict(back) == ins.to_dict(rec)
    for st in (1, len(steps) - 1):
        assert iv.step_view(back, st) == iv.step_view(rec, st, pair.processor.tokenizer)


def test_tiny_run_step_tree_is_the_drafted_tree(tiny_run):
    """The inspection callback returns the tree the engine drafted and verified at a known step."""
    pair, events, rec = tiny_run
    steps = events[1:]
    ev = max(steps[1:], key=lambda s: (s.accept_length, -s.step))  # longest accepted path, earliest
    tree = ins.step_tree(rec, ev.step)
    raw = ev.tree
    assert [n.token for n in tree.nodes] == raw.tokens and [n.parent for n in tree.nodes] == raw.parents
    assert [tree.nodes[i].token for i in tree.accepted_path] == ev.token_ids[:ev.accept_length]
    assert tree.target_token == ev.token_ids[-1] == raw.target_token
    assert tree.root_token == steps[ev.step - 1].token_ids[-1]
    tok = pair.processor.tokenizer
    assert [n.text for n in tree.nodes] == [tok.decode([t]) for t in raw.tokens]
    last = tree.accepted_path[-1] if tree.accepted_path else -1
    for n in tree.nodes:
        assert 0 < n.draft_prob <= 1 and n.accepted == (n.index in tree.accepted_path)
        assert n.diverged == (n.parent == last and not n.accepted)
        assert n.target_token == (raw.target_token if n.diverged else None)
        assert n.token != raw.target_token or not n.diverged  # the target chose something else there
    root_kids = [n.draft_prob for n in tree.nodes if n.parent == -1]
    assert sum(root_kids) <= 1 + 1e-6 and root_kids == sorted(root_kids, reverse=True)
    page = iv.step_view(rec, ev.step)
    assert f"<b>Step {ev.step}</b> · accepted {ev.accept_length}" in page
    assert page.count("tree-node") == len(raw.tokens)


def test_build_inspect_tab_and_refresh(tiny_run):
    import gradio as gr

    _, _, rec = tiny_run
    with gr.Blocks():
        c = iv.build_inspect_tab()
    assert {"state", "upload", "download", "chart", "step", "tree", "table", "tokens", "maps", "why",
            "why_maps"} <= set(c)
    summary, fig, table, tokens, maps, step, tree, why, why_maps, note = iv._refresh(rec)
    assert "No explanation in this run record" in why and why_maps == []   # recorded without explanations
    assert step == table[0][0] and table[0][1] == min(rec.accept_lengths)
    assert len(maps) == 4 and f"<b>Step {step}</b>" in tree and "τ =" in summary
    assert list(fig.data[0].customdata[0])[0] == 1
    assert iv._refresh(None)[5] is None
    path = iv.export_record(rec)
    assert ins.to_dict(ins.load_json(path)) == ins.to_dict(rec)


def test_browser_click_a_bar_shows_its_tree(known, tmp_path):
    """Real chromium: clicking a bar of the chart (plotly_click hook) and a table row pick the step;
    a run file can be uploaded and exported."""
    import gradio as gr
    from helpers.browser import chromium, served_page
    from helpers.fakes import free_port
    exe = chromium()

    other = ins.load_json(ins.save_json(known, tmp_path / "k.json"))
    other.steps = other.steps[:2]
    upload = ins.save_json(other, tmp_path / "upload.json")
    with gr.Blocks() as demo:
        st = gr.State(None)
        iv.build_inspect_tab(st)
        demo.load(lambda: known, None, st)
    port = free_port()
    demo.queue().launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    with served_page(demo, port, exe, viewport=(1300, 1100)) as page:
        title = page.locator(".specvlm-tree b").first
        page.get_by_text("Step 2", exact=True).wait_for(timeout=60_000)  # default: lowest accepted
        bars = page.locator(f"#{iv.CHART_ID} .bars path")
        bars.first.wait_for(timeout=30_000)
        page.wait_for_timeout(500)
        bars.nth(0).click(force=True)  # step 1
        page.get_by_text("Step 1", exact=True).wait_for(timeout=30_000)
        assert page.locator(".tree-accepted").count() == 2 and "target:" in page.inner_text(".specvlm-tree")
        page.locator('#specvlm-inspect-table [role=row][data-index="0"] [role=gridcell]').first.click()
        page.get_by_text("Step 2", exact=True).wait_for(timeout=30_000)
        assert title.inner_text() == "Step 2"
        with page.expect_download(timeout=30_000) as dl:
            page.get_by_text("Export this run").click()
        assert ins.to_dict(ins.load_json(dl.value.path())) == ins.to_dict(known)
        page.locator("input[type=file]").first.set_input_files(upload)
        page.get_by_text("over 1 verify steps", exact=False).first.wait_for(timeout=30_000)
