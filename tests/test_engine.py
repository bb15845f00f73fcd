"""End-to-end losslessness of speculative decoding on tiny models of both families."""
from __future__ import annotations

import copy

import pytest
import torch

from helpers.media import make_clip

from specvlm.engine import kv
from specvlm.config import PRUNE_METHODS, DecodeConfig, TreeConfig
from specvlm.engine.prepare import prepare
from specvlm.engine.stream import generate, stream
from specvlm.models.errors import TokenizerMismatchError
from specvlm.models.pair import pair_from_models
from specvlm.types import PrefillInfo

PROMPT = "describe this video in detail"
N = 64


def _cfg(method="vanilla", shape="dynamic", n=N, eos=False, **tree):
    return DecodeConfig(method=method, max_new_tokens=n, stop_at_eos=eos, tree=TreeConfig(shape=shape, **tree))


@pytest.fixture(scope="module")
def vanilla(pairs):
    clip = make_clip()
    return {fam: generate(pairs[(fam, "self")], prepare(pairs[(fam, "self")], clip, PROMPT),
                          _cfg()) for fam in ("qwen", "llava")}


def test_caller_code_between_events_runs_outside_inference_mode(pairs):
    """Only the engine's own work runs under torch.inference_mode(): a tensor the caller makes between
    two events is a normal tensor that can take part in autograd."""
    made = []
    for method in ("vanilla", "specvlm"):
        for _ in stream(pairs[("qwen", "std")], prepare(pairs[("qwen", "std")], make_clip(), PROMPT),
                        _cfg(method, n=4)):
            assert not torch.is_inference_mode_enabled()
            made.append(torch.ones(2, requires_grad=True) * 2)
    assert len(made) == 2 * (1 + 4)
    assert not any(t.is_inference() for t in made) and all(t.requires_grad for t in made)


@pytest.mark.parametrize("fam", ["qwen", "llava"])
def test_tiny_models_are_varied(vanilla, fam):
    ids = vanilla[fam].token_ids
    assert len(ids) == N
    assert len(set(ids)) >= 16, ids


@pytest.mark.parametrize("fam", ["qwen", "llava"])
def test_vanilla_equals_hf_generate(pairs, vanilla, fam):
    pair = pairs[(fam, "self")]
    clip = make_clip()
    inputs = pair.adapter.prepare(pair.processor, pair.target, clip, PROMPT)
    if fam == "qwen":
        enc = pair.processor(text=[inputs.prompt_text], videos=[clip.frames], do_sample_frames=False,
                             video_metadata=[{"fps": 4.0, "total_num_frames": 8, "frames_indices": list(range(8))}],
                             return_tensors="pt")
    else:
        enc = pair.processor(text=[inputs.prompt_text], videos=[clip.frames], return_tensors="pt")
    assert torch.equal(enc["input_ids"], inputs.input_ids)
    out = pair.target.generate(**enc, max_new_tokens=N, min_new_tokens=N, do_sample=False)
    assert out[0, enc["input_ids"].shape[1]:].tolist() == vanilla[fam].token_ids


def test_long_low_fps_video_positions_match_hf_generate(pairs):
    """32 frames at 1 fps: temporal M-RoPE positions exceed the text positions after the video."""
    pair = pairs[("qwen", "self")]
    clip = make_clip(32, 56, seed=5, fps=1.0)
    inputs = pair.adapter.prepare(pair.processor, pair.target, clip, PROMPT)
    assert int(inputs.positions.max()) > int(inputs.positions[0, -1])
    enc = pair.processor(text=[inputs.prompt_text], videos=[clip.frames], do_sample_frames=False,
                         video_metadata=[{"fps": 1.0, "total_num_frames": 32, "frames_indices": list(range(32))}],
                         return_tensors="pt")
    out = pair.target.generate(**enc, max_new_tokens=24, min_new_tokens=24, do_sample=False)
    van = generate(pair, prepare(pair, clip, PROMPT), _cfg(n=24))
    assert out[0, enc["input_ids"].shape[1]:].tolist() == van.token_ids
    spec = generate(pair, prepare(pair, clip, PROMPT), _cfg("specvlm", n=24))
    assert spec.token_ids == van.token_ids


@pytest.mark.parametrize("fam", ["qwen", "llava"])
@pytest.mark.parametrize("method", PRUNE_METHODS)
def test_every_pruning_method_is_lossless(pairs, vanilla, fam, method):
    res = generate(pairs[(fam, "self")], prepare(pairs[(fam, "self")], make_clip(), PROMPT), _cfg(method))
    assert res.token_ids == vanilla[fam].token_ids
    assert res.prefill.prune.method == method
    expected_k = res.num_video_tokens if method == "none" else max(1, int(res.num_video_tokens * 0.1 + 1e-9))
    assert res.num_kept == expected_k


@pytest.mark.parametrize("fam", ["qwen", "llava"])
@pytest.mark.parametrize("mode", ["self", "std"])
@pytest.mark.parametrize("shape", ["dynamic", "static", "chain"])
def test_tree_shapes_self_and_std_sd_are_lossless(pairs, vanilla, fam, mode, shape):
    for method in ("specvlm", "none"):
        res = generate(pairs[(fam, mode)], prepare(pairs[(fam, mode)], make_clip(), PROMPT), _cfg(method, shape))
        assert res.token_ids == vanilla[fam].token_ids, (method, shape)
        depth = 5   # TreeConfig's depth; the static official-25 tree is 5 deep too
        assert all(0 <= a <= depth and len(st.token_ids) <= a + 1 for a, st in zip(res.accept_lengths, res.steps[1:]))
        if mode == "self" and method == "none":   # the draft is the target: its greedy path is always accepted
            # (a dynamic tree keeps the 16 nodes of highest path probability, which may cut that path short)
            full = res.accept_lengths[:-1]
            assert (all(a >= 1 for a in full) if shape == "dynamic" else full == [depth] * len(full)), \
                (shape, res.accept_lengths)


def test_self_sd_without_pruning_accepts_long_paths(pairs, vanilla):
    """With every video token the Self-SD draft equals the target: every drafted chain token is accepted."""
    res = generate(pairs[("qwen", "self")], prepare(pairs[("qwen", "self")], make_clip(), PROMPT),
                   _cfg("none", "chain", depth=4))
    assert res.token_ids == vanilla["qwen"].token_ids
    assert res.accept_lengths[:-1] == [4] * (len(res.accept_lengths) - 1)
    assert res.tau > 3.5
    assert res.tokens_per_target_forward == pytest.approx((N - 1) / len(res.accept_lengths))


@pytest.mark.parametrize("n", [1, 2, 37, 50])
def test_max_new_tokens_not_a_multiple_of_step(pairs, vanilla, n):
    res = generate(pairs[("qwen", "self")], prepare(pairs[("qwen", "self")], make_clip(), PROMPT),
                   _cfg("none", "chain", n=n, depth=4))
    assert res.token_ids == vanilla["qwen"].token_ids[:n]


@pytest.mark.parametrize("fam", ["qwen", "llava"])
def test_eos_inside_an_accepted_path(pairs, fam):
    """Pick a token the draft got accepted mid-path and declare it EOS: both decoders stop right there."""
    pair = copy.copy(pairs[(fam, "self")])
    clip = make_clip()
    res = generate(pair, prepare(pair, clip, PROMPT), _cfg("none", "chain", depth=4), record_trees=True)
    seen: set[int] = set()
    eos = None
    for st in res.steps:
        for j, tok in enumerate(st.token_ids):
            if tok not in seen and st.from_draft[j] and j < len(st.token_ids) - 1 and j > 0:
                eos = tok
                break
            seen.add(tok)
        if eos is not None:
            break
    assert eos is not None
    gc = pair.target.generation_config
    old = gc.eos_token_id
    try:
        gc.eos_token_id = eos
        pair.processor.tokenizer.eos_token = pair.processor.tokenizer.convert_ids_to_tokens(eos)
        v = generate(pair, prepare(pair, clip, PROMPT), _cfg(n=N, eos=True))
        s = generate(pair, prepare(pair, clip, PROMPT), _cfg("none", "chain", n=N, eos=True, depth=4))
    finally:
        gc.eos_token_id = old
        pair.processor.tokenizer.eos_token = "<|im_end|>"
    assert v.token_ids[-1] == eos and eos not in v.token_ids[:-1]
    assert s.token_ids == v.token_ids


def test_same_instance_serves_different_requests(pairs):
    """No state leaks across requests (rope deltas, caches): results equal fresh instances'."""
    from specvlm.testing.tiny import tiny_qwen2_5_vl

    pair = pairs[("qwen", "self")]
    reqs = [(make_clip(8, 112, seed=3), "what is this"), (make_clip(12, 84, seed=4), PROMPT + " and its colours"),
            (make_clip(8, 112, seed=3), "what is this")]
    got = [generate(pair, prepare(pair, c, p), _cfg("specvlm", n=24)).token_ids for c, p in reqs]
    assert got[0] == got[2]
    for (c, p), ids in zip(reqs[:2], got[:2]):
        fresh = pair_from_models(*tiny_qwen2_5_vl(seed=0))
        assert generate(fresh, prepare(fresh, c, p), _cfg("vanilla", n=24)).token_ids == ids


def test_stream_events(pairs):
    events = list(stream(pairs[("qwen", "self")], prepare(pairs[("qwen", "self")], make_clip(), PROMPT),
                         _cfg("specvlm", n=20), record_trees=True))
    info = events[0]
    assert isinstance(info, PrefillInfo)
    assert info.num_video_tokens == 64 and info.prune.num_kept == 6
    assert info.token_grid.shape == (64, 3) and info.frames_per_token == 2
    assert info.prune.scores.shape == (64,) and torch.isfinite(info.prune.scores).all()
    steps = events[1:]
    assert steps[0].step == 0 and len(steps[0].token_ids) == 1
    assert sum(len(s.token_ids) for s in steps) == 20
    for s in steps[1:]:
        assert s.tree is not None and s.tree_size == len(s.tree.tokens) <= 16
        assert s.accept_length == sum(s.from_draft)
        assert s.tree.accepted_nodes == [] or s.tree.parents[s.tree.accepted_nodes[0]] == -1


def test_should_stop_ends_the_loop(pairs):
    events = []
    stop = lambda: len(events) >= 5  # noqa: E731  polled before every step (and prefill layer)
    pair = pairs[("qwen", "self")]
    for ev in stream(pair, prepare(pair, make_clip(), PROMPT), _cfg("specvlm", n=64), should_stop=stop):
        events.append(ev)
    assert len(events) == 5 and isinstance(events[0], PrefillInfo)  # the prefill, step 0, then 3 verify steps


def test_std_sd_padded_vocab_and_tokenizer_check(pairs, qwen_tiny, llava_tiny):
    pair = pairs[("qwen", "std")]
    assert pair.shared_vocab == min(pair.target.lm_head.weight.shape[0], pair.draft.lm_head.weight.shape[0])
    assert pair.target.lm_head.weight.shape[0] != pair.draft.lm_head.weight.shape[0]
    with pytest.raises(TokenizerMismatchError):
        pair_from_models(qwen_tiny[0], qwen_tiny[1], llava_tiny[0], llava_tiny[1])


@pytest.mark.parametrize("fam", ["qwen", "llava"])
def test_streamed_text_deltas_join_to_the_full_text(pairs, fam):
    pair = pairs[(fam, "self")]
    events = list(stream(pair, prepare(pair, make_clip(), PROMPT), _cfg("specvlm", n=40)))
    ids = [t for e in events[1:] for t in e.token_ids]
    assert "".join(e.text for e in events[1:]) == pair.processor.tokenizer.decode(ids, skip_special_tokens=True)


@pytest.mark.parametrize("fam", ["qwen", "llava"])
@pytest.mark.parametrize("shape", ["dynamic", "chain"])
def test_early_stop_min_prob_is_lossless_and_drafts_less(pairs, vanilla, fam, shape):
    """TreeConfig.min_prob shrinks the drafted trees but never changes a token (Std-SD and Self-SD)."""
    for mode in ("std", "self"):
        full = [e for e in stream(pairs[(fam, mode)], prepare(pairs[(fam, mode)], make_clip(), PROMPT),
                                  _cfg("specvlm", shape, depth=6))
                if not isinstance(e, PrefillInfo)][1:]
        cut = [e for e in stream(pairs[(fam, mode)], prepare(pairs[(fam, mode)], make_clip(), PROMPT),
                                 _cfg("specvlm", shape, depth=6, min_prob=0.5)) if not isinstance(e, PrefillInfo)][1:]
        assert [t for e in cut for t in e.token_ids] == vanilla[fam].token_ids[1:], mode
        n_full = sum(e.tree_size for e in full) / len(full)
        n_cut = sum(e.tree_size for e in cut) / len(cut)
        assert 1 <= n_cut < n_full, (mode, n_cut, n_full)


@pytest.mark.parametrize("mode", ["self", "std"])
def test_prepared_inputs_and_a_shared_prefill_give_the_same_tokens(pairs, vanilla, mode):
    """prepare() once, prefill the target once, decode several methods: the tokens do not change."""
    from specvlm.engine.prefill import prefill_target
    from specvlm.engine.forward import prompt_video
    from specvlm.engine.prepare import prepare

    pair = pairs[("qwen", mode)]
    inputs = prepare(pair, make_clip(), PROMPT)
    assert generate(pair, inputs, _cfg()).token_ids == vanilla["qwen"].token_ids
    with torch.inference_mode():
        scored = prefill_target(pair, inputs.for_target(), with_scores=True)
        plain = prefill_target(pair, inputs.for_target(), with_scores=False, video=(scored.embeds, scored.side))
        if mode == "std":
            scored.draft_video = prompt_video(pair.draft, pair.draft_adapter, inputs)
    held = kv.cache_length(scored.cache)
    for method, tp in [("specvlm", scored), ("random", plain), ("specvlm", scored), ("vanilla", plain)]:
        res = generate(pair, inputs, _cfg(method), prefill=tp)
        assert res.token_ids == vanilla["qwen"].token_ids, method
    assert kv.cache_length(scored.cache) == kv.cache_length(plain.cache) == held   # copied, never extended
    events = list(stream(pair, inputs, config=_cfg("specvlm", n=8), prefill=scored))
    assert [t for e in events[1:] for t in e.token_ids] == vanilla["qwen"].token_ids[:8]
    with pytest.raises(ValueError, match="no attention scores"):
        generate(pair, inputs, _cfg("specvlm"), prefill=plain)
    other = prepare(pair, make_clip(12), PROMPT)
    with pytest.raises(ValueError, match="prefill holds"):
        generate(pair, other, _cfg(), prefill=plain)
    with pytest.raises(TypeError, match="subtitles"):   # subtitles belong to prepare()
        stream(pair, inputs, _cfg(), subtitles=[])


def test_concurrent_streams_on_one_pair_are_safe_and_leave_the_models_as_built(pairs):
    """Two threads decode on the same pair at once (scoring prefill, pruning, drafting, verify):
    each gets the tokens it gets alone, and no model setting changes on the way."""
    import threading

    from specvlm.models.attention import ATTN_IMPL, text_attn_implementation

    pair = pairs[("qwen", "std")]
    jobs = {name: (prepare(pair, make_clip(seed=seed), PROMPT), _cfg(method, n=24))
            for name, seed, method in (("a", 0, "specvlm"), ("b", 1, "attention"), ("c", 2, "vanilla"))}
    alone = {name: generate(pair, inp, cfg).token_ids for name, (inp, cfg) in jobs.items()}
    seen: dict[str, list[int]] = {}
    start = threading.Barrier(len(jobs))

    def run(name: str) -> None:
        inp, cfg = jobs[name]
        start.wait()
        seen[name] = [t for ev in stream(pair, inp, cfg) if not isinstance(ev, PrefillInfo) for t in ev.token_ids]

    threads = [threading.Thread(target=run, args=(n,)) for n in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert seen == alone
    assert text_attn_implementation(pair.target) == text_attn_implementation(pair.draft) == ATTN_IMPL


@pytest.mark.parametrize("fam", ["qwen", "llava"])
def test_attention_scores_equal_transformers_eager_attention(pairs, fam):
    """The scoring pass computes eager attention per call; its scores equal those of transformers' own
    ``eager`` implementation over the whole prompt (a copy of the target set to eager)."""
    from specvlm.engine.forward import prompt_video
    from specvlm.engine.prefill import prefill_target

    pair = pairs[(fam, "self")]
    inputs = prepare(pair, make_clip(), PROMPT).for_target()
    eager = copy.deepcopy(pair.target)
    eager.set_attn_implementation({"text_config": "eager"})
    with torch.inference_mode():
        scores = prefill_target(pair, inputs, with_scores=True).scores
        emb, _ = prompt_video(eager, pair.adapter, inputs)
        out = pair.adapter.language_model(eager)(inputs_embeds=emb, output_attentions=True,
                                                 position_ids=pair.adapter.lm_positions(inputs.positions))
    split = int(inputs.video_index[-1]) + 1
    ref = torch.stack([a[0, :, split:].float().mean(dim=(0, 1)) for a in out.attentions]).mean(0)
    torch.testing.assert_close(scores, ref[inputs.video_index], atol=1e-6, rtol=1e-5)
    assert float(scores.std()) > 0
