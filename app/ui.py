"""The Gradio page: layout and wiring only. All work happens in :class:`app.backend.Backend`.

Source: docs/design.md §8 (one decode at a time, Stop ends the loop), §9 (ZeroGPU).
"""
from __future__ import annotations

import contextlib
import inspect
import logging
import uuid
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gradio as gr

from app import plots, preview
from app.access import custom_field
from app.backend import Backend
from app.examples import EXAMPLE_COLUMNS, STREAMING_TOKENS, default_examples, example_rows
from app.gradio_io import gallery_files, gradio_upload_dir, queued_files, queued_runs, request_scratch
from app.inspect_view import build_inspect_tab
from app.page_js import SCROLL_JS, VIDEO_EXTENSIONS, page_js
from app.settings import (COMPARE_INPUTS, DEFAULT_PROMPT, ENGINES, HEATMAP_MODES, PRUNE_METHODS,
                          SUBTITLE_MODE_CHOICES, TREE_SHAPES, RunRequest, RunSettings, UserError, bind_inputs,
                          handler_parameters)
from app.timing import MAX_REPEATS, SUGGESTED_REPEATS
from app.uploads import UploadJanitor
from app.view import OUTPUT_KEYS, blank_outputs, pick_heatmaps

log = logging.getLogger(__name__)

MAX_PREVIEWS = 1000
"""Preview -> upload entries remembered (the oldest are forgotten first)."""
GPU_QUEUE = "gpu"
"""concurrency_id shared by every event that runs models: one decode at a time per device (its
``concurrency_limit`` is the number of devices in the backend's pool)."""
RUN_LABELS = {"idle": "Run", "running": "Running…", "stopping": "Run", "queued": "Queued…"}
"""The Run button's label per page state (it is disabled while running or queued)."""


INTRO = """# SpecVLM Studio
Lossless speculative decoding for video LLMs (SpecVLM, EMNLP 2025). Upload a video, press **Run**:
plain greedy decoding (**Vanilla**) and speculative decoding with a draft that sees only the
most useful video tokens (**SpecVLM**) run one after the other on the same device, streaming live.
Greedy speculative decoding must give the *same* text, only faster."""


def build_demo(backend: Backend, examples: list[list[Any]] | None = None, *,
               cache_ttl_s: int | None = 3600, scratch_dir: str | None = None, footer: str = "") -> gr.Blocks:
    """Build the page over ``backend`` (nothing runs until a button is pressed).

    Args:
        backend: a :class:`Backend` (or an object with the same methods).
        examples: example rows ``[video, prompt, srt, truth, fixed_length, max_new]`` (the last ones
            may be left out); default :func:`app.examples.default_examples`.
        cache_ttl_s: Gradio deletes files it cached (gallery images, leftovers) older than this,
            checking every quarter of it (None: never). Uploads are removed earlier, as soon as no
            page shows them and no request uses them (:class:`app.backend.UploadJanitor`).
        scratch_dir: where each request writes its temporary files (a private folder removed
            when the request ends); default the system temp folder.
        footer: one line about the server shown under the page (e.g. ``specvlm.engine.threads``'s
            ``ThreadChoice.describe()`` and a model-loading note).

    Returns:
        The ``gr.Blocks``; the comparison is exposed to API clients as ``/compare`` (the page's outputs)
        and ``/compare_json`` (one JSON object, :func:`app.summary.comparison_json`), Stop as ``/stop``.
        ``demo.specvlm_components`` maps names (``OUTPUT_KEYS`` and inputs) to components;
        ``demo.specvlm_janitor`` is the upload janitor.
    """
    d = backend.default_settings()
    labels = None
    if examples is None:
        limits = getattr(backend, "limits", None)
        examples, labels = default_examples(limits.max_new_tokens if limits else STREAMING_TOKENS)
    examples = example_rows(examples, d.max_new_tokens, d.preset, d.subtitle_mode)
    delete_cache = (max(1, cache_ttl_s // 4), cache_ttl_s) if cache_ttl_s else None
    with gr.Blocks(title="SpecVLM Studio", delete_cache=delete_cache) as demo:
        gr.Markdown(INTRO)
        c: dict[str, Any] = {}
        with gr.Tab("Compare", elem_id="tab-compare"):
            with gr.Row():
                with gr.Column(scale=1):
                    c.update(_input_column(backend))
                with gr.Column(scale=1):
                    c.update(_model_column(backend))
            if examples:
                gr.Examples(examples, inputs=[c[k] for k in EXAMPLE_COLUMNS], label="Examples (click to load)",
                            example_labels=labels, cache_examples=False, elem_id="examples")
            c.update(_output_section())
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
    demo.specvlm_components = c
    demo.specvlm_janitor = janitor
    return demo


def _input_column(backend: Backend) -> dict[str, Any]:
    """Video upload, limits, prompt, subtitles (and who sees them), ground truth and text forcing."""
    limits = getattr(backend, "limits", None)
    d = RunSettings()
    return dict(
        video=gr.Video(label="Video", sources=["upload"], format=None, include_audio=True, elem_id="video",
                       height=300),
        video_note=gr.Markdown("", elem_id="video-note"),
        formats_md=gr.Markdown(f"<small>Accepted: {', '.join(e.lstrip('.').upper() for e in VIDEO_EXTENSIONS)} "
                               "(any codec FFmpeg reads).</small>", elem_id="video-formats"),
        limits_md=gr.Markdown(limits.describe() if limits else "", elem_id="limits"),
        prompt=gr.Textbox(value=DEFAULT_PROMPT, label="Prompt", lines=2, elem_id="prompt",
                          max_length=limits.max_prompt_chars if limits else None),
        srt=gr.File(label="Subtitles (.srt, optional)", type="filepath", elem_id="srt",
                    height=120),  # any file type: a wrong one gets a message that says why
        srt_text=gr.Textbox(label="Subtitle cues", lines=3, max_lines=8, interactive=False, elem_id="srt-text"),
        subtitle_mode=gr.Radio(list(SUBTITLE_MODE_CHOICES), value=d.subtitle_mode, label="Subtitles go to",
                               info="vanilla decoding sees them exactly when the target does",
                               elem_id="subtitle-mode"),
        truth=gr.File(label="Ground truth of a generated clip (.json, optional)",
                      type="filepath", elem_id="truth", height=120),
        truth_note=gr.Markdown("", elem_id="truth-note"),
        keep_text=gr.Checkbox(value=d.keep_text, label="Always keep the video tokens covering on-screen text",
                              info="needs the ground truth (.json) of a generated clip; forced tokens count against the "
                              "draft's budget and replace Stage I/II picks", elem_id="keep-text"),
    )


def _model_column(backend: Backend) -> dict[str, Any]:
    """Preset, custom model, settings accordion (paper defaults), Run / Stop, status."""
    d = backend.default_settings()
    c: dict[str, Any] = dict(
        preset=gr.Dropdown(backend.preset_names(), value=d.preset, label="Model preset", elem_id="preset"),
        preset_md=gr.Markdown(backend.preset_info(d.preset)[0], elem_id="preset-info"),
        hub_md=gr.Markdown(f"*{backend.hub_note()}*" if backend.hub_note() else "", elem_id="hub-note"),
        custom=gr.Textbox(value="", elem_id="custom-model", **custom_field(getattr(backend, "access", None))),
    )
    with gr.Accordion("Settings (paper defaults)", open=False, elem_id="settings"):
        c["method"] = gr.Dropdown(list(PRUNE_METHODS), value=d.method, label="Pruning method (right panel)",
                                  elem_id="method")
        c["drop_rate"] = gr.Slider(0.0, 0.999, value=d.drop_rate, step=0.001, label="Drop rate r",
                                   info="share of video tokens the draft does not see", elem_id="drop-rate")
        c["top_p"] = gr.Slider(0.0, 1.0, value=d.top_p, step=0.05, label="λ (Stage I attention share)",
                               elem_id="top-p")
        c["tree"] = gr.Radio(list(TREE_SHAPES), value=d.tree_shape, label="Draft tree", elem_id="tree")
        with gr.Row():
            c["depth"] = gr.Slider(1, 16, value=d.depth, step=1, precision=0, label="Depth", elem_id="depth")
            c["top_k"] = gr.Slider(1, 16, value=d.top_k, step=1, precision=0, label="Top-k", elem_id="top-k")
            c["total"] = gr.Slider(1, 128, value=d.total_tokens, step=1, precision=0, label="Total tokens",
                                   elem_id="total-tokens")
        c["min_prob"] = gr.Slider(0.0, 0.95, value=d.min_prob, step=0.05, label="Early stop (min draft probability)",
                                  info="dynamic and chain trees: stop drafting deeper once the best path's cumulative "
                                       "draft probability is below this; 0 = off. Greedy output stays identical",
                                  elem_id="min-prob")
        limits = getattr(backend, "limits", None)
        max_frames = limits.max_frames if limits else 256
        max_new = limits.max_new_tokens if limits else 1024
        with gr.Row():
            c["frames"] = gr.Slider(1, max_frames, value=min(d.num_frames, max_frames), step=1, precision=0,
                                    label="Frames", elem_id="frames")
            c["max_new"] = gr.Slider(1, max_new, value=min(d.max_new_tokens, max_new), step=1, precision=0,
                                     label="Max new tokens", elem_id="max-new-tokens")
        with gr.Row():
            c["fixed_length"] = gr.Checkbox(value=d.fixed_length, label="Fixed length (ignore EOS)",
                                            info="generate exactly Max new tokens: a decode long enough to watch, "
                                                 "stop and time (the CLI's --no-eos)", elem_id="fixed-length")
            c["timing_pairs"] = gr.Slider(1, MAX_REPEATS, value=d.timing_pairs, step=1, precision=0,
                                          label="Timing runs",
                                          info="interleaved vanilla / SpecVLM pairs; the speedup is their median",
                                          elem_id="timing-pairs")
        c["engine"] = gr.Radio(list(ENGINES), value=d.engine or None, label="Decode engine", elem_id="engine",
                               info="both runs; static: fixed-shape steps over preallocated buffers (CUDA graphs on "
                                    "a GPU), eager: each step from Python. Same tokens; the default is this device's")
        with gr.Row():
            c["temperature"] = gr.Slider(0.0, 5.0, value=d.temperature, step=0.05, label="Temperature",
                                         info="0 = greedy (token-identical outputs)", elem_id="temperature")
            c["top_p_sampling"] = gr.Slider(0.05, 1.0, value=d.top_p_sampling, step=0.05,
                                            label="Nucleus top-p (sampling)", elem_id="top-p-sampling")
            c["seed"] = gr.Number(value=d.seed, precision=0, label="Seed", elem_id="seed")
    with gr.Row():
        c["run"] = gr.Button(RUN_LABELS["idle"], variant="primary", elem_id="run")
        c["stop"] = gr.Button("Stop", variant="secondary", elem_id="stop")  # red while a run is active
    c["status"] = gr.Markdown("Ready.", label="Status", elem_id="status")
    return c


def _output_section() -> dict[str, Any]:
    """The two streaming panels, summary, charts and the heatmap gallery."""
    c: dict[str, Any] = {}
    with gr.Row(equal_height=False, elem_id="live-panels"):
        with gr.Column():
            gr.Markdown("### Vanilla")
            c["vanilla_stats"] = gr.Markdown(label="Vanilla stats", elem_id="vanilla-stats")
            c["vanilla_html"] = gr.HTML(plots.plain_text_html("", "waiting…"), label="Vanilla text",
                                        elem_id="vanilla-text")
        with gr.Column():
            gr.Markdown("### SpecVLM")
            c["spec_stats"] = gr.Markdown(label="SpecVLM stats", elem_id="spec-stats")
            gr.HTML(plots.tokens_legend_html())
            c["spec_html"] = gr.HTML(plots.tokens_html([], legend=False, placeholder="waiting…"),
                                     label="SpecVLM text", elem_id="spec-text")
    c["summary"] = gr.Markdown(label="Summary", elem_id="summary")
    c["repeat"] = gr.Button(f"Measure again: median of {SUGGESTED_REPEATS} interleaved runs", visible=False,
                            size="sm", elem_id="repeat-timing")
    with gr.Row():
        c["accept_plot"] = gr.Plot(label="Accepted length per step", elem_id="accept-plot")
        c["time_plot"] = gr.Plot(label="Tokens over time", elem_id="time-plot")
    gr.Markdown("### Which video tokens the draft sees")
    c["hm_mode"] = gr.Radio(list(HEATMAP_MODES), value="Pruning stages", label="Heatmap", elem_id="heatmap-mode")
    c["heatmap_legend"] = gr.HTML(plots.heatmap_legend_html("stages"), label="Heatmap legend",
                                  elem_id="heatmap-legend")
    c["gallery"] = gr.Gallery(label="Sampled frames with the video-token grid", columns=4, height="auto",
                              object_fit="contain", format="png", elem_id="heatmaps")
    c["heatmaps"] = gr.State(None)
    return c


def _wire_run(backend: Backend, c: dict[str, Any], janitor: UploadJanitor, scratch_dir: str | None,
              previews: dict[str, str], waiting: Callable[[], int] = lambda: 0) -> None:
    """Run (shared GPU queue, one Run per device at a time; named ``/compare`` inputs with defaults, built
    into a :class:`RunRequest`), ``/compare_json`` (the same run as one JSON object) and Stop (own queue).
    ``previews`` maps a player preview's file name to the upload it stands for; ``waiting`` counts the
    Runs queued for a device.

    Stop only asks the run to stop (:meth:`Backend.stop`); the run itself says "Stopping…", ends its
    worker and ends "Stopped", so the Run event stays pending exactly as long as the device is busy.
    Run uses ``trigger_mode="always_last"``: a click while the previous run is still stopping is
    held by the page and sent when that run ends (with "once", Gradio's default, the page drops it),
    and :func:`run_clicked` says so at once. While a run decodes, Run is disabled (and the page
    ignores a second click of a double-click, :mod:`app.page_js`)."""
    buttons = [c["run"], c["stop"], c["repeat"]]
    outputs = [c[k] for k in OUTPUT_KEYS] + buttons
    inputs = [c[k] for k in COMPARE_INPUTS]

    d = backend.default_settings()

    def compare(*args, **kwargs):
        """Run vanilla then speculative decoding and stream both panels (inputs: :data:`FIELDS`,
        each with a default but the video). Model downloads and loading show their progress."""
        named = bind_inputs(compare, args, kwargs)   # Gradio adds the request and the progress tracker last
        video, request, progress = named["video"], named["request"], named["progress"]
        req = RunRequest.from_inputs({k: named[k] for k in COMPARE_INPUTS} | {"video": source_of(video, previews)})
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
        readable message when it failed."""
        named = bind_inputs(compare_json, args, kwargs)   # Gradio adds the request last
        video, request = named["video"], named["request"]
        req = RunRequest.from_inputs({k: named[k] for k in COMPARE_INPUTS} | {"video": source_of(video, previews)})
        with janitor.using([req.video, req.srt, req.truth]):
            return backend.run_json(req, session=getattr(request, "session_hash", None))

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
        """A Run click while the previous run is stopping waits for it (the page holds the click): say so."""
        if not backend.queue_next(getattr(request, "session_hash", None)):
            return gr.skip(), gr.skip()
        return "Waiting for the previous run to stop…", gr.update(value=RUN_LABELS["queued"], interactive=False)

    c["run"].click(None, None, None, js=SCROLL_JS)  # browser only: panels into view, Stop prominent
    c["run"].click(run_clicked, inputs=None, outputs=[c["status"], c["run"]], queue=False, api_visibility="private",
                   show_progress="hidden")
    c["run"].click(compare, inputs=inputs, outputs=outputs, api_name="compare", concurrency_id=GPU_QUEUE,
                   concurrency_limit=len(backend.pool), show_progress_on=[c["status"]], trigger_mode="always_last")
    c["json_run"].click(compare_json, inputs=inputs, outputs=[c["json"]], api_name="compare_json",
                        concurrency_id=GPU_QUEUE, concurrency_limit=len(backend.pool))
    c["stop"].click(stop, inputs=None, outputs=None, api_name="stop", concurrency_id="stop", concurrency_limit=None,
                    show_progress="hidden")
    c["repeat"].click(lambda: SUGGESTED_REPEATS, inputs=None, outputs=[c["timing_pairs"]], queue=False,
                      api_visibility="private", show_progress="hidden").then(
        None, None, None, js="() => document.getElementById('run').click()")  # the same Run, timed N times


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
        """Parse the uploaded .srt and show its cues."""
        janitor.hold(getattr(request, "session_hash", None), "srt", path)
        try:
            with janitor.using([path]):
                return backend.subtitles_text(path)
        except UserError as e:
            gr.Warning(str(e))
            return f"Error: {e}"

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
        seen = upload_view_for(backend, path) if path else preview.UploadView()
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
        draft tree it was tuned with (``Preset.tree``; unchanged when it names none)."""
        tree = backend.preset_tree(name)
        return (backend.preset_info(name)[0],
                *(gr.update(value=tree[k]) if k in tree else gr.update() for k in tree_keys))

    def on_preset_chosen(name):
        """When the user picks a preset: suggest its frame count and token budget (an example row that sets
        the preset keeps its own token budget)."""
        _, frames, max_new = backend.preset_info(name)
        return gr.update(value=frames), gr.update(value=max_new)

    c["srt"].change(show_subtitles, inputs=[c["srt"]], outputs=[c["srt_text"]], api_visibility="private")
    c["truth"].change(on_truth, inputs=[c["truth"]], outputs=[c["truth_note"]], api_visibility="private",
                      show_progress="hidden")
    c["video"].change(on_video, inputs=[c["video"]], outputs=[c["video"], c["video_note"]], api_visibility="private",
                      concurrency_id="uploads", concurrency_limit=None, show_progress="hidden")
    demo.unload(on_unload)
    c["preset"].change(on_preset, inputs=[c["preset"]],
                       outputs=[c["preset_md"], c["tree"], c["depth"], c["top_k"], c["total"], c["min_prob"]],
                       api_visibility="private")
    c["preset"].input(on_preset_chosen, inputs=[c["preset"]], outputs=[c["frames"], c["max_new"]],
                      api_visibility="private")
    c["hm_mode"].change(toggle_heatmaps, inputs=[c["heatmaps"], c["hm_mode"]],
                        outputs=[c["gallery"], c["heatmap_legend"]], api_visibility="private")


def source_of(video: Any, previews: dict[str, str]) -> Any:
    """The upload a page's video value stands for: the original file when the player shows its preview."""
    if video and Path(str(video)).name in previews:
        return previews[Path(str(video)).name]
    return video


def upload_view_for(backend: Backend, path: str) -> preview.UploadView:
    """:func:`app.preview.upload_view` with the backend's probe, Gradio's upload folder and time limit."""
    def folder() -> Path:  # served as is, deleted with the upload
        made = Path(gradio_upload_dir()) / f"preview-{uuid.uuid4().hex[:12]}"
        made.mkdir(parents=True, exist_ok=True)
        return made
    timeout = getattr(getattr(backend, "limits", None), "video_timeout_s", 60.0)
    return preview.upload_view(path, getattr(backend.engine, "probe_video", None), folder, timeout_s=timeout)
