"""The decoding engine: token-identical to plain decoding and to model.generate() for the families, trees,
subtitles and padded vocabularies; at most one host read per step; traceable step functions."""
from __future__ import annotations

import math
import os
from pathlib import Path

import pytest
import torch

from helpers.media import make_clip
from specvlm.config import DecodeConfig, SamplingConfig, TreeConfig
from specvlm.engine import statickv
from specvlm.runtime.hostreads import HostReadCounter
from specvlm.engine.prefill import prefill_draft, prefill_target
from specvlm.engine.prepare import prepare
from specvlm.engine.sampledsteps import refresh
from specvlm.models.staticattn import causal_bias
from specvlm.engine.staticdraft import fused_draft
from specvlm.engine.steps import (ModelSide, decode_step, draft_step, spec_state, static_forward, tree_shape,
                                  vanilla_state, verify_step)
from specvlm.spec.sampling import process_logits
from specvlm.engine.stream import generate, stream
from specvlm.models.pair import pair_from_models
from specvlm.types import StepEvent

ROOT = Path(__file__).resolve().parents[1]
PROMPT = "describe this video in detail"
N = 40
CHAIN = TreeConfig(shape="chain", depth=6)


def _cfg(method="vanilla", n=N, eos=False, tree=CHAIN, **kw):
    return DecodeConfig(method=method, max_new_tokens=n, stop_at_eos=eos, tree=tree, **kw)


def _steps(pair, inputs, cfg):
    """(token ids, per-step accept lengths, host reads per decode step) of one stream."""
    ids, acc, steps = [], [], 0
    counter = HostReadCounter()
    for ev in stream(pair, inputs, cfg):
        if not isinstance(ev, StepEvent):
            continue
        if ev.step == 0:
            counter.__enter__()          # count from the first decode step on (prefill excluded)
        else:
            steps += 1
        ids += ev.token_ids
        acc.append(ev.accept_length)
    counter.__exit__(None, None, None)
    return ids, acc, counter.count / max(steps, 1)


def _same(pair, inputs, method="specvlm", n=N, eos=False, tree=CHAIN):
    """(token ids, accept lengths, host reads per step) of one run."""
    return _steps(pair, inputs, _cfg(method, n, eos, tree))


# --------------------------------------------------------------------------- tiny families
@pytest.mark.parametrize("fam", ["qwen", "llava"])
def test_vanilla_equals_hf_generate(pairs, fam):
    pair = pairs[(fam, "self")]
    clip = make_clip()
    inputs = prepare(pair, clip, PROMPT)
    ids, _, reads = _same(pair, inputs, "vanilla")
    assert len(ids) == N and len(set(ids)) >= 8
    assert reads <= 1.0
    meta = {"video_metadata": [{"fps": 4.0, "total_num_frames": 8, "frames_indices": list(range(8))}],
            "do_sample_frames": False} if fam == "qwen" else {}
    enc = pair.processor(text=[inputs.prompt_text], videos=[clip.frames], return_tensors="pt", **meta)
    assert torch.equal(enc["input_ids"], inputs.input_ids)
    out = pair.target.generate(**enc, max_new_tokens=N, min_new_tokens=N, do_sample=False)
    assert out[0, enc["input_ids"].shape[1]:].tolist() == ids


TREES = {"chain": CHAIN, "chain-stop": TreeConfig(shape="chain", depth=3, min_prob=0.2),
         "dynamic": TreeConfig(shape="dynamic"), "static": TreeConfig(shape="static"),
         "dynamic-stop": TreeConfig(shape="dynamic", depth=4, top_k=2, total_tokens=6, min_prob=0.3)}


@pytest.mark.parametrize("key", [("qwen", "self"), ("qwen", "std"), ("llava", "self"), ("llava", "std")])
@pytest.mark.parametrize("tree", list(TREES))
def test_every_tree_shape_equals_vanilla(pairs, key, tree):
    pair = pairs[key]
    inputs = prepare(pair, make_clip(), PROMPT)
    van = _steps(pair, inputs, _cfg("vanilla"))[0]
    ids, acc, reads = _same(pair, inputs, tree=TREES[tree])
    assert ids == van
    assert reads <= 1.0
    assert max(acc) <= TREES[tree].depth


def test_qwen3_vl_and_smolvlm_are_lossless():
    from specvlm.testing.tiny import tiny_smolvlm
    from specvlm.testing.tiny_qwen3_vl import tiny_qwen3_vl

    builds = [(tiny_qwen3_vl(seed=0), tiny_qwen3_vl(seed=1, hidden=32, layers=1, pad_vocab_to=64)),
              (tiny_smolvlm(seed=0), tiny_smolvlm(seed=1, hidden=32, layers=1, pad_vocab_to=64))]
    for target, draft in builds:
        for pair in (pair_from_models(*target), pair_from_models(target[0], target[1], draft[0], draft[1])):
            inputs = prepare(pair, make_clip(), PROMPT)
            van = _steps(pair, inputs, _cfg("vanilla", n=24))[0]
            assert _same(pair, inputs, n=24)[0] == van


def test_cross_geometry_draft_is_lossless():
    """A SmolVLM2-2.2B-layout target (81 tokens per frame) with a 256M-layout draft (64): each reads its own prompt."""
    from specvlm.testing.tiny import tiny_smolvlm

    big = tiny_smolvlm(seed=2, image_size=384, patch=14, scale_factor=3)
    small = tiny_smolvlm(seed=1, hidden=32, layers=1, pad_vocab_to=64)
    pair = pair_from_models(big[0], big[1], small[0], small[1])
    inputs = prepare(pair, make_clip(4, 96, seed=1), PROMPT)
    van = _steps(pair, inputs, _cfg("vanilla", n=20))[0]
    for tree in ("chain", "dynamic"):
        ids, _, reads = _same(pair, inputs, n=20, tree=TREES[tree])
        assert ids == van and reads <= 1.0


def test_subtitles_are_lossless_in_every_mode():
    from specvlm.testing.tiny_qwen3_vl import tiny_qwen3_vl
    from specvlm.text.subtitles import Cue

    pair = pair_from_models(*tiny_qwen3_vl(seed=0))
    cues = [Cue(0.0, 0.6, "a red ball rolls"), Cue(0.6, 2.0, "it stops")]
    for mode in ("both", "target", "draft"):
        inputs = prepare(pair, make_clip(), PROMPT, subtitles=cues, subtitle_mode=mode)
        van = _steps(pair, inputs, _cfg("vanilla", n=16))[0]
        assert _same(pair, inputs, n=16)[0] == van, mode


def test_padded_vocabulary_ids_are_lossless():
    """The target's greedy choice is a padding id the draft cannot embed, several times."""
    from collections import Counter

    from specvlm.testing.tiny import tiny_qwen2_5_vl

    target, proc = tiny_qwen2_5_vl(seed=0, pad_vocab_to=64)
    draft, d_proc = tiny_qwen2_5_vl(seed=1, hidden=32, layers=1, pad_vocab_to=8)
    pair = pair_from_models(target, proc, draft, d_proc)
    rows = draft.get_input_embeddings().weight.shape[0]
    inputs = prepare(pair, make_clip(), PROMPT)
    common = Counter(generate(pair, inputs, _cfg("vanilla", n=32)).token_ids).most_common(1)[0][0]
    with torch.no_grad():
        target.lm_head.weight[rows + 5] = target.lm_head.weight[common] * 1.5
    van = _steps(pair, inputs, _cfg("vanilla", n=32))[0]
    assert sum(t >= rows for t in van) >= 3
    assert _same(pair, inputs, "specvlm", n=32)[0] == van
    assert _same(pair, inputs, "none", n=32)[0] == van


@pytest.mark.parametrize("tree", ["chain", "dynamic", "static"])
def test_sampling_is_reproducible_one_read_per_step_and_greedy_when_cold(pairs, tree):
    pair = pairs[("qwen", "std")]
    inputs = prepare(pair, make_clip(), PROMPT)
    greedy = _steps(pair, inputs, _cfg("vanilla", n=16))[0]
    for method in ("vanilla", "specvlm"):
        def run(t, seed):
            return _steps(pair, inputs, _cfg(method, n=16, tree=TREES[tree],
                                             sampling=SamplingConfig(temperature=t, top_p_sampling=0.9, seed=seed)))
        a, b, c = run(1.0, 7), run(1.0, 7), run(1.0, 8)
        assert a[0] == b[0] and a[0] != c[0] and len(a[0]) == 16
        assert a[2] <= 1.0
        assert run(1e-4, 0)[0] == greedy


def test_margins_reused_prefill_stop_and_tree_records(pairs):
    pair = pairs[("qwen", "std")]
    inputs = prepare(pair, make_clip(), PROMPT)
    plain = generate(pair, inputs, _cfg("vanilla", n=12))
    with torch.inference_mode():
        tp = prefill_target(pair, inputs.for_target(), with_scores=True)
        top = tp.last_logits.float().topk(2).values
    assert plain.margins[0] == pytest.approx(float(top[0] - top[1]), abs=1e-5) and all(m > 0 for m in plain.margins)
    for method in ("vanilla", "specvlm"):
        again = generate(pair, inputs, _cfg(method, n=12, tree=TREES["dynamic"]), prefill=tp)
        assert again.token_ids == plain.token_ids
    seen: list[StepEvent] = []
    for ev in stream(pair, inputs, _cfg("specvlm", n=40), should_stop=lambda: len(seen) >= 3):
        seen += [ev] if isinstance(ev, StepEvent) else []
    assert len(seen) == 3 and sum(len(e.token_ids) for e in seen) < 40
    res = generate(pair, inputs, _cfg("specvlm", n=24, tree=TREES["dynamic"]), record_trees=True)
    assert res.token_ids == generate(pair, inputs, _cfg("vanilla", n=24)).token_ids
    for ev in res.steps[1:]:
        t = ev.tree
        assert len(t.tokens) == ev.tree_size == len(t.parents) and all(p < i for i, p in enumerate(t.parents))
        path = t.accepted_nodes
        assert [t.tokens[i] for i in path] + [t.target_token] == ev.token_ids[:len(path) + 1]
        assert all(t.parents[b] == a for a, b in zip([-1] + path, path))


# --------------------------------------------------------------------------- the bundled pair
@pytest.fixture(scope="module")
def bundled():
    from specvlm.config import VideoConfig
    from specvlm.models.loading import load_pair
    from specvlm.video import load_video

    os.environ["HF_HUB_OFFLINE"] = "1"
    target, draft = ROOT / "assets/model/target", ROOT / "assets/model/draft"
    std = load_pair(str(target), str(draft), device="cpu", dtype="float32")
    self_sd = pair_from_models(std.target, std.processor)
    clip = load_video(ROOT / "assets/videos/shapes_short.mp4", VideoConfig(num_frames=16, even_frames=True))
    return {"std": std, "self": self_sd}, clip


@pytest.mark.parametrize("mode", ["std", "self"])
def test_bundled_pair_fixed_length_is_identical_with_one_read_per_step(bundled, mode):
    pairs_, clip = bundled
    pair = pairs_[mode]
    inputs = prepare(pair, clip, "Describe this video in detail.")
    van, _, van_reads = _same(pair, inputs, "vanilla", n=48)
    ids, acc, reads = _same(pair, inputs, n=48, tree=TreeConfig(shape="chain", depth=8, min_prob=0.05))
    assert ids == van and van_reads <= 1.0 and reads <= 1.0
    assert sum(acc) > len(acc)              # the draft is accepted: fewer steps than tokens


def test_bundled_eos_inside_an_accepted_path_ends_the_output(bundled):
    pairs_, clip = bundled
    pair = pairs_["self"]
    inputs = prepare(pair, clip, "Describe this video in detail.")
    van = _steps(pair, inputs, _cfg("vanilla", n=128, eos=True))[0]
    assert van[-1] in pair.eos_token_ids and len(van) < 128
    events = [e for e in stream(pair, inputs, _cfg("specvlm", n=128, eos=True,
                                                   tree=TreeConfig(shape="chain", depth=12)))
              if isinstance(e, StepEvent)]
    assert [t for e in events for t in e.token_ids] == van
    last = events[-1]
    assert last.from_draft[-1], "EOS came from an accepted draft path"   # truncated inside the path


# --------------------------------------------------------------------------- the step functions
@pytest.fixture(scope="module")
def sides(pairs):
    pair = pairs[("qwen", "std")]
    inputs = prepare(pair, make_clip(), PROMPT)
    with torch.inference_mode():
        tp = prefill_target(pair, inputs, with_scores=False)
        dc, _ = prefill_draft(pair, inputs, tp, torch.arange(inputs.num_video_tokens), target_inputs=inputs)
        target = ModelSide(pair.target, pair.adapter, statickv.allocate(tp.cache, 400), 3, torch.float32)
        fused = fused_draft(pair, 3, inputs.next_position + 400)      # the fast runner's fused forward
        draft = ModelSide(pair.draft, pair.draft_adapter, statickv.allocate(dc, 400), 3, torch.float32, fused)
    first = int(tp.last_logits.argmax())
    return pair, inputs, target, draft, first


@pytest.mark.parametrize("tree,t", [("chain", 0.0), ("static", 0.0), ("dynamic-stop", 0.0), ("dynamic", 0.8),
                                    ("static", 0.8)])
def test_step_functions_trace_without_graph_breaks(sides, tree, t):
    pair, inputs, target, draft, first = sides
    sampling = SamplingConfig(temperature=t, top_p_sampling=0.9)
    with torch.inference_mode():
        cpu = torch.device("cpu")
        st = vanilla_state(torch.tensor([first]), inputs.next_position, cpu, sampling)
        shape = tree_shape(TREES[tree], pair.shared_vocab, cpu, sampling)
        ss = spec_state(first, inputs.next_position, shape, 400, 0, cpu)
        fns = {"decode": lambda: decode_step(target, st),
               "draft": lambda: draft_step(draft, ss, shape, 0, pair.shared_vocab),
               "verify": lambda: verify_step(target, ss, shape, 400, 0)}
        for name, fn in fns.items():
            torch._dynamo.reset()
            torch.compile(fn, fullgraph=True, backend="eager")()   # raises on a graph break
        assert int(st.pos) == inputs.next_position + 1 and int(ss.n_pending) == int(ss.out[0]) + 1


@pytest.mark.parametrize("tree", ["chain", "dynamic", "static"])
def test_sampled_step_keeps_the_target_law_of_the_next_token(sides, tree):
    """One speculative step from a fixed state, repeated with fresh noise: the first token it emits
    follows the target's processed distribution after the root (Bretagnolle-Huber-Carol bound on the
    total variation, alpha = 1e-3); accepting the draft's first child outright does not."""
    pair, inputs, target, draft, first = sides
    cfg = SamplingConfig(temperature=0.6, top_p_sampling=0.9, seed=0)
    gen = torch.Generator().manual_seed(1)
    with torch.inference_mode():
        cpu = torch.device("cpu")
        shape = tree_shape(TREES[tree], pair.shared_vocab, cpu, cfg)
        st = spec_state(first, inputs.next_position, shape, 400, 0, cpu)
        one = target.cache.slots[:1] + target.cache.length
        exact = process_logits(static_forward(target, st.root, st.pos.view(1), one, causal_bias(1, torch.float32,
                                                                                                  cpu))[-1], cfg)
        saved = [t.clone() for t in st.tensors() + [target.cache.length, draft.cache.length]]
        firsts, drafted = [], []
        for _ in range(RUNS):
            refresh(st.noise, gen)
            draft_step(draft, st, shape, 0, pair.shared_vocab)
            drafted.append(int(st.tokens[0]))
            verify_step(target, st, shape, 400, 0)
            firsts.append(int(st.out[1]) if int(st.out[0]) > 0 else int(st.out[-2]))
            for t, s in zip(st.tensors() + [target.cache.length, draft.cache.length], saved):
                t.copy_(s)
    support = int((exact > 0).sum())
    bound = math.sqrt((support * math.log(2) + math.log(1e3)) / (2 * RUNS))
    assert _tv(firsts, exact) < bound, (tree, support, _tv(firsts, exact), bound)
    assert _tv(drafted, exact) > bound          # the draft's own choice is not the target's law


RUNS = 500


def _tv(samples: list[int], probs: torch.Tensor) -> float:
    emp = torch.bincount(torch.tensor(samples), minlength=probs.shape[0]).double() / len(samples)
    return 0.5 * float((emp - probs.double()).abs().sum())


def test_commit_keeps_the_path_in_order():
    k = torch.arange(12, dtype=torch.float32).view(1, 1, 12, 1).expand(1, 2, 12, 3).contiguous()
    cache = statickv.allocate(_FakeCache(k[..., :5, :]), 12)
    layer = cache.layers[0]
    layer.keys[..., 5:10, :] = torch.tensor([50., 51., 52., 53., 54.]).view(1, 1, 5, 1)
    cache.commit(torch.tensor([0, 3, 1, 4]), torch.tensor(3))
    assert int(cache.length) == 8
    assert layer.keys[0, 1, :8, 0].tolist() == [0, 1, 2, 3, 4, 50, 53, 51]


class _FakeCache:
    def __init__(self, k):
        self.layers = [type("L", (), {"keys": k, "values": k.clone()})()]
