"""The run record (specvlm.analysis.run): the fold of a stream, its JSON, the comparison of two runs and
the one speedup definition."""
from __future__ import annotations

import json
import pickle

import pytest
import torch

from helpers.media import make_clip
from specvlm.analysis import metrics
from specvlm.analysis.run import Comparison, RecordError, RunRecord, compare_runs, run_speedup
from specvlm.config import DecodeConfig, TreeConfig
from specvlm.engine.prepare import prepare
from specvlm.engine.stream import stream
from specvlm.types import PrefillInfo, PruneResult, StepEvent

PROMPT = "describe this video in detail"


def _events(spec: bool, ids: list[int], texts: dict[int, str], dt: float = 0.1, margin: float = 2.0):
    """A hand-made stream: vanilla one token per step; speculative two tokens per verify step after step 0."""
    lt = lambda xs: torch.tensor(xs, dtype=torch.long)  # noqa: E731
    pr = PruneResult(lt([0, 3, 5]), lt([0]), lt([3]), None, 8, "specvlm", lt([5])) if spec else None
    evs: list = [PrefillInfo(30, 8, 25 if spec else 0, pr, 0.5, 0.01, 0.02)]
    i, step = 0, 0
    while i < len(ids):
        k = 2 if spec and step > 0 else 1
        chunk = ids[i:i + k]
        flags = [j < len(chunk) - 1 for j in range(len(chunk))] if spec and step > 0 else [False] * len(chunk)
        i += len(chunk)
        evs.append(StepEvent(step, chunk, sum(flags), flags, "".join(texts[t] for t in chunk),
                             elapsed_s=dt * step, num_generated=i, margin=None if spec else margin,
                             pieces=[texts[t] for t in chunk]))
        step += 1
    return evs


TEXT = {1: "a", 2: " b", 3: " c", 4: " d", 5: " e", 6: " f", 7: " X"}


def test_fold_answers_what_a_front_end_shows():
    rec = RunRecord()
    for ev in _events(True, [1, 2, 3, 4, 5], TEXT):
        rec.add(ev)
    assert rec.text == "a b c d e" and rec.token_ids == [1, 2, 3, 4, 5] and rec.num_generated == 5
    assert rec.pieces() == [("a", False), (" b", True), (" c", False), (" d", True), (" e", False)]
    assert rec.accept_lengths == [1, 1] and rec.tau == 1.0 and rec.step_texts == [" b c", " d e"]
    assert (rec.num_video_tokens, rec.num_kept, rec.num_forced) == (8, 3, 1)
    assert rec.decode_s == pytest.approx(0.2) and rec.summary.tokens_per_s == pytest.approx(4 / 0.2)
    van = RunRecord.from_events(_events(False, [1, 2, 3], TEXT), DecodeConfig(method="vanilla"))
    assert van.num_kept is None and van.accept_lengths == van.running_tau == [] and van.settings["method"] == "vanilla"
    assert van.margins == [2.0, 2.0, 2.0]
    with pytest.raises(TypeError, match="PrefillInfo and StepEvent"):
        rec.add("text")


def test_a_step_without_pieces_is_one_piece():
    rec = RunRecord.from_events([StepEvent(0, [1], 0, [False], "a"), StepEvent(1, [2, 3], 1, [True, False], " b c")])
    assert rec.pieces() == [("a", False), (" b c", False)] and rec.token_texts() == ["a", " b c", ""]


def test_json_round_trip_and_older_files():
    rec = RunRecord.from_events(_events(True, [1, 2, 3, 4], TEXT), DecodeConfig(), PROMPT)
    d = json.loads(json.dumps(rec.to_json()))
    back = RunRecord.from_json(d)
    assert back.to_json() == rec.to_json() and back.pieces() == rec.pieces()
    old = json.loads(json.dumps(d))          # a file written before steps carried their text pieces
    for s in old["steps"]:
        del s["pieces"]
    assert RunRecord.from_json(old).text == rec.text
    with pytest.raises(RecordError, match="not a SpecVLM run record"):
        RunRecord.from_json({"format": "other"})
    with pytest.raises(RecordError, match="version 9"):
        RunRecord.from_json(dict(d, version=9))


def test_run_json_has_the_numbers():
    out = RunRecord.from_events(_events(True, [1, 2, 3, 4, 5], TEXT), DecodeConfig()).run_json()
    assert (out["tokens"], out["tau"], out["accept_lengths"], out["num_kept"], out["num_forced"]) == (
        5, 1.0, [1, 1], 3, 1)
    assert out["stage1"] == [0] and out["tokens_per_target_forward"] == 2.0 and out["method"] == "specvlm"


def test_one_speedup_definition():
    assert metrics.speedup(2.0, 1.0) == 2.0
    assert metrics.speedup(2.0, 1.0, vanilla_tokens=11, method_tokens=11) == pytest.approx(2.0)
    # different lengths compare per decoded token: 10 tokens in 2 s vs 20 in 1 s = 4x
    assert metrics.speedup(2.0, 1.0, vanilla_tokens=11, method_tokens=21) == pytest.approx(4.0)
    assert metrics.speedup(0.0, 1.0) is None and metrics.speedup(1.0, 1.0, vanilla_tokens=1, method_tokens=5) is None
    assert metrics.median_speedup([1.0, None, 3.0, 2.0]) == 2.0 and metrics.median_speedup([None]) is None


def test_compare_runs_identical_near_tie_and_mismatch():
    van = RunRecord.from_events(_events(False, [1, 2, 3, 4, 5], TEXT, dt=0.2))
    same = RunRecord.from_events(_events(True, [1, 2, 3, 4, 5], TEXT, dt=0.2))
    c = compare_runs(van, same, torch.float32, more_speedups=[1.5, None, 3.0])
    assert c.identical and c.speedup_runs[0] == pytest.approx(2.0) and c.speedup == pytest.approx(2.0)
    assert c.to_json() == {"identical": True, "divergence": None, "speedup": 2.0, "speedup_runs": [2.0, 1.5, 3.0]}
    assert run_speedup(van, same) == pytest.approx(2.0)
    other = RunRecord.from_events(_events(True, [1, 2, 7, 4, 5], TEXT))
    tie = compare_runs(RunRecord.from_events(_events(False, [1, 2, 3, 4, 5], TEXT, margin=0.1)), other, "bfloat16")
    assert tie.to_json()["divergence"] == {"index": 2, "kind": "near-tie", "margin": 0.1, "threshold": 0.5,
                                           "dtype": "bfloat16"}
    assert (tie.vanilla_context, tie.spec_context) == ("a b c d e", "a b X d e")
    bad = compare_runs(van, other, torch.float32)
    assert bad.divergence.kind == "mismatch" and not bad.identical
    sampled = compare_runs(van, other, torch.float32, greedy=False).to_json()["divergence"]
    assert sampled["index"] == 2 and sampled["kind"] is None and sampled["margin"] is None
    assert pickle.loads(pickle.dumps(bad)) == bad and isinstance(bad, Comparison)


def test_engine_pieces_are_its_text_deltas(pairs):
    """One text decoder: every step's pieces (one per token) join to its text, and the text is the
    tokenizer's decode of the ids."""
    pair = pairs[("qwen", "std")]
    inputs = prepare(pair, make_clip(), PROMPT)
    tok = pair.processor.tokenizer
    for method in ("vanilla", "specvlm"):
        cfg = DecodeConfig(method=method, max_new_tokens=12, stop_at_eos=False, tree=TreeConfig(depth=3))
        rec = RunRecord.from_events(stream(pair, inputs, cfg), cfg)
        assert all(len(s.pieces) == len(s.token_ids) and "".join(s.pieces) == s.text for s in rec.steps)
        assert rec.text == tok.decode(rec.token_ids, skip_special_tokens=True) and rec.num_generated == 12


def test_vanilla_and_speculative_pieces_match(pairs):
    """Both decode loops emit the same per-token text pieces through the one text decoder."""
    pair = pairs[("qwen", "std")]
    inputs = prepare(pair, make_clip(), PROMPT)
    recs = []
    for method in ("vanilla", "specvlm"):
        cfg = DecodeConfig(method=method, max_new_tokens=10, stop_at_eos=False, tree=TreeConfig(depth=3))
        recs.append(RunRecord.from_events(stream(pair, inputs, cfg), cfg))
    assert recs[0].token_ids == recs[1].token_ids and recs[0].text == recs[1].text
    assert [p for p, _ in recs[0].pieces()] == [p for p, _ in recs[1].pieces()]
    assert all(len(s.pieces) == len(s.token_ids) for s in recs[1].steps)
