"""Re-selection at refused steps and the adaptive r: lossless, measured from the verify pass, recorded."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from helpers.media import make_clip

from specvlm.analysis.run import RunRecord
from specvlm.analysis.why import explain_rejections
from specvlm.config import ConfigError, DecodeConfig, PruneConfig, ReselectConfig, TreeConfig, config_from_settings
from specvlm.engine.prepare import prepare
from specvlm.engine.stream import generate, stream
from specvlm.spec.adaptive import adaptive_drop_rate, reselect_tokens
from specvlm.spec.pruning import kept_count

PROMPT = "describe this video in detail"
N = 48
FIRE = ReselectConfig(enabled=True, min_share=0.0, step_tokens=3, total_tokens=10, trigger="refused", sync=False)
"""Re-selects at every refused step with any attention outside the draft (the tiny models' attention is diffuse)."""
EVERY = ReselectConfig(enabled=True, min_share=0.0, step_tokens=3, total_tokens=12, trigger="every", track=1,
                       sync=True)
"""Re-selects before the first draft and after every step, with each token's track; Self-SD syncs its cache."""


def _cfg(method="specvlm", reselect=None, **kw):
    return DecodeConfig(method=method, max_new_tokens=N, stop_at_eos=False, tree=TreeConfig(shape="dynamic"),
                        reselect=reselect or ReselectConfig(), **kw)


@pytest.fixture(scope="module")
def inputs(pairs):
    clip = make_clip()
    return {key: prepare(pair, clip, PROMPT) for key, pair in pairs.items()}


@pytest.fixture(scope="module")
def vanilla(pairs, inputs):
    return {fam: generate(pairs[(fam, "self")], inputs[(fam, "self")], _cfg("vanilla")).token_ids
            for fam in ("qwen", "llava")}


# --------------------------------------------------------------------------- the pure rules
def test_reselect_tokens_takes_the_most_attended_unheld_tokens_within_the_budgets():
    row = torch.tensor([0.05, 0.30, 0.05, 0.20, 0.10, 0.25, 0.05])
    held = torch.tensor([True, False, True, False, True, False, True])
    cfg = ReselectConfig(enabled=True, min_share=0.5, step_tokens=2, total_tokens=100)
    pick = reselect_tokens(row, held, cfg, budget_left=100)
    assert pick.unseen_share == pytest.approx(0.75)
    assert pick.added.tolist() == [1, 5]                                  # the two most attended it lacks
    assert reselect_tokens(row, held, cfg, budget_left=1).added.tolist() == [1]
    assert reselect_tokens(row, held, cfg, budget_left=0).added.numel() == 0
    high = dataclasses.replace(cfg, min_share=0.8)
    assert reselect_tokens(row, held, high, 100).added.numel() == 0       # not enough attention outside the draft
    assert reselect_tokens(row * 7, held, cfg, 100).unseen_share == pytest.approx(0.75)   # any scale
    zero = torch.tensor([0.0, 0.0, 1.0, 0.0])                             # unheld but never attended: not added
    assert reselect_tokens(zero, torch.tensor([True, False, False, False]), cfg, 100).added.tolist() == [2]


def test_track_adds_the_picked_cells_in_neighbouring_frame_groups_within_the_budget():
    grid = torch.tensor([[t, r, c] for t in range(4) for r in range(2) for c in range(2)])   # 4 frame groups of 2 x 2
    row = torch.zeros(16)
    row[5], row[14] = 0.6, 0.3                            # (1, 0, 1) first, then (3, 1, 0)
    held = torch.zeros(16, dtype=torch.bool)
    held[9] = True                                        # (2, 0, 1) is already in the draft
    cfg = ReselectConfig(enabled=True, min_share=0.0, step_tokens=4, total_tokens=100, track=1)
    assert reselect_tokens(row, held, cfg, 100, grid).added.tolist() == [1, 5, 10, 14]   # 5, its t-1 (1); then 14, 10
    assert reselect_tokens(row, held, dataclasses.replace(cfg, track=2), 100, grid).added.tolist() == [1, 5, 13, 14]
    assert reselect_tokens(row, held, cfg, 2, grid).added.tolist() == [1, 5]           # the budget bounds the track
    assert reselect_tokens(row, held, dataclasses.replace(cfg, track=0), 100, grid).added.tolist() == [5, 14]


def test_adaptive_r_covers_the_attention_mass_within_its_bounds():
    cfg = PruneConfig(adaptive_r=True, r_min=0.5, r_max=0.95, r_mass=0.8)
    peaked = torch.zeros(100)
    peaked[:3] = torch.tensor([0.5, 0.3, 0.2])                            # 2 tokens hold 80%
    r, why = adaptive_drop_rate(peaked, cfg)
    assert r == 0.95 and "bounded to r_max" in why and "2 of 100" in why
    flat = torch.ones(100)                                                # 80 tokens hold 80%
    r, why = adaptive_drop_rate(flat, cfg)
    assert r == 0.5 and "bounded to r_min" in why
    mid = torch.ones(100)
    mid[:10] = 30.0                                                       # 10 tokens hold 300/390 = 77%
    r, _ = adaptive_drop_rate(mid, cfg)
    assert r == pytest.approx(1 - 22 / 100)                               # +12 flat tokens reach 312 = 80%
    assert adaptive_drop_rate(torch.zeros(5), cfg)[0] == 0.95


def test_settings_are_validated_with_the_setting_named():
    with pytest.raises(ConfigError, match="reselect min_share=1.5 is out of range"):
        ReselectConfig(min_share=1.5)
    with pytest.raises(ConfigError, match="reselect step_tokens=0"):
        ReselectConfig(step_tokens=0)
    with pytest.raises(ConfigError, match="reselect trigger 'always' is unknown: use refused or every"):
        ReselectConfig(trigger="always")
    with pytest.raises(ConfigError, match="reselect track=65"):
        ReselectConfig(track=65)
    with pytest.raises(ConfigError, match="r_max=0.6 is out of range"):
        PruneConfig(r_min=0.7, r_max=0.6)
    with pytest.raises(ConfigError, match="reselect=True is not a ReselectConfig"):
        DecodeConfig(reselect=True)
    # re-selection runs on the one engine, on any device
    assert config_from_settings(reselect=ReselectConfig(enabled=True)).reselect.enabled
    assert DecodeConfig().reselect.enabled is False and DecodeConfig().prune.adaptive_r is False  # paper defaults


# --------------------------------------------------------------------------- the engine
def _check_added(res, keep: torch.Tensor, cfg: ReselectConfig) -> list[int]:
    added = [t for s in res.steps for t in s.added]
    assert added, "re-selection never fired"
    assert len(added) == len(set(added)) <= cfg.total_tokens
    assert all(len(s.added) <= cfg.step_tokens for s in res.steps)
    assert not set(added) & set(keep.tolist())                            # only tokens the draft lacked
    assert all(s.unseen_share is not None for s in res.steps if s.added)
    return added


@pytest.mark.parametrize("fam", ["qwen", "llava"])
@pytest.mark.parametrize("mode", ["self", "std"])
@pytest.mark.parametrize("fast", [True, False])
def test_reselection_is_lossless_self_and_std_sd(pairs, inputs, vanilla, fam, mode, fast, monkeypatch):
    if not fast:   # the draft through transformers' module stack instead of the fused forward
        monkeypatch.setattr("specvlm.engine.loop._fused", lambda *a, **k: None)
    res = generate(pairs[(fam, mode)], inputs[(fam, mode)], _cfg(reselect=FIRE))
    assert res.token_ids == vanilla[fam]
    _check_added(res, res.prefill.prune.keep, FIRE)


@pytest.mark.parametrize("fam", ["qwen", "llava"])
@pytest.mark.parametrize("mode", ["self", "std"])
@pytest.mark.parametrize("fast", [True, False])
def test_every_step_trigger_is_lossless_and_fires_before_and_after_each_step(pairs, inputs, vanilla, fam, mode, fast,
                                                                          monkeypatch):
    if not fast:
        monkeypatch.setattr("specvlm.engine.loop._fused", lambda *a, **k: None)
    res = generate(pairs[(fam, mode)], inputs[(fam, mode)], _cfg(reselect=EVERY))
    assert res.token_ids == vanilla[fam]
    _check_added(res, res.prefill.prune.keep, EVERY)
    assert res.steps[0].added                                   # before the first draft, from the last prompt row
    verify = [s for s in res.steps if s.step > 0]
    assert all(s.unseen_share is not None for s in verify)     # every step measured, refused or not


def test_reselection_equals_hf_generate(pairs, inputs, vanilla):
    pair = pairs[("qwen", "std")]
    clip = make_clip()
    enc = pair.processor(text=[inputs[("qwen", "std")].prompt_text], videos=[clip.frames], do_sample_frames=False,
                         video_metadata=[{"fps": 4.0, "total_num_frames": 8, "frames_indices": list(range(8))}],
                         return_tensors="pt")
    out = pair.target.generate(**enc, max_new_tokens=N, min_new_tokens=N, do_sample=False)
    for mode in ("self", "std"):
        for cfg in (FIRE, EVERY):
            res = generate(pairs[("qwen", mode)], inputs[("qwen", mode)], _cfg(reselect=cfg))
            assert res.token_ids == out[0, enc["input_ids"].shape[1]:].tolist() == vanilla["qwen"]


def test_reselection_changes_the_draft(pairs, inputs):
    """The added tokens reach the draft: with them its trees differ from the run without them."""
    pair, inp = pairs[("qwen", "self")], inputs[("qwen", "self")]
    base = generate(pair, inp, _cfg(), record_trees=True)
    more = generate(pair, inp, _cfg(reselect=FIRE), record_trees=True)
    first = next(s.step for s in more.steps if s.added)
    trees = lambda r: [s.tree.tokens for s in r.steps if s.step > first]   # noqa: E731
    assert trees(base) != trees(more)


@pytest.mark.parametrize("mode", ["self", "std"])
def test_sampling_with_reselection_runs_and_stays_in_budget(pairs, inputs, mode):
    cfg = dataclasses.replace(_cfg(reselect=FIRE), sampling=dataclasses.replace(_cfg().sampling, temperature=0.8,
                                                                                  seed=3))
    res = generate(pairs[("qwen", mode)], inputs[("qwen", mode)], cfg)
    assert len(res.token_ids) == N and res.tau >= 0
    again = generate(pairs[("qwen", mode)], inputs[("qwen", mode)], cfg)
    assert again.token_ids == res.token_ids                               # seeded: reproducible


@pytest.mark.parametrize("cfg", [dataclasses.replace(FIRE, min_share=1.0), FIRE], ids=["measure-only", "adding"])
def test_the_diverging_rows_share_equals_the_why_views(pairs, inputs, cfg):
    """The share measured from the verify pass (one row, no second forward) is the share the Inspect "why" view
    computes with its own full forward, at every refused step, over the tokens the draft held at that step."""
    pair, inp = pairs[("qwen", "std")], inputs[("qwen", "std")]
    res = generate(pair, inp, _cfg(reselect=cfg), record_trees=True)
    measured = {s.step: s.unseen_share for s in res.steps if s.unseen_share is not None}
    whys = explain_rejections(pair, inp, res.steps, res.prefill.prune.keep.tolist(), max_steps=100)
    assert len(whys) >= 3 and set(measured) == {w.step for w in whys}
    for w in whys:
        assert measured[w.step] == pytest.approx(w.share_unseen, abs=2e-4), w.step
    assert any(s.added for s in res.steps) == (cfg.min_share < 1)


@pytest.mark.parametrize("fam", ["qwen", "llava"])
def test_adaptive_r_is_lossless_and_recorded(pairs, inputs, vanilla, fam):
    prune = PruneConfig(adaptive_r=True, r_min=0.3, r_max=0.95, r_mass=0.5)
    res = generate(pairs[(fam, "self")], inputs[(fam, "self")], _cfg(prune=prune))
    assert res.token_ids == vanilla[fam]
    info = res.prefill
    want, _ = adaptive_drop_rate(info.prune.scores, prune)
    assert info.r_used == want and 0.3 <= want <= 0.95
    assert res.num_kept == kept_count(res.num_video_tokens, want)
    assert "hold 50% of the target's attention" in info.r_reason
    fixed = generate(pairs[(fam, "self")], inputs[(fam, "self")], _cfg("random", prune=prune))
    assert fixed.prefill.r_used == 0.9 and "no attention scores" in fixed.prefill.r_reason


def test_run_record_folds_and_saves_the_added_tokens_and_r(pairs, inputs):
    events = list(stream(pairs[("qwen", "self")], inputs[("qwen", "self")], _cfg(reselect=FIRE)))
    rec = RunRecord.from_events(events, _cfg(reselect=FIRE))
    per_step = {s.step: s.added for s in events[1:] if s.added}
    assert rec.added_per_step == per_step and rec.num_added == sum(map(len, per_step.values())) > 0
    assert rec.r_used == 0.9 and rec.r_reason.startswith("r = 0.9")
    back = RunRecord.from_json(rec.to_json())
    assert back.added_per_step == per_step and back.r_used == 0.9 and back.r_reason == rec.r_reason
    j = rec.run_json()
    assert j["num_added"] == rec.num_added and j["added"] == {str(k): v for k, v in per_step.items()}
    old = rec.to_json()                                   # a record written before these fields existed
    for s in old["steps"]:
        s.pop("added"), s.pop("unseen_share")
    old["prefill"].pop("r_used"), old["prefill"].pop("r_reason")
    back = RunRecord.from_json(old)
    assert back.num_added == 0 and back.r_used == 0.9 and back.r_reason == ""


@pytest.mark.parametrize("mode", ["self", "std"])
def test_reselection_is_lossless_with_deepstack_side_features(mode):
    """Qwen3-VL: the added video tokens carry their DeepStack features into a Std-SD draft's partial prefill."""
    from specvlm.models.pair import pair_from_models
    from specvlm.testing.tiny_qwen3_vl import tiny_qwen3_vl

    target = tiny_qwen3_vl(seed=0)
    pair = pair_from_models(*target) if mode == "self" else \
        pair_from_models(*target, *tiny_qwen3_vl(seed=1, hidden=32, layers=1, pad_vocab_to=64))
    inp = prepare(pair, make_clip(), PROMPT)
    want = generate(pair, inp, _cfg("vanilla")).token_ids
    res = generate(pair, inp, _cfg(reselect=FIRE))
    assert res.token_ids == want
    _check_added(res, res.prefill.prune.keep, FIRE)


def test_cli_flags_reach_the_config(capsys):
    from specvlm.cli import build_parser, main
    from specvlm.cli.args import decode_config

    for command in (["generate", "--video", "clip.mp4"], ["bench"]):
        args = build_parser().parse_args([*command, "--reselect", "--reselect-min-share", "0.3",
                                          "--reselect-step-tokens", "4", "--reselect-total-tokens", "20",
                                          "--adaptive-r"])
        cfg = decode_config(args, "specvlm", None)
        assert cfg.reselect == ReselectConfig(enabled=True, min_share=0.3, step_tokens=4, total_tokens=20)
        assert (cfg.reselect.trigger, cfg.reselect.sync) == ("every", True)                  # the defaults
        more = build_parser().parse_args([*command, "--reselect", "--reselect-trigger", "refused", "--reselect-track",
                                          "2", "--no-reselect-sync"])
        got = decode_config(more, "specvlm", None).reselect
        assert (got.trigger, got.track, got.sync) == ("refused", 2, False)
        assert cfg.prune.adaptive_r
        plain = decode_config(build_parser().parse_args(command), "specvlm", None)
        assert not plain.reselect.enabled and not plain.prune.adaptive_r
    assert main(["generate", "--video", "missing.mp4", "--reselect", "--reselect-min-share", "2"]) == 2
    assert "reselect min_share=2.0 is out of range" in capsys.readouterr().err


def test_reselection_with_a_draft_of_another_token_grid():
    """SmolVLM2-2.2B-layout target (9 x 9 per frame) with a 256M-layout draft (8 x 8): the added tokens are carried to
    the draft's grid; lossless."""
    from specvlm.models.pair import pair_from_models
    from specvlm.testing.tiny import tiny_smolvlm

    big, small = tiny_smolvlm(seed=2, image_size=384, patch=14, scale_factor=3), \
        tiny_smolvlm(seed=1, hidden=32, layers=1, pad_vocab_to=64)
    pair = pair_from_models(big[0], big[1], small[0], small[1])
    inp = prepare(pair, make_clip(), PROMPT)
    assert inp.draft_inputs is not None and inp.draft_inputs.num_video_tokens != inp.num_video_tokens
    want = generate(pair, inp, _cfg("vanilla")).token_ids
    res = generate(pair, inp, _cfg(reselect=FIRE))
    assert res.token_ids == want
    _check_added(res, res.prefill.prune.keep, FIRE)
