"""Carrying a kept set between token grids of different geometry (specvlm.spec.grid)."""
from __future__ import annotations

import pytest
import torch

from specvlm.models.families.smolvlm import frame_grid
from specvlm.spec.grid import cell_boxes, map_keep, token_frames


def _idx(grid, cells):
    """Indices of (frame, row, col) cells in a grid."""
    lookup = {tuple(g): i for i, g in enumerate(grid.tolist())}
    return torch.tensor(sorted(lookup[c] for c in cells))


def test_same_grid_is_the_identity():
    g = frame_grid(3, 8)
    keep = torch.tensor([0, 9, 70, 191])
    assert map_keep(keep, g, g).tolist() == keep.tolist()


def test_coarser_grid_keeps_the_cell_under_each_kept_centre():
    src, dst = frame_grid(2, 9), frame_grid(2, 8)
    # centre of (0, 0, 0) at 0.5/9 -> draft cell 0; centre of (1, 8, 8) at 8.5/9 -> draft cell 7;
    # centre of (0, 4, 4) at 4.5/9 = 0.5 -> draft cell 4
    keep = _idx(src, [(0, 0, 0), (0, 4, 4), (1, 8, 8)])
    assert map_keep(keep, src, dst).tolist() == _idx(dst, [(0, 0, 0), (0, 4, 4), (1, 7, 7)]).tolist()
    # two neighbouring target cells whose centres fall in one draft cell give one draft token
    keep = _idx(src, [(0, 0, 0), (0, 0, 1)])
    assert map_keep(keep, src, dst).tolist() == _idx(dst, [(0, 0, 0), (0, 0, 1)]).tolist()
    keep = _idx(src, [(0, 3, 3), (0, 3, 4)])        # centres 3.5/9 and 4.5/9 along x -> draft cols 3 and 4
    assert map_keep(keep, src, dst).tolist() == _idx(dst, [(0, 3, 3), (0, 3, 4)]).tolist()


def test_finer_grid_keeps_cells_mostly_inside_the_kept_region():
    src, dst = frame_grid(1, 8), frame_grid(1, 9)
    keep = _idx(src, [(0, r, c) for r in range(4) for c in range(4)])          # the top-left quarter [0, .5)^2
    got = {tuple(x) for x in dst[map_keep(keep, src, dst)].tolist()}
    # draft cells 0-3 lie inside [0, 4/9); cell 4 spans [4/9, 5/9), half of it inside [0, .5): the edge cells
    # (half covered) are kept, the corner (4, 4) (a quarter covered, no kept centre in it) is not
    assert got == {(0, r, c) for r in range(5) for c in range(5)} - {(0, 4, 4)}


def test_all_whole_frames_and_budget():
    src, dst = frame_grid(4, 9), frame_grid(4, 8)
    assert map_keep(torch.arange(324), src, dst).tolist() == list(range(256))
    frame2 = torch.arange(2 * 81, 3 * 81)
    assert map_keep(frame2, src, dst).tolist() == list(range(2 * 64, 3 * 64))
    g = torch.Generator().manual_seed(0)
    for _ in range(20):
        keep = torch.randperm(324, generator=g)[:32].sort().values
        got = map_keep(keep, src, dst)
        assert 1 <= got.numel() <= 32 and torch.equal(got, got.unique())
        assert set(dst[got][:, 0].tolist()) == set(src[keep][:, 0].tolist())      # same frames, no others


def test_newline_tokens_follow_their_frame_and_frame_counts_must_match():
    dst = torch.cat([frame_grid(2, 4), torch.tensor([[1, -1, -1]])])
    src = frame_grid(2, 3)
    got = map_keep(torch.tensor([9]), src, dst).tolist()            # (1, 0, 0) of the second frame
    assert got == [16, 32]
    with pytest.raises(ValueError, match="frames"):
        map_keep(torch.tensor([0]), frame_grid(3, 3), frame_grid(2, 4))


def test_token_frames_and_cell_boxes_place_tokens_in_the_video():
    from specvlm.spec.grid import cell_boxes, token_frames

    grid = torch.tensor([[0, 0, 0], [0, 1, 2], [3, 0, 1], [2, -1, -1]])   # a 2 x 3 grid, one newline token
    first, last = token_frames(grid, 2)
    assert first.tolist() == [0, 0, 6, 4] and last.tolist() == [1, 1, 7, 5]
    assert token_frames(grid, 1)[1].tolist() == [0, 0, 3, 2]
    boxes = cell_boxes(grid, (60, 90))                     # H 60 px, W 90 px: cells of 30 x 30 px
    assert boxes[:3].tolist() == [[0, 0, 30, 30], [60, 30, 90, 60], [30, 0, 60, 30]]
    assert torch.isnan(boxes[3]).all()
