"""Per-preset draft trees: the preset names its tree, and the CLI uses it unless told otherwise."""
from __future__ import annotations

from specvlm.config import BUNDLED_SELF_TREE, BUNDLED_STD_TREE, TreeConfig, tree_with_options
from specvlm.models.presets import BUNDLED_SELF, BUNDLED_STD, PRESETS


def test_bundled_presets_carry_their_tree_and_name_it():
    std, self_sd = PRESETS[BUNDLED_STD], PRESETS[BUNDLED_SELF]
    assert std.tree == BUNDLED_STD_TREE and self_sd.tree == BUNDLED_SELF_TREE
    assert std.description.endswith("draft: chain of up to 4; "
                                    "from 8,192 prompt tokens: chain of up to 12, stop < 0.1")
    assert self_sd.description.endswith("draft: chain of up to 12, stop < 0.1")
    for p in PRESETS.values():
        assert p.tree.describe() in p.description and p.description.count("draft: ") == 1


def test_tree_describe():
    assert TreeConfig().describe() == "dynamic tree (depth 5, top-4, 16 nodes)"
    assert TreeConfig(min_prob=0.05).describe() == "dynamic tree (depth 5, top-4, 16 nodes, stop < 0.05)"
    assert TreeConfig(shape="static", min_prob=0.5).describe() == "static tree official-25"


def test_tree_comes_from_the_preset_unless_an_option_changes_it():
    std = PRESETS[BUNDLED_STD].tree
    assert tree_with_options(std) is BUNDLED_STD_TREE
    assert tree_with_options(None) == TreeConfig()
    assert tree_with_options(std, depth=5) == TreeConfig(shape="chain", depth=5, min_prob=0.0)  # no long variant
    assert tree_with_options(std, depth=4, min_prob=0.0) is BUNDLED_STD_TREE   # the preset's own values
    assert tree_with_options(std, min_prob=0.05).min_prob == 0.05
    assert tree_with_options(std, shape="dynamic") == TreeConfig()      # another shape: its own defaults
    assert tree_with_options(std, shape="dynamic", top_k=2) == TreeConfig(top_k=2)


def test_long_prompt_tree():
    long = TreeConfig(shape="chain", depth=12, min_prob=0.1)
    t = TreeConfig(shape="chain", depth=8, min_prob=0.05, long_prompt=long, long_from=1000)
    assert t.for_prompt(999) is t and t.for_prompt(1000) is long and t.for_prompt(10**6) is long
    assert TreeConfig().for_prompt(10**6) == TreeConfig()
    assert t.without_long_prompt() == TreeConfig(shape="chain", depth=8, min_prob=0.05, long_from=1000)
    assert t.describe() == "chain of up to 8, stop < 0.05; from 1,000 prompt tokens: chain of up to 12, stop < 0.1"
    assert BUNDLED_STD_TREE.for_prompt(16403).depth == 12 and BUNDLED_STD_TREE.for_prompt(787).depth == 4
    import pytest
    from specvlm.config import ConfigError
    with pytest.raises(ConfigError, match="long_from"):
        TreeConfig(long_from=0)
    with pytest.raises(ConfigError, match="not a TreeConfig"):
        TreeConfig(long_prompt="deep")


def test_engine_drafts_with_the_long_prompt_tree_on_long_prompts(pairs):
    import specvlm.engine.stream as dec
    from helpers.media import make_clip
    from specvlm.config import DecodeConfig

    std_pair = pairs[("qwen", "std")]
    clip, prompt = make_clip(), "describe this video in detail"
    inputs = std_pair.adapter.prepare(std_pair.processor, std_pair.target, clip, prompt)
    L = int(inputs.input_ids.shape[1])
    short, deep = TreeConfig(shape="chain", depth=2), TreeConfig(shape="chain", depth=6)
    van = dec.generate(std_pair, inputs, DecodeConfig(method="vanilla", max_new_tokens=24, stop_at_eos=False))
    sizes = {}
    for name, frm in (("long", L), ("short", L + 1)):
        tree = TreeConfig(shape="chain", depth=2, long_prompt=deep, long_from=frm)
        res = dec.generate(std_pair, inputs, DecodeConfig(max_new_tokens=24, stop_at_eos=False, tree=tree))
        assert res.token_ids == van.token_ids, name
        sizes[name] = max(s.tree_size for s in res.steps[1:])
    assert sizes == {"long": 6, "short": short.depth}


def test_defaults_without_a_preset_are_the_librarys():
    """One home per default: a model without a preset gets DecodeConfig's budget, VideoConfig's frames and
    TreeConfig(), in the CLI and through config_from_settings alike."""
    import argparse

    from specvlm.cli.args import add_decode_args, decode_config, video_config
    from specvlm.config import CPU_MAX_NEW_TOKENS, DecodeConfig, VideoConfig, config_from_settings
    from specvlm.models.presets import preset_defaults

    budget, frames = DecodeConfig().max_new_tokens, VideoConfig().num_frames
    d = preset_defaults(None)
    assert (d.max_new_tokens, d.num_frames, d.tree) == (budget, frames, TreeConfig())
    assert preset_defaults(PRESETS[BUNDLED_STD]) is PRESETS[BUNDLED_STD]
    assert preset_defaults(None, cuda=False).max_new_tokens == CPU_MAX_NEW_TOKENS == PRESETS[BUNDLED_STD].max_new_tokens
    assert preset_defaults(PRESETS[BUNDLED_STD], cuda=False) is PRESETS[BUNDLED_STD]
    assert config_from_settings("specvlm").max_new_tokens == budget
    p = argparse.ArgumentParser()
    add_decode_args(p)
    args = p.parse_args([])
    assert decode_config(args, "specvlm", None).max_new_tokens == budget
    assert video_config(args, None, None).num_frames == frames
    bundled = PRESETS[BUNDLED_STD]
    assert decode_config(args, "specvlm", bundled).max_new_tokens == bundled.max_new_tokens != budget
    assert decode_config(args, "specvlm", bundled).tree == bundled.tree


def test_one_resolver_fills_what_the_caller_leaves_unset():
    """resolve_settings (the CLI's, the page's and the API's): each setting given wins; the rest are the preset's,
    its frames and budget through the server's cap; without a preset, the library's."""
    from specvlm.config import CPU_MAX_NEW_TOKENS, DecodeConfig, VideoConfig
    from specvlm.models.presets import SPARSE_SELF, resolve_settings

    p = PRESETS[SPARSE_SELF]
    r = resolve_settings(p)
    assert (r.num_frames, r.max_new_tokens) == (p.num_frames, p.max_new_tokens) and r.tree is p.tree is BUNDLED_SELF_TREE
    assert resolve_settings(p, depth=4).tree == TreeConfig(shape="chain", depth=4, min_prob=0.1)
    assert resolve_settings(p, depth=12, min_prob=0.1).tree is p.tree              # the preset's own values
    got = resolve_settings(p, num_frames=8, max_new_tokens=9, budget=lambda f, t: (1, 1))
    assert (got.num_frames, got.max_new_tokens) == (8, 9)                         # given: the cap is not asked
    capped = resolve_settings(p, budget=lambda f, t: (min(f, 16), min(t, 64)))
    assert (capped.num_frames, capped.max_new_tokens) == (16, 64)
    none = resolve_settings(None, cuda=False)
    assert (none.num_frames, none.max_new_tokens, none.tree) == (VideoConfig.num_frames, CPU_MAX_NEW_TOKENS, TreeConfig())
    assert resolve_settings(None).max_new_tokens == DecodeConfig.max_new_tokens
