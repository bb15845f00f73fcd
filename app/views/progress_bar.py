"""The Run's progress bar, drawn inside its status line: one update carries both, so the bar and the words under
it always show the same phase and count (Gradio's own progress overlay arrives on a channel of its own and can
run a batch ahead of the page's outputs; the page hides it while this bar is shown, :mod:`app.page.page_js`).

Source: docs/design.md §8 (long generators: show where the work is).
"""
from __future__ import annotations

import html

BAR_CLASS = "specvlm-progress"
"""Class of the bar's outer element (the page's style sheet and the browser tests find it by this)."""


def status_with_bar(status: str, fraction: float, label: str) -> str:
    """``status`` (Markdown) followed by a bar filled to ``fraction`` whose tooltip is ``label``.

    Args:
        status: the status line.
        fraction: progress of the whole Run in [0, 1] (clamped).
        label: what the bar stands for (the progress description, e.g. ``SpecVLM decoding: 75 of 512 tokens``).

    Returns:
        Markdown: the status, then the bar as HTML (no text of its own, so the status reads as before).
    """
    pct = round(100 * min(max(float(fraction), 0.0), 1.0), 1)
    tip = html.escape(label, quote=True)
    return (f'{status}\n\n<div class="{BAR_CLASS}" role="progressbar" title="{tip}" style="height:6px;'
            f'border-radius:3px;overflow:hidden;background:var(--border-color-primary)"><div style="width:{pct}%;'
            f'height:100%;background:var(--color-accent)"></div></div>')
