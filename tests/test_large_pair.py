"""The shipped large pair (assets/model_large): offline load, bf16 files within budget, a target whose decode step
reads its weights from memory, lossless greedy SpecVLM (Std-SD and Self-SD) equal to ``model.generate()``.

Runs on the committed clip ``assets/videos/shapes_short.mp4`` (16 frames); the pair and the clip come from the
shared fixtures in ``tests/conftest.py`` (``helpers.bundled``).
"""
from __future__ import annotations

import pytest

from helpers.bundled import folders, greedy, safetensors_dtypes, specvlm_and_model_generate
from scripts.roofline import weight_bytes

BUNDLED = "model_large"   # the conftest's bundled_pair / bundled_vanilla load this pair
TARGET, DRAFT = folders(BUNDLED)
MAX_NEW = 32              # enough tokens for several verify steps; keeps the file well under a minute
L3 = 32 * 2**20           # a 32 MiB last-level cache (docs/benchmark.md, scripts/roofline.py)


def test_loads_offline_from_assets(bundled_pair):
    import torch
    from transformers import Qwen2_5_VLForConditionalGeneration

    pair = bundled_pair
    assert isinstance(pair.target, Qwen2_5_VLForConditionalGeneration)
    assert not pair.self_sd and isinstance(pair.draft, Qwen2_5_VLForConditionalGeneration)
    assert pair.draft.config.text_config.num_hidden_layers < pair.target.config.text_config.num_hidden_layers
    assert pair.processor.tokenizer.convert_tokens_to_ids("<|video_pad|>") == pair.target.config.video_token_id
    assert {p.dtype for m in (pair.target, pair.draft) for p in m.parameters()} == {torch.float32}   # upcast


def test_files_are_bf16_within_budget():
    for folder in (TARGET, DRAFT):
        assert (folder / "model.safetensors").exists(), folder
        assert safetensors_dtypes(folder) == {"BF16"}, folder
    total = sum(p.stat().st_size for d in (TARGET, DRAFT) for p in d.glob("*.safetensors"))
    assert total <= 64 * 2**20, f"the large pair takes {total / 2**20:.1f} MiB (limit 64 MiB)"


def test_target_streams_its_weights_and_the_draft_is_small(bundled_pair):
    """A decode step of the target reads its fp32 text weights, over three times a 32 MiB L3: the regime where
    verifying several tokens costs little more than one step; the draft reads at most a tenth of that."""
    target, draft = weight_bytes(bundled_pair.target), weight_bytes(bundled_pair.draft)
    assert target >= 3 * L3, f"target text weights {target / 2**20:.1f} MiB < 3 x 32 MiB"
    assert 10 * draft <= target, f"draft {draft / 2**20:.2f} MiB vs target {target / 2**20:.1f} MiB"


def test_presets_name_the_large_pair_offline_on_a_cpu():
    from specvlm.models.presets import (BUNDLED_LARGE_SELF, BUNDLED_LARGE_STD, PRESETS, default_preset_name,
                                        preset_available)

    std, self_sd = PRESETS[BUNDLED_LARGE_STD], PRESETS[BUNDLED_LARGE_SELF]
    assert (std.target, std.draft) == (str(TARGET), str(DRAFT))
    assert (self_sd.target, self_sd.draft) == (str(TARGET), None)
    for p in (std, self_sd):
        assert not p.requires_cuda and p.ceiling is None and preset_available(p)
    assert default_preset_name() not in (BUNDLED_LARGE_STD, BUNDLED_LARGE_SELF)   # a choice, never the default


@pytest.mark.parametrize("self_sd", [False, True], ids=["std-sd", "self-sd"])
def test_greedy_specvlm_identical_to_vanilla(bundled_pair, bundled_clip, bundled_vanilla, self_sd):
    assert bundled_vanilla.token_ids, "nothing generated"
    res = greedy(bundled_pair, bundled_clip, "specvlm", MAX_NEW, self_sd=self_sd)
    assert res.token_ids == bundled_vanilla.token_ids
    assert res.num_kept < res.num_video_tokens


def test_greedy_specvlm_equals_model_generate(bundled_pair, bundled_clip, bundled_vanilla):
    ours, hf = specvlm_and_model_generate(bundled_pair, bundled_clip, MAX_NEW)
    assert ours == hf == bundled_vanilla.token_ids
