"""Figures and images for the app: pruning heatmaps, accepted-length and throughput charts,
colour-coded token HTML. Pure functions: no model, no Gradio, no global state.

Shapes: V video tokens, T frames, H/W pixels, (gh, gw) the merged token grid of one frame group.

Source: docs/design.md §4.4-4.6 (stages), §4.12 (τ); EAGLE's demo for the
token colouring.
"""
from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go
from PIL import Image

from app.views.chart_style import themed
from specvlm.spec.grid import grid_cells, grid_shape


# --- colours ------------------------------------------------------------------------------

STAGE1_RGB = (255, 96, 0)
"""Overlay colour of Stage I (verifier-guided, top-p) kept tokens."""
STAGE2_RGB = (0, 132, 255)
"""Overlay colour of Stage II (spatially uniform) kept tokens."""
KEPT_RGB = (0, 200, 90)
"""Overlay colour of kept tokens of single-stage methods (no Stage I/II split)."""
DROPPED_DIM = 0.3
"""Brightness factor of dropped tokens' pixels."""
OVERLAY_ALPHA = 0.5
"""Blend weight of the overlay colour on kept tokens and on score cells."""

DROPPED, STAGE1, STAGE2, KEPT, NO_TOKEN = 0, 1, 2, 3, 4
"""Per-token category codes used by :func:`token_categories`."""

DRAFT_BG = "rgba(34, 197, 94, 0.35)"
"""Background of tokens accepted from the draft."""
TARGET_BG = "rgba(249, 115, 22, 0.35)"
"""Background of tokens produced by the target (bonus or correction)."""

# Piecewise-linear "inferno"-like colour map for raw scores (value in [0, 1] -> RGB).
_CMAP = np.array(
    [[0, 0, 4], [87, 16, 110], [188, 55, 84], [249, 142, 9], [252, 255, 164]], dtype=np.float32
)


def _np(x: Any, dtype: Any = None) -> np.ndarray | None:
    """Tensor / list / array -> numpy (on CPU), or None."""
    if x is None:
        return None
    if hasattr(x, "detach"):
        x = x.detach().float().cpu().numpy() if x.is_floating_point() else x.detach().cpu().numpy()
    arr = np.asarray(x)
    return arr.astype(dtype) if dtype is not None else arr


def score_colormap(values: np.ndarray) -> np.ndarray:
    """Map values in [0, 1] to RGB with an inferno-like ramp.

    Args:
        values: float array of any shape, clipped to [0, 1].

    Returns:
        float32 array ``values.shape + (3,)`` with values in [0, 255].
    """
    v = np.clip(np.asarray(values, dtype=np.float32), 0.0, 1.0) * (len(_CMAP) - 1)
    lo = np.floor(v).astype(int).clip(0, len(_CMAP) - 2)
    frac = (v - lo)[..., None]
    return _CMAP[lo] * (1.0 - frac) + _CMAP[lo + 1] * frac


def token_categories(num_tokens: int, keep: Any = None, stage1: Any = None, stage2: Any = None) -> np.ndarray:
    """Category per video token: DROPPED, STAGE1, STAGE2 or KEPT.

    Tokens in ``keep`` but in neither stage (single-stage methods such as ``attention`` or
    ``random``) are KEPT. With ``keep`` None and no stages, every token is KEPT (no pruning).

    Args:
        num_tokens: V.
        keep: int indices (K,) of kept tokens, or None.
        stage1: int indices of Stage I picks, or None.
        stage2: int indices of Stage II picks, or None.

    Returns:
        int8 array (V,).
    """
    keep_a, s1, s2 = _np(keep, np.int64), _np(stage1, np.int64), _np(stage2, np.int64)
    if keep_a is None and (s1 is None or s1.size == 0) and (s2 is None or s2.size == 0):
        return np.full(num_tokens, KEPT, dtype=np.int8)
    cats = np.full(num_tokens, DROPPED, dtype=np.int8)
    if keep_a is not None:
        cats[keep_a] = KEPT
    if s1 is not None:
        cats[s1] = STAGE1
    if s2 is not None:
        cats[s2] = STAGE2
    return cats


def normalise_scores(scores: Any) -> np.ndarray:
    """Scale raw attention scores to [0, 1] for display (min to 99th percentile).

    Attention scores are heavy-tailed (a few sink tokens), so the top percent saturates.

    Args:
        scores: float (V,).

    Returns:
        float32 (V,) in [0, 1]; zeros if the scores are constant.
    """
    s = _np(scores, np.float32)
    if s is None or s.size == 0:
        return np.zeros(0, np.float32)
    lo, hi = float(s.min()), float(np.quantile(s, 0.99))
    if hi <= lo:
        hi = float(s.max())
    if hi <= lo:
        return np.zeros_like(s)
    return np.clip((s - lo) / (hi - lo), 0.0, 1.0)


def _cell_map(rows: np.ndarray, cols: np.ndarray, values: np.ndarray, grid_hw: tuple[int, int],
              fill: float) -> np.ndarray:
    """Scatter per-token values into a (gh, gw) grid; cells without a token get ``fill``."""
    cell = np.full(grid_hw, fill, dtype=np.float32)
    ok = (rows >= 0) & (cols >= 0) & (rows < grid_hw[0]) & (cols < grid_hw[1])
    cell[rows[ok], cols[ok]] = values[ok]
    return cell


def _upsample(cell: np.ndarray, height: int, width: int) -> np.ndarray:
    """Nearest-neighbour (gh, gw) -> (H, W): pixel y belongs to token row floor(y * gh / H)."""
    gh, gw = cell.shape
    ri = (np.arange(height) * gh) // height
    ci = (np.arange(width) * gw) // width
    return cell[ri[:, None], ci[None, :]]


def stage_overlay(frame: np.ndarray, rows: np.ndarray, cols: np.ndarray, cats: np.ndarray,
                  grid_hw: tuple[int, int], alpha: float = OVERLAY_ALPHA) -> np.ndarray:
    """Overlay pruning stages on one frame.

    Kept cells are blended with their stage colour; dropped cells are dimmed by
    :data:`DROPPED_DIM`; pixels without a token stay as they are.

    Args:
        frame: uint8 (H, W, 3).
        rows, cols: int (n,) token positions in the frame group's grid.
        cats: int (n,) categories from :func:`token_categories`.
        grid_hw: (gh, gw).
        alpha: blend weight of the stage colour.

    Returns:
        uint8 (H, W, 3).
    """
    h, w = frame.shape[:2]
    cat_px = _upsample(_cell_map(rows, cols, cats.astype(np.float32), grid_hw, NO_TOKEN), h, w).astype(int)
    out = frame.astype(np.float32)
    for code, rgb in ((STAGE1, STAGE1_RGB), (STAGE2, STAGE2_RGB), (KEPT, KEPT_RGB)):
        m = cat_px == code
        out[m] = out[m] * (1.0 - alpha) + np.asarray(rgb, np.float32) * alpha
    m = cat_px == DROPPED
    out[m] = out[m] * DROPPED_DIM
    return np.clip(np.rint(out), 0, 255).astype(np.uint8)


def score_overlay(frame: np.ndarray, rows: np.ndarray, cols: np.ndarray, values: np.ndarray,
                  grid_hw: tuple[int, int], alpha: float = 0.6) -> np.ndarray:
    """Overlay normalised attention scores (inferno-like map) on one frame.

    Args:
        frame: uint8 (H, W, 3).
        rows, cols: int (n,) token positions in the frame group's grid.
        values: float (n,) in [0, 1], e.g. from :func:`normalise_scores`.
        grid_hw: (gh, gw).
        alpha: blend weight of the colour map.

    Returns:
        uint8 (H, W, 3).
    """
    h, w = frame.shape[:2]
    val_px = _upsample(_cell_map(rows, cols, values.astype(np.float32), grid_hw, np.nan), h, w)
    out = frame.astype(np.float32)
    m = ~np.isnan(val_px)
    out[m] = out[m] * (1.0 - alpha) + score_colormap(val_px[m]) * alpha
    return np.clip(np.rint(out), 0, 255).astype(np.uint8)


def _resize(frame: np.ndarray, max_side: int | None) -> np.ndarray:
    """Downscale so the longer side is at most ``max_side`` (keeps aspect)."""
    h, w = frame.shape[:2]
    if not max_side or max(h, w) <= max_side:
        return frame
    s = max_side / max(h, w)
    size = (max(1, round(w * s)), max(1, round(h * s)))
    return np.asarray(Image.fromarray(frame).resize(size, Image.BILINEAR))


def heatmap_gallery(
    frames: np.ndarray,
    token_grid: Any,
    *,
    keep: Any = None,
    stage1: Any = None,
    stage2: Any = None,
    scores: Any = None,
    mode: str = "stages",
    frames_per_token: int = 1,
    timestamps: Sequence[float] | None = None,
    max_images: int = 32,
    max_side: int | None = 384,
) -> list[tuple[np.ndarray, str]]:
    """One overlay image per token frame group, for a gallery.

    Token frame group g covers frames ``g*frames_per_token ... (g+1)*frames_per_token - 1``
    (for Qwen2.5-VL one token spans two frames); the first frame of the group is shown.

    Args:
        frames: uint8 (T, H, W, 3), the sampled frames.
        token_grid: int (V, 3) (frame group, row, col) per video token; rows/cols < 0 are
            tokens without a cell (e.g. a newline token) and are skipped.
        keep, stage1, stage2: index arrays of the PruneResult (see :func:`token_categories`).
        scores: float (V,) raw attention scores (needed for ``mode="scores"``).
        mode: ``"stages"`` or ``"scores"``.
        frames_per_token: frames per token group.
        timestamps: seconds per frame (T,), for captions.
        max_images: at most this many groups, evenly spaced.
        max_side: downscale frames to this longer side before overlaying (None: keep).

    Returns:
        list of (uint8 (h, w, 3) image, caption).

    Raises:
        ValueError: unknown mode, or ``mode="scores"`` without scores.
    """
    if mode not in ("stages", "scores"):
        raise ValueError(f"heatmap mode {mode!r} is unknown: use 'stages' or 'scores'.")
    grid = _np(token_grid, np.int64)
    frames = np.asarray(frames)
    if grid is None or grid.size == 0 or frames.size == 0:
        return []
    v = grid.shape[0]
    valid = grid_cells(grid).numpy()
    grid_hw = grid_shape(grid)
    cats = token_categories(v, keep, stage1, stage2)
    if mode == "scores":
        if scores is None:
            raise ValueError("raw scores are not available for this run (vanilla or a score-free method).")
        values = normalise_scores(scores)
    groups = np.unique(grid[valid, 0])
    if len(groups) > max_images:
        groups = groups[np.linspace(0, len(groups) - 1, max_images).astype(int)]
    fpt = max(1, int(frames_per_token))
    out = []
    for g in groups:
        sel = (grid[:, 0] == g) & valid
        t0 = min(int(g) * fpt, len(frames) - 1)
        t1 = min(t0 + fpt - 1, len(frames) - 1)
        frame = _resize(frames[t0], max_side)
        rows, cols = grid[sel, 1], grid[sel, 2]
        if mode == "stages":
            img = stage_overlay(frame, rows, cols, cats[sel], grid_hw)
        else:
            img = score_overlay(frame, rows, cols, values[sel], grid_hw)
        out.append((img, _caption(t0, t1, timestamps, cats[sel])))
    return out


def _caption(t0: int, t1: int, timestamps: Sequence[float] | None, cats: np.ndarray) -> str:
    """'frames 0-1 (0.0-0.5 s) · kept 12/64 (I 5, II 7)'."""
    span = f"frame {t0}" if t0 == t1 else f"frames {t0}-{t1}"
    if timestamps is not None and len(timestamps) > t1:
        a, b = float(timestamps[t0]), float(timestamps[t1])
        span += f" ({a:.1f} s)" if t0 == t1 else f" ({a:.1f}-{b:.1f} s)"
    n1, n2 = int((cats == STAGE1).sum()), int((cats == STAGE2).sum())
    kept = n1 + n2 + int((cats == KEPT).sum())
    detail = f" (I {n1}, II {n2})" if n1 + n2 else ""
    return f"{span} · kept {kept}/{len(cats)}{detail}"


def heatmap_legend_html(mode: str = "stages", frames_per_token: int = 1) -> str:
    """Legend (HTML) for the heatmap gallery, with the frames-per-token note.

    Args:
        mode: ``"stages"`` or ``"scores"``.
        frames_per_token: 2 adds the Qwen2.5-VL note that one token covers two frames.

    Returns:
        An HTML snippet.
    """
    def sw(rgb: tuple[int, int, int] | str, label: str) -> str:
        col = rgb if isinstance(rgb, str) else "rgb(%d,%d,%d)" % rgb
        return (f'<span style="display:inline-block;width:0.9em;height:0.9em;background:{col};'
                f'margin:0 0.3em 0 0.8em;vertical-align:middle;border-radius:2px"></span>{label}')
    if mode == "scores":
        ramp = ",".join("rgb(%d,%d,%d)" % tuple(int(c) for c in row) for row in _CMAP)
        items = (f'low <span style="display:inline-block;width:6em;height:0.8em;vertical-align:middle;'
                 f'background:linear-gradient(90deg,{ramp})"></span> high text→video attention')
    else:
        items = (sw(STAGE1_RGB, "Stage I kept (verifier attention, top-p)")
                 + sw(STAGE2_RGB, "Stage II kept (spatially uniform)")
                 + sw(KEPT_RGB, "kept (single-stage method)")
                 + sw("rgb(40,40,40)", "dropped (dimmed)"))
    note = ""
    if frames_per_token > 1:
        note = (f"<br><i>One video token covers {frames_per_token} consecutive frames "
                f"(Qwen2.5-VL temporal patch); each image shows the first frame of its group.</i>")
    return f'<div class="specvlm-legend" style="font-size:0.9em">{items}{note}</div>'


# --- charts ------------------------------------------------------------------------------

def _empty_figure(title: str, message: str) -> go.Figure:
    fig = go.Figure()
    fig.update_layout(annotations=[dict(text=message, showarrow=False, xref="paper", yref="paper", x=0.5, y=0.5)])
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return themed(fig, title)


ZERO_STUB = 0.12
"""Height of the red stub drawn for a verify step that accepted no draft token (y-axis units)."""


def accept_length_figure(
    accept_lengths: Sequence[int],
    step_texts: Sequence[str] | None = None,
    *,
    max_depth: int | None = None,
    title: str = "Accepted draft tokens per step",
) -> go.Figure:
    """Bar chart of accepted length per verify step with the running mean τ.

    Args:
        accept_lengths: accepted draft tokens per verify step (prefill token excluded).
        step_texts: text emitted at each step (accepted tokens + bonus), shown on hover.
        max_depth: tree depth, the y-axis upper bound.
        title: figure title.

    Returns:
        A plotly Figure with traces "accepted length" (Bar), "0 accepted (bonus token only)" (Bar,
        red stubs of height :data:`ZERO_STUB` at the steps that accepted nothing; only when there are
        such steps) and "running τ" (Scatter).
    """
    n = len(accept_lengths)
    if n == 0:
        return _empty_figure(title, "no verify steps yet")
    x = np.arange(1, n + 1)
    a = np.asarray(accept_lengths, dtype=np.float64)
    running = np.cumsum(a) / x
    texts = [html.escape(t).replace("\n", "⏎") for t in (step_texts or [""] * n)]
    fig = go.Figure()
    fig.add_trace(go.Bar(
        x=x, y=a, name="accepted length", customdata=texts, marker_color="rgb(34,197,94)",
        hovertemplate="step %{x}<br>accepted %{y}<br>tokens: %{customdata}<extra></extra>"))
    zero = a == 0
    if zero.any():  # a bar of height 0 is invisible: mark those steps with a short red stub
        fig.add_trace(go.Bar(
            x=x[zero], y=np.full(int(zero.sum()), ZERO_STUB), name="0 accepted (bonus token only)",
            customdata=[t for t, z in zip(texts, zero) if z], marker_color="rgb(239,68,68)",
            hovertemplate="step %{x}<br>accepted 0<br>tokens: %{customdata}<extra></extra>"))
    fig.add_trace(go.Scatter(
        x=x, y=running, name="running τ", mode="lines", line=dict(color="rgb(249,115,22)", width=2),
        hovertemplate="step %{x}<br>τ so far %{y:.2f}<extra></extra>"))
    ymax = max(float(a.max()), float(max_depth or 0)) + 0.5
    fig.update_layout(bargap=0.1, barmode="overlay", xaxis_title="verify step",
                      yaxis_title="accepted tokens", yaxis_range=[0, ymax],
                      xaxis=dict(tickformat="d", dtick=max(1, int(np.ceil(n / 12))),    # whole steps only
                                 range=[0.5, n + 0.5]))
    return themed(fig, f"{title} (τ = {running[-1]:.2f})")


def tokens_over_time_figure(runs: Mapping[str, tuple[Sequence[float], Sequence[int]]],
                            title: str = "Generated tokens over decode time") -> go.Figure:
    """Cumulative generated tokens against decode time, one line per run.

    Args:
        runs: name -> (elapsed seconds per step, tokens generated so far per step).
        title: figure title.

    Returns:
        A plotly Figure with one Scatter trace per non-empty run, named by the run.
    """
    runs = {k: v for k, v in runs.items() if len(v[0])}
    if not runs:
        return _empty_figure(title, "no tokens yet")
    fig = go.Figure()
    colours = ["rgb(120,120,120)", "rgb(34,197,94)", "rgb(0,132,255)", "rgb(249,115,22)"]
    for i, (name, (t, n)) in enumerate(runs.items()):
        fig.add_trace(go.Scatter(
            x=list(t), y=list(n), name=name, mode="lines", line=dict(color=colours[i % 4], width=2),
            line_shape="hv", hovertemplate=name + "<br>%{x:.2f} s: %{y} tokens<extra></extra>"))
    fig.update_layout(xaxis_title="decode time (s)", yaxis_title="tokens")
    return themed(fig, title)


# --- token HTML ----------------------------------------------------------------------------

_PANEL_STYLE = ("white-space:pre-wrap;word-break:break-word;font-family:ui-monospace,monospace;"
                "font-size:0.9em;line-height:1.6;min-height:8em;max-height:24em;overflow-y:auto")


def tokens_legend_html() -> str:
    """Legend for :func:`tokens_html` (draft-accepted vs target tokens)."""
    return (f'<div class="specvlm-legend" style="font-size:0.85em;margin-bottom:0.3em">'
            f'<span style="background:{DRAFT_BG};padding:0 0.3em;border-radius:3px">accepted from draft</span> '
            f'<span style="background:{TARGET_BG};padding:0 0.3em;border-radius:3px">'
            f'from target (bonus / correction)</span></div>')


def tokens_html(pieces: Sequence[tuple[str, bool]], *, legend: bool = True, placeholder: str = "") -> str:
    """Colour-coded generated text: one span per token, green if accepted from the draft,
    orange if produced by the target.

    Args:
        pieces: (token text, from_draft) in generation order.
        legend: prepend :func:`tokens_legend_html`.
        placeholder: shown (greyed) when there are no pieces.

    Returns:
        HTML; the text content of the token spans concatenated equals the generated text.
    """
    spans = []
    for text, from_draft in pieces:
        if not text:
            continue
        kind, bg = ("draft", DRAFT_BG) if from_draft else ("target", TARGET_BG)
        spans.append(f'<span class="tok tok-{kind}" style="background:{bg};border-radius:2px">'
                     f'{html.escape(text)}</span>')
    body = "".join(spans) or f'<span style="opacity:0.5">{html.escape(placeholder)}</span>'
    return ((tokens_legend_html() if legend else "")
            + f'<div class="specvlm-tokens" style="{_PANEL_STYLE}">{body}</div>')


def plain_text_html(text: str, placeholder: str = "") -> str:
    """Generated text in the same panel style as :func:`tokens_html`, without colours."""
    body = html.escape(text) if text else f'<span style="opacity:0.5">{html.escape(placeholder)}</span>'
    return f'<div class="specvlm-tokens" style="{_PANEL_STYLE}">{body}</div>'
