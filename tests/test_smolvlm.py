"""SmolVLM2: prompt layout, token grid, losslessness against vanilla and ``generate()``, Std-SD, sampling, CLI.

The tiny models have the real vision geometry (512 px frames, patch 16, pixel shuffle 4 -> 64
tokens per frame; 384 px, patch 14, shuffle 3 -> 81 for the 2.2B layout) and the family's special
tokens and chat template; widths and depths are tiny.
"""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from helpers.media import make_clip

from specvlm.config import PRUNE_METHODS, DecodeConfig, SamplingConfig, TreeConfig
from specvlm.engine.stream import generate
from specvlm.models.pair import pair_from_models
from specvlm.models.families.smolvlm import clip_metadata
from specvlm.types import VideoClip
from specvlm.engine.prepare import prepare

PROMPT = "describe this video in detail"
N = 32


def _cfg(method="vanilla", shape="dynamic", n=N, **tree):
    return DecodeConfig(method=method, max_new_tokens=n, stop_at_eos=False, tree=TreeConfig(shape=shape, **tree))


@pytest.fixture(scope="module")
def smol():
    from specvlm.testing.tiny import tiny_smolvlm
    return tiny_smolvlm(seed=0)


@pytest.fixture(scope="module")
def smol_draft():
    """A 1-layer draft with the same tokenizer and geometry and a differently padded vocabulary."""
    from specvlm.testing.tiny import tiny_smolvlm
    return tiny_smolvlm(seed=1, hidden=32, layers=1, pad_vocab_to=64)


@pytest.fixture(scope="module")
def pairs(smol, smol_draft):
    return {"self": pair_from_models(*smol), "std": pair_from_models(smol[0], smol[1], smol_draft[0], smol_draft[1])}


@pytest.fixture(scope="module")
def vanilla(pairs):
    return generate(pairs["self"], prepare(pairs["self"], make_clip(), PROMPT), _cfg())


def _hf_ids(model, processor, inputs, clip, n=N):
    enc = processor(text=[inputs.prompt_text], videos=[clip.frames], video_metadata=[clip_metadata(clip)],
                    do_sample_frames=False, return_tensors="pt")
    assert torch.equal(enc["input_ids"], inputs.input_ids)
    out = model.generate(**enc, max_new_tokens=n, min_new_tokens=n, do_sample=False)
    return out[0, enc["input_ids"].shape[1]:].tolist()


def test_prompt_layout_and_token_grid(pairs):
    pair = pairs["self"]
    clip = make_clip(8, 112, fps=4.0)
    inputs = pair.adapter.prepare(pair.processor, pair.target, clip, PROMPT)
    tok = pair.processor.tokenizer
    assert inputs.num_video_tokens == 8 * 64 and inputs.frames_per_token == 1
    assert inputs.positions.shape == (1, inputs.input_ids.shape[1])
    assert torch.equal(inputs.positions[0], torch.arange(inputs.input_ids.shape[1]))
    grid = inputs.token_grid
    assert grid.shape == (512, 3)
    assert grid[:, 0].bincount().tolist() == [64] * 8                 # 8 x 8 tokens per frame
    assert grid[63].tolist() == [0, 7, 7] and grid[64].tolist() == [1, 0, 0] and grid[9].tolist() == [0, 1, 1]
    ids = inputs.input_ids[0]
    fake = tok.convert_tokens_to_ids("<fake_token_around_image>")
    glob = tok.convert_tokens_to_ids("<global-img>")
    runs = inputs.video_index.reshape(8, 64)
    assert torch.equal(runs[:, -1] - runs[:, 0], torch.full((8,), 63))   # each frame is one run of 64
    assert (ids[runs[:, 0] - 1] == glob).all() and (ids[runs[:, 0] - 2] == fake).all()
    assert (ids[runs[:, -1] + 1] == fake).all()
    text = tok.decode(ids)
    assert "series of eight frames from a 0:00:02 [H:MM:SS] video" in text
    assert [f"Frame from 00:0{s}:" in text for s in (0, 1)] == [True, True]
    assert text.count("Frame from") == 8 and text.endswith("Assistant:")


def test_clip_metadata_carries_real_times_and_duration():
    clip = VideoClip(np.zeros((3, 32, 32, 3), np.uint8), np.array([0.0, 65.2, 130.4]), native_fps=25.0,
                     total_frames=3500, duration=140.0)
    meta = clip_metadata(clip)
    assert meta["fps"] == 25.0 and meta["duration"] == 140.0 and meta["total_num_frames"] == 3500
    assert [i / meta["fps"] for i in meta["frames_indices"]] == [0.0, 65.2, 130.4]
    bare = VideoClip(np.zeros((4, 32, 32, 3), np.uint8), np.arange(4) / 2.0)      # in memory: no stream facts
    meta = clip_metadata(bare)
    assert meta["fps"] == 2.0 and meta["duration"] == 2.0 and meta["frames_indices"] == [0, 1, 2, 3]


def test_duration_and_frame_times_are_prompt_text(pairs):
    """A long clip's times reach the prompt as MM:SS and its duration as H:MM:SS (not the last frame's time)."""
    pair = pairs["self"]
    clip = VideoClip(make_clip(3, 64).frames, np.array([0.0, 65.2, 130.4]), native_fps=25.0, total_frames=3500,
                     duration=140.0)
    text = pair.processor.tokenizer.decode(pair.adapter.prepare(pair.processor, pair.target, clip, PROMPT).input_ids[0])
    assert "series of three frames from a 0:02:20 [H:MM:SS] video" in text
    assert "Frame from 01:05:" in text and "Frame from 02:10:" in text


def test_tiny_model_is_varied_and_vanilla_equals_hf_generate(pairs, vanilla):
    pair = pairs["self"]
    assert len(set(vanilla.token_ids)) >= 8, vanilla.token_ids
    clip = make_clip()
    inputs = pair.adapter.prepare(pair.processor, pair.target, clip, PROMPT)
    assert _hf_ids(pair.target, pair.processor, inputs, clip) == vanilla.token_ids


def test_benchmark_feeds_hf_generate_the_adapter_s_exact_ids(pairs):
    """The benchmark's HF peers rebuild the processor call from the adapter's record (clip metadata)."""
    from specvlm.bench.hf_peers import processor_inputs

    pair = pairs["self"]
    clip = make_clip()
    inputs = pair.adapter.prepare(pair.processor, pair.target, clip, PROMPT)
    assert inputs.processor_kwargs["video_metadata"] == [clip_metadata(clip)]
    enc = processor_inputs(pair, clip, inputs)
    assert torch.equal(enc["input_ids"], inputs.input_ids)
    assert torch.equal(enc["pixel_values"], inputs.vision["pixel_values"])


def test_draft_vanilla_equals_hf_generate(smol_draft):
    """The draft model (1 layer, padded vocabulary) is itself a SmolVLM: our vanilla == generate()."""
    pair = pair_from_models(*smol_draft)
    clip = make_clip(4, 96, seed=2)
    inputs = pair.adapter.prepare(pair.processor, pair.target, clip, PROMPT)
    van = generate(pair, inputs, _cfg(n=16))
    assert _hf_ids(pair.target, pair.processor, inputs, clip, n=16) == van.token_ids


@pytest.mark.parametrize("method", PRUNE_METHODS)
def test_every_pruning_method_is_lossless(pairs, vanilla, method):
    res = generate(pairs["self"], prepare(pairs["self"], make_clip(), PROMPT), _cfg(method))
    assert res.token_ids == vanilla.token_ids
    expected_k = 512 if method == "none" else int(512 * 0.1 + 1e-9)
    assert res.num_kept == expected_k


@pytest.mark.parametrize("mode", ["self", "std"])
@pytest.mark.parametrize("shape", ["dynamic", "static", "chain"])
def test_tree_shapes_self_and_std_sd_are_lossless(pairs, vanilla, mode, shape):
    for method in ("specvlm", "none"):
        res = generate(pairs[mode], prepare(pairs[mode], make_clip(), PROMPT), _cfg(method, shape))
        assert res.token_ids == vanilla.token_ids, (mode, method, shape)
        assert all(0 <= a <= 5 for a in res.accept_lengths)


def test_std_sd_shares_the_padded_vocabulary(pairs):
    pair = pairs["std"]
    t, d = pair.target.lm_head.weight.shape[0], pair.draft.lm_head.weight.shape[0]
    assert t != d and pair.shared_vocab == min(t, d)


def test_self_sd_without_pruning_accepts_whole_chains(pairs, vanilla):
    res = generate(pairs["self"], prepare(pairs["self"], make_clip(), PROMPT), _cfg("none", "chain", depth=4))
    assert res.token_ids == vanilla.token_ids
    assert res.accept_lengths[:-1] == [4] * (len(res.accept_lengths) - 1)


@pytest.fixture(scope="module")
def big():
    """The SmolVLM2-2.2B layout: 384 px frames, patch 14, pixel shuffle 3 -> 9 x 9 = 81 tokens per frame."""
    from specvlm.testing.tiny import tiny_smolvlm
    return tiny_smolvlm(seed=2, image_size=384, patch=14, scale_factor=3)


@pytest.fixture(scope="module")
def mixed(big, smol_draft):
    """2.2B-layout target + 256M-layout draft: each reads its own prompt."""
    return pair_from_models(big[0], big[1], smol_draft[0], smol_draft[1])


def test_the_2_2b_geometry_is_81_tokens_per_frame_and_equals_hf_generate(big):
    pair = pair_from_models(*big)
    clip = make_clip(4, 96, seed=1)
    inputs = pair.adapter.prepare(pair.processor, pair.target, clip, PROMPT)
    assert inputs.num_video_tokens == 4 * 81 and inputs.token_grid[80].tolist() == [0, 8, 8]
    assert tuple(inputs.vision["pixel_values"].shape[-2:]) == (384, 384)     # frames resized to the square
    van = generate(pair, inputs, _cfg(n=16))
    assert _hf_ids(pair.target, pair.processor, inputs, clip, n=16) == van.token_ids


def test_a_draft_of_another_geometry_needs_its_processor(big, smol_draft, mixed):
    from specvlm.models.errors import ModelLoadError

    with pytest.raises(ModelLoadError, match="draft_processor"):
        pair_from_models(big[0], big[1], smol_draft[0])
    assert mixed.draft_processor is smol_draft[1]
    assert pair_from_models(*big).draft_processor is None


@pytest.fixture(scope="module")
def mixed_vanilla(mixed):
    return generate(mixed, prepare(mixed, make_clip(), PROMPT), _cfg(n=24))


@pytest.mark.parametrize("method", PRUNE_METHODS)
def test_another_geometry_draft_is_lossless_for_every_pruning_method(mixed, mixed_vanilla, method):
    clip = make_clip()
    res = generate(mixed, prepare(mixed, clip, PROMPT), _cfg(method, n=24))
    assert res.token_ids == mixed_vanilla.token_ids
    assert res.num_video_tokens == 8 * 81 and res.num_kept == (648 if method == "none" else 64)
    # the draft reads its own prompt: its text plus the kept set carried to its 8 x 8 grid
    text = mixed.draft_adapter.prepare(mixed.draft_processor, mixed.draft, clip, PROMPT)
    n_text = text.input_ids.shape[1] - text.num_video_tokens
    kept_d = res.prefill.num_draft_prompt_tokens - n_text
    assert (kept_d == 512) if method == "none" else (1 <= kept_d <= 64)


@pytest.mark.parametrize("shape", ["dynamic", "static", "chain"])
def test_another_geometry_draft_is_lossless_for_every_tree_shape(mixed, mixed_vanilla, shape):
    clip = make_clip()
    van = mixed_vanilla
    assert generate(mixed, prepare(mixed, clip, PROMPT), _cfg("specvlm", shape, n=24)).token_ids == van.token_ids
    cold = DecodeConfig(method="specvlm", max_new_tokens=24, stop_at_eos=False, tree=TreeConfig(shape=shape),
                        sampling=SamplingConfig(temperature=1e-4, seed=0))
    assert generate(mixed, prepare(mixed, clip, PROMPT), cold).token_ids == van.token_ids


def test_another_geometry_draft_with_subtitles_and_prepared_inputs(mixed):
    from specvlm.text.subtitles import Cue

    cues = [Cue(0.0, 1.0, "a red ball rolls"), Cue(1.0, 2.0, "it stops")]
    clip = make_clip()
    for mode in ("both", "target", "draft"):
        inputs = prepare(mixed, clip, PROMPT, subtitles=cues, subtitle_mode=mode)
        van, spec = generate(mixed, inputs, _cfg(n=16)), generate(mixed, inputs, _cfg("specvlm", n=16))
        assert spec.token_ids == van.token_ids, mode
        seen = {"both": (True, True), "target": (True, False), "draft": (False, True)}[mode]
        assert (spec.prefill.target_subtitle_tokens > 5, spec.prefill.draft_subtitle_tokens > 5) == seen, mode
    inputs = mixed.adapter.prepare(mixed.processor, mixed.target, clip, PROMPT)      # the target's prompt only
    assert inputs.draft_inputs is None
    assert generate(mixed, inputs, _cfg(n=4)).token_ids      # vanilla reads the target's prompt only
    with pytest.raises(ValueError, match=r"reads its own prompt.*specvlm.prepare\(pair, clip, prompt\)"):
        generate(mixed, inputs, _cfg("specvlm", n=4))
    full = prepare(mixed, clip, PROMPT)
    assert full.draft_inputs is not None
    assert generate(mixed, full, _cfg("specvlm", n=16)).token_ids == generate(mixed, full, _cfg(n=16)).token_ids


def test_subtitles_are_lossless_in_every_mode(pairs):
    from specvlm.text.subtitles import Cue

    cues = [Cue(0.0, 1.0, "a red ball rolls"), Cue(1.0, 2.0, "it stops")]
    clip = make_clip()
    base = generate(pairs["std"], prepare(pairs["std"], clip, PROMPT, subtitles=cues), _cfg(n=16))
    assert base.prefill.target_subtitle_tokens > 5
    for mode in ("both", "target", "draft"):
        van = generate(pairs["std"], prepare(pairs["std"], clip, PROMPT, subtitles=cues, subtitle_mode=mode),
                       _cfg(n=16))
        spec = generate(pairs["std"], prepare(pairs["std"], clip, PROMPT, subtitles=cues, subtitle_mode=mode),
                        _cfg("specvlm", n=16))
        assert spec.token_ids == van.token_ids, mode


# --------------------------------------------------------------------------- sampling
def _sample_cfg(method, shape="dynamic", t=1.0, seed=0, n=24):
    return DecodeConfig(method=method, max_new_tokens=n, stop_at_eos=False, tree=TreeConfig(shape=shape),
                        sampling=SamplingConfig(temperature=t, seed=seed))


@pytest.mark.parametrize("shape", ["dynamic", "static", "chain"])
def test_sampling_at_tiny_temperature_is_greedy_and_seeded(pairs, vanilla, shape):
    for mode in ("self", "std"):
        got = generate(pairs[mode], prepare(pairs[mode], make_clip(), PROMPT),
                       _sample_cfg("specvlm", shape, t=1e-4, n=N)).token_ids
        assert got == vanilla.token_ids, mode
    a = generate(pairs["std"], prepare(pairs["std"], make_clip(), PROMPT),
                 _sample_cfg("specvlm", shape, seed=7)).token_ids
    b = generate(pairs["std"], prepare(pairs["std"], make_clip(), PROMPT),
                 _sample_cfg("specvlm", shape, seed=7)).token_ids
    assert a == b and len(a) == 24


def test_sampling_with_the_target_as_its_own_full_draft_accepts_every_sample(pairs):
    """Draft distribution == target distribution: rejection sampling must accept every drafted token."""
    res = generate(pairs["self"], prepare(pairs["self"], make_clip(), PROMPT), _sample_cfg("none", "chain", n=40))
    assert res.accept_lengths[:-1] == [5] * (len(res.accept_lengths) - 1)


# --------------------------------------------------------------------------- CLI on saved folders
def test_cli_on_saved_folders_of_two_geometries_is_identical_to_vanilla(big, smol_draft, tmp_path):
    """--model (2.2B layout, 81 tokens per frame) --draft (256M layout, 64): each loads its own processor."""
    from helpers.cli import cli
    from helpers.media import write_mp4

    for name, (model, proc) in {"target": big, "draft": smol_draft}.items():
        model.save_pretrained(tmp_path / name)
        proc.save_pretrained(tmp_path / name)
    video = write_mp4(tmp_path / "clip.mp4", make_clip(16, 96).frames)
    r = cli("generate", "--model", str(tmp_path / "target"), "--draft", str(tmp_path / "draft"), "--video",
            str(video), "--prompt", PROMPT, "--num-frames", "6", "--max-new-tokens", "24", "--no-eos", "--json",
            "--method", "specvlm", "--compare")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["identical"] is True and len(out["token_ids"]) == 24
    assert out["num_video_tokens"] == 6 * 81 and out["num_kept"] == int(6 * 81 * 0.1)


# --------------------------------------------------------------------------- presets
def test_cpu_default_is_smolvlm2_with_the_hub_and_the_bundled_pair_offline(monkeypatch):
    from specvlm.models import hub, presets

    monkeypatch.setattr(presets.torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(hub, "hub_reachable", lambda timeout_s=2.0: True)
    assert presets.default_preset_name() == presets.SMOLVLM2_CPU
    smol = presets.default_preset()
    assert smol.target == "HuggingFaceTB/SmolVLM2-500M-Video-Instruct"
    assert smol.draft == "HuggingFaceTB/SmolVLM2-256M-Video-Instruct" and not smol.requires_cuda
    assert "r = 0.9" in smol.description and "λ = 0.4" in smol.description
    monkeypatch.setattr(hub, "hub_reachable", lambda timeout_s=2.0: False)
    assert presets.default_preset_name() == presets.BUNDLED_STD


def test_the_2_2b_preset_pairs_two_geometries_with_the_paper_settings():
    from specvlm.models.presets import PRESETS, SMOLVLM2_2B

    p = PRESETS[SMOLVLM2_2B]
    assert p.target == "HuggingFaceTB/SmolVLM2-2.2B-Instruct"
    assert p.draft == "HuggingFaceTB/SmolVLM2-256M-Video-Instruct"
    assert p.requires_cuda and "r = 0.9" in p.description and "λ = 0.4" in p.description
