"""Tests for the procedural video generator and its caption grammar (specvlm.bench.synth)."""
import av
import numpy as np
import pytest

from specvlm.bench import captions
from specvlm.bench import clipfiles
from specvlm.bench import synth


def _spec(**kw):
    base = dict(num_frames=16, height=112, width=112, fps=8.0)
    base.update(kw)
    return synth.SceneSpec(**base)


def test_deterministic_for_a_seed():
    f1, t1 = synth.generate(123, _spec())
    f2, t2 = synth.generate(123, _spec())
    f3, t3 = synth.generate(124, _spec())
    assert f1.dtype == np.uint8 and f1.shape == (16, 112, 112, 3)
    assert np.array_equal(f1, f2)
    assert t1.to_dict() == t2.to_dict()
    assert not np.array_equal(f1, f3)


@pytest.mark.parametrize("seed", range(12))
def test_boxes_contain_their_colour(seed):
    frames, truth = synth.generate(seed, _spec(text_prob=0.0, enter_leave_prob=0.3))
    colours = [o.colour for o in truth.objects]
    for o in truth.objects:
        rgb = np.array(synth.COLOURS[o.colour], np.uint8)
        boxes = np.array(o.boxes)
        assert (boxes[: o.start_frame] == -1).all() and (boxes[o.end_frame:] == -1).all()
        seen = 0
        for t in range(o.start_frame, o.end_frame):
            x0, y0, x1, y1 = boxes[t]
            assert 0 <= x0 < x1 <= truth.width and 0 <= y0 < y1 <= truth.height
            hit = (frames[t] == rgb).all(-1)
            seen += bool(hit[y0:y1, x0:x1].any())
            if colours.count(o.colour) == 1:  # every pixel of a unique colour lies in its box
                assert hit.sum() == hit[y0:y1, x0:x1].sum()
        assert seen >= 0.8 * (o.end_frame - o.start_frame)


def test_motion_matches_boxes():
    for seed in range(30):
        _, truth = synth.generate(seed, _spec(text_prob=0.0, enter_leave_prob=0.0))
        for o in truth.objects:
            b = np.array(o.boxes, float)
            dx, dy = b[-1, 0] - b[0, 0], b[-1, 1] - b[0, 1]
            if o.motion == "left to right":
                assert dx > 10 and dy == 0
            elif o.motion == "right to left":
                assert dx < -10 and dy == 0
            elif o.motion == "down":
                assert dy > 10 and dx == 0
            elif o.motion == "up":
                assert dy < -10 and dx == 0
            elif o.motion == "static":
                assert np.ptp(b, axis=0).max() == 0


def test_text_is_drawn_in_its_box_and_span():
    frames, truth = synth.generate(5, _spec(text_prob=1.0))
    tx = truth.text
    assert tx is not None and 0 <= tx.start_frame < tx.end_frame <= truth.num_frames
    x0, y0, x1, y1 = tx.box
    white = (frames == 255).all(-1)
    for t in range(truth.num_frames):
        inside = white[t, y0:y1, x0:x1].sum()
        assert (inside > 20) == (tx.start_frame <= t < tx.end_frame)


def test_caption_mentions_every_attribute_and_parses_back():
    for seed in range(40):
        _, truth = synth.generate(seed, _spec())
        cap = captions.describe(truth)
        for o in truth.objects:
            assert o.colour in cap and o.shape in cap
        parsed = captions.parse_caption(cap)
        assert parsed["count"] == len(truth.objects)
        canonical = sorted(truth.objects, key=lambda o: (list(synth.COLOURS).index(o.colour),
                                                         synth.SHAPES.index(o.shape)))
        assert [(p["colour"], p["shape"], p["motion"]) for p in parsed["objects"]] == [
            (o.colour, o.shape, o.motion) for o in canonical]     # canonical order, not drawing order
        assert parsed["text"] == (truth.text.text if truth.text else "")


def test_caption_direction_is_one_word_and_old_phrases_still_parse():
    assert captions.motion_phrase("left to right") == "moves right"
    assert captions.motion_phrase("right to left") == "moves left"
    old = captions.parse_caption("two objects. red circle moves left to right. blue square moves right to left.")
    new = captions.parse_caption("two objects. red circle moves right. blue square moves left, leaves early.")
    for got in (old, new):
        assert [o["motion"] for o in got["objects"]] == ["left to right", "right to left"]
    garbled = captions.parse_caption("one object. red circle moves left to left.")   # a garbled motion phrase
    assert garbled["objects"][0]["motion"] is None


def test_count_follows_the_object_clauses_and_both_orders_parse():
    for seed in range(20):
        _, truth = synth.generate(seed, _spec())
        sents = [x.strip() for x in captions.describe(truth).split(".") if x.strip()]
        n = len(truth.objects)
        assert sents[n].endswith("object" if n == 1 else "objects")          # right after the n clauses
        assert all(sents[k].split()[0] in synth.COLOURS for k in range(n))
    first = captions.parse_caption("two objects. red circle moves right. blue square stays still. no text.")
    last = captions.parse_caption("red circle moves right. blue square stays still. two objects. no text.")
    assert first == last and first["count"] == 2 and len(first["objects"]) == 2


def test_questions_are_answerable():
    _, truth = synth.generate(3, _spec(num_objects=2, text_prob=1.0))
    qa = dict(captions.questions(truth, np.random.default_rng(0)))
    assert qa["How many objects are there?"] == "two."
    assert qa["What text appears?"] == truth.text.text + "."


def test_truth_json_round_trip(tmp_path):
    _, truth = synth.generate(9, _spec(text_prob=1.0))
    path = clipfiles.write_truth(tmp_path / "clip.json", truth)
    import json
    back = synth.SceneTruth.from_dict(json.loads(path.read_text()))
    assert back.to_dict() == truth.to_dict()


def test_mp4_round_trip(tmp_path):
    frames, _ = synth.generate(1, _spec(num_frames=12, height=112, width=140))
    path = clipfiles.write_mp4(tmp_path / "clip.mp4", frames, fps=8)
    with av.open(str(path)) as c:
        s = c.streams.video[0]
        assert s.codec_context.name == "h264"
        got = np.stack([f.to_ndarray(format="rgb24") for f in c.decode(video=0)])
    assert got.shape == frames.shape
    assert np.abs(got.astype(int) - frames.astype(int)).mean() < 6


def test_rejects_bad_sizes(tmp_path):
    with pytest.raises(synth.SynthError):
        synth.generate(0, _spec(height=40))
    frames, _ = synth.generate(0, _spec(height=112, width=112))
    with pytest.raises(synth.SynthError):
        clipfiles.write_mp4(tmp_path / "x.mp4", frames[:, :111], fps=8)
