"""Tiny Qwen3-VL models (dense and MoE) and their processor, built in-process (no downloads).

Real processor geometry (patch 16, merge 2, temporal patch 2), DeepStack layers,
interleaved M-RoPE, the family's special tokens and a chat template of the same
shape as the released one. Used by the tests and the CPU smoke runs.

Source: transformers 5.24 ``Qwen3VLConfig`` / ``Qwen3VLMoeConfig`` and
``Qwen3VLProcessor``; docs/design.md §10 (Qwen3-VL).
"""
from __future__ import annotations

import torch

from specvlm.testing.tiny import QWEN_CHAT_TEMPLATE, QWEN_SPECIALS, _scale_init, build_tokenizer

PATCH = 16
MERGE = 2
TEMPORAL_PATCH = 2


def _text_config(tok, ids: dict[str, int], hidden: int, layers: int, pad_vocab_to: int, moe: bool) -> dict:
    head_dim = hidden // 4
    half = head_dim // 2
    section = [half - 2 * (half // 4), half // 4, half // 4]
    cfg = dict(
        vocab_size=len(tok) + (-len(tok)) % pad_vocab_to, hidden_size=hidden, intermediate_size=hidden * 2,
        num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2, head_dim=head_dim,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": section,
                         "mrope_interleaved": True},
        max_position_embeddings=32768, tie_word_embeddings=False,
        bos_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|im_end|>"], pad_token_id=ids["<|endoftext|>"],
    )
    if moe:
        cfg.update(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=hidden, decoder_sparse_step=1)
    return cfg


def tiny_qwen3_vl(seed: int = 0, hidden: int = 64, layers: int = 2, moe: bool = False, vocab_size: int = 400,
                  std: float = 0.06, pad_vocab_to: int = 8, deepstack: tuple[int, ...] = (0, 1)):
    """A tiny Qwen3-VL model (dense or MoE) and its ``Qwen3VLProcessor``, fp32, eval mode.

    Args:
        seed: weight seed (the tokenizer is deterministic, so every tiny model shares it).
        hidden: text hidden size (4 heads, 2 KV heads, head_dim = hidden / 4).
        layers: text decoder layers.
        moe: build ``Qwen3VLMoeForConditionalGeneration`` (4 experts, 2 per token) instead of dense.
        vocab_size: tokenizer vocabulary size.
        std: weight init scale.
        pad_vocab_to: the LM head is padded to a multiple of this.
        deepstack: vision layers whose merged features are added into the first LLM layers.

    Returns:
        (model, processor). A 2-frame group of 64x64 px frames gives 2x2 = 4 video tokens
        (patch 16, merge 2), wrapped in a ``<t seconds>`` timestamp and vision start/end tokens.

    Source: transformers 5.24 ``Qwen3VLConfig`` / ``Qwen3VLMoeConfig``; docs/design.md §7 (tiny configs).
    """
    from transformers import Qwen2VLImageProcessor, Qwen3VLProcessor, Qwen3VLVideoProcessor

    if moe:
        from transformers import Qwen3VLMoeConfig as Config, Qwen3VLMoeForConditionalGeneration as Model
    else:
        from transformers import Qwen3VLConfig as Config, Qwen3VLForConditionalGeneration as Model
    tok = build_tokenizer(QWEN_SPECIALS, vocab_size)
    ids = {t: tok.convert_tokens_to_ids(t) for t in QWEN_SPECIALS}
    config = Config(
        text_config=_text_config(tok, ids, hidden, layers, pad_vocab_to, moe),
        vision_config=dict(depth=max(deepstack) + 2, hidden_size=32, intermediate_size=64, num_heads=2,
                           patch_size=PATCH, spatial_merge_size=MERGE, temporal_patch_size=TEMPORAL_PATCH,
                           out_hidden_size=hidden, num_position_embeddings=64,
                           deepstack_visual_indexes=list(deepstack)),
        image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    model = Model(config).eval()
    _scale_init(model, std, seed)
    model.generation_config.eos_token_id = ids["<|im_end|>"]
    model.generation_config.pad_token_id = ids["<|endoftext|>"]
    factor = PATCH * MERGE
    size = {"shortest_edge": factor * factor, "longest_edge": 448 * 448 * 16}
    processor = Qwen3VLProcessor(
        image_processor=Qwen2VLImageProcessor(patch_size=PATCH, merge_size=MERGE, temporal_patch_size=TEMPORAL_PATCH,
                                              size=size),
        video_processor=Qwen3VLVideoProcessor(patch_size=PATCH, merge_size=MERGE,
                                              temporal_patch_size=TEMPORAL_PATCH, size=size),
        tokenizer=tok, chat_template=QWEN_CHAT_TEMPLATE,
    )
    return model, processor
