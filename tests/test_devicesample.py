"""Sampled drafting and recursive rejection sampling on the device (specvlm.spec.devicestatic / deviceaccept).

Statistical tests as in test_sampling.py: a synthetic target and draft over V = 6 tokens (the draft covers
only the first 5), next-token laws from fixed random tables of (position, last token). The exact law of
the first two generated tokens is enumerated; the empirical law of N runs must lie within the
Bretagnolle-Huber-Carol total-variation bound at alpha = 1e-3, and a deliberately wrong drafter
(deterministic top-k children verified as if sampled) must exceed it. Seeds are fixed, so the tests
are deterministic.
"""
from __future__ import annotations

import itertools
import math

import pytest
import torch

from specvlm.config import SamplingConfig
from specvlm.runtime.hostreads import HostReadCounter
from specvlm.spec import deviceaccept as da
from specvlm.spec import devicesampled as dsm
from specvlm.spec import devicestatic as ds
from specvlm.spec import devicetree as dt
from helpers.hostdrafters import _slot_counts
from helpers.hostsampling import verify_tree
from specvlm.spec.sampling import process_logits

V, VD, ROOT = 6, 5, 0
RUNS = 2500   # 36 cells -> TV bound 0.080
CFG = SamplingConfig(temperature=0.9, top_p_sampling=0.95, seed=0)
_g = torch.Generator().manual_seed(0)
T_LOGITS = torch.randn(4, V, V, generator=_g) * 1.2
D_LOGITS = T_LOGITS[..., :VD] * 1.5 + torch.randn(4, V, VD, generator=_g)
T_PROBS = process_logits(T_LOGITS, CFG)     # (4, V, V): [position capped at 3, last token]
D_PROBS = process_logits(D_LOGITS, CFG)     # (4, V, VD)
TREE = [(0,), (1,), (2,), (0, 0), (0, 1), (1, 0), (0, 0, 0)]


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def tp(seq):
    return T_PROBS[min(len(seq) - 1, 3), seq[-1]]


def dp(seq):
    return D_PROBS[min(len(seq) - 1, 3), seq[-1]]


def exact_law(n: int) -> dict:
    out = {}
    for xs in itertools.product(range(V), repeat=n):
        seq, pr = [ROOT], 1.0
        for x in xs:
            pr *= float(tp(seq)[x])
            seq.append(x)
        out[xs] = pr
    return out


def tv_bound(cells: int, n: int, alpha: float = 1e-3) -> float:
    return 0.5 * math.sqrt(2 * (cells * math.log(2) + math.log(1 / alpha)) / n)


# --------------------------------------------------------------------------- one device step
def device_feed(seq):
    """The synthetic draft as a device feed: logits after a node depend on (position, token)."""
    def feed(tokens, parents, front):
        pos = (len(seq) - 1 + dt.node_depths(parents)[front]).clamp(max=3)
        return D_LOGITS[pos, tokens[front]]
    return feed


def build_static(seq, gen, plan):
    noise = torch.rand(dsm.static_noise_shape(plan, VD), generator=gen)
    st = dsm.sampled_static_tree(D_LOGITS[min(len(seq) - 1, 3), seq[-1]], device_feed(seq), CFG, plan, noise)
    return st, len(plan.levels), max(lv.counts[-1] for lv in plan.levels)


def build_dynamic(seq, gen, depth, top_k, total, min_prob=0.0):
    noise = torch.rand(dsm.dynamic_noise_shape(depth, top_k, total, VD), generator=gen)
    st = dsm.sampled_dynamic_tree(D_LOGITS[min(len(seq) - 1, 3), seq[-1]], device_feed(seq), CFG, depth, top_k,
                                  total, noise, min_prob)
    return st, depth, top_k


def build_wrong(seq, gen, plan):
    """DELIBERATELY WRONG: deterministic top-k children verified as if they were draws without replacement."""
    n = plan.parents.shape[0]
    tokens, rows = torch.zeros(n, dtype=torch.long), torch.zeros(n + 1, VD)
    rows[0] = dp(seq)
    for i, level in enumerate(plan.levels):
        if i:
            rows[level.fed + 1] = process_logits(device_feed(seq)(tokens[:level.start], plan.parents[:level.start],
                                                                  level.fed), CFG)
        q = rows[level.fed + 1]
        tokens[level.start:level.start + level.slot.shape[0]] = q.topk(level.counts[-1], -1).indices[level.slot,
                                                                                                       level.rank]
    valid = rows[plan.parents + 1].gather(-1, tokens[:, None]).squeeze(-1) > 0
    valid = dt.ancestor_matrix(plan.parents).le(valid[None, :]).all(-1)
    tree = dt.DeviceTree(tokens, plan.parents, torch.zeros(n), valid)
    return dsm.SampledTree(tree, rows), len(plan.levels), max(lv.counts[-1] for lv in plan.levels)


def node_paths(tokens, parents):
    out: list[list[int]] = []
    for t, p in zip(tokens.tolist(), parents.tolist()):
        out.append((out[p] if p >= 0 else []) + [t])
    return out


def device_step(seq, gen, build, **kw):
    st, depth, width = build(seq, gen, **kw)
    tree = st.tree
    tokens = torch.where(tree.valid, tree.tokens, -1)
    tprobs = torch.stack([tp(seq)] + [tp(seq + p) for p in node_paths(tree.tokens, tree.parents)])
    u = torch.rand(depth + 1, width + 1, generator=gen)
    path, n_acc, bonus = da.sampled_accept(tokens, tree.parents, tprobs, st.draft_probs, u, depth, width)
    acc, nxt = da.unpack(da.pack(n_acc, da.path_tokens(tokens, path), bonus).tolist())
    return acc + [nxt]


@torch.inference_mode()   # thousands of steps of small tensors: no autograd bookkeeping per op
def empirical_tv(build, seed=1, runs=RUNS, **kw):
    gen = torch.Generator().manual_seed(seed)
    counts: dict = {}
    for _ in range(runs):
        seq = [ROOT]
        while len(seq) < 3:
            seq += device_step(seq, gen, build, **kw)
        counts[tuple(seq[1:3])] = counts.get(tuple(seq[1:3]), 0) + 1
    law = exact_law(2)
    tv = 0.5 * sum(abs(counts.get(k, 0) / runs - p) for k, p in law.items())
    return tv, tv_bound(len(law), runs)


# --------------------------------------------------------------------------- laws
def test_sampled_static_tree_keeps_the_target_law():
    tv, bound = empirical_tv(build_static, plan=ds.static_plan(TREE))
    assert tv < bound, (tv, bound)


def test_sampled_dynamic_tree_keeps_the_target_law():
    tv, bound = empirical_tv(build_dynamic, seed=2, depth=3, top_k=3, total=6)
    assert tv < bound, (tv, bound)


def test_sampled_chain_with_early_stop_keeps_the_target_law():
    tv, bound = empirical_tv(build_dynamic, seed=3, runs=2000, depth=3, top_k=1, total=3, min_prob=0.3)
    assert tv < bound, (tv, bound)


def test_deterministic_children_are_detected():
    tv, bound = empirical_tv(build_wrong, seed=4, runs=1000, plan=ds.static_plan(TREE))   # TV ~0.22 vs bound 0.126
    assert tv > bound, (tv, bound)


def test_gumbel_children_are_draws_without_replacement():
    """First two draws from q: P(a, b) = q(a) q(b) / (1 - q(a)) (Plackett-Luce)."""
    q = torch.tensor([[0.5, 0.3, 0.15, 0.05, 0.0]])
    level = ds.static_plan([(0,), (1,)]).levels[0]
    gen = torch.Generator().manual_seed(4)
    counts: dict = {}
    n = 20000
    for _ in range(n // 1000):
        u = torch.rand(1000, 1, VD, generator=gen)
        keys = q.log() - torch.log(-torch.log(u.clamp(min=1e-38)))
        for a, b in keys.squeeze(1).topk(2, -1).indices.tolist():
            counts[(a, b)] = counts.get((a, b), 0) + 1
    law = {(a, b): float(q[0, a] * q[0, b] / (1 - q[0, a])) for a in range(VD) for b in range(VD) if a != b}
    tv = 0.5 * sum(abs(counts.get(k, 0) / n - p) for k, p in law.items())
    assert tv < tv_bound(len(law), n)
    tok, drawn = dsm.sampled_static_children(q, level, torch.rand(1, VD, generator=gen))
    assert drawn.all() and tok[0] != tok[1]
    small = torch.tensor([[0.0, 1.0, 0.0, 0.0, 0.0]])
    tok, drawn = dsm.sampled_static_children(small, level, torch.rand(1, VD, generator=gen))
    assert tok[0] == 1 and drawn.tolist() == [True, False]


# --------------------------------------------------------------------------- determined cases
def test_sampled_accept_determined_outcomes_match_host():
    """Where every acceptance is certain or impossible, device and host take the same path."""
    tokens = torch.tensor([2, 3, 1, 4])
    parents = torch.tensor([-1, -1, 1, 2])
    onehot = lambda t: torch.nn.functional.one_hot(torch.tensor(t), V).float()  # noqa: E731
    draft = torch.stack([torch.full((V,), 1 / V), onehot(0), torch.full((V,), 1 / V), onehot(4), onehot(0)])
    target = torch.stack([onehot(3), onehot(0), onehot(1), onehot(5), onehot(2)])
    gen = torch.Generator().manual_seed(0)
    for _ in range(20):
        u = torch.rand(4, 3, generator=gen)
        path, n_acc, bonus = da.sampled_accept(tokens, parents, target, draft, u, 3, 2)
        assert path.tolist() == [1, 2, -1] and int(n_acc) == 2 and int(bonus) == 5
        assert verify_tree(parents, tokens, target, draft, gen) == ([1, 2], 5)


def test_sample_token_inverse_cdf():
    p = torch.tensor([0.0, 0.25, 0.0, 0.75, 0.0])
    assert [int(da.sample_token(p, torch.tensor(u))) for u in (0.0, 0.24, 0.25, 0.99, 1.0)] == [1, 1, 3, 3, 3]


def test_slot_choice_equals_host_slot_counts():
    gen = torch.Generator().manual_seed(5)
    for trial in range(200):
        f, top_k = int(torch.randint(1, 5, (), generator=gen)), int(torch.randint(1, 5, (), generator=gen))
        logits = torch.randn(f, VD, generator=gen).round()          # ties
        logits[torch.rand(f, VD, generator=gen) < 0.4] = -torch.inf   # small supports
        logits[:, 0] = 0.0
        q = torch.softmax(logits, -1)
        scores = -torch.rand(f, generator=gen).round(decimals=1)
        budget = int(torch.randint(0, 8, (), generator=gen))
        valid = torch.rand(f, generator=gen) < 0.8
        chosen = dsm.slot_choice(q, scores, valid, top_k, torch.tensor(budget))
        keep = valid.tolist()
        want = _slot_counts(q[valid], scores[valid].tolist(), top_k, budget) if any(keep) else []
        assert chosen.sum(-1)[valid].tolist() == want and not chosen[~valid].any()
        lead = chosen.cumsum(-1) == torch.arange(1, chosen.shape[1] + 1)   # each row's choice is a prefix
        assert torch.equal(chosen, chosen & lead)


def test_sampled_dynamic_tree_structure():
    gen = torch.Generator().manual_seed(6)
    for trial in range(40):
        seq = [ROOT] + torch.randint(0, V, (int(trial % 3),), generator=gen).tolist()
        depth, top_k, total = 1 + trial % 4, 1 + trial % 3, 2 + trial % 7
        st, _, _ = build_dynamic(seq, gen, depth, top_k, total, min_prob=0.05 * (trial % 2))
        tree = st.tree
        valid, par = tree.valid.tolist(), tree.parents.tolist()
        n = sum(valid)
        assert valid == [True] * n + [False] * (len(valid) - n) and n <= total
        assert all(p < i for i, p in enumerate(par[:n]))
        depths = dt.node_depths(tree.parents)[:n].tolist()
        assert all(depths.count(d) <= top_k for d in set(depths)) and max(depths, default=0) <= depth
        sibs = [(p, t) for p, t in zip(par[:n], tree.tokens[:n].tolist())]
        assert len(set(sibs)) == n                                   # distinct siblings
        for i in range(n):
            q = st.draft_probs[par[i] + 1]
            assert q[tree.tokens[i]] > 0
            base = tree.scores[par[i]] if par[i] >= 0 else 0.0
            torch.testing.assert_close(tree.scores[i], base + q[tree.tokens[i]].log())
        if n:   # level 1 = min(top_k, support, total) draws from the root's q
            support = int((st.draft_probs[0] > 0).sum())
            assert depths.count(1) == min(top_k, support, total)


def test_sampled_functions_read_nothing_and_trace():
    plan = ds.static_plan(TREE)
    gen = torch.Generator().manual_seed(0)
    st, _, _ = build_static([ROOT], gen, plan)
    tokens = torch.where(st.tree.valid, st.tree.tokens, -1)
    tprobs = torch.stack([tp([ROOT])] + [tp([ROOT] + p) for p in node_paths(st.tree.tokens, st.tree.parents)])
    q = st.draft_probs[:3]
    root, feed = D_LOGITS[0, ROOT], device_feed([ROOT])
    snoise = torch.rand(dsm.static_noise_shape(plan, VD), generator=gen)
    dnoise = torch.rand(dsm.dynamic_noise_shape(3, 2, 5, VD), generator=gen)
    cases = [(dsm.gumbel_draws, (q, 2, torch.rand(3, VD, generator=gen))),
             (dsm.sampled_static_children, (q[:1], plan.levels[0], torch.rand(1, VD, generator=gen))),
             (dsm.slot_choice, (q, torch.tensor([-0.1, -0.5, -0.2]), torch.tensor([True, True, False]), 2,
                                torch.tensor(3))),
             (lambda r, n: dsm.sampled_static_tree(r, feed, CFG, plan, n), (root, snoise)),
             (lambda r, n: dsm.sampled_dynamic_tree(r, feed, CFG, 3, 2, 5, n, 0.1), (root, dnoise)),
             (da.sample_token, (tprobs[0], torch.tensor(0.3))),
             (da.sampled_accept, (tokens, st.tree.parents, tprobs, st.draft_probs, torch.rand(4, 4, generator=gen),
                                  3, 3))]
    for fn, args in cases:
        with HostReadCounter() as reads:
            want = _flat(fn(*args))
        assert reads.count == 0, (fn.__name__, dict(reads.by_kind))
        torch._dynamo.reset()
        got = _flat(torch.compile(fn, fullgraph=True, backend="eager", dynamic=False)(*args))
        assert len(got) == len(want) and all(torch.equal(a, b) for a, b in zip(got, want))


def _flat(out) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, dsm.SampledTree):
        t = out.tree
        return [t.tokens, t.parents, t.scores, t.valid, out.draft_probs]
    return list(out)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_sampled_step_does_not_sync_on_cuda():
    """A whole sampled step (dynamic tree, accept, pack) on CUDA with sync debug mode raising on any sync."""
    table = D_LOGITS.cuda()

    def feed(tokens, parents, front):
        return table[dt.node_depths(parents)[front].clamp(max=3), tokens[front]]

    def step(root, noise, u, tprobs):
        st = dsm.sampled_dynamic_tree(root, feed, CFG, 3, 3, 6, noise, 0.05)
        tokens = torch.where(st.tree.valid, st.tree.tokens, -1)
        path, n_acc, bonus = da.sampled_accept(tokens, st.tree.parents, tprobs, st.draft_probs, u, 3, 3)
        return da.pack(n_acc, da.path_tokens(tokens, path), bonus)

    gen = torch.Generator(device="cuda").manual_seed(0)
    args = (table[0, ROOT], torch.rand(dsm.dynamic_noise_shape(3, 3, 6, VD), generator=gen, device="cuda"),
            torch.rand(4, 4, generator=gen, device="cuda"), T_PROBS[1, :7].cuda())
    step(*args)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        packed = step(*args)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    acc, bonus = da.unpack(packed.tolist())
    assert len(acc) <= 3 and 0 <= bonus < V
