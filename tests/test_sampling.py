"""Lossless sampling (specvlm.spec.sampling): logits processing, seeds, greedy limit, and statistical
tests that vanilla, chain and tree speculative sampling reproduce the target distribution.

The statistical tests use a synthetic "model": the target's and the draft's next-token
distributions depend on (position, last token) through fixed random tables over V = 6 tokens
(the draft covers only the first 5, like a narrower shared vocabulary). The exact law of the
first generated tokens is enumerated, and the empirical law from N runs must lie within the
total-variation bound of the Bretagnolle-Huber-Carol inequality,
    P(||p_hat - p||_1 >= eps) <= 2^k exp(-N eps^2 / 2),
at alpha = 1e-3 for k cells: TV <= eps / 2 = sqrt(2 (k ln 2 + ln(1 / alpha)) / N) / 2.
A deliberately wrong tree verifier (deterministic top-k children, plain per-child rejection; it
lives here, never in the library) must exceed the same bound, which proves the tests have power.
"""
from __future__ import annotations

import itertools
import math

import pytest
import torch

from specvlm.config import ConfigError, TreeConfig
from helpers.hostdrafters import GreedyDrafter, SampledDrafter, greedy_accept
from helpers.hostsampling import _accept, _children, _pad, exclude, residual, sample_without_replacement, verify_tree
from specvlm.config import SamplingConfig
from specvlm.spec.sampling import make_generator, process_logits, sample

V, VD, ROOT = 6, 5, 0
ALPHA = 1e-3
N_SPEC = 5000  # runs per speculative method (2 tokens, 36 cells -> TV bound 0.056)


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Tiny tensors: intra-op threads only add contention on a shared 2-core machine."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


# --------------------------------------------------------------------------- drafters and a wrong verifier
def build_dynamic(root, feed, depth, top_k, total):
    return GreedyDrafter(TreeConfig()).dynamic(root, feed, depth, top_k, total).tree


def build_sampled_tree(root, feed, depth, top_k, generator, cfg, total_tokens=None, min_prob=0.0):
    total = depth * top_k if total_tokens is None else total_tokens
    return SampledDrafter(TreeConfig(), cfg, generator).dynamic(root, feed, depth, top_k, total, min_prob)


def build_sampled_static(root, feed, spec, generator, cfg):
    return SampledDrafter(TreeConfig(shape="static"), cfg, generator).static(root, feed, spec)


def build_sampled(root, feed, tree_cfg, cfg, generator):
    return SampledDrafter(tree_cfg, cfg, generator).build(root, feed)


def sampled_accept(draft, target_logits, cfg, generator):
    return SampledDrafter(TreeConfig(), cfg, generator).accept(draft, target_logits)


def verify_tree_naive(tree_parents, tree_tokens, target_probs, draft_probs, generator):
    """DELIBERATELY WRONG tree verification, only to prove the statistical tests have power.

    Meant for deterministic top-k children: each child is accepted with min(1, p(x) / q(x)) using
    the full draft q and the full target p for every sibling; if all are rejected the next token
    comes from normalize(max(0, p - q)). Neither the proposal law (top-k is not a sample from q)
    nor the per-sibling target is right, so the output distribution differs from the target's.
    """
    children = _children(tree_parents.tolist())
    toks = tree_tokens.tolist()
    V = target_probs.shape[-1]
    path: list[int] = []
    node = -1
    while True:
        row = node + 1
        p = target_probs[row].float()
        kids = children.get(node, [])
        if not kids:
            return path, sample(p, generator)
        q = _pad(draft_probs[row], V)
        q = q / q.sum()
        nxt = next((c for c in kids if _accept(float(p[toks[c]]), float(q[toks[c]]), generator)), None)
        if nxt is None:
            return path, sample(residual(p, q), generator)
        path.append(nxt)
        node = nxt


# --------------------------------------------------------------------------- synthetic model
CFG = SamplingConfig(temperature=0.9, top_p_sampling=0.95, seed=0)
_g = torch.Generator().manual_seed(0)
T_LOGITS = torch.randn(4, V, V, generator=_g) * 1.2          # [position (capped at 3), last token]
D_LOGITS = T_LOGITS[..., :VD] * 1.5 + torch.randn(4, V, VD, generator=_g)  # sharper, different draft
T_PROBS = process_logits(T_LOGITS, CFG)                       # (4, V, V)
D_PROBS = process_logits(D_LOGITS, CFG)                       # (4, V, VD)


def tp(seq: list[int]) -> torch.Tensor:
    """Target's processed next-token probs after ``seq`` (seq[0] = root)."""
    return T_PROBS[min(len(seq) - 1, 3), seq[-1]]


def dlogits(seq: list[int]) -> torch.Tensor:
    return D_LOGITS[min(len(seq) - 1, 3), seq[-1]]


def dp(seq: list[int]) -> torch.Tensor:
    return D_PROBS[min(len(seq) - 1, 3), seq[-1]]


def exact_law(n: int) -> dict[tuple[int, ...], float]:
    out = {}
    for xs in itertools.product(range(V), repeat=n):
        seq, pr = [ROOT], 1.0
        for x in xs:
            pr *= float(tp(seq)[x])
            seq.append(x)
        out[xs] = pr
    return out


def tv_bound(cells: int, n: int, alpha: float = ALPHA) -> float:
    return 0.5 * math.sqrt(2 * (cells * math.log(2) + math.log(1 / alpha)) / n)


def tv(counts: dict, law: dict, n: int) -> float:
    keys = set(counts) | set(law)
    return 0.5 * sum(abs(counts.get(k, 0) / n - law.get(k, 0.0)) for k in keys)


def node_paths(tree) -> list[list[int]]:
    toks, par = tree.tokens.tolist(), tree.parents.tolist()
    out: list[list[int]] = []
    for i in range(len(toks)):
        out.append((out[par[i]] if par[i] >= 0 else []) + [toks[i]])
    return out


def tree_step(seq: list[int], gen: torch.Generator, build: str, **kw) -> list[int]:
    """One draft-tree + verify step from ``seq``; returns the emitted tokens."""
    def feed(nodes, tree):
        paths = node_paths(tree)
        return torch.stack([dlogits(seq + paths[i]) for i in nodes])

    if build == "naive":
        tree = build_dynamic(dp(seq).log(), lambda nodes, t: torch.stack(
            [dp(seq + node_paths(t)[i]).log() for i in nodes]), kw["depth"], kw["top_k"], 99)
        paths = node_paths(tree)
        dprobs = torch.stack([dp(seq)] + [dp(seq + p) for p in paths])
        verify = verify_tree_naive
    else:
        if build == "static":
            st = build_sampled_static(dlogits(seq), feed, kw["spec"], gen, CFG)
        else:
            st = build_sampled_tree(dlogits(seq), feed, kw["depth"], kw["top_k"], gen, CFG, kw.get("total"),
                                    kw.get("min_prob", 0.0))
        tree, dprobs, verify = st.tree, st.draft_probs, verify_tree
        paths = node_paths(tree)
    tprobs = torch.stack([tp(seq)] + [tp(seq + p) for p in paths])
    path, nxt = verify(tree.parents, tree.tokens, tprobs, dprobs, gen)
    return [int(tree.tokens[i]) for i in path] + [nxt]


class SyntheticRunner:
    """The synthetic draft behind the runner interface the engine hands a drafter
    (``feed_pending``, ``feed_nodes``, ``feed_next``, ``rollback``)."""

    def __init__(self, seq: list[int]):
        self.seq, self.chain = seq, []

    def feed_pending(self, pending: list[int], root_pos: int) -> torch.Tensor:
        return dlogits(self.seq)

    def feed_nodes(self, nodes, tree) -> torch.Tensor:
        return _feed_for(self.seq)(nodes, tree)

    def feed_next(self, token: int, depth: int) -> torch.Tensor:
        self.chain = self.chain[:depth - 1] + [token]
        return dlogits(self.seq + self.chain)

    def rollback(self) -> None:
        self.chain = []


def tlogits(seq: list[int]) -> torch.Tensor:
    return T_LOGITS[min(len(seq) - 1, 3), seq[-1]]


def chain_step(seq: list[int], gen: torch.Generator, depth: int) -> list[int]:
    """One step of the product's sampled chain: SampledDrafter with a chain tree drafts through the
    runner interface, then accepts by recursive rejection sampling (verify_tree) on the target's logits."""
    drafter = SampledDrafter(TreeConfig(shape="chain", depth=depth), CFG, gen)
    draft = drafter.draft(SyntheticRunner(seq), [seq[-1]], len(seq))
    assert draft.tree.parents.tolist() == list(range(-1, draft.tree.size - 1))   # a chain
    rows = torch.stack([tlogits(seq)] + [tlogits(seq + p) for p in node_paths(draft.tree)])
    path, nxt = drafter.accept(draft, rows)
    return [int(draft.tree.tokens[i]) for i in path] + [nxt]


def generate(n: int, gen: torch.Generator, step) -> tuple[int, ...]:
    seq = [ROOT]
    while len(seq) - 1 < n:
        seq += step(seq, gen)
    return tuple(seq[1:n + 1])


@torch.inference_mode()   # thousands of steps of small tensors: no autograd bookkeeping per op
def empirical_tv(n_tokens: int, runs: int, step, seed: int = 1) -> tuple[float, float]:
    gen = make_generator(seed)
    counts: dict = {}
    for _ in range(runs):
        out = generate(n_tokens, gen, step)
        counts[out] = counts.get(out, 0) + 1
    law = exact_law(n_tokens)
    return tv(counts, law, runs), tv_bound(len(law), runs)


# --------------------------------------------------------------------------- config and processing
def test_config_validation():
    assert SamplingConfig().greedy and not SamplingConfig(temperature=0.7).greedy
    for bad in [dict(temperature=-0.1), dict(temperature=5.5), dict(top_p_sampling=0.0),
                dict(top_p_sampling=1.2), dict(seed=-1), dict(seed=1.5), dict(temperature=True)]:
        with pytest.raises(ConfigError):
            SamplingConfig(**bad)
    with pytest.raises(ConfigError, match="top_p_sampling"):
        SamplingConfig(top_p_sampling=2.0)


def test_process_logits_temperature_and_nucleus():
    logits = torch.tensor([[2.0, 1.0, 0.5, -1.0, float("-inf"), 0.0]])
    p = process_logits(logits, SamplingConfig(temperature=0.5))
    assert p.dtype == torch.float32 and p.shape == (1, 6)
    assert torch.allclose(p, torch.softmax(logits / 0.5, -1))
    full = torch.softmax(logits[0], -1)
    order = full.argsort(descending=True)
    for top_p in [0.05, 0.3, 0.6, 0.8, 0.9, 0.99]:
        q = process_logits(logits[0], SamplingConfig(temperature=1.0, top_p_sampling=top_p))
        kept = set(torch.nonzero(q).flatten().tolist())
        # the smallest prefix of the sorted tokens whose mass reaches top_p
        m = int((full[order].cumsum(0) < top_p).sum()) + 1
        assert kept == set(order[:m].tolist()), top_p
        assert float(full[list(kept)].sum()) >= top_p
        assert math.isclose(float(q.sum()), 1.0, rel_tol=1e-6)
        assert torch.allclose(q[list(kept)], full[list(kept)] / full[list(kept)].sum())
    exact = torch.log(torch.tensor([0.5, 0.3, 0.2]))
    q = process_logits(exact, SamplingConfig(temperature=1.0, top_p_sampling=0.5))
    assert torch.nonzero(q).flatten().tolist() == [0]          # mass 0.5 >= 0.5: one token suffices
    greedy = process_logits(torch.tensor([[0.1, 3.0, 3.0], [5.0, 0.0, 1.0]]), SamplingConfig(temperature=0))
    assert greedy.tolist() == [[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]]  # one-hot, first index on ties


def test_sample_and_residual_helpers():
    gen = make_generator(0)
    p = torch.tensor([0.0, 0.5, 0.0, 0.5])
    assert all(sample(p, gen) in (1, 3) for _ in range(200))
    r = residual(torch.tensor([0.5, 0.5, 0.0]), torch.tensor([0.2, 0.6, 0.2]))
    assert torch.allclose(r, torch.tensor([1.0, 0.0, 0.0]))
    same = torch.tensor([0.3, 0.7])
    assert torch.allclose(residual(same, same), same)          # rejection impossible: p itself
    assert torch.allclose(exclude(torch.tensor([0.5, 0.25, 0.25]), [0]), torch.tensor([0.0, 0.5, 0.5]))


def test_sample_without_replacement_law():
    q = torch.tensor([0.35, 0.25, 0.2, 0.1, 0.07, 0.03])
    gen = make_generator(3)
    toks, draws = sample_without_replacement(q, 6, gen)
    assert sorted(toks.tolist()) == list(range(6))
    for j in range(6):
        assert torch.allclose(draws[j], exclude(q, toks[:j].tolist()))
    with pytest.raises(ValueError, match="support"):
        sample_without_replacement(torch.tensor([0.5, 0.5, 0.0]), 3, gen)
    runs, counts = 10000, {}
    for _ in range(runs):
        t = tuple(sample_without_replacement(q, 2, gen)[0].tolist())
        counts[t] = counts.get(t, 0) + 1
    law = {(a, b): float(q[a] * q[b] / (1 - q[a])) for a in range(6) for b in range(6) if a != b}
    assert tv(counts, law, runs) < tv_bound(len(law), runs)


# --------------------------------------------------------------------------- statistical exactness
def test_vanilla_sampling_matches_target():
    def step(seq, gen):
        return [sample(tp(seq), gen)]
    d, bound = empirical_tv(3, 20000, step)
    assert d < bound, (d, bound)


def test_chain_speculative_sampling_matches_target():
    """The product's sampled chain path (SampledDrafter, chain tree, verify_tree) keeps the target's law."""
    d, bound = empirical_tv(2, N_SPEC, lambda s, g: chain_step(s, g, depth=2))
    assert d < bound, (d, bound)


def test_tree_rrs_matches_target_and_naive_is_detected():
    kw = dict(depth=2, top_k=3)
    d, bound = empirical_tv(2, N_SPEC, lambda s, g: tree_step(s, g, "dynamic", **kw))
    assert d < bound, ("RRS", d, bound)
    d_naive, _ = empirical_tv(2, N_SPEC, lambda s, g: tree_step(s, g, "naive", **kw))
    assert d_naive > bound, ("the test has no power: naive", d_naive, bound)


def test_tree_rrs_with_early_stop_matches_target():
    """The min_prob early stop decides the tree's depth from nodes already drawn: the law stays exact."""
    kw = dict(depth=3, top_k=2, min_prob=0.3)
    d, bound = empirical_tv(2, N_SPEC, lambda s, g: tree_step(s, g, "dynamic", **kw))
    assert d < bound, (d, bound)
    # the stop really shapes the trees here: some are cut short, some reach full depth
    gen = make_generator(5)
    depths = [int(build_sampled_tree(dlogits([ROOT]), _feed_for([ROOT]), 3, 2, gen, CFG, None, 0.3).tree.depths.max())
              for _ in range(200)]
    assert min(depths) < 3 and max(depths) == 3, sorted(set(depths))


def test_static_tree_rrs_matches_target():
    spec = [(0,), (1,), (2,), (0, 0), (0, 1), (1, 0)]
    d, bound = empirical_tv(2, N_SPEC // 2, lambda s, g: tree_step(s, g, "static", spec=spec))
    assert d < bound, (d, bound)


# --------------------------------------------------------------------------- builders, seeds, greedy
def _feed_for(seq):
    def feed(nodes, tree):
        paths = node_paths(tree)
        return torch.stack([dlogits(seq + paths[i]) for i in nodes])
    return feed


def test_build_sampled_tree_shape_and_records():
    gen = make_generator(5)
    calls = []

    def feed(nodes, tree):
        for i in nodes:                                       # ancestors fed before descendants
            assert tree.parents[i] < 0 or int(tree.parents[i]) in calls
        calls.extend(nodes)
        return _feed_for([ROOT])(nodes, tree)

    st = build_sampled_tree(dlogits([ROOT]), feed, depth=4, top_k=3, generator=gen, cfg=CFG, total_tokens=8)
    t = st.tree
    assert 1 <= t.size <= 8 and st.draft_probs.shape == (t.size + 1, VD)
    par, toks = t.parents.tolist(), t.tokens.tolist()
    assert all(p < i for i, p in enumerate(par))
    for node in [-1] + list(range(t.size)):
        kids = [i for i, p in enumerate(par) if p == node]
        assert len({toks[i] for i in kids}) == len(kids)      # siblings distinct
        if kids:  # consecutive node ids = draw order
            assert kids == list(range(kids[0], kids[0] + len(kids)))
        if kids:
            assert math.isclose(float(st.draft_probs[node + 1].sum()), 1.0, rel_tol=1e-5)
    assert t.depths.tolist() == [1 if p < 0 else int(t.depths[p]) + 1 for p in par]
    for d in range(1, 5):
        assert int((t.depths == d).sum()) <= 3
    chain = build_sampled(dlogits([ROOT]), _feed_for([ROOT]), TreeConfig(shape="chain", depth=3), CFG, gen).tree
    assert chain.parents.tolist() == [-1, 0, 1]
    stat = build_sampled(dlogits([ROOT]), _feed_for([ROOT]), TreeConfig(shape="static"), CFG, gen).tree
    assert 1 <= stat.size <= 25


def test_seeded_reproducibility():
    def run(seed):
        gen = make_generator(SamplingConfig(temperature=0.9, seed=seed))
        outs = [generate(4, gen, lambda s, g: tree_step(s, g, "dynamic", depth=3, top_k=2)) for _ in range(20)]
        outs += [generate(4, gen, lambda s, g: chain_step(s, g, depth=3)) for _ in range(20)]
        return outs
    assert run(7) == run(7)
    assert run(7) != run(8)


def test_temperature_zero_equals_greedy():
    greedy_cfg = SamplingConfig(temperature=0.0)
    logits = torch.randn(5, 50, generator=torch.Generator().manual_seed(2))
    gen = make_generator(0)
    for row in logits:
        assert sample(process_logits(row, greedy_cfg), gen) == int(row.argmax())
        assert sample(process_logits(row, SamplingConfig(temperature=1e-3)), gen) == int(row.argmax())
    # speculative with temperature 0 = greedy tree verification (target greedy, draft greedy)
    for seed in range(5):
        gen = make_generator(seed)
        st = build_sampled(dlogits([ROOT]), _feed_for([ROOT]), TreeConfig(depth=3, top_k=3), greedy_cfg, gen)
        paths = node_paths(st.tree)
        rows = torch.stack([T_LOGITS[0, ROOT]] + [T_LOGITS[min(len(p), 3), p[-1]] for p in paths])
        assert sampled_accept(st, rows, greedy_cfg, gen) == greedy_accept(st.tree, rows.argmax(-1))
        # a one-hot draft proposes one child per node: the tree is the draft's greedy chain
        assert st.tree.parents.tolist() == list(range(-1, st.tree.size - 1))
