"""Procedural synthetic videos with exact ground truth, plus a caption/QA grammar.

A scene holds one to three coloured shapes on a plain or textured background.
Each shape has a motion (static, left to right, right to left, up, down,
bouncing) and may enter or leave mid-video; optionally a large digit or short
word is burned in for part of the video. A scene's truth may also carry a
subtitle track (:class:`specvlm.text.subtitles.Cue` cues) and the fact one of its cues
states (:class:`FactTruth`, e.g. "The code is 42."), and objects that flash
(visible on a few frames only); ``training/scenes.py`` generates such
sparse-information scenes. Everything is drawn
with numpy from a seed, so the same seed gives the same pixels and the same
ground truth on every machine.

The grammar turns a :class:`SceneTruth` into a short, information-dense
detailed description (the answer to "Describe this video in detail.") and
single-attribute question/answer pairs; :func:`parse_caption` reads a
description back into attributes for evaluation.

Source: the bundled demo model's training and evaluation data (assets/model/README.md); no external code.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from specvlm.text.subtitles import Cue


COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (225, 35, 35),
    "green": (40, 185, 60),
    "blue": (40, 90, 235),
    "yellow": (245, 220, 30),
    "purple": (160, 60, 210),
    "orange": (255, 140, 0),
}
"""Object colour name -> RGB (uint8 values)."""

SHAPES = ("circle", "square", "triangle")
MOTIONS = ("static", "left to right", "right to left", "up", "down", "bouncing")
BACKGROUNDS = ("plain", "noise", "stripes", "checker")
BACKGROUND_TONES = ((25, 25, 30), (75, 75, 80), (128, 128, 128), (205, 205, 200))
WORDS = ("GO", "HI", "OK", "YES", "NO", "STOP", "CAT", "DOG", "SUN", "BOX", "RUN", "HOT")
"""Words that can be burned in (all glyphs exist in the built-in font)."""
NUMBER_WORDS = ("zero", "one", "two", "three", "four", "five")
FLASH = "flash"
"""Motion of an object that is visible on a few frames only, in one place (caption: "flashes")."""
NAMES = ("Mia", "Leo", "Zoe", "Max", "Ana", "Tom", "Eva", "Sam", "Ida", "Ben", "Kai", "Noa")
"""Names a subtitle fact can state ("My name is Mia.")."""
FACT_KINDS = ("code", "name", "flag")
"""Subtitle facts: a two-digit code, a name from :data:`NAMES`, a flag colour from :data:`COLOURS`."""

# 5x7 bitmap font: each glyph is 7 rows of 5 bits (MSB = leftmost pixel).
_FONT: dict[str, tuple[int, ...]] = {
    "0": (0x0E, 0x11, 0x13, 0x15, 0x19, 0x11, 0x0E),
    "1": (0x04, 0x0C, 0x04, 0x04, 0x04, 0x04, 0x0E),
    "2": (0x0E, 0x11, 0x01, 0x02, 0x04, 0x08, 0x1F),
    "3": (0x1F, 0x02, 0x04, 0x02, 0x01, 0x11, 0x0E),
    "4": (0x02, 0x06, 0x0A, 0x12, 0x1F, 0x02, 0x02),
    "5": (0x1F, 0x10, 0x1E, 0x01, 0x01, 0x11, 0x0E),
    "6": (0x06, 0x08, 0x10, 0x1E, 0x11, 0x11, 0x0E),
    "7": (0x1F, 0x01, 0x02, 0x04, 0x08, 0x08, 0x08),
    "8": (0x0E, 0x11, 0x11, 0x0E, 0x11, 0x11, 0x0E),
    "9": (0x0E, 0x11, 0x11, 0x0F, 0x01, 0x02, 0x0C),
    "A": (0x0E, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11),
    "B": (0x1E, 0x11, 0x11, 0x1E, 0x11, 0x11, 0x1E),
    "C": (0x0E, 0x11, 0x10, 0x10, 0x10, 0x11, 0x0E),
    "D": (0x1C, 0x12, 0x11, 0x11, 0x11, 0x12, 0x1C),
    "E": (0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x1F),
    "G": (0x0E, 0x11, 0x10, 0x17, 0x11, 0x11, 0x0F),
    "H": (0x11, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11),
    "I": (0x0E, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0E),
    "K": (0x11, 0x12, 0x14, 0x18, 0x14, 0x12, 0x11),
    "N": (0x11, 0x11, 0x19, 0x15, 0x13, 0x11, 0x11),
    "O": (0x0E, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E),
    "P": (0x1E, 0x11, 0x11, 0x1E, 0x10, 0x10, 0x10),
    "R": (0x1E, 0x11, 0x11, 0x1E, 0x14, 0x12, 0x11),
    "S": (0x0F, 0x10, 0x10, 0x0E, 0x01, 0x01, 0x1E),
    "T": (0x1F, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04),
    "U": (0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E),
    "X": (0x11, 0x11, 0x0A, 0x04, 0x0A, 0x11, 0x11),
    "Y": (0x11, 0x11, 0x0A, 0x04, 0x04, 0x04, 0x04),
}


class SynthError(ValueError):
    """Invalid generator settings (sizes, frame counts)."""


@dataclass(frozen=True)
class ObjectTruth:
    """Ground truth of one drawn object.

    Attributes:
        colour: key of :data:`COLOURS`.
        shape: one of :data:`SHAPES`.
        motion: one of :data:`MOTIONS`.
        start_frame: first visible frame (inclusive).
        end_frame: last visible frame + 1 (exclusive).
        enters: True when it appears after the first frame.
        leaves: True when it disappears before the last frame.
        boxes: per-frame box ``[x0, y0, x1, y1]`` in pixels (x1, y1 exclusive),
            ``[-1, -1, -1, -1]`` where not visible; list of T lists of 4 ints.
    """

    colour: str
    shape: str
    motion: str
    start_frame: int
    end_frame: int
    enters: bool
    leaves: bool
    boxes: list = field(repr=False)

    @property
    def name(self) -> str:
        """``"<colour> <shape>"``, e.g. ``"red circle"``."""
        return f"{self.colour} {self.shape}"


@dataclass(frozen=True)
class TextTruth:
    """Burned-in text: ``text`` shown on frames ``[start_frame, end_frame)`` inside ``box`` (x0, y0, x1, y1 px)."""

    text: str
    start_frame: int
    end_frame: int
    box: list


@dataclass(frozen=True)
class FactTruth:
    """A fact stated only in a subtitle cue, which the detailed description reports.

    Attributes:
        kind: one of :data:`FACT_KINDS` ("code", "name", "flag").
        value: the stated value: two digits ("42"), a name ("Mia") or a colour ("blue").
        cue: index of the stating cue in :attr:`SceneTruth.cues`.
    """

    kind: str
    value: str
    cue: int

    @property
    def cue_text(self) -> str:
        """The cue that states it, e.g. ``"The code is 42."``."""
        return {"code": f"The code is {self.value}.", "name": f"My name is {self.value}.",
                "flag": f"The flag is {self.value}."}[self.kind]

    @property
    def sentence(self) -> str:
        """The caption sentence, e.g. ``"code 42."``."""
        return f"{self.kind} {self.value}."


@dataclass(frozen=True)
class SceneTruth:
    """Ground truth of a generated clip.

    Attributes:
        seed: generator seed.
        width, height: frame size in pixels.
        num_frames: T.
        fps: frames per second of the clip (timestamps are ``frame / fps`` s).
        background: one of :data:`BACKGROUNDS`.
        objects: objects in caption order (by x of their first visible box, then y).
        text: the burned-in text, or None.
        cues: subtitle cues (:class:`specvlm.text.subtitles.Cue`) of the clip, in start order; () without subtitles.
        fact: the fact one of the cues states, or None.
    """

    seed: int
    width: int
    height: int
    num_frames: int
    fps: float
    background: str
    objects: tuple
    text: TextTruth | None
    cues: tuple = ()
    fact: FactTruth | None = None

    def to_dict(self) -> dict:
        """JSON-ready dict (boxes as nested lists, times also in seconds)."""
        d = asdict(self)
        d["objects"] = [asdict(o) for o in self.objects]
        for o in d["objects"]:
            o["start_s"] = o["start_frame"] / self.fps
            o["end_s"] = o["end_frame"] / self.fps
        if self.text is not None:
            d["text"]["start_s"] = self.text.start_frame / self.fps
            d["text"]["end_s"] = self.text.end_frame / self.fps
        return d

    @staticmethod
    def from_dict(d: dict) -> "SceneTruth":
        """Inverse of :meth:`to_dict` (extra keys ignored)."""
        keys = ObjectTruth.__dataclass_fields__
        objs = tuple(ObjectTruth(**{k: v for k, v in o.items() if k in keys}) for o in d["objects"])
        t = d.get("text")
        text = None if t is None else TextTruth(t["text"], t["start_frame"], t["end_frame"], t["box"])
        cues = tuple(Cue(c["start_s"], c["end_s"], c["text"]) for c in d.get("cues") or ())
        fact = FactTruth(**d["fact"]) if d.get("fact") else None
        return SceneTruth(d["seed"], d["width"], d["height"], d["num_frames"], d["fps"],
                          d["background"], objs, text, cues, fact)


@dataclass(frozen=True)
class SceneSpec:
    """Knobs for :func:`generate`; ``None`` means "sample at random".

    Attributes:
        num_frames: T (>= 2).
        height, width: frame size in pixels (>= 56; even sizes suit H.264).
        fps: clip frame rate (Hz).
        num_objects: 1..3 or None.
        text_prob: probability of burned-in text.
        enter_leave_prob: per-object probability of entering and (separately) leaving mid-video.
        size_range: object side as a fraction of min(H, W).
        colours, shapes, motions: restrict the sampled vocabularies.
    """

    num_frames: int = 16
    height: int = 112
    width: int = 112
    fps: float = 8.0
    num_objects: int | None = None
    text_prob: float = 0.5
    enter_leave_prob: float = 0.15
    size_range: tuple = (0.30, 0.40)
    colours: tuple = tuple(COLOURS)
    shapes: tuple = SHAPES
    motions: tuple = MOTIONS


def _background(rng: np.random.Generator, h: int, w: int) -> tuple[str, np.ndarray]:
    kind = BACKGROUNDS[rng.integers(len(BACKGROUNDS))]
    tone = np.array(BACKGROUND_TONES[rng.integers(len(BACKGROUND_TONES))], np.float32)
    img = np.broadcast_to(tone, (h, w, 3)).copy()
    yy, xx = np.mgrid[0:h, 0:w]
    amp = 18.0
    if kind == "noise":
        img += rng.normal(0, amp * 0.6, (h, w, 1)).astype(np.float32)
    elif kind == "stripes":
        period = int(rng.integers(8, 20))
        img += np.where(((xx + yy) // period) % 2 == 0, amp, -amp)[..., None]
    elif kind == "checker":
        cell = int(rng.integers(8, 20))
        img += np.where(((xx // cell) + (yy // cell)) % 2 == 0, amp, -amp)[..., None]
    return kind, np.clip(img, 0, 255).astype(np.uint8)


def _shape_mask(shape: str, s: int) -> np.ndarray:
    """Boolean (s, s) mask of a shape filling its box."""
    yy, xx = np.mgrid[0:s, 0:s].astype(np.float32) + 0.5
    if shape == "circle":
        r = s / 2.0
        return (xx - r) ** 2 + (yy - r) ** 2 <= r * r
    if shape == "square":
        return np.ones((s, s), bool)
    # upward triangle: apex at top centre, base at the bottom
    half = (yy / s) * (s / 2.0)
    return np.abs(xx - s / 2.0) <= half


def _trajectory(rng, motion: str, n: int, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """(n, 2) float top-left positions (x, y) within [lo, hi] for a motion over n frames."""
    start = lo + rng.random(2) * (hi - lo)
    pos = np.repeat(start[None], n, axis=0)
    t = np.linspace(0.0, 1.0, n) if n > 1 else np.zeros(1)
    if motion == "static":
        return pos
    if motion == "bouncing":
        axis = int(rng.integers(2))
        legs = int(rng.integers(2, 4))
        phase = (t * legs) % 2.0
        tri = np.where(phase <= 1.0, phase, 2.0 - phase)
        go_up = rng.random() < 0.5
        frac = tri if go_up else 1.0 - tri
        pos[:, axis] = lo[axis] + frac * (hi[axis] - lo[axis])
        return pos
    axis = 0 if motion in ("left to right", "right to left") else 1
    span = (hi[axis] - lo[axis]) * rng.uniform(0.75, 1.0)
    a = lo[axis] + rng.random() * (hi[axis] - lo[axis] - span)
    forward = motion in ("left to right", "down")
    pos[:, axis] = a + (t if forward else 1.0 - t) * span
    return pos


def _overlaps(a: np.ndarray, b: np.ndarray) -> bool:
    """True when two (T, 4) box tracks intersect on any frame where both are visible."""
    vis = (a[:, 0] >= 0) & (b[:, 0] >= 0)
    ix = np.minimum(a[:, 2], b[:, 2]) - np.maximum(a[:, 0], b[:, 0])
    iy = np.minimum(a[:, 3], b[:, 3]) - np.maximum(a[:, 1], b[:, 1])
    return bool(np.any(vis & (ix > -2) & (iy > -2)))


def _sample_object(rng, spec: SceneSpec, used: set) -> tuple:
    T, H, W = spec.num_frames, spec.height, spec.width
    while True:
        colour = spec.colours[rng.integers(len(spec.colours))]
        shape = spec.shapes[rng.integers(len(spec.shapes))]
        if (colour, shape) not in used:
            break
    motion = spec.motions[rng.integers(len(spec.motions))]
    s = int(round(min(H, W) * rng.uniform(*spec.size_range)))
    enters = T >= 8 and rng.random() < spec.enter_leave_prob
    leaves = T >= 8 and rng.random() < spec.enter_leave_prob
    t0 = int(rng.integers(T // 4, T // 2 + 1)) if enters else 0
    t1 = int(rng.integers((T + 1) // 2 + T // 4, T - T // 8 + 1)) if leaves else T
    if t1 - t0 < max(2, T // 3):
        t0, t1, enters, leaves = 0, T, False, False
    margin = 2
    lo = np.array([margin, margin], np.float32)
    hi = np.array([W - s - margin, H - s - margin], np.float32)
    traj = _trajectory(rng, motion, t1 - t0, lo, hi)
    boxes = np.full((T, 4), -1, np.int64)
    xy = np.round(traj).astype(np.int64)
    boxes[t0:t1, 0:2] = xy
    boxes[t0:t1, 2:4] = xy + s
    return colour, shape, motion, s, t0, t1, enters, leaves, boxes


def _render_text(text: str, scale: int) -> np.ndarray:
    """Boolean glyph bitmap (7*scale, (6*len-1)*scale) of ``text`` in the built-in 5x7 font."""
    cols = []
    for i, ch in enumerate(text):
        rows = _FONT[ch]
        g = np.array([[(r >> (4 - c)) & 1 for c in range(5)] for r in rows], bool)
        cols.append(g)
        if i < len(text) - 1:
            cols.append(np.zeros((7, 1), bool))
    bm = np.concatenate(cols, axis=1)
    return np.kron(bm, np.ones((scale, scale), bool))


def _sample_text(rng, spec: SceneSpec) -> tuple[TextTruth, np.ndarray] | None:
    T, H, W = spec.num_frames, spec.height, spec.width
    if rng.random() >= spec.text_prob:
        return None
    text = str(int(rng.integers(10))) if rng.random() < 0.6 else WORDS[rng.integers(len(WORDS))]
    pad = 3
    scale = max(1, min(int(H * 0.30) // 7, (W - 2 * pad - 4) // (6 * len(text) - 1)))
    glyph = _render_text(text, scale)
    gh, gw = glyph.shape
    x0 = (W - gw) // 2 - pad
    y0 = int(rng.choice([H - gh - 2 * pad - 2, 2]))
    n = int(rng.integers(max(2, int(0.3 * T)), max(3, int(0.7 * T)) + 1))
    n = min(n, T)
    t0 = int(rng.integers(0, T - n + 1))
    box = [int(x0), int(y0), int(x0 + gw + 2 * pad), int(y0 + gh + 2 * pad)]
    return TextTruth(text, t0, t0 + n, box), glyph


def generate(seed: int, spec: SceneSpec | None = None) -> tuple[np.ndarray, SceneTruth]:
    """Generate one clip.

    Args:
        seed: RNG seed; the same (seed, spec) always gives the same frames and truth.
        spec: scene settings (defaults: 16 frames of 112x112 at 8 fps).

    Returns:
        frames: uint8 array (T, H, W, 3), RGB.
        truth: :class:`SceneTruth`.

    Raises:
        SynthError: frame size under 56 px or fewer than 2 frames.
    """
    spec = spec or SceneSpec()
    T, H, W = spec.num_frames, spec.height, spec.width
    if T < 2 or H < 56 or W < 56:
        raise SynthError(f"need num_frames >= 2 and frames >= 56x56 px, got T={T}, {H}x{W}")
    rng = np.random.default_rng(seed)
    bg_kind, bg = _background(rng, H, W)
    n_obj = spec.num_objects or int(rng.integers(1, 4))
    objs: list[tuple] = []
    for _ in range(n_obj):
        used = {(o[0], o[1]) for o in objs}
        cand = None
        for _try in range(60):
            cand = _sample_object(rng, spec, used)
            if not any(_overlaps(cand[8], o[8]) for o in objs):
                break
        objs.append(cand)
    text = _sample_text(rng, spec)
    frames = np.repeat(bg[None], T, axis=0)
    masks = {}
    for colour, shape, _m, s, t0, t1, _e, _l, boxes in objs:
        mask = masks.setdefault((shape, s), _shape_mask(shape, s))
        rgb = np.array(COLOURS[colour], np.uint8)
        for t in range(t0, t1):
            x0, y0 = boxes[t, 0], boxes[t, 1]
            frames[t, y0:y0 + s, x0:x0 + s][mask] = rgb
    text_truth = None
    if text is not None:
        text_truth, glyph = text
        x0, y0, x1, y1 = text_truth.box
        region = frames[text_truth.start_frame:text_truth.end_frame, y0:y1, x0:x1]
        region[:] = 0
        region[:, 3:3 + glyph.shape[0], 3:3 + glyph.shape[1]][:, glyph] = 255
    order = sorted(range(n_obj), key=lambda i: (objs[i][8][objs[i][4], 0], objs[i][8][objs[i][4], 1]))
    truths = tuple(
        ObjectTruth(c, sh, m, t0, t1, bool(e), bool(l), boxes.tolist())
        for (c, sh, m, _s, t0, t1, e, l, boxes) in (objs[i] for i in order)
    )
    truth = SceneTruth(int(seed), W, H, T, float(spec.fps), bg_kind, truths, text_truth)
    return frames, truth
