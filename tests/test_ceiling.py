"""Byte floors and speedup ceilings: the pure projection math, the pairs' geometry, and what presets state."""
from __future__ import annotations

import pytest

from specvlm.models import ceiling as c
from specvlm.models.fit import KNOWN_SIZES
from specvlm.models.presets import GPU_DEFAULTS, PRESETS, QWEN3_8B_2B, QWEN7_3B, QWEN7_SELF
from specvlm.testing import realdims

Q7, Q3B = "Qwen/Qwen2.5-VL-7B-Instruct", "Qwen/Qwen2.5-VL-3B-Instruct"
Q8, Q2 = "Qwen/Qwen3-VL-8B-Instruct", "Qwen/Qwen3-VL-2B-Instruct"
D = c.DECODER_DIMS


def test_qwen2_5_vl_7b_reads_14_gb_of_weights_and_56_kib_per_token():
    q7 = D[Q7]
    assert q7.step_params() * 2 / 1e9 == pytest.approx(14.14, abs=0.01)
    assert q7.kv_bytes_per_token() == 56 * 1024
    floor = c.byte_floor_ms(c.pair_ceiling(q7, None).target_step_bytes, c.gpu_bandwidth("NVIDIA H200"))
    assert floor == pytest.approx(3.1, abs=0.05)   # 15.1 GB at 4.8 TB/s


def test_projection_formula_and_its_inverse():
    assert c.projected_speedup(3, 10.0, 1.0, 15.0, 5) == pytest.approx(4 * 10 / 20)
    s = c.projected_speedup(3.5, 20.0, 2.0, 25.0, 5)
    assert c.tau_needed(s, 20.0, 2.0, 25.0, 5) == pytest.approx(3.5)
    with pytest.raises(ValueError, match="give positive step costs"):
        c.projected_speedup(3, 1.0, 0.0, 0.0, 5)


def test_ceiling_with_every_draft_accepted_is_the_free_draft_bound():
    free = c.Ceiling(16384, target_step_bytes=10.0, draft_level_bytes=0.0, depth=5)
    assert free.all_accepted == 6.0 and free.speedup(3.0) == 4.0   # a free draft: τ + 1 tokens per target step
    same = c.Ceiling(16384, 10.0, 10.0, 5)
    assert same.all_accepted == pytest.approx(1.0)   # a draft as costly as the target gains nothing at depth = τ


def test_self_sd_7b_cannot_win_and_small_drafts_can():
    self7 = c.pair_ceiling(D[Q7], None)
    assert self7.draft_ratio == pytest.approx(0.94, abs=0.01)
    assert self7.all_accepted == pytest.approx(1.06, abs=0.02)       # docs/design.md §11
    assert self7.speedup(3.8) == pytest.approx(0.84, abs=0.02)
    q7_3b = c.pair_ceiling(D[Q7], D[Q3B])
    assert q7_3b.draft_ratio == pytest.approx(0.41, abs=0.01)
    assert q7_3b.speedup(3.0) == pytest.approx(1.3, abs=0.05) and q7_3b.speedup(3.8) == pytest.approx(1.55, abs=0.05)
    q8_2b = c.pair_ceiling(D[Q8], D[Q2])
    assert q8_2b.draft_ratio == pytest.approx(0.21, abs=0.01)
    assert q8_2b.speedup(3.0) == pytest.approx(1.9, abs=0.1) and q8_2b.speedup(3.8) == pytest.approx(2.3, abs=0.1)
    assert c.ceiling_note(self7, self_sd=True).startswith("On a GPU this pair cannot beat vanilla decoding at 16,384")
    assert c.ceiling_note(q8_2b, self_sd=False) == ""


def test_pairs_share_geometry_and_vocabularies_are_padded_not_different():
    r = realdims
    for target, draft in ((r.QWEN3_VL_8B, r.QWEN3_VL_2B), (r.QWEN2_5_VL_7B, r.QWEN2_5_VL_3B)):
        assert target.family == draft.family
        for k in ("patch_size", "spatial_merge_size", "temporal_patch_size"):
            assert target.vision[k] == draft.vision[k], (target.name, k)   # the same video tokens
        assert draft.vision["out_hidden_size"] == draft.hidden and target.vision["out_hidden_size"] == target.hidden
    assert (r.QWEN3_VL_8B.vocab, r.QWEN3_VL_2B.vocab) == (151936, 151936)
    assert (r.QWEN2_5_VL_7B.vocab, r.QWEN2_5_VL_3B.vocab) == (152064, 151936)   # the 7B's extra rows are padding
    for arch, hub in ((r.QWEN2_5_VL_3B, Q3B), (r.QWEN2_5_VL_7B, Q7), (r.QWEN3_VL_2B, Q2), (r.QWEN3_VL_8B, Q8),
                      (r.QWEN2_5_VL_32B, "Qwen/Qwen2.5-VL-32B-Instruct"),
                      (r.LLAVA_OV_72B, "llava-hf/llava-onevision-qwen2-72b-ov-hf")):
        d = D[hub]
        assert (d.hidden, d.layers, d.heads, d.kv_heads, d.head_dim, d.intermediate, d.vocab) == (
            arch.hidden, arch.layers, arch.heads, arch.kv_heads, arch.head_dim, arch.intermediate, arch.vocab)
    for hub, d in D.items():   # the memory table agrees on the KV geometry
        k = KNOWN_SIZES[hub]
        assert (k.layers, k.kv_heads, k.head_dim) == (d.layers, d.kv_heads, d.head_dim), hub


def test_presets_state_their_ceiling_and_the_gpu_default_can_win():
    default = PRESETS[GPU_DEFAULTS[0]]
    assert GPU_DEFAULTS == (QWEN3_8B_2B, QWEN7_3B) and default.draft == Q2
    for name in GPU_DEFAULTS:
        p = PRESETS[name]
        assert p.ceiling is not None and p.ceiling.speedup(3.0) > 1.25
        assert p.ceiling.describe() in p.description and "cannot beat" not in p.description
    self7 = PRESETS[QWEN7_SELF]
    assert self7.ceiling.video_tokens == 16384 and self7.ceiling.all_accepted < 1.1
    assert "cannot beat vanilla decoding" in self7.description and "not SpecVLM's" in self7.description
    assert PRESETS["Qwen3-VL-30B-A3B + 8B draft"].ceiling is None   # MoE: active experts unknown here
    assert all(p.ceiling is None for p in PRESETS.values() if not p.requires_cuda)


@pytest.mark.parametrize("name, expected", [
    ("NVIDIA H100 80GB HBM3", 3.35e12), ("NVIDIA H200", 4.8e12), ("NVIDIA A100-SXM4-80GB", 2.0e12),
    ("NVIDIA L40S", 0.864e12), ("NVIDIA RTX PRO 6000 Blackwell Server Edition", 1.8e12), ("NVIDIA A10G", 0.6e12),
    ("NVIDIA H100 PCIe", 2.0e12)])
def test_bandwidth_by_device_name(name, expected):
    assert c.gpu_bandwidth(name) == expected


def test_unknown_gpu_asks_for_the_bandwidth():
    with pytest.raises(c.BandwidthError, match="give it with --bandwidth"):
        c.gpu_bandwidth("NVIDIA GeForce GTX 1080")
    assert c.gpu_bandwidth("NVIDIA GeForce GTX 1080", 3.2e11) == 3.2e11
    with pytest.raises(c.BandwidthError, match="bytes/s"):
        c.gpu_bandwidth("NVIDIA H200", 0.0)
