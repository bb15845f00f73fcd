"""Smoke tests for the bundled-model training script (tiny sizes, seconds)."""
import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]

import training.train_bundled as tb
from training import build_bundled_processor as bbp
from training import data as tdata
from training import token_labels as tlabels
from training import losses as tlosses
from training import loop as tloop
from training import model as tmodel
from specvlm.bench import captions
from specvlm.bench import synth


@pytest.fixture(scope="module")
def processor(tmp_path_factory):
    out = tmp_path_factory.mktemp("proc")
    bbp.build_processor(out, n_scenes=150)
    from transformers import AutoProcessor
    return AutoProcessor.from_pretrained(str(out))  # offline round trip


def test_processor_round_trip_and_video_positions(processor):
    tok = processor.tokenizer
    assert tok.eos_token == "<|im_end|>"
    for t in ("<|im_start|>", "<|vision_start|>", "<|video_pad|>", "<|image_pad|>", "<|endoftext|>"):
        assert tok.convert_tokens_to_ids(t) is not None and tok.convert_tokens_to_ids(t) < len(tok)
    msgs = [{"role": "user", "content": [{"type": "video"}, {"type": "text", "text": "Describe this video in detail."}]}]
    text = processor.apply_chat_template(msgs, add_generation_prompt=True)
    frames = np.zeros((8, 112, 84, 3), np.uint8)
    meta = [{"fps": 4.0, "total_num_frames": 8, "frames_indices": list(range(8))}]
    inp = processor(text=[text], videos=[frames], video_metadata=meta, return_tensors="pt")
    assert inp["video_grid_thw"].tolist() == [[4, 8, 6]]  # no upscaling: 112x84 px stays
    assert (inp["input_ids"] == tok.convert_tokens_to_ids("<|video_pad|>")).sum() == 4 * 4 * 3
    assert inp["second_per_grid_ts"].tolist() == [0.5]


def test_labels_cover_only_answers(processor):
    recipe = dataclasses.replace(tdata.SMOKE_RECIPE, label_all_text=False)
    batch = tdata.make_batch(processor, recipe, seed=0, step=1, single_object=False)
    tok = processor.tokenizer
    for ids, lab in zip(batch["input_ids"].tolist(), batch["labels"].tolist()):
        sup = [l for l in lab if l != tdata.IGNORE]
        assert sup and sup[-1] == tok.convert_tokens_to_ids("<|im_end|>")
        text = tok.decode(sup)
        assert "<|im_start|>" not in text and "<|video_pad|>" not in text


def test_labels_cover_all_text_but_not_video_or_padding(processor):
    batch = tdata.make_batch(processor, tdata.SMOKE_RECIPE, seed=0, step=1, single_object=False)
    tok = processor.tokenizer
    vid = tok.convert_tokens_to_ids("<|video_pad|>")
    ids, lab, att = batch["input_ids"], batch["labels"], batch["attention_mask"]
    text = (ids != vid) & (att == 1)
    assert torch.equal(lab[text], ids[text])
    assert (lab[~text] == tdata.IGNORE).all()
    assert "<|im_start|>user" in tok.decode(lab[0][lab[0] != tdata.IGNORE].tolist())


def test_token_labels_match_the_drawn_pixels():
    from specvlm.bench import synth
    frames, truth = synth.generate(5, synth.SceneSpec(num_frames=8, height=112, width=168, text_prob=1.0))
    lab = tlabels.token_labels(truth, frames)
    what = lab["what"].reshape(4, 4, 6)
    inv = {v: k for k, v in tlabels._COLOUR_IDX.items()}
    seen = set()
    for t, i, j in zip(*np.nonzero(what)):
        cell = frames[2 * t:2 * t + 2, 28 * i:28 * i + 28, 28 * j:28 * j + 28].reshape(-1, 3).astype(int)
        c = int(what[t, i, j])
        if c == tlabels._TEXT_CLASS:   # the text box is drawn black with white glyphs
            assert ((cell == 0).all(-1) | (cell == 255).all(-1)).mean() > 0.15
        else:
            share = (np.abs(cell - np.array(synth.COLOURS[inv[c]])).sum(-1) == 0).mean()
            assert share > 0.15, (t, i, j, share)
        seen.add(c)
    assert tlabels._TEXT_CLASS in seen and len(seen) >= 2
    n = len(lab["what"])
    assert n == 4 * 4 * 6 and len(lab["shape"]) == n and len(lab["motion"]) == n
    assert ((lab["shape"] > 0) == ((lab["what"] > 0) & (lab["what"] < tlabels._TEXT_CLASS))).all()
    cover = lab["cover"].reshape(4, 4, 6)
    assert cover.dtype == np.float32 and (cover >= 0).all() and (cover <= 1).all()
    assert (cover[what > 0] >= 0.15).all() and cover.max() > 0.5 and (cover == 0).any()


def test_step_labels_follow_each_patch_move():
    from specvlm.bench import synth
    for seed in range(12):
        frames, truth = synth.generate(seed, synth.SceneSpec(num_frames=16, height=112, width=112,
                                                             num_objects=1, text_prob=0.0))
        o = truth.objects[0]
        steps = tlabels._local_steps(o.boxes, 8)
        b = np.asarray(o.boxes)
        for g, lab in enumerate(steps):
            (x0, y0), (x1, y1) = b[2 * g, :2], b[2 * g + 1, :2]
            if x0 < 0 or x1 < 0:
                assert lab == 0
                continue
            want = "right" if x1 > x0 else "left" if x1 < x0 else "down" if y1 > y0 else "up" if y1 < y0 else "still"
            assert tlabels.STEPS[lab - 1] == want
        vis = steps[steps > 0]
        if o.motion == "static":
            assert (vis == 1).all()
        elif o.motion == "left to right":
            assert set(vis.tolist()) <= {1, 2} and (vis == 2).any()
        elif o.motion == "up":
            assert set(vis.tolist()) <= {1, 5} and (vis == 5).any()
        lab = tlabels.token_labels(truth, frames)
        on = lab["obj"] == 1
        per_token = np.repeat(steps, len(on) // len(steps))           # raster order: time is the outer axis
        assert (lab["step"][on] == per_token[on]).all() and (lab["step"][~on] == 0).all()


def test_few_steps_reduce_loss_on_a_fixed_batch(processor):
    torch.manual_seed(0)
    model = tmodel.build_model(processor.tokenizer, tmodel.TINY_SIZE, seed=0)
    batch = tdata.make_batch(processor, tdata.SMOKE_RECIPE, seed=0, step=0, single_object=True)
    inputs = tdata.model_inputs(batch, labels=True)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(8):
        loss = model(**inputs).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.8 * losses[0]


def test_draft_forward_with_pruned_video(processor):
    draft = tmodel.build_model(processor.tokenizer, tmodel.ModelSize(**{**tmodel.TINY_SIZE.__dict__, "layers": 1}), seed=1)
    batch = tdata.make_batch(processor, tdata.SMOKE_RECIPE, seed=0, step=2, single_object=False)
    full, idx_full = tlosses.draft_forward(draft, batch, None, np.random.default_rng(0))
    pruned, idx = tlosses.draft_forward(draft, batch, 0.25, np.random.default_rng(0))
    n_vid = int((batch["input_ids"][0] == draft.config.video_token_id).sum())
    assert full.shape[1] == batch["input_ids"].shape[1]
    assert pruned.shape[1] == full.shape[1] - n_vid + max(1, int(n_vid * 0.25))
    assert torch.isfinite(pruned).all()


def test_lr_schedule_constant_then_decay():
    assert tloop.lr_at(0.5, 1.0) == 1.0
    assert tloop.lr_at(0.99, 1.0) < 0.1
    assert tloop.lr_at(0.001, 1.0) < 1.0


def test_vision_probe_loss_and_video_gap(processor):
    torch.manual_seed(0)
    model = tmodel.build_model(processor.tokenizer, tmodel.TINY_SIZE, seed=0)
    batch = tdata.make_batch(processor, tdata.SMOKE_RECIPE, seed=0, step=0, single_object=False)
    box = tlosses.capture_video_features(model)
    inputs = tdata.model_inputs(batch, labels=True)
    model(**inputs)
    feats = box.pop("feats")
    assert feats.shape[0] == len(batch["aux"]["what"])           # one label per video token, same order
    probe = tlosses.VisionProbe(model.config.text_config.hidden_size, max_rms=1e-3)
    loss, acc = probe.loss(feats, batch["aux"])
    assert loss.requires_grad and float(loss) > 0 and set(acc) == {"what", "shape", "step", "glyph", "rms"}
    right, wrong = tlosses.video_gap(model, batch)
    assert right > 0 and wrong > 0 and model.training


def test_smoke_run_writes_both_models(tmp_path, capsys):
    tb.main(["--smoke", "--work", str(tmp_path), "--diag-every", "2"])
    out = capsys.readouterr().out
    assert "right video" in out and "gap" in out
    for phase in ("target", "draft"):
        folder = tmp_path / "smoke" / "model" / phase
        assert (folder / "model.safetensors").exists() and (folder / "loss_curve.png").exists()


def test_smoke_run_with_polish_phase_continues_the_target(tmp_path, capsys):
    import json
    tb.main(["--smoke", "--work", str(tmp_path), "--polish-minutes", "1", "--polish-objects", "0,0,1"])
    out = capsys.readouterr().out
    assert "[polish]" in out and "[draft] done" in out
    info = json.loads((tmp_path / "smoke" / "model" / "target" / "training_info.json").read_text())
    assert info["polish"]["steps"] == 5 and info["polish"]["recipe"]["object_weights"] == [0.0, 0.0, 1.0]
    assert info["polish"]["recipe"]["curriculum"] == 0.0
    for bad in ("0.5,0.6", "a,b,c", "0.5,0.6,-0.1"):
        with pytest.raises(SystemExit):
            tb.parse_args(["--polish-objects", bad])
        assert "three probabilities" in capsys.readouterr().err


def test_polish_recipe_trains_the_polish_phase_and_the_draft_on_another_mix(tmp_path, capsys):
    import json
    tb.main(["--smoke", "--work", str(tmp_path), "--polish-steps", "2", "--polish-recipe", "sparse",
             "--draft-steps", "2"])
    model = tmp_path / "smoke" / "model"
    target = json.loads((model / "target" / "training_info.json").read_text())
    draft = json.loads((model / "draft" / "training_info.json").read_text())
    assert target["recipe"]["p_sparse_long"] == 0.0 and target["recipe"]["p_subtitles"] == 0.0
    assert target["polish"]["recipe"]["p_sparse_long"] == 1.0 and target["polish"]["recipe"]["p_subtitles"] == 0.5
    assert draft["recipe"]["p_sparse_long"] == 1.0 and draft["steps"] == 2


def test_init_target_polishes_a_saved_target(tmp_path, capsys):
    import json

    from safetensors.torch import load_file
    tb.main(["--smoke", "--work", str(tmp_path / "a"), "--phase", "target"])
    first = tmp_path / "a" / "smoke" / "model" / "target"
    capsys.readouterr()
    tb.main(["--smoke", "--work", str(tmp_path / "b"), "--init-target", str(first), "--polish-steps", "2",
             "--polish-recipe", "sparse", "--draft-steps", "2"])
    out = capsys.readouterr().out
    assert "[polish] done: 2 steps" in out and "[draft] done" in out and "[target] " not in out.split("[polish]")[0]
    second = tmp_path / "b" / "smoke" / "model" / "target"
    info = json.loads((second / "training_info.json").read_text())
    assert info["init_target"]["path"] == str(first) and info["init_target"]["training_info"]["steps"] == 5
    assert info["polish"]["steps"] == 2
    a, b = load_file(first / "model.safetensors"), load_file(second / "model.safetensors")
    assert a.keys() == b.keys() and any(not torch.equal(a[k], b[k]) for k in a)     # polished, same architecture
    with pytest.raises(SystemExit):
        tb.parse_args(["--init-target", str(tmp_path), "--polish-steps", "1"])
    assert "no model there" in capsys.readouterr().err


def test_object_weights_set_the_number_of_objects(processor, monkeypatch):
    seen = []
    real = synth.generate

    def spy(seed, spec):
        frames, truth = real(seed, spec)
        seen.append(len(truth.objects))
        return frames, truth

    monkeypatch.setattr(synth, "generate", spy)
    recipe = dataclasses.replace(tdata.SMOKE_RECIPE, object_weights=(0.0, 0.0, 1.0))
    for step in range(3):
        tdata.make_batch(processor, recipe, seed=0, step=step, single_object=False)
    assert seen and set(seen) == {3}
    seen.clear()
    tdata.make_batch(processor, recipe, seed=0, step=0, single_object=True)   # the curriculum wins
    assert set(seen) == {1}


def test_focus_rows_span_the_prompt_after_the_video(processor):
    batch = tdata.make_batch(processor, tdata.SMOKE_RECIPE, seed=0, step=3, single_object=False)
    tok = processor.tokenizer
    vid = tok.convert_tokens_to_ids("<|video_pad|>")
    header = tok("<|im_start|>assistant\n")["input_ids"]
    idx, valid, keys_ok = tlosses.focus_rows(batch["input_ids"], batch["attention_mask"], vid, header)
    for b in range(idx.shape[0]):
        rows = idx[b][valid[b]].tolist()
        ids = batch["input_ids"][b].tolist()
        last_vid = max(i for i, t in enumerate(ids) if t == vid)
        assert rows[0] == last_vid + 1 and rows == list(range(rows[0], rows[-1] + 1))
        assert ids[rows[-1] - len(header) + 1:rows[-1] + 1] == header   # ends with the assistant header
        text = tok.decode(ids[rows[0]:rows[-1] + 1])
        assert "<|video_pad|>" not in text and text.count("<|im_start|>assistant") == 1
    assert torch.equal(keys_ok, batch["attention_mask"].bool())


def test_focus_attention_equals_eager_weights_and_loss_moves_them(processor):
    torch.manual_seed(0)
    tlosses.register_focus()
    model = tmodel.build_model(processor.tokenizer, tmodel.TINY_SIZE, seed=0)
    batch = tdata.make_batch(processor, tdata.SMOKE_RECIPE, seed=0, step=4, single_object=False)
    tok = processor.tokenizer
    vid = model.config.video_token_id
    header = tok("<|im_start|>assistant\n")["input_ids"]
    rows = tlosses.focus_rows(batch["input_ids"], batch["attention_mask"], vid, header)
    inputs = tdata.model_inputs(batch)
    # reference: eager attention weights, averaged over heads and the same rows
    model.set_attn_implementation({"text_config": "eager"})
    with torch.no_grad():
        ref = model(**inputs, output_attentions=True).attentions
    model.set_attn_implementation({"text_config": tlosses.FOCUS_IMPL})
    tlosses.FOCUS["rows"], tlosses.FOCUS["out"] = rows, []
    try:
        logits = model(**inputs).logits
    finally:
        tlosses.FOCUS["rows"] = None
    got = tlosses.FOCUS["out"]
    assert len(got) == len(ref) == model.config.text_config.num_hidden_layers
    idx, valid, _ = rows
    for a, w in zip(got, ref):
        for b in range(idx.shape[0]):
            r = idx[b][valid[b]]
            torch.testing.assert_close(a[b], w[b].mean(0)[r].mean(0), atol=1e-5, rtol=1e-4)
    loss, share = tlosses.focus_loss(got, batch["input_ids"], vid, batch["aux"]["cover"])
    assert 0.0 < share < 1.0 and float(loss) > 0
    # plain loss unchanged by the capture, and weight 1 = the model's own loss
    torch.testing.assert_close(tlosses.weighted_lm_loss(logits, batch["labels"], [], 1.0),
                               model(**inputs, labels=batch["labels"]).loss, atol=1e-5, rtol=1e-5)
    # a few steps on the focus loss alone raise the object share
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    shares = []
    for _ in range(10):
        tlosses.FOCUS["rows"], tlosses.FOCUS["out"] = rows, []
        model(**inputs)
        tlosses.FOCUS["rows"] = None
        loss, share = tlosses.focus_loss(tlosses.FOCUS["out"], batch["input_ids"], vid, batch["aux"]["cover"])
        shares.append(share)
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert shares[-1] > shares[0] + 0.05


def test_attribute_words_are_single_tokens_and_weighted(processor):
    ids = tdata.attribute_token_ids(processor.tokenizer)
    assert len(ids) >= 6
    logits = torch.randn(1, 5, len(processor.tokenizer) + 8)
    labels = torch.tensor([[tdata.IGNORE, ids[0], 7, ids[1], tdata.IGNORE]])
    plain = tlosses.weighted_lm_loss(logits, labels, ids, 1.0)
    heavy = tlosses.weighted_lm_loss(logits, labels, ids, 1000.0)
    ce = torch.nn.functional.cross_entropy(logits[0, :-1], labels[0, 1:], reduction="none", ignore_index=tdata.IGNORE)
    torch.testing.assert_close(plain, ce[[0, 1, 2]].mean())
    torch.testing.assert_close(heavy, (1000 * ce[0] + ce[1] + 1000 * ce[2]) / 2001, rtol=1e-4, atol=1e-5)


@pytest.fixture(scope="module")
def shipped_processor():
    from transformers import AutoProcessor
    return AutoProcessor.from_pretrained(str(ROOT / "assets" / "model" / "target"))


def _runs(marked: list[int]) -> list[list[int]]:
    """Maximal runs of consecutive indices."""
    out: list[list[int]] = []
    for j in marked:
        if out and out[-1][-1] == j - 1:
            out[-1].append(j)
        else:
            out.append([j])
    return out


@pytest.mark.parametrize("which", ["trained", "shipped"])
def test_fact_mask_marks_the_fact_words_in_answers_and_weights_them(processor, shipped_processor, which):
    proc = processor if which == "trained" else shipped_processor   # whole-word tokens / a word in several tokens
    recipe = dataclasses.replace(tdata.SMOKE_RECIPE, frames=(48,), p_sparse_long=1.0, p_subtitles=1.0, p_describe=1.0)
    tok = proc.tokenizer
    found = 0
    for step in range(6):
        batch = tdata.make_batch(proc, recipe, seed=3, step=step, single_object=False)
        for b, row in enumerate(batch["fact"]):
            marked = row.nonzero().flatten().tolist()
            assert all(j >= int(batch["text_start"][b]) for j in marked)     # never the transcript's own words
            values = set(tdata.synth.NAMES) | set(tdata.synth.COLOURS) | {str(n) for n in range(10, 100)}
            for run in _runs(marked):   # each run writes "<kind> <value>" or the bare value, then "."
                words = tok.decode(batch["input_ids"][b, run[0]:run[-1] + 1]).strip().split(" ")
                assert words[-1] in values and (len(words) == 1 or (len(words) == 2 and words[0] in tdata.synth.FACT_KINDS))
                assert tok.decode(batch["input_ids"][b, run[-1] + 1:run[-1] + 2]) == "."
                found += len(words) == 2
    assert found >= 2
    logits = torch.randn(1, 5, len(tok) + 8)
    labels = torch.tensor([[tdata.IGNORE, 4, 7, 4, tdata.IGNORE]])
    fact = torch.tensor([[False, False, False, True, False]])
    ce = torch.nn.functional.cross_entropy(logits[0, :-1], labels[0, 1:], reduction="none", ignore_index=tdata.IGNORE)
    torch.testing.assert_close(tlosses.weighted_lm_loss(logits, labels, [], 1.0, fact, 50.0),
                               (ce[0] + ce[1] + 50 * ce[2]) / 52, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(tlosses.weighted_lm_loss(logits, labels, [], 1.0, fact, 1.0), ce[:3].mean())


def _route_shares(tok, batch: dict, key: str, idx: torch.Tensor, loss_of, steps: int = 6) -> list[float]:
    """Train a tiny model ``steps`` AdamW steps on one attention-routing loss; the share it reports per step.

    ``key`` names the FOCUS rows (``attr_rows`` / ``fact_rows``) set to ``idx``; ``loss_of`` maps the recorded
    per-layer attention to (loss, share)."""
    out_key = {"attr_rows": "out_attr", "fact_rows": "out_fact"}[key]
    torch.manual_seed(0)
    tlosses.register_focus()
    model = tmodel.build_model(tok, tmodel.TINY_SIZE, seed=0)
    model.set_attn_implementation({"text_config": tlosses.FOCUS_IMPL})
    vid = tok.convert_tokens_to_ids("<|video_pad|>")
    header = tok("<|im_start|>assistant\n")["input_ids"]
    inputs = tdata.model_inputs(batch)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    shares = []
    for _ in range(steps):
        tlosses.FOCUS["rows"] = tlosses.focus_rows(batch["input_ids"], batch["attention_mask"], vid, header)
        tlosses.FOCUS[key], tlosses.FOCUS["out"], tlosses.FOCUS[out_key] = idx, [], []
        model(**inputs)
        tlosses.FOCUS["rows"] = tlosses.FOCUS[key] = None
        assert len(tlosses.FOCUS[out_key]) == model.config.text_config.num_hidden_layers
        loss, share = loss_of(tlosses.FOCUS[out_key])
        shares.append(share)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return shares


def test_attribute_rows_name_the_right_object_and_routing_loss_moves_attention(processor):
    from specvlm.bench import synth
    tok = processor.tokenizer
    recipe = dataclasses.replace(tdata.SMOKE_RECIPE, p_describe=1.0)
    batch = tdata.make_batch(processor, recipe, seed=0, step=5, single_object=False)
    idx, valid, obj = batch["aux"]["attr"]
    assert valid.any()
    colours = {i for c in synth.COLOURS for i in tdata.single_ids(tok, c)}   # a caption starts with a bare colour
    shapes = {tok(" " + s)["input_ids"][0] for s in synth.SHAPES}
    for b in range(idx.shape[0]):
        ids = batch["input_ids"][b]
        rows = idx[b][valid[b]].tolist()
        for j, o in zip(rows, obj[b][valid[b]].tolist()):
            if o == tlabels.TEXT_OBJ - 1:   # names the on-screen text: the next token is its value
                assert tok.decode([int(ids[j + 1])]).strip() in tlabels.TEXT_VALUES
            else:
                assert int(ids[j]) in colours | shapes | {tok(" moves")["input_ids"][0]}
        # every object clause of the caption is covered by its colour position
        n_clauses = sum(int(ids[j]) in colours and int(ids[j + 1]) in shapes for j in range(len(ids) - 1))
        assert sum(int(ids[j]) in colours for j in rows) == n_clauses
    assert (obj[valid] == tlabels.TEXT_OBJ - 1).any()      # some clip of this batch shows text
    # object labels: the named object's tokens exist in the video for most rows
    vid = tok.convert_tokens_to_ids("<|video_pad|>")
    labels = batch["aux"]["obj"].view(idx.shape[0], -1)
    hits = [bool((labels[b] == int(obj[b, r]) + 1).any()) for b in range(idx.shape[0])
            for r in range(idx.shape[1]) if valid[b, r]]
    assert np.mean(hits) > 0.7
    # the routing loss raises the share of the named object's tokens in a few steps
    shares = _route_shares(tok, batch, "attr_rows", idx, lambda out: tlosses.routing_loss(
        out, batch["input_ids"], vid, batch["aux"]["obj"], valid, obj))
    assert 0.0 < shares[0] < 1.0 and shares[-1] > shares[0] + 0.05


@pytest.mark.parametrize("which", ["trained", "shipped"])
def test_fact_rows_point_at_the_cue_and_fact_routing_moves_attention(processor, shipped_processor, which):
    proc = processor if which == "trained" else shipped_processor
    recipe = dataclasses.replace(tdata.SMOKE_RECIPE, frames=(48,), p_sparse_long=1.0, p_subtitles=1.0, p_describe=1.0)
    tok = proc.tokenizer
    batch = next(b for b in (tdata.make_batch(proc, recipe, seed=3, step=s, single_object=False)
                             for s in range(12)) if b["aux"]["fact"][1].any())
    idx, valid, target = batch["aux"]["fact"]
    values = set(tdata.synth.NAMES) | set(tdata.synth.COLOURS) | {str(n) for n in range(10, 100)}
    rows = 0
    for b in range(idx.shape[0]):
        start = int(batch["text_start"][b])
        for r in valid[b].nonzero().flatten().tolist():
            j, keys = int(idx[b, r]), target[b, r].nonzero().flatten().tolist()
            assert keys and max(keys) < start <= j + 1 and bool(batch["fact"][b, j + 1])   # reads the transcript, writes the fact
            wrote = tok.decode(batch["input_ids"][b, j + 1:j + 2]).strip()
            read = tok.decode(batch["input_ids"][b, keys[0]:keys[-1] + 1]).strip()
            assert wrote and wrote in read and (read in tdata.synth.FACT_KINDS or read in values
                                                or any(read in w for w in tdata.synth.FACT_KINDS) or any(read in v for v in values))
            rows += 1
    assert rows >= 2
    shares = _route_shares(tok, batch, "fact_rows", idx, lambda out: tlosses.fact_routing_loss(out, valid, target))
    assert 0.0 < shares[0] < 1.0 and shares[-1] > 1.5 * shares[0]      # 0.0044 -> 0.0087 (shipped tokenizer)


def test_smoke_run_with_fact_routing(tmp_path, capsys):
    tb.main(["--smoke", "--work", str(tmp_path), "--recipe", "sparse", "--fact-route-weight", "0.3",
             "--phase", "target", "--diag-every", "5"])
    assert "[target] done" in capsys.readouterr().out


def test_eval_scores_motion_per_object_and_tabulates_confusion():
    from training import eval_bundled_report as evr, eval_clips
    from specvlm.bench import synth
    truth = None
    for seed in range(50):
        _, t = synth.generate(seed, synth.SceneSpec(num_objects=2, text_prob=0.0))
        if len({o.motion for o in t.objects}) == 2:
            truth = t
            break
    a, b = sorted(truth.objects, key=lambda o: (list(synth.COLOURS).index(o.colour), synth.SHAPES.index(o.shape)))
    wrong = next(m for m in synth.MOTIONS if m not in (a.motion, b.motion))
    # the second object named with a wrong motion, the first exactly right
    pred = (f"two objects. {a.colour} {a.shape} {captions.motion_phrase(a.motion)}. "
            f"{b.colour} {b.shape} {captions.motion_phrase(wrong)}. no text. plain background.")
    sc = eval_clips.score_caption(pred, truth)
    assert sc["motion"] == [1, 2]
    assert sorted(map(tuple, sc["motion_pairs"])) == sorted([(a.motion, a.motion), (b.motion, wrong)])
    missing = eval_clips.score_caption(f"one object. {a.colour} {a.shape} {captions.motion_phrase(a.motion)}.", truth)
    assert [b.motion, None] in missing["motion_pairs"]
    conf = evr.motion_confusion([{"correct": sc}, {"correct": missing}, {"correct": {}}])
    assert conf[a.motion][a.motion] == 2 and conf[b.motion] == {wrong: 1, "missing": 1}


def test_eval_tree_options():
    from training import eval_bundled as ev, eval_bundled_report as evr
    from specvlm.config import TreeConfig
    args = ev.parse_args(["--tree", "chain", "--depth", "16", "--sets", "long"])
    assert args.tree_config == TreeConfig(shape="chain", depth=16) and evr._tree_text(args) == "chain, depth 16"
    assert ev.parse_args([]).tree_config == TreeConfig()
    with pytest.raises(SystemExit):
        ev.parse_args(["--depth", "0"])


def test_tau_differences_paired_bootstrap():
    from training import eval_bundled_report as ev
    rng = np.random.default_rng(0)
    recs = []
    for _ in range(60):
        steps = int(rng.integers(5, 15))
        base = int(rng.integers(10, 40))
        recs.append({"tau": {"std/specvlm": [base + steps, steps], "std/random": [base, steps],   # +1 per step
                             "std/uniform": [base, steps]}})
    for r in recs[:30]:
        r["tau"]["std/uniform"] = list(r["tau"]["std/specvlm"])                                  # half ties
    out = ev.tau_differences(recs, ["std"], ["specvlm", "random", "uniform", "frame"])
    assert set(out) == {"std/random", "std/uniform"}                       # frame absent, specvlm not vs itself
    r = out["std/random"]
    assert r["diff"] == pytest.approx(1.0) and r["lo"] == pytest.approx(1.0) and r["hi"] == pytest.approx(1.0)
    assert (r["wins"], r["ties"], r["losses"]) == (60, 0, 0)
    u = out["std/uniform"]
    assert 0.0 < u["lo"] < u["diff"] < u["hi"] < 1.0 and (u["wins"], u["ties"]) == (30, 30)
    assert "significant" in ev._diff_text(u) and "not" not in ev._diff_text(u)
    same = ev.tau_differences([{"tau": {"std/specvlm": [3, 2], "std/random": [3, 2]}}] * 5, ["std"], ["random"])
    assert same["std/random"]["diff"] == 0.0 and "not significant" in ev._diff_text(same["std/random"])


def test_eval_rerender_from_the_shipped_records(tmp_path):
    import json

    from training import eval_bundled as ev
    data = json.loads((ROOT / "assets" / "model" / "eval.json").read_text())
    short = [r for r in data["records"] if r["set"] == "short"][:6]
    long_ = [r for r in data["records"] if r["set"] == "long"][:6]
    data["records"] = short + long_
    src = tmp_path / "small.json"
    src.write_text(json.dumps(data))
    md = ev.rerender(str(src))
    again = json.loads(src.read_text())
    assert again["summary"]["short"]["num_videos"] == 6 and again["summary"]["long"]["num_videos"] == 6
    assert "std/random" in again["summary"]["long"]["tau_vs_specvlm"]
    assert "SpecVLM's τ minus each baseline's" in md and "| long | Self-SD | random |" in md
    assert (tmp_path / "small.md").read_text() == md and "draft tree: dynamic, depth 5" in md
