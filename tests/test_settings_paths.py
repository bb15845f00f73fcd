"""The CLI and the app turn the same flat settings into the same DecodeConfig (one function,
specvlm.config.config_from_settings), and the app's seed reaches the random pruning."""
from __future__ import annotations

import pytest

from app.inputs.settings import Limits, RunRequest, RunSettings, build_configs
from specvlm.cli import build_parser
from specvlm.cli.args import decode_config, video_config
from specvlm.config import BUNDLED_STD_TREE, TreeConfig
from specvlm.models.presets import BUNDLED_STD, PRESETS, QWEN7_SELF, SPARSE_SELF

CASES = [  # (preset, app settings) - the CLI gets the same values as flags
    (BUNDLED_STD, {}),
    (BUNDLED_STD, dict(method="random", seed=7, drop_rate=0.8, top_p=0.3)),
    (BUNDLED_STD, dict(tree_shape="chain", depth=6, min_prob=0.05)),
    (BUNDLED_STD, dict(tree_shape="dynamic", depth=5, top_k=2, total_tokens=10, min_prob=0.0)),
    (QWEN7_SELF, dict(method="attention", temperature=0.7, top_p_sampling=0.9, seed=3, max_new_tokens=64)),
    (QWEN7_SELF, dict(tree_shape="static")),
    (BUNDLED_STD, dict(reselect=True)),
]


def _app(preset: str, kw: dict):
    tree = PRESETS[preset].tree
    widgets = dict(tree_shape=tree.shape, depth=tree.depth, top_k=tree.top_k, total_tokens=tree.total_tokens,
                   min_prob=tree.min_prob)   # what the panel shows once the preset is chosen
    return build_configs(RunSettings(preset=preset, **(widgets | kw)), Limits())[0]


def _cli(preset: str, kw: dict):
    s = RunSettings(**kw)
    tree = PRESETS[preset].tree
    argv = ["generate", "--video", "clip.mp4", "--method", s.method, "--drop-rate", str(s.drop_rate),
            "--lambda", str(s.top_p), "--seed", str(s.seed), "--temperature", str(s.temperature),
            "--top-p-sampling", str(s.top_p_sampling)]
    argv += ["--max-new-tokens", str(s.max_new_tokens)] if s.max_new_tokens is not None else []
    for flag, key, preset_value in (("--tree", "tree_shape", tree.shape), ("--depth", "depth", tree.depth),
                                    ("--top-k", "top_k", tree.top_k), ("--total-tokens", "total_tokens", tree.total_tokens),
                                    ("--min-prob", "min_prob", tree.min_prob)):
        if key in kw:
            argv += [flag, str(kw[key])]
    argv += ["--reselect"] if kw.get("reselect") else []
    args = build_parser().parse_args(argv)
    return decode_config(args, s.method, PRESETS[preset])


@pytest.mark.parametrize("preset,kw", CASES)
def test_cli_and_app_build_the_same_decode_config(preset, kw):
    app, cli = _app(preset, kw), _cli(preset, kw)
    assert app == cli
    assert app.prune.seed == app.sampling.seed == kw.get("seed", 0)


def test_the_presets_tree_stays_whole_until_an_option_changes_it():
    assert _app(BUNDLED_STD, {}).tree is BUNDLED_STD_TREE          # with its long-prompt tree
    changed = _app(BUNDLED_STD, dict(depth=6)).tree
    assert changed == TreeConfig(shape="chain", depth=6, min_prob=0.0) and changed.long_prompt is None
    assert _app(BUNDLED_STD, dict(tree_shape="dynamic", depth=5, top_k=4, total_tokens=16, min_prob=0.0)).tree \
        == TreeConfig()


@pytest.mark.timeout(600)
def test_app_random_pruning_honours_the_seed():
    """Through the app's own run path: the same seed keeps the same video tokens, another seed others."""
    from app.runs.backend import Backend
    from helpers.fakes import real_engine, sample_video

    engine, preset = real_engine()
    backend = Backend(engine, device="cpu", dtype="float32")
    video = str(sample_video())

    def kept(seed: int) -> list[int]:
        s = RunSettings(preset=preset, method="random", seed=seed, num_frames=8, max_new_tokens=2)
        ups = list(backend.run(RunRequest(video, "Describe the video.", s), session=f"seed{seed}"))
        rec = ups[-1]["record"]
        assert rec is not None and rec.prefill.prune.method == "random"
        return rec.prefill.prune.keep.tolist()

    first = kept(1)
    assert 0 < len(first) and kept(1) == first
    assert kept(2) != first


def test_a_request_names_no_engine_and_vanilla_drops_reselection():
    from app.inputs.settings import FIELDS
    from specvlm.config import vanilla_config

    assert [f.name for f in FIELDS[-7:-5]] == ["top_p", "max_new"] and "engine" not in {f.name for f in FIELDS}
    assert [f.name for f in FIELDS[-5:]] == ["reselect", "reselect_min_share", "reselect_step_tokens",
                                             "reselect_total_tokens", "adaptive_r"]        # appended after them
    assert not hasattr(RunSettings(), "engine")
    spec = build_configs(RunSettings(reselect=True), Limits())[0]
    van = vanilla_config(spec)
    assert van.method == "vanilla" and not van.reselect.enabled and van.max_new_tokens == spec.max_new_tokens


@pytest.mark.parametrize("preset", [BUNDLED_STD, SPARSE_SELF, QWEN7_SELF])
def test_settings_left_unset_are_the_presets_in_the_api_and_the_cli(preset):
    """One resolver: a request that names only the preset gets the preset's tree (with its long-prompt tree), frames
    and budget, as the CLI does with no flags (here Bundled sparse Self-SD: chain of 12 with early stop 0.1)."""
    req = RunRequest.from_inputs({"video": "clip.mp4", "preset": preset})
    dec, vid = build_configs(req.settings, Limits())
    args = build_parser().parse_args(["generate", "--video", "clip.mp4"])
    p = PRESETS[preset]
    assert dec == decode_config(args, "specvlm", p) and dec.tree is p.tree
    assert (vid.num_frames, dec.max_new_tokens) == (video_config(args, None, p).num_frames, p.max_new_tokens)
    assert vid.num_frames == p.num_frames


def test_the_api_leaves_the_preset_settings_unset_and_caps_them_at_the_server_limits():
    from app.inputs.settings import PRESET_FIELDS, handler_parameters

    params = {q.name: q.default for q in handler_parameters(RunSettings(preset=BUNDLED_STD, depth=4, num_frames=32))}
    assert [params[n] for n in ("tree", "depth", "top_k", "total", "min_prob", "frames", "max_new_tokens")] \
        == [None] * len(PRESET_FIELDS)
    assert params["preset"] == BUNDLED_STD
    dec, vid = build_configs(RunSettings(preset=QWEN7_SELF), Limits(max_frames=64, max_new_tokens=100))
    assert (vid.num_frames, dec.max_new_tokens) == (64, 100)        # the preset's 128 / 256, at this server's caps
    assert build_configs(RunSettings(preset=SPARSE_SELF, depth=4), Limits())[0].tree == \
        TreeConfig(shape="chain", depth=4, min_prob=0.1)            # a value given wins over the preset's
