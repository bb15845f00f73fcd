"""Tests for specvlm.spec.pruning (docs/design.md §4.3-4.6)."""
from __future__ import annotations

import pytest
import torch

from specvlm.config import PRUNE_METHODS, ConfigError, PruneConfig
from specvlm.spec.pruning import kept_count, prune, select_video_tokens, stage1_top_p, stage2_uniform


def make_grid(frames: int, rows: int, cols: int) -> torch.Tensor:
    """(V, 3) int64 (frame, row, col), frame-major then raster."""
    f, r, c = torch.meshgrid(torch.arange(frames), torch.arange(rows), torch.arange(cols), indexing="ij")
    return torch.stack([f.reshape(-1), r.reshape(-1), c.reshape(-1)], dim=1)


def run(method: str, v: int, r: float, lam: float = 0.4, seed: int = 0):
    scores = torch.rand(v, generator=torch.Generator().manual_seed(v))
    return select_video_tokens(scores, method, r, lam, grid=make_grid(v, 1, 1) if v else None, seed=seed)


def assert_sorted_unique(t: torch.Tensor, v: int) -> None:
    assert t.dtype == torch.int64 and t.device.type == "cpu" and t.dim() == 1
    if t.numel():
        assert torch.equal(t, torch.unique(t)) and int(t.min()) >= 0 and int(t.max()) < v


# ---- budget -------------------------------------------------------------------------------

@pytest.mark.parametrize("v,r,k", [(100, 0.9, 10), (10, 0.9, 1), (5, 0.9, 1), (1, 0.9, 1), (7, 0.0, 7),
                                   (1000, 0.7, 300), (3, 0.5, 1), (24, 2 / 3, 8)])
def test_kept_count(v, r, k):
    assert kept_count(v, r) == k


def test_kept_count_errors():
    with pytest.raises(ValueError):
        kept_count(0, 0.5)
    with pytest.raises(ConfigError):
        kept_count(10, 1.0)
    with pytest.raises(ConfigError):
        kept_count(10, -0.1)


# ---- Stage I ------------------------------------------------------------------------------

@pytest.mark.parametrize("lam,k1", [(0.0, 0), (0.4, 1), (0.5, 1), (0.8, 2), (0.81, 3), (0.9, 3), (1.0, 4)])
def test_stage1_lambda_rule(lam, k1):
    out = stage1_top_p(torch.tensor([0.5, 0.3, 0.1, 0.1]), budget=4, top_p=lam)
    assert out.numel() == k1
    assert out.tolist() == [0, 1, 2, 3][:k1]


def test_stage1_sorted_ties_and_clamp():
    scores = torch.tensor([0.1, 0.3, 0.1, 0.5])
    assert stage1_top_p(scores, 4, 0.8).tolist() == [1, 3]
    assert stage1_top_p(scores, 4, 0.9).tolist() == [0, 1, 3]  # tie 0.1/0.1 -> lower index
    assert stage1_top_p(scores, 1, 1.0).tolist() == [3]  # clamped to budget
    assert stage1_top_p(torch.zeros(5), 3, 0.4).numel() == 0  # no signal
    assert stage1_top_p(torch.tensor([0.0, 1.0, 0.0]), 3, 1.0).tolist() == [1]


def test_stage1_errors():
    with pytest.raises(ValueError):
        stage1_top_p(torch.tensor([0.5, -0.1]), 1, 0.4)
    with pytest.raises(ConfigError):
        stage1_top_p(torch.tensor([0.5, 0.1]), 1, 1.5)


# ---- Stage II -----------------------------------------------------------------------------

def test_stage2_hand_computed():
    ex = torch.tensor([2, 5])  # leftovers [0,1,3,4,6,7,8,9], M = 8
    assert stage2_uniform(10, ex, 3).tolist() == [0, 4, 9]  # positions 0, 3, 7
    assert stage2_uniform(10, ex, 4).tolist() == [0, 3, 6, 9]  # positions 0, 2, 4, 7
    assert stage2_uniform(10, ex, 1).tolist() == [0]  # count 1 -> first leftover
    assert stage2_uniform(10, ex, 0).numel() == 0
    assert stage2_uniform(10, ex, 8).tolist() == [0, 1, 3, 4, 6, 7, 8, 9]
    assert stage2_uniform(10, None, 4).tolist() == [0, 3, 6, 9]


def test_stage2_errors():
    with pytest.raises(ValueError):
        stage2_uniform(4, torch.tensor([0, 1]), 3)
    with pytest.raises(ValueError):
        stage2_uniform(4, torch.tensor([4]), 1)


# ---- SpecVLM end to end -------------------------------------------------------------------

def test_specvlm_hand_computed():
    scores = torch.tensor([0.0, 0.0, 0.9, 0.0, 0.0, 0.05, 0.0, 0.0, 0.0, 0.05])
    res = select_video_tokens(scores, "specvlm", 0.6, 0.4)  # K = 4, k1 = 1
    assert res.stage1.tolist() == [2]
    assert res.stage2.tolist() == [0, 5, 9]  # leftovers M=9, positions 0, 4, 8
    assert res.keep.tolist() == [0, 2, 5, 9]
    assert res.num_kept == 4 and res.num_video_tokens == 10 and res.method == "specvlm"
    assert res.scores.dtype == torch.float32


def test_specvlm_lambda_extremes():
    scores = torch.arange(1.0, 21.0)
    res0 = select_video_tokens(scores, "specvlm", 0.75, 0.0)  # K = 5, all from Stage II
    assert res0.stage1.numel() == 0 and res0.stage2.tolist() == [0, 4, 9, 14, 19]
    res1 = select_video_tokens(scores, "specvlm", 0.75, 1.0)  # all from Stage I (clamped)
    assert res1.stage2.numel() == 0 and res1.stage1.tolist() == [15, 16, 17, 18, 19]
    resr0 = select_video_tokens(scores, "specvlm", 0.0, 0.4)  # r = 0 keeps all
    assert resr0.keep.tolist() == list(range(20))


# ---- every method -------------------------------------------------------------------------

@pytest.mark.parametrize("method", PRUNE_METHODS)
@pytest.mark.parametrize("v,r", [(1, 0.9), (2, 0.5), (5, 0.9), (17, 0.3), (100, 0.9), (64, 0.0), (333, 0.77)])
def test_exactly_k_sorted_unique(method, v, r):
    res = run(method, v, r)
    k = v if method == "none" else kept_count(v, r)
    assert res.num_kept == k
    for t in (res.keep, res.stage1, res.stage2):
        assert_sorted_unique(t, v)
    union = torch.sort(torch.cat([res.stage1, res.stage2])).values
    if method == "specvlm":
        assert torch.equal(union, res.keep)
    elif method == "attention":
        assert torch.equal(res.stage1, res.keep) and res.stage2.numel() == 0
    else:
        assert union.numel() == 0
    assert torch.equal(run(method, v, r).keep, res.keep)  # deterministic


def test_none_ignores_drop_rate():
    assert select_video_tokens(None, "none", 0.9, 0.4, num_video_tokens=7).keep.tolist() == list(range(7))


def test_random_seeded():
    a = select_video_tokens(None, "random", 0.9, 0.4, seed=1, num_video_tokens=200).keep
    b = select_video_tokens(None, "random", 0.9, 0.4, seed=1, num_video_tokens=200).keep
    c = select_video_tokens(None, "random", 0.9, 0.4, seed=2, num_video_tokens=200).keep
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_uniform_and_attention():
    assert select_video_tokens(None, "uniform", 0.6, 0.4, num_video_tokens=10).keep.tolist() == [0, 3, 6, 9]
    scores = torch.tensor([0.2, 0.9, 0.2, 0.1, 0.8])
    assert select_video_tokens(scores, "attention", 0.4, 0.4).keep.tolist() == [0, 1, 4]  # K=3, tie -> lower


@pytest.mark.parametrize("method,expected", [("window-front", [0, 1, 2]), ("window-middle", [3, 4, 5]),
                                             ("window-end", [7, 8, 9])])
def test_windows(method, expected):
    assert select_video_tokens(None, method, 0.7, 0.4, num_video_tokens=10).keep.tolist() == expected


# ---- frame --------------------------------------------------------------------------------

@pytest.mark.parametrize("k,expected", [
    (12, list(range(0, 6)) + list(range(18, 24))),  # 2 frames at positions 0, 3
    (6, list(range(0, 6))),  # 1 frame
    (24, list(range(24))),
    (15, list(range(0, 12)) + [18, 19, 20]),  # round(2.5) -> 3 frames (0, 1, 3); trim the last
    (8, list(range(0, 6)) + [6, 23]),  # round(1.33) -> 1 frame; fill uniformly from the rest
])
def test_frame_keeps_whole_frames(k, expected):
    grid = make_grid(4, 2, 3)  # V = 24, 6 tokens per frame
    r = 1 - k / 24
    assert kept_count(24, r) == k
    res = select_video_tokens(None, "frame", r, 0.4, grid=grid)
    assert res.keep.tolist() == expected


def test_prune_config():
    scores = torch.tensor([0.0, 0.0, 0.9, 0.0, 0.0, 0.05, 0.0, 0.0, 0.0, 0.05])
    res = prune(scores, PruneConfig(method="specvlm", drop_rate=0.6, top_p=0.4))
    assert res.keep.tolist() == [0, 2, 5, 9]
    res = prune(None, PruneConfig(method="random", drop_rate=0.5, seed=3), num_video_tokens=8)
    assert res.num_kept == 4


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_scores_give_cpu_results():
    res = select_video_tokens(torch.rand(50, device="cuda"), "specvlm", 0.9, 0.4)
    assert res.keep.device.type == "cpu" and res.num_kept == 5


# ---- errors -------------------------------------------------------------------------------

def test_errors():
    s = torch.rand(10)
    with pytest.raises(ConfigError):
        select_video_tokens(s, "bogus", 0.9, 0.4)
    with pytest.raises(ValueError, match="needs attention scores"):
        select_video_tokens(None, "specvlm", 0.9, 0.4, num_video_tokens=10)
    with pytest.raises(ValueError, match="needs attention scores"):
        select_video_tokens(None, "attention", 0.9, 0.4, num_video_tokens=10)
    with pytest.raises(ValueError, match="grid"):
        select_video_tokens(s, "frame", 0.9, 0.4)
    with pytest.raises(ValueError):
        select_video_tokens(torch.rand(2, 5), "specvlm", 0.9, 0.4)
    with pytest.raises(ValueError):
        select_video_tokens(torch.tensor([0.1, float("nan")]), "specvlm", 0.9, 0.4)
    with pytest.raises(ValueError):
        select_video_tokens(torch.empty(0), "uniform", 0.9, 0.4)
    with pytest.raises(ValueError):
        select_video_tokens(None, "uniform", 0.9, 0.4)
    with pytest.raises(ValueError, match="inconsistent"):
        select_video_tokens(s, "frame", 0.9, 0.4, grid=make_grid(2, 2, 2))
    with pytest.raises(ValueError):
        select_video_tokens(None, "frame", 0.9, 0.4, grid=torch.zeros(4, 3))
    with pytest.raises(ConfigError):
        select_video_tokens(s, "uniform", 1.0, 0.4)
    with pytest.raises(ConfigError):
        select_video_tokens(s, "specvlm", 0.9, -0.1)
