"""The page's example rows: the bundled clips, a real-world clip, one that streams long enough
to watch and stop, and a failure case.

Each row fills :data:`EXAMPLE_COLUMNS`. The first row is the streaming example: a bundled clip
with **Fixed length** on and :data:`STREAMING_TOKENS` new tokens, because the bundled model stops
after about 20 tokens (a decode over before anyone sees it stream).

The failure case (:data:`FAILURE_CLIP`) is a long clip whose subtitles state a fact the description
reports; its row picks the bundled sparse target drafting for itself (Self-SD) and sends the subtitles to the
target only, so the draft cannot predict the fact, τ falls at those steps and the Inspect tab's "why" names
the withheld cue.

Source: docs/design.md §1 (the app).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from app.inputs.settings import DEFAULT_PROMPT, FIELDS, SUBTITLE_MODES, RunSettings
from specvlm import assets
from specvlm.models.presets import SPARSE_SELF, SPARSE_TARGET

EXAMPLES_DIR = assets.path("videos")
EXAMPLE_COLUMNS = ("video", "prompt", "srt", "truth", "fixed_length", "max_new_tokens", "preset",
                   "subtitle_mode")
"""Components an example row fills, in order (a None from ``fixed_length`` on means the page default)."""
STREAMING_TOKENS = 512
"""New tokens of the streaming example (fixed length): several seconds of decoding on a CPU."""
STREAMING_CLIP = "shapes_short.mp4"
"""The bundled clip of the streaming example (a short prefill, so decoding starts at once)."""
FAILURE_CLIP = "shapes_subtitles.mp4"
"""The bundled clip of the failure case (160 frames; its ``.srt`` says a fact the description reports)."""
FAILURE_SETUP = (SPARSE_SELF, "target")
"""Preset and subtitle mode of the failure case: the sparse target drafting for itself (its drafts copy
a fact from the transcript when they get it), subtitles to the target only."""
FAILURE_LABEL = "Failure case: subtitles withheld from the draft"


def find_examples(folder: Path = EXAMPLES_DIR) -> list[list[Any]]:
    """Example rows ``[video, prompt, subtitles or None, ground truth or None]`` from ``folder/*.mp4``.

    A ``.srt`` with the same stem next to a video is used as its subtitles, a ``.json`` with the
    same stem as its ground truth (written by ``specvlm.bench.clipfiles.write_truth`` for generated clips).
    :data:`FAILURE_CLIP` is left out (:func:`failure_example` sets it up).
    """
    if not folder.is_dir():
        return []
    rows = []
    for mp4 in sorted(folder.glob("*.mp4")):
        if mp4.name == FAILURE_CLIP:
            continue
        srt, truth = mp4.with_suffix(".srt"), mp4.with_suffix(".json")
        rows.append([str(mp4), DEFAULT_PROMPT, str(srt) if srt.exists() else None,
                     str(truth) if truth.exists() else None])
    return rows


def failure_example(folder: Path = EXAMPLES_DIR, sparse_target: Path = SPARSE_TARGET) -> list[list[Any]]:
    """The failure-case row (:data:`FAILURE_CLIP` with its ``.srt`` and ground truth, the preset and
    subtitle mode of :data:`FAILURE_SETUP`), or none when the clip, its subtitles or the sparse pair is missing."""
    clip = folder / FAILURE_CLIP
    srt, truth = clip.with_suffix(".srt"), clip.with_suffix(".json")
    if not (clip.is_file() and srt.is_file() and (Path(sparse_target) / "config.json").is_file()):
        return []
    return [[str(clip), DEFAULT_PROMPT, str(srt), str(truth) if truth.is_file() else None, None, None,
             *FAILURE_SETUP]]


def real_world_examples() -> list[list[Any]]:
    """A real-world example row: gradio's bundled ``world.mp4`` (30 s, 480x270, shipped inside the
    gradio package and found through its public ``gradio.media.get_video``), or none if this gradio
    has no such file. The bundled shapes model gives a shapes-style caption on it (see the model
    card); with a real preset on a GPU it is a real description."""
    try:
        from gradio.media import get_video

        return [[get_video("world.mp4"), DEFAULT_PROMPT, None, None]]
    except (ImportError, ValueError, OSError):
        return []


def streaming_example(max_new_tokens: int, folder: Path = EXAMPLES_DIR) -> list[list[Any]]:
    """The streaming example row (fixed length, ``min(STREAMING_TOKENS, max_new_tokens)`` new tokens),
    or none when :data:`STREAMING_CLIP` is not in ``folder``."""
    clip = folder / STREAMING_CLIP
    if not clip.is_file():
        return []
    return [[str(clip), DEFAULT_PROMPT, None, None, True, min(STREAMING_TOKENS, max_new_tokens)]]


def default_examples(max_new_tokens: int) -> tuple[list[list[Any]], list[str]]:
    """(rows, labels): the streaming example, the bundled clips, the failure case, then the real-world clip."""
    rows = streaming_example(max_new_tokens) + find_examples() + failure_example() + real_world_examples()
    labels = [f"Watch it stream: {row[5]} tokens, fixed length" if len(row) > 4 and row[4]
              else FAILURE_LABEL if Path(row[0]).name == FAILURE_CLIP and len(row) > 7
              else Path(row[0]).name for row in rows]
    return rows, labels


def example_rows(examples: list[list[Any]], max_new_tokens: int, preset: str = "",
                 subtitle_mode: str = SUBTITLE_MODES[0],
                 budget_of: Callable[[str], int] | None = None) -> list[list[Any]]:
    """Rows completed to :data:`EXAMPLE_COLUMNS`: no subtitles or ground truth, EOS honoured, preset (``preset``)
    and subtitle mode where a row says nothing or None, and the token budget of the row's preset (``budget_of``;
    None: ``max_new_tokens`` for every row)."""
    fill = [None, None, None, None, False, None, preset, subtitle_mode]
    budget, named_preset = EXAMPLE_COLUMNS.index("max_new_tokens"), EXAMPLE_COLUMNS.index("preset")
    out = []
    for row in examples:
        row = list(row)[:len(fill)] + fill[len(row):]
        row = [fill[i] if v is None and i >= 4 else v for i, v in enumerate(row)]
        if row[budget] is None:
            row[budget] = budget_of(row[named_preset]) if budget_of else max_new_tokens
        out.append(row)
    return out


RESET = tuple(f.name for f in FIELDS if f.setting and not f.renamed_to and f.name not in EXAMPLE_COLUMNS)
"""The page's settings an example row does not name (component names): clicking it resets them to its preset's
defaults (:func:`example_reset`)."""


def settings_values(s: RunSettings) -> dict[str, Any]:
    """Settings as the page's component values (component name -> value, every :data:`FIELDS` entry with a setting,
    old names left out)."""
    return {f.name: getattr(s, f.setting) for f in FIELDS if f.setting and not f.renamed_to}


def example_reset(row: Sequence[Any], current: Mapping[str, Any], defaults: Callable[[str], Mapping[str, Any]],
                  labels: Mapping[str, str], presets: Sequence[str] = ()) -> tuple[dict[str, Any], str]:
    """What clicking an example does to the settings it does not name: each goes back to its preset's default, so
    a Run after the click runs the example as its preset means it. The note names those the person had changed
    (a value other than the default of the preset the page had), with the value they had.

    Args:
        row: the example row, completed to :data:`EXAMPLE_COLUMNS` (:func:`example_rows`).
        current: component name -> the page's value before the click (``preset`` among them).
        defaults: preset name -> component name -> default value (:func:`settings_values` of the preset's
            defaults, e.g. :meth:`app.runs.backend.Backend.default_settings` for that preset).
        labels: component name -> the label the note uses.
        presets: other presets whose defaults count as values the person did not choose (the page's examples'
            presets: an example click may already have set the preset, and its tree, before this runs).

    Returns:
        (component name -> value for each of :data:`RESET` that ``current`` holds, the note in Markdown: "" when
        nothing the person changed was reset).
    """
    ex = dict(zip(EXAMPLE_COLUMNS, row))
    new = defaults(ex["preset"])
    olds = [defaults(p) for p in dict.fromkeys([current.get("preset") or ex["preset"], *presets]) if p]
    values = {k: new[k] for k in RESET if k in current and k in new}
    changed = [k for k, v in values.items()
               if not _same(current[k], v) and not any(_same(current[k], old.get(k)) for old in olds)]
    if not changed:
        return values, ""
    what = ", ".join(f"{labels.get(k, k)} ({_shown(current[k])} → {_shown(values[k])})" for k in changed)
    return values, f"*This example reset settings you had changed to its preset's defaults: {what}.*"


def _same(a: Any, b: Any) -> bool:
    """Equal as the page shows them (a slider's 32.0 is 32; an empty custom model field is None)."""
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-9)
    return (a or None) == (b or None) if isinstance(a, str) or isinstance(b, str) else a == b


def _shown(v: Any) -> str:
    """A setting's value in the note ("none" for an empty field or choice, 32 for 32.0)."""
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return "none" if v in ("", None) else str(v)


def wire_reset(dataset: Any, rows: list[list[Any]], c: Mapping[str, Any], defaults: Callable[[str], RunSettings],
               note: Any) -> None:
    """Clicking an example (``dataset``, the ``gr.Examples`` table of ``rows``) also resets the settings it does
    not name (:func:`example_reset`) and shows the note in ``note`` (hidden when there is none).

    Args:
        dataset: the examples' ``gr.Dataset``.  rows: its rows, completed (:func:`example_rows`).
        c: the page's components by name.  defaults: preset name -> its default settings.
        note: a ``gr.Markdown`` for the note.
    """
    import gradio as gr

    names = [k for k in RESET if k in c]
    labels = {k: getattr(c[k], "label", None) or k for k in names}
    example_presets = [p for p in dict.fromkeys(dict(zip(EXAMPLE_COLUMNS, row)).get("preset") for row in rows) if p]

    def on_example(sample: Any, preset: str, *values: Any) -> list[Any]:
        index = sample[0] if isinstance(sample, (tuple, list)) else sample
        reset, text = example_reset(rows[int(index)], {"preset": preset, **dict(zip(names, values))},
                                    lambda p: settings_values(defaults(p)), labels, example_presets)
        return [gr.update(value=reset[k]) for k in names] + [gr.update(value=text, visible=bool(text))]

    dataset.click(on_example, inputs=[dataset, c["preset"], *(c[k] for k in names)],
                  outputs=[*(c[k] for k in names), note], queue=False, api_visibility="private",
                  show_progress="hidden")
