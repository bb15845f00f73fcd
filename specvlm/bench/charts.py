"""Benchmark charts: interactive plotly figures for the HTML report, a static matplotlib SVG of the sweep.

Plotly draws the HTML report's figures (plotly.js is inlined, so the page opens offline). Plotly's
static export needs kaleido with a Chrome build, which offline CPU machines and CI do not have, so
the static SVG of the length sweep, for READMEs and code hosts, is drawn with matplotlib's SVG
backend (no display, no browser).
"""
from __future__ import annotations

import io
import math
from typing import Sequence

from specvlm.bench.records import by_size


class ChartError(ValueError):
    """Nothing to plot (no series with at least one finite point)."""


def figures(report: dict) -> list:
    import plotly.graph_objects as go

    main = max(report["inputs"], key=lambda i: i["num_video_tokens"] or 0)["name"]
    rows = [r for r in report["results"] if r["input"] == main and r["status"] == "ok"]
    labels = [r["label"] for r in rows]
    sp = [r["speedup"] or 0 for r in rows]
    err = dict(type="data", symmetric=False, array=[(r["speedup_max"] or 0) - (r["speedup"] or 0) for r in rows],
               arrayminus=[(r["speedup"] or 0) - (r["speedup_min"] or 0) for r in rows])
    f1 = go.Figure(go.Bar(x=labels, y=sp, error_y=err, text=[f"{s:.2f}x" for s in sp], textposition="outside"))
    f1.update_layout(title=f"Decode speedup over our vanilla ({main}; median, min-max over rounds)",
                     yaxis_title="speedup (x)")
    f2 = go.Figure([go.Bar(name="draft ms/step", x=labels, y=[r["draft_ms_per_step"] or 0 for r in rows]),
                    go.Bar(name="verify ms/step", x=labels, y=[r["verify_ms_per_step"] or 0 for r in rows])])
    f2.update_layout(barmode="stack", title="Time per target step (ms): drafting vs verification",
                     yaxis_title="ms per step")
    figs = [f1, f2]
    if report["sweep"]:
        f3, f4 = go.Figure(), go.Figure()
        for method, pts in report["sweep"].items():
            xs = [p["video_tokens"] for p in pts]
            f3.add_trace(go.Scatter(x=xs, y=[p["speedup"] for p in pts], mode="lines+markers", name=method))
            if any(p["tau"] is not None for p in pts):
                f4.add_trace(go.Scatter(x=xs, y=[p["tau"] for p in pts], mode="lines+markers", name=method))
        f3.update_layout(title="Speedup vs video tokens", xaxis_type="log", xaxis_title="video tokens",
                         yaxis_title="decode speedup (x)")
        f4.update_layout(title="τ (mean accepted length) vs video tokens", xaxis_type="log",
                         xaxis_title="video tokens", yaxis_title="τ")
        figs += [f3, f4]
    sc = report.get("step_costs")
    if sc:
        ratio = by_size(sc["ratio"])
        sizes = sorted(ratio)
        f5 = go.Figure(go.Scatter(x=sizes, y=[ratio[n] for n in sizes], mode="lines+markers", name="verify / decode"))
        f5.add_hline(y=1.5, line_dash="dash", annotation_text="goal 1.5x (up to 16 tokens)")
        f5.update_layout(title=f"Verify forward cost vs tokens verified ({sc['kv_tokens']} cached tokens; decode step "
                               f"{sc['decode_ms']:.1f} ms)", xaxis_title="tokens in the verify forward (root + nodes)",
                         yaxis_title="x a decode step")
        figs.append(f5)
    return figs


def _finite(sweep: dict[str, list[dict]], key: str, labels: dict[str, str]) -> dict[str, list[tuple[float, float]]]:
    """{display label: [(video tokens, value)]} for the points of ``sweep`` whose ``key`` is finite."""
    out = {}
    for method, pts in sweep.items():
        xy = [(float(p["video_tokens"]), float(p[key])) for p in pts
              if p.get(key) is not None and p.get("video_tokens") and math.isfinite(float(p[key]))]
        if xy:
            out[labels.get(method, method)] = xy
    return out


def _panel(ax, series: dict[str, Sequence[tuple[float, float]]], colours: dict[str, str], panel: str,
           title: str, ylabel: str, ref: float | None) -> None:
    """One panel: a log2 x axis of video tokens, one line per series, an optional dashed reference."""
    for name, pts in series.items():
        line, = ax.plot([x for x, _ in pts], [y for _, y in pts], marker="o", markersize=4, linewidth=2,
                        color=colours[name], label=name)
        line.set_gid(f"series:{panel}:{name}")
    if ref is not None:
        ax.axhline(ref, color="#6b7280", linestyle="--", linewidth=1)
    xs = sorted({x for pts in series.values() for x, _ in pts})
    ax.set_xscale("log", base=2)
    ax.set_xticks(xs, [f"{x:g}" for x in xs])
    ax.minorticks_off()
    ax.set_ylim(bottom=min(0.0, min(y for pts in series.values() for _, y in pts)))
    ax.set_title(title, fontsize=11, fontweight="bold")
    ax.set_xlabel("video tokens")
    ax.set_ylabel(ylabel)
    ax.grid(True, axis="y", color="#e5e7eb")


def sweep_svg(sweep: dict[str, list[dict]], labels: dict[str, str] | None = None, title: str = "") -> str:
    """SVG (two panels: decode speedup over vanilla, τ) of a benchmark length sweep, drawn with matplotlib.

    Every line carries the SVG id ``series:speedup:<label>`` or ``series:tau:<label>``; the
    document is deterministic (no date, fixed id salt).

    Args:
        sweep: ``report["sweep"]`` of :func:`specvlm.bench.run_bench`: per method, points with
            ``video_tokens`` (int), ``speedup`` (x, may be None) and ``tau`` (may be None).
        labels: display names per method (default: the method keys).
        title: a line above both panels.

    Returns:
        The SVG document as a string.

    Raises:
        ChartError: no method has a finite speedup point.
    """
    from matplotlib.figure import Figure

    labels = labels or {}
    speed, tau = _finite(sweep, "speedup", labels), _finite(sweep, "tau", labels)
    if not speed:
        raise ChartError("the sweep has no speedup points to plot (run bench with --sweep and >= 1 length).")
    names = list(dict.fromkeys([*speed, *tau]))
    palette = ("#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#4b5563", "#ca8a04")
    colours = {n: palette[i % len(palette)] for i, n in enumerate(names)}
    fig = Figure(figsize=(9.2, 3.9))
    axes = fig.subplots(1, 2 if tau else 1, squeeze=False)[0]
    _panel(axes[0], speed, colours, "speedup", "Decode speedup over vanilla", "speedup (x)", 1.0)
    if tau:
        _panel(axes[1], tau, colours, "tau", "τ (mean accepted length)", "τ (tokens)", None)
    if title:
        fig.suptitle(title, fontsize=11)
    handles = {h.get_label(): h for ax in axes for h in ax.get_lines() if not h.get_label().startswith("_")}
    fig.legend(list(handles.values()), list(handles), loc="lower center", ncol=min(4, len(handles)), frameon=False)
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    buf = io.StringIO()
    import matplotlib

    with matplotlib.rc_context({"svg.hashsalt": "specvlm", "svg.fonttype": "none"}):
        fig.savefig(buf, format="svg", metadata={"Date": None})
    return buf.getvalue()
