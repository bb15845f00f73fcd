"""Architecture of the bundled pair: sizes, the Qwen2.5-VL config, fresh models, the draft's initialisation."""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

PATCH_PX, SPATIAL_MERGE, TEMPORAL_PATCH = 14, 2, 2
"""The bundled models' video geometry: 14-px vision patches, 2 x 2 patches merged into one video token, 2 frames
per token."""
CELL_PX = PATCH_PX * SPATIAL_MERGE
"""Processed pixels per side of one video token's cell (28)."""


@dataclass(frozen=True)
class ModelSize:
    """Architecture sizes (text + vision tower)."""

    hidden: int = 256
    layers: int = 4
    heads: int = 4
    kv_heads: int = 2
    intermediate: int = 704
    v_hidden: int = 128
    v_depth: int = 2
    v_heads: int = 4
    v_intermediate: int = 256


TARGET_SIZE = ModelSize()


DRAFT_SIZE = ModelSize(layers=1)


LARGE_TARGET_SIZE = ModelSize(hidden=512, layers=9, heads=8, kv_heads=4, intermediate=1408, v_depth=4,
                              v_intermediate=512)
"""The large bundled target: ~28 M parameters, ~107 MB of fp32 text weights, over three times the 32 MiB L3 of a
2-core CPU, so that its decode step reads its weights from memory as a real model's does (grown from the
bundled target by :mod:`training.grow`, then trained)."""


SIZES = {"bundled": TARGET_SIZE, "large": LARGE_TARGET_SIZE, "draft": DRAFT_SIZE}
"""Named sizes for ``--target-size`` / ``--draft-size`` and :mod:`training.grow`."""


TINY_SIZE = ModelSize(hidden=64, layers=2, heads=4, kv_heads=2, intermediate=128,
                      v_hidden=32, v_depth=1, v_heads=2, v_intermediate=64)


def make_config(tokenizer, size: ModelSize):
    """Qwen2_5_VLConfig for the bundled models (vocab = tokenizer size rounded to 64)."""
    from transformers import Qwen2_5_VLConfig

    vocab = int(math.ceil(len(tokenizer) / 64) * 64)
    head_dim = size.hidden // size.heads
    q = head_dim // 2
    t_sec = q - 2 * (3 * q // 8)
    mrope = [t_sec, 3 * q // 8, 3 * q // 8]  # sums to head_dim/2 (16/24/24 at head_dim 128)
    ids = tokenizer.convert_tokens_to_ids
    text = dict(
        vocab_size=vocab, hidden_size=size.hidden, intermediate_size=size.intermediate,
        num_hidden_layers=size.layers, num_attention_heads=size.heads,
        num_key_value_heads=size.kv_heads, max_position_embeddings=32768, rms_norm_eps=1e-6,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": mrope},
        bos_token_id=None, eos_token_id=ids("<|im_end|>"), pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True,
    )
    vision = dict(
        depth=size.v_depth, hidden_size=size.v_hidden, intermediate_size=size.v_intermediate,
        num_heads=size.v_heads, patch_size=PATCH_PX, spatial_merge_size=SPATIAL_MERGE,
        temporal_patch_size=TEMPORAL_PATCH,
        out_hidden_size=size.hidden, window_size=112,
        fullatt_block_indexes=[i for i in range(size.v_depth) if i % 2 == 1 or i == size.v_depth - 1],
        tokens_per_second=4,
    )
    return Qwen2_5_VLConfig(
        text_config=text, vision_config=vision, tie_word_embeddings=True,
        image_token_id=ids("<|image_pad|>"), video_token_id=ids("<|video_pad|>"),
        vision_start_token_id=ids("<|vision_start|>"), vision_end_token_id=ids("<|vision_end|>"),
    )


def build_model(tokenizer, size: ModelSize, seed: int):
    """Fresh Qwen2_5_VLForConditionalGeneration (fp32, sdpa) for ``size``."""
    from transformers import Qwen2_5_VLForConditionalGeneration

    torch.manual_seed(seed)
    cfg = make_config(tokenizer, size)
    model = Qwen2_5_VLForConditionalGeneration._from_config(cfg, attn_implementation="sdpa")
    return model


def init_draft_from_target(draft, target) -> None:
    """Copy vision tower, embeddings, final norm/head and layer 0 from the target."""
    tsd = target.state_dict()
    own = draft.state_dict()
    copied = {k: v for k, v in tsd.items() if k in own and own[k].shape == v.shape}
    draft.load_state_dict(copied, strict=False)
