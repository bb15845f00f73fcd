"""The app's backend: owns the loaded model pairs and the order of a Run.

A Run is checked here first, in the main process and before any model work (:mod:`app.inputs.settings`
for settings and limits, :mod:`app.inputs.uploads` for the files); its model pair is loaded (once: pairs
are cached, and ``app.py`` loads the default pair at start so a GPU window is spent decoding); then
the GPU function (:meth:`app.runs.worker.DecodeWorker.run`, decorated with ``spaces.GPU`` where the
``spaces`` package is installed) decodes and yields plain data, which :class:`app.views.run_view.RunView`
turns into the page's updates. Stop closes the worker's generator: the close reaches the decode
loop (on ZeroGPU through the ``spaces`` worker process) and ends it at its next step.

Update dicts use the keys in :data:`app.views.run_view.OUTPUT_KEYS` (plus ``"error"``, a readable message the
UI also shows as a toast); each carries only what changed, the last one everything.

Source: docs/design.md §1-3; §8 (Gradio traps); §9 (ZeroGPU).
"""
from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from app.inputs import uploads
from app.inputs.access import ModelAccess, resolve_custom
from app.inputs.model_messages import (HUB_UNREACHABLE, hub_reachable, missing_from_hub, model_error, needs_hub_error,
                                       run_caveat, shown_name)
from app.inputs.run_inputs import cues_text, request_extras
from app.inputs.settings import (MAX_SRT_MB, Limits, RunRequest, RunSettings, UserError, build_configs, check_prompt,
                                 device_type_of, preset_widgets, resolve, server_budget)
from app.runs import done_first, zerogpu
from app.runs.devices import DevicePool, Slot, wait_in_line
from app.runs.facade import Facade, SpecvlmFacade
from app.runs.failures import drop_frames, handle_failure
from app.runs.sessions import RunRegistry
from app.runs.worker import WORKER_PREFIX, DecodeWorker, RunJob
from app.views.run_view import RunView, final_status, fresh_outputs
from app.views.summary import comparison_json

__all__ = ["Backend", "WORKER_PREFIX"]

log = logging.getLogger(__name__)


class Backend:
    """Loads and caches model pairs, checks and runs comparisons, yields UI updates.

    Args:
        engine: the ``specvlm`` facade (:class:`app.runs.facade.Facade`; default
            :class:`app.runs.facade.SpecvlmFacade`); tests pass a fake.
        device: device for models (None: the engine picks, CUDA if available).
        dtype: model dtype name (None: the engine picks).
        devices: one entry per device that serves Runs at once, each with its own pair
            (:class:`app.runs.devices.DevicePool`; e.g. ``["cuda:0", "cuda:1"]``); None: ``[device]``.
        max_cached_pairs: model pairs kept loaded per device (1 frees the old pair before loading a new one).
        update_interval_s: minimum seconds between streamed updates.
        plot_interval_s: minimum seconds between chart updates while decoding.
        limits: per-request limits (default :meth:`Limits.from_env`).
        access: which custom models visitors may load (default: a loopback server's, any).
    """

    def __init__(self, engine: Facade | None = None, *, device: str | None = None, dtype: str | None = None,
                 devices: list[str | None] | None = None, max_cached_pairs: int = 1,
                 update_interval_s: float = 0.15, plot_interval_s: float = 0.4,
                 limits: Limits | None = None, access: ModelAccess | None = None) -> None:
        self.limits = limits or Limits.from_env()
        self.access = access or ModelAccess()
        self.engine: Facade = engine or SpecvlmFacade(video_timeout_s=self.limits.video_timeout_s)
        self.device = device
        self.dtype = dtype
        self.pool = DevicePool(devices or [device])
        """Free devices; a Run holds one from its model load to its end."""
        self.max_cached_pairs = max(1, max_cached_pairs)
        self.plot_interval_s = plot_interval_s
        self._pairs: OrderedDict[tuple, Any] = OrderedDict()
        self._load_lock = threading.Lock()
        self.runs = RunRegistry()
        self.worker = DecodeWorker(self.engine, self.get_pair, update_interval_s, self.access.public)
        self.gpu_run = zerogpu.gpu_function(self.worker.run)
        """The GPU function: ``gpu_run(job) -> iterator of message batches`` (plain data)."""

    # ---- presets and defaults ------------------------------------------------------------

    def preset_names(self) -> list[str]:
        """Preset names for the dropdown: on ZeroGPU those that fit its whole GPU
        (:func:`app.runs.zerogpu.fitting_presets`), elsewhere all (empty, with a warning, if the presets cannot
        be read)."""
        try:
            presets = self.engine.presets()
            return list(zerogpu.fitting_presets(presets) if zerogpu.active() else presets)
        except Exception:
            log.warning("specvlm presets not importable", exc_info=True)
            return []

    def default_settings(self) -> RunSettings:
        """Library defaults with the default preset's frames, token budget and draft tree."""
        try:
            preset = self.engine.default_preset()
        except Exception:
            preset = next(iter(self.preset_names()), "")
        return RunSettings(preset=preset, **self.preset_widgets(preset))

    def preset_widgets(self, name: str) -> dict:
        """What the preset decides where a request sets nothing (:func:`app.inputs.settings.resolve`, the API's
        and the CLI's resolver): its frames and token budget as this server offers them (ZeroGPU's budget, the
        limits) and its draft tree's top level, as RunSettings fields (an unknown preset: the library's)."""
        try:
            presets = self.engine.presets()
        except Exception:   # no engine: the library's defaults
            presets = {}
        return preset_widgets(resolve(RunSettings(preset=name), presets, self._cuda(), self.budget))

    def preset_tree(self, name: str) -> dict:
        """The preset's draft tree as RunSettings fields (the tree of :meth:`preset_widgets`)."""
        return {k: v for k, v in self.preset_widgets(name).items() if k not in ("num_frames", "max_new_tokens")}

    def budget(self, frames: int, tokens: int) -> tuple[int, int]:
        """A preset's (frames, new tokens) as this server offers them (ZeroGPU's budget, then the limits)."""
        return server_budget(self.limits, zerogpu.default_budget)(frames, tokens)

    def _cuda(self) -> bool:
        try:
            return bool(self.engine.cuda_available())
        except Exception:
            return False

    def preset_info(self, name: str) -> tuple[str, int, int]:
        """(Markdown description, suggested frames, suggested max new tokens) of a preset (on ZeroGPU capped by
        :func:`app.runs.zerogpu.default_budget`)."""
        from specvlm.models.presets import preset_defaults
        w = self.preset_widgets(name)
        frames, tokens = w["num_frames"], w["max_new_tokens"]
        try:
            p = preset_defaults(self.engine.presets()[name])
        except Exception:
            return "*Preset details unavailable (engine not installed).*", frames, tokens
        kind = ("Self-SD (draft = target weights)" if p.draft is None
                else f"Std-SD, draft `{shown_name(p.draft)}`")
        gpu = " · needs a CUDA GPU" if p.requires_cuda else ""
        reserve = zerogpu.settings_note(p.target, p.draft, frames, tokens)
        reserve = f"  \nOn ZeroGPU a Run with these frames and new tokens {reserve}." if reserve else ""
        hub = " · **needs the Hugging Face Hub, which this server cannot reach**" if missing_from_hub(
            self.engine, (p.target, p.draft)) else ""
        return f"{p.description}  \ntarget `{shown_name(p.target)}` · {kind}{gpu}{hub}{reserve}", frames, tokens

    def hub_note(self) -> str:
        """The page's line when the Hugging Face Hub cannot be reached ("" when it can)."""
        return "" if hub_reachable(self.engine) else HUB_UNREACHABLE

    # ---- models ----------------------------------------------------------------------------

    def resolve_model(self, s: RunSettings) -> tuple[str, str | None, str]:
        """(target, draft, display name) from the custom field or the preset.

        Raises:
            UserError: unknown preset, engine missing, a GPU-only preset without CUDA, Hub models that
                are not cached while the Hub cannot be reached, or a custom model :attr:`access` refuses.
        """
        custom = resolve_custom(s.custom_model, self.access, self.engine, self.device, self.dtype)
        if custom is not None:
            return custom
        try:
            presets = self.engine.presets()
        except ImportError as e:
            raise UserError(f"The specvlm engine is not installed correctly: {e}") from e
        if s.preset not in presets:
            raise UserError(f"Unknown preset {s.preset!r}: pick one from the list or enter a custom model.")
        p = presets[s.preset]
        if p.requires_cuda and not self.engine.cuda_available() and (self.device or "cuda").startswith("cuda"):
            raise UserError(f"Preset {s.preset!r} needs a CUDA GPU and none is available here: "
                            "pick a bundled CPU preset.")
        for path in (p.target, p.draft):
            if path and Path(path).is_absolute() and not Path(path).exists():
                raise UserError(f"Preset {s.preset!r} needs the model folder {shown_name(path)}, which is missing: "
                                "build or fetch the bundled model as the README says, or pick another preset.")
        missing = missing_from_hub(self.engine, (p.target, p.draft))
        if missing:
            raise UserError(needs_hub_error(f"Preset {s.preset!r}", missing))
        return p.target, p.draft, s.preset

    def get_pair(self, target: str, draft: str | None, slot: Slot | None = None) -> Any:
        """Load a model pair once per device and reuse it across requests (LRU of ``max_cached_pairs``
        per device).

        Args:
            target, draft: the models (draft None = Self-SD).
            slot: the device's slot in :attr:`pool` (None: the first).

        Raises:
            UserError: loading failed (message includes the cause).
        """
        slot = slot or self.pool.slots[0]
        key = (target, draft, slot.index, self.dtype)
        with self._load_lock:
            if key in self._pairs:
                self._pairs.move_to_end(key)
                return self._pairs[key]
            while sum(k[2] == slot.index for k in self._pairs) >= self.max_cached_pairs:
                del self._pairs[next(k for k in self._pairs if k[2] == slot.index)]
                self._free()
            msg = None
            try:
                pair = self.engine.load_pair(target, draft, slot.device, self.dtype)
            except Exception as e:
                oom = self._is_oom(e)
                msg = model_error(target, draft, e, oom)
                log.warning("loading %s failed: %s", target, msg)
                msg = self.access.load_failed(msg, oom)
                drop_frames(e)
            if msg is not None:
                self._free()  # outside the except block: the traceback no longer pins half-loaded weights
                raise UserError(msg)
            self._pairs[key] = pair
            return pair

    def is_loaded(self, target: str, draft: str | None, slot: Slot | None = None) -> bool:
        """True when this pair is already in the device's cache (a Run starts decoding at once)."""
        return (target, draft, (slot or self.pool.slots[0]).index, self.dtype) in self._pairs

    def preload(self, preset: str | None = None) -> str:
        """Load a preset's pair now on every device (app start), so the first Runs' GPU windows are spent
        decoding.

        Returns:
            A one-line note for the log and the page ("" when loaded).
        """
        name = preset or self.default_settings().preset
        try:
            target, draft, _ = self.resolve_model(RunSettings(preset=name))
            for slot in self.pool.slots:
                self.get_pair(target, draft, slot)
        except UserError as e:
            log.warning("model preload skipped: %s", e)
            return f"Models load on the first Run ({e})"
        return ""

    def _free(self) -> None:
        try:
            self.engine.free_memory()
        except Exception:
            pass

    def _is_oom(self, e: BaseException) -> bool:
        try:
            return bool(self.engine.is_oom(e))
        except Exception:
            return isinstance(e, MemoryError)

    # ---- subtitles and ground truth --------------------------------------------------------

    def subtitles_text(self, path: str | None) -> str:
        """Readable text of an uploaded .srt ('[00:01.0 - 00:03.5] line' per cue).

        Raises:
            UserError: the file cannot be parsed.
        """
        if not path:
            return ""
        try:
            cues = self.load_cues(path)
        except ImportError:
            return Path(path).read_bytes().decode("utf-8-sig", errors="replace")
        return cues_text(cues)

    def load_cues(self, path: str | None) -> list[Any]:
        """The cues of an uploaded .srt (empty without a file).

        Raises:
            UserError: not a .srt, missing, too large or unparsable (message names the file).
            ImportError: the subtitle parser is not installed.
        """
        if not path:
            return []
        uploads.check_box(path, "subtitle")
        uploads.check_upload(path, "subtitle file", MAX_SRT_MB)
        try:
            return list(self.engine.load_srt(path))
        except ValueError as e:  # SubtitleError
            raise UserError(f"Could not read the subtitle file: {uploads.upload_name(e, path)}") from e

    def load_truth(self, path: str | None) -> dict[str, Any] | None:
        """A generated clip's ground truth (see :func:`app.inputs.uploads.load_truth`)."""
        return uploads.load_truth(path)

    # ---- stop ------------------------------------------------------------------------------

    def stop(self, session: str | None = None) -> str:
        """Ask the session's Run to stop: the run notices within one batch (``update_interval_s``, or a
        heartbeat), says "Stopping…", closes its worker (the engine ends between frames, prefill layers
        or decode steps) and ends with "Stopped" once the worker is free.

        Returns:
            A status message.
        """
        return "Stopping…" if self.runs.stop(session or "default") else "Nothing is running."

    def queue_next(self, session: str | None = None) -> bool:
        """A Run was clicked while the session's run is stopping (:meth:`RunRegistry.queue_next`): that
        run then ends with "the next run starts now". Returns whether the click waits for it."""
        return self.runs.queue_next(session or "default")

    def active_workers(self) -> list[threading.Thread]:
        """Threads reading a video or decoding in this process (empty when nothing runs; tests check Stop)."""
        return [t for t in threading.enumerate() if t.name.startswith(WORKER_PREFIX) and t.is_alive()]

    # ---- the comparison --------------------------------------------------------------------

    def run_json(self, request: RunRequest, *, session: str | None = None) -> dict[str, Any]:
        """Run the comparison to the end and return it as one JSON-ready object
        (:func:`app.views.summary.comparison_json`; errors are returned in it, never raised)."""
        views: list[RunView] = []
        error, device = None, None
        with contextlib.closing(self.run(request, session=session, views=views)) as updates:
            for upd in updates:
                error, device = upd.get("error", error), upd.get("device", device)
                if upd.get("background"):   # Done: the explanation for Inspect is not part of the JSON
                    break
        view = views[0] if views else None
        return comparison_json(view if view is not None and view.started else None, error,
                               stopped=view is not None and view.stopped) | {"device": device}

    def run(self, request: RunRequest, *, session: str | None = None,
            progress: Callable[[float, str], None] | None = None,
            views: list[RunView] | None = None, waiting: Callable[[], int] | None = None) -> Iterator[dict[str, Any]]:
        """Run vanilla then speculative decoding on the same input on a free device, yielding UI updates.

        Args:
            request: the uploads, prompt and settings.
            session: session id for Stop (one run per session; a second Run ends the first).
            progress: ``progress(fraction, description)`` for load / frames / prefill.
            views: a list the run's :class:`RunView` is appended to once the request is checked
                (for :meth:`run_json`; its ``stopped`` says whether the run was stopped).
            waiting: Runs waiting before they reach the backend (the page's queue), for the status line.

        Yields:
            Update dicts (keys of :data:`app.views.run_view.OUTPUT_KEYS`, plus ``"error"`` on failure,
            ``"device"``, the device that ran it, in the last one, and ``"ui_state"``: ``running``
            first (with every panel, chart and summary cleared: ``fresh_outputs``), ``stopping`` once Stop
            is noticed, and last ``idle``, or ``queued`` when a Run waits for this one). Errors never raise: they
            end the run with a readable ``status``. The device goes back to :attr:`pool` when the run ends
            (done, stopped, failed, or the generator closed).
        """
        progress = progress or (lambda f, d: None)
        sid = session or "default"
        stop = self.runs.start(sid)
        views = [] if views is None else views
        failure, free = None, False
        try:
            yield fresh_outputs() | {"status": "Starting…", "ui_state": "running"}   # nothing of the last run
            try:
                yield from self._run(request, sid, stop, progress, views, waiting or (lambda: 0))
            except Exception as e:  # the server keeps running whatever happens
                failure, free = handle_failure(self.engine, e, public=self.access.public)
            if failure is not None:
                if free:
                    self._free()
                yield (views or [RunView("SpecVLM", None)])[0].fail(failure) | {"ui_state": self.runs.end_state(sid)}
        finally:
            self.runs.finish(sid, stop)

    def _run(self, request: RunRequest, sid: str, stop: threading.Event, progress: Callable[[float, str], None],
             views: list[RunView], waiting: Callable[[], int]) -> Iterator[dict[str, Any]]:
        job, view, name = self.prepare(request)
        views.append(view)
        slot = yield from wait_in_line(self.pool, stop.is_set)
        if slot is None:
            yield self._stopped_early(sid, view)
            return
        try:
            yield from self._decode(job, view, name, slot, sid, stop, progress, waiting)
        finally:
            self.pool.give(slot)

    def _stopped_early(self, sid: str, view: RunView) -> dict[str, Any]:
        """The last update of a Run stopped before its worker started."""
        view.stopped = True
        state = self.runs.end_state(sid)
        return {"status": final_status(True, state == "queued"), "ui_state": state}

    def _decode(self, job: RunJob, view: RunView, name: str, slot: Slot, sid: str, stop: threading.Event,
                progress: Callable[[float, str], None], waiting: Callable[[], int]) -> Iterator[dict[str, Any]]:
        label, several = self.pool.label(slot), len(self.pool) > 1   # several: the record and page name it
        job = dataclasses.replace(job, slot=slot, record_meta={**job.record_meta, "device": label} if several
                                  else job.record_meta)
        if several:
            queued = self.pool.waiting + waiting()
            yield {"status": f"Running on **{label}**; {queued} Run{'s' if queued != 1 else ''} waiting."}
        if not self.is_loaded(*job.model, slot):
            local = all(Path(m).is_dir() for m in job.model if m)
            what = "Loading" if local else "Downloading (first time only) and loading"
            progress(0.05, f"{what} model {name}")
            yield {"status": f"{what} model **{name}**… (progress above; large models take minutes)"}
        self.get_pair(*job.model, slot)
        if stop.is_set():
            yield self._stopped_early(sid, view) | {"device": label}
            return
        reserve = zerogpu.reserve_note(job)
        if reserve:
            yield {"status": f"Waiting for a ZeroGPU device: this Run {reserve}…"}
        worker, t0 = self.gpu_run(job), time.monotonic()
        try:   # Done when decoding ends; the explanation for Inspect goes on (done_first)
            for upd in done_first.updates(worker, view, progress, stop, lambda: self.runs.background(sid)):
                yield upd | {"device": label} if upd.get("background") else upd
        except Exception as e:  # ZeroGPU's own errors (quota, aborted worker) get one line in the user's terms
            msg = zerogpu.abort_message(e, view.where(), zerogpu.reserved_seconds(job) if reserve else None,
                                        time.monotonic() - t0)
            if msg is None:
                raise
            log.warning("the GPU function ended: %s (%s)", msg, e)
            view.failure = msg if view.comparison is None else None   # after Done only the explanation is lost
        finally:
            worker.close()  # GeneratorExit reaches the decode loop (and, on ZeroGPU, the worker process)
        state = self.runs.end_state(sid)
        final = view.final(stopped=stop.is_set(), next_queued=state == "queued") | {"ui_state": state}
        if several and final.get("status"):
            final["status"] = f"{final['status']}  \n*Ran on {label}.*"
        yield final | {"device": label}

    def prepare(self, request: RunRequest) -> tuple[RunJob, RunView, str]:
        """Check a request before any model work; returns (the worker's job, its view, model name).

        Raises:
            UserError: a setting, file or model choice is not acceptable (message names it).
        """
        s = request.settings
        prompt, prompt_note = check_prompt(request.prompt, self.limits)
        dec, vid = build_configs(s, self.limits, device_type_of(self.device, self._cuda()), self.engine.presets(),
                                 zerogpu.default_budget)
        path = uploads.check_video(request.video, self.limits, getattr(self.engine, "probe_video", None))
        cues, mode, truth, notes = request_extras(request, self.load_cues, self.load_truth)
        target, draft, name = self.resolve_model(s)
        meta: dict[str, Any] = {}
        if cues:
            meta.update(subtitle_mode=mode, subtitle_cues=len(cues))
        if truth is not None:
            meta["keep_text"] = True
        if s.fixed_length:
            meta["fixed_length"] = True
        job = RunJob(video=path, prompt=prompt, dec=dec, vid=vid, model=(target, draft), subtitles=tuple(cues),
                     subtitle_mode=mode, truth=truth, record_meta=meta, pairs=int(s.timing_pairs))
        label = "SpecVLM" if dec.method == "specvlm" else f"SD ({dec.method})"
        view = RunView(label, dec, mode=request.heatmap_mode, notes=notes, prompt_note=prompt_note,
                       forced_requested=truth is not None, plot_interval_s=self.plot_interval_s,
                       caveat=run_caveat(target, draft, path, device_type_of(self.device, self._cuda()),
                                         hub_ok=hub_reachable(self.engine)))
        return job, view, name
