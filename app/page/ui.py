"""The Gradio page: its tabs and wiring (the components come from :mod:`app.page.layout`). All work happens in
:class:`app.runs.backend.Backend`.

Source: docs/design.md §8 (one decode at a time, Stop ends the loop), §9 (ZeroGPU).
"""
from __future__ import annotations

import contextlib
import inspect
import logging
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gradio as gr

from app.inputs import preview
from app.inputs.settings import (COMPARE_INPUTS, FIELDS, PRESET_FIELDS, RunRequest, RunSettings, UserError, bind_inputs,
                                 handler_parameters, old_name_notes)
from app.inputs.uploads import UploadJanitor
from app.page.examples import EXAMPLE_COLUMNS, STREAMING_TOKENS, default_examples, example_rows, wire_reset
from app.page.gradio_io import api_twins, gallery_files, gradio_upload_dir, queued_files, queued_runs, request_scratch
from app.page.layout import INTRO, RUN_LABELS, input_column, model_column, more_inputs_label, output_section, run_bar
from app.page.page_js import SCROLL_JS, page_js
from app.runs.backend import Backend
from app.runs.timing import SUGGESTED_REPEATS
from app.views.downloads import comparison_file
from app.views.inspect_view import build_inspect_tab
from app.views.run_view import OUTPUT_KEYS, blank_outputs, final_status, pick_heatmaps

log = logging.getLogger(__name__)

MAX_PREVIEWS = 1000
"""Preview -> upload entries remembered (the oldest are forgotten first)."""
GPU_QUEUE = "gpu"
"""concurrency_id shared by every event that runs models: one decode at a time per device (its
``concurrency_limit`` is the number of devices in the backend's pool)."""


def build_demo(backend: Backend, examples: list[list[Any]] | None = None, *,
               cache_ttl_s: int | None = 3600, scratch_dir: str | None = None, footer: str = "") -> gr.Blocks:
    """Build the page over ``backend`` (nothing runs until a button is pressed).

    Args:
        backend: a :class:`Backend` (or an object with the same methods).
        examples: example rows ``[video, prompt, srt, truth, fixed_length, max_new]`` (the last ones
            may be left out); default :func:`app.page.examples.default_examples`.
        cache_ttl_s: Gradio deletes files it cached (gallery images, leftovers) older than this,
            checking every quarter of it (None: never). Uploads are removed earlier, as soon as no
            page shows them and no request uses them (:class:`app.runs.backend.UploadJanitor`).
        scratch_dir: where each request writes its temporary files (a private folder removed
            when the request ends); default the system temp folder.
        footer: one line about the server shown under the page (e.g. ``specvlm.runtime.threads``'s
            ``ThreadChoice.describe()`` and a model-loading note).

    Returns:
        The ``gr.Blocks``; the comparison is exposed to API clients as ``/compare`` (the page's outputs)
        and ``/compare_json`` (one JSON object, :func:`app.views.summary.comparison_json`), Stop as ``/stop``.
        ``demo.specvlm_components`` maps names (``OUTPUT_KEYS`` and inputs) to components;
        ``demo.specvlm_janitor`` is the upload janitor.
    """
    d = backend.default_settings()
    labels = None
    if examples is None:
        limits = getattr(backend, "limits", None)
        examples, labels = default_examples(limits.max_new_tokens if limits else STREAMING_TOKENS)
    examples = example_rows(examples, d.max_new_tokens, d.preset, d.subtitle_mode,
                            budget_of=lambda p: backend.preset_widgets(p)["max_new_tokens"])
    delete_cache = (max(1, cache_ttl_s // 4), cache_ttl_s) if cache_ttl_s else None
    with gr.Blocks(title="SpecVLM Studio", delete_cache=delete_cache) as demo:
        gr.Markdown(INTRO, elem_id="intro")
        c: dict[str, Any] = {}
        with gr.Tab("Compare", elem_id="tab-compare"):
            with gr.Row():
                with gr.Column(scale=1):
                    c.update(input_column(backend))
                with gr.Column(scale=1):
                    c.update(model_column(backend))
            if examples:
                shown = gr.Examples(examples, inputs=[c[k] for k in EXAMPLE_COLUMNS], label="Examples (click to load)",
                                    example_labels=labels, cache_examples=False, elem_id="examples")
                c["example_note"] = gr.Markdown("", visible=False, elem_id="example-note")
            c.update(run_bar())
            c.update(output_section())
        with gr.Tab("Inspect", elem_id="tab-inspect"):
            gr.Markdown("Where speculation breaks: click a bar (a verify step) to see its draft tree, the path "
                        "the target accepted and the target's token where they diverged. The last run shows up "
                        "here; exported runs can be replayed without a model.")
            c["record"] = gr.State(None)
            c["inspect"] = build_inspect_tab(c["record"])
        c["footer"] = gr.Markdown(f"<small>{footer}</small>" if footer else "", elem_id="footer")
        c["json"] = gr.JSON(label="Comparison (JSON)", visible=False, elem_id="comparison-json")
        c["json_run"] = gr.Button("Compare (JSON)", visible=False, elem_id="compare-json")
        protected = [f for row in examples for f in row if isinstance(f, str) and Path(f).is_file()]
        janitor = UploadJanitor(gradio_upload_dir(), protected=protected, queued=lambda: queued_files(demo))
        _wire(backend, c, janitor, demo, scratch_dir)
        if examples:   # an example sets every setting: those it does not name go back to its preset's defaults
            wire_reset(shown.dataset, examples, c, lambda p: RunSettings(preset=p, **backend.preset_widgets(p)),
                       c["example_note"])
    demo.specvlm_components = c
    demo.specvlm_janitor = janitor
    return demo


def _wire_run(backend: Backend, c: dict[str, Any], janitor: UploadJanitor, scratch_dir: str | None,
              previews: dict[str, str], waiting: Callable[[], int] = lambda: 0) -> None:
    """Run (shared GPU queue, one Run per device at a time; built into a :class:`RunRequest`), its API twin
    ``/compare`` (named inputs with defaults; the tree, frames and budget hidden twins of the page's widgets without
    a value, so a caller who leaves them out gets the preset's), ``/compare_json`` (the same run as one JSON object)
    and Stop (own queue).
    ``previews`` maps a player preview's file name to the upload it stands for; ``waiting`` counts the
    Runs queued for a device.

    Stop only asks the run to stop (:meth:`Backend.stop`); the run itself says "Stopping…", ends its
    worker and ends "Stopped", so the Run event stays pending exactly as long as the device is busy.
    Run uses ``trigger_mode="always_last"``: a click while the previous run is still stopping is
    held by the page and sent when that run ends (with "once", Gradio's default, the page drops it),
    and :func:`run_clicked` says so at once. While a run decodes, Run is disabled (and the page
    ignores a second click of a double-click, :mod:`app.page.page_js`)."""
    buttons = [c["run"], c["stop"], c["repeat"]]
    outputs = [c[k] for k in OUTPUT_KEYS] + buttons
    inputs = [c[k] for k in COMPARE_INPUTS]
    twins = api_twins(c, [f.name for f in FIELDS if f.setting in PRESET_FIELDS and not f.renamed_to])
    api_inputs = [twins.get(k, c[k]) for k in COMPARE_INPUTS]   # left out by an API caller: the preset's

    d = backend.default_settings()

    def compare(*args, **kwargs):
        """Run vanilla then speculative decoding and stream both panels (inputs: :data:`FIELDS`,
        each with a default but the video). Model downloads and loading show their progress."""
        named = bind_inputs(compare, args, kwargs)   # Gradio adds the request and the progress tracker last
        video, request, progress = named["video"], named["request"], named["progress"]
        for note in old_name_notes(named):
            log.warning("/compare: %s", note)
        req = RunRequest.from_inputs({k: named[k] for k in COMPARE_INPUTS}
                                     | {"video": preview.source_of(video, previews)})
        session = getattr(request, "session_hash", None)
        files = [req.video, req.srt, req.truth]
        with janitor.using(files), request_scratch(scratch_dir) as tmp, \
                contextlib.closing(backend.run(req, session=session, waiting=waiting,
                                               progress=lambda f, desc: progress(f, desc=desc))) as updates:
            _keep_for_next_run(janitor, session, [])  # a Run held for this one now uses its own files
            for upd in updates:
                if upd.get("ui_state") == "queued":  # a Run waits for this one: its files stay until it starts
                    _keep_for_next_run(janitor, session, files)
                err = upd.pop("error", None)
                if err:
                    gr.Warning(err)
                    upd = blank_outputs() | upd  # API clients get plain values for every output
                if "gallery" in upd:
                    upd["gallery"] = gallery_files(upd["gallery"], tmp)
                if upd.get("record", "") is None:  # no new record: Inspect keeps the last one
                    upd["record"] = gr.skip()
                out = {c[k]: v for k, v in upd.items() if k in OUTPUT_KEYS}
                out.update(_button_updates(c, upd.get("ui_state"), upd.get("speed_note"), req.settings.timing_pairs))
                if out:
                    yield out

    def compare_json(*args, **kwargs) -> dict[str, Any]:
        """Run the comparison and return it as one JSON object for scripts (same inputs as ``/compare``):
        both texts and token ids, ``identical``, the divergence (index, kind, margin), ``speedup``, ``tau``,
        accepted lengths and kept video-token counts; ``device`` the device that ran it; ``error`` holds a
        readable message when it failed; ``notes`` starts with a line per old input name used (``top_p``,
        ``max_new``)."""
        named = bind_inputs(compare_json, args, kwargs)   # Gradio adds the request last
        video, request = named["video"], named["request"]
        req = RunRequest.from_inputs({k: named[k] for k in COMPARE_INPUTS}
                                     | {"video": preview.source_of(video, previews)})
        renamed = old_name_notes(named)
        for note in renamed:
            log.warning("/compare_json: %s", note)
        with janitor.using([req.video, req.srt, req.truth]):
            out = backend.run_json(req, session=getattr(request, "session_hash", None))
        return out | {"notes": [*renamed, *out.get("notes", [])]} if renamed else out

    params = handler_parameters(d)   # one field table: names, order and defaults of both handlers
    request_param = inspect.Parameter("request", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None)
    compare.__signature__ = inspect.Signature(params + [request_param, inspect.Parameter(
        "progress", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=gr.Progress(track_tqdm=True))])
    compare_json.__signature__ = inspect.Signature(params + [request_param], return_annotation=dict[str, Any])
    compare.__annotations__ = compare_json.__annotations__ = {"request": gr.Request}   # Gradio passes it

    def stop(request: gr.Request):
        """Ask the session's Run to stop; the run says "Stopping…" and then "Stopped" itself."""
        msg = backend.stop(getattr(request, "session_hash", None))
        if msg == "Nothing is running.":
            gr.Info(msg)

    def run_clicked(request: gr.Request):
        """A Run click hides the last run's download; while the previous run is stopping the click waits for it
        (the page holds the click): say so."""
        hidden = gr.update(visible=False)
        if not backend.queue_next(getattr(request, "session_hash", None)):
            return gr.skip(), gr.skip(), hidden
        return "Waiting for the previous run to stop…", gr.update(value=RUN_LABELS["queued"], interactive=False), hidden

    c["run"].click(None, None, None, js=SCROLL_JS)  # browser only: panels into view, Stop prominent
    c["run"].click(run_clicked, inputs=None, outputs=[c["status"], c["run"], c["compare_download"]], queue=False,
                   api_visibility="private", show_progress="hidden")
    c["run"].click(compare, inputs=inputs, outputs=outputs, api_name="run", api_visibility="private",
                   concurrency_id=GPU_QUEUE, concurrency_limit=len(backend.pool), show_progress_on=[c["status"]],
                   trigger_mode="always_last").then(_download, [c["vanilla_html"], c["spec_html"], c["summary"], c["status"]],
                          [c["compare_download"]], queue=False, api_visibility="private",
                          show_progress="hidden")   # what the page shows, as a file
    c["compare_api"] = gr.Button("Compare", visible=False, elem_id="compare-api")   # /compare: the page's Run
    c["compare_api"].click(compare, inputs=api_inputs, outputs=outputs, api_name="compare", concurrency_id=GPU_QUEUE,
                           concurrency_limit=len(backend.pool), trigger_mode="always_last")
    c["json_run"].click(compare_json, inputs=api_inputs, outputs=[c["json"]], api_name="compare_json",
                        concurrency_id=GPU_QUEUE, concurrency_limit=len(backend.pool))
    c["stop"].click(stop, inputs=None, outputs=None, api_name="stop", concurrency_id="stop", concurrency_limit=None,
                    show_progress="hidden")
    c["repeat"].click(lambda: SUGGESTED_REPEATS, inputs=None, outputs=[c["timing_pairs"]], queue=False,
                      api_visibility="private", show_progress="hidden").then(
        None, None, None, js="() => document.getElementById('run').click()")  # the same Run, timed N times


def _download(vanilla_html: str, spec_html: str, summary: str, status: str | None) -> dict[str, Any]:
    """The Compare download after a Run: the finished panels and summary as a file, or hidden when there is
    nothing to download or a held Run starts now (its panels start empty)."""
    path = None if final_status(True, True) in (status or "") else comparison_file(vanilla_html, spec_html, summary)
    return gr.update(value=path, visible=path is not None)


def _keep_for_next_run(janitor: UploadJanitor, session: str | None, files: list[str | None]) -> None:
    """Hold ``files`` for the session's next Run (the page holds the click until this run ends, so no request
    refers to them meanwhile); an empty list lets them go."""
    for i in range(3):
        janitor.hold(session, f"next-run-{i}", files[i] if i < len(files) else None)


def _button_updates(c: dict[str, Any], state: str | None, speed_note: str | None, pairs: Any) -> dict[Any, Any]:
    """Run / Stop / repeat-timing button updates for a run's ``ui_state`` and final ``speed_note``."""
    out: dict[Any, Any] = {}
    if state is not None:
        busy = state in ("running", "queued")
        out[c["run"]] = gr.update(value=RUN_LABELS[state], interactive=not busy)
        out[c["stop"]] = gr.update(variant="stop" if state == "running" else "secondary",  # red while it runs
                                   interactive=state != "stopping")
        if state == "running":
            out[c["repeat"]] = gr.update(visible=False)
    if speed_note is not None:
        out[c["repeat"]] = gr.update(visible=bool(speed_note) and int(pairs or 1) < SUGGESTED_REPEATS)
    return out


def _wire(backend: Backend, c: dict[str, Any], janitor: UploadJanitor, demo: gr.Blocks,
          scratch_dir: str | None = None) -> None:
    """Events: Run and Stop (:func:`_wire_run`), subtitles, preset, heatmap toggle, and upload
    bookkeeping (the janitor deletes uploads nobody shows or uses any more)."""
    previews: OrderedDict[str, str] = OrderedDict()  # preview file name -> the upload it stands for
    _wire_run(backend, c, janitor, scratch_dir, previews, waiting=lambda: queued_runs(demo, GPU_QUEUE))
    demo.load(None, js=page_js())

    def show_subtitles(path, request: gr.Request):
        """Parse the uploaded .srt and show its cues; the collapsed section holding it names the file."""
        janitor.hold(getattr(request, "session_hash", None), "srt", path)
        label = gr.update(label=more_inputs_label(path))
        try:
            with janitor.using([path]):
                return backend.subtitles_text(path), label
        except UserError as e:
            gr.Warning(str(e))
            return f"Error: {e}", label

    def on_truth(path, request: gr.Request):
        """Keep the uploaded ground truth for re-runs and warn right away if it is malformed."""
        janitor.hold(getattr(request, "session_hash", None), "truth", path)
        try:
            with janitor.using([path]):
                backend.load_truth(path)
        except UserError as e:
            gr.Warning(str(e))
            return f"**{e}**"
        return ""

    def on_video(path, request: gr.Request):
        """The page now shows this video: keep it for re-runs, let the previous upload go. A file the
        browser cannot play gets an H.264 preview in the player; the run still reads the upload."""
        session = getattr(request, "session_hash", None)
        if path and Path(path).name in previews:  # the preview just sent to the player
            janitor.hold(session, "video-preview", path)
            return gr.skip(), gr.skip()
        janitor.hold(session, "video", path)
        janitor.hold(session, "video-preview", None)
        seen = preview.upload_view_for(backend, path) if path else preview.UploadView()
        if seen.problem:
            gr.Warning(seen.problem)
            return gr.skip(), f"**{seen.problem}**"
        if seen.preview is None:
            return gr.skip(), seen.note
        previews[Path(seen.preview).name] = path
        while len(previews) > MAX_PREVIEWS:
            previews.popitem(last=False)
        return seen.preview, seen.note

    def on_unload(request: gr.Request):
        """The page closed: delete what it uploaded (if no one else uses it) and stop its run."""
        session = getattr(request, "session_hash", None)
        backend.stop(session)
        janitor.release_session(session)

    def toggle_heatmaps(state, mode):
        """Switch the gallery between pruning stages and raw scores."""
        with request_scratch(scratch_dir) as tmp:
            items, legend = pick_heatmaps(state, mode)
            yield gallery_files(items, tmp), legend

    tree_keys = ("tree_shape", "depth", "top_k", "total_tokens", "min_prob")

    def on_preset(name):
        """Whenever the preset changes (picked, or set by an example row): show its description and set the
        draft tree it was tuned with (``Preset.tree``; the library's when it names none)."""
        tree = backend.preset_tree(name)
        return (backend.preset_info(name)[0], *(gr.update(value=tree[k]) for k in tree_keys))

    def on_preset_chosen(name):
        """When the user picks a preset: suggest its frame count and token budget (an example row that sets
        the preset keeps its own token budget)."""
        _, frames, max_new = backend.preset_info(name)
        return gr.update(value=frames), gr.update(value=max_new)

    c["srt"].change(show_subtitles, inputs=[c["srt"]], outputs=[c["srt_text"], c["more_inputs"]],
                    api_visibility="private")
    c["truth"].change(on_truth, inputs=[c["truth"]], outputs=[c["truth_note"]], api_visibility="private",
                      show_progress="hidden")
    c["video"].change(on_video, inputs=[c["video"]], outputs=[c["video"], c["video_note"]], api_visibility="private",
                      concurrency_id="uploads", concurrency_limit=None, show_progress="hidden")
    demo.unload(on_unload)
    c["preset"].change(on_preset, inputs=[c["preset"]],
                       outputs=[c["preset_md"], c["tree"], c["depth"], c["top_k"], c["total"], c["min_prob"]],
                       api_visibility="private")
    c["preset"].input(on_preset_chosen, inputs=[c["preset"]], outputs=[c["frames"], c["max_new_tokens"]],
                      api_visibility="private")
    c["fixed_length"].change(lambda on: gr.update(visible=bool(on)), [c["fixed_length"]], [c["fixed_note"]],
                             queue=False, api_visibility="private", show_progress="hidden")
    c["hm_mode"].change(toggle_heatmaps, inputs=[c["heatmaps"], c["hm_mode"]],
                        outputs=[c["gallery"], c["heatmap_legend"]], api_visibility="private")
