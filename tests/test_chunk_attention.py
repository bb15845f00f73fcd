"""A long prompt's attention in query chunks inside a stop-checked prefill: bitwise the single call, the
same tokens as plain decoding and ``model.generate()``, and a stop check between chunks."""
from __future__ import annotations

import pytest
import torch
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from helpers.media import make_clip

from specvlm.config import DecodeConfig
from specvlm.engine.prefill import pass_a_length, prefill_target
from specvlm.engine.prepare import prepare
from specvlm.engine.stream import generate, stream
from specvlm.models import chunkattn
from specvlm.models.stopping import checked_layers, stop_between_layers
from specvlm.types import PrefillInfo, Stopped

PROMPT = "describe this video in detail"


@pytest.fixture
def small_chunks(monkeypatch):
    """Chunks of a few rows, so the tiny models' prompts (~150 tokens) are cut into several."""
    monkeypatch.setattr(chunkattn, "CHUNK_WORK", 2 ** 14)
    monkeypatch.setattr(chunkattn, "ROW_ALIGN", 16)


@pytest.fixture(scope="module")
def pair():
    from specvlm.models.pair import pair_from_models
    from specvlm.testing.tiny import tiny_qwen2_5_vl
    return pair_from_models(*tiny_qwen2_5_vl(layers=2))


def test_chunk_bounds_split_the_causal_work_evenly():
    n = 21776
    bounds = chunkattn.chunk_bounds(n, 4, 64)
    assert bounds[0] == 0 and bounds[-1] == n and len(bounds) == 9
    assert all(b % chunkattn.ROW_ALIGN == 0 for b in bounds[1:-1])
    work = [(b * (b + 1) - a * (a + 1)) // 2 * 4 * 64 for a, b in zip(bounds, bounds[1:])]
    assert max(work) <= chunkattn.CHUNK_WORK * 1.1 and min(work) >= chunkattn.CHUNK_WORK * 0.8
    assert chunkattn.chunk_bounds(4096, 4, 64) == [0, 4096]        # fits one chunk
    assert chunkattn.chunk_bounds(1000, 1, 1, work=1, align=256) == [0, 256, 512, 1000]   # the last chunk keeps >= align rows
    assert chunkattn.checks_per_layer(n, 4, 64, "cpu", torch.float32) == 8
    assert chunkattn.checks_per_layer(n, 4, 64, "cpu", torch.bfloat16) == 1


class _Module(torch.nn.Module):
    is_causal = True

    def __init__(self, groups: int) -> None:
        super().__init__()
        self.num_key_value_groups = groups


@pytest.mark.parametrize("heads,kv_heads", [(4, 2), (4, 4)])
def test_chunked_causal_attention_is_bitwise_the_single_call(small_chunks, heads, kv_heads):
    torch.manual_seed(0)
    n, d = 301, 16
    q, k, v = torch.randn(1, heads, n, d), torch.randn(1, kv_heads, n, d), torch.randn(1, kv_heads, n, d)
    assert len(chunkattn.chunk_bounds(n, heads, d)) > 5
    module = _Module(heads // kv_heads)
    ref, _ = sdpa_attention_forward(module, q, k, v, None, scaling=d ** -0.5)
    assert not chunkattn.applies(module, q, k, 0.0, None)       # outside a stop-checked block: one call
    with stop_between_layers(lambda: False):
        assert chunkattn.applies(module, q, k, 0.0, None)
        assert not chunkattn.applies(module, q[:, :, -8:], k, 0.0, None)   # a cache before the query
        out = chunkattn.causal_attention(q, k, v, d ** -0.5)
    assert out.shape == ref.shape == (1, n, heads, d)
    if torch.backends.cpu.get_cpu_capability().startswith("AVX512"):
        assert torch.equal(out, ref)                       # the kernel's blocks are the same in both calls
    else:   # AVX2 kernels round a masked chunk differently from the causal call: float32 rounding apart
        assert (out - ref).abs().max().item() <= 1e-6


def test_chunked_prefill_keeps_logits_cache_and_scores_bitwise(small_chunks, pair):
    inputs = prepare(pair, make_clip(16), PROMPT)
    assert chunkattn.model_checks_per_layer(pair.target, pass_a_length(inputs)) > 3
    with torch.inference_mode():
        ref = prefill_target(pair, inputs, with_scores=True)
        polls = []
        with stop_between_layers(lambda: polls.append(1) or False):
            got = prefill_target(pair, inputs, with_scores=True)
    assert torch.equal(ref.last_logits, got.last_logits) and torch.equal(ref.scores, got.scores)
    assert all(torch.equal(a.keys, b.keys) and torch.equal(a.values, b.values)
               for a, b in zip(ref.cache.layers, got.cache.layers))
    layers = pair.target.config.get_text_config().num_hidden_layers
    vision = checked_layers(pair.target)
    per_layer = chunkattn.model_checks_per_layer(pair.target, pass_a_length(inputs))
    assert len(polls) == 1 + vision + layers * per_layer + layers   # entry, blocks, pass A chunks, pass B


@pytest.mark.parametrize("method", ["vanilla", "specvlm"])
def test_chunked_prefill_decodes_the_same_tokens_as_plain_and_hf_generate(small_chunks, pair, method):
    clip = make_clip(16)
    inputs = prepare(pair, clip, PROMPT)
    cfg = DecodeConfig(method=method, max_new_tokens=24, stop_at_eos=False)
    plain = generate(pair, inputs, cfg).token_ids
    events = list(stream(pair, inputs, cfg, should_stop=lambda: False))
    assert isinstance(events[0], PrefillInfo)
    assert [t for ev in events[1:] for t in ev.token_ids] == plain
    meta = {"video_metadata": [{"fps": 4.0, "total_num_frames": 16, "frames_indices": list(range(16))}],
            "do_sample_frames": False}
    enc = pair.processor(text=[inputs.prompt_text], videos=[clip.frames], return_tensors="pt", **meta)
    assert torch.equal(enc["input_ids"], inputs.input_ids)
    out = pair.target.generate(**enc, max_new_tokens=24, min_new_tokens=24, do_sample=False)
    assert out[0, enc["input_ids"].shape[1]:].tolist() == plain


def test_a_stop_between_chunks_ends_the_layer(small_chunks, pair):
    """A stop that comes after the first chunk of decoder layer 0 ends the prefill inside that layer."""
    inputs = prepare(pair, make_clip(16), PROMPT)
    vision = checked_layers(pair.target)
    calls, mlp = [], []
    hook = pair.adapter.language_model(pair.target).layers[0].mlp.register_forward_pre_hook(lambda *_: mlp.append(1))
    stop = lambda: calls.append(1) or len(calls) > 1 + vision + 1  # noqa: E731  True at layer 0's 2nd check
    try:
        with torch.inference_mode(), pytest.raises(Stopped), stop_between_layers(stop):
            prefill_target(pair, inputs, with_scores=False)
    finally:
        hook.remove()
    assert vision > 0 and len(calls) == 1 + vision + 2 and mlp == []
