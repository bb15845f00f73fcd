"""scripts.roofline: the bytes a decode step reads and the projection formula."""
from __future__ import annotations

import pytest

from scripts.roofline import kv_bytes, projected, weight_bytes


def test_bytes_count_every_language_model_weight_and_the_kv_cache(qwen_tiny):
    model = qwen_tiny[0]
    cfg = model.config.get_text_config()
    lm = sum(p.numel() for p in model.get_decoder().parameters()) * 4
    head = model.get_output_embeddings().weight
    tied = head.data_ptr() == model.get_input_embeddings().weight.data_ptr()
    assert weight_bytes(model) == lm + (0 if tied else head.numel() * 4)
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    assert kv_bytes(model, 100) == cfg.num_hidden_layers * 2 * cfg.num_key_value_heads * head_dim * 100 * 4
    assert kv_bytes(model, 200) == 2 * kv_bytes(model, 100)


def test_projection_is_tokens_per_step_over_step_cost():
    assert projected(3.0, 4, 1.0, 0.0) == pytest.approx(4.0)        # free draft, verify at decode cost
    assert projected(3.0, 4, 1.2, 0.1) == pytest.approx(4.0 / 1.6)
    assert projected(0.0, 4, 1.2, 0.1) < 1.0                        # nothing accepted: slower than vanilla
