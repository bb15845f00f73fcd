"""The draft's fused static forward: the module stack's log-probs on every step, lossless output, refusals."""
from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch

from helpers.media import make_clip

import specvlm.engine.stream as dec
from specvlm.config import DecodeConfig, TreeConfig
from specvlm.engine import statickv
from specvlm.engine import weights as wt
from specvlm.engine.prefill import prefill_draft, prefill_target
from specvlm.engine.prepare import prepare
from specvlm.engine.staticdraft import fused_draft
from specvlm.engine.steps import ModelSide, draft_step, spec_state, tree_shape
from specvlm.engine.weights import FusedUnsupported
from specvlm.models.pair import pair_from_models

PROMPT = "describe this video in detail"
ROOT = Path(__file__).resolve().parents[1]
BUNDLED = ROOT / "assets" / "model"
LOGP_TOL = 1e-4
"""Log-probs are ~ -6 here; folding the norm weights and the query scale into the matmuls changes only the
rounding order (a few fp32 ulps per op), while a wrong mask, position or weight moves them by > 0.1."""


def _prefilled(pair, stride=3):
    inputs = pair.adapter.prepare(pair.processor, pair.target, make_clip(), PROMPT)
    tp = prefill_target(pair, inputs.for_target(), with_scores=False)
    d_cache, n = prefill_draft(pair, inputs, tp, torch.arange(0, inputs.num_video_tokens, stride))
    return inputs, tp, d_cache, n


def _draft_both(pair, tree: TreeConfig, steps: int = 3) -> float:
    """The same draft steps through the fused forward and the module stack: the largest log-prob gap of the
    drafted trees' scores (the trees themselves must be equal)."""
    cpu = torch.device("cpu")
    with torch.inference_mode():
        inputs, tp, d_cache, n = _prefilled(pair)
        R = inputs.positions.shape[0]
        shape = tree_shape(tree, pair.shared_vocab, cpu)
        runs = []
        for fused in (fused_draft(pair, R, inputs.next_position + 64), None):
            side = ModelSide(pair.draft, pair.draft_adapter, statickv.allocate(d_cache, n + 64), R, torch.float32,
                             fused)
            st = spec_state(int(tp.first_token), inputs.next_position, shape, 10**6, 0, cpu)
            trees = []
            for _ in range(steps):
                draft_step(side, st, shape, 0, pair.shared_vocab)
                trees.append((st.tokens.clone(), st.parents.clone(), st.scores.clone()))
                st.pending[:2] = st.tokens[:2]          # as if two nodes and a bonus were accepted
                st.pending[2] = 7
                st.n_pending.fill_(3)
                st.pos.add_(int(st.n_pending))
            runs.append(trees)
    worst = 0.0
    for (ta, pa, sa), (tb, pb, sb) in zip(*runs):
        assert torch.equal(ta, tb) and torch.equal(pa, pb)
        worst = max(worst, float((sa - sb).abs().max()))
    return worst


@pytest.mark.parametrize("fam", ["qwen", "llava"])
@pytest.mark.parametrize("mode", ["std", "self"])
@pytest.mark.parametrize("tree", [TreeConfig(depth=4, top_k=3, total_tokens=10), TreeConfig(shape="chain", depth=5),
                                  TreeConfig(shape="static")], ids=["dynamic", "chain", "static"])
def test_same_log_probs_as_the_module_stack(pairs, fam, mode, tree):
    assert _draft_both(pairs[(fam, mode)], tree) < LOGP_TOL


def test_unsupported_draft_is_refused_and_runs_through_the_module_stack(pairs):
    pair = pairs[("qwen", "std")]
    draft = copy.deepcopy(pair.draft)
    pair.draft_adapter.language_model(draft).layers[0].self_attn.q_norm = torch.nn.Identity()
    odd = pair_from_models(pair.target, pair.processor, draft, pair.processor)
    with pytest.raises(FusedUnsupported, match="q/k norms"):
        fused_draft(odd, 3, 64)
    inputs = prepare(odd, make_clip(), PROMPT)
    cfg = DecodeConfig(method="vanilla", max_new_tokens=16, stop_at_eos=False)
    want = dec.generate(odd, inputs, cfg).token_ids
    assert dec.generate(odd, inputs, DecodeConfig(max_new_tokens=16, stop_at_eos=False)).token_ids == want


def test_draft_spread_over_devices_is_refused(pairs):
    """A draft whose layers sit on several devices (a ``device_map`` over GPUs; here layer 0 on the ``meta``
    device stands for a second device) gets the module stack, which moves activations between the layers'
    devices; the fused forward would run every layer on the embedding's device."""
    pair = pairs[("qwen", "std")]
    draft = copy.deepcopy(pair.draft)
    pair.draft_adapter.language_model(draft).layers[0].to("meta")
    spread = pair_from_models(pair.target, pair.processor, draft, pair.processor)
    with pytest.raises(FusedUnsupported, match="devices"):
        fused_draft(spread, 3, 64)
    assert fused_draft(pair, 3, 64) is not None


def test_bundled_pair_same_log_probs_and_lossless():
    from specvlm.models.loading import load_pair

    pair = load_pair(str(BUNDLED / "target"), str(BUNDLED / "draft"), device="cpu", dtype="float32")
    assert _draft_both(pair, TreeConfig(shape="chain", depth=4)) < LOGP_TOL
    clip = make_clip(num_frames=8, side=112)
    cfg = DecodeConfig(method="vanilla", max_new_tokens=48, stop_at_eos=False)
    vanilla = dec.generate(pair, prepare(pair, clip, "Describe this video in detail."), cfg)
    spec = dec.generate(pair, prepare(pair, clip, "Describe this video in detail."),
                        DecodeConfig(max_new_tokens=48, stop_at_eos=False))
    assert spec.token_ids == vanilla.token_ids and spec.tau > 0


def test_draft_cost_measures_both_forwards(pairs):
    from specvlm.bench.stepcost import draft_cost

    pair = pairs[("qwen", "std")]
    fast = draft_cost(pair, 64, 16, width=3, rounds=1, iters=1, warmup=1)
    slow = draft_cost(pair, 64, 16, width=3, fast=False, rounds=1, iters=1, warmup=1)
    assert (fast.runner, slow.runner) == ("fused", "module stack")
    for c in (fast, slow):
        assert c.decode_ms > 0 and c.level_ms > 0 and c.chain_ms > 0 and c.level_ratio > 0
        assert (c.target_tokens, c.draft_tokens, c.width, c.rounds) == (64, 16, 3, 1)
    with pytest.raises(ValueError, match="width"):
        draft_cost(pair, 64, 16, width=0)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_a_half_precision_draft_gets_the_fused_forward(dtype):
    """GPUs load in bf16 (fp16 without it): the norm check runs in float32, so the module's own rounding does
    not send every half-precision draft to the module stack, while a norm that is not an RMS norm is refused."""
    from specvlm.models.loading import load_pair

    pair = load_pair(str(BUNDLED / "target"), str(BUNDLED / "draft"), device="cpu", dtype=dtype)
    assert fused_draft(pair, 3, 64) is not None
    norm = pair.draft_adapter.language_model(pair.draft).layers[0].input_layernorm
    assert wt._norm_weight(norm) is norm.weight
    layer_norm = torch.nn.LayerNorm(norm.weight.shape[0]).to(norm.weight.dtype)
    layer_norm.variance_epsilon = 1e-6    # the attribute an RMS norm has, on a norm that subtracts the mean
    with torch.no_grad():
        layer_norm.bias.fill_(0.5)
    with pytest.raises(FusedUnsupported, match="not weight"):
        wt._norm_weight(layer_norm)
