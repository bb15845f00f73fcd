"""The "Inspect" tab: where speculation breaks, step by step, from a :class:`RunRecord`.

Pure functions (no model, no global state) that the app and the tests call directly:
:func:`accept_chart` (clickable accepted-length bars, ``customdata`` = step),
:func:`tree_html` (a step's draft tree: tokens, draft probabilities, accepted path,
the target's token where it diverged), :func:`lowest_table`, :func:`accept_colored_html`
(tokens coloured by their step's accepted length), :func:`prune_maps` (Stage I / II
maps of the frames), and :func:`build_inspect_tab` which lays out the Gradio components
(upload a run JSON to replay without a model, pick a step by clicking a bar, a row or the
step box). ``app/page/ui.py`` puts it in the "Inspect" tab.

Source: docs/design.md §4.8-4.9 (trees, acceptance), §4.12 (τ).
"""
from __future__ import annotations

import html
import logging
import os
import tempfile
from typing import Any

import gradio as gr
import numpy as np
import plotly.graph_objects as go

from app.views import plots
from app.views.chart_style import themed
from app.views.stage_note import stage1_note
from app.views.why_view import WHY_LEGEND, visible_token, why_html, why_maps
from specvlm.analysis.records import (RecordError, RunRecord, StepTree, TreeNodeView, load_json,
                                      lowest_accept_steps, save_json, step_tree)
from specvlm.spec.grid import grid_shape, token_frames
from specvlm.types import PrefillInfo

log = logging.getLogger(__name__)

CHART_ID = "specvlm-inspect-chart"
STEP_ID = "specvlm-inspect-step"
TABLE_HEADERS = ["step", "accepted", "tree size", "text before", "emitted", "text after"]
TABLE_WIDTHS = ["9%", "12%", "12%", "24%", "16%", "27%"]
"""Column widths of the lowest-acceptance table: the number columns fit their headers, the text columns share
the rest (on an 800 px page too)."""

ACCEPT_COLOURS = ["#ef4444", "#f97316", "#f59e0b", "#eab308", "#a3e635", "#4ade80", "#22c55e", "#16a34a"]
"""Accepted length 0, 1, 2, ... -> colour (red = the draft failed at once, green = long accepted paths)."""

ZERO_BAR = 0.15
"""Drawn height of a bar whose accepted length is 0 (so it can be clicked); hover shows the true 0."""

_MONO = "font-family:ui-monospace,monospace;font-size:0.9em"
_BOX_TEXT = "color:#111827"
"""Text colour inside the tree's light boxes (dark on light, in the light and the dark theme alike)."""

CLICK_JS = f"""
() => {{
  const attach = (tries) => {{
    const root = document.getElementById('{CHART_ID}');
    const plot = root && root.querySelector('.js-plotly-plot');
    if (!plot || typeof plot.on !== 'function') {{
      if (tries > 0) setTimeout(() => attach(tries - 1), 200);
      return;
    }}
    if (plot.dataset.specvlmClick === '1') return;
    plot.dataset.specvlmClick = '1';
    plot.on('plotly_click', (ev) => {{
      const pt = ev && ev.points && ev.points[0];
      if (!pt || pt.customdata === undefined) return;
      const step = Array.isArray(pt.customdata) ? pt.customdata[0] : pt.customdata;
      const input = document.querySelector('#{STEP_ID} input');
      if (!input) return;
      input.value = String(step);
      input.dispatchEvent(new Event('input', {{bubbles: true}}));
      input.dispatchEvent(new Event('change', {{bubbles: true}}));
      input.dispatchEvent(new KeyboardEvent('keydown', {{key: 'Enter', bubbles: true}}));
    }});
  }};
  attach(30);
}}
"""
"""Browser-side hook: a click on an accepted-length bar writes its step into the step box."""


def accept_colour(accept_length: int) -> str:
    """Colour of an accepted length (clamped to the palette)."""
    return ACCEPT_COLOURS[max(0, min(int(accept_length), len(ACCEPT_COLOURS) - 1))]


# --------------------------------------------------------------------------- chart
def accept_chart(record: RunRecord, selected: int | None = None) -> go.Figure:
    """Accepted length per verify step; each bar's ``customdata`` is ``[step, text, accepted]`` (click ->
    step). Bars of 0 are drawn :data:`ZERO_BAR` high so they can be clicked.

    Args:
        record: the run.
        selected: a step to outline.

    Returns:
        Figure with a Bar trace "accepted length" (x = step) and a Scatter "running τ".
    """
    steps = record.verify_steps
    title = "Accepted draft tokens per verify step (click a bar)"
    if not steps:
        return plots._empty_figure(title, "no verify steps")
    x = [s.step for s in steps]
    a = np.array([s.accept_length for s in steps], dtype=float)
    running = record.running_tau or [0.0] * len(x)   # a vanilla run: no accepted lengths, τ = 0
    texts = [s.text.replace("\n", "⏎") for s in steps]
    line = [3 if s.step == selected else 0 for s in steps]
    fig = go.Figure()
    shown = np.where(a > 0, a, ZERO_BAR)  # zero-length steps (the interesting ones) stay clickable
    fig.add_trace(go.Bar(
        x=x, y=shown, name="accepted length", customdata=[[st, t, int(v)] for st, t, v in zip(x, texts, a)],
        marker=dict(color=[accept_colour(int(v)) for v in a], line=dict(width=line, color="#1d4ed8")),
        hovertemplate="step %{customdata[0]}<br>accepted %{customdata[2]}<br>%{customdata[1]}<extra></extra>"))
    fig.add_trace(go.Scatter(x=x, y=running, name="running τ", mode="lines", hoverinfo="skip",
                             line=dict(color="rgb(37,99,235)", width=2)))
    depth = int(record.settings.get("tree", {}).get("depth", 0) or 0)
    top = max(float(a.max()), depth)
    last = int(min(top, len(ACCEPT_COLOURS) - 1))
    for n in range(last + 1):  # legend entries: accepted length -> colour (the last colour for all longer ones)
        name = f"{n}+" if n == last and top > last else str(n)
        fig.add_trace(go.Bar(x=[None], y=[None], name=name, marker_color=accept_colour(n),
                             showlegend=True, hoverinfo="skip", legendgroup="colours"))
    fig.data[0].showlegend = False  # the coloured entries explain the bars
    fig.update_layout(bargap=0.1, clickmode="event", xaxis_title="verify step", yaxis_title="accepted",
                      yaxis_range=[0, top + 0.5], barmode="overlay",
                      xaxis=dict(tickformat="d", dtick=_dtick(len(x)), tick0=x[0], range=[x[0] - 0.5, x[-1] + 0.5]),
                      yaxis=dict(tickformat="d", dtick=1 if top <= 8 else 2))
    themed(fig, f"{title} · τ = {record.tau:.2f}", height=340)
    fig.update_layout(legend_title_text="accepted:")
    return fig


def _dtick(n: int) -> int:
    """Whole-number tick spacing for ``n`` steps (about ten ticks, never fractional)."""
    return max(1, -(-n // 10))


# --------------------------------------------------------------------------- tree
def _node_html(n: TreeNodeView) -> str:
    if n.accepted:
        style, tag = f"background:#bbf7d0;{_BOX_TEXT};border:2px solid #16a34a;font-weight:600", "accepted"
    elif n.diverged:
        style, tag = f"background:#fee2e2;{_BOX_TEXT};border:1px solid #ef4444;text-decoration:line-through", "rejected"
    else:
        style, tag = f"background:#f3f4f6;{_BOX_TEXT};border:1px solid #d1d5db", "drafted"
    extra = ""
    if n.diverged and n.target_text is not None:
        extra = f' <span class="tree-target" style="color:#ea580c">target: <b>{visible_token(n.target_text)}</b></span>'
    return (f'<span class="tree-node tree-{tag}" data-node="{n.index}" data-token="{n.token}" '
            f'title="node {n.index} · depth {n.depth} · path p {n.path_prob:.3g}" '
            f'style="{style};border-radius:4px;padding:0 0.35em;{_MONO}">{visible_token(n.text)}</span>'
            f' <span style="opacity:0.7;font-size:0.8em">p={n.draft_prob:.2f}</span>{extra}')


def tree_html(tree: StepTree) -> str:
    """The drafted tree as nested lists: accepted path in green, rejected siblings at the divergence
    point struck through in red with the target's token next to them, draft probability per node.

    Returns:
        HTML; each node is a ``span.tree-node`` with ``data-node`` / ``data-token``.
    """
    children: dict[int, list[TreeNodeView]] = {}
    for n in tree.nodes:
        children.setdefault(n.parent, []).append(n)

    def sub(parent: int) -> str:
        kids = children.get(parent, [])
        if not kids:
            return ""
        items = "".join(f"<li>{_node_html(k)}{sub(k.index)}</li>" for k in kids)
        return (f'<ul style="margin:0.1em 0 0.1em 1.2em;padding-left:0.6em;border-left:1px dashed #9ca3af;'
                f'font-size:1em">{items}</ul>')  # 1em: the page's style shrinks each nested list to 90%

    accepted = "".join(visible_token(n.text) for n in tree.nodes if n.accepted)
    where = {None: "the accepted path reached a leaf: the draft was right as far as it drafted",
             -1: "at the root: the target rejected every first token"}.get(
        tree.diverged_at, f"after node {tree.diverged_at}")
    target = (f'the output ended here (end of text or the token budget), so the rest of the tree was not used'
              if tree.ended else f'target token <b style="color:#ea580c;{_MONO}">{visible_token(tree.target_text)}</b> '
              f'({where})')
    head = (f'<div style="margin-bottom:0.4em"><b>Step {tree.step}</b> · accepted {tree.accept_length} · '
            f'{len(tree.nodes)} drafted nodes · {target}<br>accepted text: <span style="{_MONO}">'
            f'{accepted or "∅"}</span></div>')
    root = (f'<span class="tree-root" style="background:#dbeafe;{_BOX_TEXT};border-radius:4px;padding:0 0.35em;{_MONO}">'
            f'{visible_token(tree.root_text)}</span> <span style="opacity:0.7;font-size:0.8em">(root)</span>')
    if tree.diverged_at == -1 and not tree.ended:
        root += f' <span class="tree-target" style="color:#ea580c">target: <b>{visible_token(tree.target_text)}</b></span>'
    return f'<div class="specvlm-tree">{head}{root}{sub(-1)}</div>'


def step_view(record: RunRecord, step: int | float | None) -> str:
    """:func:`tree_html` of a step (token texts from the record's ``token_text``), or a readable message for
    step 0 / unknown steps / no trees."""
    if step is None:
        return "<i>Pick a step: click a bar, a row of the table, or type a step number.</i>"
    try:
        return tree_html(step_tree(record, int(step)))
    except RecordError as e:
        return f"<i>{html.escape(str(e))}</i>"


# --------------------------------------------------------------------------- table, text
def lowest_table(record: RunRecord, k: int = 10, context_chars: int = 30) -> list[list[Any]]:
    """Rows ``[step, accepted, tree size, text before, emitted, text after]``, lowest accepted first."""
    return [[r["step"], r["accept_length"], r["tree_size"], r["before"], r["text"], r["after"]]
            for r in lowest_accept_steps(record, k, context_chars)]


def accept_colored_html(record: RunRecord) -> str:
    """Generated text, each step's tokens on the colour of that step's accepted length.

    Returns:
        HTML; spans ``.acc-tok`` carry ``data-step`` and ``data-accept``; their text joined is the
        generated text.
    """
    spans = []
    for s in record.steps:
        if not s.text:
            continue
        col = accept_colour(s.accept_length) if s.step > 0 else "#93c5fd"
        spans.append(f'<span class="acc-tok" data-step="{s.step}" data-accept="{s.accept_length}" '
                     f'title="step {s.step} · accepted {s.accept_length}" style="background:{col}55;'
                     f'border-bottom:2px solid {col};border-radius:2px">{html.escape(s.text)}</span>')
    legend = " ".join(f'<span style="background:{c}55;border-bottom:2px solid {c};padding:0 0.4em">{i}</span>'
                      for i, c in enumerate(ACCEPT_COLOURS))
    return (f'<div style="font-size:0.85em;margin-bottom:0.3em">accepted length of the step: {legend}</div>'
            f'<div class="specvlm-acc-tokens" style="white-space:pre-wrap;{_MONO};line-height:1.7">'
            f'{"".join(spans)}</div>')


def prune_maps(record: RunRecord, mode: str = "stages", max_images: int = 16) -> list[tuple[np.ndarray, str]]:
    """Stage I / Stage II (or score) maps of the frames, on the record's thumbnails (grey without).

    The kept set is chosen once per request (at prefill); the video tokens re-selection added during decoding
    have their own colour and their step in the caption ("added at step N").
    """
    info = record.prefill
    if info.token_grid is None or info.prune is None:
        return []
    frames = record.frames()
    if frames is None:
        g = info.token_grid
        t = int(token_frames(g, info.frames_per_token)[1].max()) + 1
        rows, cols = grid_shape(g)
        frames = np.full((t, 12 * rows, 12 * cols, 3), 128, np.uint8)
    p = info.prune
    if mode == "scores" and p.scores is None:
        mode = "stages"  # score-free method: show the kept set
    return plots.heatmap_gallery(frames, info.token_grid, keep=p.keep, stage1=p.stage1, stage2=p.stage2,
                                 scores=p.scores, mode=mode, frames_per_token=info.frames_per_token,
                                 timestamps=record.timestamps or None, max_images=max_images, max_side=None,
                                 added=record.added_per_step)


def summary_md(record: RunRecord) -> str:
    """One-paragraph summary: method, τ, steps, video tokens kept, subtitle tokens per model."""
    p, pr = record.prefill, record.prefill.prune
    kept = f"{pr.num_kept if pr is not None else p.num_video_tokens}/{p.num_video_tokens}"
    subs = ""
    if p.target_subtitle_tokens or p.draft_subtitle_tokens:
        subs = f" · subtitle tokens: target {p.target_subtitle_tokens}, draft {p.draft_subtitle_tokens}"
    more = ""
    if (record.settings.get("prune") or {}).get("adaptive_r") and record.r_reason:
        more += f" · adaptive r = {record.r_used:.3f}: {record.r_reason}"
    if (record.settings.get("reselect") or {}).get("enabled"):
        more += f" · re-selection added {record.num_added} video tokens at {len(record.added_per_step)} steps"
    return (f"**{record.settings.get('method', (pr.method if pr is not None else None) or '?')}** · τ = {record.tau:.2f} over "
            f"{len(record.verify_steps)} verify steps · {len(record.token_ids)} tokens · video tokens kept "
            f"{kept}{subs}{more}")


def default_step(record: RunRecord) -> int | None:
    """The step shown first: the earliest step with the lowest accepted length."""
    rows = lowest_accept_steps(record, 1)
    return rows[0]["step"] if rows else None


def export_record(record: RunRecord, folder: str | None = None) -> str:
    """Save the record as JSON in a temporary file; returns its path (for a download)."""
    fd, path = tempfile.mkstemp(prefix="specvlm-run-", suffix=".json", dir=folder)
    os.close(fd)
    return save_json(record, path)


# --------------------------------------------------------------------------- Gradio
def _refresh(record: RunRecord | None, mode: str = "stages"):
    """(summary, chart, table, coloured text, maps, step, tree, why, why maps, Stage I note) for a record (or
    empty)."""
    if record is None:
        return ("*No run loaded: upload a run JSON or run a video first.*", accept_chart(_EMPTY), [], "", [], None,
                step_view(_EMPTY, None), "", [], "")
    step = default_step(record)
    return (summary_md(record), accept_chart(record), lowest_table(record), accept_colored_html(record),
            prune_maps(record, mode), step, step_view(record, step), why_html(record, step), why_maps(record, step),
            maps_note(record))


def maps_note(record: RunRecord) -> str:
    """What Stage I kept and why (:func:`app.views.stage_note.stage1_note`, λ from the record's settings), in
    italics; "" for a method without both stages."""
    top_p = (record.settings.get("prune") or {}).get("top_p") if isinstance(record.settings, dict) else None
    note = stage1_note(record.prefill.prune, top_p)
    return f"*{note}*" if note else ""


_EMPTY = RunRecord({}, "", PrefillInfo(0, 0, 0, None, 0.0, 0.0, 0.0), [])


def build_inspect_tab(record_state: Any = None) -> dict[str, Any]:
    """Create the Inspect tab's components inside the current ``gr.Blocks`` / ``gr.Tab`` context.

    Args:
        record_state: a ``gr.State`` holding a RunRecord (the app sets it after a run), or None to
            create one here (then the tab works from uploaded run files only).

    Returns:
        dict of components: ``state``, ``upload``, ``download``, ``summary``, ``chart``, ``step``,
        ``tree``, ``why``, ``why_maps``, ``table``, ``tokens``, ``maps``, ``maps_note``, ``map_mode``.
    """
    state = record_state if record_state is not None else gr.State(None)
    c: dict[str, Any] = {"state": state}
    with gr.Row():
        c["upload"] = gr.File(label="Replay a run (.json)", file_types=[".json"], type="filepath", scale=2,
                              elem_id="specvlm-inspect-upload")
        c["download"] = gr.DownloadButton("Export this run (.json)", scale=1, interactive=False)
    c["summary"] = gr.Markdown()
    c["chart"] = gr.Plot(label="Accepted length per step", show_label=False, elem_id=CHART_ID)
    with gr.Row():
        with gr.Column(scale=3):
            c["step"] = gr.Number(label="Step", precision=0, minimum=0, elem_id=STEP_ID)
            c["tree"] = gr.HTML(label="Draft tree of the step", elem_id="specvlm-inspect-tree")
            c["why"] = gr.HTML(label="Why the step failed", elem_id="specvlm-inspect-why")
            c["why_maps"] = gr.Gallery(label="Where the target looked at this step", columns=2, height="fit-content",
                                       elem_id="specvlm-inspect-why-maps")
            gr.Markdown(WHY_LEGEND)
        with gr.Column(scale=2):
            c["map_mode"] = gr.Radio(["stages", "scores"], value="stages", label="Frame maps")
            c["maps"] = gr.Gallery(label="Stage I / Stage II kept tokens (same at every step)", columns=4,
                                   height="auto", elem_id="specvlm-inspect-maps")
            c["maps_note"] = gr.Markdown(elem_id="specvlm-inspect-stage-note")
    c["table"] = gr.Dataframe(headers=TABLE_HEADERS, label="Lowest accepted-length steps (click a row)",
                              elem_id="specvlm-inspect-table", column_widths=TABLE_WIDTHS,
                              interactive=False, wrap=True)
    c["tokens"] = gr.HTML(label="Text coloured by accepted length")
    outs = [c["summary"], c["chart"], c["table"], c["tokens"], c["maps"], c["step"], c["tree"], c["why"],
            c["why_maps"], c["maps_note"]]

    def on_upload(path):
        if not path:
            return gr.skip()
        try:
            return load_json(path)
        except RecordError as e:   # the user's file: one line in the log and a toast, no traceback
            log.warning("replay: %s", e)
            raise gr.Error(str(e), print_exception=False) from None

    def on_step(record, step):
        rec = record or _EMPTY
        return step_view(rec, step), why_html(rec, step), why_maps(rec, step)

    def on_row(record, evt: gr.SelectData):
        row = evt.index[0] if isinstance(evt.index, (list, tuple)) else evt.index
        rows = lowest_table(record) if record is not None else []
        return rows[row][0] if 0 <= row < len(rows) else gr.skip()

    def on_export(record):
        return gr.update(value=export_record(record) if record is not None else None,
                         interactive=record is not None)

    c["upload"].change(on_upload, [c["upload"]], [state], api_visibility="private")
    state.change(_refresh, [state, c["map_mode"]], outs, api_visibility="private")
    c["chart"].change(None, js=CLICK_JS)
    c["step"].change(on_step, [state, c["step"]], [c["tree"], c["why"], c["why_maps"]], api_visibility="private")
    c["table"].select(on_row, [state], [c["step"]], api_visibility="private")
    c["map_mode"].change(lambda r, m: prune_maps(r, m) if r is not None else [], [state, c["map_mode"]],
                         [c["maps"]], api_visibility="private")
    state.change(on_export, [state], [c["download"]], api_visibility="private")  # a click then downloads
    return c
