"""Burned-in text awareness: which video tokens cover on-screen text, what each stage kept,
and forcing the draft to keep them (exactly K kept, lossless)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from specvlm.bench import synth
from specvlm.config import PRUNE_METHODS, DecodeConfig
from specvlm.engine.stream import generate
from specvlm.analysis.text_aware import frame_visibility, stage_shares, text_token_mask, text_tokens_from_truth
from specvlm.models.pair import pair_from_models
from specvlm.spec.pruning import kept_count, select_video_tokens
from specvlm.types import VideoClip
from specvlm.engine.prepare import prepare

GRID = torch.tensor([[g, r, c] for g in range(2) for r in range(4) for c in range(4)])  # 2 groups x 4 x 4


def test_text_token_mask_on_a_known_grid():
    vis = [True, False, False, False]  # text on frame 0 only -> group 0 (frames 0-1)
    m = text_token_mask(GRID, 2, (32, 32), (8, 0, 24, 8), vis)  # 8 px cells: row 0, cols 1-2
    assert m.nonzero().flatten().tolist() == [1, 2]
    m = text_token_mask(GRID, 2, (32, 32), (8, 0, 24, 8), [False, False, False, True])
    assert m.nonzero().flatten().tolist() == [17, 18]  # group 1
    m = text_token_mask(GRID, 1, (32, 32), (15, 0, 24, 8), [False, True])  # 1 frame per token: group 1
    assert m.nonzero().flatten().tolist() == [17, 18]
    m = text_token_mask(GRID, 2, (32, 32), (15, 0, 24, 8), vis, min_overlap=0.5)  # col 1 only 1/8 covered
    assert m.nonzero().flatten().tolist() == [2]
    # a frame size differing from the grid's pixels: coordinates are scaled (64 px frame, 16 px cells)
    m = text_token_mask(GRID, 2, (64, 64), (0, 48, 16, 64), vis)
    assert m.nonzero().flatten().tolist() == [12]
    with_newline = torch.cat([GRID, torch.tensor([[1, -1, -1]])])
    assert not text_token_mask(with_newline, 2, (32, 32), (0, 0, 32, 32), [True] * 4)[-1]
    assert not text_token_mask(GRID, 2, (32, 32), (0, 0, 32, 32), [False] * 4).any()


def test_frame_visibility():
    assert frame_visibility([0.0, 0.5, 1.0, 1.5], 0.5, 1.5).tolist() == [False, True, True, False]


@pytest.fixture(scope="module")
def text_clip():
    spec = synth.SceneSpec(num_frames=16, height=112, width=112, fps=8.0, num_objects=1, text_prob=1.0)
    frames, truth = synth.generate(123, spec)
    ts = np.arange(16) / 8.0
    clip = VideoClip(frames, ts, native_fps=8.0, total_frames=16, duration=2.0)
    return clip, truth


def test_text_tokens_from_truth_match_the_pixels(qwen_tiny, text_clip):
    clip, truth = text_clip
    model, proc = qwen_tiny
    pair = pair_from_models(model, proc)
    inp = pair.adapter.prepare(pair.processor, pair.target, clip, "what text appears?")
    idx = text_tokens_from_truth(truth, clip.timestamps, inp.token_grid, inp.frames_per_token)
    assert idx.numel() > 0
    x0, y0, x1, y1 = truth.text.box
    rows, cols = int(inp.token_grid[:, 1].max()) + 1, int(inp.token_grid[:, 2].max()) + 1
    cell = 112 // rows
    for i in range(inp.num_video_tokens):
        g, r, c = inp.token_grid[i].tolist()
        on = any(truth.text.start_frame <= f < truth.text.end_frame for f in (2 * g, 2 * g + 1))
        hit = on and c * cell < x1 and (c + 1) * cell > x0 and r * cell < y1 and (r + 1) * cell > y0
        assert bool(hit) == (i in set(idx.tolist())), (i, g, r, c)
    assert text_tokens_from_truth(truth.to_dict() | {"text": None}, clip.timestamps, inp.token_grid, 2).numel() == 0


@pytest.mark.parametrize("method", PRUNE_METHODS)
def test_force_keep_keeps_exactly_k(method):
    v = 64
    scores = torch.rand(v, generator=torch.Generator().manual_seed(0))
    grid = GRID.repeat(2, 1)
    grid[32:, 0] += 2
    forced = torch.tensor([5, 40, 41, 63, 5])
    pr = select_video_tokens(scores, method, 0.8, 0.4, grid=grid, force_keep=forced)
    k = v if method == "none" else kept_count(v, 0.8)
    keep = pr.keep.tolist()
    assert len(keep) == k == len(set(keep)) and keep == sorted(keep)
    assert set([5, 40, 41, 63]) <= set(keep)
    assert pr.forced.tolist() == [5, 40, 41, 63]
    assert not (set(pr.stage1.tolist()) | set(pr.stage2.tolist())) & {5, 40, 41, 63}
    if method == "specvlm":
        assert sorted(pr.stage1.tolist() + pr.stage2.tolist() + [5, 40, 41, 63]) == keep


def test_force_keep_budget_sharing():
    s = torch.tensor([10.0, 1, 1, 1, 1, 1, 1, 1, 1, 1] * 2)  # V = 20, total 38; K = 4 at r = 0.8
    pr = select_video_tokens(s, "specvlm", 0.8, 0.4, force_keep=torch.tensor([0, 10]))
    # forced mass 20 >= λ·total = 15.2: Stage I adds nothing, Stage II spreads the other 2
    assert pr.stage1.numel() == 0 and pr.stage2.numel() == 2 and pr.num_kept == 4
    pr = select_video_tokens(s, "specvlm", 0.8, 0.4, force_keep=torch.tensor([1]))
    assert pr.stage1.tolist() == [0, 10] and pr.stage2.numel() == 1  # 1 + 10 + 10 >= 15.2
    many = torch.arange(20)
    pr = select_video_tokens(s, "specvlm", 0.8, 0.4, force_keep=many)  # F > K: the best-scoring K forced
    assert pr.forced.tolist() == [0, 1, 2, 10] and pr.keep.tolist() == [0, 1, 2, 10]
    pr = select_video_tokens(None, "uniform", 0.8, 0.4, num_video_tokens=20, force_keep=many)
    assert pr.keep.numel() == 4  # no scores: evenly spaced among the forced
    with pytest.raises(ValueError, match="force_keep"):
        select_video_tokens(s, "specvlm", 0.8, 0.4, force_keep=torch.tensor([20]))
    same = select_video_tokens(s, "specvlm", 0.8, 0.4)
    assert same.forced is None and torch.equal(same.keep, select_video_tokens(
        s, "specvlm", 0.8, 0.4, force_keep=torch.zeros(0, dtype=torch.long)).keep)


def test_forcing_text_tokens_is_lossless_and_reported(qwen_tiny, text_clip):
    clip, truth = text_clip
    pair = pair_from_models(*qwen_tiny)
    prompt = "what text appears?"
    cfg = DecodeConfig(method="specvlm", max_new_tokens=20, stop_at_eos=False)
    van = generate(pair, prepare(pair, clip, prompt),
                   DecodeConfig(method="vanilla", max_new_tokens=20, stop_at_eos=False))
    inp = pair.adapter.prepare(pair.processor, pair.target, clip, prompt)
    text = text_tokens_from_truth(truth, clip.timestamps, inp.token_grid, inp.frames_per_token)
    plain = generate(pair, inp, cfg)
    base = stage_shares(plain.prefill.prune, text)
    assert base["text_tokens"] == text.numel() and 0 <= base["kept"] <= 1
    assert base["kept"] == pytest.approx(base["stage1"] + base["stage2"])
    assert base["keep_rate"] == pytest.approx(plain.num_kept / plain.num_video_tokens)
    inp.force_keep = text
    forced = generate(pair, inp, cfg)
    assert forced.token_ids == plain.token_ids == van.token_ids
    assert forced.num_kept == plain.num_kept
    sh = stage_shares(forced.prefill.prune, text)
    k = plain.num_kept
    assert sh["kept"] == pytest.approx(min(1.0, k / text.numel()))
    assert sh["forced"] == pytest.approx(sh["kept"])


def test_stream_force_keep_argument_matches_prepared_inputs(qwen_tiny, text_clip):
    """``generate(..., force_keep=...)`` (API users) keeps the same set as inputs carrying ``force_keep``."""
    clip, truth = text_clip
    pair = pair_from_models(*qwen_tiny)
    prompt = "what text appears?"
    cfg = DecodeConfig(method="specvlm", max_new_tokens=8, stop_at_eos=False)
    inp = pair.adapter.prepare(pair.processor, pair.target, clip, prompt)
    text = text_tokens_from_truth(truth, clip.timestamps, inp.token_grid, inp.frames_per_token)
    via_arg = generate(pair, prepare(pair, clip, prompt, force_keep=text.tolist()), cfg)
    inp.force_keep = text
    via_inputs = generate(pair, inp, cfg)
    assert torch.equal(via_arg.prefill.prune.forced, via_inputs.prefill.prune.forced)
    assert torch.equal(via_arg.prefill.prune.keep, via_inputs.prefill.prune.keep)
    assert via_arg.token_ids == via_inputs.token_ids
