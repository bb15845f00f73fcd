"""The held-out clips of the bundled evaluations (:mod:`training.eval_bundled`, :mod:`training.eval_sparse`) and
what a description is scored on: the clip of each seed, attribute correctness against the ground truth, and how
much of each video token's cell lies on an object or the on-screen text.

Held-out seeds: training draws scene seeds below :data:`training.data.TRAIN_SEED_LIMIT`; a short clip uses
``seed_base + i``, a long one ``seed_base + LONG_SEED_OFFSET + i``.
"""
from __future__ import annotations

import itertools

import numpy as np

from specvlm.bench import captions, synth
from specvlm.spec.grid import grid_shape
from training.data import TRAIN_SEED_LIMIT

__all__ = ["LONG_SEED_OFFSET", "SHORT_FPS", "SHORT_SIDES", "TRAIN_SEED_LIMIT", "cell_pixels", "clip_spec",
           "score_caption", "token_coverage"]

LONG_SEED_OFFSET = 500_000_000
SHORT_SIDES = (112, 140, 168, 224)
SHORT_FPS = (4.0, 6.0, 8.0)


def clip_spec(kind: str, index: int, args) -> tuple[int, synth.SceneSpec]:
    """(seed, SceneSpec) of held-out clip ``index`` of set ``kind`` ("short" | "long")."""
    if kind == "short":
        seed = args.seed_base + index
        rng = np.random.default_rng([seed, 1])
        side = int(rng.choice(SHORT_SIDES))
        fps = float(rng.choice(SHORT_FPS))
        return seed, synth.SceneSpec(num_frames=args.short_frames, height=side, width=side, fps=fps)
    seed = args.seed_base + LONG_SEED_OFFSET + index
    return seed, synth.SceneSpec(num_frames=args.long_frames, height=args.long_side, width=args.long_side,
                                 fps=args.long_fps)


def score_caption(pred_text: str, truth: synth.SceneTruth) -> dict:
    """Attribute correctness of one description.

    Returns:
        dict: colour/shape/motion/enter_leave -> [correct, total] over the true objects
        (predicted objects matched by the assignment with the most correct attributes;
        a missing prediction counts as wrong); count/text/text_presence/exact -> 0 or 1;
        ``motion_pairs``: [true motion, predicted motion or None] per true object under that assignment.
    """
    p = captions.parse_caption(pred_text)
    true = list(truth.objects)
    pred = list(p["objects"])
    n = len(true)
    slots = pred + [None] * max(0, n - len(pred))

    def hits(t, q) -> tuple[int, int, int, int]:
        if q is None:
            return 0, 0, 0, 0
        return (int(q["colour"] == t.colour), int(q["shape"] == t.shape), int(q["motion"] == t.motion),
                int(q["enters"] == t.enters and q["leaves"] == t.leaves))

    best, best_sum, best_perm = (0, 0, 0, 0), -1, ()
    for perm in itertools.permutations(range(len(slots)), n):
        tot = [sum(x) for x in zip(*(hits(t, slots[j]) for t, j in zip(true, perm)))] or [0, 0, 0, 0]
        if sum(tot[:3]) * 10 + tot[3] > best_sum:
            best_sum, best, best_perm = sum(tot[:3]) * 10 + tot[3], tuple(tot), perm
    true_text = truth.text.text if truth.text is not None else ""
    return {
        "colour": [best[0], n], "shape": [best[1], n], "motion": [best[2], n], "enter_leave": [best[3], n],
        "count": int(p["count"] == n),
        "text": int(p["text"] is not None and p["text"] == true_text),
        "text_presence": int(p["text"] is not None and (p["text"] != "") == (true_text != "")),
        "exact": int(pred_text.strip() == captions.describe(truth)),
        "motion_pairs": [[t.motion, slots[j]["motion"] if slots[j] is not None else None]
                         for t, j in zip(true, best_perm)],
    }


def cell_pixels(model) -> int:
    """Processed pixels per side of one video token's cell: the vision patch times the spatial merge of a
    Qwen2.5-VL ``model``'s vision config."""
    vc = model.config.vision_config
    return int(vc.patch_size) * int(vc.spatial_merge_size)


def token_coverage(truth: synth.SceneTruth, token_grid, frames_per_token: int, cell_px: int) -> np.ndarray:
    """Share of object-or-text pixels under each video token.

    Args:
        truth: ground truth (per-frame object boxes, text box and time span) at the original size.
        token_grid: int (V, 3) (frame_group, row, col) per video token.
        frames_per_token: frames per token group (the inputs' ``frames_per_token``).
        cell_px: processed pixels per side of a token's cell (:func:`cell_pixels`).

    Returns:
        float32 (V,): fraction in [0, 1] of the token's frames x cell (processed size, each processed pixel
        mapped back to the original frame by the resize ratio) inside an object box or the text box.
    """
    T, H, W = truth.num_frames, truth.height, truth.width
    mask = np.zeros((T, H, W), bool)
    for o in truth.objects:
        for t, (x0, y0, x1, y1) in enumerate(o.boxes):
            if x0 >= 0:
                mask[t, max(y0, 0):max(y1, 0), max(x0, 0):max(x1, 0)] = True
    if truth.text is not None:
        x0, y0, x1, y1 = truth.text.box
        mask[truth.text.start_frame:truth.text.end_frame, max(y0, 0):y1, max(x0, 0):x1] = True
    fpt = max(1, int(frames_per_token))
    if T % fpt:  # the adapter pads a clip to whole token groups by repeating the last frame
        mask = np.concatenate([mask] + [mask[-1:]] * (fpt - T % fpt), axis=0)
    tg = np.asarray(token_grid, dtype=np.int64)
    g = int(tg[:, 0].max()) + 1
    rows, cols = grid_shape(tg)
    hp, wp = rows * cell_px, cols * cell_px
    ys = np.minimum(((np.arange(hp) + 0.5) * H / hp).astype(np.int64), H - 1)
    xs = np.minimum(((np.arange(wp) + 0.5) * W / wp).astype(np.int64), W - 1)
    m = mask[:, ys][:, :, xs].astype(np.float32)
    if m.shape[0] != fpt * g:
        raise ValueError(f"{m.shape[0]} frames do not match {g} temporal groups of {fpt}")
    cov = m.reshape(g, fpt, rows, cell_px, cols, cell_px).mean(axis=(1, 3, 5))
    return cov[tg[:, 0], tg[:, 1], tg[:, 2]]
