"""What Stage I kept and why, said next to the Stage I / Stage II maps (Compare's heatmap legend, Inspect's
frame maps): numbers from the PruneResult, and the bundled default pair, whose Stage I keeps one token."""
from __future__ import annotations

import pytest
import torch

from app.views.stage_note import stage1_note, stage_split
from specvlm.types import PruneResult


def _prune(scores, stage1, stage2, method="specvlm"):
    s1, s2 = torch.tensor(stage1, dtype=torch.long), torch.tensor(stage2, dtype=torch.long)
    return PruneResult(torch.sort(torch.cat([s1, s2])).values, s1, s2, torch.tensor(scores), len(scores), method)


def test_one_token_holding_lambda_is_said_with_its_share():
    scores = [0.5] + [0.05] * 10                                 # token 0 holds 50% of the attention
    p = _prune(scores, [0], [3, 6, 9])
    sp = stage_split(p, 0.4)
    assert (sp.stage1, sp.stage2, sp.num_kept, sp.capped) == (1, 3, 4, False)
    assert sp.stage1_share == pytest.approx(0.5) and sp.top_share == pytest.approx(0.5)
    note = stage1_note(p, 0.4)
    assert note.startswith("Stage I kept 1 of the 4 kept tokens: 1 token of 11")       # 1 of 4: not "almost nothing"
    assert "the most-attended video token alone holds 50%" in note and "reaches λ = 0.4" in note
    assert "Stage II filled the other 3 evenly" in note


def test_a_budget_full_before_lambda_and_methods_without_two_stages():
    flat = [1.0] * 20
    p = _prune(flat, [0, 1], [])
    sp = stage_split(p, 0.4)
    assert sp.capped and sp.stage1_share == pytest.approx(0.1)
    assert "fill the whole budget of 2 before reaching λ = 0.4 of the attention (they hold 10%)" in stage1_note(p, 0.4)
    assert stage1_note(_prune(flat, [], [0, 5], method="uniform")) == ""          # no Stage I to speak of
    assert stage1_note(None) == "" and "λ of the attention" in stage1_note(p)     # λ unknown: named, not valued


def test_the_default_pair_says_stage_one_kept_almost_nothing():
    """The bundled default pair on its long clip: Stage I keeps one token, and both pages say so with its share."""
    from app.runs.worker import heatmaps
    from app.views.inspect_view import maps_note
    from specvlm import assets
    from specvlm.analysis.records import record_from_events
    from specvlm.config import DecodeConfig, VideoConfig
    from specvlm.engine.prepare import prepare
    from specvlm.engine.stream import stream
    from specvlm.models.loading import load_pair
    from specvlm.models.presets import PRESETS, default_preset_name
    from specvlm.video import load_video

    preset = PRESETS[default_preset_name()]
    pair = load_pair(preset.target, preset.draft, device="cpu", dtype="float32")
    clip = load_video(str(assets.path("videos", "shapes_long.mp4")), VideoConfig(num_frames=preset.num_frames))
    cfg = DecodeConfig(method="specvlm", max_new_tokens=2)
    events = list(stream(pair, prepare(pair, clip, "Describe this video in detail."), cfg))
    info = events[0]
    k1 = int(info.prune.stage1.numel())
    assert k1 <= 0.1 * info.prune.num_kept                       # Stage I barely shows on this pair
    share = float(info.prune.scores[info.prune.stage1].sum() / info.prune.scores.sum())
    assert share >= cfg.prune.top_p
    legend = heatmaps(clip, info, cfg.prune.top_p)["note"]
    assert legend.startswith(f"Stage I kept almost nothing: {k1} token") and f"{share:.0%}" in legend
    assert f"λ = {cfg.prune.top_p:g}" in legend and f"{info.prune.num_kept - k1} evenly" in legend
    rec = record_from_events(events, cfg, prompt="Describe this video in detail.", tokenizer=pair.processor.tokenizer,
                             clip=clip)
    assert maps_note(rec) == f"*{legend}*"                       # the Inspect tab says the same from the record
