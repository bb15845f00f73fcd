"""The Compare tab's download: both texts and the summary of the last Run as one Markdown file, written
from what the page shows (the two text panels and the summary), so it holds exactly what the user saw.

Source: docs/design.md §1 (the app).
"""
from __future__ import annotations

import html
import re
import tempfile
from pathlib import Path

_PLACEHOLDER = re.compile(r'<span style="opacity:0.5">.*?</span>', re.DOTALL)
_TAG = re.compile(r"<[^>]+>")
FILE_NAME = "specvlm-comparison.md"
"""Name of the downloaded file."""


def panel_text(panel_html: str | None) -> str:
    """The generated text a panel's HTML (``app.views.plots.plain_text_html`` / ``tokens_html``) shows; "" while it
    shows only its placeholder (``waiting…``)."""
    text = str(panel_html or "")
    start = text.find('class="specvlm-tokens"')
    if start >= 0:   # only the text box (not a legend before it)
        text = text[text.index(">", start) + 1:]
    return html.unescape(_TAG.sub("", _PLACEHOLDER.sub("", text)))


def comparison_markdown(vanilla_html: str | None, spec_html: str | None, summary: str | None) -> str | None:
    """The two panels' texts and the summary as Markdown, or None when neither panel has text yet."""
    vanilla, spec = panel_text(vanilla_html), panel_text(spec_html)
    if not (vanilla or spec):
        return None
    fence = "````"
    return (f"# SpecVLM Studio: vanilla vs SpecVLM\n\n## Vanilla\n\n{fence}\n{vanilla}\n{fence}\n\n"
            f"## SpecVLM\n\n{fence}\n{spec}\n{fence}\n\n## Summary\n\n{summary or ''}\n")


def comparison_file(vanilla_html: str | None, spec_html: str | None, summary: str | None,
                    folder: str | None = None) -> str | None:
    """Write :func:`comparison_markdown` to ``folder/specvlm-comparison.md`` (a new temporary folder by default).

    Returns:
        The file's path, or None when there is nothing to download yet.
    """
    text = comparison_markdown(vanilla_html, spec_html, summary)
    if text is None:
        return None
    path = Path(folder or tempfile.mkdtemp(prefix="specvlm-comparison-")) / FILE_NAME
    path.write_text(text, encoding="utf-8")
    return str(path)
