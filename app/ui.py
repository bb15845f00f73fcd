"""The Gradio page: layout and wiring only. All work happens in :class:`app.backend.Backend`.

Source: SpecVLM Studio issue 4; DESIGN 8 (one decode at a time, Stop ends the loop).
"""
from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gradio as gr

from app import plots
from app.backend import DEFAULT_PROMPT, HEATMAP_MODES, OUTPUT_KEYS, Backend, Settings, UserError

try:  # Hugging Face ZeroGPU: decorate the GPU work when available
    import spaces  # type: ignore
except ImportError:
    spaces = None

log = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parent.parent
EXAMPLES_DIR = REPO_ROOT / "assets" / "videos"
GPU_QUEUE = "gpu"
"""concurrency_id shared by every event that runs models: one decode at a time per device."""

TREE_SHAPES = ("dynamic", "static", "chain")
FALLBACK_METHODS = ("specvlm", "none", "random", "uniform", "window-front", "window-middle",
                    "window-end", "frame", "attention")

INTRO = """# SpecVLM Studio
Lossless speculative decoding for video LLMs (SpecVLM, EMNLP 2025). Upload a video, press **Run**:
plain greedy decoding (**Vanilla**) and speculative decoding with a draft that sees only the
most useful video tokens (**SpecVLM**) run one after the other on the same device, streaming live.
Greedy speculative decoding must give the *same* text, only faster."""


def find_examples(folder: Path = EXAMPLES_DIR) -> list[list[Any]]:
    """Example rows ``[video, prompt, subtitles or None]`` from ``folder/*.mp4``.

    A ``.srt`` with the same stem next to a video is used as its subtitles.
    """
    if not folder.is_dir():
        return []
    rows = []
    for mp4 in sorted(folder.glob("*.mp4")):
        srt = mp4.with_suffix(".srt")
        rows.append([str(mp4), DEFAULT_PROMPT, str(srt) if srt.exists() else None])
    return rows


def _methods() -> Sequence[str]:
    try:
        from specvlm.config import PRUNE_METHODS
        return PRUNE_METHODS
    except ImportError:
        return FALLBACK_METHODS


def build_demo(backend: Backend, examples: list[list[Any]] | None = None) -> gr.Blocks:
    """Build the page over ``backend`` (nothing runs until a button is pressed).

    Args:
        backend: a :class:`Backend` (or an object with the same methods).
        examples: example rows ``[video, prompt, srt]``; default :func:`find_examples`.

    Returns:
        The ``gr.Blocks``; the comparison is exposed to API clients as ``/compare``, Stop as ``/stop``.
        ``demo.specvlm_components`` maps names (``OUTPUT_KEYS`` and inputs) to components.
    """
    examples = find_examples() if examples is None else examples
    with gr.Blocks(title="SpecVLM Studio") as demo:
        gr.Markdown(INTRO)
        c: dict[str, Any] = {}
        with gr.Row():
            with gr.Column(scale=1):
                c.update(_input_column())
            with gr.Column(scale=1):
                c.update(_model_column(backend))
        if examples:
            gr.Examples(examples, inputs=[c["video"], c["prompt"], c["srt"]], label="Examples (click to load)",
                        cache_examples=False, elem_id="examples")
        c.update(_output_section())
        _wire(backend, c)
    demo.specvlm_components = c
    return demo


def _input_column() -> dict[str, Any]:
    """Video upload, prompt, subtitles."""
    return dict(
        video=gr.Video(label="Video", sources=["upload"], format=None, include_audio=True, elem_id="video",
                       height=300),
        prompt=gr.Textbox(value=DEFAULT_PROMPT, label="Prompt", lines=2, elem_id="prompt"),
        srt=gr.File(label="Subtitles (.srt, optional)", file_types=[".srt"], type="filepath", elem_id="srt",
                    height=90),
        srt_text=gr.Textbox(label="Subtitle cues", lines=3, max_lines=8, interactive=False, elem_id="srt-text"),
    )


def _model_column(backend: Backend) -> dict[str, Any]:
    """Preset, custom model, settings accordion (paper defaults), Run / Stop, status."""
    d = backend.default_settings()
    c: dict[str, Any] = dict(
        preset=gr.Dropdown(backend.preset_names(), value=d.preset, label="Model preset", elem_id="preset"),
        preset_md=gr.Markdown(backend.preset_info(d.preset)[0], elem_id="preset-info"),
        custom=gr.Textbox(label="Custom model (Hub id or local path; 'target + draft' for Std-SD)",
                          placeholder="overrides the preset when filled", elem_id="custom-model"),
    )
    with gr.Accordion("Settings (paper defaults)", open=False, elem_id="settings"):
        c["method"] = gr.Dropdown(list(_methods()), value=d.method, label="Pruning method (right panel)",
                                  elem_id="method")
        c["drop_rate"] = gr.Slider(0.0, 0.99, value=d.drop_rate, step=0.01, label="Drop rate r",
                                   info="share of video tokens the draft does not see", elem_id="drop-rate")
        c["top_p"] = gr.Slider(0.0, 1.0, value=d.top_p, step=0.05, label="λ (Stage I attention share)",
                               elem_id="top-p")
        c["tree"] = gr.Radio(list(TREE_SHAPES), value=d.tree_shape, label="Draft tree", elem_id="tree")
        with gr.Row():
            c["depth"] = gr.Slider(1, 16, value=d.depth, step=1, label="Depth", elem_id="depth")
            c["top_k"] = gr.Slider(1, 16, value=d.top_k, step=1, label="Top-k", elem_id="top-k")
            c["total"] = gr.Slider(1, 128, value=d.total_tokens, step=1, label="Total tokens",
                                   elem_id="total-tokens")
        with gr.Row():
            c["frames"] = gr.Slider(2, 256, value=d.num_frames, step=1, label="Frames", elem_id="frames")
            c["max_new"] = gr.Slider(1, 1024, value=d.max_new_tokens, step=1, label="Max new tokens",
                                     elem_id="max-new-tokens")
    with gr.Row():
        c["run"] = gr.Button("Run", variant="primary", elem_id="run")
        c["stop"] = gr.Button("Stop", variant="stop", elem_id="stop")
    c["status"] = gr.Markdown("Ready.", elem_id="status")
    return c


def _output_section() -> dict[str, Any]:
    """The two streaming panels, summary, charts and the heatmap gallery."""
    c: dict[str, Any] = {}
    with gr.Row(equal_height=False):
        with gr.Column():
            gr.Markdown("### Vanilla")
            c["vanilla_stats"] = gr.Markdown(elem_id="vanilla-stats")
            c["vanilla_html"] = gr.HTML(plots.plain_text_html("", "waiting…"), elem_id="vanilla-text")
        with gr.Column():
            gr.Markdown("### SpecVLM")
            c["spec_stats"] = gr.Markdown(elem_id="spec-stats")
            gr.HTML(plots.tokens_legend_html())
            c["spec_html"] = gr.HTML(plots.tokens_html([], legend=False, placeholder="waiting…"),
                                     elem_id="spec-text")
    c["summary"] = gr.Markdown(elem_id="summary")
    with gr.Row():
        c["accept_plot"] = gr.Plot(label="Accepted length per step", elem_id="accept-plot")
        c["time_plot"] = gr.Plot(label="Tokens over time", elem_id="time-plot")
    gr.Markdown("### Which video tokens the draft sees")
    c["hm_mode"] = gr.Radio(list(HEATMAP_MODES), value="Pruning stages", label="Heatmap", elem_id="heatmap-mode")
    c["heatmap_legend"] = gr.HTML(plots.heatmap_legend_html("stages"), elem_id="heatmap-legend")
    c["gallery"] = gr.Gallery(label="Sampled frames with the video-token grid", columns=6, height="auto",
                              object_fit="contain", format="png", elem_id="heatmaps")
    c["heatmaps"] = gr.State(None)
    return c


def _wire(backend: Backend, c: dict[str, Any]) -> None:
    """Events: Run (shared GPU queue, one at a time), Stop (own queue), subtitles, preset, heatmap toggle."""
    outputs = [c[k] for k in OUTPUT_KEYS]
    inputs = [c[k] for k in ("video", "prompt", "preset", "custom", "method", "drop_rate", "top_p", "tree",
                             "depth", "top_k", "total", "frames", "max_new", "hm_mode")]

    def compare(video_path, prompt_text, preset_name, custom_model, method_name, r, lam, tree_shape,
                depth_v, top_k_v, total_v, frames_v, max_new_v, mode, request: gr.Request,
                progress=gr.Progress()):
        """Run vanilla then speculative decoding and stream both panels."""
        settings = Settings(preset=preset_name, custom_model=custom_model or "", method=method_name,
                            drop_rate=r, top_p=lam, tree_shape=tree_shape, depth=depth_v, top_k=top_k_v,
                            total_tokens=total_v, num_frames=frames_v, max_new_tokens=max_new_v)
        session = getattr(request, "session_hash", None)
        for upd in backend.run(video_path, prompt_text, settings, session=session,
                               progress=lambda f, desc: progress(f, desc=desc), heatmap_mode=mode):
            err = upd.pop("error", None)
            if err:
                gr.Warning(err)
            yield {c[k]: v for k, v in upd.items() if k in OUTPUT_KEYS}

    if spaces is not None:
        compare = spaces.GPU(duration=180)(compare)

    def stop(request: gr.Request):
        """End the session's decode loop at its next step (the run itself reports 'Stopped')."""
        gr.Info(backend.stop(getattr(request, "session_hash", None)))

    def show_subtitles(path):
        """Parse the uploaded .srt and show its cues."""
        try:
            return backend.subtitles_text(path)
        except UserError as e:
            gr.Warning(str(e))
            return f"Error: {e}"

    def on_preset(name):
        """Show the preset's description and suggest its frame count and token budget."""
        md, frames, max_new = backend.preset_info(name)
        return md, gr.update(value=frames), gr.update(value=max_new)

    c["run"].click(compare, inputs=inputs, outputs=outputs, api_name="compare", concurrency_id=GPU_QUEUE,
                   concurrency_limit=1, show_progress_on=[c["status"]])
    c["stop"].click(stop, inputs=None, outputs=None, api_name="stop", concurrency_id="stop",
                    concurrency_limit=None, show_progress="hidden")
    c["srt"].change(show_subtitles, inputs=[c["srt"]], outputs=[c["srt_text"]], api_visibility="private")
    c["preset"].change(on_preset, inputs=[c["preset"]], outputs=[c["preset_md"], c["frames"], c["max_new"]],
                       api_visibility="private")
    c["hm_mode"].change(backend.pick_heatmaps, inputs=[c["heatmaps"], c["hm_mode"]],
                        outputs=[c["gallery"], c["heatmap_legend"]], api_visibility="private")
