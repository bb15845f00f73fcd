"""The target's fused static forward (specvlm.engine.statictarget): the module stack's logits, bit for bit on one token."""
from __future__ import annotations

import pytest
import torch

from helpers.media import make_clip
from specvlm.engine import statickv
from specvlm.engine.loop import rope_dims
from specvlm.engine.prefill import prefill_target
from specvlm.engine.prepare import prepare
from specvlm.engine.statictarget import fused_target
from specvlm.engine.steps import ModelSide, static_forward
from specvlm.models.pair import pair_from_models
from specvlm.spec.devicetree import verify_bias

PROMPT = "describe this video in detail"


def _both_sides(pair, capacity=200):
    """The target's module-stack side and fused side over two copies of one prefilled cache."""
    inputs = prepare(pair, make_clip(), PROMPT).for_target()
    with torch.inference_mode():
        tp = prefill_target(pair, inputs, with_scores=False)
    r = rope_dims(inputs)
    ft = fused_target(pair.target, pair.adapter, r, inputs.next_position + capacity)
    assert ft is not None
    plain = ModelSide(pair.target, pair.adapter, statickv.allocate(tp.cache, capacity), r, torch.float32)
    fused = ModelSide(pair.target, pair.adapter, statickv.allocate(tp.cache, capacity), r, torch.float32, ft)
    return inputs, plain, fused


@pytest.mark.parametrize("fam", ["qwen", "llava"])
def test_fused_target_logits_and_cache_equal_the_module_stack_bitwise(pairs, fam):
    inputs, plain, fused = _both_sides(pairs[(fam, "self")])
    pos = inputs.next_position
    parents = torch.tensor([-1, -1, 0, 2, 1])                         # a tree: root + 5 nodes
    toks = torch.tensor([5, 9, 17, 3, 11, 8])
    depths = torch.tensor([0, 1, 1, 2, 3, 2])
    with torch.inference_mode():
        outs = []
        for side in (plain, fused):
            one = static_forward(side, toks[:1], torch.tensor([pos]), None, None, visible=side.cache.length + 1)
            side.cache.advance(1)
            n = toks.shape[0]
            slots = side.cache.slots[:n] + side.cache.length
            tree = static_forward(side, toks, pos + 1 + depths, slots, verify_bias(parents, torch.float32)[None, None])
            outs.append((one, tree, side.cache.layers[-1].keys.clone(), side.cache.layers[0].values.clone()))
    (one_p, tree_p, k_p, v_p), (one_f, tree_f, k_f, v_f) = outs
    assert torch.equal(one_p, one_f) and torch.equal(v_p, v_f)        # the same ops: the same bits
    # the tree block: the module stack merges prefix and block by log-sum-exp, the fused forward attends in one
    # masked call (steps.ONE_MASK_ROWS); equal up to float rounding, same choices
    torch.testing.assert_close(tree_f, tree_p, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(k_f, k_p, rtol=1e-5, atol=1e-5)
    assert torch.equal(tree_f.argmax(-1), tree_p.argmax(-1))
    assert tree_p.shape == (6, plain.model.get_output_embeddings().weight.shape[0])


def test_fused_target_only_for_float32_plain_decoders(pairs):
    from specvlm.testing.tiny_qwen3_vl import tiny_qwen3_vl

    pair = pairs[("qwen", "self")]
    assert fused_target(pair.target, pair.adapter, 3, 64) is not None
    q3 = pair_from_models(*tiny_qwen3_vl(seed=0))                     # per-head q/k norms: the module stack runs
    assert fused_target(q3.target, q3.adapter, 3, 64) is None
    half = pair_from_models(*tiny_qwen3_vl(seed=0))
    half.target.to(torch.bfloat16)
    assert fused_target(half.target, half.adapter, 3, 64) is None
