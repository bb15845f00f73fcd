"""Run records for failure inspection: where speculation breaks, step by step.

The record itself is :class:`specvlm.analysis.run.RunRecord` (the stream's own events, settings and
prompt, one versioned JSON object). This module adds what inspection needs on top: building a record
with token texts and thumbnails from a stream (:func:`record_from_events`), saving and loading it as a
file (:func:`save_json` / :func:`load_json`), and the queries :func:`lowest_accept_steps` and
:func:`step_tree`.

Source: docs/design.md §4.4-4.5 (stages), §4.8-4.9 (trees, acceptance).
"""
from __future__ import annotations

import base64
import io
import json
import math
import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from specvlm.analysis.run import (RECORD_FORMAT, RECORD_VERSION, RecordError, RunRecord, prefill_from_dict,
                                  prefill_to_dict)
from specvlm.spec.grid import token_frames
from specvlm.types import PrefillInfo, StepEvent

__all__ = ["RECORD_FORMAT", "RECORD_VERSION", "RecordError", "RunRecord", "StepTree", "TreeNodeView", "from_dict",
           "load_json", "lowest_accept_steps", "prefill_from_dict", "prefill_to_dict", "record_from_events",
           "save_json", "step_tree", "to_dict"]


def _thumbnails(frames: np.ndarray, token_grid: Any, frames_per_token: int, max_side: int) -> list[str]:
    """Base64 PNGs of the first frame of each token frame group (:func:`specvlm.spec.grid.token_frames`)."""
    from PIL import Image

    out = []
    for t in torch.unique(token_frames(token_grid, frames_per_token)[0]).tolist():
        img = Image.fromarray(np.asarray(frames[min(t, len(frames) - 1)], dtype=np.uint8))
        scale = max_side / max(img.size)
        if scale < 1:
            img = img.resize((max(1, round(img.width * scale)), max(1, round(img.height * scale))), Image.BILINEAR)
        buf = io.BytesIO()
        img.save(buf, format="PNG", optimize=True)
        out.append(base64.b64encode(buf.getvalue()).decode("ascii"))
    return out


def record_from_events(events: Iterable[PrefillInfo | StepEvent], config: Any = None, *, prompt: str = "",
                       tokenizer: Any = None, clip: Any = None, meta: dict | None = None,
                       thumbnail_side: int = 96) -> RunRecord:
    """Build a :class:`RunRecord` from a :func:`specvlm.engine.stream.stream` (run with ``record_trees=True``
    to get the trees).

    Args:
        events: the stream's PrefillInfo and StepEvents (consumed).
        config: the DecodeConfig (stored as a dict), or a dict, or None.
        prompt: the user prompt.
        tokenizer: stores each output/tree token's text, so replays need no tokenizer.
        clip: the VideoClip; stores timestamps and small thumbnails (first frame per token frame group, when the
            prefill has a token grid).
        meta: free-form JSON-ready extras.
        thumbnail_side: thumbnails' longer side (px); 0 = no thumbnails.

    Returns:
        RunRecord.

    Raises:
        RecordError: the events hold no PrefillInfo.
    """
    rec = RunRecord.from_events(events, config, prompt)
    info, steps = rec.prefill, rec.steps
    if info is None:
        raise RecordError("the events hold no PrefillInfo: pass the whole stream.")
    rec.meta = dict(meta or {})
    if tokenizer is not None:
        ids = {t for s in steps for t in s.token_ids}
        ids |= {t for s in steps if s.tree for t in s.tree.tokens + [s.tree.target_token]}
        ids |= {s.token_ids[-1] for s in steps if s.token_ids}
        rec.token_text = {int(t): tokenizer.decode([int(t)]) for t in sorted(ids)}
    if clip is not None:
        rec.timestamps = [float(t) for t in np.asarray(clip.timestamps).reshape(-1)]
        if thumbnail_side > 0 and info.token_grid is not None:
            rec.thumbnails = _thumbnails(np.asarray(clip.frames), info.token_grid, info.frames_per_token,
                                         thumbnail_side)
    return rec


# --------------------------------------------------------------------------- JSON
def to_dict(record: RunRecord) -> dict:
    """Plain JSON-ready dict with a ``format`` tag (:meth:`RunRecord.to_json`)."""
    return record.to_json()


def from_dict(d: dict) -> RunRecord:
    """Inverse of :func:`to_dict` (:meth:`RunRecord.from_json`).

    Raises:
        RecordError: not a run record, or a newer version than this code reads.
    """
    return RunRecord.from_json(d)


def save_json(record: RunRecord, path: str | os.PathLike[str]) -> str:
    """Write the record as one JSON file; returns the path."""
    p = os.fspath(path)
    with open(p, "w", encoding="utf-8") as f:
        json.dump(to_dict(record), f, ensure_ascii=False, separators=(",", ":"))
    return p


def load_json(path: str | os.PathLike[str]) -> RunRecord:
    """Read a record written by :func:`save_json`.

    Raises:
        RecordError: unreadable file, invalid JSON, or not a run record.
    """
    try:
        with open(os.fspath(path), encoding="utf-8") as f:
            d = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise RecordError(f"could not read the run file ({e}).") from e
    return from_dict(d)


# --------------------------------------------------------------------------- queries
def lowest_accept_steps(record: RunRecord, k: int = 10, context_chars: int = 40) -> list[dict]:
    """The k verify steps with the shortest accepted length, with their text context.

    Ties go to the earlier step; rows come back in that order (lowest first).

    Returns:
        list of dicts: ``step``, ``accept_length``, ``tree_size``, ``text`` (emitted at the step),
        ``before`` / ``after`` (up to ``context_chars`` characters around it), ``draft_ms``,
        ``verify_ms``.
    """
    texts = [s.text for s in record.steps]
    starts = np.cumsum([0] + [len(t) for t in texts])
    full = "".join(texts)
    rows = []
    for i, s in enumerate(record.steps):
        if s.step == 0:
            continue
        a, b = int(starts[i]), int(starts[i + 1])
        rows.append(dict(step=s.step, accept_length=s.accept_length, tree_size=s.tree_size, text=s.text,
                         before=full[max(0, a - context_chars):a], after=full[b:b + context_chars],
                         draft_ms=s.draft_ms, verify_ms=s.verify_ms))
    rows.sort(key=lambda r: (r["accept_length"], r["step"]))
    return rows[:max(0, int(k))]


@dataclass
class TreeNodeView:
    """One drafted node of a step's tree, ready to display.

    Attributes:
        index: node index (parents-first order).
        parent: parent node index, -1 for children of the root.
        depth: 1 for children of the root.
        token: drafted token id; ``text`` its text.
        draft_prob: the draft's probability of this token given its parent, exp(score delta).
        path_prob: exp(cumulative draft log-probability) along the path.
        accepted: on the path the target accepted.
        diverged: a child of the last accepted node (or of the root) that the target rejected;
            ``target_token`` / ``target_text`` then hold the token the target chose there.
    """

    index: int
    parent: int
    depth: int
    token: int
    text: str
    draft_prob: float
    path_prob: float
    accepted: bool
    diverged: bool = False
    target_token: int | None = None
    target_text: str | None = None


@dataclass
class StepTree:
    """The drafted tree of one verify step.

    Attributes:
        step: the step number.
        root_token, root_text: the token the tree grows from (last token of the previous step).
        nodes: :class:`TreeNodeView` per node, node order.
        accepted_path: accepted node indices, root-first.
        target_token, target_text: the target's token after the accepted path (bonus/correction).
        diverged_at: node index whose children were all rejected (-1 = the root), or None when the
            accepted path ran to a leaf (the draft was right as far as it drafted).
        accept_length: accepted draft tokens emitted at this step.
        ended: the output ended inside this step (EOS or ``max_new_tokens``): ``accepted_path`` is cut
            exactly like the emitted tokens and ``target_token`` (the target's next token) was not emitted.
    """

    step: int
    root_token: int | None
    root_text: str
    nodes: list[TreeNodeView]
    accepted_path: list[int]
    target_token: int
    target_text: str
    diverged_at: int | None
    accept_length: int
    ended: bool = False


def _token_text(record: RunRecord, tokenizer: Any, tok: int | None) -> str:
    if tok is None:
        return ""
    if tokenizer is not None:
        return tokenizer.decode([int(tok)])
    return record.token_text.get(int(tok), f"<{int(tok)}>")


def step_tree(record: RunRecord, step: int, tokenizer: Any = None) -> StepTree:
    """The drafted tree of a verify step with draft probabilities and the target's choices.

    Args:
        record: the run.
        step: verify step number (>= 1).
        tokenizer: decodes token texts; without it the record's ``token_text`` is used.

    Returns:
        StepTree.

    Raises:
        RecordError: unknown step, or the run was recorded without trees.
    """
    rows = record.steps
    pos = next((i for i, s in enumerate(rows) if s.step == int(step)), None)
    if pos is None:
        raise RecordError(f"step {step} is not in this run.")
    s = rows[pos]
    if s.tree is None:
        raise RecordError(f"step {step} has no draft tree (step 0 is the prefill token; record with "
                          "record_trees=True to keep trees).")
    t = s.tree
    toks, pars, lps = t.tokens, t.parents, t.draft_logprobs
    path, bonus = list(t.accepted_nodes), int(t.target_token)
    ended = len(s.token_ids) < len(path) + 1  # EOS / the token budget cut this step's tokens
    if ended:  # show what was emitted, no more: the accepted path is cut like the output
        path = path[:len(s.token_ids)]
    on_path = set(path)
    last = path[-1] if path else -1
    has_children = last in set(pars) and not ended
    txt = lambda tok: _token_text(record, tokenizer, tok)  # noqa: E731
    nodes = []
    for i, (tok, par, lp) in enumerate(zip(toks, pars, lps)):
        base = lps[par] if par >= 0 else 0.0
        depth = 1
        p = par
        while p >= 0:
            depth, p = depth + 1, pars[p]
        div = par == last and i not in on_path and not ended
        nodes.append(TreeNodeView(i, par, depth, int(tok), txt(tok), math.exp(min(0.0, lp - base)), math.exp(lp),
                                  i in on_path, div, bonus if div else None, txt(bonus) if div else None))
    prev = rows[pos - 1] if pos > 0 else None
    root = prev.token_ids[-1] if prev is not None and prev.token_ids else None
    return StepTree(s.step, root, txt(root), nodes, path, bonus, txt(bonus), last if has_children else None,
                    s.accept_length, ended)
