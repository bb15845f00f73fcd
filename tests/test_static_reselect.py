"""Re-selection on the static engine: one host read per step, capturable steps, the sampling law, the draft's
buffer (sync, copies, partial prefill) and a draft whose steps keep their own state (another device)."""
from __future__ import annotations

import math

import pytest
import torch

from helpers.media import make_clip
from specvlm.config import DecodeConfig, ReselectConfig, SamplingConfig, TreeConfig
from specvlm.engine import reselection, statickv
from specvlm.engine.draftcache import append_video
from specvlm.runtime.hostreads import HostReadCounter
from specvlm.engine.prefill import speculative_prefill
from specvlm.engine.prepare import prepare
from specvlm.engine.sampledsteps import refresh
from specvlm.engine.staticdraft import fused_draft
from specvlm.engine.steps import (ModelSide, draft_step, feed_pending, spec_state, static_forward, tree_shape,
                                  verify_step)
from specvlm.engine.stream import generate, stream
from specvlm.models.staticattn import causal_bias
from specvlm.spec.sampling import process_logits
from specvlm.types import StepEvent

PROMPT = "describe this video in detail"
N = 32
FIRE = ReselectConfig(enabled=True, min_share=0.0, step_tokens=3, total_tokens=10, trigger="refused", sync=False)
EVERY = ReselectConfig(enabled=True, min_share=0.0, step_tokens=3, total_tokens=12, trigger="every", track=1,
                       sync=True)


def _cfg(method="specvlm", reselect=None, tree=None, **kw):
    return DecodeConfig(method=method, max_new_tokens=N, stop_at_eos=False, tree=tree or TreeConfig(shape="dynamic"),
                        reselect=reselect or ReselectConfig(), **kw)


@pytest.fixture(scope="module")
def inputs(pairs):
    clip = make_clip()
    return {key: prepare(pair, clip, PROMPT) for key, pair in pairs.items()}


@pytest.mark.parametrize("mode", ["self", "std"])
@pytest.mark.parametrize("rs", [FIRE, EVERY], ids=["refused", "every"])
def test_one_host_read_per_step_with_reselection(pairs, inputs, mode, rs):
    counter, steps, adding = HostReadCounter(), 0, 0
    for ev in stream(pairs[("qwen", mode)], inputs[("qwen", mode)], _cfg(reselect=rs)):
        if isinstance(ev, StepEvent):
            if ev.step == 0:
                counter.__enter__()        # from the first decode step on (prefill and step 0 excluded)
            else:
                steps += 1
                adding += bool(ev.added)
    counter.__exit__(None, None, None)
    assert adding > 0 and steps > 0
    # the measure's result comes back with the verify's; a step that adds tokens may read once more
    assert counter.count <= steps + adding, dict(counter.by_kind)


@pytest.mark.parametrize("mode", ["self", "std"])
@pytest.mark.parametrize("tree", [TreeConfig(shape="chain", depth=4), TreeConfig(shape="static"),
                                  TreeConfig(shape="dynamic", min_prob=0.05)], ids=["chain", "static", "dynamic"])
def test_a_draft_with_its_own_state_is_lossless(pairs, inputs, mode, tree, monkeypatch):
    """The draft's steps on their own state (as on another device: the tree and the next pending tokens copied
    between the two), greedy and with re-selection; the same tokens as plain decoding."""
    pair, inp = pairs[("qwen", mode)], inputs[("qwen", mode)]
    want = generate(pair, inp, _cfg("vanilla")).token_ids
    monkeypatch.setattr("specvlm.engine.loop.own_draft_state", lambda *a: True)
    assert generate(pair, inp, _cfg(tree=tree)).token_ids == want
    assert generate(pair, inp, _cfg(tree=tree, reselect=EVERY if mode == "self" else FIRE)).token_ids == want
    sampled = _cfg(tree=tree, sampling=SamplingConfig(temperature=0.7, seed=5))
    monkeypatch.undo()
    alone = generate(pair, inp, sampled).token_ids
    monkeypatch.setattr("specvlm.engine.loop.own_draft_state", lambda *a: True)
    assert generate(pair, inp, sampled).token_ids == alone     # the same draws: the same noise reaches both


# --------------------------------------------------------------------------- the steps
@pytest.fixture(scope="module")
def prefilled(pairs, inputs):
    """(pair, prefill, target side, draft side, state) of Std-SD with re-selection's buffers."""
    pair, inp = pairs[("qwen", "std")], inputs[("qwen", "std")]
    with torch.inference_mode():
        sp = speculative_prefill(pair, inp, _cfg(reselect=FIRE), None, None)
    return pair, sp


def _sides(pair, sp, fused=True):
    target = ModelSide(pair.target, pair.adapter, statickv.allocate(sp.tp.cache, sp.t_in.input_ids.shape[1] + 200), 3,
                       torch.float32)
    fd = fused_draft(pair, 3, sp.d_in.next_position + 200) if fused else None
    draft = ModelSide(pair.draft, pair.draft_adapter, statickv.allocate(sp.d_cache, sp.d_len + 200), 3,
                      torch.float32, fd)
    return target, draft


def _lacking(sp, n=5):
    lacking = torch.nonzero(~torch.isin(torch.arange(sp.t_in.num_video_tokens), sp.info.prune.keep)).flatten()
    return lacking[torch.randperm(lacking.numel(), generator=torch.Generator().manual_seed(0))[:n]]


def test_measure_step_traces_and_names_the_diverging_row(prefilled):
    """Verify with the query tap, then the measure, each traced by torch.compile(fullgraph=True); the measured row's
    share equals the one computed from the row's attention on the host."""
    pair, sp = prefilled
    cfg = dict(FIRE.__dict__)
    rs_cfg = ReselectConfig(**{**cfg, "trigger": "every"})
    with torch.inference_mode():
        target, draft = _sides(pair, sp)
        rs = reselection.start(rs_cfg, pair, sp, len(target.cache.layers), torch.device("cpu"))
        target.tap = rs.tap
        shape = tree_shape(TreeConfig(shape="dynamic", depth=3, top_k=3, total_tokens=8), pair.shared_vocab,
                           torch.device("cpu"))
        st = spec_state(int(sp.tp.first_token), sp.t_in.next_position, shape, 400, 0, torch.device("cpu"))
        for fn in (lambda: draft_step(draft, st, shape, 0, pair.shared_vocab),
                   lambda: verify_step(target, st, shape, 400, 0),
                   lambda: reselection.measure_step(rs, target.cache, st)):
            torch._dynamo.reset()
            torch.compile(fn, fullgraph=True, backend="eager")()   # raises on a graph break
        acc = int(st.out[0])
        row = 0 if acc == 0 else int(st.path[acc - 1]) + 1
        att = reselection.row_attention(rs.tap, target.cache, torch.tensor([row]), rs.video_index)
        out = rs.out.tolist()
    assert out[0] == 1.0 and abs(att.sum().item() - 1) < 1e-5
    assert out[1] == pytest.approx(float(att[rs.lack].sum()), abs=1e-6)
    got, share = reselection.pick(rs, out)
    assert share == out[1] and 0 < len(got) <= rs_cfg.step_tokens and not any(rs.held[i] for i in got)


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "module-stack"])
def test_added_video_tokens_reach_either_draft_forward(prefilled, fused):
    """A Std-SD partial prefill into the static buffer (module stack, M-RoPE positions) is read the same by the
    fused draft forward and the module stack, and changes the draft's next-token distribution."""
    pair, sp = prefilled
    add = _lacking(sp)
    with torch.inference_mode():
        out = []
        for with_add in (False, True):
            _, draft = _sides(pair, sp, fused)
            if with_add:
                append_video(draft, pair, sp.d_in, sp.tp.draft_video, add)
            shape = tree_shape(TreeConfig(shape="chain", depth=2), pair.shared_vocab, torch.device("cpu"))
            st = spec_state(int(sp.tp.first_token), sp.t_in.next_position, shape, 400, 0, torch.device("cpu"))
            out.append(feed_pending(draft, st, sp.d_in.next_position - sp.t_in.next_position, pair.shared_vocab))
        _, ref = _sides(pair, sp, not fused)
        append_video(ref, pair, sp.d_in, sp.tp.draft_video, add)
        st = spec_state(int(sp.tp.first_token), sp.t_in.next_position, shape, 400, 0, torch.device("cpu"))
        other = feed_pending(ref, st, sp.d_in.next_position - sp.t_in.next_position, pair.shared_vocab)
    assert torch.allclose(out[1], other, atol=1e-4)
    assert not torch.allclose(out[0], out[1], atol=1e-4)


def test_a_synced_self_sd_draft_holding_every_token_is_the_target(pairs, inputs):
    """Sync puts the target's keys and values in the draft's buffer: holding every video token, the Self-SD draft's
    next-token distribution is the target's own."""
    pair, inp = pairs[("qwen", "self")], inputs[("qwen", "self")]
    with torch.inference_mode():
        sp = speculative_prefill(pair, inp, _cfg(reselect=EVERY), None, None)
        target, draft = _sides(pair, sp)
        shape = tree_shape(TreeConfig(shape="chain", depth=2), pair.shared_vocab, torch.device("cpu"))
        st = spec_state(int(sp.tp.first_token), sp.t_in.next_position, shape, 400, 0, torch.device("cpu"))
        before = feed_pending(draft, st, 0, pair.shared_vocab)
        L = int(sp.t_in.input_ids.shape[1])
        every = ReselectConfig(enabled=True, min_share=0.0, step_tokens=4096, total_tokens=4096, sync=True)
        rs = reselection.start(every, pair, sp, len(target.cache.layers), torch.device("cpu"))
        reselection.begin(rs, pair, (target, draft), sp.tp.last_row, sp.d_in)     # adds every lacking token
        assert rs.unheld == 0 and int(draft.cache.length) == L
        got = feed_pending(draft, st, 0, pair.shared_vocab)
        one = target.cache.slots[:1] + target.cache.length
        want = torch.log_softmax(static_forward(target, st.root, st.pos.view(1), one,
                                                causal_bias(1, torch.float32, one.device))[-1, :pair.shared_vocab], -1)
    assert torch.allclose(got, want, atol=1e-4)
    assert not torch.allclose(before, want, atol=1e-4)          # the pruned draft's own buffer differs


RUNS = 500


def test_sampled_steps_after_reselection_keep_the_target_law(prefilled):
    """One speculative step from a fixed state whose draft re-selection changed (video tokens added), repeated with
    fresh noise: the first token it emits follows the target's processed distribution after the root
    (Bretagnolle-Huber-Carol bound on the total variation, alpha = 1e-3)."""
    pair, sp = prefilled
    cfg = SamplingConfig(temperature=0.6, top_p_sampling=0.9, seed=0)
    gen = torch.Generator().manual_seed(1)
    cpu = torch.device("cpu")
    with torch.inference_mode():
        target, draft = _sides(pair, sp)
        append_video(draft, pair, sp.d_in, sp.tp.draft_video, _lacking(sp, 12))
        shape = tree_shape(TreeConfig(shape="dynamic", depth=3, top_k=3, total_tokens=8), pair.shared_vocab, cpu,
                           cfg)
        st = spec_state(int(sp.tp.first_token), sp.t_in.next_position, shape, 400, 0, cpu)
        one = target.cache.slots[:1] + target.cache.length
        exact = process_logits(static_forward(target, st.root, st.pos.view(1), one,
                                              causal_bias(1, torch.float32, cpu))[-1], cfg)
        offset = sp.d_in.next_position - sp.t_in.next_position
        saved = [t.clone() for t in st.tensors() + [target.cache.length, draft.cache.length]]
        firsts = []
        for _ in range(RUNS):
            refresh(st.noise, gen)
            draft_step(draft, st, shape, offset, pair.shared_vocab)
            verify_step(target, st, shape, 400, 0)
            firsts.append(int(st.out[1]) if int(st.out[0]) > 0 else int(st.out[-2]))
            for t, s in zip(st.tensors() + [target.cache.length, draft.cache.length], saved):
                t.copy_(s)
    emp = torch.bincount(torch.tensor(firsts), minlength=exact.shape[0]).double() / RUNS
    tv = 0.5 * float((emp - exact.double()).abs().sum())
    support = int((exact > 0).sum())
    assert tv < math.sqrt((support * math.log(2) + math.log(1e3)) / (2 * RUNS)), (support, tv)


def test_a_draft_keeps_its_own_state_only_on_another_device():
    from specvlm.engine.loop import own_draft_state

    assert not own_draft_state(torch.device("cpu"), torch.device("cpu"))
    assert own_draft_state(torch.device("cpu"), torch.device("meta"))
    assert own_draft_state("cuda:0", "cuda:1") and not own_draft_state("cuda:1", "cuda:1")
