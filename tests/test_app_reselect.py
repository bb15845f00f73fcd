"""A clip through the app's backend with re-selection on: identical output, τ above the same run without it, and the
video tokens it added shown in the heat maps, the summaries, Inspect and the "why" view."""
from __future__ import annotations

import re

import pytest

from app.inputs.settings import RunRequest, RunSettings
from app.runs.backend import Backend
from app.runs.facade import SpecvlmFacade
from app.views import inspect_view, why_view
from specvlm import assets
from specvlm.config import TreeConfig
from specvlm.models.presets import SPARSE_STD

CLIP = str(assets.path("videos", "shapes_subtitles.mp4"))   # the failure example, its subtitles not uploaded
RESELECT = dict(reselect=True)   # the default share and budgets
_T = TreeConfig()
TREE = dict(tree_shape=_T.shape, depth=_T.depth, top_k=_T.top_k, total_tokens=_T.total_tokens, min_prob=_T.min_prob)
"""The library's dynamic tree (the preset's own is a chain of 4): a tree with room for what re-selection adds."""


@pytest.fixture(scope="module")
def runs():
    backend = Backend(SpecvlmFacade(), device="cpu", dtype="float32")   # fp32: greedy SD equals vanilla exactly
    out = {}
    for name, extra in (("off", {}), ("on", RESELECT)):
        settings = RunSettings(preset=SPARSE_STD, num_frames=16, max_new_tokens=48, **TREE, **extra)
        out[name] = list(backend.run(RunRequest(CLIP, "Describe this video in detail.", settings), session=name))
    return out


def test_identical_output_and_a_higher_tau_with_reselection(runs):
    last = {k: ups[-1] for k, ups in runs.items()}
    for up in last.values():
        assert up["status"].startswith("**Done.**") and "Outputs identical" in up["summary"]
    off, on = last["off"]["record"], last["on"]["record"]
    assert on.token_ids == off.token_ids
    assert on.tau > off.tau, (on.tau, off.tau)
    assert off.num_added == 0 and on.num_added > 0
    assert on.settings["reselect"]["enabled"] and not off.settings["reselect"]["enabled"]
    assert f"re-selection added **{on.num_added}** video tokens" in last["on"]["summary"]
    assert "re-selection" not in last["off"]["summary"]
    assert all(" engine" not in up["summary"] for up in last.values())   # one engine: nothing to name


def test_the_added_tokens_are_shown(runs):
    last = runs["on"][-1]
    rec = last["record"]
    steps = sorted(rec.added_per_step)
    captions = [item["caption"] if isinstance(item, dict) else item[1] for item in last["gallery"]]
    named = {int(s) for c in captions for m in re.findall(r"added at steps? ([\d, ]+)", c) for s in m.split(", ")}
    assert named and named <= set(steps)                                 # the Compare tab's heat maps
    assert "added during decoding" in last["heatmap_legend"]
    maps = inspect_view.prune_maps(rec)                                  # the Inspect tab's maps
    assert any(f"added at step {steps[0]}" in c or f"added at steps {steps[0]}" in c for _, c in maps)
    assert f"re-selection added {rec.num_added} video tokens" in inspect_view.summary_md(rec)
    fired = next(s for s in steps if s > 0)                              # a verify step (step 0: before the first draft)
    text = why_view.why_html(rec, fired)                                 # the why view of a step that fired
    ev = next(s for s in rec.steps if s.step == fired)
    assert f"Re-selection fired: {ev.unseen_share:.0%} of the target's video attention" in text
    assert f"the {len(ev.added)} most attended of them were added" in text
    quiet = next((s for s in rec.verify_steps if s.unseen_share is not None and not s.added), None)
    if quiet is not None:
        assert "Re-selection did not fire" in why_view.why_html(rec, quiet.step)
    assert why_view.why_html(runs["off"][-1]["record"], steps[0]).count("Re-selection") == 0
