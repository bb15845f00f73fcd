"""The re-selection evaluation: end to end on tiny clips, its statistics on known inputs, resuming its rows."""
import json
import re

import numpy as np
import pytest

from training import eval_reselect as er
from training import reselect_clips as rc
from training import reselect_stats as rs

TINY = ["--num-videos", "1", "--sets", "text,short", "--long-frames", "16", "--long-side", "112",
        "--short-frames", "8", "--max-new-tokens", "24", "--boot", "200"]


def _lines(path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """One tiny clip per set decoded by every run (the bundled sparse pair, Self-SD)."""
    work = tmp_path_factory.mktemp("reselect")
    rows, out = work / "rows.jsonl", work / "eval.json"
    assert er.main(TINY + ["--rows", str(rows), "--out", str(out)]) == 0
    return rows, out


def test_every_run_decodes_each_clip_identically_to_vanilla(finished):
    rows_path, out = finished
    head, *rows = _lines(rows_path)
    assert head["settings"]["max_new_tokens"] == 24 and head["settings"]["target"] == "assets/model_sparse/target"
    keys = {(r["set"], r["pair"], r["run"]) for r in rows}
    assert keys == {(s, "target", "vanilla") for s in ("text", "short")} | {
        (s, "self", run) for s in ("text", "short") for run in rs.SPEC_RUNS}
    assert all(r["identical"] for r in rows)                                     # lossless in every run
    by = {(r["set"], r["run"]): r for r in rows}
    text_clip = by[("text", "vanilla")]
    assert text_clip["has_text"] and text_clip["seed"] == rc.SEED_BASE + rc.SET_OFFSETS["text"]
    assert text_clip["truth"].count("text ") == 1 and "no text" not in text_clip["truth"]   # the caption reports it
    for kind in ("text", "short"):
        assert by[(kind, "none")]["draft_video_tokens"] == by[(kind, "vanilla")]["video_tokens"]
        assert by[(kind, "specvlm")]["draft_video_tokens"] < by[(kind, "none")]["draft_video_tokens"]
        assert by[(kind, "specvlm")]["r_used"] == pytest.approx(0.9)
        per_step = {run: by[(kind, run)]["kcost"] / by[(kind, run)]["steps"] for run in ("none", "specvlm")}
        assert per_step["none"] > per_step["specvlm"] > 0                          # the unpruned draft reads more
        assert by[(kind, "reselect")]["added"] == sum(n for _, n in by[(kind, "reselect")]["added_at"])
        assert len(by[(kind, "reselect")]["unseen_shares"]) == by[(kind, "reselect")]["steps"]   # trigger every
        for run in rs.SPEC_RUNS:                                                  # a refusal emits the target's token
            assert all(by[(kind, "vanilla")]["token_ids"][p] == t for p, t in by[(kind, run)]["refused_at"])
    said = re.search(r"(?:^|\. )text [^.]+\.", text_clip["text"])
    assert bool(text_clip["text_at"]) == bool(said)                             # the text sentence's positions
    data = json.loads(out.read_text())
    s = data["summary"]["text"]["self"]
    assert s["clips"] == 1 and set(s["runs"]) == set(rs.SPEC_RUNS) | {"vanilla"}
    assert data["goals"]["greedy output identical to vanilla in every run"]["met"]
    md = out.with_suffix(".md").read_text()
    assert md.startswith("# Re-selection and adaptive r") and "24 new tokens at most" in md


def test_a_rerun_skips_done_rows_and_redoes_only_missing_ones(finished, tmp_path):
    rows_path, _ = finished
    lines = rows_path.read_text().splitlines()
    part = tmp_path / "rows.jsonl"
    part.write_text("\n".join(lines[:-2]) + "\n")                                 # the last two decodes lost
    assert er.main(TINY + ["--rows", str(part)]) == 0
    again = part.read_text().splitlines()
    assert again[:-2] == lines[:-2] and len(again) == len(lines)                  # nothing done is redone
    key = lambda x: (x["set"], x["index"], x["pair"], x["run"])                   # noqa: E731
    assert [key(json.loads(x)) for x in again[-2:]] == [key(json.loads(x)) for x in lines[-2:]]
    assert er.main(TINY + ["--rows", str(part)]) == 0 and part.read_text().splitlines() == again
    assert er.main([*TINY[:-4], "--max-new-tokens", "25", "--rows", str(part)]) == 2   # other settings: refused


def test_plan_lists_only_the_missing_work():
    rows = [{"set": "text", "index": 0, "pair": "target", "run": "vanilla"},
            {"set": "text", "index": 0, "pair": "self", "run": "none"},
            {"set": "short", "index": 0, "pair": "self", "run": "none"}]
    work = er.plan(rows, ["text", "short"], 2, ["self"], ["none", "specvlm"])
    assert [(k, i, todo, v is not None) for k, i, todo, v in work] == [
        ("text", 0, [("self", "specvlm")], True), ("short", 0, [("self", "specvlm")], False),
        ("text", 1, [("self", "none"), ("self", "specvlm")], False),
        ("short", 1, [("self", "none"), ("self", "specvlm")], False)]


def test_paired_ci_matches_known_differences():
    steps = np.array([3, 5, 4, 6, 2], float)
    a = np.stack([2 * steps, steps], 1)                                           # τ 2 on every clip
    b = np.stack([steps, steps], 1)                                               # τ 1
    d = rs.paired_ci(a, b)
    assert d["diff"] == pytest.approx(1.0) and d["lo"] == pytest.approx(1.0) and d["hi"] == pytest.approx(1.0)
    assert (d["wins"], d["ties"], d["losses"], d["clips"]) == (5, 0, 0, 5)
    rng = np.random.default_rng(1)                                                # 400 clips, one step each:
    x = rng.normal(0.3, 1.0, 400)                                                 # the normal-theory interval
    ones = np.ones(400)
    d = rs.paired_ci(np.stack([x, ones], 1), np.stack([np.zeros(400), ones], 1), n_boot=4000)
    half = 1.96 * x.std(ddof=1) / np.sqrt(400)
    assert d["diff"] == pytest.approx(x.mean())
    assert d["lo"] == pytest.approx(x.mean() - half, abs=0.02) and d["hi"] == pytest.approx(x.mean() + half, abs=0.02)
    secs = np.stack([np.full(5, 40.0), np.array([0.5, 0.4, 0.6, 0.5, 0.45])], 1)  # fractional denominators
    d = rs.paired_ci(secs, np.stack([np.full(5, 20.0), secs[:, 1]], 1))
    assert d["lo"] <= d["diff"] <= d["hi"] and d["diff"] == pytest.approx(20 / secs[:, 1].mean())


def test_recovered_share_on_known_inputs():
    steps = np.array([4, 6, 5, 8], float)
    pru = np.array([2.0, 3.0, 1.0, 4.0]) * steps                                  # per clip τ 2, 3, 1, 4 pruned
    unp = pru + np.array([2.0, 1.0, 3.0, 0.5]) * steps                            # and more unpruned
    res = (pru + unp) / 2                                                         # half of the loss back
    s = rs.recovered_share(*(np.stack([v, steps], 1) for v in (pru, unp, res)))
    assert s["share"] == pytest.approx(0.5) and s["lo"] == pytest.approx(0.5) and s["hi"] == pytest.approx(0.5)
    assert s["lost"] == pytest.approx((unp - pru).sum() / steps.sum()) and s["undefined"] == 0
    same = rs.recovered_share(*(np.stack([pru, steps], 1) for _ in range(3)))      # pruning lost nothing
    assert same["share"] is None and same["lost"] == 0 and same["recovered"] == 0
    rng = np.random.default_rng(0)                                                # noisy: the CI holds the share
    pru = rng.uniform(3, 5, 200)
    unp = pru + rng.uniform(0.5, 1.5, 200)
    res = pru + 0.6 * (unp - pru) + rng.normal(0, 0.2, 200)
    s = rs.recovered_share(*(np.stack([v, np.ones(200)], 1) for v in (pru, unp, res)))
    assert s["lo"] < s["share"] < s["hi"] and s["lo"] > 0.5 and s["hi"] < 0.7


def test_clip_sets_are_held_out_and_the_text_set_always_shows_text():
    settings = rc.ClipSettings(long_frames=16, long_side=112)
    seeds = {k: rc.clip_seed(k, 0, settings) for k in rc.SETS}
    assert min(seeds.values()) >= 3 * 10**9 and len(set(seeds.values())) == 3
    for i in range(3):
        frames, truth = rc.make_clip("text", i, settings)
        assert frames.shape == (16, 112, 112, 3) and truth.text is not None and truth.fact is None
    _, truth = rc.make_clip("long", 0, settings)
    assert truth.fact is not None and truth.seed == seeds["long"]
    with pytest.raises(ValueError, match="training seeds"):
        rc.ClipSettings(seed_base=5)
    with pytest.raises(ValueError, match="unknown clip set"):
        rc.make_clip("medium", 0, settings)
