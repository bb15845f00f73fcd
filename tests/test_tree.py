"""Draft trees: masks, paths, and the greedy drafter's dynamic/static/chain building and acceptance."""
from __future__ import annotations

import pytest
import torch

from specvlm.config import TreeConfig
from helpers.hostdrafters import GreedyDrafter, greedy_accept
from helpers.hosttree import DraftTree, feed_mask, paths
from specvlm.bench.stepcost import ancestor_mask, verify_mask
from specvlm.spec.tree import STATIC_TREES

V = 50


def build_dynamic(root, feed, depth, top_k, total_tokens, min_prob=0.0):
    return GreedyDrafter(TreeConfig()).dynamic(root, feed, depth, top_k, total_tokens, min_prob).tree


def build_static(root, feed, spec):
    return GreedyDrafter(TreeConfig(shape="static")).static(root, feed, spec).tree


def build_tree(root, feed, config):
    return GreedyDrafter(config).build(root, feed).tree


def fake_feed(seed=0):
    """Deterministic draft: log-probs depend on the node's token and depth only."""
    calls = []

    def feed(nodes, tree):
        calls.append(list(nodes))
        out = []
        for n in nodes:
            g = torch.Generator().manual_seed(seed * 1000 + int(tree.tokens[n]) * 17 + int(tree.depths[n]))
            out.append(torch.log_softmax(torch.randn(V, generator=g) * 3, -1))
        return torch.stack(out)

    return feed, calls


def root_logp(seed=0):
    return torch.log_softmax(torch.randn(V, generator=torch.Generator().manual_seed(seed)) * 3, -1)


def test_ancestor_mask_and_paths():
    parents = torch.tensor([-1, -1, 0, 0, 2])
    m = ancestor_mask(parents)
    expected = torch.tensor([[1, 0, 0, 0, 0], [0, 1, 0, 0, 0], [1, 0, 1, 0, 0], [1, 0, 0, 1, 0], [1, 0, 1, 0, 1]],
                            dtype=torch.bool)
    assert torch.equal(m, expected)
    tree = DraftTree(torch.arange(5), parents, torch.tensor([1, 1, 2, 2, 3]), torch.zeros(5))
    assert sorted(paths(tree)) == [[0, 2, 4], [0, 3], [1]]
    chain = DraftTree.chain([5, 6, 7, 8], [-0.1, -0.3, -0.4, -0.9])
    assert chain.parents.tolist() == [-1, 0, 1, 2] and chain.depths.tolist() == [1, 2, 3, 4]
    assert ancestor_mask(chain.parents).tolist() == [[j <= i for j in range(4)] for i in range(4)]
    assert ancestor_mask(torch.tensor([-1, 0, 0])).tolist() == [[1, 0, 0], [1, 1, 0], [1, 0, 1]]  # not a chain


def test_verify_mask_layout():
    parents = torch.tensor([-1, 0, -1])
    mask = verify_mask(parents, prefix_len=4, dtype=torch.float32)
    assert mask.shape == (1, 1, 4, 8)
    visible = mask[0, 0] == 0
    assert visible[:, :4].all()  # prefix visible to all
    assert visible[0, 4:].tolist() == [True, False, False, False]  # root sees itself only
    assert visible[2, 4:].tolist() == [True, True, True, False]  # node 1 sees root, node 0, itself
    assert visible[3, 4:].tolist() == [True, False, False, True]
    assert mask.min() == torch.finfo(torch.float32).min


def test_greedy_accept_longest_matching_path():
    # root children: 5 (node0), 7 (node1); node0 children: 9 (node2), 3 (node3); node2 child: 4 (node4)
    tree = DraftTree(torch.tensor([5, 7, 9, 3, 4]), torch.tensor([-1, -1, 0, 0, 2]), torch.tensor([1, 1, 2, 2, 3]),
                     torch.zeros(5))
    # target rows: after root, after each node
    path, bonus = greedy_accept(tree, torch.tensor([5, 9, 0, 4, 0, 8]))
    assert path == [0, 2, 4] and bonus == 8
    path, bonus = greedy_accept(tree, torch.tensor([7, 9, 1, 4, 0, 8]))
    assert path == [1] and bonus == 1
    path, bonus = greedy_accept(tree, torch.tensor([6, 9, 1, 4, 0, 8]))
    assert path == [] and bonus == 6


@pytest.mark.parametrize("depth,top_k,total", [(5, 4, 16), (3, 2, 5), (6, 3, 60), (1, 4, 3)])
def test_dynamic_tree_properties(depth, top_k, total):
    feed, calls = fake_feed()
    tree = build_dynamic(root_logp(), feed, depth, top_k, total)
    par, dep = tree.parents.tolist(), tree.depths.tolist()
    assert 1 <= tree.size <= total
    assert max(dep) <= depth
    for i, p in enumerate(par):
        assert p < i  # parents first, so every kept node's ancestors are kept
        assert dep[i] == (1 if p < 0 else dep[p] + 1)
        if p >= 0:
            assert tree.scores[i] <= tree.scores[p] + 1e-6
    # siblings have distinct tokens
    sib = {}
    for i, p in enumerate(par):
        assert int(tree.tokens[i]) not in sib.setdefault(p, set())
        sib[p].add(int(tree.tokens[i]))
    # one feed per level after the first, at most top_k nodes each
    assert len(calls) == depth - 1 and all(len(c) <= top_k for c in calls)
    # the kept set is the best `total` by cumulative log-prob among all drafted nodes
    assert tree.size == min(total, top_k + (depth - 1) * top_k * top_k)


def test_dynamic_tree_first_level_is_draft_top_k():
    feed, _ = fake_feed()
    lp = root_logp()
    tree = build_dynamic(lp, feed, depth=1, top_k=4, total_tokens=4)
    assert tree.tokens.tolist() == lp.topk(4).indices.tolist()


def test_chain_is_greedy_path():
    feed, _ = fake_feed()
    tree = build_tree(root_logp(), feed, TreeConfig(shape="chain", depth=5))
    assert tree.parents.tolist() == [-1, 0, 1, 2, 3]
    assert tree.depths.tolist() == [1, 2, 3, 4, 5]
    assert int(tree.tokens[0]) == int(root_logp().argmax())


def test_static_official_tree():
    spec = STATIC_TREES["official-25"]
    assert len(spec) == 25 and max(len(p) for p in spec) == 5
    feed, calls = fake_feed()
    tree = build_static(root_logp(), feed, spec)
    assert tree.size == 25 and int(tree.depths.max()) == 5
    lp = root_logp()
    assert tree.tokens[:4].tolist() == lp.topk(4).indices.tolist()
    assert len(calls) == 4  # levels 1..4 have children


def test_static_tree_rejects_orphans():
    feed, _ = fake_feed()
    with pytest.raises(ValueError):
        build_static(root_logp(), feed, [(0,), (1, 0)])


def test_min_prob_stops_before_unlikely_levels():
    """The early stop feeds no level whose best frontier path is below min_prob, and keeps the rest."""
    feed, calls = fake_feed()
    full = build_dynamic(root_logp(), feed, 6, 1, 6)
    probs = full.scores.exp().tolist()              # chain: cumulative draft probability per depth
    thr = (probs[1] + probs[2]) / 2                 # between depth 2 and depth 3
    feed2, calls2 = fake_feed()
    cut = build_dynamic(root_logp(), feed2, 6, 1, 6, min_prob=thr)
    # depth 3 is drafted (its parent at depth 2 is above thr), depth 4 is not (its parent is below)
    assert cut.size == 3 and cut.tokens.tolist() == full.tokens[:3].tolist()
    assert len(calls2) == 2 and len(calls) == 5
    # min_prob = 0 stops nothing (the full tree); a threshold above every path keeps level 1 only
    assert build_dynamic(root_logp(), fake_feed()[0], 6, 1, 6, min_prob=0.0).tokens.tolist() == full.tokens.tolist()
    feed3, calls3 = fake_feed()
    one = build_dynamic(root_logp(), feed3, 5, 4, 16, min_prob=0.999)
    assert one.size == 4 and calls3 == []


def test_min_prob_through_tree_config():
    feed, calls = fake_feed()
    tree = build_tree(root_logp(), feed, TreeConfig(shape="chain", depth=8, min_prob=0.999))
    assert tree.size == 1 and calls == []
    with pytest.raises(ValueError, match="min_prob"):
        TreeConfig(min_prob=1.0)
    with pytest.raises(ValueError, match="min_prob"):
        TreeConfig(min_prob=-0.1)
    with pytest.raises(ValueError, match="not a number"):
        TreeConfig(min_prob="0.3")
    import numpy as np
    assert TreeConfig(min_prob=np.float32(0.25)).min_prob == np.float32(0.25)   # numpy scalars are numbers too


def test_feed_mask_sees_fed_ancestors_and_itself():
    # root children 0 and 1; 2 under 0; 3 under 2. Nodes 0 and 1 are already fed (slots 0, 1).
    parents = torch.tensor([-1, -1, 0, 2])
    allowed = feed_mask(parents, [2, 3], {0: 0, 1: 1})
    assert allowed.tolist() == [[True, False, True, False],
                                [True, False, True, True]]
    assert feed_mask(parents, [0, 1], {}).tolist() == [[True, False], [False, True]]
