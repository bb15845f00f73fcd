"""Lossless, defined: a divergence at a near-tie of the target's logits is told apart from a real mismatch.

A crafted target with two almost identical LM-head rows has near-ties; a verify forward with
rounding-sized noise (what batched bf16 kernels do) may flip them, and the comparison calls that a
near-tie. A deliberately broken verify (it swaps the target's best two logits once) gives a mismatch.
Both broken forwards live here, never in the library.
"""
from __future__ import annotations

from collections import Counter

import pytest
import torch

from helpers.media import make_clip

import specvlm.engine.stream as dec
from specvlm.engine import steps
from specvlm.config import DecodeConfig, TreeConfig
from specvlm.analysis.metrics import compare_outputs
from specvlm.models.pair import pair_from_models
from specvlm.engine.prepare import prepare

PROMPT = "describe this video"
N = 40


def _cfg(method):
    return DecodeConfig(method=method, max_new_tokens=N, stop_at_eos=False, tree=TreeConfig(shape="dynamic"))


def _std_pair(seed=0):
    from specvlm.testing.tiny import tiny_qwen2_5_vl

    target, proc = tiny_qwen2_5_vl(seed=seed)
    draft, d_proc = tiny_qwen2_5_vl(seed=1, hidden=32, layers=1, pad_vocab_to=64)
    return pair_from_models(target, proc, draft, d_proc)


def _patch_verify(monkeypatch, pair, change):
    """Route the target's verify forwards (the target's block forwards in ``verify_step``) through
    ``change(call_index, logits)``."""
    real, calls = steps.static_forward, []

    def forward(side, tokens, positions, block_index, block_bias, *args, **kw):
        out = real(side, tokens, positions, block_index, block_bias, *args, **kw)
        if side.model is not pair.target or block_index is None:
            return out
        calls.append(1)
        return change(len(calls), out)

    monkeypatch.setattr(steps, "static_forward", forward)
    return calls


def test_vanilla_records_one_margin_per_token():
    pair = _std_pair()
    van = dec.generate(pair, prepare(pair, make_clip(), PROMPT), _cfg("vanilla"))
    assert len(van.margins) == len(van.token_ids) == N
    assert all(m >= 0.0 for m in van.margins) and max(van.margins) > 0.01
    assert [s.margin for s in van.steps] == van.margins
    spec = dec.generate(pair, prepare(pair, make_clip(), PROMPT), _cfg("specvlm"))
    assert spec.margins == [] and spec.steps[0].margin == pytest.approx(van.margins[0], abs=1e-5)
    assert compare_outputs(van.token_ids, spec.token_ids, van.margins, torch.float32).kind == "identical"


def test_noisy_verify_flips_only_a_crafted_near_tie():
    pair, clip = _std_pair(), make_clip()
    van0 = dec.generate(pair, prepare(pair, clip, PROMPT), _cfg("vanilla")).token_ids
    a = Counter(van0).most_common(1)[0][0]
    b = next(t for t in range(300, 400) if t not in van0)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():                    # row b = row a up to 1e-7: a near-tie wherever a wins
        w = pair.target.lm_head.weight
        w[b] = w[a] + 1e-7 * torch.randn(w.shape[1], generator=g)
    van = dec.generate(pair, prepare(pair, clip, PROMPT), _cfg("vanilla"))
    ties = [i for i, t in enumerate(van.token_ids) if t in (a, b)]
    assert len(ties) >= 3 and max(van.margins[i] for i in ties) < 1e-4
    mp = pytest.MonkeyPatch()
    try:
        noise = torch.Generator().manual_seed(1)
        _patch_verify(mp, pair, lambda _, lg: lg + (torch.rand(lg.shape, generator=noise) - 0.5) * 2e-4)
        spec = dec.generate(pair, prepare(pair, clip, PROMPT), _cfg("specvlm"))
    finally:
        mp.undo()
    d = compare_outputs(van.token_ids, spec.token_ids, van.margins, torch.float32)
    assert not d.identical and d.kind == "near-tie", d
    assert d.index in ties and {van.token_ids[d.index], spec.token_ids[d.index]} == {a, b}
    assert d.margin == van.margins[d.index] < 1e-4


def test_broken_verify_is_a_mismatch(monkeypatch):
    pair, clip = _std_pair(), make_clip()
    van = dec.generate(pair, prepare(pair, clip, PROMPT), _cfg("vanilla"))

    def swap_best_two(call, logits):         # the 3rd verify: the target's runner-up wins after the root
        if call == 3:
            logits = logits.clone()
            top = logits[0].topk(2).indices
            logits[0, top] = logits[0, top.flip(0)]
        return logits

    calls = _patch_verify(monkeypatch, pair, swap_best_two)
    spec = dec.generate(pair, prepare(pair, clip, PROMPT), _cfg("specvlm"))
    assert len(calls) >= 3
    d = compare_outputs(van.token_ids, spec.token_ids, van.margins, torch.float32)
    assert d.kind == "mismatch" and d.margin is not None and d.margin >= d.threshold, d
    assert spec.token_ids[:d.index] == van.token_ids[:d.index]
    assert "mismatch at token" in d.describe()
