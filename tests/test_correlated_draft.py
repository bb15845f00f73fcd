"""Std-SD with a draft correlated with the target, for every family: the draft is the target's own first
decoder layer (a truncated copy) with a padded vocabulary, so verify steps accept some drafted tokens and
reject others, and the output must still equal vanilla token by token."""
from __future__ import annotations

import copy

import pytest
import torch

from helpers.media import make_clip

from specvlm.config import DecodeConfig, PruneConfig, SamplingConfig, TreeConfig
from specvlm.engine.prepare import prepare
from specvlm.engine.stream import generate
from specvlm.models.pair import pair_from_models

PROMPT = "describe this video in detail"
N, DEPTH, PAD = 48, 4, 32


def _target(family: str):
    from specvlm.testing import tiny, tiny_qwen3_vl

    build = {"qwen2.5-vl": tiny.tiny_qwen2_5_vl, "llava-onevision": tiny.tiny_llava_onevision,
             "smolvlm": tiny.tiny_smolvlm, "qwen3-vl": tiny_qwen3_vl.tiny_qwen3_vl}[family]
    return build(seed=0, layers=2)


def truncated_copy(model, adapter, layers: int = 1, pad: int = PAD):
    """The target's first ``layers`` decoder layers, with ``pad`` extra (random) vocabulary rows."""
    draft = copy.deepcopy(model)
    lm = adapter.language_model(draft)
    lm.layers = torch.nn.ModuleList(lm.layers[:layers])
    for cfg in {id(c): c for c in (lm.config, draft.config.get_text_config(decoder=True))}.values():
        cfg.num_hidden_layers = layers
        if getattr(cfg, "layer_types", None):
            cfg.layer_types = cfg.layer_types[:layers]
    rows = draft.get_input_embeddings().weight.shape[0]
    draft.resize_token_embeddings(rows + pad, mean_resizing=False)
    return draft


@pytest.fixture(scope="module", params=["qwen2.5-vl", "llava-onevision", "qwen3-vl", "smolvlm"])
def correlated(request):
    target, processor = _target(request.param)
    from specvlm.models.registry import adapter_for

    draft = truncated_copy(target, adapter_for(target))
    pair = pair_from_models(target, processor, draft, processor)
    assert pair.draft.get_output_embeddings().weight.shape[0] == pair.shared_vocab + PAD
    inputs = prepare(pair, make_clip(num_frames=8), PROMPT)
    vanilla = generate(pair, inputs, DecodeConfig(method="vanilla", max_new_tokens=N, stop_at_eos=False))
    return pair, inputs, vanilla.token_ids


@pytest.mark.parametrize("method,shape", [("specvlm", "chain"), ("none", "chain"), ("specvlm", "dynamic")])
def test_partial_acceptance_stays_lossless(correlated, method, shape):
    pair, inputs, vanilla = correlated
    tree = TreeConfig(shape=shape, depth=DEPTH, top_k=2, total_tokens=8)
    prune = PruneConfig(drop_rate=0.5)   # the one-layer draft needs half the video to track the target
    res = generate(pair, inputs, DecodeConfig(method=method, max_new_tokens=N, stop_at_eos=False, tree=tree,
                                              prune=prune))
    assert res.token_ids == vanilla
    assert any(0 < a < DEPTH for a in res.accept_lengths), res.accept_lengths   # partial acceptance happened
    assert all(0 <= a <= DEPTH for a in res.accept_lengths)


def test_sampled_chain_runs_on_the_correlated_draft(correlated):
    pair, inputs, _ = correlated
    cfg = DecodeConfig(max_new_tokens=16, stop_at_eos=False, tree=TreeConfig(shape="chain", depth=DEPTH),
                       sampling=SamplingConfig(temperature=0.8, seed=3))
    a, b = generate(pair, inputs, cfg), generate(pair, inputs, cfg)
    assert a.token_ids == b.token_ids and len(a.token_ids) == 16    # seeded: reproducible
    assert any(x > 0 for x in a.accept_lengths)
