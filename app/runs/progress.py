"""Progress inside the Run's long blocking work: reading the video, each prefill, the explanation pass.

Each of these is one blocking engine call that can take many seconds on a long video (a 256-frame clip:
tens of seconds of prefill on a CPU), so the page needs progress from inside it. The engine already polls
the Run's ``should_stop`` callback at fixed points: between frames while reading the video
(:func:`specvlm.video.load_video`), on entry to a prefill and before every vision block and every decoder
layer (:mod:`specvlm.models.stopping`), before every decode step. :class:`LayerTicks` is that callback with
a counter: every poll is one unit of work done, so the worker reports one :class:`LayerProgress` message per
poll (per frame batch, per layer) from the thread that waits on the work, and the page's progress moves
once per layer however long the whole call takes. Nothing in the engine changes for it: the callback is
passed down as before.

Source: docs/design.md §8 (long generators, a Stop that reaches the work); §2 (the prefill's passes).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator
from typing import Any


@dataclasses.dataclass(frozen=True)
class LayerProgress:
    """One unit of a long call done (picklable: yielded by the GPU function).

    Attributes:
        phase: ``frames`` (reading the video), ``vanilla`` / ``spec`` (that run's prefill) or ``explain``
            (the explanation pass after both runs).
        done: polls so far in this call (1 = the call started).
        total: the polls the whole call is expected to make (:func:`prefill_layers`), or None when unknown.

    Source: this module (no external reference).
    """

    phase: str
    done: int
    total: int | None = None


class LayerTicks:
    """A ``should_stop`` callback that counts the engine's polls (see the module docstring).

    Args:
        phase: the :attr:`LayerProgress.phase` its messages carry.
        total: the expected number of polls, or None.

    Source: specvlm/models/stopping.py (the engine's polls between layers).
    """

    def __init__(self, phase: str, total: int | None = None) -> None:
        self.phase, self.total = phase, total
        self.count = 0
        self._reported = 0
        self._final: int | None = None
        self._should_stop: Callable[[], bool] = lambda: False

    def watch(self, should_stop: Callable[[], bool]) -> "LayerTicks":
        """Answer polls with ``should_stop()`` (the Run's stop flag); returns self, the callback to pass down."""
        self._should_stop = should_stop
        return self

    def __call__(self) -> bool:
        """One poll: count it, then say whether to stop."""
        self.count += 1
        return self._should_stop()

    def counted(self, events: Iterable[Any]) -> Iterator[Any]:
        """``events`` unchanged; polls after the first event (the decode steps after a prefill) are not reported."""
        for ev in events:
            if self._final is None:
                self._final = self.count
            yield ev

    def news(self) -> list[LayerProgress]:
        """One :class:`LayerProgress` per poll since the last call (called by the thread that waits on the work)."""
        now = self.count if self._final is None else min(self.count, self._final)
        out = [LayerProgress(self.phase, k, self.total) for k in range(self._reported + 1, now + 1)]
        self._reported = max(self._reported, now)
        return out


def expected_polls(engine: Any, pair: Any, method: str) -> int | None:
    """``engine.prefill_layers(pair, method)`` (:meth:`app.runs.facade.SpecvlmFacade.prefill_layers`), or None when the
    engine has no such method or it fails: progress is a display aid and never fails a run.

    Source: this module (no external reference).
    """
    count = getattr(engine, "prefill_layers", None)
    try:
        return count(pair, method) if count is not None else None
    except Exception:
        return None


def prefill_layers(pair: Any, method: str, checked: Callable[[Any], int]) -> int | None:
    """Polls of ``should_stop`` in one prefill (vanilla: the target's; speculative: the target's and the
    draft's): on entry, before each vision block, and before each decoder layer in pass A and pass B
    (docs/design.md §4.1); a draft prefill adds its entry, its layers and, for a draft with its own vision
    tower, its vision blocks. The explanation pass makes as many polls as a vanilla prefill.

    Args:
        pair: a :class:`specvlm.models.pair.ModelPair`.
        method: ``vanilla`` or a speculative method.
        checked: model -> number of its layers that poll the stop check before they run
            (:func:`specvlm.models.stopping.checked_layers`).

    Returns:
        the count, or None when the models' layer counts cannot be read.

    Source: docs/design.md §4.1 (two-pass prefill), §4.7 (draft prefill); specvlm/models/stopping.py (where
    the polls are).
    """
    try:
        target_layers = int(pair.target.config.get_text_config().num_hidden_layers)
        n = 1 + checked(pair.target) + 2 * target_layers
        if method != "vanilla":
            draft = pair.draft
            n += 1 + int(draft.config.get_text_config().num_hidden_layers)
            if not getattr(pair, "self_sd", True):
                n += checked(draft)
        return n
    except (AttributeError, TypeError, ValueError):
        return None


def phase_span(phase: str, phases: dict[str, tuple[float, str]]) -> tuple[float, float]:
    """(start, end) of a phase on the progress bar: from its fraction in ``phases`` (:data:`app.views.run_view.PHASES`,
    name -> (fraction, description)) to the next phase's.

    Source: this module (no external reference).
    """
    lo = phases[phase][0] if phase in phases else 0.0
    return lo, min((f for f, _ in phases.values() if f > lo), default=1.0)


def layer_status(msg: LayerProgress, phases: dict[str, tuple[float, str]], spec_name: str, num_frames: int,
                 notes: str = "") -> tuple[float, str, str]:
    """(fraction, progress description, status line) of a :class:`LayerProgress`.

    A run's prefill moves the bar through the first half of its phase's span (the second half is its
    decoding, :func:`decode_status`); the explanation pass through all of its span. Without a total the
    fraction still grows with every poll.

    Source: this module (no external reference).
    """
    label = {"frames": "Decoding video frames", "vanilla": "Prefill (vanilla)",
             "spec": f"Prefill + pruning ({spec_name})", "explain": "Explaining the failing steps"}.get(msg.phase,
                                                                                                     msg.phase)
    unit = "frame batch" if msg.phase == "frames" else "layer"
    of = f" of {msg.total}" if msg.total and msg.done <= msg.total else ""
    desc = f"{label}: {unit} {msg.done}{of}"
    lo, hi = phase_span(msg.phase, phases)
    part = min(msg.done / msg.total, 1.0) if msg.total else 1.0 - 1.0 / (1.0 + msg.done)
    frac = lo + (hi - lo) * (part if msg.phase == "explain" else part / 2)
    if msg.phase == "explain":
        status = f"{desc}… (Stop skips it)"
    elif msg.phase == "vanilla":   # the wording the status has had since the clip was read, with the layer
        status = f"Prefill (vanilla)… {num_frames} frames: {unit} {msg.done}{of}. {notes}".rstrip()
    else:
        status = f"{desc}… {notes}".rstrip()
    return frac, desc, status


def decode_status(phase: str, name: str, tokens: int, budget: int,
                  phases: dict[str, tuple[float, str]]) -> tuple[float, str]:
    """(fraction, progress description) after a decode step of run ``phase`` (``vanilla`` / ``spec``) shown as
    ``name``: the second half of the phase's span, ``tokens`` out of the ``budget`` (0: unknown).

    Source: this module (no external reference).
    """
    lo, hi = phase_span(phase, phases)
    part = min(tokens / budget, 1.0) if budget else 1.0 - 1.0 / (1.0 + tokens)
    return lo + (hi - lo) * (0.5 + part / 2), f"{name} decoding: {tokens}" + (f" of {budget}" if budget else "") + \
        " tokens"
