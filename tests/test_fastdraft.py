"""The fused draft runner: same draft log-probs as DraftRunner, lossless output, fallback."""
from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch

from helpers.media import make_clip

import specvlm.engine.stream as dec
from specvlm.engine import fastdraft as fd
from specvlm.engine import kv
from specvlm.config import DecodeConfig, TreeConfig
from specvlm.engine.fastdraft import FastDraftRunner, FastDraftUnsupported
from specvlm.engine.draft import DraftRunner, make_draft_runner
from specvlm.engine.prefill import prefill_draft, prefill_target
from specvlm.models.pair import pair_from_models
from specvlm.spec.drafters import GreedyDrafter
from specvlm.engine.prepare import prepare

PROMPT = "describe this video in detail"
ROOT = Path(__file__).resolve().parents[1]
BUNDLED = ROOT / "assets" / "model"


def _prefilled(pair, stride=3):
    inputs = pair.adapter.prepare(pair.processor, pair.target, make_clip(), PROMPT)
    tp = prefill_target(pair, inputs.for_target(), with_scores=False)
    d_cache, _ = prefill_draft(pair, inputs, tp, torch.arange(0, inputs.num_video_tokens, stride))
    return inputs, tp, d_cache


def _compare_runners(pair, steps=4, **fast_kwargs):
    """Drive DraftRunner and FastDraftRunner through the same pending feeds and tree levels."""
    with torch.inference_mode():
        inputs, tp, d_cache = _prefilled(pair)
        R = inputs.positions.shape[0]
        fast = FastDraftRunner(pair, d_cache, R, 2, **fast_kwargs)   # copies the cache before ref extends it
        ref = DraftRunner(pair, d_cache, R, 2)
        pos, pending, worst = inputs.next_position, [tp.first_token], 0.0
        for _ in range(steps):
            a, b = ref.feed_pending(pending, pos), fast.feed_pending(pending, pos)
            assert a.shape == b.shape == (pair.shared_vocab,)
            worst = max(worst, float((a - b).abs().max()))
            got: dict[str, list[torch.Tensor]] = {"r": [], "f": []}

            def spy(runner, key):
                return lambda nodes, tree: got[key].append(runner.feed_nodes(nodes, tree)) or got[key][-1]

            drafter = GreedyDrafter(TreeConfig(depth=4, top_k=3, total_tokens=10))
            t_ref = drafter.build(a, spy(ref, "r")).tree
            t_fast = drafter.build(a, spy(fast, "f")).tree
            assert torch.equal(t_ref.tokens, t_fast.tokens) and torch.equal(t_ref.parents, t_fast.parents)
            assert len(got["r"]) == len(got["f"]) >= 3
            worst = max(worst, max(float((x - y).abs().max()) for x, y in zip(got["r"], got["f"])))
            ref.rollback()
            fast.rollback()
            pending = t_ref.tokens[:2].tolist() + [int(a.argmax())]
            pos += len(pending)
        assert fast.length == fast.base == ref.base
    return worst


# Log-probs are ~ -6 here; folding the norm weights and the query scale into the matmuls changes
# only the rounding order (a few fp32 ulps per op), while a wrong mask, position or weight moves them by > 0.1.
LOGP_TOL = 1e-4


@pytest.mark.parametrize("fam", ["qwen", "llava"])
@pytest.mark.parametrize("mode", ["std", "self"])
def test_same_log_probs_as_draft_runner(pairs, fam, mode):
    assert _compare_runners(pairs[(fam, mode)]) < LOGP_TOL


def test_unfused_weights_and_buffer_growth_give_the_same_log_probs(pairs, monkeypatch):
    monkeypatch.setattr(fd, "GROW", 1)          # every feed reallocates the KV buffer and the RoPE table
    monkeypatch.setattr(fd, "FUSE_LIMIT_BYTES", 0)
    assert _compare_runners(pairs[("qwen", "std")], steps=3) < LOGP_TOL


@pytest.mark.parametrize("fam", ["qwen", "llava"])
def test_speculative_output_is_token_identical_with_the_fast_runner(pairs, fam, monkeypatch):
    made = []
    real = dec.make_draft_runner
    monkeypatch.setattr(dec, "make_draft_runner", lambda *a, **k: made.append(real(*a, **k)) or made[-1])
    pair, clip = pairs[(fam, "std")], make_clip()
    cfg = DecodeConfig(method="vanilla", max_new_tokens=40, stop_at_eos=False, engine="eager")
    vanilla = dec.generate(pair, prepare(pair, clip, PROMPT), cfg)
    for shape in ("dynamic", "chain"):   # the eager loop, which drafts through the fast runner
        spec = dec.generate(pair, prepare(pair, clip, PROMPT), DecodeConfig(max_new_tokens=40, stop_at_eos=False,
                                                             tree=TreeConfig(shape=shape), engine="eager"))
        assert spec.token_ids == vanilla.token_ids, shape
    assert made and all(isinstance(r, FastDraftRunner) for r in made)
    assert vanilla.token_ids[1:] != vanilla.token_ids[:-1]  # varied output, not one repeated token
    inputs = pair.adapter.prepare(pair.processor, pair.target, clip, PROMPT)
    kw = ({"do_sample_frames": False, "video_metadata": [{"fps": 4.0, "total_num_frames": 8,
                                                          "frames_indices": list(range(8))}]}
          if fam == "qwen" else {})
    enc = pair.processor(text=[inputs.prompt_text], videos=[clip.frames], return_tensors="pt", **kw)
    assert torch.equal(enc["input_ids"], inputs.input_ids)
    out = pair.target.generate(**enc, max_new_tokens=40, min_new_tokens=40, do_sample=False)
    assert out[0, enc["input_ids"].shape[1]:].tolist() == spec.token_ids


@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("min_prob", [0.0, 0.3])
def test_greedy_chain_through_feed_next_is_the_top1_dynamic_tree(pairs, fast, min_prob):
    """A greedy chain built one node at a time (feed_next) is the tree that the generic top-1 path
    builds through feed_nodes, with the same early stop; its log-probs match node by node."""
    pair = pairs[("qwen", "std")]
    with torch.inference_mode():
        inputs, tp, d_cache = _prefilled(pair)
        R = inputs.positions.shape[0]
        a = make_draft_runner(pair, d_cache, R, 0, fast=fast)
        b = make_draft_runner(pair, kv.clone_cache(pair.draft, d_cache), R, 0, fast=fast)
        assert isinstance(a, FastDraftRunner) is fast
        pos, pending = inputs.next_position, [tp.first_token, 7]
        root_a, root_b = a.feed_pending(pending, pos), b.feed_pending(pending, pos)
        rows: dict[str, list[torch.Tensor]] = {"next": [], "nodes": []}

        def spy_next(tok, depth):
            rows["next"].append(a.feed_next(tok, depth))
            return rows["next"][-1]

        def spy_nodes(nodes, tree):
            rows["nodes"].append(b.feed_nodes(nodes, tree))
            return rows["nodes"][-1]

        drafter = GreedyDrafter(TreeConfig(shape="chain", depth=6, min_prob=min_prob))
        chain = drafter.build(root_a, a.feed_nodes, spy_next).tree
        generic = drafter.build(root_b, spy_nodes).tree
        a.rollback()
        b.rollback()
    assert chain.parents.tolist() == list(range(-1, chain.size - 1))
    for name in ("tokens", "parents", "depths"):
        assert torch.equal(getattr(chain, name), getattr(generic, name)), name
    assert torch.allclose(chain.scores, generic.scores, atol=1e-4)
    if min_prob == 0.0:
        assert chain.size == 6 and len(rows["next"]) == 5
    else:
        assert chain.size < 6   # the early stop cut this chain (random tiny weights: flat draft distributions)
    assert len(rows["next"]) == len(rows["nodes"])
    for x, y in zip(rows["next"], rows["nodes"]):
        assert float((x - y[0]).abs().max()) < LOGP_TOL


def test_accepted_chain_nodes_are_kept_not_fed_again(pairs):
    """After a chain step the accepted nodes' keys/values stay in the buffer: the next feed_pending
    feeds only the rest (the bonus token) and gives the log-probs of feeding everything again."""
    pair = pairs[("qwen", "std")]
    with torch.inference_mode():
        inputs, tp, d_cache = _prefilled(pair)
        R, pos = inputs.positions.shape[0], inputs.next_position
        fast = FastDraftRunner(pair, d_cache, R)
        ref = FastDraftRunner(pair, d_cache, R)
        fed: list[int] = []
        real = fast._feed
        fast._feed = lambda tokens, p, allowed: fed.append(len(tokens)) or real(tokens, p, allowed)
        root = [tp.first_token]
        fast.feed_pending(root, pos)
        ref.feed_pending(root, pos)
        chain = [int(fast.feed_next(t, d).argmax()) for d, t in enumerate([11, 12, 13, 14], start=1)]
        assert len(chain) == 4 and fast.chain == [11, 12, 13, 14]
        fast.rollback()
        pending = [11, 12, 99]            # two chain nodes accepted, then the target's own token
        a, b = fast.feed_pending(pending, pos + 3), ref.feed_pending(pending, pos + 3)
        assert fed == [1, 1] and fast.length == ref.length == fast.base
        assert float((a - b).abs().max()) < LOGP_TOL
        fast.rollback()
        a, b = fast.feed_pending([5, 6], pos + 5), ref.feed_pending([5, 6], pos + 5)   # nothing to keep
        assert fed == [1, 1, 2] and float((a - b).abs().max()) < LOGP_TOL


def test_unsupported_draft_falls_back_to_draft_runner(pairs):
    pair = pairs[("qwen", "std")]
    draft = copy.deepcopy(pair.draft)
    pair.draft_adapter.language_model(draft).layers[0].self_attn.q_norm = torch.nn.Identity()
    odd = pair_from_models(pair.target, pair.processor, draft, pair.processor)
    with torch.inference_mode():
        inputs, tp, d_cache = _prefilled(odd)
        with pytest.raises(FastDraftUnsupported, match="q/k norms"):
            FastDraftRunner(odd, d_cache, inputs.positions.shape[0])
        assert type(make_draft_runner(odd, d_cache, inputs.positions.shape[0])) is DraftRunner
        assert type(make_draft_runner(pair, d_cache, inputs.positions.shape[0], fast=False)) is DraftRunner


def test_draft_spread_over_devices_falls_back_to_draft_runner(pairs):
    """A draft whose layers sit on several devices (a ``device_map`` over GPUs; here layer 0 on the
    ``meta`` device stands for a second device) gets the module path, which moves activations
    between the layers' devices; the fused runner would run every layer on the embedding's device."""
    pair = pairs[("qwen", "std")]
    with torch.inference_mode():
        inputs, tp, d_cache = _prefilled(pair)
    draft = copy.deepcopy(pair.draft)
    pair.draft_adapter.language_model(draft).layers[0].to("meta")
    spread = pair_from_models(pair.target, pair.processor, draft, pair.processor)
    R = inputs.positions.shape[0]
    with torch.inference_mode():
        with pytest.raises(FastDraftUnsupported, match="devices"):
            FastDraftRunner(spread, d_cache, R)
        assert type(make_draft_runner(spread, d_cache, R)) is DraftRunner
        assert type(make_draft_runner(pair, d_cache, R)) is FastDraftRunner


def test_bundled_pair_same_log_probs_and_lossless():
    from specvlm.models.loading import load_pair

    pair = load_pair(str(BUNDLED / "target"), str(BUNDLED / "draft"), device="cpu", dtype="float32")
    assert _compare_runners(pair, steps=3) < LOGP_TOL
    clip = make_clip(num_frames=8, side=112)
    cfg = DecodeConfig(method="vanilla", max_new_tokens=48, stop_at_eos=False)
    vanilla = dec.generate(pair, prepare(pair, clip, "Describe this video in detail."), cfg)
    spec = dec.generate(pair, prepare(pair, clip, "Describe this video in detail."),
                        DecodeConfig(max_new_tokens=48, stop_at_eos=False))
    assert spec.token_ids == vanilla.token_ids and spec.tau > 0


def test_draft_cost_measures_both_runners(pairs):
    from specvlm.bench.stepcost import draft_cost

    pair = pairs[("qwen", "std")]
    fast = draft_cost(pair, 64, 16, width=3, rounds=1, iters=1, warmup=1)
    slow = draft_cost(pair, 64, 16, width=3, fast=False, rounds=1, iters=1, warmup=1)
    assert (fast.runner, slow.runner) == ("FastDraftRunner", "DraftRunner")
    for c in (fast, slow):
        assert c.decode_ms > 0 and c.level_ms > 0 and c.chain_ms > 0 and c.level_ratio > 0
        assert (c.target_tokens, c.draft_tokens, c.width, c.rounds) == (64, 16, 3, 1)
    with pytest.raises(ValueError, match="width"):
        draft_cost(pair, 64, 16, width=0)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_a_half_precision_draft_gets_the_fast_runner(dtype):
    """GPUs load in bf16 (fp16 without it): the norm check runs in float32, so the module's own rounding does
    not send every half-precision draft to DraftRunner, while a norm that is not an RMS norm is still refused."""
    from specvlm.models.loading import load_pair

    pair = load_pair(str(BUNDLED / "target"), str(BUNDLED / "draft"), device="cpu", dtype=dtype)
    with torch.inference_mode():
        inputs, tp, d_cache = _prefilled(pair)
        assert type(make_draft_runner(pair, d_cache, inputs.positions.shape[0])) is FastDraftRunner
    norm = pair.draft_adapter.language_model(pair.draft).layers[0].input_layernorm
    assert fd._norm_weight(norm) is norm.weight
    layer_norm = torch.nn.LayerNorm(norm.weight.shape[0]).to(norm.weight.dtype)
    layer_norm.variance_epsilon = 1e-6    # the attribute an RMS norm has, on a norm that subtracts the mean
    with torch.no_grad():
        layer_norm.bias.fill_(0.5)
    with pytest.raises(FastDraftUnsupported, match="not weight"):
        fd._norm_weight(layer_norm)
