"""Dataset loaders on small fake copies of each layout (video files are empty placeholders)."""
from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from specvlm.bench import datasets as ds
from specvlm.models import presets


def _touch(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"")
    return path


def _json(path: Path, data) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


@pytest.fixture()
def vdc(tmp_path):
    root = tmp_path / "VideoDetailCaption"
    names = [f"v_{i:03d}" for i in range(10)]
    table = pa.table({"video_name": names, "question": [f"Describe video {i}." for i in range(10)],
                      "answer": [f"caption {i}" for i in range(10)]})
    (root / "test").mkdir(parents=True)
    pq.write_table(table, root / "test" / "test-00000-of-00001.parquet")
    for i, n in enumerate(names):
        _touch(root / "evaluation" / "Test_Videos" / (n + (".mkv" if i == 3 else ".mp4")))
    return root


def test_video_detail_caption(vdc):
    all_ = ds.load_video_detail_caption(vdc)
    assert len(all_) == 10 and all_[0].id == "v_000" and all_[0].answer == "caption 0"
    assert all_[0].prompt == "Describe video 0." and all_[0].video.name == "v_000.mp4"
    assert all_[3].video.suffix == ".mkv"
    sub = ds.load_video_detail_caption(vdc, n=4, seed=1)
    assert len(sub) == 4 and sub == ds.load_video_detail_caption(vdc, n=4, seed=1)
    assert [s.id for s in sub] == sorted(s.id for s in sub)  # original order kept
    assert {s.id for s in sub} != {s.id for s in ds.load_video_detail_caption(vdc, n=4, seed=2)}
    assert ds.load_dataset("VideoDetailCaption", vdc, 2)[0].dataset == "videodetailcaption"


def test_video_detail_caption_errors(vdc, tmp_path):
    (vdc / "evaluation" / "Test_Videos" / "v_005.mp4").unlink()
    with pytest.raises(ds.DatasetError, match="v_005.mp4"):
        ds.load_video_detail_caption(vdc)
    with pytest.raises(ds.DatasetError, match="does not exist"):
        ds.load_video_detail_caption(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ds.DatasetError, match="parquet"):
        ds.load_video_detail_caption(tmp_path / "empty")


def test_mvbench(tmp_path):
    root = tmp_path / "MVBench"
    seq = [{"video": f"{i}.mp4", "question": f"What happened {i}?", "candidates": ["sat", "ran", "ate"],
            "answer": "ran", "start": 1.5, "end": 4.0} for i in range(3)]
    shuffle = [{"video": "s.mp4", "question": "Where is the ball?", "candidates": ["left", "right"],
                "answer": "left"}]
    _json(root / "json" / "action_sequence.json", seq)
    _json(root / "json" / "object_shuffle.json", shuffle)
    for i in range(3):
        _touch(root / "video" / "star" / "Charades_v1_480" / f"{i}.mp4")
    _touch(root / "video" / "perception" / "videos" / "s.mp4")
    got = ds.load_mvbench(root)
    assert len(got) == 4 and got[0].id == "action_sequence/0" and got[0].task == "Action Sequence"
    assert got[0].bound == (1.5, 4.0) and got[-1].bound is None
    assert got[0].prompt.startswith("Question: What happened 0?\nOptions:\n(A) sat\n(B) ran\n(C) ate")
    assert got[0].prompt.endswith(ds.MC_SUFFIX) and got[0].answer == "(B) ran"
    assert len(ds.load_mvbench(root, tasks=["Object Shuffle"])) == 1
    assert len(ds.load_dataset("mvbench", root, n=2, seed=3)) == 2
    with pytest.raises(ds.DatasetError, match="unknown task"):
        ds.load_mvbench(root, tasks=["Nope"])
    with pytest.raises(ds.DatasetError, match="missing"):
        ds.load_mvbench(root, tasks=["Action Antonym"])


def test_mlvu(tmp_path):
    base = tmp_path / "hf" / "MLVU"
    _json(base / "json" / "1_plotQA.json", [
        {"video": "movie_1.mp4", "duration": 500, "question": "Who drives?", "candidates": ["A man", "A dog"],
         "answer": "A dog", "question_type": "plotQA"}])
    _json(base / "json" / "9_summary.json", [
        {"video": "217.mp4", "duration": 480.0, "question": "Summarize.", "answer": "Waves.",
         "question_type": "summary"}])
    _touch(base / "video" / "1_plotQA" / "movie_1.mp4")
    _touch(base / "video" / "summary" / "217.mp4")  # the other folder naming
    got = ds.load_mlvu(tmp_path / "hf")
    assert [s.id for s in got] == ["1_plotQA/0", "9_summary/0"]
    assert got[0].answer == "(B) A dog" and "Options:" in got[0].prompt and got[0].task == "plotQA"
    assert got[1].prompt == "Summarize." and got[1].answer == "Waves." and got[1].video.parent.name == "summary"
    assert [s.id for s in ds.load_mlvu(tmp_path / "hf", tasks=["summary"])] == ["9_summary/0"]
    with pytest.raises(ds.DatasetError, match="json/"):
        ds.load_mlvu(tmp_path)


def test_longvideobench(tmp_path):
    root = tmp_path / "LongVideoBench"
    entries = [{"id": f"q{i}", "video_path": f"vid{i}.mp4", "question": "What is shown first?",
                "candidates": ["a cat", "a car", "a cup"], "correct_choice": 2, "duration": 600.0,
                "subtitle_path": f"vid{i}_en.json", "question_category": "T3E"} for i in range(5)]
    _json(root / "lvb_val.json", entries)
    for i in range(5):
        _touch(root / "videos" / f"vid{i}.mp4")
    got = ds.load_longvideobench(root, n=3, seed=0)
    assert len(got) == 3 and got[0].answer == "(C) a cup" and got[0].task == "T3E"
    assert got[0].subtitle == root / "subtitles" / f"vid{got[0].id[1:]}_en.json"
    assert ds.load_dataset("lvb", root)[4].id == "q4"
    with pytest.raises(ds.DatasetError, match="lvb_test_wo_gt.json"):
        ds.load_longvideobench(root, split="test")
    with pytest.raises(ds.DatasetError, match="split"):
        ds.load_longvideobench(root, split="train")


def test_subset_and_registry():
    assert ds.seeded_subset(list(range(5)), None) == [0, 1, 2, 3, 4]
    assert ds.seeded_subset(list(range(5)), 10) == [0, 1, 2, 3, 4]
    assert ds.seeded_subset(list(range(100)), 5, seed=7) == ds.seeded_subset(list(range(100)), 5, seed=7)
    with pytest.raises(ds.DatasetError):
        ds.seeded_subset(list(range(5)), 0)
    with pytest.raises(ds.DatasetError, match="unknown"):
        ds.load_dataset("kinetics", ".")


def test_paper_settings():
    s = presets.PAPER_SETTINGS["paper-qwen"]
    assert (s.drop_rate, s.top_p, s.max_new_tokens, s.num_frames) == (0.9, 0.4, 256, 128)
    assert s.draft == presets.QWEN7 and s.target == presets.QWEN32 and s.max_pixels == 448 * 448
    assert presets.PAPER_SETTINGS["paper-llava"].num_frames == 64
    assert presets.PAPER_SETTINGS["paper-llava-self"].draft is None
