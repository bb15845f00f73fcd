"""KV caches: the prefill's preallocating cache, and the static buffer's commit of an accepted tree path."""
from __future__ import annotations

import torch

from helpers.media import make_clip

from specvlm.engine import kv, statickv
from specvlm.engine.forward import embed_tokens, lm_forward
from specvlm.engine.prefill import prefill_target
from specvlm.engine.steps import ModelSide, spec_state, tree_shape, verify_step
from specvlm.config import TreeConfig
from specvlm.models.pair import pair_from_models


def test_commit_equals_sequential_decode(qwen_tiny):
    """A verify over a tree whose accepted path sits at nodes 1 and 3, with decoys around it, leaves the static
    buffer holding what decoding the path one token at a time leaves in a cache."""
    pair = pair_from_models(*qwen_tiny)
    model, ad = pair.target, pair.adapter
    inputs = ad.prepare(pair.processor, model, make_clip(), "describe")
    cpu = torch.device("cpu")
    with torch.inference_mode():
        a = prefill_target(pair, inputs, with_scores=False)
        b = prefill_target(pair, inputs, with_scores=False)
        pos, root, L = inputs.next_position, a.first_token, int(inputs.input_ids.shape[1])
        seq, t, cache_seq = [], root, b.cache
        for i in range(3):
            lg = lm_forward(model, ad, embed_tokens(model, [t]), torch.full((3, 1), pos + i), cache_seq)
            t = int(lg[-1].argmax())
            seq.append(t)
        side = ModelSide(model, ad, statickv.allocate(a.cache, L + 16), 3, torch.float32)
        shape = tree_shape(TreeConfig(shape="dynamic", depth=2, top_k=2, total_tokens=4), pair.shared_vocab, cpu)
        st = spec_state(root, pos, shape, 10**6, 0, cpu)
        st.tokens.copy_(torch.tensor([(seq[0] + 1) % 400, seq[0], (seq[1] + 2) % 400, seq[1]]))
        st.parents.copy_(torch.tensor([-1, -1, 1, 1]))
        st.valid.fill_(True)
        verify_step(side, st, shape, 10**6, 0)
        assert st.out[:3].tolist() == [2, seq[0], seq[1]] and int(st.out[-2]) == seq[2]   # path [1, 3], bonus
        assert st.path.tolist() == [1, 3] and int(side.cache.length) == L + 3
        kv.truncate(cache_seq, L + 3)                # root, seq0, seq1 after the prompt; drop seq2's entry
        for la, lb in zip(side.cache.layers, cache_seq.layers):
            torch.testing.assert_close(la.keys[..., :L + 3, :], lb.keys, atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(la.values[..., :L + 3, :], lb.values, atol=1e-5, rtol=1e-5)


def test_truncate_shapes():
    from specvlm.engine.kv import PreallocCache

    cache = PreallocCache(2)
    k = torch.arange(10, dtype=torch.float32).view(1, 1, 10, 1).expand(1, 2, 10, 3).contiguous()
    for i in range(2):
        cache.update(k, k.clone(), i)
    kv.truncate(cache, 2)
    assert kv.cache_length(cache) == 2
    cache.update(torch.full((1, 2, 1, 3), 42.0), torch.full((1, 2, 1, 3), 42.0), 0)
    assert cache.layers[0].keys[0, 0, :, 0].tolist() == [0, 1, 42]
