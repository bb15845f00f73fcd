"""The page's layout: the Compare tab's input column, model column and output section, each as a dict of
named components (:func:`app.page.ui.build_demo` places and wires them).

Source: docs/design.md §1 (what the page shows).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import gradio as gr

from app.inputs.access import custom_field
from app.inputs.run_inputs import FIXED_LENGTH_NOTE
from app.inputs.settings import (DEFAULT_PROMPT, FIELDS, HEATMAP_MODES, PRUNE_METHODS, SUBTITLE_MODE_CHOICES,
                                 TREE_SHAPES, Limits, RunSettings)
from app.page.page_js import VIDEO_EXTENSIONS
from app.runs.backend import Backend
from app.runs.timing import MAX_REPEATS, SUGGESTED_REPEATS
from app.views import plots

VIDEO_HEIGHT_PX = 240
"""Height of the video box: the first screen (800x900 and up) holds it with the prompt, preset, examples and Run."""
WIDE_SLIDER_PX = 300
"""Least width of a slider with a long label in a settings row: narrower rows put it on a line of its own, so its
label never wraps word by word."""
RUN_LABELS = {"idle": "Run", "running": "Running…", "stopping": "Run", "queued": "Queued…"}
"""The Run button's label per page state (it is disabled while running or queued)."""

INTRO = """# SpecVLM Studio
Plain greedy decoding (**Vanilla**) races lossless speculative decoding whose draft sees only the most useful video \
tokens (**SpecVLM**, EMNLP 2025) on your video: the same text, token for token, sooner."""
"""The page's title and one sentence on what the app does (the first screen holds it, the examples, the video, the
prompt, the preset and Run)."""
MORE_INPUTS = "Subtitles, ground truth, formats and limits"
"""Label of the collapsed accordion under the video."""


def more_inputs_label(srt: str | None) -> str:
    """The accordion's label, naming the subtitle file it holds (an example may load one while it is closed)."""
    return f"{MORE_INPUTS} · subtitles: {Path(srt).name}" if srt else MORE_INPUTS


def input_column(backend: Backend) -> dict[str, Any]:
    """The video, then (collapsed) the accepted formats, limits, subtitles (and who sees them), ground truth and text
    forcing, so the first screen keeps the video, prompt, preset, examples and Run.

    Args:
        backend: the page's backend (its ``limits``, when it has them, size the fields).

    Returns:
        Component name -> component, inside the caller's open Gradio column (``more_inputs`` is the accordion).
    """
    limits = getattr(backend, "limits", None)
    d = RunSettings()
    c: dict[str, Any] = dict(
        video=gr.Video(label="Video", sources=["upload"], format=None, include_audio=True, elem_id="video",
                       height=VIDEO_HEIGHT_PX),
        video_note=gr.Markdown("", elem_id="video-note"),
    )
    with gr.Accordion(MORE_INPUTS, open=False, elem_id="more-inputs") as c["more_inputs"]:
        c["formats_md"] = gr.Markdown(f"<small>Accepted: {', '.join(e.lstrip('.').upper() for e in VIDEO_EXTENSIONS)} "
                                      "(any codec FFmpeg reads).</small>", elem_id="video-formats")
        c["limits_md"] = gr.Markdown(limits.describe() if limits else "", elem_id="limits")
        c["srt"] = gr.File(label="Subtitles (.srt, optional)", type="filepath", elem_id="srt",
                           height=120)  # any file type: a wrong one gets a message that says why
        c["srt_text"] = gr.Textbox(label="Subtitle cues", lines=3, max_lines=8, interactive=False, elem_id="srt-text")
        c["subtitle_mode"] = gr.Radio(list(SUBTITLE_MODE_CHOICES), value=d.subtitle_mode, label="Subtitles go to",
                                      info="vanilla decoding sees them exactly when the target does",
                                      elem_id="subtitle-mode")
        c["truth"] = gr.File(label="Ground truth of a generated clip (.json, optional)", type="filepath",
                             elem_id="truth", height=120)
        c["truth_note"] = gr.Markdown("", elem_id="truth-note")
        c["keep_text"] = gr.Checkbox(value=d.keep_text, label="Always keep the video tokens covering on-screen text",
                                     info="needs the ground truth (.json) of a generated clip; forced tokens count "
                                          "against the draft's budget and replace Stage I/II picks",
                                     elem_id="keep-text")
    return c


def model_column(backend: Backend) -> dict[str, Any]:
    """Prompt, preset and its description, then (collapsed) the custom model and the settings (paper defaults).

    Args:
        backend: the page's backend (presets, default settings, access and limits).

    Returns:
        Component name -> component, inside the caller's open Gradio column; hidden numbers for the old API
        names of renamed fields are included.
    """
    d = backend.default_settings()
    limits = getattr(backend, "limits", None)
    c: dict[str, Any] = dict(
        prompt=gr.Textbox(value=DEFAULT_PROMPT, label="Prompt", lines=2, elem_id="prompt",
                          max_length=limits.max_prompt_chars if limits else None),
        preset=gr.Dropdown(backend.preset_names(), value=d.preset, label="Model preset", elem_id="preset"),
        preset_md=gr.Markdown(backend.preset_info(d.preset)[0], elem_id="preset-info"),
    )
    with gr.Accordion("Custom model", open=False, elem_id="custom-model-box"):
        c["hub_md"] = gr.Markdown(f"*{backend.hub_note()}*" if backend.hub_note() else "", elem_id="hub-note")
        c["custom"] = gr.Textbox(value="", elem_id="custom-model", **custom_field(getattr(backend, "access", None)))
    with gr.Accordion("Settings (paper defaults)", open=False, elem_id="settings"):
        c["method"] = gr.Dropdown(list(PRUNE_METHODS), value=d.method, label="Pruning method (right panel)",
                                  elem_id="method")
        c["drop_rate"] = gr.Slider(0.0, 0.999, value=d.drop_rate, step=0.001, label="Drop rate r",
                                   info="share of video tokens the draft does not see", elem_id="drop-rate")
        c["lambda_"] = gr.Slider(0.0, 1.0, value=d.top_p, step=0.05, label="λ (Stage I attention share)",
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
        max_frames, max_new = (limits or Limits()).max_frames, (limits or Limits()).max_new_tokens
        with gr.Row():
            c["frames"] = gr.Slider(1, max_frames, value=min(d.num_frames, max_frames), step=1, precision=0,
                                    label="Frames", elem_id="frames")
            c["max_new_tokens"] = gr.Slider(1, max_new, value=min(d.max_new_tokens, max_new), step=1, precision=0,
                                     label="Max new tokens", elem_id="max-new-tokens")
        with gr.Row():
            c["fixed_length"] = gr.Checkbox(value=d.fixed_length, label="Fixed length (ignore EOS)",
                                            info="generate exactly Max new tokens: a decode long enough to watch, "
                                                 "stop and time (the CLI's --no-eos); after its answer the bundled "
                                                 "model writes invented chat turns", elem_id="fixed-length")
            c["timing_pairs"] = gr.Slider(1, MAX_REPEATS, value=d.timing_pairs, step=1, precision=0,
                                          label="Timing runs",
                                          info="interleaved vanilla / SpecVLM pairs; the speedup is their median",
                                          elem_id="timing-pairs")
        with gr.Row():   # beyond the paper (off: the paper's one selection at prefill, fixed r)
            c["reselect"] = gr.Checkbox(value=d.reselect, label="Re-select video tokens during decoding",
                                        info="before the first draft and after each step, when the target, choosing "
                                             "the next token, looks at video tokens the draft lacks, add the most "
                                             "attended of them to the draft; output unchanged",
                                        elem_id="reselect")
            c["adaptive_r"] = gr.Checkbox(value=d.adaptive_r, label="Adaptive r",
                                          info="r per clip: keep the video tokens holding most of the target's "
                                               "attention (drop rate r is then unused)", elem_id="adaptive-r")
        with gr.Row():
            c["reselect_min_share"] = gr.Slider(0.0, 1.0, value=d.reselect_min_share, step=0.05,
                                                label="Re-select above this unseen share", min_width=WIDE_SLIDER_PX,
                                                info="of the target's video attention where it chose the next token",
                                                elem_id="reselect-min-share")
            c["reselect_step_tokens"] = gr.Slider(1, 256, value=d.reselect_step_tokens, step=1, precision=0,
                                                  label="Tokens added per step", elem_id="reselect-step-tokens",
                                                  min_width=WIDE_SLIDER_PX)
            c["reselect_total_tokens"] = gr.Slider(1, 4096, value=d.reselect_total_tokens, step=1, precision=0,
                                                   label="Tokens added per run", elem_id="reselect-total-tokens",
                                                   min_width=WIDE_SLIDER_PX)
        with gr.Row():
            c["temperature"] = gr.Slider(0.0, 5.0, value=d.temperature, step=0.05, label="Temperature",
                                         min_width=WIDE_SLIDER_PX, info="0 = greedy (token-identical outputs)",
                                         elem_id="temperature")
            c["top_p_sampling"] = gr.Slider(0.05, 1.0, value=d.top_p_sampling, step=0.05,
                                            label="Nucleus top-p (sampling)", min_width=WIDE_SLIDER_PX,
                                            elem_id="top-p-sampling")
            c["seed"] = gr.Number(value=d.seed, precision=0, label="Seed", elem_id="seed")
    for f in (f for f in FIELDS if f.renamed_to):   # old API names (top_p, max_new): None unless an API caller
        c[f.name] = gr.Number(value=None, visible=False, label=f"{f.name} (old name of {f.renamed_to})",   # sets them
                              precision=0 if isinstance(getattr(d, f.setting), int) else None,
                              elem_id=f"old-{f.name.replace('_', '-')}")
    return c


def run_bar() -> dict[str, Any]:
    """Run, Stop and the status line (with Gradio's progress) in one full-width bar right above the live panels;
    the page keeps it at the top of the window while a Run works (``#run-bar`` in :mod:`app.page.page_js`).

    Returns:
        Component name -> component (``run``, ``stop``, ``status``), inside the caller's open Gradio block.
    """
    c: dict[str, Any] = {}
    with gr.Column(elem_id="run-bar"):
        with gr.Row():
            c["run"] = gr.Button(RUN_LABELS["idle"], variant="primary", elem_id="run")
            c["stop"] = gr.Button("Stop", variant="secondary", elem_id="stop")  # red while a run is active
        c["status"] = gr.Markdown("Ready.", label="Status", elem_id="status")
    return c


def output_section() -> dict[str, Any]:
    """The two streaming panels, summary, charts and the heatmap gallery.

    Returns:
        Component name -> component (the keys :data:`app.views.run_view.OUTPUT_KEYS` names among them).
    """
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
    c["race"] = gr.HTML("", label="The race (a replay of the measured runs)", elem_id="race")   # page_js plays it
    c["fixed_note"] = gr.Markdown(f"<small>*{FIXED_LENGTH_NOTE[0].upper()}{FIXED_LENGTH_NOTE[1:]}.*</small>",
                                  visible=False, elem_id="fixed-length-note")   # shown while Fixed length is on
    c["summary"] = gr.Markdown(label="Summary", elem_id="summary")
    c["repeat"] = gr.Button(f"Measure again: median of {SUGGESTED_REPEATS} interleaved runs", visible=False,
                            size="sm", elem_id="repeat-timing")
    c["compare_download"] = gr.DownloadButton("Download both texts and the summary (.md)", visible=False,
                                              size="sm", elem_id="compare-download")
    with gr.Row():   # empty charts from the start: the page loads its chart library before a Run, not during one
        c["accept_plot"] = gr.Plot(plots.accept_length_figure([]), label="Accepted length per step", show_label=False,
                                   elem_id="accept-plot")
        c["time_plot"] = gr.Plot(plots.tokens_over_time_figure({}), label="Tokens over time", show_label=False,
                                 elem_id="time-plot")
    gr.Markdown("### Which video tokens the draft sees")
    c["hm_mode"] = gr.Radio(list(HEATMAP_MODES), value="Pruning stages", label="Heatmap", elem_id="heatmap-mode")
    c["heatmap_legend"] = gr.HTML(plots.heatmap_legend_html("stages"), label="Heatmap legend",
                                  elem_id="heatmap-legend")
    c["gallery"] = gr.Gallery(label="Sampled frames with the video-token grid", columns=4, height="auto",
                              object_fit="contain", format="png", elem_id="heatmaps")
    c["heatmaps"] = gr.State(None)
    return c
