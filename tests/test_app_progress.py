"""Progress through long work: one progress event per prefill layer (both runs and the explanation pass) and
per decode step, through the app's backend with the bundled pair on a many-frame clip; never "Prefill" once
text streams; Stop reachable while the failing steps are explained."""
from __future__ import annotations

import dataclasses
import re

import pytest

from app.inputs.settings import RunRequest
from app.runs.backend import Backend
from app.runs.facade import SpecvlmFacade
from app.runs.progress import LayerProgress, LayerTicks
from specvlm import assets
from specvlm.models.stopping import checked_layers

CLIP = str(assets.path("videos", "shapes_long.mp4"))
LAYER = re.compile(r"^(.*): layer (\d+) of (\d+)$")


def test_layer_ticks_count_polls_until_the_first_event():
    flag = {"stop": False}
    ticks = LayerTicks("vanilla", 3).watch(lambda: flag["stop"])

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


@pytest.fixture(scope="module")
def backend():
    return Backend(SpecvlmFacade(), device="cpu", dtype="float32")


@pytest.fixture(scope="module")
def long_run(backend):
    """The default pair on the bundled long clip at the page's 256-frame setting (capped at its 200 frames)."""
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
    """(done, total) of each layer progress event whose description starts with ``label``."""
    out = []
    for kind, _, desc, _ in events:
        m = LAYER.match(desc) if kind == "progress" else None
        if m and m[1].startswith(label):
            out.append((int(m[2]), int(m[3])))
    return out


def test_progress_moves_once_per_prefill_layer_and_per_decode_step(long_run):
    events, view, pair = long_run
    assert view.failure is None and view.record is not None and view.runs["vanilla"].record.num_video_tokens > 4000
    vision, layers = checked_layers(pair.target), pair.target.config.get_text_config().num_hidden_layers
    assert vision >= 2 and layers >= 4
    vanilla = 1 + vision + 2 * layers                           # entry, vision blocks, pass A and pass B
    assert _layers(events, "Prefill (vanilla)") == [(k, vanilla) for k in range(1, vanilla + 1)]
    spec = vanilla + 1 + pair.draft.config.get_text_config().num_hidden_layers + checked_layers(pair.draft)
    assert _layers(events, "Prefill + pruning") == [(k, spec) for k in range(1, spec + 1)]
    assert _layers(events, "Explaining") == [(k, vanilla) for k in range(1, vanilla + 1)]
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
    seen = []

    def progress(frac, desc):
        seen.append(desc)
        if desc.startswith("Explaining the failing steps"):       # Stop as soon as the page shows the phase
            backend.stop("explain-stop")

    views = []
    last = None
    for upd in backend.run(RunRequest(video=CLIP, prompt="Describe this video in detail.", settings=s),
                           session="explain-stop", progress=progress, views=views):
        last = upd
    assert "Explaining the failing steps" in seen
    layers = [LAYER.match(d) for d in seen if d.startswith("Explaining the failing steps: layer")]
    assert not layers or int(layers[-1][2]) < int(layers[-1][3])  # the pass did not run to its end
    assert last["ui_state"] == "idle" and last["status"].startswith("**Done")   # the comparison stands
    assert views[0].record is not None and not views[0].record.why
    assert backend.active_workers() == []
