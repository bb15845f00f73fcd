"""Burned-in text awareness: which video tokens cover the on-screen text of a clip, and what share
of them each pruning stage kept.

:func:`text_token_mask` maps a text box and the frames that show it onto the token grid;
:func:`text_tokens_from_truth` does so from a synthetic clip's truth file; :func:`stage_shares`
reads a :class:`~specvlm.types.PruneResult` against that mask.

Source: docs/design.md §4.4-4.5 (pruning stages).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from specvlm.spec.grid import cell_boxes, grid_cells, token_frames


def _index_set(x: Any) -> set[int]:
    """The ints of a tensor, list or None (empty) as a set."""
    return set() if x is None else {int(v) for v in torch.as_tensor(x).reshape(-1).tolist()}


def frame_visibility(timestamps: Sequence[float], start_s: float, end_s: float) -> np.ndarray:
    """bool (T,): sampled frame t shows the text when start_s <= timestamps[t] < end_s."""
    t = np.asarray(timestamps, dtype=np.float64).reshape(-1)
    return (t >= start_s - 1e-9) & (t < end_s - 1e-9)


def text_token_mask(token_grid: Any, frames_per_token: int, frame_size: tuple[int, int], box: Sequence[float],
                    visible: Sequence[bool], min_overlap: float = 0.0) -> torch.Tensor:
    """Which video tokens cover an on-screen text box.

    A token covers its cell's rectangle of the frame (:func:`specvlm.spec.grid.cell_boxes`) on the sampled
    frames it spans (:func:`specvlm.spec.grid.token_frames`). It covers the text when the text is visible on at
    least one of those frames and the rectangle overlaps the box by more than ``min_overlap`` of its area. Tokens without a
    cell (LLaVA-OV's newline, row/col < 0) never do.

    Args:
        token_grid: int (V, 3) (frame group, row, col).
        frames_per_token: sampled frames per token along time.
        frame_size: (H, W) of the frames the box is given in (px).
        box: (x0, y0, x1, y1) px, x1/y1 exclusive.
        visible: bool (T,) per sampled frame: the text is on screen.
        min_overlap: share of a token's rectangle that must lie in the box (0 = any overlap).

    Returns:
        bool (V,).
    """
    grid = torch.as_tensor(token_grid).long().reshape(-1, 3)
    vis = np.asarray(visible, dtype=bool).reshape(-1)
    valid = grid_cells(grid)
    out = torch.zeros(grid.shape[0], dtype=torch.bool)
    if not bool(valid.any()) or not vis.any():
        return out
    first, last = token_frames(grid, frames_per_token)
    boxes = cell_boxes(grid, frame_size)
    x0, y0, x1, y1 = (float(v) for v in box)
    for i in valid.nonzero().flatten().tolist():
        if not vis[int(first[i]):int(last[i]) + 1].any():
            continue
        cx0, cy0, cx1, cy1 = (float(v) for v in boxes[i])
        inter = max(0.0, min(cx1, x1) - max(cx0, x0)) * max(0.0, min(cy1, y1) - max(cy0, y0))
        out[i] = inter > min_overlap * (cx1 - cx0) * (cy1 - cy0) and inter > 0
    return out


def text_tokens_from_truth(truth: Any, timestamps: Sequence[float], token_grid: Any, frames_per_token: int,
                           min_overlap: float = 0.0) -> torch.Tensor:
    """int64 indices of the video tokens covering a synthetic clip's burned-in text.

    Args:
        truth: :class:`specvlm.bench.synth.SceneTruth` (or its ``to_dict()``); no text -> empty.
        timestamps: float (T,) sampled-frame times (s).
        token_grid, frames_per_token: from ModelInputs / PrefillInfo.
        min_overlap: see :func:`text_token_mask`.
    """
    d = truth if isinstance(truth, dict) else truth.to_dict()
    t = d.get("text")
    if not t:
        return torch.zeros(0, dtype=torch.long)
    vis = frame_visibility(timestamps, t["start_frame"] / d["fps"], t["end_frame"] / d["fps"])
    mask = text_token_mask(token_grid, frames_per_token, (d["height"], d["width"]), t["box"], vis, min_overlap)
    return mask.nonzero().flatten()


def stage_shares(prune: Any, text_tokens: Any) -> dict:
    """What share of the text-covering tokens each stage kept.

    Args:
        prune: a PruneResult (``keep``, ``stage1``, ``stage2``, ``forced``,
            ``num_video_tokens``).
        text_tokens: int indices of the tokens covering the text.

    Returns:
        dict: ``text_tokens`` (count), ``kept`` / ``stage1`` / ``stage2`` / ``forced`` shares of
        them (0..1), ``keep_rate`` K/V (what a text-blind uniform choice would keep), and
        ``text_area`` (text tokens / V).
    """
    tt = _index_set(text_tokens)
    v = int(prune.num_video_tokens)
    sets = {name: _index_set(getattr(prune, name, None)) for name in ("keep", "stage1", "stage2", "forced")}
    n = len(tt)
    share = lambda s: (len(tt & s) / n) if n else 0.0  # noqa: E731
    return dict(text_tokens=n, kept=share(sets["keep"]), stage1=share(sets["stage1"]), stage2=share(sets["stage2"]),
                forced=share(sets["forced"]), keep_rate=len(sets["keep"]) / v if v else 0.0,
                text_area=n / v if v else 0.0)
