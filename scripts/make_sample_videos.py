#!/usr/bin/env python
"""Write the generated sample clips for the app under assets/videos/.

Each clip gets ``<name>.mp4`` (H.264, yuv420p), ``<name>.json`` (ground truth
from ``specvlm.bench.synth``, incl. the reference caption) and, for the long clip,
``<name>.srt`` with cues derived from the ground truth. ``shapes_subtitles`` is a
sparse-information clip (:mod:`training.scenes`) whose ``.srt`` states a fact
(a code, a name or a flag colour) that the description reports: with the subtitles
given to the target only, the draft cannot predict it (the app's failure case).

Usage:
    python -m scripts.make_sample_videos [--out assets/videos]
"""
from __future__ import annotations

import argparse
from pathlib import Path

from training import scenes
from specvlm.bench import captions
from specvlm.bench import clipfiles
from specvlm.bench import synth

# name -> (seed, SceneSpec); seeds >= 2e9, outside the training range (< 1e8)
SAMPLES = {
    "shapes_short": (2_000_000_001, synth.SceneSpec(num_frames=16, height=168, width=168, fps=8.0,
                                                    num_objects=2, text_prob=0.0, enter_leave_prob=0.0)),
    "shapes_long": (2_000_000_002, synth.SceneSpec(num_frames=200, height=168, width=224, fps=8.0,
                                                   num_objects=3, text_prob=0.0, enter_leave_prob=0.5)),
    "shapes_text": (2_000_000_003, synth.SceneSpec(num_frames=48, height=168, width=168, fps=8.0,
                                                   num_objects=1, text_prob=1.0, enter_leave_prob=0.0)),
}


SPARSE_SAMPLES = {
    "shapes_subtitles": (2_000_000_004, scenes.SparseSpec(num_frames=160, height=168, width=168, fps=8.0,
                                                          flash_prob=1.0, text_prob=0.0)),
}
"""name -> (seed, SparseSpec) of sparse clips with a subtitle fact (seeds >= 2e9)."""


def _ts(sec: float) -> str:
    ms = int(round(sec * 1000))
    h, ms = divmod(ms, 3_600_000)
    m, ms = divmod(ms, 60_000)
    s, ms = divmod(ms, 1000)
    return f"{h:02d}:{m:02d}:{s:02d},{ms:03d}"


def srt_from_truth(truth: synth.SceneTruth) -> str:
    """SRT cues (one per object appearance/leave, plus on-screen text) for a clip."""
    fps, dur = truth.fps, truth.num_frames / truth.fps
    cues = [(0.0, min(3.0, dur), f"{synth.NUMBER_WORDS[len(truth.objects)].capitalize()} shapes "
                                  f"on a {truth.background} background.")]
    for o in truth.objects:
        a = o.start_frame / fps
        cues.append((a, min(a + 3.0, dur), f"The {o.name} {'appears and ' if o.enters else ''}"
                                           f"{captions.motion_phrase(o.motion)}."))
        if o.leaves:
            b = o.end_frame / fps
            cues.append((max(0.0, b - 2.0), b, f"The {o.name} leaves."))
    if truth.text is not None:
        cues.append((truth.text.start_frame / fps, truth.text.end_frame / fps, f'The text "{truth.text.text}" is shown.'))
    cues.sort(key=lambda c: c[0])
    return "\n".join(f"{i}\n{_ts(a)} --> {_ts(b)}\n{t}\n" for i, (a, b, t) in enumerate(cues, 1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="assets/videos")
    args = ap.parse_args()
    out = Path(args.out)
    for name, (seed, spec) in SAMPLES.items():
        frames, truth = synth.generate(seed, spec)
        clipfiles.write_mp4(out / f"{name}.mp4", frames, fps=spec.fps)
        clipfiles.write_truth(out / f"{name}.json", truth)
        if name == "shapes_long":
            (out / f"{name}.srt").write_text(srt_from_truth(truth), encoding="utf-8")
        size = (out / f"{name}.mp4").stat().st_size
        print(f"{name}: {frames.shape} {size / 1024:.0f} KiB  | {captions.describe(truth)}")
    for name, (seed, spec) in SPARSE_SAMPLES.items():
        frames, truth = scenes.sparse_scene(seed, spec)
        truth = scenes.with_subtitles(truth, seed, scenes.SubtitleSpec(fact_prob=1.0, fillers=(3, 4)))
        clipfiles.write_mp4(out / f"{name}.mp4", frames, fps=spec.fps, crf=18)
        clipfiles.write_truth(out / f"{name}.json", truth)
        scenes.write_srt(out / f"{name}.srt", truth.cues)
        print(f"{name}: {frames.shape} | {captions.describe(truth)}")


if __name__ == "__main__":
    main()
