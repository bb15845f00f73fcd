"""Per-video-token auxiliary labels from the generator's ground truth (what, shape, motion, local step, object,
glyph, coverage), the targets of the vision probes in :mod:`training.losses`.

Source: training/README.md (what the bundled pairs are trained on).
"""
from __future__ import annotations

import numpy as np

from specvlm.bench import synth
from training.model import CELL_PX, TEMPORAL_PATCH


TEXT_VALUES = tuple(str(d) for d in range(10)) + tuple(synth.WORDS)   # every on-screen text the generator draws


STEPS = ("still", "right", "left", "down", "up")
"""Local motion of an object between the two frames of one temporal patch (the ``step`` probe)."""


AUX_HEADS = {"what": 1 + len(synth.COLOURS) + 1, "shape": 1 + len(synth.SHAPES), "step": 1 + len(STEPS),
             "glyph": 1 + len(TEXT_VALUES)}


_COLOUR_IDX = {c: i + 1 for i, c in enumerate(synth.COLOURS)}


_TEXT_CLASS = len(synth.COLOURS) + 1


TEXT_OBJ = 15   # ``obj`` label of burned-in text tokens (objects are 1..4)


MOTION_LABELS = synth.MOTIONS + (synth.FLASH,)


def token_labels(truth, frames: np.ndarray, merge: int = CELL_PX, temporal: int = TEMPORAL_PATCH,
                 min_cover: float = 0.15) -> dict[str, np.ndarray]:
    """Per-video-token auxiliary labels from the generator's ground truth.

    A video token of Qwen2.5-VL covers ``temporal`` frames x a ``merge`` x ``merge`` px
    cell. An object covers a pixel where the pixel is inside its box and has its
    colour (exact: shapes are drawn in flat colours). The label is the object covering
    the largest share of the tube (at least ``min_cover``); burned-in text (its box, drawn
    over everything) wins where it covers ``min_cover``; else background (0).

    Args:
        truth: :class:`specvlm.bench.synth.SceneTruth`; frames: uint8 (T, H, W, 3) from the same call.

    Returns:
        dict of int64 arrays, each (T/temporal * H/merge * W/merge,) in the raster
        order of the video placeholders: ``what`` (0 background, 1..6 colour, 7 text),
        ``shape`` (0 none, 1..3), ``motion`` (0 none, 1 + index in :data:`MOTION_LABELS`: the whole-clip motion),
        ``step`` (0 none, 1 + index in :data:`STEPS`: where the object's box moved between the
        token's two frames; what a Conv3d patch over those frames can see, unlike ``motion``:
        a bounce is locally an up or a down, a slow mover often a still), ``obj`` (0 none, k + 1 = ``truth.objects[k]``,
        :data:`TEXT_OBJ` = the text), ``glyph`` (0 none, 1 + index in :data:`TEXT_VALUES` on text tokens);
        plus ``cover`` (float32: share of
        the tube's pixels that are object or text pixels, the eval's "object/text pixel" measure).
    """
    T, H, W = truth.num_frames, truth.height, truth.width
    gt, gh, gw = T // temporal, H // merge, W // merge
    T2 = gt * temporal

    def share(mask: np.ndarray) -> np.ndarray:          # (T, H, W) bool -> (gt, gh, gw)
        m = mask[:T2, :gh * merge, :gw * merge].reshape(gt, temporal, gh, merge, gw, merge)
        return m.mean(axis=(1, 3, 5))

    ys, xs = np.arange(H)[None, :, None], np.arange(W)[None, None, :]
    what = np.zeros((gt, gh, gw), np.int64)
    shape = np.zeros_like(what)
    motion = np.zeros_like(what)
    step = np.zeros_like(what)
    obj = np.zeros_like(what)
    glyph = np.zeros_like(what)
    best = np.full((gt, gh, gw), min_cover, np.float64)
    union = np.zeros((T, H, W), bool)
    for k, o in enumerate(truth.objects):
        b = np.asarray(o.boxes, np.int64)[:, :, None, None]           # (T, 4, 1, 1)
        inside = (ys >= b[:, 1]) & (ys < b[:, 3]) & (xs >= b[:, 0]) & (xs < b[:, 2]) & (b[:, 0] >= 0)
        colour = np.all(frames == np.array(synth.COLOURS[o.colour], np.uint8), axis=-1)
        union |= inside & colour
        c = share(inside & colour)
        win = c > best
        best = np.where(win, c, best)
        what[win] = _COLOUR_IDX[o.colour]
        shape[win] = synth.SHAPES.index(o.shape) + 1
        step[win] = np.broadcast_to(_local_steps(o.boxes, gt, temporal)[:, None, None], win.shape)[win]
        motion[win] = MOTION_LABELS.index(o.motion) + 1
        obj[win] = k + 1
    if truth.text is not None:
        x0, y0, x1, y1 = truth.text.box
        on = np.zeros((T, H, W), bool)
        on[truth.text.start_frame:truth.text.end_frame, y0:y1, x0:x1] = True
        win = share(on) > min_cover
        what[win], shape[win], motion[win], step[win], obj[win] = _TEXT_CLASS, 0, 0, 0, TEXT_OBJ
        glyph[win] = 1 + TEXT_VALUES.index(truth.text.text)
        union |= on
    return {"what": what.reshape(-1), "shape": shape.reshape(-1), "motion": motion.reshape(-1),
            "step": step.reshape(-1),
            "obj": obj.reshape(-1), "glyph": glyph.reshape(-1),
            "cover": share(union).astype(np.float32).reshape(-1)}


def _local_steps(boxes, gt: int, temporal: int = 2) -> np.ndarray:
    """int64 (gt,) :data:`STEPS` label + 1 per temporal patch: the box's move from the patch's first
    to its last frame (0 where the object is not visible in both)."""
    b = np.asarray(boxes, np.int64)
    first, last = b[:gt * temporal:temporal], b[temporal - 1:gt * temporal:temporal]
    dx, dy = last[:, 0] - first[:, 0], last[:, 1] - first[:, 1]
    lab = np.where(dx > 0, 2, np.where(dx < 0, 3, np.where(dy > 0, 4, np.where(dy < 0, 5, 1))))
    return np.where((first[:, 0] >= 0) & (last[:, 0] >= 0), lab, 0).astype(np.int64)
