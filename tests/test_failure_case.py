"""The failure case shipped with the bundled sparse pair (assets/model_sparse): a long clip whose subtitles state
a fact the description reports. In Self-SD at the preset's settings (the page's failure-case example), with the
subtitles withheld from the draft τ falls exactly at the fact and the output stays identical; the Std-SD pair
(its 1-layer draft) is lossless on it too."""
import json
import re
from pathlib import Path

import pytest

from training.eval_sparse import fact_positions
from specvlm import assets
from specvlm.analysis.why import explain_rejections, rejections
from specvlm.bench import captions, synth
from specvlm.config import DecodeConfig, VideoConfig
from specvlm.engine.prepare import prepare
from specvlm.engine.stream import generate
from specvlm.models.loading import load_pair
from specvlm.models.pair import pair_from_models
from specvlm.models.presets import PRESETS, SPARSE_DRAFT, SPARSE_SELF, SPARSE_TARGET
from specvlm.text.subtitles import load_srt
from specvlm.video import load_video

CLIP = Path(assets.path("videos", "shapes_subtitles.mp4"))


PRESET = PRESETS[SPARSE_SELF]


@pytest.fixture(scope="module")
def std_pair():
    return load_pair(str(SPARSE_TARGET), str(SPARSE_DRAFT), device="cpu", dtype="float32")


@pytest.fixture(scope="module")
def clip():
    return load_video(str(CLIP), VideoConfig(num_frames=PRESET.num_frames, even_frames=True))


@pytest.fixture(scope="module")
def case(std_pair, clip):
    pair = pair_from_models(std_pair.target, std_pair.processor)                   # Self-SD, as the preset
    cues = load_srt(CLIP.with_suffix(".srt"))
    truth = synth.SceneTruth.from_dict(json.loads(CLIP.with_suffix(".json").read_text()))
    prompt = captions.DESCRIBE_PROMPTS[0]
    cfg = DecodeConfig(method="specvlm", tree=PRESET.tree, max_new_tokens=PRESET.max_new_tokens)
    runs = {}
    for mode in ("both", "target"):
        inputs = prepare(pair, clip, prompt, subtitles=cues, subtitle_mode=mode)
        runs[mode] = (inputs, generate(pair, inputs, cfg, record_trees=True))
    vanilla = generate(pair, runs["both"][0], DecodeConfig(method="vanilla", max_new_tokens=PRESET.max_new_tokens))
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
                              draft_saw_subtitles=False)
    assert any(w.cue is not None and w.cue[2] == truth.fact.cue_text for w in whys)
    fact = [w for w in whys if w.cue is not None]
    assert fact and all(w.explanation == "withheld_transcript" and w.shares["transcript"] > 0.5 for w in fact)
    inputs, r = runs["both"]                                   # the draft read the transcript: never the reason
    given = explain_rejections(pair, inputs, r.steps, r.prefill.prune.keep.tolist(), cues=cues,
                               draft_saw_subtitles=True)
    assert given and all(w.explanation != "withheld_transcript" and w.cue is None for w in given)


def test_std_sd_on_the_sparse_pair_is_lossless(std_pair, clip, case):
    _, cues, _, vanilla, _ = case
    for mode in ("both", "target"):
        inputs = prepare(std_pair, clip, captions.DESCRIBE_PROMPTS[0], subtitles=cues, subtitle_mode=mode)
        res = generate(std_pair, inputs, DecodeConfig(method="specvlm", max_new_tokens=PRESET.max_new_tokens))
        assert res.token_ids == vanilla.token_ids and res.num_kept < res.num_video_tokens


def test_the_app_example_shows_the_failure():
    """The page's failure-case example row, run through the app's backend as clicking it sets the page (the
    row's preset brings its frame count and draft tree): τ is lower than with the subtitles given to both
    models, and the outputs are identical in both runs."""
    from app.inputs.settings import RunRequest, RunSettings
    from app.page.examples import EXAMPLE_COLUMNS, example_rows, failure_example
    from app.runs.backend import Backend
    from app.runs.facade import SpecvlmFacade
    from specvlm.models.presets import PRESETS

    (row,) = example_rows(failure_example(), 128)
    ex = dict(zip(EXAMPLE_COLUMNS, row))
    preset = PRESETS[ex["preset"]]
    tree = dict(tree_shape=preset.tree.shape, depth=preset.tree.depth, top_k=preset.tree.top_k,
                total_tokens=preset.tree.total_tokens, min_prob=preset.tree.min_prob)
    backend = Backend(SpecvlmFacade(), device="cpu", dtype="float32")
    out = {}
    for mode in (ex["subtitle_mode"], "both"):
        settings = RunSettings(preset=ex["preset"], subtitle_mode=mode, max_new_tokens=ex["max_new_tokens"],
                               fixed_length=ex["fixed_length"], num_frames=preset.num_frames, **tree)
        out[mode] = backend.run_json(RunRequest(video=ex["video"], prompt=ex["prompt"], settings=settings,
                                                srt=ex["srt"], truth=ex["truth"]))
    withheld, given = out["target"], out["both"]
    assert withheld["status"] == given["status"] == "done", (withheld["error"], given["error"])
    assert withheld["identical"] and given["identical"]
    assert withheld["vanilla"]["text"] == given["vanilla"]["text"]                 # vanilla always reads them
    assert withheld["tau"] < given["tau"], (withheld["tau"], given["tau"])
    assert "flag green" in given["speculative"]["text"]                                 # the fact, from the cue


@pytest.mark.parametrize("name", ["eval_sparse", "eval_sparse_std"])
def test_the_shipped_evaluation_reads_as_its_json_and_shows_the_paper_s_ordering(name):
    """assets/model_sparse/<name>.md is the report of its JSON; on 300 long clips the JSON holds SpecVLM's τ above
    random, window-middle and frame pruning (Self-SD: every paired 95% CI above 0), τ lower with the subtitles
    withheld from the draft (CI above 0), and no speculative output that differs from vanilla."""
    from training import eval_sparse as es

    folder = Path(assets.path("model_sparse"))
    d = json.loads((folder / f"{name}.json").read_text())
    assert (folder / f"{name}.md").read_text() == es.markdown(d["summary"], d["goals"], d["meta"])
    long = d["summary"]["long"]
    assert long["num_videos"] >= 300 and d["config"]["target"] == "assets/model_sparse/target"
    diffs = long["specvlm_minus"]
    assert set(diffs) == {"random", "window-middle", "frame"} and all(x["diff"] > 0 for x in diffs.values())
    if d["meta"]["sd"] == "Self-SD":
        assert all(x["lo"] > 0 for x in diffs.values()), diffs
    assert long["subtitle"]["given_minus_withheld"]["lo"] > 0
    for s in d["summary"].values():
        assert not any(s["mismatches"].values()) and all(n > 0 for n in s["runs"].values())


def _failure_paragraph(page: str = "docs/app.md") -> str:
    """The failure-case paragraph of ``page`` (docs/app.md in full, the README in brief), on one line."""
    text = (Path(__file__).resolve().parents[1] / page).read_text()
    start = text.index("**A failure to inspect.**")
    return " ".join(text[start:text.index("\n\n", start)].split())


def test_the_documented_failure_case_figures_come_from_the_run():
    """The deterministic failure-case figures of docs/app.md and the README, regenerated through the app's backend
    as the page runs the example (scripts/failure_case_figures.py, no timing): τ with the transcript given to both
    and withheld, the first rows of the Inspect tab's lowest-acceptance table, their transcript shares and their
    one explanation.
    Its timings are stated with their spread and not checked (noise)."""
    from app.runs.backend import Backend
    from app.runs.facade import SpecvlmFacade
    from scripts.failure_case_figures import figures

    got = figures(Backend(SpecvlmFacade(), device="cpu", dtype="float32"))
    para = _failure_paragraph()
    for page in ("docs/app.md", "README.md"):
        m = re.search(r"τ falls from ([\d.]+) \(transcript given to both\) to ([\d.]+)", _failure_paragraph(page))
        assert m and (float(m[1]), float(m[2])) == (got["both"]["tau"], got["target"]["tau"]), (page, m, got)
    assert got["target"]["identical"] and got["both"]["identical"]
    listed = para[para.index("lowest-acceptance table starts with"):]
    listed = listed[:listed.index(":")]
    rows = got["target"]["rows"]
    assert re.findall(r'step (\d+) \("([^"]*)"\)', listed) == [(str(r["step"]), r["text"]) for r in rows]
    shares = re.search(r"\((\d+)%, (\d+)% and (\d+)% on the transcript\)", para)
    assert shares and list(shares.groups()) == [f"{r['shares']['transcript']:.0%}".rstrip("%") for r in rows]
    assert "names one explanation, the withheld transcript" in para
    assert all(r["explanation"] == "withheld_transcript" for r in rows), rows


def test_the_cli_gives_the_documented_tau_for_the_same_pair():
    """``python -m specvlm generate`` with the failure case's target drafting for itself uses the Self-SD preset's
    tree, as the page does, so it gives the τ the docs state (with the transcript given to both: the mode
    whose tree the preset decides)."""
    from helpers.cli import cli

    taus = re.search(r"τ falls from ([\d.]+) \(transcript given to both\) to ([\d.]+)", _failure_paragraph())
    r = cli("generate", "--video", str(CLIP), "--srt", str(CLIP.with_suffix(".srt")), "--subtitle-mode", "both",
            "--model", str(SPARSE_TARGET), "--self-sd", "--prompt", captions.DESCRIBE_PROMPTS[0], "--json")
    assert r.returncode == 0, r.stderr
    assert f"{json.loads(r.stdout)['tau']:.2f}" == taus[1]
