"""specvlm.testing.realdims: the published dimensions of the presets' checkpoints, and the builder on a tiny copy."""
from __future__ import annotations

import pytest

from specvlm.testing import realdims as R


@pytest.mark.parametrize("arch, dims", [
    (R.QWEN2_5_VL_3B, (2048, 36, 16, 2, 11008, 151936, True)),
    (R.QWEN2_5_VL_7B, (3584, 28, 28, 4, 18944, 152064, False)),
    (R.QWEN2_5_VL_32B, (5120, 64, 40, 8, 27648, 152064, False)),
    (R.LLAVA_OV_7B, (3584, 28, 28, 4, 18944, 152128, False)),
    (R.LLAVA_OV_72B, (8192, 80, 64, 8, 29568, 152128, False)),
])
def test_published_dimensions(arch, dims):
    assert (arch.hidden, arch.layers, arch.heads, arch.kv_heads, arch.intermediate, arch.vocab,
            arch.tie_embeddings) == dims
    assert arch.head_dim == 128
    if arch.mrope_section:
        assert sum(arch.mrope_section) == arch.head_dim // 2
        assert arch.vision["out_hidden_size"] == arch.hidden and arch.vision["patch_size"] == 14
    else:
        assert (arch.vision["image_size"], arch.vision["patch_size"], arch.vision["hidden_size"]) == (384, 14, 1152)


def test_build_keeps_every_dimension_but_depth():
    tiny = R.shrink(R.QWEN2_5_VL_7B, hidden=64, heads=4, kv_heads=2, intermediate=96, vocab=520,
                    mrope_section=(4, 2, 2), vision=dict(R.QWEN_VISION, hidden_size=32, intermediate_size=48,
                                                         num_heads=2, out_hidden_size=64))
    model, proc = R.build(tiny, layers=1, vision_layers=2)
    t = model.config.text_config
    assert (t.hidden_size, t.num_hidden_layers, t.num_key_value_heads, t.vocab_size) == (64, 1, 2, 520)
    assert t.rope_parameters["mrope_section"] == [4, 2, 2]
    assert model.config.vision_config.depth == 2 and model.config.vision_config.fullatt_block_indexes == [1]
    assert model.get_output_embeddings().weight.shape == (520, 64)
    assert proc.tokenizer.convert_tokens_to_ids("<|video_pad|>") == model.config.video_token_id
    with pytest.raises(ValueError, match="layers >= 1"):
        R.build(tiny, layers=0)


def test_qwen3_vl_8b_published_dimensions_and_tiny_build():
    a = R.QWEN3_VL_8B
    assert (a.hidden, a.layers, a.heads, a.kv_heads, a.intermediate, a.vocab, a.tie_embeddings) == (
        4096, 36, 32, 8, 12288, 151936, False)
    assert a.head_dim == 128 and sum(a.mrope_section) == a.head_dim // 2
    assert (a.vision["patch_size"], a.vision["deepstack_visual_indexes"], a.vision["out_hidden_size"]) == (
        16, [8, 16, 24], 4096)
    tiny = R.shrink(a, hidden=64, heads=4, kv_heads=2, intermediate=96, vocab=520, mrope_section=(4, 2, 2),
                    vision=dict(R.QWEN3_VISION, hidden_size=32, intermediate_size=48, num_heads=2,
                                out_hidden_size=64, num_position_embeddings=64))
    model, proc = R.build(tiny, layers=1, vision_layers=9)
    t, v = model.config.text_config, model.config.vision_config
    assert model.config.model_type == "qwen3_vl" and t.rope_parameters["mrope_interleaved"] is True
    assert (t.hidden_size, t.num_hidden_layers, t.head_dim, t.vocab_size) == (64, 1, 16, 520)
    assert v.depth == 9 and v.deepstack_visual_indexes == [8]
    assert proc.video_processor.patch_size == 16 and proc.video_processor.merge_size == 2
