"""Token-grid geometry: a grid's shape per frame, where each token lies in the video, and a kept set carried
from one grid to another.

A token grid is int64 (V, 3): (frame, row, col) per video token, row = col = -1 for a token without
a cell (a per-frame newline token). :func:`grid_cells` and :func:`grid_shape` are the one reading of
it for the engine, the analysis and the app; :func:`token_frames` and :func:`cell_boxes` the one mapping
from a token to the sampled frames it spans and the rectangle of the frame it covers (every supported
processor resizes the whole frame to its grid, no crop, so a cell is a fixed share of the frame).

:func:`map_keep` carries a kept set of video tokens from one token grid to another by spatial overlap.

A Std-SD draft whose vision tower cuts frames differently from the target's (SmolVLM2-2.2B:
9 x 9 tokens per frame; SmolVLM2-256M/500M: 8 x 8) has its own prompt, so the tokens the
target's scores kept (SpecVLM Sec. 3.2) must be named in the draft's grid. Every token covers
a cell of its frame in normalised coordinates ([r / rows, (r + 1) / rows) x [c / cols,
(c + 1) / cols)); within the same frame a draft token is kept when

* its cell contains the centre of a kept target token's cell (every kept target token is
  represented, and a coarser draft grid keeps at most as many tokens as the target), or
* kept target cells cover at least half of its area (a finer draft grid keeps every cell that
  lies mostly inside the kept region).

Frames map one to one (both grids must count the same frames). A token with row = col = -1
(a per-frame newline token) is kept when anything in its frame is kept. Pure functions.

Source: an extension of SpecVLM (arXiv 2508.16201) Sec. 3, which assumes one tokenization
for target and draft; docs/design.md §4.7.
"""
from __future__ import annotations

from typing import Any

import torch


def grid_cells(token_grid: Any) -> torch.Tensor:
    """bool (V,): the tokens that cover a cell of their frame (row and col >= 0; not a newline token).

    Args:
        token_grid: int (V, 3) (frame, row, col), a tensor or an array.
    """
    grid = torch.as_tensor(token_grid).reshape(-1, 3)
    return (grid[:, 1] >= 0) & (grid[:, 2] >= 0)


def grid_shape(token_grid: Any) -> tuple[int, int]:
    """(rows, cols) of one frame's cells in ``token_grid`` (int (V, 3), a tensor or an array); (1, 1) when
    no token has a cell."""
    grid = torch.as_tensor(token_grid).reshape(-1, 3)
    cells = grid[grid_cells(grid)]
    if cells.numel() == 0:
        return 1, 1
    return int(cells[:, 1].max()) + 1, int(cells[:, 2].max()) + 1


def token_frames(token_grid: Any, frames_per_token: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The sampled frames each token spans: token (g, r, c) covers frames ``g·fpt .. (g + 1)·fpt − 1``.

    Args:
        token_grid: int (V, 3) (frame group, row, col), a tensor or an array.
        frames_per_token: sampled frames per token along time (fpt; 2 for Qwen2.5-VL, values < 1 count as 1).

    Returns:
        (first, last): int64 (V,) each, inclusive frame indices.
    """
    fpt = max(1, int(frames_per_token))
    group = torch.as_tensor(token_grid).long().reshape(-1, 3)[:, 0]
    return group * fpt, group * fpt + fpt - 1


def cell_boxes(token_grid: Any, frame_size: tuple[float, float]) -> torch.Tensor:
    """The frame rectangle each token covers: cell (r, c) of a rows x cols grid (:func:`grid_shape`) is
    ``[c·W/cols, (c+1)·W/cols) x [r·H/rows, (r+1)·H/rows)``.

    Args:
        token_grid: int (V, 3) (frame group, row, col), a tensor or an array.
        frame_size: (H, W) of the frames the rectangles are given in (px).

    Returns:
        float64 (V, 4) ``(x0, y0, x1, y1)`` px (x1, y1 exclusive); NaN for tokens without a cell.
    """
    grid = torch.as_tensor(token_grid).long().reshape(-1, 3)
    rows, cols = grid_shape(grid)
    h, w = float(frame_size[0]) / rows, float(frame_size[1]) / cols
    r, c = grid[:, 1].double(), grid[:, 2].double()
    boxes = torch.stack([c * w, r * h, (c + 1) * w, (r + 1) * h], dim=-1)
    boxes[~grid_cells(grid)] = float("nan")
    return boxes


def _overlap(n_dst: int, n_src: int) -> torch.Tensor:
    """float64 (n_dst, n_src): length of the overlap of 1-D cells of two partitions of [0, 1)."""
    d = torch.arange(n_dst + 1, dtype=torch.float64) / n_dst
    s = torch.arange(n_src + 1, dtype=torch.float64) / n_src
    lo = torch.maximum(d[:-1, None], s[None, :-1])
    hi = torch.minimum(d[1:, None], s[None, 1:])
    return (hi - lo).clamp(min=0)


def map_keep(keep: torch.Tensor, src_grid: torch.Tensor, dst_grid: torch.Tensor) -> torch.Tensor:
    """Indices into ``dst_grid`` of the tokens that spatially cover the kept ``src_grid`` tokens.

    Args:
        keep: int64 (K,) indices into the V_src tokens of ``src_grid``.
        src_grid: int64 (V_src, 3) (frame, row, col) of the target's video tokens.
        dst_grid: int64 (V_dst, 3) (frame, row, col) of the draft's video tokens.

    Returns:
        int64 (K_dst,) sorted unique indices into ``dst_grid`` (K_dst >= 1 when K >= 1).

    Raises:
        ValueError: the grids count different frames.

    Source: module docstring (the overlap rule).
    """
    n_frames = int(src_grid[:, 0].max()) + 1
    if int(dst_grid[:, 0].max()) + 1 != n_frames:
        raise ValueError(f"the draft's video has {int(dst_grid[:, 0].max()) + 1} frames and the target's "
                         f"{n_frames}: both models must see the same frames.")
    (hs, ws), (hd, wd) = grid_shape(src_grid), grid_shape(dst_grid)
    kept = src_grid[keep.long()]
    cells = kept[kept[:, 1] >= 0]
    mask = torch.zeros(n_frames, hs, ws, dtype=torch.float64)
    mask[cells[:, 0], cells[:, 1], cells[:, 2]] = 1.0
    cover = torch.einsum("ar,trc,bc->tab", _overlap(hd, hs), mask, _overlap(wd, ws)) * (hd * wd)
    out = cover >= 0.5 - 1e-9
    rows = ((cells[:, 1].double() + 0.5) * hd / hs).floor().long()
    cols = ((cells[:, 2].double() + 0.5) * wd / ws).floor().long()
    out[cells[:, 0], rows, cols] = True
    frame_any = torch.zeros(n_frames, dtype=torch.bool)
    frame_any[kept[:, 0]] = True
    f, r, c = dst_grid.unbind(-1)
    is_cell = r >= 0
    sel = torch.where(is_cell, out[f, r.clamp(min=0), c.clamp(min=0)], frame_any[f])
    return sel.nonzero().flatten()
