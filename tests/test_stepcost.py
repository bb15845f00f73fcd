"""specvlm.bench.stepcost: isolated decode vs verify step costs (the benchmark's verify goal)."""
import pytest
import torch

from specvlm.engine import kv
from specvlm.bench import stepcost
from specvlm.engine.forward import embed_tokens, lm_forward


def test_curve_has_every_size_and_positive_times(qwen_tiny):
    model = qwen_tiny[0]
    c = stepcost.verify_cost_curve(model, 96, sizes=(1, 4, 16), rounds=2, iters=1, warmup=1)
    assert c.kv_tokens == 96 and c.rounds == 2 and c.decode_ms > 0
    assert set(c.verify_ms) == set(c.ratio) == {1, 4, 16}
    assert all(t > 0 for t in c.verify_ms.values()) and all(r > 0 for r in c.ratio.values())
    n, r = c.worst_ratio(4)
    assert n in (1, 4) and r == max(c.ratio[1], c.ratio[4])
    assert c.worst_ratio(0) is None


def test_random_prefill_fills_the_cache_and_matches_one_shot(qwen_tiny):
    model = qwen_tiny[0]
    cache, ad = stepcost.random_prefill(model, 50, chunk=16, seed=3)
    assert kv.cache_length(cache) == 50
    # chunked prefill at explicit positions = one forward over the same tokens
    g = torch.Generator().manual_seed(3)
    vocab = model.get_input_embeddings().weight.shape[0]
    ids = torch.cat([torch.randint(0, vocab, (n,), generator=g) for n in (16, 16, 16, 2)])
    one = kv.new_cache(model)
    with torch.inference_mode():
        lm_forward(model, ad, embed_tokens(model, ids), torch.arange(50).expand(3, 50), one, rows=None)
    torch.testing.assert_close(cache.layers[-1].keys, one.layers[-1].keys, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("bad", [dict(sizes=()), dict(sizes=(0, 2)), dict(rounds=0), dict(iters=0)])
def test_bad_arguments_raise(qwen_tiny, bad):
    with pytest.raises(ValueError):
        stepcost.verify_cost_curve(qwen_tiny[0], 16, **bad)
    with pytest.raises(ValueError):
        stepcost.random_prefill(qwen_tiny[0], 0)
