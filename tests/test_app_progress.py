"""Progress through long work: one progress event per prefill part (vision block, decoder layer, chunk of a long
layer's attention; both runs), a repeat with the seconds at least every second while one part runs, and one per
decode step, through the app's backend with the bundled preset on a many-frame clip; never "Prefill" once text
streams; none after Done, while the failing steps are explained in the background; Stop reachable then. The
preset loads random stand-ins of the bundled pair at its depth (4 decoder layers, 2 vision blocks; its tokenizer
and processor, so the same video tokens; :mod:`helpers.bundled_like`): the progress, not the model, is under test."""
from __future__ import annotations

import dataclasses
import re

import pytest

from app.inputs.settings import RunRequest
from app.runs.backend import Backend
from app.runs.done_first import EXPLAINING
from app.runs.progress import LayerProgress, LayerTicks, layer_status
from specvlm import assets
from specvlm.models.stopping import checked_layers

CLIP = str(assets.path("videos", "shapes_long.mp4"))
LAYER = re.compile(r"^(.*): part (\d+) of (\d+)(?: · (\d+) s)?$")


def test_layer_ticks_count_polls_until_the_first_event():
    flag = {"stop": False}
    ticks = LayerTicks("vanilla", 3, clock=lambda: 0.0).watch(lambda: flag["stop"])

    def work():
        for _ in range(3):
            assert ticks() is False                  # a prefill's polls
        yield "prefill info"
        ticks(), ticks()                             # decode steps poll too: not prefill progress
        yield "step"

    events = ticks.counted(work())
    assert next(events) == "prefill info" and ticks.news() == [LayerProgress("vanilla", k, 3) for k in (1, 2, 3)]
    assert next(events) == "step" and ticks.news() == [] and ticks.count == 5
    flag["stop"] = True
    assert ticks() is True                           # the Run's stop flag still answers


def test_layer_ticks_repeat_the_count_with_the_seconds_while_a_part_runs():
    now = [100.0]
    ticks = LayerTicks("spec", 4, tick_s=1.0, clock=lambda: now[0])
    now[0] += 0.4
    assert ticks.news() == []                                        # under a second: nothing new
    now[0] += 0.7
    assert ticks.news() == [LayerProgress("spec", 0, 4, pytest.approx(1.1))]   # preparing: no poll yet
    ticks(), ticks()
    now[0] += 0.2
    assert ticks.news() == [LayerProgress("spec", k, 4, pytest.approx(1.3)) for k in (1, 2)]
    now[0] += 0.9
    assert ticks.news() == []                                        # 0.9 s since the last message
    now[0] += 0.2
    assert ticks.news() == [LayerProgress("spec", 2, 4, pytest.approx(2.4))]   # the same count, later
    events = ticks.counted(iter(["prefill info"]))
    assert next(events) == "prefill info"
    now[0] += 5
    assert ticks.news() == []                                        # decoding: the steps are the progress


def test_the_status_shows_parts_of_work_and_seconds_apart():
    phases = {"vanilla": (0.1, "Prefill (vanilla)"), "spec": (0.5, "x"), "explain": (0.9, "y")}
    frac, desc, status = layer_status(LayerProgress("vanilla", 3, 12, 7.6), phases, "SpecVLM", 256)
    assert desc == "Prefill (vanilla): part 3 of 12 · 7 s" and status == "Prefill (vanilla)… 256 frames: part 3 of 12 · 7 s."
    assert frac == pytest.approx(0.1 + 0.4 * 3 / 12 / 2)
    assert layer_status(LayerProgress("spec", 0, 12, 2.0), phases, "SpecVLM", 256)[1] == \
        "Prefill + pruning (SpecVLM): starting · 2 s"
    assert layer_status(LayerProgress("explain", 5, 9, 0.5), phases, "SpecVLM", 256)[1] == \
        "Explaining the failing steps: part 5 of 9"


@pytest.fixture(scope="module")
def backend():
    from helpers.bundled_like import stand_in_engine

    return Backend(stand_in_engine(layers=4, vision_depth=2), device="cpu", dtype="float32")


@pytest.fixture(scope="module")
def long_run(backend):
    """The default preset on the bundled long clip at the page's 256-frame setting (capped at its 200 frames)."""
    s = dataclasses.replace(backend.default_settings(), num_frames=256, max_new_tokens=8)
    events, views = [], []

    def progress(frac, desc):
        events.append(("progress", frac, desc, views[0].runs["vanilla"].record.text if views else ""))

    for upd in backend.run(RunRequest(video=CLIP, prompt="Describe this video in detail.", settings=s),
                           progress=progress, views=views):
        if "status" in upd:
            events.append(("status", None, upd["status"], views[0].runs["vanilla"].record.text if views else ""))
    return events, views[0], backend.get_pair(*backend.resolve_model(s)[:2])


def _layers(events, label):
    """(done, total) of each part progress event whose description starts with ``label`` (a repeat of the same
    part with later seconds counted once)."""
    out = []
    for kind, _, desc, _ in events:
        m = LAYER.match(desc) if kind == "progress" else None
        if m and m[1].startswith(label) and (not out or out[-1] != (int(m[2]), int(m[3]))):
            out.append((int(m[2]), int(m[3])))
    return out


def test_progress_moves_once_per_prefill_layer_and_per_decode_step(long_run):
    events, view, pair = long_run
    assert view.failure is None and view.record is not None and view.runs["vanilla"].record.num_video_tokens > 4000
    vision, layers = checked_layers(pair.target), pair.target.config.get_text_config().num_hidden_layers
    assert vision >= 2 and layers >= 4
    vanilla = _layers(events, "Prefill (vanilla)")              # each part once, up to the total it announced
    total = vanilla[-1][1]
    assert vanilla == [(k, total) for k in range(1, total + 1)]
    assert total >= 1 + vision + 2 * layers    # entry, blocks, pass A (chunks of a long prompt), pass B
    spec = _layers(events, "Prefill + pruning")
    assert spec == [(k, spec[-1][1]) for k in range(1, spec[-1][1] + 1)]
    draft = 1 + pair.draft.config.get_text_config().num_hidden_layers + checked_layers(pair.draft)
    assert spec[-1][1] == total + draft                          # + the draft's entry, layers and vision blocks
    done = next(i for i, e in enumerate(events) if e[0] == "status" and e[2].startswith("**Done"))
    assert not [e for e in events[done:] if e[0] == "progress"]  # the explanation runs after Done, in the background
    assert events[-1][2].startswith("**Done") and EXPLAINING not in events[-1][2]
    for name, run in (("Vanilla", view.runs["vanilla"]), (view.runs["spec"].name, view.runs["spec"])):
        steps = [d for k, _, d, _ in events if k == "progress" and d.startswith(f"{name} decoding:")]
        assert steps == [f"{name} decoding: {n} of 8 tokens" for n in run.record.counts]      # one per decode step
    fracs = [f for k, f, _, _ in events if k == "progress"]
    assert fracs == sorted(fracs) and 0 < fracs[0] and fracs[-1] <= 1.0


def test_nothing_says_prefill_once_vanilla_text_streams(long_run):
    events, view, _ = long_run
    first = next(i for i, e in enumerate(events) if e[3])
    assert view.runs["vanilla"].record.text and first > 0
    assert not [e for e in events[first:] if e[2].startswith("Prefill (vanilla)")]
    assert any(e[2].startswith("Prefill (vanilla)") for e in events[:first])


def test_stop_while_explaining_ends_the_run_with_its_comparison(backend):
    s = dataclasses.replace(backend.default_settings(), num_frames=32, max_new_tokens=8)
    views = []
    last = None
    for upd in backend.run(RunRequest(video=CLIP, prompt="Describe this video in detail.", settings=s),
                           session="explain-stop", views=views):
        if upd.get("background"):                                  # Done: Stop while the explanation runs
            assert "explaining the failing steps" in upd["status"]
            backend.stop("explain-stop")
        last = upd
    assert last["ui_state"] == "idle" and last["status"].startswith("**Done")   # the comparison stands
    assert views[0].record is not None and not views[0].record.why
    assert backend.active_workers() == []
