"""Every example on the page, run twice: as the page runs it after a click (the row's values, every other setting at
its preset's defaults, through the page's own handlers, after the person had changed Frames and Timing runs) and
through ``/compare_json`` over HTTP with only the values the row names. One preset resolver
(:func:`specvlm.models.presets.resolve_settings`): both give the same τ, tokens, accepted lengths, prompt, video,
kept and subtitle token counts. The bundled presets' rows run on random stand-ins with the bundled pair's tokenizer
and processor (:mod:`helpers.bundled_like`: the wiring, not the model, is under test); the failure case runs on the
bundled sparse pair itself (τ 3.33 with the subtitles to the target only, 7.67 with them to both models)."""
from __future__ import annotations

import pytest

from helpers.fakes import free_port

from app.inputs.settings import COMPARE_INPUTS
from app.page.examples import EXAMPLE_COLUMNS, FAILURE_CLIP, RESET, default_examples

FAILURE_TAU = {"target": 3.33, "both": 7.67}
"""τ of the failure case on the sparse Self-SD preset, by subtitle mode (the figures docs/app.md states)."""
CHANGED = {"frames": 256, "timing_pairs": 2}
"""What the person changed before clicking an example (a second timing pair: the same tokens, more time)."""


SAME = ("token_ids", "tau", "accept_lengths", "num_prompt_tokens", "num_video_tokens", "num_kept",
        "target_subtitle_tokens", "draft_subtitle_tokens")
"""What the page's speculative run and the API's must share (the resolved settings decide each)."""


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    from gradio_client import Client
    from helpers.bundled_like import bundled_like_pair, bundled_like_presets

    from app.page.ui import build_demo
    from app.runs.backend import Backend
    from app.runs.facade import SpecvlmFacade
    from specvlm.models.presets import PRESETS

    with pytest.MonkeyPatch.context() as mp:
        pair = bundled_like_pair(tmp_path_factory.mktemp("bundled-like"))
        for name, preset in bundled_like_presets(*pair, max_new_tokens=24).items():
            mp.setitem(PRESETS, name, preset)
        backend = Backend(SpecvlmFacade(), device="cpu", dtype="float32")
        demo = build_demo(backend)
        port = free_port()
        demo.queue().launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
        try:
            yield demo, Client(f"http://127.0.0.1:{port}/", verbose=False)
        finally:
            demo.close()


def _handlers(demo) -> dict:
    return {fn.name: fn.fn for fn in demo.fns.values()}


def _after_click(demo, index: int, changed: dict) -> tuple[dict, str]:
    """The inputs the page holds after the person set ``changed`` and clicked example ``index``: the row's values,
    the page's example handler's resets and the preset's tree (its change event); and the note the page shows."""
    comps, h = demo.specvlm_components, _handlers(demo)
    values = {k: comps[k].value for k in COMPARE_INPUTS} | changed
    row = next(b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "examples").raw_samples[index]
    names = [k for k in RESET if k in comps]
    *resets, note = h["on_example"]((index, row), values["preset"], *(values[k] for k in names))
    values |= dict(zip(EXAMPLE_COLUMNS, row))
    values |= {k: u["value"] for k, u in zip(names, resets)}
    _, *tree = h["on_preset"](values["preset"])
    values |= {k: u["value"] for k, u in zip(("tree", "depth", "top_k", "total", "min_prob"), tree)}
    return values, note.get("value", "")


def _page_run(demo, values: dict):
    """The page's Run (its ``/compare`` handler, in process) with ``values``; returns the speculative run's record."""
    comps, record = demo.specvlm_components, None
    for out in _handlers(demo)["compare"](**values, request=None, progress=lambda *a, **k: None):
        assert "Error" not in str(out.get(comps["status"], "")), out[comps["status"]]
        if hasattr(out.get(comps["record"]), "token_ids"):
            record = out[comps["record"]]
    return record


def _api_run(client, named: dict) -> dict:
    """``/compare_json`` over HTTP with only ``named`` (files as uploads)."""
    from gradio_client import handle_file

    files = {k: handle_file(v) for k, v in named.items() if k in ("video", "srt", "truth")}
    return client.predict(**(named | files), api_name="/compare_json")


def test_every_example_gives_the_same_tau_and_tokens_on_the_page_and_through_the_api(served):
    demo, client = served
    rows, labels = default_examples(demo.specvlm_components["max_new_tokens"].maximum)
    assert rows and any(r[0].endswith(FAILURE_CLIP) for r in rows)
    seen = {}
    for i, (raw, label) in enumerate(zip(rows, labels)):
        named = {k: v for k, v in zip(EXAMPLE_COLUMNS, raw) if v is not None}
        modes = ["target", "both"] if raw[0].endswith(FAILURE_CLIP) else [None]
        for mode in modes:
            values, note = _after_click(demo, i, CHANGED)
            assert values["frames"] != CHANGED["frames"] and values["timing_pairs"] == 1, label
            assert "Frames (256 →" in note and "Timing runs (2 → 1)" in note, note
            if mode is not None:   # the person picks who reads the subtitles; the API names it
                values["subtitle_mode"], named["subtitle_mode"] = mode, mode
            page, api = _page_run(demo, values), _api_run(client, named)
            assert api["status"] == "done", (label, api["error"])
            assert (api["tau"], api["speculative"]["token_ids"]) == (page.tau, page.token_ids), (label, mode)
            mine = page.run_json()
            assert {k: api["speculative"][k] for k in SAME} == {k: mine[k] for k in SAME}, (label, mode)
            assert api["identical"], label
            seen[(label, mode)] = api["tau"]
    failure = {mode: tau for (label, mode), tau in seen.items() if mode}
    assert {m: round(t, 2) for m, t in failure.items()} == FAILURE_TAU, failure
