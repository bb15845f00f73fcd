"""Qwen3-VL (dense and MoE) on tiny real-geometry models: timestamps, DeepStack, losslessness, CLI."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from helpers.cli import cli
from helpers.media import make_clip

from specvlm.config import PRUNE_METHODS, DecodeConfig, SamplingConfig, TreeConfig
from specvlm.engine.stream import generate
from specvlm.models.registry import adapter_for
from specvlm.models.pair import pair_from_models
from specvlm.models.adapter import VideoEncoding
from specvlm.models.families.qwen3_vl import MS_GRID, Qwen3VLAdapter, frame_metadata
from specvlm.testing.tiny_qwen3_vl import tiny_qwen3_vl
from specvlm.types import VideoClip
from specvlm.engine.prepare import prepare

PROMPT = "describe this video in detail"
N = 32
ROOT = Path(__file__).resolve().parents[1]


def _cfg(method="vanilla", shape="dynamic", n=N, **tree):
    return DecodeConfig(method=method, max_new_tokens=n, stop_at_eos=False, tree=TreeConfig(shape=shape, **tree))


@pytest.fixture(scope="module")
def models():
    """Dense and MoE targets and a narrower 1-layer dense draft with a padded vocabulary (same tokenizer)."""
    return {"dense": tiny_qwen3_vl(seed=0), "moe": tiny_qwen3_vl(seed=0, moe=True),
            "draft": tiny_qwen3_vl(seed=1, hidden=32, layers=1, pad_vocab_to=64)}


@pytest.fixture(scope="module")
def pairs(models):
    d, m, s = models["dense"], models["moe"], models["draft"]
    return {("dense", "self"): pair_from_models(*d), ("moe", "self"): pair_from_models(*m),
            ("dense", "std"): pair_from_models(d[0], d[1], s[0], s[1]),
            ("moe", "std"): pair_from_models(m[0], m[1], s[0], s[1])}


@pytest.fixture(scope="module")
def vanilla(pairs):
    clip = make_clip()
    return {fam: generate(pairs[(fam, "self")], prepare(pairs[(fam, "self")], clip, PROMPT),
                          _cfg()) for fam in ("dense", "moe")}


def _hf_generate(pair, clip, inputs, n):
    meta = frame_metadata(clip.timestamps, clip.native_fps, clip.total_frames)
    enc = pair.processor(text=[inputs.prompt_text], videos=[clip.frames], video_metadata=[meta],
                         do_sample_frames=False, cap_pixels_per_frame=False, return_tensors="pt")
    assert torch.equal(enc["input_ids"], inputs.input_ids)
    out = pair.target.generate(**enc, max_new_tokens=n, min_new_tokens=n, do_sample=False)
    return out[0, enc["input_ids"].shape[1]:].tolist()


def test_both_model_types_share_one_adapter(models):
    assert models["dense"][0].config.model_type == "qwen3_vl"
    assert models["moe"][0].config.model_type == "qwen3_vl_moe"
    assert adapter_for(models["dense"][0]) is adapter_for(models["moe"][0])
    assert isinstance(adapter_for(models["moe"][0]), Qwen3VLAdapter)


@pytest.mark.parametrize("fam", ["dense", "moe"])
def test_vanilla_equals_hf_generate_and_is_varied(pairs, vanilla, fam):
    pair = pairs[(fam, "self")]
    clip = make_clip()
    inputs = pair.adapter.prepare(pair.processor, pair.target, clip, PROMPT)
    assert len(set(vanilla[fam].token_ids)) >= 10, vanilla[fam].token_ids
    assert _hf_generate(pair, clip, inputs, N) == vanilla[fam].token_ids


def test_prompt_has_timestamped_runs_and_rope_positions(pairs):
    pair = pairs[("dense", "self")]
    inputs = pair.adapter.prepare(pair.processor, pair.target, make_clip(), PROMPT)
    # 8 frames at 4 fps of 112 px -> 4 groups of (128/16/2)^2 = 16 tokens, each run behind "<t seconds>"
    assert inputs.num_video_tokens == 64
    for t in ("<0.1 seconds>", "<0.6 seconds>", "<1.1 seconds>", "<1.6 seconds>"):
        assert t in pair.processor.tokenizer.decode(inputs.input_ids[0])
    runs = torch.diff(inputs.video_index).gt(1).sum() + 1
    assert int(runs) == 4
    assert inputs.positions.shape == (3, inputs.input_ids.shape[1])
    # all tokens of one group share one time position; text after the video continues from its last position
    vid = inputs.positions[:, inputs.video_index]
    assert vid[0].reshape(4, 16).unique(dim=1).shape[1] == 1
    assert inputs.next_position == int(inputs.positions.max()) + 1


def test_timestamps_are_the_real_frame_times(pairs):
    """Frames 0, 7, 15, 22 of a 30 fps stream: groups at 0.117 s and 0.617 s, not an evenly spaced guess."""
    pair = pairs[("dense", "self")]
    idx = np.array([0, 7, 15, 22])
    clip = VideoClip(make_clip(4, 64).frames, idx / 30.0, native_fps=30.0, total_frames=60, duration=2.0)
    meta = frame_metadata(clip.timestamps, clip.native_fps, clip.total_frames)
    assert meta["fps"] == 30.0 and meta["frames_indices"] == idx.tolist()
    text = pair.processor.tokenizer.decode(pair.adapter.prepare(pair.processor, pair.target, clip, PROMPT)
                                           .input_ids[0])
    assert "<0.1 seconds>" in text and "<0.6 seconds>" in text
    # off the native grid (variable frame rate): a millisecond grid keeps the times exact
    vfr = frame_metadata(np.array([0.0, 0.41, 1.3, 2.52]), 30.0, 80)
    assert vfr["fps"] == MS_GRID and vfr["frames_indices"] == [0, 410, 1300, 2520]
    with pytest.raises(ValueError, match="timestamps"):
        frame_metadata(np.array([1.0, 0.5]))


def test_deepstack_changes_the_output(pairs, vanilla, monkeypatch):
    """Without the DeepStack side features the output differs: vanilla == generate() covers them."""
    pair = pairs[("dense", "self")]
    enc = pair.adapter.video_features(pair.target, pair.adapter.prepare(pair.processor, pair.target, make_clip(),
                                                                        PROMPT))
    assert isinstance(enc, VideoEncoding) and enc.side.shape == (2, 64, 64)
    plain = Qwen3VLAdapter.video_features
    monkeypatch.setattr(Qwen3VLAdapter, "video_features", lambda self, m, i: plain(self, m, i).features)
    assert generate(pair, prepare(pair, make_clip(), PROMPT), _cfg()).token_ids != vanilla["dense"].token_ids


@pytest.mark.parametrize("method", PRUNE_METHODS)
def test_every_pruning_method_is_lossless(pairs, vanilla, method):
    res = generate(pairs[("dense", "self")], prepare(pairs[("dense", "self")], make_clip(), PROMPT), _cfg(method))
    assert res.token_ids == vanilla["dense"].token_ids
    k = 64 if method == "none" else 6
    assert res.num_kept == k
    # the draft keeps every non-video token (timestamps, vision start/end) and K video tokens
    assert res.prefill.num_draft_prompt_tokens == res.prefill.num_prompt_tokens - 64 + k


@pytest.mark.parametrize("pair_key", [("dense", "std"), ("moe", "std"), ("moe", "self")])
@pytest.mark.parametrize("shape", ["dynamic", "static", "chain"])
def test_tree_shapes_self_and_std_sd_are_lossless(pairs, vanilla, pair_key, shape):
    for method in ("specvlm", "none"):
        res = generate(pairs[pair_key], prepare(pairs[pair_key], make_clip(), PROMPT), _cfg(method, shape))
        assert res.token_ids == vanilla[pair_key[0]].token_ids, (method, shape)


@pytest.mark.parametrize("fam", ["dense", "moe"])
def test_self_sd_without_pruning_accepts_every_drafted_token(pairs, vanilla, fam):
    """Draft == target (DeepStack and positions included): every drafted chain token is accepted."""
    res = generate(pairs[(fam, "self")], prepare(pairs[(fam, "self")], make_clip(), PROMPT),
                   _cfg("none", "chain", depth=4))
    assert res.token_ids == vanilla[fam].token_ids
    assert res.accept_lengths[:-1] == [4] * (len(res.accept_lengths) - 1)


def test_std_sd_draft_has_padded_vocab_and_its_own_deepstack(pairs):
    pair = pairs[("moe", "std")]
    assert pair.shared_vocab < pair.draft.get_output_embeddings().weight.shape[0]
    inputs = pair.adapter.prepare(pair.processor, pair.target, make_clip(), PROMPT)
    assert pair.draft_adapter.video_features(pair.draft, inputs).side.shape == (2, 64, 32)


@pytest.mark.parametrize("key", [("dense", "self"), ("moe", "std")])
def test_vision_tower_runs_once_per_model(pairs, key):
    pair, calls = pairs[key], []
    models = {"target": pair.target} if pair.self_sd else {"target": pair.target, "draft": pair.draft}
    hooks = [m.model.visual.register_forward_hook(lambda mod, a, o, name=name: calls.append(name))
             for name, m in models.items()]
    try:
        generate(pair, prepare(pair, make_clip(), PROMPT), _cfg("specvlm", n=8))
    finally:
        for h in hooks:
            h.remove()
    assert calls == (["target"] if pair.self_sd else ["target", "draft"])


def test_subtitles_are_lossless_in_every_mode(pairs):
    from specvlm.text.subtitles import Cue

    cues = [Cue(0.0, 0.6, "a red ball rolls"), Cue(0.6, 2.0, "it stops")]
    clip = make_clip()
    dense = pairs[("dense", "self")]
    inputs = dense.adapter.prepare(dense.processor, dense.target, clip, PROMPT, subtitles=cues)
    assert inputs.num_subtitle_tokens > 5
    van = generate(dense, inputs, _cfg(n=16))
    assert _hf_generate(dense, clip, inputs, 16) == van.token_ids
    for key in (("dense", "self"), ("moe", "std")):
        for mode in ("both", "target", "draft"):
            van = generate(pairs[key], prepare(pairs[key], clip, PROMPT, subtitles=cues, subtitle_mode=mode),
                           _cfg(n=16))
            spec = generate(pairs[key], prepare(pairs[key], clip, PROMPT, subtitles=cues, subtitle_mode=mode),
                            _cfg("specvlm", n=16))
            assert spec.token_ids == van.token_ids, (key, mode)


def _sample(method, shape="dynamic", t=1.0, seed=0):
    return DecodeConfig(method=method, max_new_tokens=20, stop_at_eos=False, tree=TreeConfig(shape=shape),
                        sampling=SamplingConfig(temperature=t, seed=seed))


def test_sampling_reproducible_and_greedy_at_zero_temperature(pairs, vanilla):
    pair, clip = pairs[("moe", "std")], make_clip()
    a = generate(pair, prepare(pair, clip, PROMPT), _sample("specvlm", seed=3)).token_ids
    assert a == generate(pair, prepare(pair, clip, PROMPT), _sample("specvlm", seed=3)).token_ids and len(a) == 20
    assert a != generate(pair, prepare(pair, clip, PROMPT), _sample("specvlm", seed=4)).token_ids
    for shape in ("dynamic", "chain"):
        tiny_t = generate(pair, prepare(pair, clip, PROMPT), _sample("specvlm", shape, t=1e-4)).token_ids
        assert tiny_t == vanilla["moe"].token_ids[:20], shape


def test_sampling_self_sd_without_pruning_accepts_most_samples(pairs):
    """Draft == target distribution: recursive rejection sampling accepts every chain token."""
    res = generate(pairs[("dense", "self")], prepare(pairs[("dense", "self")], make_clip(), PROMPT),
                   DecodeConfig(method="none", max_new_tokens=30, stop_at_eos=False, tree=TreeConfig(shape="chain"),
                                sampling=SamplingConfig(temperature=1.0, seed=0)))
    assert res.tau > 3.5


def _write_mp4(path: Path, frames: np.ndarray, fps: int = 8) -> Path:
    import av

    with av.open(str(path), "w") as out:
        st = out.add_stream("libx264", rate=fps)
        st.width, st.height, st.pix_fmt = frames.shape[2], frames.shape[1], "yuv420p"
        for f in frames:
            out.mux(st.encode(av.VideoFrame.from_ndarray(f, format="rgb24")))
        out.mux(st.encode())
    return path


def test_cli_on_saved_folders_moe_target_dense_draft(models, tmp_path):
    for name in ("moe", "draft"):
        models[name][0].save_pretrained(tmp_path / name)
        models[name][1].save_pretrained(tmp_path / name)
    x = np.linspace(0, 255, 112, dtype=np.uint8)
    frames = np.stack([np.stack([np.roll(x, 9 * t)[None, :].repeat(112, 0), x[:, None].repeat(112, 1),
                                 np.full((112, 112), 25 * t % 255, np.uint8)], -1) for t in range(16)])
    video = _write_mp4(tmp_path / "clip.mp4", frames)
    r = cli("generate", "--model", str(tmp_path / "moe"), "--draft", str(tmp_path / "draft"), "--video", str(video),
            "--prompt", PROMPT, "--num-frames", "8", "--max-new-tokens", "24", "--no-eos", "--json", "--compare")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["identical"] is True
    assert out["token_ids"] == out["vanilla"]["token_ids"] and len(out["token_ids"]) == 24
    assert 0 < out["num_kept"] < out["num_video_tokens"]
