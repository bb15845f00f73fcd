"""Static SVG line charts for READMEs and reports (no browser, no image exporter).

Plotly is the project's chart library, but its static export needs a headless browser
(kaleido + Chrome) that CPU and CI machines here do not have. A README needs an image
that renders on a code host, so the length sweep is also written as a small, dependency-free
SVG: one panel per metric, log2 x axis (video tokens), one polyline per method.
"""
from __future__ import annotations

import html
import math
from typing import Sequence

PALETTE = ("#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#4b5563", "#ca8a04")


class ChartError(ValueError):
    """Nothing to plot (no series with at least one finite point)."""


def _ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """About ``n`` round tick values covering [lo, hi]."""
    if hi <= lo:
        hi = lo + 1.0
    raw = (hi - lo) / max(n - 1, 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    start = math.floor(lo / step) * step
    out, v = [round(start, 10)], start
    while out[-1] < hi - 1e-9 * step:   # the last tick is >= hi, so every point lies inside the panel
        v += step
        out.append(round(v, 10))
    return out


def _panel(x0: float, y0: float, w: float, h: float, title: str, ylabel: str,
           series: dict[str, Sequence[tuple[float, float]]], colours: dict[str, str],
           ref: float | None) -> list[str]:
    pts_all = [(x, y) for pts in series.values() for x, y in pts]
    xs = [math.log2(x) for x, _ in pts_all]
    ys = [y for _, y in pts_all] + ([ref] if ref is not None else [])
    xlo, xhi = min(xs), max(xs)
    if xhi == xlo:
        xlo, xhi = xlo - 0.5, xhi + 0.5
    ticks = _ticks(min(0.0, min(ys)), max(ys) * 1.1)
    ylo, yhi = ticks[0], ticks[-1]
    px = lambda v: x0 + (math.log2(v) - xlo) / (xhi - xlo) * w  # noqa: E731
    py = lambda v: y0 + h - (v - ylo) / (yhi - ylo) * h  # noqa: E731
    out = [f'<text x="{x0 + w / 2:.1f}" y="{y0 - 12:.1f}" text-anchor="middle" font-weight="bold">'
           f'{html.escape(title)}</text>',
           f'<rect x="{x0}" y="{y0}" width="{w}" height="{h}" fill="none" stroke="#9ca3af"/>']
    for t in ticks:
        y = py(t)
        out.append(f'<line x1="{x0}" x2="{x0 + w}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e5e7eb"/>')
        out.append(f'<text x="{x0 - 6}" y="{y + 4:.1f}" text-anchor="end">{t:g}</text>')
    for xv in sorted({x for x, _ in pts_all}):
        out.append(f'<text x="{px(xv):.1f}" y="{y0 + h + 16:.1f}" text-anchor="middle">{xv:g}</text>')
    out.append(f'<text x="{x0 + w / 2:.1f}" y="{y0 + h + 34:.1f}" text-anchor="middle">video tokens</text>')
    out.append(f'<text x="{x0 - 42:.1f}" y="{y0 + h / 2:.1f}" text-anchor="middle" '
               f'transform="rotate(-90 {x0 - 42:.1f} {y0 + h / 2:.1f})">{html.escape(ylabel)}</text>')
    if ref is not None:
        out.append(f'<line x1="{x0}" x2="{x0 + w}" y1="{py(ref):.1f}" y2="{py(ref):.1f}" stroke="#6b7280" '
                   f'stroke-dasharray="4 3"/>')
    for name, pts in series.items():
        if not pts:
            continue
        c = colours[name]
        coords = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in pts)
        out.append(f'<polyline class="series" data-name="{html.escape(name)}" points="{coords}" fill="none" '
                   f'stroke="{c}" stroke-width="2"/>')
        out += [f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" fill="{c}"/>' for x, y in pts]
    return out


def sweep_svg(sweep: dict[str, list[dict]], labels: dict[str, str] | None = None, title: str = "") -> str:
    """SVG (two panels: decode speedup over vanilla, τ) of a benchmark length sweep.

    Args:
        sweep: ``report["sweep"]`` of :func:`specvlm.bench.run_bench`: per method, points with
            ``video_tokens`` (int), ``speedup`` (x, may be None) and ``tau`` (may be None).
        labels: display names per method (default: the method keys).
        title: a line above both panels.

    Returns:
        The SVG document as a string (about 6 KB).

    Raises:
        ChartError: no method has a finite speedup point.
    """
    labels = labels or {}

    def finite(key: str) -> dict[str, list[tuple[float, float]]]:
        return {labels.get(m, m): [(p["video_tokens"], float(p[key])) for p in pts
                                   if p.get(key) is not None and p.get("video_tokens")
                                   and math.isfinite(float(p[key]))]
                for m, pts in sweep.items()}

    speed, tau = finite("speedup"), finite("tau")
    speed = {k: v for k, v in speed.items() if v}
    tau = {k: v for k, v in tau.items() if v}
    if not speed:
        raise ChartError("the sweep has no speedup points to plot (run bench with --sweep and >= 1 length).")
    names = list(dict.fromkeys([*speed, *tau]))
    colours = {n: PALETTE[i % len(PALETTE)] for i, n in enumerate(names)}
    W, H = 920, 380
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" '
           f'font-family="sans-serif" font-size="12">', f'<rect width="{W}" height="{H}" fill="white"/>']
    if title:
        out.append(f'<text x="{W / 2}" y="18" text-anchor="middle" font-size="13">{html.escape(title)}</text>')
    out += _panel(70, 60, 330, 220, "Decode speedup over vanilla", "speedup (x)", speed, colours, 1.0)
    if tau:
        out += _panel(520, 60, 330, 220, "τ (mean accepted length)", "τ (tokens)", tau, colours, None)
    lx, ly = 70, H - 34
    for n in names:
        out.append(f'<rect x="{lx}" y="{ly - 9}" width="14" height="4" fill="{colours[n]}"/>')
        out.append(f'<text x="{lx + 18}" y="{ly - 4}">{html.escape(n)}</text>')
        lx += 26 + 7 * len(n)
        if lx > W - 120:
            lx, ly = 70, ly + 16
    out.append("</svg>")
    return "\n".join(out) + "\n"
