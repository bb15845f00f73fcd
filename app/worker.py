"""The GPU work of one Run: decode the video, run vanilla then speculative decoding, and yield
plain, picklable data only (text pieces, numbers, lists, numpy arrays, small frozen dataclasses).

On a Hugging Face ZeroGPU Space :meth:`DecodeWorker.run` is decorated with ``spaces.GPU`` (see
:func:`app.zerogpu.gpu_function`): it then runs in a forked worker process, its argument (:class:`RunJob`) and
every batch it yields are pickled, and what it changes stays in that process. The page's updates
are built from the yielded data in the main process (:mod:`app.view`). Off ZeroGPU the decorator
is a no-op and the same generator runs in the request's thread.

Each speculative or vanilla run decodes in its own thread that consumes the engine's stream as
fast as it can, so pickling and page rendering never add to the measured decode time; the
generator yields batched messages at most every ``update_interval_s`` (and an empty batch at
least every :data:`app.pump.HEARTBEAT_S`). The video is read in such a thread too. Stop is a close:
when the consumer closes this generator (Stop, a closed page; on ZeroGPU ``spaces`` closes it in
the worker process), ``GeneratorExit`` ends the thread through the engine's ``should_stop``, which
the engine polls between frames, between prefill layers and before every decode step
(:mod:`app.pump`).

Source: docs/design.md §1-3; §9 (ZeroGPU); SpecVLM (arXiv 2508.16201) Sec. 4.12 (metrics).
"""
from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Callable, Iterator
from typing import Any

from app import plots
from app.progress import LayerTicks, expected_polls
from app.pump import pump
from app.failures import free_memory, handle_failure
from app.settings import UserError
from app.stage_note import stage1_note
from app.timing import LoadMeter, PairTiming
from app.uploads import upload_name
from specvlm.types import PrefillInfo, StepEvent, Stopped

log = logging.getLogger(__name__)

WORKER_PREFIX = "specvlm-decode-"
"""Name prefix of the threads that read the video and decode."""


# ---- what goes in and what comes out (plain data) ------------------------------------------

@dataclasses.dataclass(frozen=True)
class RunJob:
    """One Run's work, checked in the main process (picklable).

    Attributes:
        video: path of the video.  prompt: the question.
        dec: the speculative run's ``DecodeConfig`` (vanilla uses it with ``method="vanilla"``).
        vid: the ``VideoConfig``.
        model: ``(target, draft)``; draft None = Self-SD.
        subtitles: parsed cues (empty: no transcript).  subtitle_mode: who sees them.
        truth: a generated clip's ground truth (forces the on-screen-text tokens), or None.
        record_meta: JSON-ready settings added to the run record's ``meta``.
        slot: the device the Run holds (:class:`app.devices.Slot`; None: the backend's first).
        pairs: interleaved vanilla / speculative pairs of runs; pairs after the first are timed only
            (:class:`app.timing.PairTiming`), for the median speedup.
    """

    video: str
    prompt: str
    dec: Any
    vid: Any
    model: tuple[str, str | None]
    subtitles: tuple = ()
    subtitle_mode: str = "both"
    truth: dict | None = None
    record_meta: dict = dataclasses.field(default_factory=dict)
    slot: Any = None
    pairs: int = 1


@dataclasses.dataclass(frozen=True)
class Phase:
    """A phase starts: ``frames`` (decoding the video), ``vanilla`` or ``spec`` (prefill of that run),
    ``repeat`` (more timing pairs), ``explain`` (why the speculative run's failing steps failed, after both
    results were sent)."""

    name: str


@dataclasses.dataclass(frozen=True)
class ClipReady:
    """The video is decoded: frame count, the clip's notes and, when no subtitle cue overlaps the
    sampled frames (so the prompt got no transcript), the note that says so."""

    num_frames: int
    notes: tuple[str, ...] = ()
    transcript_gap: str | None = None


@dataclasses.dataclass(frozen=True)
class Prefill:
    """A run's :class:`specvlm.types.PrefillInfo` (the engine's own record, without its tensors: the token
    grid and the pruning sets stay in the worker) and, for a pruned run, its kept counts and heatmaps.

    ``heatmaps`` is None without pruning, else ``{"stages": [(image (H, W, 3) uint8, caption)],
    "scores": [...] or None, "fpt": frames per token, "note": str, "summary": str}``.
    """

    run: str
    info: PrefillInfo
    num_kept: int | None = None
    num_forced: int = 0
    heatmaps: dict | None = None
    prefill_s = property(lambda self: self.info.prefill_s)
    prune_s = property(lambda self: self.info.prune_s)
    draft_prefill_s = property(lambda self: self.info.draft_prefill_s)
    num_video_tokens = property(lambda self: self.info.num_video_tokens)


@dataclasses.dataclass(frozen=True)
class Step:
    """One decode or verify step: the engine's :class:`specvlm.types.StepEvent` (its drafted tree left out:
    the run's record keeps it) and its per-token (text, from_draft) pieces."""

    run: str
    event: StepEvent
    pieces: tuple[tuple[str, bool], ...]

    step = property(lambda self: self.event.step)
    token_ids = property(lambda self: self.event.token_ids)
    accept_length = property(lambda self: self.event.accept_length)
    elapsed_s = property(lambda self: self.event.elapsed_s)
    num_generated = property(lambda self: self.event.num_generated)


@dataclasses.dataclass(frozen=True)
class RunEnd:
    """A run finished on its own (EOS or the token budget)."""

    run: str


@dataclasses.dataclass(frozen=True)
class Outcome:
    """Both runs finished: the first divergence (None = identical) with a few tokens of context, its kind
    (``near-tie`` or ``mismatch``, :class:`specvlm.analysis.metrics.Divergence`), the target's top-1 minus top-2
    logit margin there (None when vanilla recorded none) and the dtype's near-tie threshold."""

    index: int | None
    num_tokens: int
    vanilla_context: str = ""
    spec_context: str = ""
    kind: str = "identical"
    margin: float | None = None
    threshold: float | None = None
    dtype: str = ""


@dataclasses.dataclass(frozen=True)
class Record:
    """The speculative run's record for Inspect / Export (``specvlm.analysis.records.to_dict``)."""

    data: dict


@dataclasses.dataclass(frozen=True)
class Failure:
    """The run ended with an error; ``message`` is shown as-is."""

    message: str


# ---- the worker ----------------------------------------------------------------------------

class DecodeWorker:
    """Runs :class:`RunJob` s over the engine; :meth:`run` is the (decorated) GPU function.

    Args:
        engine: the ``specvlm`` facade (:class:`app.engine.Engine` or a fake).
        get_pair: ``(target, draft, slot) -> ModelPair`` from the backend's cache for the Run's device
            (loaded at app start; a fresh worker process loads what it lacks).
        update_interval_s: minimum seconds between yielded batches while decoding.
        public: the server is public: a failure's message names no exception (:func:`app.failures.failure_message`).
    """

    def __init__(self, engine: Any, get_pair: Callable[..., Any], update_interval_s: float,
                 public: bool = False) -> None:
        self.engine = engine
        self.public = public
        self.get_pair = get_pair
        self.update_interval_s = update_interval_s

    def run(self, job: RunJob) -> Iterator[list[Any]]:
        """Decode ``job``; yields lists of messages (:class:`Phase` ... :class:`Failure`). Errors never
        raise: they end the run with one :class:`Failure` (after an out-of-memory error the traceback
        is dropped and accelerator memory released first)."""
        failure, free = None, False
        try:
            yield from self._run(job)
        except Exception as e:  # the server keeps running whatever happens
            failure, free = handle_failure(self.engine, e, self.public)
        if failure is not None:
            if free:  # outside the except block, so the exception no longer holds any tensor
                free_memory(self.engine)
            yield [Failure(failure)]

    def _run(self, job: RunJob) -> Iterator[list[Any]]:
        pair = self.get_pair(*job.model, job.slot)
        vid = job.vid
        if getattr(pair, "frames_per_token", 1) > 1 and vid.num_frames % pair.frames_per_token:
            vid = dataclasses.replace(vid, even_frames=True)
        yield [Phase("frames")]
        clip = yield from self._load_clip(job.video, vid)
        notes = tuple(getattr(clip, "notes", []) or [])
        yield [ClipReady(len(clip.frames), notes, _subtitle_gap(job.subtitles, clip))]
        extra: dict[str, Any] = {}
        if job.subtitles:
            extra.update(subtitles=list(job.subtitles), subtitle_mode=job.subtitle_mode)
        spec_extra = extra | ({"truth": job.truth} if job.truth is not None else {})
        vanilla = dataclasses.replace(job.dec, method="vanilla")
        decode = _decoder(pair)
        meter = LoadMeter()
        if str(getattr(pair, "device", "cpu")).startswith("cpu"):
            meter.start()
        yield [Phase("vanilla")]
        van = yield from self._one("vanilla", vanilla, pair, clip, job.prompt, extra, decode)
        yield [Phase("spec")]
        spec = yield from self._one("spec", job.dec, pair, clip, job.prompt, spec_extra, decode)
        if job.pairs > 1:
            yield [Phase("repeat")]
        for i in range(2, job.pairs + 1):
            v = yield from self._one("vanilla", vanilla, pair, clip, job.prompt, extra, None, timed_only=True)
            sp = yield from self._one("spec", job.dec, pair, clip, job.prompt, spec_extra, None, timed_only=True)
            yield [PairTiming(i, job.pairs, *_decode_time(v), *_decode_time(sp))]
        dtype = getattr(getattr(pair, "target", None), "dtype", None) or "float32"
        rec = self._record(spec, job, pair, clip)
        yield [_outcome(van, spec, decode, dtype), meter.stop()] + ([Record(_to_dict(rec))] if rec else [])
        if rec is not None and hasattr(self.engine, "explain"):
            yield [Phase("explain")]
            yield from self._explain(rec, job, pair, clip)

    def _load_clip(self, path: str, vid: Any) -> Iterator[list[Any]]:
        """Read the video in a thread (Stop ends it between frames); yields heartbeats, returns the clip."""
        clip, ticks = None, LayerTicks("frames")
        batches = pump(lambda stop: [self.engine.load_video(path, vid, should_stop=ticks.watch(stop))],
                       f"{WORKER_PREFIX}frames", self.update_interval_s)
        try:
            with contextlib.closing(batches):  # a close (Stop) ends the reading thread before it returns
                for items, _ in batches:
                    clip = items[-1] if items else clip
                    yield ticks.news()   # per frame batch read; [] = a heartbeat
        except ImportError as e:
            raise UserError(f"The video reader is not installed: {e}") from e
        except ValueError as e:  # VideoError and friends
            raise UserError(f"Could not read the video: {upload_name(e, path)}") from e
        return clip

    def _one(self, name: str, dec: Any, pair: Any, clip: Any, prompt: str, extra: dict[str, Any],
             decode: Callable[[list[int]], str] | None, timed_only: bool = False) -> Iterator[list[Any]]:
        """Decode one run in a thread; yields batches; returns the engine's events.

        The thread always ends before this returns or is closed (the stop flag is set unless the run
        finished; the engine polls it between prefill layers and every step), so a stopped run uses
        no CPU/GPU afterwards. ``timed_only``: yield heartbeats only (a timing repeat).
        """
        splitter, events = TextSplitter(decode), []
        ticks = LayerTicks(name, expected_polls(self.engine, pair, dec.method))   # progress per prefill layer
        batches = pump(lambda stop: ticks.counted(self.engine.stream(pair, clip, prompt, dec, ticks.watch(stop),
                                                                     **extra)),
                       f"{WORKER_PREFIX}{name}", self.update_interval_s)
        with contextlib.closing(batches):  # a close (Stop) ends the decode thread before it returns
            for items, finished in batches:
                events.extend(items)
                if timed_only:
                    yield []
                    continue
                top_p = getattr(getattr(dec, "prune", None), "top_p", None)
                yield ticks.news() + [_message(name, it, clip, splitter, top_p) for it in items] + (
                    [RunEnd(name)] if finished else [])
        return events

    def _record(self, events: list[Any], job: RunJob, pair: Any, clip: Any) -> Any:
        """The speculative run's record (None if the engine keeps none; never fails the run)."""
        make = getattr(self.engine, "make_record", None)
        if make is None or not events:
            return None
        try:
            rec = make(events, job.dec, job.prompt, pair, clip)
        except Exception:  # inspection is optional; the comparison already succeeded
            log.warning("could not build the run record", exc_info=True)
            return None
        if job.record_meta and isinstance(getattr(rec, "meta", None), dict):
            rec.meta.update(job.record_meta)
        return rec

    def _explain(self, rec: Any, job: RunJob, pair: Any, clip: Any) -> Iterator[list[Any]]:
        """Why the record's lowest-acceptance steps failed (one extra target pass, in a thread that Stop
        ends between layers); yields heartbeats, then the explained :class:`Record`. A failure is logged and
        leaves the record already sent as it was."""
        ticks = LayerTicks("explain", expected_polls(self.engine, pair, "vanilla"))   # a vanilla prefill's layers
        batches = pump(lambda stop: [self.engine.explain(rec, pair, clip, job.prompt, subtitles=list(job.subtitles),
                                                         subtitle_mode=job.subtitle_mode, truth=job.truth,
                                                         should_stop=ticks.watch(stop))],
                       f"{WORKER_PREFIX}explain", self.update_interval_s)
        explained = None
        try:
            with contextlib.closing(batches):  # a close (Stop) ends the thread before it returns
                for items, _ in batches:
                    explained = items[-1] if items else explained
                    yield ticks.news()   # per layer; [] = a heartbeat
        except Stopped:
            return
        except Exception:  # the record without explanations is still useful
            log.warning("could not explain the run's failing steps", exc_info=True)
            return
        if explained is not None:
            yield [Record(_to_dict(explained))]


class TextSplitter:
    """Per-token (text, from_draft) pieces by incremental decoding; the event's text as one piece
    if there is no tokenizer or decoding fails."""

    def __init__(self, decode: Callable[[list[int]], str] | None) -> None:
        self.decode = decode
        self.ids: list[int] = []
        self._decoded = ""  # decode(ids) after the last complete token

    def split(self, ev: Any) -> list[tuple[str, bool]]:
        """Pieces of one StepEvent (an incomplete UTF-8 sequence waits for the next token)."""
        flags = list(ev.from_draft) or [False] * len(ev.token_ids)
        if self.decode is None:
            self.ids.extend(int(t) for t in ev.token_ids)
            return [(ev.text, bool(flags) and all(flags))]
        out = []
        try:
            for tok, fd in zip(ev.token_ids, flags):
                self.ids.append(int(tok))
                full = self.decode(self.ids)
                if full.endswith("\ufffd"):
                    continue
                out.append((full[len(self._decoded):], bool(fd)))
                self._decoded = full
        except Exception:  # a tokenizer quirk must not break the page
            log.exception("per-token decode failed; falling back to event text")
            self.decode = None
            return [(ev.text, all(flags))]
        return out


def _message(name: str, ev: Any, clip: Any, splitter: TextSplitter, top_p: float | None = None) -> Any:
    """A StepEvent or PrefillInfo as a plain :class:`Step` / :class:`Prefill` (``top_p``: the run's λ)."""
    if isinstance(ev, StepEvent):
        return Step(name, dataclasses.replace(ev, tree=None), tuple(splitter.split(ev)))
    p = ev.prune
    return Prefill(name, dataclasses.replace(ev, prune=None, token_grid=None), None if p is None else int(p.num_kept),
                   forced_count(p), None if p is None else heatmaps(clip, ev, top_p))


def heatmaps(clip: Any, info: Any, top_p: float | None = None) -> dict[str, Any]:
    """Both gallery variants for the heatmap toggle (see :class:`Prefill`), computed once per run; the note says
    what Stage I kept and why (:func:`app.stage_note.stage1_note`, ``top_p`` = the run's λ)."""
    p = info.prune
    fpt = int(getattr(info, "frames_per_token", 1) or 1)
    common = dict(keep=p.keep, stage1=p.stage1, stage2=p.stage2, frames_per_token=fpt,
                  timestamps=getattr(clip, "timestamps", None))
    if info.token_grid is None:
        return {"stages": [], "scores": None, "fpt": fpt, "note": "This model gave no token → frame map, so no heatmap."}
    out = {"stages": plots.heatmap_gallery(clip.frames, info.token_grid, mode="stages", **common),
           "scores": None, "fpt": fpt, "note": stage1_note(p, top_p)}
    if p.scores is not None:
        out["scores"] = plots.heatmap_gallery(clip.frames, info.token_grid, mode="scores", scores=p.scores, **common)
    out["summary"] = f"{p.num_video_tokens} video tokens → {p.num_kept} kept for the draft ({p.method})"
    return out


def forced_count(prune: Any) -> int:
    """How many video tokens a PruneResult kept because they were forced (0 without ``forced``)."""
    forced = getattr(prune, "forced", None)
    if forced is None:
        return 0
    return int(forced.numel()) if hasattr(forced, "numel") else len(forced)


def _to_dict(rec: Any) -> dict:
    from specvlm.analysis.records import to_dict
    return to_dict(rec)


def _decode_time(events: list[Any]) -> tuple[float, int]:
    """(decode seconds, tokens generated) of a run's events (the last step's clock and count)."""
    steps = [ev for ev in events if hasattr(ev, "step")]
    return (float(steps[-1].elapsed_s), int(steps[-1].num_generated)) if steps else (0.0, 0)


def _outcome(van: list[Any], spec: list[Any], decode: Callable[[list[int]], str] | None, dtype: Any) -> Outcome:
    """The two runs' token ids compared by ``specvlm.analysis.metrics.compare_outputs`` (identical, or the first
    divergence classified by the target's top-1 minus top-2 logit margin there, as vanilla saw it)."""
    from specvlm.analysis.metrics import compare_outputs
    steps = [[ev for ev in evs if hasattr(ev, "step")] for evs in (van, spec)]
    ids = [[int(t) for ev in evs for t in ev.token_ids] for evs in steps]
    margins: list[float] = []
    for ev in steps[0]:  # vanilla: one token per step; stop at the first step without a margin
        m = getattr(ev, "margin", None)
        if m is None:
            break
        margins.extend([float(m)] * len(ev.token_ids))
    try:
        d = compare_outputs(ids[0], ids[1], margins, dtype)
    except ValueError:  # a dtype without a near-tie threshold: report the divergence as a mismatch
        d = compare_outputs(ids[0], ids[1], [], "float32")
    if d.identical:
        return Outcome(None, len(ids[0]))
    return Outcome(d.index, len(ids[0]), *[_near(decode, x, d.index) for x in ids], kind=d.kind, margin=d.margin,
                   threshold=d.threshold, dtype=str(dtype).removeprefix("torch."))


def _near(decode: Callable[[list[int]], str] | None, ids: list[int], i: int) -> str:
    if decode is None:
        return ""
    try:
        return decode(ids[max(0, i - 3): i + 3])
    except Exception:
        return ""


def _subtitle_gap(cues: Any, clip: Any) -> str | None:
    """The note for a transcript none of whose cues overlaps the sampled frames (else None)."""
    ts = getattr(clip, "timestamps", None)
    if not cues or ts is None:
        return None
    from specvlm.text.prompting import no_transcript_note
    return no_transcript_note(list(cues), ts)


def _decoder(pair: Any) -> Callable[[list[int]], str] | None:
    """ids -> text with special tokens skipped, from the pair's tokenizer (None if absent)."""
    tok = getattr(pair, "processor", None)
    tok = getattr(tok, "tokenizer", tok)
    if tok is None or not hasattr(tok, "decode"):
        return None
    return lambda ids: tok.decode(ids, skip_special_tokens=True)


# ---- failures --------------------------------------------------------------------------------
