"""Std-SD with a target LM head larger than the draft's vocabulary (Qwen2.5-VL-7B 152,064 vs 3B 151,936).

The target may emit an id the draft has no embedding for; decoding must neither crash nor change
a token (the target decides every token).
"""
from __future__ import annotations

from collections import Counter

import pytest
import torch

from helpers.media import make_clip

from specvlm.config import DecodeConfig, SamplingConfig, TreeConfig
from specvlm.engine.stream import generate
from helpers.hostdrafting import for_draft
from specvlm.engine.loop import draft_substitute
from specvlm.models.pair import pair_from_models
from specvlm.engine.prepare import prepare

PROMPT = "describe this video"
N = 32


def _cfg(method, shape="dynamic", t=0.0, seed=0):
    return DecodeConfig(method=method, max_new_tokens=N, stop_at_eos=False, tree=TreeConfig(shape=shape),
                        sampling=SamplingConfig(temperature=t, seed=seed))


@pytest.fixture(scope="module")
def padded():
    """A target whose LM head (448 rows) favours a padding id >= the draft's 400 rows."""
    from specvlm.testing.tiny import tiny_qwen2_5_vl

    target, proc = tiny_qwen2_5_vl(seed=0, pad_vocab_to=64)
    draft, d_proc = tiny_qwen2_5_vl(seed=1, hidden=32, layers=1, pad_vocab_to=8)
    pair = pair_from_models(target, proc, draft, d_proc)
    rows = draft.get_input_embeddings().weight.shape[0]
    assert target.lm_head.weight.shape[0] > rows
    clip = make_clip()
    common = Counter(generate(pair, prepare(pair, clip, PROMPT), _cfg("vanilla")).token_ids).most_common(1)[0][0]
    with torch.no_grad():       # the padding row now beats the most common token wherever it won
        target.lm_head.weight[rows + 5] = target.lm_head.weight[common] * 1.5
    return pair, clip, rows


def test_for_draft_replaces_only_ids_the_draft_lacks(padded):
    pair, _, rows = padded
    got_rows, sub = draft_substitute(pair)
    assert got_rows == rows and sub == pair.processor.tokenizer.pad_token_id < rows
    assert for_draft([3, rows - 1, rows, rows + 40], rows, sub) == [3, rows - 1, sub, sub]


@pytest.mark.parametrize("method,shape", [("specvlm", "dynamic"), ("none", "chain"), ("specvlm", "static")])
def test_greedy_target_emitting_a_padding_id_is_lossless(padded, method, shape):
    pair, clip, rows = padded
    van = generate(pair, prepare(pair, clip, PROMPT), _cfg("vanilla")).token_ids
    assert sum(t >= rows for t in van) >= 3, van
    assert generate(pair, prepare(pair, clip, PROMPT), _cfg(method, shape)).token_ids == van


def test_sampled_padding_ids_never_crash(padded):
    pair, clip, rows = padded
    seen = 0
    for seed in range(3):
        res = generate(pair, prepare(pair, clip, PROMPT), _cfg("specvlm", t=1.3, seed=seed))
        assert len(res.token_ids) == N and all(0 <= t < 448 for t in res.token_ids)
        seen += sum(t >= rows for t in res.token_ids)
        van = generate(pair, prepare(pair, clip, PROMPT), _cfg("vanilla", t=1.3, seed=seed))
        assert len(van.token_ids) == N
    assert seen > 0
