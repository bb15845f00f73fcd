"""The failure case shipped with the bundled pair: a long clip whose subtitles state a fact the description
reports; with the subtitles withheld from the draft, τ falls exactly at the fact and the output stays identical."""
import json
from pathlib import Path

import pytest

from specvlm import assets
from specvlm.analysis.why import explain_rejections, rejections
from scripts.eval_sparse import fact_positions
from specvlm.bench import captions, synth
from specvlm.config import DecodeConfig
from specvlm.engine.prepare import prepare
from specvlm.engine.stream import generate
from specvlm.models.loading import load_pair
from specvlm.text.subtitles import load_srt
from specvlm.video import load_video

CLIP = Path(assets.path("videos", "shapes_subtitles.mp4"))


@pytest.fixture(scope="module")
def case():
    pair = load_pair(str(assets.path("model", "target")), str(assets.path("model", "draft")), device="cpu",
                     dtype="float32")
    clip = load_video(str(CLIP))
    cues = load_srt(CLIP.with_suffix(".srt"))
    truth = synth.SceneTruth.from_dict(json.loads(CLIP.with_suffix(".json").read_text()))
    prompt = captions.DESCRIBE_PROMPTS[0]
    runs = {}
    for mode in ("both", "target"):
        inputs = prepare(pair, clip, prompt, subtitles=cues, subtitle_mode=mode)
        runs[mode] = (inputs, generate(pair, inputs, DecodeConfig(method="specvlm"), record_trees=True))
    vanilla = generate(pair, runs["both"][0], DecodeConfig(method="vanilla"))
    return pair, cues, truth, vanilla, runs


def test_withholding_the_subtitles_from_the_draft_lowers_tau_at_the_fact(case):
    pair, cues, truth, vanilla, runs = case
    assert truth.fact is not None and truth.fact.sentence in vanilla.text          # the target reports the fact
    for _, r in runs.values():
        assert r.token_ids == vanilla.token_ids                                    # lossless either way
    assert runs["target"][1].tau < runs["both"][1].tau
    tok = pair.processor.tokenizer
    extra = {p for _, p, _ in rejections(runs["target"][1].steps)} - {p for _, p, _ in rejections(runs["both"][1].steps)}
    assert extra & set(fact_positions(tok, vanilla.token_ids))                    # the failing steps write the fact


def test_the_why_names_the_withheld_cue(case):
    pair, cues, truth, vanilla, runs = case
    inputs, r = runs["target"]
    whys = explain_rejections(pair, inputs, r.steps, r.prefill.prune.keep.tolist(), cues=cues,
                              draft_saw_subtitles=False, tokenizer=pair.processor.tokenizer)
    assert any(w.cue is not None and w.cue[2] == truth.fact.cue_text for w in whys)
