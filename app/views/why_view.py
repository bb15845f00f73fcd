"""The Inspect tab's "why" for a step: where the target looked when it refused the draft.

A run record's ``why`` (computed right after the run by :func:`specvlm.analysis.why.explain_rejections`, one
extra target forward) holds, for the lowest-acceptance steps where the target refused the draft, the
target's attention from the query that chose its own token, split over its whole input (video tokens the
draft kept or did not see, transcript, question, rest of the prompt, text so far), the one explanation
those shares support, the attention over the video tokens alone, and the subtitle cue holding the step's
word when the draft did not get the transcript. :func:`why_html` says it in words with a stacked bar of
the shares, :func:`why_maps` draws the video part: the frames where the target looked, attention as a heat
map, the cells the draft saw (its kept set) outlined in green.

Source: SpecVLM (arXiv 2508.16201) Sec. 3.2 (verifier attention); docs/design.md §4.7.
"""
from __future__ import annotations

import html
from typing import Any

import numpy as np

from app.views import plots
from specvlm.spec.grid import grid_shape

SEEN_RGB = (34, 197, 94)
"""Outline of the cells the draft saw (its kept set)."""


def step_why(record: Any, step: int | float | None) -> dict | None:
    """The record's explanation of ``step`` (a dict of :class:`specvlm.analysis.why.StepWhy` fields), or None."""
    if step is None:
        return None
    for w in getattr(record, "why", None) or []:
        if int(w["step"]) == int(step):
            return w
    return None


def visible_token(text: str) -> str:
    """Escaped token text with whitespace made visible (space ␣, newline ⏎, tab ⇥; empty ∅)."""
    return html.escape(text.replace(" ", "␣").replace("\n", "⏎").replace("\t", "⇥")) or "∅"


SEGMENT_LABELS = {"video_kept": ("video the draft kept", "#22c55e"),
                  "video_pruned": ("video pruned from the draft", "#ef4444"),
                  "transcript": ("transcript (subtitles)", "#a855f7"),
                  "question": ("question", "#3b82f6"),
                  "prompt_other": ("rest of the prompt", "#9ca3af"),
                  "text_so_far": ("text so far", "#f59e0b")}
"""Attention segment (:data:`specvlm.analysis.why.SEGMENTS`) -> (label, colour) in the why view."""


def shares_html(shares: dict[str, float], transcript_withheld: bool = False) -> str:
    """The target's attention over its whole input as one stacked bar and a legend with each part's share.

    Args:
        shares: segment name -> share in [0, 1] (a :class:`specvlm.analysis.why.StepWhy`'s ``shares``).
        transcript_withheld: label the transcript as withheld from the draft.

    Returns:
        HTML: ``div.specvlm-why-shares`` holding the bar (a ``span`` per part, ``data-segment``, width = share)
        and the legend.

    Source: :func:`specvlm.analysis.why.segment_masks` (the parts).
    """
    bar, legend = [], []
    for key, (label, colour) in SEGMENT_LABELS.items():
        v = float(shares.get(key, 0.0))
        if key == "transcript" and transcript_withheld:
            label = "transcript (withheld from the draft)"
        if v > 0:
            bar.append(f'<span data-segment="{key}" title="{label}: {v:.1%}" style="display:inline-block;'
                       f'height:100%;width:{100 * v:.2f}%;background:{colour}"></span>')
        legend.append(f'<span style="white-space:nowrap;margin-right:0.8em"><span style="display:inline-block;'
                      f'width:0.8em;height:0.8em;background:{colour};margin-right:0.25em"></span>'
                      f'{label} <b>{v:.0%}</b></span>')
    return ('<div class="specvlm-why-shares" style="margin-top:0.4em"><div style="display:flex;height:0.9em;'
            'border:1px solid #9ca3af;border-radius:3px;overflow:hidden">' + "".join(bar) + '</div>'
            '<div style="font-size:0.85em;line-height:1.6;margin-top:0.2em">' + "".join(legend) + "</div></div>")


def explanation_html(w: dict, kept: str) -> str:
    """The one explanation a step's shares support, in a sentence (``w``: a StepWhy as a dict; ``kept``: "K of V").

    Source: :func:`specvlm.analysis.why.explanation`.
    """
    shares = w.get("shares") or {}
    top = max(SEGMENT_LABELS, key=lambda k: shares.get(k, 0.0))
    share = float(shares.get(top, 0.0))
    kind = w.get("explanation", "")
    if kind == "pruned_video":
        return (f"Explanation: <b>the pruned video</b>. Most of the target's attention ({share:.0%}) was on video "
                f"tokens the draft did not see (it kept {kept}); the draft could not see what the target used.")
    if kind == "withheld_transcript":
        cue = ""
        if w.get("cue"):
            a, b, text = w["cue"]
            cue = f' The word is in the cue <b>"{html.escape(text)}"</b> ({a:.1f}-{b:.1f} s).'
        return ("Explanation: <b>the withheld transcript</b>. Most of the target's attention "
                f"({share:.0%}) was on the subtitle transcript, which the draft did not get: it could not "
                f"predict what the target read there.{cue}")
    return (f"Explanation: <b>not a missing input</b>. The target attended most to the "
            f"{SEGMENT_LABELS[top][0]} ({share:.0%}), which the draft saw too: the draft's own prediction "
            "differed.")


def why_html(record: Any, step: int | float | None) -> str:
    """Sentences on why ``step`` failed, or why there is nothing to say (no rejection, not explained): where
    the target's attention went over the whole input at that position and the one explanation it supports."""
    if step is None or not getattr(record, "steps", None):
        return ""
    w = step_why(record, step)
    if w is None:
        if not getattr(record, "why", None):
            return ("<i>No explanation in this run record (made before explanations were recorded, or the run "
                    "did not prune).</i>")
        ev = next((s for s in getattr(record, "verify_steps", []) if s.step == int(step)), None)
        if ev is None:
            return f"<i>This run has no verify step {int(step)}.</i>"
        n = len(record.why)
        which = "the lowest-acceptance step is" if n == 1 else f"the {n} lowest-acceptance steps are"
        return (f"<i>Not explained: {which} explained after the run (steps where the target refused the draft); "
                f"this one accepted {ev.accept_length} draft token{'s' if ev.accept_length != 1 else ''}.</i>")
    tok = visible_token(record.token_text.get(int(w["token_id"]), str(w["token_id"])))
    p = record.prefill
    kept = f"{p.prune.num_kept} of {p.num_video_tokens}" if p.prune is not None else "all"
    head = (f'The target refused the draft here and wrote <b>"{tok}"</b>'
            + (f' (in "{html.escape(w["word"])}")' if w.get("word") else "") + ".")
    if not w.get("shares"):   # a record explained over the video only
        share = float(w["share_unseen"])
        return ('<div class="specvlm-why">' + head + f" From the position where the draft diverged, <b>{share:.0%}"
                f"</b> of the target's video attention fell on video tokens the draft did not see (it kept {kept})."
                " This record has no split of the attention over the whole input.</div>")
    withheld = bool(p.target_subtitle_tokens) and not p.draft_subtitle_tokens
    return ('<div class="specvlm-why">' + head + " Where the target's attention went over its whole input at the "
            "position where the draft diverged:" + shares_html(w["shares"], withheld)
            + f'<div style="margin-top:0.4em">{explanation_html(w, kept)}</div></div>')


def why_maps(record: Any, step: int | float | None, max_images: int = 6) -> list[tuple[np.ndarray, str]]:
    """The frame groups holding most of the step's target attention: heat map, the draft's kept cells outlined.

    Returns:
        list of (uint8 (h, w, 3) image, caption), groups in time order; [] without an explanation,
        a token grid or frames.
    """
    w = step_why(record, step)
    if w is None:
        return []
    info = record.prefill
    frames = record.frames()
    if info.token_grid is None or frames is None:
        return []
    grid = info.token_grid.numpy()
    V = grid.shape[0]
    att = np.zeros(V, np.float32)
    att[np.asarray(w["top_tokens"], np.int64)] = np.asarray(w["top_weights"], np.float32)
    seen = np.ones(V, bool) if info.prune is None else np.isin(np.arange(V), info.prune.keep.numpy())
    groups = np.unique(grid[:, 0])
    mass = np.array([att[grid[:, 0] == g].sum() for g in groups])
    pick = np.sort(groups[np.argsort(-mass, kind="stable")[:max_images]])
    vmax = float(att.max()) or 1.0
    fpt = max(1, info.frames_per_token)
    gh, gw = grid_shape(grid)
    out = []
    for g in pick:
        sel = grid[:, 0] == g
        t0 = min(int(g) * fpt, len(frames) - 1)
        img = plots.score_overlay(frames[t0], grid[sel, 1], grid[sel, 2], att[sel] / vmax, (gh, gw))
        img = _outline(img, grid[sel & seen, 1], grid[sel & seen, 2], (gh, gw))
        share = float(att[sel].sum())
        unseen = float(att[sel & ~seen].sum())
        ts = record.timestamps
        when = f" · {ts[t0]:.1f} s" if ts and len(ts) > t0 else ""
        out.append((img, f"frame {t0}{when} · {share:.0%} ({unseen:.0%} unseen)"))
    return out


def _outline(img: np.ndarray, rows: np.ndarray, cols: np.ndarray, grid_hw: tuple[int, int]) -> np.ndarray:
    """Draw a 1-px green border around the given grid cells."""
    out = img.copy()
    h, w = out.shape[:2]
    ch, cw = h / grid_hw[0], w / grid_hw[1]
    col = np.array(SEEN_RGB, np.uint8)
    for r, c in zip(rows.tolist(), cols.tolist()):
        y0, y1 = int(round(r * ch)), min(h, int(round((r + 1) * ch))) - 1
        x0, x1 = int(round(c * cw)), min(w, int(round((c + 1) * cw))) - 1
        out[y0, x0:x1 + 1] = col
        out[y1, x0:x1 + 1] = col
        out[y0:y1 + 1, x0] = col
        out[y0:y1 + 1, x1] = col
    return out


WHY_LEGEND = ("Heat: the target's attention over the video from the position where the draft diverged "
              "(bright = more). Green outline: the video tokens the draft saw; attention elsewhere was on tokens "
              "it did not see. Caption: frame · time · the frame's share of the video attention (the part on "
              "cells the draft did not see).")
