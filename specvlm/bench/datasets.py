"""Loaders for local copies of the paper's video benchmarks.

Each loader reads a local folder (nothing is downloaded), returns typed
:class:`Sample` s (video path, prompt, reference answer, id), and applies the
paper's sampling: a seeded subset of ``n`` samples (all when ``n`` is None).
Only the sampled videos are checked for existence. Missing folders, annotation
files or videos raise :class:`DatasetError` naming the expected path.

Layouts (public releases, as used by lmms-eval and the benchmarks' own code):

* VideoDetailCaption (``lmms-lab/VideoDetailCaption``): one or more ``*.parquet``
  files anywhere under the root with columns ``video_name``, ``question``,
  ``answer``; videos in a ``Test_Videos/`` folder under the root (at any depth, e.g.
  ``evaluation/Test_Videos/``) named ``<video_name>.mp4`` (``.MP4`` / ``.mkv`` also
  accepted, as lmms-eval does).
* MVBench (``OpenGVLab/MVBench``): ``json/<task>.json`` lists of ``{video, question,
  candidates, answer[, start, end]}``; videos under ``video/<source prefix>/`` (the
  per-task prefix table of the official notebook, e.g. ``star/Charades_v1_480/``).
  The frame-folder task (Episodic Reasoning, TVQA frames) is skipped: it has no video files.
* MLVU (``MLVU/MVLU``): ``[MLVU/]json/<k>_<task>.json`` lists of ``{video, duration,
  question, candidates, answer, question_type}`` (open-ended tasks have no candidates);
  videos under ``[MLVU/]video/<k>_<task>/`` or ``video/<task>/``.
* LongVideoBench (``longvideobench/LongVideoBench``): ``lvb_val.json`` (or
  ``lvb_test_wo_gt.json``) lists of ``{id, video_path, question, candidates,
  correct_choice, duration, subtitle_path, ...}``; videos in ``videos/``, subtitles in
  ``subtitles/``.

Multiple-choice prompts follow the benchmarks' templates ("Question: ...\\nOptions:\\n(A) ...")
and end with "Answer with the option's letter from the given choices directly."; the
reference answer is "(B) text".

Source: SpecVLM (arXiv 2508.16201) Sec. 4.1 (benchmarks, model pairs, frames, r = 0.9,
λ = 0.4, 256 new tokens); lmms-eval ``video_detail_description`` task; MVBench
notebook (Ask-Anything/video_chat2); MLVU ``choice_bench.py``; LongVideoBench
``longvideobench_dataset.py``.
"""
from __future__ import annotations

import json
import logging
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

log = logging.getLogger(__name__)

MC_SUFFIX = "Answer with the option's letter from the given choices directly."
VIDEO_EXTS = (".mp4", ".MP4", ".mkv", ".webm", ".avi", ".mov")


class DatasetError(ValueError):
    """A dataset folder, annotation file or video is missing or malformed; the message names the path."""


@dataclass(frozen=True)
class Sample:
    """One benchmark question.

    Attributes:
        id: stable sample id (dataset specific, e.g. ``action_sequence/12``).
        video: path of the video file.
        prompt: the user prompt (question, options and answer instruction for multiple choice).
        answer: reference answer ("(B) text" for multiple choice).
        dataset: dataset name.
        task: task / question type ("" when the dataset has one task).
        bound: (start, end) in seconds of the relevant segment, or None for the whole video.
        subtitle: path of a subtitle file (LongVideoBench), or None.
    """

    id: str
    video: Path
    prompt: str
    answer: str
    dataset: str
    task: str = ""
    bound: tuple[float, float] | None = None
    subtitle: Path | None = None


def seeded_subset(items: Sequence, n: int | None, seed: int = 0) -> list:
    """A seeded random subset of size ``n`` in original order (all items when n is None or >= len).

    Raises:
        DatasetError: n < 1.
    """
    if n is None or n >= len(items):
        return list(items)
    if n < 1:
        raise DatasetError(f"num_samples={n}: use at least 1.")
    idx = sorted(random.Random(seed).sample(range(len(items)), n))
    return [items[i] for i in idx]


def _root(path: str | Path, name: str) -> Path:
    root = Path(path).expanduser()
    if not root.is_dir():
        raise DatasetError(f"{name}: folder {root} does not exist; point --data-root at the local copy.")
    return root


def _read_json(path: Path, name: str) -> list:
    if not path.is_file():
        raise DatasetError(f"{name}: annotation file {path} is missing.")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise DatasetError(f"{name}: {path} is not valid JSON ({exc}).") from exc
    if not isinstance(data, list):
        raise DatasetError(f"{name}: {path} should hold a JSON list of samples.")
    return data


def _check_videos(samples: list[Sample], name: str) -> list[Sample]:
    missing = [str(s.video) for s in samples if not s.video.is_file()]
    if missing:
        more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
        raise DatasetError(f"{name}: {len(missing)} video file(s) missing: {', '.join(missing[:3])}{more}.")
    return samples


def multiple_choice(question: str, candidates: Sequence[str], answer_index: int | None) -> tuple[str, str]:
    """(prompt, reference) for a multiple-choice question; reference is "(B) text" or "" when unknown."""
    opts = "\n".join(f"({chr(65 + i)}) {c}" for i, c in enumerate(candidates))
    prompt = f"Question: {question}\nOptions:\n{opts}\n{MC_SUFFIX}"
    if answer_index is None or not 0 <= answer_index < len(candidates):
        return prompt, ""
    return prompt, f"({chr(65 + answer_index)}) {candidates[answer_index]}"


def _index_of(answer: str, candidates: Sequence[str]) -> int | None:
    return list(candidates).index(answer) if answer in candidates else None


# --------------------------------------------------------------------------- VideoDetailCaption
def _find_video(folder: Path, stem: str) -> Path:
    if Path(stem).suffix in VIDEO_EXTS and (folder / stem).is_file():
        return folder / stem
    for ext in VIDEO_EXTS:
        if (folder / (stem + ext)).is_file():
            return folder / (stem + ext)
    return folder / (stem + ".mp4")


def load_video_detail_caption(root: str | Path, n: int | None = None, seed: int = 0) -> list[Sample]:
    """VideoDetailCaption: parquet rows (video_name, question, answer) + ``Test_Videos/``.

    Args:
        root: folder of the local copy (parquet files and ``Test_Videos/`` at any depth).
        n: subset size (None = all 499 rows of the public test split).
        seed: subset seed.

    Returns:
        Samples with id = video_name, prompt = question, answer = reference caption.

    Raises:
        DatasetError: no parquet, missing columns, no ``Test_Videos/`` folder, or missing videos.
    """
    import pyarrow.parquet as pq

    base = _root(root, "VideoDetailCaption")
    files = sorted(base.rglob("*.parquet"))
    if not files:
        raise DatasetError(f"VideoDetailCaption: no *.parquet file under {base}.")
    rows: list[dict] = []
    for f in files:
        table = pq.read_table(f)
        need = {"video_name", "question", "answer"} - set(table.column_names)
        if need:
            raise DatasetError(f"VideoDetailCaption: {f} lacks column(s) {', '.join(sorted(need))}.")
        rows += table.select(["video_name", "question", "answer"]).to_pylist()
    folders = [p for p in sorted(base.rglob("Test_Videos")) if p.is_dir()]
    if not folders:
        raise DatasetError(f"VideoDetailCaption: no Test_Videos/ folder under {base}.")
    samples = [Sample(str(r["video_name"]), _find_video(folders[0], str(r["video_name"])), str(r["question"]),
                      str(r["answer"]), "videodetailcaption") for r in rows]
    return _check_videos(seeded_subset(samples, n, seed), "VideoDetailCaption")


# --------------------------------------------------------------------------- MVBench
MVBENCH_TASKS: dict[str, tuple[str, str, bool]] = {
    "Action Sequence": ("action_sequence.json", "star/Charades_v1_480", True),
    "Action Prediction": ("action_prediction.json", "star/Charades_v1_480", True),
    "Action Antonym": ("action_antonym.json", "ssv2_video", False),
    "Fine-grained Action": ("fine_grained_action.json", "Moments_in_Time_Raw/videos", False),
    "Unexpected Action": ("unexpected_action.json", "FunQA_test/test", False),
    "Object Existence": ("object_existence.json", "clevrer/video_validation", False),
    "Object Interaction": ("object_interaction.json", "star/Charades_v1_480", True),
    "Object Shuffle": ("object_shuffle.json", "perception/videos", False),
    "Moving Direction": ("moving_direction.json", "clevrer/video_validation", False),
    "Action Localization": ("action_localization.json", "sta/sta_video", True),
    "Scene Transition": ("scene_transition.json", "scene_qa/video", False),
    "Action Count": ("action_count.json", "perception/videos", False),
    "Moving Count": ("moving_count.json", "clevrer/video_validation", False),
    "Moving Attribute": ("moving_attribute.json", "clevrer/video_validation", False),
    "State Change": ("state_change.json", "perception/videos", False),
    "Fine-grained Pose": ("fine_grained_pose.json", "nturgbd", False),
    "Character Order": ("character_order.json", "perception/videos", False),
    "Egocentric Navigation": ("egocentric_navigation.json", "vlnqa", False),
    "Counterfactual Inference": ("counterfactual_inference.json", "clevrer/video_validation", False),
}
"""Task -> (json file, video prefix under ``video/``, has start/end bound); from the official notebook."""


def load_mvbench(root: str | Path, n: int | None = None, seed: int = 0,
                 tasks: Sequence[str] | None = None) -> list[Sample]:
    """MVBench: ``json/<task>.json`` + ``video/<prefix>/<video>`` (multiple choice).

    Args:
        root: folder holding ``json/`` and ``video/``.
        n: subset size over all selected tasks (None = all).
        seed: subset seed.
        tasks: task names of :data:`MVBENCH_TASKS` (default: every task whose json exists).

    Returns:
        Samples with id ``<json stem>/<index>``, task = task name, bound = (start, end) s when given.

    Raises:
        DatasetError: no ``json/`` folder, an unknown or missing task, or missing videos.
    """
    base = _root(root, "MVBench")
    if not (base / "json").is_dir():
        raise DatasetError(f"MVBench: {base / 'json'} is missing (expected json/<task>.json files).")
    unknown = set(tasks or ()) - set(MVBENCH_TASKS)
    if unknown:
        raise DatasetError(f"MVBench: unknown task(s) {', '.join(sorted(unknown))}.")
    chosen = list(tasks) if tasks else [t for t, v in MVBENCH_TASKS.items() if (base / "json" / v[0]).is_file()]
    if not chosen:
        raise DatasetError(f"MVBench: none of the task json files are in {base / 'json'}.")
    samples = []
    for task in chosen:
        fname, prefix, has_bound = MVBENCH_TASKS[task]
        vdir = base / "video" / prefix if (base / "video").is_dir() else base / prefix
        for i, d in enumerate(_read_json(base / "json" / fname, "MVBench")):
            prompt, ref = multiple_choice(d["question"], d["candidates"], _index_of(d["answer"], d["candidates"]))
            bound = (float(d["start"]), float(d["end"])) if has_bound and "start" in d and "end" in d else None
            samples.append(Sample(f"{Path(fname).stem}/{i}", vdir / d["video"], prompt, ref, "mvbench", task, bound))
    return _check_videos(seeded_subset(samples, n, seed), "MVBench")


# --------------------------------------------------------------------------- MLVU
def _mlvu_base(base: Path) -> Path:
    for cand in (base / "MLVU", base):
        if (cand / "json").is_dir():
            return cand
    raise DatasetError(f"MLVU: no json/ folder in {base} or {base / 'MLVU'} (expected json/<k>_<task>.json).")


def _mlvu_video_dir(base: Path, stem: str) -> Path:
    task = stem.split("_", 1)[1] if "_" in stem and stem.split("_", 1)[0].isdigit() else stem
    for cand in (base / "video" / stem, base / "video" / task):
        if cand.is_dir():
            return cand
    return base / "video" / stem


def load_mlvu(root: str | Path, n: int | None = None, seed: int = 0,
              tasks: Sequence[str] | None = None) -> list[Sample]:
    """MLVU: ``[MLVU/]json/<k>_<task>.json`` + ``[MLVU/]video/<k>_<task>/`` (or ``video/<task>/``).

    Multiple-choice entries (with ``candidates``) get the options prompt; open-ended ones
    (sub-scene captioning, summary) use the question as the prompt and the answer as reference.

    Args:
        root: the local copy (its ``MLVU/`` sub-folder is found automatically).
        n: subset size over all selected tasks (None = all).
        seed: subset seed.
        tasks: json stems (``1_plotQA``) or task names (``plotQA``); default all json files.

    Returns:
        Samples with id ``<json stem>/<index>`` and task = ``question_type`` (or the stem).

    Raises:
        DatasetError: missing json folder or files, or missing videos.
    """
    base = _mlvu_base(_root(root, "MLVU"))
    files = sorted((base / "json").glob("*.json"))
    if tasks:
        want = set(tasks)
        files = [f for f in files if f.stem in want or f.stem.split("_", 1)[-1] in want]
    if not files:
        raise DatasetError(f"MLVU: no matching json files in {base / 'json'}.")
    samples = []
    for f in files:
        vdir = _mlvu_video_dir(base, f.stem)
        for i, d in enumerate(_read_json(f, "MLVU")):
            if d.get("candidates"):
                prompt, ref = multiple_choice(d["question"], d["candidates"], _index_of(d["answer"], d["candidates"]))
            else:
                prompt, ref = str(d["question"]), str(d.get("answer", ""))
            samples.append(Sample(f"{f.stem}/{i}", vdir / d["video"], prompt, ref, "mlvu",
                                  str(d.get("question_type", f.stem))))
    return _check_videos(seeded_subset(samples, n, seed), "MLVU")


# --------------------------------------------------------------------------- LongVideoBench
def load_longvideobench(root: str | Path, n: int | None = None, seed: int = 0, split: str = "val") -> list[Sample]:
    """LongVideoBench: ``lvb_<split>.json`` + ``videos/`` + ``subtitles/``.

    Args:
        root: folder of the local copy.
        n: subset size (None = all).
        seed: subset seed.
        split: ``val`` (``lvb_val.json``, with answers) or ``test`` (``lvb_test_wo_gt.json``, no answers).

    Returns:
        Samples with id = the entry's ``id``, subtitle = ``subtitles/<subtitle_path>`` (may not exist;
        subtitles are not interleaved into the prompt), task = ``question_category`` when present.

    Raises:
        DatasetError: unknown split, missing annotation file or videos.
    """
    base = _root(root, "LongVideoBench")
    files = {"val": "lvb_val.json", "test": "lvb_test_wo_gt.json"}
    if split not in files:
        raise DatasetError(f"LongVideoBench: split {split!r} is unknown: use val or test.")
    samples = []
    for i, d in enumerate(_read_json(base / files[split], "LongVideoBench")):
        prompt, ref = multiple_choice(d["question"], d["candidates"], d.get("correct_choice"))
        sub = base / "subtitles" / d["subtitle_path"] if d.get("subtitle_path") else None
        samples.append(Sample(str(d.get("id", i)), base / "videos" / d["video_path"], prompt, ref,
                              "longvideobench", str(d.get("question_category", "")), subtitle=sub))
    return _check_videos(seeded_subset(samples, n, seed), "LongVideoBench")


DATASETS: dict[str, Callable[..., list[Sample]]] = {
    "vdc": load_video_detail_caption,
    "videodetailcaption": load_video_detail_caption,
    "mvbench": load_mvbench,
    "mlvu": load_mlvu,
    "longvideobench": load_longvideobench,
    "lvb": load_longvideobench,
}
"""Dataset name (and short alias) -> loader."""


def load_dataset(name: str, root: str | Path, n: int | None = None, seed: int = 0) -> list[Sample]:
    """Load a seeded subset of a dataset by name (see :data:`DATASETS`).

    Raises:
        DatasetError: unknown name, or any loader error.
    """
    key = name.lower().replace("-", "").replace("_", "")
    if key not in DATASETS:
        raise DatasetError(f"dataset {name!r} is unknown: use one of {', '.join(sorted(DATASETS))}.")
    samples = DATASETS[key](root, n, seed)
    log.info("%s: %d samples (seed %d)", name, len(samples), seed)
    return samples
