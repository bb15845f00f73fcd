"""Per-preset draft trees: the preset names its tree, and the CLI uses it unless told otherwise."""
from __future__ import annotations

import argparse

from specvlm.cli.args import tree_config
from specvlm.config import BUNDLED_SELF_TREE, BUNDLED_STD_TREE, TreeConfig
from specvlm.models.presets import BUNDLED_SELF, BUNDLED_STD, PRESETS


def _args(**kw):
    base = {"tree": None, "depth": None, "top_k": None, "total_tokens": None, "min_prob": None}
    return argparse.Namespace(**{**base, **kw})


def test_bundled_presets_carry_their_tree_and_name_it():
    std, self_sd = PRESETS[BUNDLED_STD], PRESETS[BUNDLED_SELF]
    assert std.tree == BUNDLED_STD_TREE and self_sd.tree == BUNDLED_SELF_TREE
    assert std.description.endswith("draft: chain of up to 8, stop < 0.05")
    assert self_sd.description.endswith("draft: chain of up to 12, stop < 0.1")
    for p in PRESETS.values():
        assert p.tree.describe() in p.description and p.description.count("draft: ") == 1


def test_tree_describe():
    assert TreeConfig().describe() == "dynamic tree (depth 5, top-4, 16 nodes)"
    assert TreeConfig(min_prob=0.05).describe() == "dynamic tree (depth 5, top-4, 16 nodes, stop < 0.05)"
    assert TreeConfig(shape="static", min_prob=0.5).describe() == "static tree official-25"


def test_cli_tree_comes_from_the_preset_unless_overridden():
    std = PRESETS[BUNDLED_STD]
    assert tree_config(_args(), std) == BUNDLED_STD_TREE
    assert tree_config(_args(), None) == TreeConfig()
    assert tree_config(_args(depth=5), std) == TreeConfig(shape="chain", depth=5, min_prob=0.05)
    assert tree_config(_args(min_prob=0.0), std).min_prob == 0.0
    assert tree_config(_args(tree="dynamic"), std) == TreeConfig()      # another shape: its own defaults
    assert tree_config(_args(tree="dynamic", top_k=2), std) == TreeConfig(top_k=2)
