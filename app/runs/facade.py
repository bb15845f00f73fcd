"""The app's one way to the library: the typed protocol :class:`Facade` (presets, loading, video,
subtitles, prepare once, the event stream, the run record) and its implementation over ``specvlm``,
:class:`SpecvlmFacade`.

Tests swap the implementation for fakes; each implements :class:`Facade` (a test checks every fake's
methods against it). Nothing heavy is imported until a method runs.

Source: docs/design.md §2 (data flow: prepare once, stream many), §3 (layout).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol, runtime_checkable

from app.inputs.settings import Limits
from specvlm.analysis.run import RunRecord
from specvlm.types import PrefillInfo, StepEvent


@runtime_checkable
class Facade(Protocol):
    """What the app asks of the library. A Run prepares its inputs once (:meth:`prepare`) and streams
    each decode from them (:meth:`stream`); the run record (:meth:`make_record`) and its explanation
    (:meth:`explain`) reuse the same inputs; an engine that keeps no record returns None from
    :meth:`make_record`."""

    def presets(self) -> dict[str, Any]: ...
    def default_preset(self) -> str: ...
    def cuda_available(self) -> bool: ...
    def load_pair(self, target: str, draft: str | None, device: str | None, dtype: str | None) -> Any: ...
    def hub_reachable(self) -> bool: ...
    def model_available(self, model: str) -> bool: ...
    def probe_video(self, path: str) -> Any: ...
    def load_video(self, path: str, config: Any, should_stop: Callable[[], bool] | None = None) -> Any: ...
    def load_srt(self, path: str) -> list[Any]: ...
    def prepare(self, pair: Any, clip: Any, prompt: str, *, subtitles: Sequence[Any] = (),
                subtitle_mode: str = "both", truth: dict[str, Any] | None = None) -> Any: ...
    def stream(self, pair: Any, inputs: Any, config: Any,
               should_stop: Callable[[], bool]) -> Iterator[PrefillInfo | StepEvent]: ...
    def make_record(self, events: list[Any], config: Any, prompt: str, pair: Any,
                    clip: Any) -> RunRecord | None: ...
    def explain(self, record: RunRecord, pair: Any, inputs: Any, *, cues: Sequence[Any] = (),
                subtitle_mode: str = "both", should_stop: Callable[[], bool] | None = None) -> RunRecord: ...
    def is_oom(self, exc: BaseException) -> bool: ...
    def free_memory(self) -> None: ...


class SpecvlmFacade:
    """:class:`Facade` over ``specvlm``, importing each part lazily.

    Args:
        video_timeout_s: time limit for probing / decoding one video (seconds).
    """

    def __init__(self, video_timeout_s: float = Limits.video_timeout_s) -> None:
        self.video_timeout_s = video_timeout_s
        self._sizes: dict[str, Any] = {}

    def presets(self) -> dict[str, Any]:
        """Preset name -> Preset."""
        from specvlm.models.presets import PRESETS
        return dict(PRESETS)

    def default_preset(self) -> str:
        """The preset to select first (bundled CPU pair without CUDA)."""
        from specvlm.models.presets import default_preset_name
        return default_preset_name()

    def cuda_available(self) -> bool:
        """True if a CUDA device is usable."""
        import torch
        return bool(torch.cuda.is_available())

    def load_pair(self, target: str, draft: str | None, device: str | None, dtype: str | None) -> Any:
        """Load a ModelPair (draft None = Self-SD). Never runs a repository's own code: transformers
        is told not to ask on the console either (a model needing ``trust_remote_code`` fails fast).
        On ZeroGPU this runs at start in the main process and loads to ``cuda`` under the ``spaces``
        emulation, in this thread (:func:`specvlm.models.loading.synchronous_loading`), the same path as on a
        dedicated GPU."""
        from transformers import dynamic_module_utils

        from specvlm.models.loading import load_pair
        dynamic_module_utils.TIME_OUT_REMOTE_CODE = 0  # no interactive "run custom code? [y/N]" prompt
        return load_pair(target, draft, device=device, dtype=dtype)

    def hub_reachable(self) -> bool:
        """Whether the Hugging Face Hub answers (asked once per process; False at once when offline is set)."""
        from specvlm.models.hub import hub_reachable
        return hub_reachable()

    def model_available(self, model: str) -> bool:
        """True when a model loads without the network or the Hub is reachable: a local folder, a Hub id in
        the local cache, or any Hub id while the Hub answers."""
        from pathlib import Path

        from specvlm.models.hub import in_local_cache
        return Path(model).expanduser().is_dir() or in_local_cache(model) or self.hub_reachable()

    def model_size(self, model: str) -> Any:
        """A model's :class:`specvlm.models.fit.ModelSize` from its config alone (None when it cannot be told):
        a local folder's or cached config, else, while the Hub answers, a Hub id's ``config.json`` fetched
        by itself (never its weights). A size once told is kept for this engine's life."""
        from pathlib import Path

        from specvlm.models.fit import model_size
        from specvlm.models.hub import fetch_config
        if model in self._sizes:
            return self._sizes[model]
        size = model_size(model)
        if size is None and not Path(model).expanduser().exists() and self.hub_reachable() and fetch_config(model):
            size = model_size(model)
        if size is not None:
            self._sizes[model] = size
        return size

    def probe_video(self, path: str) -> Any:
        """Stream facts (VideoInfo: duration, size, codec) without decoding, under the time limit."""
        from specvlm.video import probe_video
        return probe_video(path, count_frames=False, timeout_s=self.video_timeout_s)

    def load_video(self, path: str, config: Any, should_stop: Callable[[], bool] | None = None) -> Any:
        """Decode and sample frames into a VideoClip (load_video upscales sides under 28 px).

        ``should_stop`` is polled between frames; True ends the reading early (``specvlm.types.Stopped``).
        """
        from specvlm.video import load_video
        return load_video(path, config, timeout_s=self.video_timeout_s, should_stop=should_stop)

    def load_srt(self, path: str) -> list[Any]:
        """Read and parse a subtitle file into cues (``start_s``, ``end_s``, ``text``)."""
        from specvlm.text.subtitles import load_srt
        return load_srt(path)

    def prepare(self, pair: Any, clip: Any, prompt: str, *, subtitles: Sequence[Any] = (),
                subtitle_mode: str = "both", truth: dict[str, Any] | None = None) -> Any:
        """The Run's ModelInputs, once for all its decodes (:func:`specvlm.engine.prepare.prepare`).

        Args:
            subtitles: cues put in the prompt as a transcript; ``subtitle_mode`` says who sees it
                (the vanilla run sees it exactly when the target does).
            truth: a generated clip's ground truth (``SceneTruth.to_dict()``); the draft is then forced to
                keep the video tokens covering its burned-in text (``force_keep``; vanilla decoding
                prunes nothing, so it is unaffected).
        """
        import torch

        from specvlm.analysis.text_aware import text_tokens_from_truth
        from specvlm.engine.prepare import prepare
        inputs = prepare(pair, clip, prompt, subtitles=list(subtitles or []), subtitle_mode=subtitle_mode)
        if truth is None:
            return inputs
        with torch.inference_mode():
            tokens = text_tokens_from_truth(truth, clip.timestamps, inputs.token_grid, inputs.frames_per_token)
        if tokens.numel() == 0:
            return inputs
        return dataclasses.replace(inputs, force_keep=tokens.to(torch.long))

    def stream(self, pair: Any, inputs: Any, config: Any,
               should_stop: Callable[[], bool]) -> Iterator[PrefillInfo | StepEvent]:
        """The engine's event stream over prepared inputs: one PrefillInfo, then StepEvents (speculative
        runs record their draft trees for the Inspect tab)."""
        from specvlm.engine.stream import stream
        return stream(pair, inputs, config, should_stop=should_stop, record_trees=config.method != "vanilla")

    def prefill_layers(self, pair: Any, method: str) -> int | None:
        """How often one prefill of ``method`` polls ``should_stop`` (once per vision block and decoder layer,
        :func:`app.runs.progress.prefill_layers`); the page's progress counts these polls."""
        from app.runs.progress import prefill_layers
        from specvlm.models.stopping import checked_layers
        return prefill_layers(pair, method, checked_layers)

    def make_record(self, events: list[Any], config: Any, prompt: str, pair: Any, clip: Any) -> RunRecord:
        """The :class:`specvlm.analysis.run.RunRecord` of a finished speculative run with token texts and
        thumbnails (for the Inspect tab); :meth:`explain` adds why its lowest-acceptance steps failed."""
        from specvlm.analysis.records import record_from_events
        return record_from_events(events, config, prompt=prompt, tokenizer=pair.processor.tokenizer, clip=clip)

    def explain(self, record: RunRecord, pair: Any, inputs: Any, *, cues: Sequence[Any] = (),
                subtitle_mode: str = "both", should_stop: Callable[[], bool] | None = None) -> RunRecord:
        """Add to a speculative run's record why its lowest-acceptance steps failed: the target's video
        attention where the draft diverged and the withheld subtitle cue holding the step's word
        (:func:`specvlm.analysis.why.explain_rejections`, one extra target forward over the whole prompt,
        about as long as a prefill), from the inputs the run decoded. Returns the record.

        Raises:
            specvlm.types.Stopped: ``should_stop()`` returned True (polled before every layer).
        """
        import torch

        from specvlm.analysis.why import explain_rejections
        from specvlm.models.stopping import stop_between_layers
        if record.prefill is None or record.prefill.prune is None:
            return record
        with torch.inference_mode(), stop_between_layers(should_stop):
            whys = explain_rejections(pair, inputs, record.steps, record.prefill.prune.keep.tolist(), cues=list(cues),
                                      draft_saw_subtitles=subtitle_mode != "target",
                                      tokenizer=pair.processor.tokenizer)
        record.why = [dataclasses.asdict(w) for w in whys]
        return record

    def is_oom(self, exc: BaseException) -> bool:
        """True for out-of-memory errors (CUDA, MPS or host)."""
        if isinstance(exc, MemoryError):
            return True
        import torch
        if isinstance(exc, (torch.OutOfMemoryError, torch.cuda.OutOfMemoryError)):
            return True
        text = str(exc).lower()
        return "out of memory" in text or "can't allocate memory" in text

    def free_memory(self) -> None:
        """Release cached accelerator memory after a failure."""
        import gc
        import torch
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
