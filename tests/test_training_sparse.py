"""Sparse-information training data: scenes, subtitle facts, the spread focus loss, salient draft pruning."""
import dataclasses
import json

import numpy as np
import pytest
import torch

import training.train_bundled as tb
from training import build_bundled_processor as bbp
from training import data as tdata
from training import losses as tlosses
from training import model as tmodel
from training import scenes
from specvlm.bench import captions
from specvlm.bench import synth
from specvlm.text.prompting import subtitle_block
from specvlm.text.subtitles import load_srt


@pytest.fixture(scope="module")
def processor(tmp_path_factory):
    out = tmp_path_factory.mktemp("proc")
    bbp.build_processor(out, n_scenes=150)
    from transformers import AutoProcessor
    return AutoProcessor.from_pretrained(str(out))


def test_sparse_scene_objects_are_small_and_the_flash_and_text_brief():
    spec = scenes.SparseSpec(num_frames=64, height=112, width=112, flash_prob=1.0, text_prob=1.0)
    for seed in range(6):
        frames, truth = scenes.sparse_scene(seed, spec)
        assert frames.shape == (64, 112, 112, 3)
        flashes = [o for o in truth.objects if o.motion == synth.FLASH]
        assert len(flashes) == 1 and 1 <= len(truth.objects) - 1 <= 2
        for o in truth.objects:
            b = np.array([x for x in o.boxes if x[0] >= 0])
            assert (b[:, 2] - b[:, 0]).max() <= round(0.08 * 112)                # <= 8% of the side
        f = flashes[0]
        assert 4 <= f.end_frame - f.start_frame <= 8
        assert 4 <= truth.text.end_frame - truth.text.start_frame <= 10
        x0, y0, x1, y1 = f.boxes[f.start_frame]
        rgb = np.array(synth.COLOURS[f.colour], np.uint8)
        assert (frames[f.start_frame, y0:y1, x0:x1] == rgb).all(-1).any()        # drawn while it shows
        others = [o for o in truth.objects if o is not f and o.colour == f.colour]
        if f.start_frame > 0 and not others:
            assert not (frames[f.start_frame - 1, y0:y1, x0:x1] == rgb).all(-1).any()   # and not before
        for c in scenes.DISTRACTOR_COLOURS:                                       # distractors are drawn
            assert c not in synth.COLOURS.values()
        assert any((frames[0] == np.array(c, np.uint8)).all(-1).any() for c in scenes.DISTRACTOR_COLOURS)
    a, _ = scenes.sparse_scene(3, spec)
    b, _ = scenes.sparse_scene(3, spec)
    assert np.array_equal(a, b)


def test_subtitle_fact_is_said_in_one_cue_and_reported_by_the_caption(tmp_path):
    _, truth = synth.generate(4, synth.SceneSpec(num_frames=32, fps=4.0))
    for seed in range(12):
        sub = scenes.with_subtitles(truth, seed, scenes.SubtitleSpec(fact_prob=1.0))
        fact = sub.fact
        assert sub.cues[fact.cue].text == fact.cue_text and fact.value in fact.cue_text
        assert [c.text for c in sub.cues].count(fact.cue_text) == 1
        assert all(fact.value not in c.text for i, c in enumerate(sub.cues) if i != fact.cue)
        starts = [c.start_s for c in sub.cues]
        assert starts == sorted(starts) and sub.cues[-1].end_s <= 32 / 4.0 + 1e-6
        cap = captions.describe(sub)
        assert fact.sentence in cap and cap.endswith("background.")
        assert captions.parse_caption(cap)["fact"] == fact.sentence[:-1].lower()
        assert captions.parse_caption(captions.describe(truth))["fact"] is None
        block = subtitle_block(list(sub.cues), np.arange(32) / 4.0, 2)             # every cue reaches the prompt
        assert fact.cue_text in block
        back = synth.SceneTruth.from_dict(json.loads(json.dumps(sub.to_dict())))
        assert back == sub
    scenes.write_srt(tmp_path / "a.srt", sub.cues)
    assert [c.text for c in load_srt(tmp_path / "a.srt")] == [c.text for c in sub.cues]
    qa = dict(captions.questions(sub, np.random.default_rng(0)))
    assert qa[captions.FACT_QUESTIONS[fact.kind]] == fact.value + "."


def test_sparse_batch_puts_the_transcript_where_the_app_does(processor):
    recipe = dataclasses.replace(tdata.SMOKE_RECIPE, frames=(48,), p_sparse_long=1.0, p_subtitles=1.0,
                                 min_cover=0.03, p_describe=1.0)
    batch = tdata.make_batch(processor, recipe, seed=1, step=0, single_object=False)
    tok = processor.tokenizer
    vid = tok.convert_tokens_to_ids("<|video_pad|>")
    for b in range(batch["input_ids"].shape[0]):
        ids = batch["input_ids"][b]
        start = int(batch["text_start"][b])
        between = tok.decode(ids[tdata.after_video(ids.tolist(), vid):start])
        assert between.startswith("<|vision_end|>Subtitles:\n[t=") and between.endswith("\n")
        rest = tok.decode(ids[start:])
        assert any(rest.startswith(p) for p in captions.DESCRIBE_PROMPTS)               # the prompt right after it
    rows = tlosses.focus_rows(batch["input_ids"], batch["attention_mask"], vid,
                              tok("<|im_start|>assistant\n")["input_ids"], batch["text_start"])
    assert int(rows[0][0, 0]) == int(batch["text_start"][0])                      # Stage I's queries: after it


def test_spread_focus_target_gives_each_named_thing_equal_mass():
    ids = torch.tensor([[1, 9, 9, 9, 9, 9, 2]])                                   # 5 video tokens (id 9)
    cover = torch.tensor([1.0, 1.0, 1.0, 0.5, 0.0])
    obj = torch.tensor([1, 1, 1, 2, 0])                                           # object 1 on 3, object 2 on 1
    ideal = torch.tensor([[0.0, 1 / 6, 1 / 6, 1 / 6, 0.5, 1e-9, 0.0]])
    flat = torch.tensor([[0.0, 0.2, 0.2, 0.2, 0.2, 0.2, 0.0]])
    best, share = tlosses.spread_focus_loss([ideal], ids, 9, cover, obj)
    worse, _ = tlosses.spread_focus_loss([flat], ids, 9, cover, obj)
    assert float(best) < float(worse) and share == pytest.approx(1 / 2 + 1 / 4, abs=1e-4)
    order = tlosses.salient_order(cover, obj)
    assert order.tolist()[0] == 3 and set(order.tolist()) == {0, 1, 2, 3}        # the rare object first


def test_draft_forward_keeps_the_salient_tokens_first(processor):
    recipe = dataclasses.replace(tdata.SMOKE_RECIPE, frames=(48,), p_sparse_long=1.0, min_cover=0.03)
    batch = tdata.make_batch(processor, recipe, seed=0, step=3, single_object=False)
    draft = tmodel.build_model(processor.tokenizer, tmodel.ModelSize(**{**tmodel.TINY_SIZE.__dict__, "layers": 1}),
                               seed=1)
    logits, index = tlosses.draft_forward(draft, batch, 0.1, np.random.default_rng(0), salient=True)
    vid = draft.config.video_token_id
    vpos = torch.nonzero(batch["input_ids"][0] == vid).squeeze(1)
    V = len(vpos)
    for b in range(index.shape[0]):
        kept = torch.isin(vpos, index[b]).nonzero().squeeze(1)                    # kept video-token indices
        assert len(kept) == max(1, int(V * 0.1))
        order = tlosses.salient_order(batch["aux"]["cover"][b * V:(b + 1) * V], batch["aux"]["obj"][b * V:(b + 1) * V])
        if len(order):
            assert int(order[0]) in kept.tolist()
    assert logits.shape[:2] == index.shape and torch.isfinite(logits).all()


@pytest.fixture(scope="module")
def smoke_pair(processor, tmp_path_factory):
    """A tiny target + draft trained for a few steps on the sparse recipe (step budgets)."""
    work = tmp_path_factory.mktemp("smoke")
    processor.save_pretrained(str(work / "smoke" / "processor"))                  # skip building a tokenizer
    argv = ["--smoke", "--recipe", "sparse", "--focus-mode", "spread", "--salient-prob", "1", "--prune-prob", "1",
            "--work", str(work), "--target-steps", "3", "--draft-steps", "2", "--max-steps", "50"]
    tb.main(argv)
    return work, argv


def test_step_budget_run_resumes_and_stops_at_its_steps(smoke_pair, capsys):
    work, argv = smoke_pair
    info = json.loads((work / "smoke" / "model" / "target" / "training_info.json").read_text())
    assert info["steps"] == 3 and "--recipe sparse" in info["command"]
    tb.main(argv)                                                                 # finished phases are skipped
    out = capsys.readouterr().out
    assert "[target] done" not in out and "[draft] done" not in out and "all done" in out


def test_eval_sparse_runs_every_method_and_the_withheld_subtitles(smoke_pair, tmp_path):
    from training import eval_sparse as es

    work, _ = smoke_pair
    model = work / "smoke" / "model"
    out = tmp_path / "es.json"
    assert es.main(["--target", str(model / "target"), "--draft", str(model / "draft"), "--num-videos", "2",
                    "--long-frames", "16", "--long-side", "56", "--short-frames", "8", "--max-new-tokens", "12",
                    "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    longs = [r for r in data["records"] if r["set"] == "long"]
    assert len(longs) == 2 and all(r["has_fact"] for r in longs)                 # every long clip states a fact
    for r in longs:
        assert set(r["tau"]) == set(es.METHODS) | {es.WITHHELD}
        assert all(r["identical"].values())                                       # lossless in every run
        assert r["subtitle"]["extra_on_fact"] <= len(r["subtitle"]["extra_rejections"])
    s = data["summary"]["long"]
    assert set(s["specvlm_minus"]) == {"random", "window-middle", "frame"}
    assert s["subtitle"]["clips"] == 2 and data["goals"]["greedy output identical to vanilla in every run"]["met"]
    assert out.with_suffix(".md").read_text().startswith("# Sparse-information evaluation")
    # an interrupted run resumes from its partial records (here: all but the last clip)
    argv = ["--target", str(model / "target"), "--draft", str(model / "draft"), "--num-videos", "2",
            "--long-frames", "16", "--long-side", "56", "--short-frames", "8", "--max-new-tokens", "12",
            "--out", str(out), "--resume"]
    args = es.parse_args(argv)
    settings = json.dumps({k: v for k, v in vars(args).items()
                           if k not in ("out", "resume", "workers", "num_videos", "tree_config")}, sort_keys=True)
    kept = data["records"][:-1]
    out.with_suffix(".partial.jsonl").write_text(settings + "\n" + "".join(json.dumps(r) + "\n" for r in kept))
    assert es.main(argv) == 0
    again = json.loads(out.read_text())
    assert again["records"][:-1] == kept and len(again["records"]) == len(data["records"])
    assert again["records"][-1]["pred"] == data["records"][-1]["pred"]         # the missing clip was redone


def test_eval_sparse_fact_positions_and_paired_difference(processor):
    from transformers import AutoProcessor

    from training import eval_sparse as es
    from specvlm.models.presets import SPARSE_TARGET

    shipped = AutoProcessor.from_pretrained(str(SPARSE_TARGET)).tokenizer     # spells " name" as ' ', 'n', 'a', ...
    for tok in (processor.tokenizer, shipped):
        ids = tok("red circle flashes. one object. code 42. plain background.")["input_ids"]
        assert tok.decode([ids[p] for p in es.fact_positions(tok, ids)]) == " code 42"
        ids = tok("red circle flashes. one object. name Mia. plain background.")["input_ids"]
        pos = es.fact_positions(tok, ids)
        assert tok.decode([ids[p] for p in pos]) == " name Mia" and tok.decode(ids[:pos[0]]).endswith("object.")
        assert es.fact_positions(tok, tok("red circle flashes. one object. plain background.")["input_ids"]) == []
    recs = [{"tau": {"a": [4, 2], "b": [2, 2]}}, {"tau": {"a": [6, 3], "b": [3, 3]}}]
    d = es.paired_difference(recs, "a", "b")
    assert d["diff"] == pytest.approx(1.0) and d["lo"] == pytest.approx(1.0) and d["wins"] == 2


def test_export_writes_loadable_models_from_checkpoints(smoke_pair, tmp_path):
    from training.export import export
    from specvlm.models.loading import load_pair

    work, _ = smoke_pair
    done = export(work / "smoke", tmp_path)
    assert done == {"target": 3, "draft": 2}
    pair = load_pair(str(tmp_path / "target"), str(tmp_path / "draft"), device="cpu", dtype="float32")
    trained = torch.load(work / "smoke" / "target" / "ckpt.pt", weights_only=False)["model"]
    for k, v in pair.target.state_dict().items():
        assert torch.equal(v, trained[k]), k


def test_attention_losses_over_an_empty_selection_are_zero_not_nan(tmp_path):
    ids = torch.tensor([[1, 9, 9, 9, 2]])
    att = [torch.tensor([[0.1, 0.3, 0.3, 0.2, 0.1]], requires_grad=True)]
    none = torch.zeros(3)
    for loss, _ in (tlosses.focus_loss(att, ids, 9, none),
                    tlosses.spread_focus_loss(att, ids, 9, none, torch.zeros(3, dtype=torch.long)),
                    tlosses.routing_loss([a[:, None, :] for a in att], ids, 9, torch.zeros(3, dtype=torch.long),
                                         torch.tensor([[True]]), torch.tensor([[0]]))):   # names object 0: no token
        assert float(loss) == 0.0
    from training.checkpoints import save_loss_plot
    save_loss_plot(tmp_path / "l.png", [(1, 3.0), (2, float("nan")), (3, 2.0), (4, 1.5)], "loss")
    from PIL import Image
    img = np.asarray(Image.open(tmp_path / "l.png").convert("RGB"))
    assert (img == np.array([30, 90, 200], np.uint8)).all(-1).any()               # the curve is drawn
