"""The GPU work of one Run: decode the video, prepare the model inputs once, run vanilla then speculative
decoding from them, and yield plain, picklable data only: the engine's own events (:class:`RunEvents`),
the library's :class:`specvlm.analysis.run.Comparison`, numbers, lists, numpy arrays, small frozen
dataclasses.

On a Hugging Face ZeroGPU Space :meth:`DecodeWorker.run` is decorated with ``spaces.GPU`` (see
:func:`app.runs.zerogpu.gpu_function`): it then runs in a forked worker process, its argument (:class:`RunJob`) and
every batch it yields are pickled, and what it changes stays in that process. The page's updates
are built from the yielded data in the main process (:mod:`app.views.run_view`). Off ZeroGPU the decorator
is a no-op and the same generator runs in the request's thread.

Each speculative or vanilla run decodes in its own thread that consumes the engine's stream as
fast as it can, so pickling and page rendering never add to the measured decode time; the
generator yields batched messages at most every ``update_interval_s`` (and an empty batch at
least every :data:`app.runs.pump.HEARTBEAT_S`). The video is read in such a thread too. Stop is a close:
when the consumer closes this generator (Stop, a closed page; on ZeroGPU ``spaces`` closes it in
the worker process), ``GeneratorExit`` ends the thread through the engine's ``should_stop``, which
the engine polls between frames, between prefill layers and before every decode step
(:mod:`app.runs.pump`).

Source: docs/design.md §1-3; §9 (ZeroGPU); SpecVLM (arXiv 2508.16201) Sec. 4.12 (metrics).
"""
from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Callable, Iterator
from typing import Any

from app.inputs.settings import UserError
from app.inputs.uploads import upload_name
from app.runs.facade import Facade
from app.runs.failures import free_memory, handle_failure
from app.runs.progress import LayerTicks, expected_polls
from app.runs.pump import pump
from app.runs.timing import LoadMeter, PairTiming
from app.views import plots
from app.views.stage_note import stage1_note
from specvlm.analysis.run import RunRecord, compare_runs, prefill_to_dict, run_speedup
from specvlm.config import vanilla_config
from specvlm.models.loading import load_dtype
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
        dec: the speculative run's ``DecodeConfig`` (vanilla runs :func:`specvlm.config.vanilla_config` of it).
        vid: the ``VideoConfig``.
        model: ``(target, draft)``; draft None = Self-SD.
        subtitles: parsed cues (empty: no transcript).  subtitle_mode: who sees them.
        truth: a generated clip's ground truth (forces the on-screen-text tokens), or None.
        record_meta: JSON-ready settings added to the run record's ``meta``.
        slot: the device the Run holds (:class:`app.runs.devices.Slot`; None: the backend's first).
        pairs: interleaved vanilla / speculative pairs of runs; pairs after the first are timed only
            (:class:`app.runs.timing.PairTiming`), for the median speedup.
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
class RunEvents:
    """A batch of one run's engine events, as plain data: each :class:`specvlm.types.StepEvent` without its
    drafted tree (the run's record keeps it) and the :class:`specvlm.types.PrefillInfo` as its record form
    (:func:`specvlm.analysis.run.prefill_to_dict`, without the scores and the token grid, which stay in the
    worker). ``finished``: the run ended on its own (EOS or the token budget) with this batch."""

    run: str
    events: tuple[dict | StepEvent, ...]
    finished: bool = False


@dataclasses.dataclass(frozen=True)
class Heatmaps:
    """The pruned run's heatmaps, computed once in the worker: ``{"stages": [(image (H, W, 3) uint8,
    caption)], "scores": [...] or None, "fpt": frames per token, "note": str, "summary": str}``."""

    data: dict


@dataclasses.dataclass(frozen=True)
class Record:
    """The speculative run's record for Inspect / Export (:meth:`specvlm.analysis.run.RunRecord.to_json`)."""

    data: dict


@dataclasses.dataclass(frozen=True)
class Failure:
    """The run ended with an error; ``message`` is shown as-is."""

    message: str


# ---- the worker ----------------------------------------------------------------------------

class DecodeWorker:
    """Runs :class:`RunJob` s over the engine; :meth:`run` is the (decorated) GPU function.

    Args:
        engine: the ``specvlm`` facade (:class:`app.runs.facade.Facade`: :class:`app.runs.facade.SpecvlmFacade` or
            a fake).
        get_pair: ``(target, draft, slot) -> ModelPair`` from the backend's cache for the Run's device
            (loaded at app start; a fresh worker process loads what it lacks).
        update_interval_s: minimum seconds between yielded batches while decoding.
        public: the server is public: a failure's message names no exception
            (:func:`app.runs.failures.failure_message`).
    """

    def __init__(self, engine: Facade, get_pair: Callable[..., Any], update_interval_s: float,
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
        vanilla = vanilla_config(job.dec)
        meter = LoadMeter()
        if str(getattr(pair, "device", "cpu")).startswith("cpu"):
            meter.start()
        yield [Phase("vanilla")]
        inputs = _Once(lambda: self.engine.prepare(pair, clip, job.prompt, subtitles=list(job.subtitles),
                                                   subtitle_mode=job.subtitle_mode, truth=job.truth))
        van = yield from self._one("vanilla", vanilla, pair, inputs, clip)
        yield [Phase("spec")]
        spec = yield from self._one("spec", job.dec, pair, inputs, clip)
        if job.pairs > 1:
            yield [Phase("repeat")]
        more = []
        for i in range(2, job.pairs + 1):
            v = yield from self._one("vanilla", vanilla, pair, inputs, None)
            sp = yield from self._one("spec", job.dec, pair, inputs, None)
            more.append(run_speedup(RunRecord.from_events(v), RunRecord.from_events(sp)))
            yield [PairTiming(i, job.pairs, more[-1])]
        dtype = (getattr(getattr(pair, "target", None), "dtype", None)           # the loaded target's; else the
                 or load_dtype(None, str(getattr(pair, "device", "cpu"))))      # loader's default on its device
        greedy = getattr(getattr(job.dec, "sampling", None), "greedy", True)
        compared = compare_runs(RunRecord.from_events(van), RunRecord.from_events(spec), dtype,
                                more_speedups=more, greedy=greedy)
        rec = self._record(spec, job, pair, clip)
        yield [compared, meter.stop()] + ([Record(rec.to_json())] if rec else [])
        if rec is not None:
            yield [Phase("explain")]
            yield from self._explain(rec, job, pair, inputs())

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

    def _one(self, name: str, dec: Any, pair: Any, inputs: _Once, clip: Any) -> Iterator[list[Any]]:
        """Decode one run in a thread, from the job's inputs (prepared by the first run's thread, once);
        yields batches; returns the engine's events.

        The thread always ends before this returns or is closed (the stop flag is set unless the run
        finished; the engine polls it between prefill layers and every step), so a stopped run uses
        no CPU/GPU afterwards. ``clip`` None: a timing repeat, which yields heartbeats only.
        """
        events: list[Any] = []
        ticks = LayerTicks(name)   # progress per prefill part (a vision block, a layer, a chunk of attention)

        def work(stop: Callable[[], bool]) -> Iterator[Any]:
            prepared = inputs()
            ticks.total = expected_polls(self.engine, pair, dec.method, prepared,
                                         getattr(getattr(dec, "prune", None), "drop_rate", None))
            return ticks.counted(self.engine.stream(pair, prepared, dec, ticks.watch(stop)))

        batches = pump(work, f"{WORKER_PREFIX}{name}", self.update_interval_s)
        with contextlib.closing(batches):  # a close (Stop) ends the decode thread before it returns
            for items, finished in batches:
                events.extend(items)
                if clip is None:
                    yield []
                    continue
                top_p = getattr(getattr(dec, "prune", None), "top_p", None)
                maps = [Heatmaps(heatmaps(clip, ev, top_p)) for ev in items
                        if isinstance(ev, PrefillInfo) and ev.prune is not None]
                maps += _added_maps(clip, events, top_p) if finished else []   # re-selection's tokens, at the end
                runs = [RunEvents(name, tuple(_plain(ev) for ev in items), finished)] if items or finished else []
                yield ticks.news() + maps + runs
        return events

    def _record(self, events: list[Any], job: RunJob, pair: Any, clip: Any) -> RunRecord | None:
        """The speculative run's record (None without events or when the engine keeps none; never fails the run)."""
        if not events:
            return None
        try:
            rec = self.engine.make_record(events, job.dec, job.prompt, pair, clip)
        except Exception:  # inspection is optional; the comparison already succeeded
            log.warning("could not build the run record", exc_info=True)
            return None
        if rec is not None:
            rec.meta.update(job.record_meta)
        return rec

    def _explain(self, rec: RunRecord, job: RunJob, pair: Any, inputs: Any) -> Iterator[list[Any]]:
        """Why the record's lowest-acceptance steps failed (one extra target pass, in a thread that Stop
        ends between layers); yields heartbeats, then the explained :class:`Record`. A failure is logged and
        leaves the record already sent as it was."""
        ticks = LayerTicks("explain", expected_polls(self.engine, pair, "explain", inputs))   # as a vanilla prefill
        batches = pump(lambda stop: [self.engine.explain(rec, pair, inputs, cues=list(job.subtitles),
                                                         subtitle_mode=job.subtitle_mode,
                                                         should_stop=ticks.watch(stop))],
                       f"{WORKER_PREFIX}explain", self.update_interval_s)
        explained = None
        try:
            with contextlib.closing(batches):  # a close (Stop) ends the thread before it returns
                for items, _ in batches:
                    explained = items[-1] if items else explained
                    yield ticks.news()   # per part, or its seconds; [] = a heartbeat
        except Stopped:
            return
        except Exception:  # the record without explanations is still useful
            log.warning("could not explain the run's failing steps", exc_info=True)
            return
        if explained is not None:
            yield [Record(explained.to_json())]


class _Once:
    """A value computed on the first call (in whichever thread makes it) and returned by every later call."""

    def __init__(self, make: Callable[[], Any]) -> None:
        self._make, self._value, self._made = make, None, False

    def __call__(self) -> Any:
        if not self._made:
            self._value, self._made = self._make(), True
        return self._value


def _plain(ev: Any) -> dict | StepEvent:
    """An engine event as plain data (:class:`RunEvents`)."""
    if isinstance(ev, StepEvent):
        return dataclasses.replace(ev, tree=None)
    d = prefill_to_dict(ev)
    d.update(scores=None, token_grid=None)
    return d


def _added_maps(clip: Any, events: list[Any], top_p: float | None) -> list[Heatmaps]:
    """The heatmaps again with the video tokens re-selection added (one :class:`Heatmaps`), or [] when none were."""
    info = next((ev for ev in events if isinstance(ev, PrefillInfo)), None)
    added = {ev.step: list(ev.added) for ev in events if isinstance(ev, StepEvent) and ev.added}
    return [Heatmaps(heatmaps(clip, info, top_p, added))] if added and info is not None and info.prune else []


def heatmaps(clip: Any, info: Any, top_p: float | None = None, added: dict[int, list[int]] | None = None) -> dict[str, Any]:
    """Both gallery variants for the heatmap toggle (see :class:`Heatmaps`), computed once per run (again at its end
    when re-selection added video tokens, ``added``: step -> tokens); the note says what Stage I kept and why
    (:func:`app.views.stage_note.stage1_note`, ``top_p`` = the run's λ)."""
    p = info.prune
    fpt = int(getattr(info, "frames_per_token", 1) or 1)
    common = dict(keep=p.keep, stage1=p.stage1, stage2=p.stage2, frames_per_token=fpt,
                  timestamps=getattr(clip, "timestamps", None), added=added)
    if info.token_grid is None:
        return {"stages": [], "scores": None, "fpt": fpt, "note": "This model gave no token → frame map, so no heatmap."}
    out = {"stages": plots.heatmap_gallery(clip.frames, info.token_grid, mode="stages", **common),
           "scores": None, "fpt": fpt, "note": stage1_note(p, top_p)}
    if p.scores is not None:
        out["scores"] = plots.heatmap_gallery(clip.frames, info.token_grid, mode="scores", scores=p.scores, **common)
    out["summary"] = f"{p.num_video_tokens} video tokens → {p.num_kept} kept for the draft ({p.method})"
    if added:
        out["summary"] += f", {sum(map(len, added.values()))} added during decoding at {len(added)} steps"
    return out


def _subtitle_gap(cues: Any, clip: Any) -> str | None:
    """The note for a transcript none of whose cues overlaps the sampled frames (else None)."""
    ts = getattr(clip, "timestamps", None)
    if not cues or ts is None:
        return None
    from specvlm.text.prompting import no_transcript_note
    return no_transcript_note(list(cues), ts)
