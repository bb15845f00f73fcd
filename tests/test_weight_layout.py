"""The decoder's linear weights as right-hand matmul operands on a CPU (specvlm/models/layout.py).

The layout changes where the numbers sit in memory, never the numbers: these tests check the values,
shapes and the module outputs, and that a pair built by pair_from_models has every decoder linear laid
out (the engine's token identity with vanilla and model.generate() runs on such pairs elsewhere).
"""
from __future__ import annotations

import torch

from specvlm.models.layout import use_right_operand_layout


def _decoder_linears(model, adapter):
    return [m for m in adapter.language_model(model).layers.modules() if isinstance(m, torch.nn.Linear)]


def test_layout_keeps_values_and_outputs():
    from specvlm.models.registry import adapter_for
    from specvlm.testing.tiny import tiny_qwen2_5_vl

    model, _ = tiny_qwen2_5_vl(seed=3)
    adapter = adapter_for(model)
    lins = _decoder_linears(model, adapter)
    before = [m.weight.detach().clone() for m in lins]
    x = torch.randn(7, lins[0].in_features)
    out_before = lins[0](x)
    assert not any(m.weight.t().is_contiguous() for m in lins)

    n = use_right_operand_layout(adapter.language_model(model))

    assert n == len(lins) > 0
    for m, w in zip(lins, before):
        assert m.weight.shape == w.shape and m.weight.dtype == w.dtype
        assert torch.equal(m.weight, w)
        assert m.weight.t().is_contiguous()
    torch.testing.assert_close(lins[0](x), out_before, rtol=1e-5, atol=1e-6)
    assert use_right_operand_layout(adapter.language_model(model)) == 0   # already laid out


def test_layout_leaves_other_dtypes_and_embeddings_alone():
    from specvlm.models.registry import adapter_for
    from specvlm.testing.tiny import tiny_qwen2_5_vl

    model, _ = tiny_qwen2_5_vl(seed=4)
    adapter = adapter_for(model)
    emb = model.get_input_embeddings().weight
    assert use_right_operand_layout(adapter.language_model(model)) > 0
    assert emb.is_contiguous()                     # embeddings and the (tied) head stay row-major
    model.to(torch.bfloat16)
    assert use_right_operand_layout(adapter.language_model(model)) == 0


def test_pairs_lay_out_target_and_draft(pairs):
    for (family, kind), pair in pairs.items():
        for model, adapter in ((pair.target, pair.adapter), (pair.draft, pair.draft_adapter)):
            lins = _decoder_linears(model, adapter)
            assert lins and all(m.weight.t().is_contiguous() for m in lins), (family, kind)
