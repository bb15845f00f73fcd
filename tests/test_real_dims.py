"""Real dimensions on the CPU: each GPU preset's architecture at its published widths, 1 decoder layer.

Hidden size, heads, KV heads, MLP width, vocabulary (padded LM heads), M-RoPE sections and
vision geometry are the checkpoints' (:mod:`specvlm.testing.realdims`); only the depth is cut (1
decoder layer, 2 vision blocks) and the weights are random. On a short clip, greedy vanilla
decoding, SpecVLM, SD-Tree and ``model.generate()`` must give the same tokens in float32.

These tests need ~9.5 GB of RAM and ~5 CPU-minutes, so they are marked ``real_dims`` and left out
of the default run: ``python -m pytest -m real_dims tests/test_real_dims.py``.

Source: docs/design.md §4.11 (lossless), §7 (tiny models); SpecVLM (arXiv 2508.16201) Sec. 4.1.
"""
from __future__ import annotations

import gc

import numpy as np
import pytest
import torch

from specvlm.testing import realdims
from specvlm.config import DecodeConfig
from specvlm.engine.stream import generate
from specvlm.models.pair import pair_from_models
from specvlm.types import VideoClip
from specvlm.engine.prepare import prepare

pytestmark = [pytest.mark.real_dims, pytest.mark.timeout(3600)]

PROMPT = "describe this video in detail"
N = 12
PAD_ID = 152_000  # a row of the 7B's padded LM head that the 3B draft (151,936 rows) does not have


def _clip(frames: int, side: int, seed: int = 0) -> VideoClip:
    rng = np.random.RandomState(seed)
    base = rng.randint(0, 255, (frames, 8, 8, 3)).astype(np.uint8)
    img = np.repeat(np.repeat(base, side // 8, axis=1), side // 8, axis=2)
    return VideoClip(np.ascontiguousarray(img), np.arange(frames) / 2.0, native_fps=2.0, total_frames=frames,
                     duration=frames / 2.0)


def _cfg(method: str) -> DecodeConfig:
    return DecodeConfig(method=method, max_new_tokens=N, stop_at_eos=False)


def _hf_generate(pair, clip: VideoClip) -> list[int]:
    inputs = pair.adapter.prepare(pair.processor, pair.target, clip, PROMPT)
    kw = {}
    if pair.family == "qwen2_5_vl":
        kw = dict(do_sample_frames=False, video_metadata=[{"fps": 2.0, "total_num_frames": len(clip.frames),
                                                           "frames_indices": list(range(len(clip.frames)))}])
    enc = pair.processor(text=[inputs.prompt_text], videos=[clip.frames], return_tensors="pt", **kw)
    assert torch.equal(enc["input_ids"], inputs.input_ids)
    with torch.inference_mode():
        out = pair.target.generate(**enc, max_new_tokens=N, min_new_tokens=N, do_sample=False)
    return out[0, enc["input_ids"].shape[1]:].tolist()


def _all_equal(pair, clip: VideoClip, vanilla: list[int]) -> None:
    for method in ("specvlm", "none"):  # SpecVLM and SD-Tree (draft sees every video token)
        res = generate(pair, prepare(pair, clip, PROMPT), _cfg(method))
        assert res.token_ids == vanilla, (method, res.token_ids, vanilla)
        assert res.prefill.num_draft_prompt_tokens <= res.prefill.num_prompt_tokens


def test_llava_onevision_7b_self_sd():
    model, proc = realdims.build(realdims.LLAVA_OV_7B, layers=1, vision_layers=2)
    assert model.get_output_embeddings().weight.shape == (152128, 3584)
    pair = pair_from_models(model, proc)
    clip = _clip(2, 384)
    van = generate(pair, prepare(pair, clip, PROMPT), _cfg("vanilla"))
    assert van.prefill.num_video_tokens == 2 * 196 + 1  # 14x14 pooled tokens per 384 px frame + newline
    assert van.token_ids == _hf_generate(pair, clip)
    _all_equal(pair, clip, van.token_ids)
    del pair, model
    gc.collect()


@pytest.fixture(scope="module")
def qwen7():
    model, proc = realdims.build(realdims.QWEN2_5_VL_7B, layers=1, vision_layers=2)
    yield model, proc
    del model
    gc.collect()


@pytest.fixture(scope="module")
def qwen_clip():
    return _clip(8, 112)  # 4 groups x 4x4 merged tokens = 64 video tokens


def test_qwen2_5_vl_7b_self_sd(qwen7, qwen_clip):
    model, proc = qwen7
    t = model.config.text_config
    assert (t.hidden_size, t.num_attention_heads, t.num_key_value_heads, t.vocab_size) == (3584, 28, 4, 152064)
    assert t.rope_parameters["mrope_section"] == [16, 24, 24]
    pair = pair_from_models(model, proc)
    van = generate(pair, prepare(pair, qwen_clip, PROMPT), _cfg("vanilla"))
    assert van.prefill.num_video_tokens == 64
    assert van.token_ids == _hf_generate(pair, qwen_clip)
    _all_equal(pair, qwen_clip, van.token_ids)


def test_qwen2_5_vl_7b_with_3b_draft_and_padded_vocabulary(qwen7, qwen_clip):
    """The target's LM head has 152,064 rows, the 3B draft's 151,936; the target is made to emit a
    padded id (row PAD_ID copies a token it picks, slightly larger) so the draft meets an id it cannot embed."""
    target, tproc = qwen7
    draft, dproc = realdims.build(realdims.QWEN2_5_VL_3B, layers=1, vision_layers=2, seed=1)
    assert draft.get_output_embeddings().weight.shape[0] == 151936
    pair = pair_from_models(target, tproc, draft, dproc)
    assert pair.shared_vocab == 151936
    head = target.get_output_embeddings().weight
    saved = head[PAD_ID].clone()
    try:
        first = generate(pair, prepare(pair, qwen_clip, PROMPT), _cfg("vanilla")).token_ids
        with torch.no_grad():
            head[PAD_ID] = head[first[N // 2]] * 1.01
        van = generate(pair, prepare(pair, qwen_clip, PROMPT), _cfg("vanilla"))
        assert PAD_ID in van.token_ids
        assert van.token_ids == _hf_generate(pair, qwen_clip)
        _all_equal(pair, qwen_clip, van.token_ids)
    finally:
        with torch.no_grad():
            head[PAD_ID] = saved
