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
from specvlm.engine.hostreads import HostReadCounter
from specvlm.spec import deviceaccept as da
from specvlm.spec import devicestatic as ds
from specvlm.spec.sampling import process_logits, verify_tree

V, VD, ROOT = 6, 5, 0
RUNS = 4000
CFG = SamplingConfig(temperature=0.9, top_p_sampling=0.95, seed=0)
_g = torch.Generator().manual_seed(0)
T_LOGITS = torch.randn(4, V, V, generator=_g) * 1.2
D_LOGITS = T_LOGITS[..., :VD] * 1.5 + torch.randn(4, V, VD, generator=_g)
T_PROBS = process_logits(T_LOGITS, CFG)     # (4, V, V): [position capped at 3, last token]
D_PROBS = process_logits(D_LOGITS, CFG)     # (4, V, VD)
TREE = [(0,), (1,), (2,), (0, 0), (0, 1), (1, 0), (0, 0, 0)]
CHAIN = [(0,), (0, 0), (0, 0, 0)]


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
def draft_static(seq, plan, gen, wrong=False):
    """Device-drafted static tree from ``seq``: (tokens with -1 for undrawn, parents, draft rows, node paths)."""
    n = plan.parents.shape[0]
    tokens = torch.full((n,), -1)
    rows = torch.zeros(n + 1, VD)
    rows[0] = dp(seq)
    paths: list[list[int]] = []
    par = plan.parents.tolist()
    for level in plan.levels:
        q = rows[level.fed + 1]
        if wrong:   # deterministic top-k children: not a draw from q
            tok = q.topk(level.counts[-1], dim=-1).indices[level.slot, level.rank]
            drawn = q[level.slot, tok] > 0
        else:
            tok, drawn = ds.sampled_static_children(q, level, torch.rand(q.shape, generator=gen))
        for c, (t, ok) in enumerate(zip(tok.tolist(), drawn.tolist())):
            i = level.start + c
            alive = ok and (par[i] < 0 or tokens[par[i]] >= 0)
            tokens[i] = t if alive else -1
            paths.append((paths[par[i]] if par[i] >= 0 else []) + [t])
            if alive:
                rows[1 + i] = dp(seq + paths[i])
    return tokens, plan.parents, rows, paths


def device_step(seq, gen, plan, wrong=False):
    tokens, parents, rows, paths = draft_static(seq, plan, gen, wrong)
    tprobs = torch.stack([tp(seq)] + [tp(seq + p) for p in paths])
    depth, width = len(plan.levels), max(lv.counts[-1] for lv in plan.levels)
    u = torch.rand(depth + 1, width + 1, generator=gen)
    path, n_acc, bonus = da.sampled_accept(tokens, parents, tprobs, rows, u, depth, width)
    packed = da.pack(n_acc, da.path_tokens(tokens, path), bonus)
    acc, nxt = da.unpack(packed.tolist())
    return acc + [nxt]


def empirical_tv(plan, wrong=False, seed=1, runs=RUNS):
    gen = torch.Generator().manual_seed(seed)
    counts: dict = {}
    for _ in range(runs):
        seq = [ROOT]
        while len(seq) < 3:
            seq += device_step(seq, gen, plan, wrong)
        counts[tuple(seq[1:3])] = counts.get(tuple(seq[1:3]), 0) + 1
    law = exact_law(2)
    tv = 0.5 * sum(abs(counts.get(k, 0) / runs - p) for k, p in law.items())
    return tv, tv_bound(len(law), runs)


# --------------------------------------------------------------------------- laws
def test_sampled_static_tree_keeps_the_target_law():
    tv, bound = empirical_tv(ds.static_plan(TREE))
    assert tv < bound, (tv, bound)


def test_sampled_chain_keeps_the_target_law():
    tv, bound = empirical_tv(ds.static_plan(CHAIN), seed=2)
    assert tv < bound, (tv, bound)


def test_deterministic_children_are_detected():
    tv, bound = empirical_tv(ds.static_plan(TREE), wrong=True, seed=3, runs=1500)   # TV ~0.2
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
    tok, drawn = ds.sampled_static_children(q, level, torch.rand(1, VD, generator=gen))
    assert drawn.all() and tok[0] != tok[1]
    small = torch.tensor([[0.0, 1.0, 0.0, 0.0, 0.0]])
    tok, drawn = ds.sampled_static_children(small, level, torch.rand(1, VD, generator=gen))
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


def test_sampled_functions_read_nothing_and_trace():
    plan = ds.static_plan(TREE)
    gen = torch.Generator().manual_seed(0)
    tokens, parents, rows, paths = draft_static([ROOT], plan, gen)
    tprobs = torch.stack([tp([ROOT])] + [tp([ROOT] + p) for p in paths])
    cases = [(ds.sampled_static_children, (rows[:1], plan.levels[0], torch.rand(1, VD, generator=gen))),
             (da.sample_token, (tprobs[0], torch.tensor(0.3))),
             (da.sampled_accept, (tokens, parents, tprobs, rows, torch.rand(4, 4, generator=gen), 3, 3))]
    for fn, args in cases:
        with HostReadCounter() as reads:
            want = fn(*args)
        assert reads.count == 0, (fn.__name__, dict(reads.by_kind))
        torch._dynamo.reset()
        got = torch.compile(fn, fullgraph=True, backend="eager", dynamic=False)(*args)
        for a, b in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
            assert torch.equal(a, b)
