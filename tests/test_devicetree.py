"""Device-side trees and greedy acceptance (specvlm.spec.devicetree / deviceaccept) against the host drafters.

Every function must give the host's exact tree, path and bonus on the same logits (random, tied and
probability-1 rows), read nothing back to the host (HostReadCounter), and trace under
``torch.compile(fullgraph=True)`` without a graph break.
"""
from __future__ import annotations

import pytest
import torch

from specvlm.config import TreeConfig
from specvlm.runtime.hostreads import HostReadCounter
from specvlm.spec import deviceaccept as da
from specvlm.spec import devicestatic as ds
from specvlm.spec import devicetree as dt
from helpers.hostdrafters import GreedyDrafter, greedy_accept
from helpers.hosttree import DraftTree
from specvlm.bench.stepcost import ancestor_mask, verify_mask
from specvlm.spec.tree import STATIC_TREES, static_paths

V = 40
DCAP = 4


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Tiny tensors: intra-op threads only add contention on a shared 2-core machine."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


# --------------------------------------------------------------------------- a draft that is a table
def logp_rows(shape: tuple[int, ...], seed: int, kind: str) -> torch.Tensor:
    """float32 (..., V) log-probs: ``random``, ``ties`` (few distinct values) or ``onehot`` (prob-1 rows)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, V, generator=g) * 3
    if kind == "ties":
        x = x.round().clamp(-2, 2)
    if kind == "onehot":
        x = torch.full_like(x, -torch.inf).scatter(-1, x.argmax(-1, keepdim=True), 0.0)
    if kind == "mixed":
        hot = torch.rand(*shape, 1, generator=g) < 0.3
        x = torch.where(hot, torch.full_like(x, -torch.inf).scatter(-1, x.argmax(-1, keepdim=True), 0.0),
                        x.round().clamp(-2, 2))
    return torch.log_softmax(x, -1)


class TableDraft:
    """The draft's log-probs after a node depend on (depth capped at DCAP, token): a lookup table."""

    def __init__(self, seed: int, kind: str):
        self.root = logp_rows((), seed, kind)
        self.table = logp_rows((DCAP + 1, V), seed + 1, kind)

    def host_feed(self, nodes, tree):
        return torch.stack([self.table[min(int(tree.depths[n]), DCAP), int(tree.tokens[n])] for n in nodes])

    def device_feed(self, tokens, parents, front):
        depth = dt.node_depths(parents)[front].clamp(max=DCAP)
        return self.table[depth, tokens[front]]

    def host_next(self, token, depth):
        return self.table[min(depth, DCAP), token]

    def device_next(self, token, depth):
        return self.table[min(depth, DCAP)].index_select(0, token.view(1)).squeeze(0)


def host_dynamic(draft, depth, top_k, total, min_prob=0.0):
    return GreedyDrafter(TreeConfig()).dynamic(draft.root, draft.host_feed, depth, top_k, total, min_prob).tree


def assert_same_tree(dev: dt.DeviceTree, host: DraftTree):
    n = host.size
    assert dev.valid[:n].all() and not dev.valid[n:].any()
    assert dev.tokens[:n].tolist() == host.tokens.tolist()
    assert dev.parents[:n].tolist() == host.parents.tolist()
    assert torch.equal(dev.scores[:n], host.scores)
    assert dt.node_depths(dev.parents)[:n].tolist() == host.depths.tolist()


KINDS = ("random", "ties", "onehot", "mixed")


# --------------------------------------------------------------------------- trees
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("depth,top_k,total", [(1, 3, 2), (3, 2, 5), (4, 4, 16), (5, 3, 60), (3, 8, 30)])
def test_dynamic_tree_equals_host(kind, depth, top_k, total):
    for seed in range(6):
        draft = TableDraft(seed, kind)
        dev = dt.dynamic_tree(draft.root, draft.device_feed, depth, top_k, total)
        assert_same_tree(dev, host_dynamic(draft, depth, top_k, total))


@pytest.mark.parametrize("kind", KINDS)
def test_dynamic_tree_early_stop_marks_later_levels_invalid(kind):
    stopped = 0
    for seed in range(8):
        draft = TableDraft(seed, kind)
        for min_prob in (0.02, 0.2, 0.6):
            host = host_dynamic(draft, 5, 3, 20, min_prob)
            dev = dt.dynamic_tree(draft.root, draft.device_feed, 5, 3, 20, min_prob)
            assert dev.tokens.shape == (20,)
            assert_same_tree(dev, host)
            stopped += host.size < 20
    assert stopped > 0 or kind == "onehot"   # a prob-1 path never stops


def test_dynamic_tree_with_vocab_smaller_than_top_k():
    g = torch.Generator().manual_seed(3)
    root = torch.log_softmax(torch.randn(3, generator=g), -1)
    table = torch.log_softmax(torch.randn(DCAP + 1, 3, 3, generator=g), -1)
    host = GreedyDrafter(TreeConfig()).dynamic(
        root, lambda nodes, t: torch.stack([table[min(int(t.depths[n]), DCAP), int(t.tokens[n])] for n in nodes]),
        3, 4, 40).tree
    dev = dt.dynamic_tree(root, lambda tok, par, front: table[dt.node_depths(par)[front], tok[front]], 3, 4, 40)
    assert host.size == 3 + 9 + 12
    assert_same_tree(dev, host)


def test_dynamic_level_is_the_host_order():
    scores = torch.tensor([-0.5, -0.5, -1.0])
    logp = torch.log_softmax(torch.tensor([[1.0, 1.0, 0.0, -1.0]] * 3), -1)
    tok, slot, sc = dt.dynamic_level(scores, logp, 2)
    cand = (scores[:, None] + logp.topk(2, -1).values).flatten()
    order = torch.argsort(cand, descending=True, stable=True)
    assert slot.tolist() == (order // 2).tolist() == [0, 0, 1, 1, 2, 2]
    assert torch.equal(sc, cand[order])
    assert tok.tolist() == logp.topk(2, -1).indices.flatten()[order].tolist()


def test_rerank_and_reindex():
    scores = torch.tensor([-1.0, -0.5, -2.0, -0.5, -3.0, -1.0, -0.7])
    parents = torch.tensor([-1, -1, 0, 1, 2, 1, 3])
    valid = torch.tensor([True, True, True, True, True, True, False])
    keep = dt.rerank(scores, valid, 4)
    assert keep.tolist() == [0, 1, 3, 5]   # -0.5 (1), -0.5 (3), -1.0 (0), -1.0 (5); node 6 invalid
    assert dt.reindex_parents(parents, keep).tolist() == [-1, -1, 1, 1]
    assert dt.rerank(scores, valid, 99).tolist() == list(range(7))   # invalid fill the rest, ascending
    assert dt.rerank(scores, torch.zeros(7, dtype=torch.bool), 2).tolist() == [1, 3]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("depth,min_prob", [(1, 0.0), (5, 0.0), (6, 0.3)])
def test_chain_tree_equals_host(kind, depth, min_prob):
    for seed in range(6):
        draft = TableDraft(seed, kind)
        host = GreedyDrafter(TreeConfig()).chain(draft.root, draft.host_feed, draft.host_next, depth, min_prob).tree
        dev = dt.chain_tree(draft.root, draft.device_next, depth, min_prob)
        n = host.size
        assert dev.valid[:n].all() and not dev.valid[n:].any()
        assert dev.tokens[:n].tolist() == host.tokens.tolist()
        assert dev.parents.tolist() == list(range(-1, depth - 1))
        torch.testing.assert_close(dev.scores[:n], host.scores)


# --------------------------------------------------------------------------- masks
def random_parents(n: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.tensor([-1] + [int(torch.randint(-1, i, (), generator=g)) for i in range(1, n)], dtype=torch.long)


@pytest.mark.parametrize("n", [0, 1, 2, 3, 7, 16, 33, 64])
def test_masks_equal_host(n):
    for seed in range(4):
        parents = random_parents(n, seed) if n else torch.zeros(0, dtype=torch.long)
        anc = dt.ancestor_matrix(parents)
        assert torch.equal(anc, ancestor_mask(parents))
        for dtype in (torch.float32, torch.bfloat16):
            assert torch.equal(dt.verify_bias(parents, dtype), verify_mask(parents, 0, dtype)[0, 0])
        depth = [0] * n
        for i, p in enumerate(parents.tolist()):
            depth[i] = depth[p] + 1 if p >= 0 else 1
        assert dt.node_depths(parents).tolist() == depth
    chain = torch.arange(-1, n - 1)
    assert torch.equal(dt.ancestor_matrix(chain), torch.ones(n, n, dtype=torch.bool).tril())


# --------------------------------------------------------------------------- greedy acceptance
def host_trees(seed: int):
    """Random parents-first trees over a 3-token vocabulary (duplicate siblings, long matches)."""
    g = torch.Generator().manual_seed(seed)
    n = int(torch.randint(0, 20, (), generator=g))
    parents = random_parents(n, seed) if n else torch.zeros(0, dtype=torch.long)
    tokens = torch.randint(0, 3, (n,), generator=g)
    target = torch.randint(0, 3, (n + 1,), generator=g)
    return tokens, parents, target


def test_greedy_accept_equals_host():
    lengths = set()
    for seed in range(300):
        tokens, parents, target = host_trees(seed)
        depth = int(dt.node_depths(parents).max()) if tokens.numel() else 0
        path, n_acc, bonus = da.greedy_accept(tokens, parents, target, max(depth, 1) + 1)
        tree = DraftTree(tokens, parents, dt.node_depths(parents), torch.zeros(tokens.numel()))
        hpath, hbonus = greedy_accept(tree, target)
        assert int(n_acc) == len(hpath) and int(bonus) == hbonus
        assert path.tolist() == hpath + [-1] * (path.numel() - len(hpath))
        lengths.add(len(hpath))
    assert {0, 1, 2, 3} <= lengths


def test_greedy_accept_skips_invalid_and_too_deep_nodes():
    tokens = torch.tensor([5, 6, 7])                     # a chain 0 -> 1 -> 2
    parents = torch.tensor([-1, 0, 1])
    target = torch.tensor([5, 6, 7, 9])
    path, n_acc, bonus = da.greedy_accept(tokens, parents, target, 3)
    assert path.tolist() == [0, 1, 2] and int(n_acc) == 3 and int(bonus) == 9
    path, n_acc, bonus = da.greedy_accept(torch.tensor([5, 6, -1]), parents, target, 3)
    assert path.tolist() == [0, 1, -1] and int(n_acc) == 2 and int(bonus) == 7
    path, n_acc, bonus = da.greedy_accept(tokens, parents, target, 2)
    assert path.tolist() == [0, 1] and int(n_acc) == 2 and int(bonus) == 7


def test_chain_accept_equals_greedy_accept_on_chains():
    g = torch.Generator().manual_seed(0)
    lengths = set()
    for d in (1, 2, 5, 8):
        parents = torch.arange(-1, d - 1)
        for _ in range(60):
            tokens = torch.randint(0, 2, (d,), generator=g)
            tokens[torch.rand(d, generator=g) < 0.1] = -1                 # invalid nodes are never accepted
            target = torch.randint(0, 2, (d + 1,), generator=g)
            want = da.greedy_accept(tokens, parents, target, d)
            got = da.chain_accept(tokens, target)
            assert all(torch.equal(a, b) for a, b in zip(got, want))
            lengths.add(int(got[1]))
    assert {0, 1, 2, 3} <= lengths


def test_tree_topology_parts_equal_the_separate_functions():
    for seed in range(20):
        parents = random_parents(1 + seed % 12, seed)
        topo = dt.tree_topology(parents, torch.float32)
        assert torch.equal(topo.anc, dt.ancestor_matrix(parents))
        assert topo.depths.tolist() == [0] + dt.node_depths(parents).tolist()
        assert torch.equal(topo.bias[0, 0], dt.verify_bias(parents, torch.float32))


def test_pack_unpack_round_trip():
    tokens = torch.tensor([5, 6, 8, 7])
    parents = torch.tensor([-1, 0, -1, 1])
    target = torch.tensor([5, 6, 7, 0, 3])
    path, n_acc, bonus = da.greedy_accept(tokens, parents, target, 4)
    packed = da.pack(n_acc, da.path_tokens(tokens, path), bonus)
    assert packed.tolist() == [3, 5, 6, 7, -1, 3]
    assert da.unpack(packed.tolist()) == ([5, 6, 7], 3)
    assert da.unpack([0, -1, -1, 4]) == ([], 4)
    with pytest.raises(dt.DeviceTreeError, match="pack"):
        da.unpack([5, 1, 2])


# --------------------------------------------------------------------------- a whole greedy step
def target_argmax(draft: TableDraft, tokens: torch.Tensor, parents: torch.Tensor, seed: int) -> torch.Tensor:
    """int64 (n+1,): a target close to the draft (argmax after the root and after each node)."""
    noise = torch.randn(DCAP + 1, V, V, generator=torch.Generator().manual_seed(seed)) * 0.5
    depth = dt.node_depths(parents).clamp(max=DCAP)
    rows = torch.cat([(draft.root + noise[0, 0])[None], (draft.table + noise)[depth, tokens]])
    return rows.argmax(-1)


@pytest.mark.parametrize("shape", ["dynamic", "static", "chain"])
def test_greedy_step_equals_host(shape):
    """Draft tree + acceptance + packed read give the host's accepted tokens and bonus."""
    plan, lengths = ds.static_plan(static_paths("official-25")), set()
    for seed in range(24):
        draft = TableDraft(seed, KINDS[seed % 4])
        if shape == "dynamic":
            host = host_dynamic(draft, 5, 3, 12, 0.05)
            dev = dt.dynamic_tree(draft.root, draft.device_feed, 5, 3, 12, 0.05)
        elif shape == "static":
            host = GreedyDrafter(TreeConfig()).static(draft.root, draft.host_feed, static_paths("official-25")).tree
            dev = ds.static_tree(draft.root, draft.device_feed, plan)
        else:
            host = GreedyDrafter(TreeConfig()).chain(draft.root, draft.host_feed, draft.host_next, 5, 0.05).tree
            dev = dt.chain_tree(draft.root, draft.device_next, 5, 0.05)
        hpath, hbonus = greedy_accept(host, target_argmax(draft, host.tokens, host.parents, seed))
        tokens = torch.where(dev.valid, dev.tokens, -1)
        path, n_acc, bonus = da.greedy_accept(tokens, dev.parents, target_argmax(draft, dev.tokens, dev.parents,
                                                                                 seed), 5)
        acc, nxt = da.unpack(da.pack(n_acc, da.path_tokens(tokens, path), bonus).tolist())
        assert (acc, nxt) == ([int(host.tokens[i]) for i in hpath], hbonus)
        lengths.add(len(acc))
    assert len(lengths) >= 3


# --------------------------------------------------------------------------- no host reads, one graph
def _greedy_cases():
    draft = TableDraft(1, "mixed")
    parents = random_parents(12, 2)
    g = torch.Generator().manual_seed(5)
    tokens, target = torch.randint(0, 3, (12,), generator=g), torch.randint(0, 3, (13,), generator=g)
    path = torch.tensor([0, 3, -1, -1])
    logp = logp_rows((3,), 4, "ties")
    scores = torch.tensor([-1.0, -0.5, -2.0, -0.5, -3.0, -1.0])
    valid = torch.tensor([True] * 5 + [False])
    return {
        "dynamic_level": (dt.dynamic_level, (torch.tensor([-0.1, -0.2, -0.9]), logp, 2)),
        "level_alive": (dt.level_alive, (torch.tensor(True), scores, 0.3)),
        "rerank": (dt.rerank, (scores, valid, 4)),
        "reindex_parents": (dt.reindex_parents, (parents, torch.tensor([0, 1, 2, 5]))),
        "dynamic_tree": (lambda r: dt.dynamic_tree(r, draft.device_feed, 4, 3, 10, 0.1), (draft.root,)),
        "chain_level": (dt.chain_level, (torch.tensor(-0.3), logp[0])),
        "chain_tree": (lambda r: dt.chain_tree(r, draft.device_next, 4, 0.1), (draft.root,)),
        "ancestor_matrix": (dt.ancestor_matrix, (parents,)),
        "node_depths": (dt.node_depths, (parents,)),
        "verify_bias": (lambda p: dt.verify_bias(p, torch.bfloat16), (parents,)),
        "greedy_accept": (da.greedy_accept, (tokens, parents, target, 6)),
        "path_tokens": (da.path_tokens, (tokens, path)),
        "static_children": (ds.static_children, (logp_rows((4,), 6, "ties"), STATIC_PLAN.levels[1])),
        "static_tree": (lambda r: ds.static_tree(r, draft.device_feed, STATIC_PLAN), (draft.root,)),
        "pack": (da.pack, (torch.tensor(2), torch.tensor([4, 5, -1]), torch.tensor(7))),
    }


STATIC_PLAN = ds.static_plan(static_paths("official-25"))
CASES = _greedy_cases()


@pytest.mark.parametrize("name", sorted(CASES))
def test_no_host_reads(name):
    fn, args = CASES[name]
    with HostReadCounter() as reads:
        fn(*args)
    assert reads.count == 0, dict(reads.by_kind)


@pytest.mark.parametrize("name", sorted(CASES))
def test_traces_as_one_graph(name):
    fn, args = CASES[name]
    torch._dynamo.reset()
    compiled = torch.compile(fn, fullgraph=True, backend="eager", dynamic=False)
    got, want = _flat(compiled(*args)), _flat(fn(*args))
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert torch.equal(a, b)


def _flat(out) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, dt.DeviceTree):
        return [out.tokens, out.parents, out.scores, out.valid]
    return list(out)


# --------------------------------------------------------------------------- static trees
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("preset", sorted(STATIC_TREES))
def test_static_tree_equals_host(kind, preset):
    plan = ds.static_plan(static_paths(preset))
    for seed in range(6):
        draft = TableDraft(seed, kind)
        host = GreedyDrafter(TreeConfig(shape="static")).static(draft.root, draft.host_feed,
                                                                static_paths(preset)).tree
        dev = ds.static_tree(draft.root, draft.device_feed, plan)
        assert dev.tokens.tolist() == host.tokens.tolist()
        assert dev.parents.tolist() == host.parents.tolist()
        torch.testing.assert_close(dev.scores, host.scores)
        assert dev.valid.all()


def test_static_plan_layout_and_errors():
    plan = ds.static_plan([(0,), (1,), (0, 0), (1, 0), (1, 1), (0, 0, 0)])
    assert plan.parents.tolist() == [-1, -1, 0, 1, 1, 2]
    assert [lv.fed.tolist() for lv in plan.levels] == [[-1], [0, 1], [2]]
    assert [lv.start for lv in plan.levels] == [0, 2, 5]
    assert plan.levels[1].slot.tolist() == [0, 1, 1] and plan.levels[1].rank.tolist() == [0, 0, 1]
    assert plan.levels[1].count.tolist() == [1, 2, 2] and plan.levels[1].counts == (1, 2)
    with pytest.raises(ValueError, match="no parent"):
        ds.static_plan([(0,), (0, 0, 0)])
    with pytest.raises(dt.DeviceTreeError, match="smaller tree"):
        ds.static_children(torch.zeros(1, 3), ds.static_plan([(0,), (1,), (2,), (3,)]).levels[0])


# --------------------------------------------------------------------------- on a GPU
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("name", sorted(CASES))
def test_no_sync_on_cuda_and_same_result(name):
    """On CUDA nothing synchronises (sync debug mode raises); without ``topk``/``max`` (whose ties a CUDA
    kernel may break differently) the result equals the CPU's."""
    fn, args = CASES[name]
    cuda = lambda x: x.cuda() if isinstance(x, torch.Tensor) else x  # noqa: E731
    want = _flat(fn(*args))
    if name in ("dynamic_tree", "chain_tree", "static_tree"):
        draft = TableDraft(1, "mixed")
        draft.root, draft.table = draft.root.cuda(), draft.table.cuda()
        plan = ds.static_plan(static_paths("official-25"), "cuda")
        fn = {"dynamic_tree": lambda r: dt.dynamic_tree(r, draft.device_feed, 4, 3, 10, 0.1),
              "chain_tree": lambda r: dt.chain_tree(r, draft.device_next, 4, 0.1),
              "static_tree": lambda r: ds.static_tree(r, draft.device_feed, plan)}[name]
    if name == "static_children":
        args = (args[0], ds.static_plan(static_paths("official-25"), "cuda").levels[1])
    args = tuple(cuda(a) for a in args)
    fn(*args)   # warm-up (first-call allocations)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        got = _flat(fn(*args))
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert [a.shape for a in got] == [b.shape for b in want]
    if name not in TIE_PRONE:
        assert all(torch.equal(a.cpu(), b) for a, b in zip(got, want))


TIE_PRONE = {"dynamic_level", "dynamic_tree", "static_children", "static_tree", "chain_level", "chain_tree"}
