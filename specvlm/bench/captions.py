"""The caption and question grammar of the synthetic shape scenes (:mod:`specvlm.bench.synth`).

:func:`describe` turns a :class:`~specvlm.bench.synth.SceneTruth` into a short, information-dense
detailed description (the answer to "Describe this video in detail."), :func:`questions` into
single-attribute question/answer pairs, and :func:`parse_caption` reads a description back into
attributes for evaluation.

Source: the bundled demo model's training and evaluation data (assets/model/README.md); no external code.
"""
from __future__ import annotations

import numpy as np

from specvlm.bench.synth import COLOURS, FACT_KINDS, FLASH, NUMBER_WORDS, SHAPES, SceneTruth
from specvlm.config import DEFAULT_PROMPT

DESCRIBE_PROMPTS = (
    DEFAULT_PROMPT,
    "Please provide a detailed description of the video, focusing on the main subjects, "
    "their actions, and the background scenes.",
    "What happens in this video?",
    "Describe the video.",
)
"""Prompts whose answer is :func:`describe` (the first is the default)."""

_MOTION_PHRASE = {
    "static": "stays still",
    "left to right": "moves right",
    "right to left": "moves left",
    "up": "moves up",
    "down": "moves down",
    "bouncing": "bounces",
    FLASH: "flashes",
}


_OLD_MOTION_PHRASE = {"moves left to right": "left to right", "moves right to left": "right to left"}
"""Phrases of earlier caption grammars (read by :func:`parse_caption`, never written)."""


def motion_phrase(motion: str) -> str:
    """Caption phrase of a motion, e.g. ``"left to right"`` -> ``"moves right"``.

    The direction is one word (where the object goes), so the model never has to copy an earlier
    word to finish the phrase ("left to ..." -> "right"); :func:`parse_caption` also reads the long
    forms "moves left to right" / "moves right to left".
    """
    return _MOTION_PHRASE[motion]


def _count_word(n: int) -> str:
    return NUMBER_WORDS[n] if n < len(NUMBER_WORDS) else str(n)


def describe(truth: SceneTruth) -> str:
    """Detailed description, e.g. ``"red circle moves right. blue square stays still, appears
    later. two objects. text 7. plain background."``; with a subtitle fact its sentence
    (``"code 42."``) comes before the background.

    Object clauses come in a canonical order (colour in :data:`COLOURS` key order, then shape in
    :data:`SHAPES` order), whatever order the generator drew them in: a model writing the
    caption then never has to remember which objects it already named, only find the next
    colour present. The count comes after the clauses, so a model counts what it has just
    listed instead of committing to a number first (weights trained with the count first
    guessed it and then named objects twice to reach it); :func:`parse_caption` reads either
    order. Lower-case words only, one sentence per fact.
    """
    n = len(truth.objects)
    parts = []
    for o in sorted(truth.objects, key=lambda o: (list(COLOURS).index(o.colour), SHAPES.index(o.shape))):
        clause = f"{o.name} {_MOTION_PHRASE[o.motion]}"
        extra = [w for w, f in (("appears later", o.enters), ("leaves early", o.leaves)) if f]
        parts.append(clause + (", " + ", ".join(extra) if extra else "") + ".")
    parts.append(f"{_count_word(n)} object{'s' if n != 1 else ''}.")
    parts.append(f"text {truth.text.text}." if truth.text else "no text.")
    if truth.fact is not None:
        parts.append(truth.fact.sentence)
    parts.append(f"{truth.background} background.")
    return " ".join(parts)


def questions(truth: SceneTruth, rng: np.random.Generator) -> list[tuple[str, str]]:
    """Single-attribute question/answer pairs answerable from ``truth``.

    Returns:
        list of (question, answer) strings; answers are short and end with ".".
    """
    qa = [("How many objects are there?", f"{_count_word(len(truth.objects))}.")]
    shapes = [o.shape for o in truth.objects]
    colours = [o.colour for o in truth.objects]
    for o in truth.objects:
        if shapes.count(o.shape) == 1:
            qa.append((f"What colour is the {o.shape}?", f"{o.colour}."))
        if colours.count(o.colour) == 1:
            qa.append((f"What shape is the {o.colour} object?", f"{o.shape}."))
        qa.append((f"Which direction does the {o.name} move?", f"it {_MOTION_PHRASE[o.motion]}."))
    qa.append(("What text appears?", f"{truth.text.text}." if truth.text else "no text."))
    qa.append(("Is there any text on screen?", "yes." if truth.text else "no."))
    if truth.fact is not None:
        qa.append((FACT_QUESTIONS[truth.fact.kind], f"{truth.fact.value}."))
    rng.shuffle(qa)
    return qa


FACT_QUESTIONS = {"code": "What is the code?", "name": "What is the name?", "flag": "What colour is the flag?"}
"""The question whose answer is a subtitle fact's value, by kind."""


def parse_caption(text: str) -> dict:
    """Read a :func:`describe`-style caption back into attributes.

    Returns:
        dict with ``count`` (int or None), ``objects`` (list of dicts with colour,
        shape, motion; unknown parts None), ``text`` (str, "" for "no text", or None), ``fact``
        (``"<kind> <value>"`` lower-case, e.g. ``"name mia"``, or None).
    """
    out: dict = {"count": None, "objects": [], "text": None, "fact": None}
    # the whole phrase after "<colour> <shape>" must be one the grammar writes (or wrote): a garbled
    # "moves left to left" is no motion, not "moves left"
    inv_motion = {**_OLD_MOTION_PHRASE, **{v: k for k, v in _MOTION_PHRASE.items()}}
    for sent in (s.strip() for s in text.lower().split(".")):
        words = sent.split()
        if not words:
            continue
        if len(words) >= 2 and words[1].startswith("object") and words[0] in NUMBER_WORDS:
            out["count"] = NUMBER_WORDS.index(words[0])
        elif words[0] == "text" and len(words) >= 2:
            out["text"] = sent.split(None, 1)[1].strip().upper()
        elif sent.startswith("no text"):
            out["text"] = ""
        elif words[0] in FACT_KINDS and len(words) == 2:
            out["fact"] = sent
        elif words[0] in COLOURS or (len(words) > 1 and words[1] in SHAPES):
            head = sent.split(",")[0]
            motion = inv_motion.get(" ".join(head.split()[2:]))
            out["objects"].append({
                "colour": words[0] if words[0] in COLOURS else None,
                "shape": words[1] if len(words) > 1 and words[1] in SHAPES else None,
                "motion": motion,
                "enters": "appears later" in sent,
                "leaves": "leaves early" in sent,
            })
    return out
