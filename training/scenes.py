"""Sparse-information scenes and subtitle tracks for the bundled pair's training and evaluation.

In a :func:`sparse_scene` the facts a description reports live in few video tokens: small objects
(at most ~8% of the frame side), an object that *flashes* (visible on a few frames, in one place),
on-screen text that is small and shown briefly, and distractor shapes in colours the grammar never
names (cyan, pink, brown) moving around. A random 10% of the video tokens mostly misses the flash
and the brief text; the target's text-to-video attention (trained to spread over every named
object, :func:`training.losses.spread_focus_loss`) finds them.

:func:`with_subtitles` gives any scene a subtitle track: filler cues that say nothing the caption
reports, and optionally one cue that states a fact (a two-digit code, a name, a flag colour) that
only the subtitles carry; :func:`specvlm.bench.captions.describe` then reports it ("code 42."). With the
transcript withheld from the draft (subtitle mode ``target``) the draft cannot predict it.

Everything is drawn from a seed with numpy (the same seed gives the same clip everywhere).

Source: the bundled model's data recipe (assets/model/README.md); drawing helpers of :mod:`specvlm.bench.synth`.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from specvlm.bench import captions
from specvlm.bench import synth
from specvlm.text.subtitles import Cue

DISTRACTOR_COLOURS = ((0, 200, 210), (255, 120, 190), (130, 80, 40))
"""Cyan, pink, brown: drawn, moving, never named by a caption."""

FILLERS = ("Look at this.", "Keep watching.", "Here it comes.", "Watch closely.", "Almost done.",
           "What was that?", "Stay with me.", "Nice and slow.", "Over here.", "Did you see it?")
"""Cue texts that state nothing a caption reports (no colour, shape, digit or name)."""


@dataclass(frozen=True)
class SparseSpec:
    """Knobs of :func:`sparse_scene`.

    Attributes:
        num_frames, height, width, fps: clip shape (as :class:`specvlm.bench.synth.SceneSpec`).
        num_objects: small objects visible for (most of) the clip, 1..2; None = random.
        size_range: object side as a fraction of min(H, W).
        flash_prob: probability of a flashing object; flash_frames: (min, max) frames it shows.
        text_prob: probability of brief small on-screen text; text_frames: (min, max) frames it shows.
        distractors: (min, max) number of distractor shapes.
        enter_leave_prob: per small object, probability of entering and (separately) of leaving mid-clip.
    """

    num_frames: int = 128
    height: int = 168
    width: int = 168
    fps: float = 8.0
    num_objects: int | None = None
    size_range: tuple = (0.05, 0.08)
    flash_prob: float = 0.8
    flash_frames: tuple = (4, 8)
    text_prob: float = 0.6
    text_frames: tuple = (4, 10)
    distractors: tuple = (3, 7)
    enter_leave_prob: float = 0.15


@dataclass(frozen=True)
class SubtitleSpec:
    """Knobs of :func:`with_subtitles`.

    Attributes:
        fact_prob: probability that one cue states a fact.
        fillers: (min, max) filler cues.
        kinds: fact kinds to draw from (:data:`specvlm.bench.synth.FACT_KINDS`).
    """

    fact_prob: float = 0.8
    fillers: tuple = (1, 4)
    kinds: tuple = synth.FACT_KINDS


def _object_spec(spec: SparseSpec) -> synth.SceneSpec:
    return synth.SceneSpec(num_frames=spec.num_frames, height=spec.height, width=spec.width, fps=spec.fps,
                           text_prob=0.0, enter_leave_prob=spec.enter_leave_prob, size_range=spec.size_range)


def _distractor_track(rng: np.random.Generator, T: int, H: int, W: int, s: int) -> np.ndarray:
    """(T, 2) int top-left positions of a distractor: a straight line that bounces off the edges."""
    pos = rng.random(2) * np.array([W - s, H - s])
    vel = rng.uniform(-1.0, 1.0, 2)
    vel = vel / max(np.abs(vel).max(), 1e-6) * rng.uniform(0.6, 2.0)
    out = np.zeros((T, 2), np.int64)
    hi = np.array([W - s, H - s], np.float64)
    for t in range(T):
        out[t] = np.round(pos)
        pos = pos + vel
        for a in range(2):
            if pos[a] < 0 or pos[a] > hi[a]:
                vel[a] = -vel[a]
                pos[a] = min(max(pos[a], 0.0), hi[a])
    return out


def _flash(rng: np.random.Generator, spec: SparseSpec, used: set, others: list) -> tuple:
    """An object visible on a few consecutive frames at one place, not overlapping ``others``' boxes."""
    T, H, W = spec.num_frames, spec.height, spec.width
    while True:
        colour = list(synth.COLOURS)[rng.integers(len(synth.COLOURS))]
        shape = synth.SHAPES[rng.integers(len(synth.SHAPES))]
        if (colour, shape) not in used:
            break
    s = max(6, int(round(min(H, W) * rng.uniform(*spec.size_range))))
    n = int(min(T, rng.integers(spec.flash_frames[0], spec.flash_frames[1] + 1)))
    boxes = np.full((T, 4), -1, np.int64)
    for _try in range(40):
        t0 = int(rng.integers(0, T - n + 1))
        x, y = int(rng.integers(2, W - s - 1)), int(rng.integers(2, H - s - 1))
        boxes[:] = -1
        boxes[t0:t0 + n] = (x, y, x + s, y + s)
        if not any(synth._overlaps(boxes, o) for o in others):
            break
    return colour, shape, synth.FLASH, s, t0, t0 + n, False, False, boxes.copy()


def _brief_text(rng: np.random.Generator, spec: SparseSpec) -> tuple[synth.TextTruth, np.ndarray]:
    """Small on-screen text (glyphs ~8% of the frame height) at a random place for a few frames."""
    T, H, W = spec.num_frames, spec.height, spec.width
    text = str(int(rng.integers(10))) if rng.random() < 0.6 else synth.WORDS[rng.integers(len(synth.WORDS))]
    pad = 3
    scale = max(2, min(int(round(0.08 * H / 7)), (W - 2 * pad - 4) // (6 * len(text) - 1)))
    glyph = synth._render_text(text, scale)
    gh, gw = glyph.shape
    x0 = int(rng.integers(0, W - gw - 2 * pad + 1))
    y0 = int(rng.integers(0, H - gh - 2 * pad + 1))
    n = int(min(T, rng.integers(spec.text_frames[0], spec.text_frames[1] + 1)))
    t0 = int(rng.integers(0, T - n + 1))
    box = [x0, y0, x0 + gw + 2 * pad, y0 + gh + 2 * pad]
    return synth.TextTruth(text, t0, t0 + n, box), glyph


def sparse_scene(seed: int, spec: SparseSpec | None = None) -> tuple[np.ndarray, synth.SceneTruth]:
    """Generate one sparse-information clip (small objects, a flash, brief text, distractors).

    Args:
        seed: RNG seed; the same (seed, spec) gives the same frames and truth.
        spec: settings (defaults: 128 frames of 168x168 px at 8 fps).

    Returns:
        frames uint8 (T, H, W, 3) RGB and its :class:`specvlm.bench.synth.SceneTruth` (objects include the
        flashing one, motion :data:`specvlm.bench.synth.FLASH`; distractors are not in the truth).

    Raises:
        specvlm.bench.synth.SynthError: frames under 56 px or fewer than 8 frames.
    """
    spec = spec or SparseSpec()
    T, H, W = spec.num_frames, spec.height, spec.width
    if T < 8 or H < 56 or W < 56:
        raise synth.SynthError(f"sparse scenes need >= 8 frames of >= 56x56 px, got T={T}, {H}x{W}")
    rng = np.random.default_rng([seed, 33])
    bg_kind, bg = synth._background(rng, H, W)
    frames = np.repeat(bg[None], T, axis=0)
    for _ in range(int(rng.integers(spec.distractors[0], spec.distractors[1] + 1))):
        s = max(5, int(round(min(H, W) * rng.uniform(0.04, 0.07))))
        track = _distractor_track(rng, T, H, W, s)
        mask = synth._shape_mask(synth.SHAPES[rng.integers(len(synth.SHAPES))], s)
        rgb = np.array(DISTRACTOR_COLOURS[rng.integers(len(DISTRACTOR_COLOURS))], np.uint8)
        for t in range(T):
            x, y = track[t]
            frames[t, y:y + s, x:x + s][mask] = rgb
    ospec = _object_spec(spec)
    n_obj = spec.num_objects or int(rng.integers(1, 3))
    objs: list[tuple] = []
    for _ in range(n_obj):
        used = {(o[0], o[1]) for o in objs}
        cand = None
        for _try in range(60):
            cand = synth._sample_object(rng, ospec, used)
            if not any(synth._overlaps(cand[8], o[8]) for o in objs):
                break
        objs.append(cand)
    if rng.random() < spec.flash_prob:
        objs.append(_flash(rng, spec, {(o[0], o[1]) for o in objs}, [o[8] for o in objs]))
    for colour, shape, _m, s, t0, t1, _e, _l, boxes in objs:
        mask = synth._shape_mask(shape, s)
        rgb = np.array(synth.COLOURS[colour], np.uint8)
        for t in range(t0, t1):
            x0, y0 = boxes[t, 0], boxes[t, 1]
            frames[t, y0:y0 + s, x0:x0 + s][mask] = rgb
    text_truth = None
    if rng.random() < spec.text_prob:
        text_truth, glyph = _brief_text(rng, spec)
        x0, y0, x1, y1 = text_truth.box
        region = frames[text_truth.start_frame:text_truth.end_frame, y0:y1, x0:x1]
        region[:] = 0
        region[:, 3:3 + glyph.shape[0], 3:3 + glyph.shape[1]][:, glyph] = 255
    order = sorted(range(len(objs)), key=lambda i: (objs[i][8][objs[i][4], 0], objs[i][8][objs[i][4], 1]))
    truths = tuple(synth.ObjectTruth(c, sh, m, t0, t1, bool(e), bool(l), boxes.tolist())
                   for (c, sh, m, _s, t0, t1, e, l, boxes) in (objs[i] for i in order))
    return frames, synth.SceneTruth(int(seed), W, H, T, float(spec.fps), bg_kind, truths, text_truth)


def _fact(rng: np.random.Generator, kinds: tuple) -> tuple[str, str]:
    kind = kinds[rng.integers(len(kinds))]
    if kind == "code":
        return kind, str(int(rng.integers(10, 100)))
    if kind == "name":
        return kind, synth.NAMES[rng.integers(len(synth.NAMES))]
    return kind, list(synth.COLOURS)[rng.integers(len(synth.COLOURS))]


def with_subtitles(truth: synth.SceneTruth, seed: int, spec: SubtitleSpec | None = None) -> synth.SceneTruth:
    """``truth`` with a subtitle track: filler cues and, with ``spec.fact_prob``, one fact cue.

    Cues do not overlap; each lasts 4-12% of the clip (at least two frames) so it overlaps at least
    one sampled 2-frame group. The fact cue is placed at a random time like the fillers.

    Args:
        truth: the scene (its duration is ``num_frames / fps`` s).
        seed: RNG seed of the track.
        spec: settings.

    Returns:
        a copy of ``truth`` with ``cues`` (start order) and ``fact`` (or None) set.
    """
    spec = spec or SubtitleSpec()
    rng = np.random.default_rng([seed, 77])
    dur = truth.num_frames / truth.fps
    n_fill = int(rng.integers(spec.fillers[0], spec.fillers[1] + 1))
    has_fact = rng.random() < spec.fact_prob
    n = n_fill + int(has_fact)
    slot = dur / max(n, 1)
    texts = [FILLERS[i] for i in rng.choice(len(FILLERS), n_fill, replace=False)]
    fact = None
    if has_fact:
        kind, value = _fact(rng, spec.kinds)
        at = int(rng.integers(0, n))
        fact = synth.FactTruth(kind, value, at)
        texts.insert(at, fact.cue_text)
    cues = []
    for i, text in enumerate(texts):     # one cue per slot of the clip, at a random place inside it
        length = max(2.0 / truth.fps, dur * rng.uniform(0.04, 0.12))
        length = min(length, slot)
        start = i * slot + rng.random() * (slot - length)
        cues.append(Cue(round(start, 3), round(start + length, 3), text))
    return dataclasses.replace(truth, cues=tuple(cues), fact=fact)


def write_srt(path, cues) -> None:
    """Write cues as a SubRip file (the ``srt`` library's composer)."""
    import datetime
    from pathlib import Path

    import srt

    subs = [srt.Subtitle(i + 1, datetime.timedelta(seconds=c.start_s), datetime.timedelta(seconds=c.end_s), c.text)
            for i, c in enumerate(cues)]
    Path(path).write_text(srt.compose(subs))
