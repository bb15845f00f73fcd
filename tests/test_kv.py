"""KV commit: the target cache after the engine's verify forward + commit equals sequential decoding of the accepted
tokens."""
from __future__ import annotations

import torch

from helpers.media import make_clip

from specvlm.engine import kv
from specvlm.engine.forward import commit, embed_tokens, lm_forward, verify_tree
from specvlm.engine.prefill import prefill_target
from specvlm.models.pair import pair_from_models
from specvlm.spec.drafters import greedy_accept
from specvlm.spec.tree import DraftTree


def test_commit_equals_sequential_decode(qwen_tiny):
    pair = pair_from_models(*qwen_tiny)
    model, ad = pair.target, pair.adapter
    inputs = ad.prepare(pair.processor, model, make_clip(), "describe")
    with torch.inference_mode():
        a = prefill_target(pair, inputs, with_scores=False)
        b = prefill_target(pair, inputs, with_scores=False)
        pos, root = inputs.next_position, a.first_token
        # sequential greedy tokens after root
        seq, t, cache_seq = [], root, b.cache
        for i in range(3):
            lg = lm_forward(model, ad, embed_tokens(model, [t]), torch.full((3, 1), pos + i), cache_seq)
            t = int(lg[-1].argmax())
            seq.append(t)
        # a tree whose accepted path (seq[0], seq[1]) sits at nodes 1 and 3, with decoys around it
        tree = DraftTree(torch.tensor([(seq[0] + 1) % 400, seq[0], (seq[1] + 2) % 400, seq[1]]),
                         torch.tensor([-1, -1, 1, 1]), torch.tensor([1, 1, 2, 2]), torch.zeros(4))
        Lt = kv.cache_length(a.cache)
        logits = verify_tree(model, ad, a.cache, root, tree, pos, 3)
        assert logits.shape[0] == 5 and kv.cache_length(a.cache) == Lt + 5   # root + 4 nodes fed
        path, bonus = greedy_accept(tree, logits.argmax(-1))
        assert path == [1, 3] and bonus == seq[2]
        commit(a.cache, Lt, path)
        # cache_seq holds root, seq0, seq1, seq2 after the prompt; drop seq2's entry
        kv.truncate(cache_seq, Lt + 3)
        assert kv.cache_length(a.cache) == kv.cache_length(cache_seq) == Lt + 3
        for la, lb in zip(a.cache.layers, cache_seq.layers):
            torch.testing.assert_close(la.keys, lb.keys, atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(la.values, lb.values, atol=1e-5, rtol=1e-5)


def test_truncate_and_keep_tail_shapes():
    from specvlm.engine.kv import PreallocCache

    cache = PreallocCache(2)
    k = torch.arange(10, dtype=torch.float32).view(1, 1, 10, 1).expand(1, 2, 10, 3).contiguous()
    for i in range(2):
        cache.update(k, k.clone(), i)
    kv.keep_tail(cache, 4, torch.tensor([3, 5]))
    assert cache.layers[0].keys[0, 0, :, 0].tolist() == [0, 1, 2, 3, 7, 9]
    kv.truncate(cache, 2)
    assert kv.cache_length(cache) == 2
    cache.update(torch.full((1, 2, 1, 3), 42.0), torch.full((1, 2, 1, 3), 42.0), 0)
    assert cache.layers[0].keys[0, 0, :, 0].tolist() == [0, 1, 42]
