"""Speculative sampling in the decode loop: reproducible, greedy at temperature -> 0, runs for every shape."""
from __future__ import annotations

import pytest

from helpers.media import make_clip

from specvlm.config import DecodeConfig, SamplingConfig, TreeConfig
from specvlm.engine.stream import generate
from specvlm.models.pair import pair_from_models
from specvlm.engine.prepare import prepare

PROMPT = "describe this video"


def cfg(method, shape="dynamic", t=1.0, seed=0, n=24, top_p=1.0):
    return DecodeConfig(method=method, max_new_tokens=n, stop_at_eos=False, tree=TreeConfig(shape=shape),
                        sampling=SamplingConfig(temperature=t, top_p_sampling=top_p, seed=seed))


@pytest.fixture(scope="module")
def pair(qwen_tiny):
    return pair_from_models(*qwen_tiny)


@pytest.mark.parametrize("method", ["vanilla", "specvlm", "none"])
def test_same_seed_same_output(pair, method):
    clip = make_clip()
    a = generate(pair, prepare(pair, clip, PROMPT), cfg(method, seed=7)).token_ids
    b = generate(pair, prepare(pair, clip, PROMPT), cfg(method, seed=7)).token_ids
    c = generate(pair, prepare(pair, clip, PROMPT), cfg(method, seed=8)).token_ids
    assert a == b and len(a) == 24
    assert a != c


@pytest.mark.parametrize("shape", ["dynamic", "static", "chain"])
def test_tiny_temperature_equals_greedy(pair, shape):
    clip = make_clip()
    greedy = generate(pair, prepare(pair, clip, PROMPT), cfg("vanilla", t=0.0)).token_ids
    assert generate(pair, prepare(pair, clip, PROMPT), cfg("vanilla", t=1e-4)).token_ids == greedy
    assert generate(pair, prepare(pair, clip, PROMPT), cfg("specvlm", shape, t=1e-4)).token_ids == greedy


@pytest.mark.parametrize("shape", ["dynamic", "static", "chain"])
def test_sampling_runs_self_and_std_sd(pair, qwen_tiny, qwen_tiny_draft, shape):
    std = pair_from_models(qwen_tiny[0], qwen_tiny[1], qwen_tiny_draft[0], qwen_tiny_draft[1])
    for p in (pair, std):
        res = generate(p, prepare(p, make_clip(), PROMPT), cfg("specvlm", shape, t=0.8, top_p=0.9))
        assert len(res.token_ids) == 24
        assert all(0 <= a <= 5 for a in res.accept_lengths)


def test_self_sd_without_pruning_accepts_most_samples(pair):
    """Draft == target distribution (no pruning, Self-SD): every drafted chain token is accepted."""
    res = generate(pair, prepare(pair, make_clip(), PROMPT), cfg("none", "chain", t=1.0, n=40))
    assert res.tau > 3.5


@pytest.mark.parametrize("shape", ["dynamic", "chain"])
def test_sampling_with_early_stop(pair, shape):
    """min_prob keeps sampling reproducible and, at temperature -> 0, equal to greedy."""
    clip = make_clip()
    stop = DecodeConfig(method="specvlm", max_new_tokens=24, stop_at_eos=False,
                        tree=TreeConfig(shape=shape, depth=6, min_prob=0.5),
                        sampling=SamplingConfig(temperature=1.0, seed=3))
    a, b = generate(pair, prepare(pair, clip, PROMPT),
                    stop).token_ids, generate(pair, prepare(pair, clip, PROMPT), stop).token_ids
    assert a == b and len(a) == 24
    greedy = generate(pair, prepare(pair, clip, PROMPT), cfg("vanilla", t=0.0)).token_ids
    cold = DecodeConfig(method="specvlm", max_new_tokens=24, stop_at_eos=False,
                        tree=TreeConfig(shape=shape, depth=6, min_prob=0.5),
                        sampling=SamplingConfig(temperature=1e-4, seed=0))
    assert generate(pair, prepare(pair, clip, PROMPT), cold).token_ids == greedy
