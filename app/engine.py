"""The app's thin facade over ``specvlm`` (presets, loading, video, subtitles, the event stream).

Tests swap it for a fake with the same methods. Nothing heavy is imported until a method runs.

Source: docs/design.md §2 (data flow), §3 (layout).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from app.settings import Limits


class Engine:
    """Lazy facade over ``specvlm``.

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

    def stream(self, pair: Any, clip: Any, prompt: str, config: Any, should_stop: Callable[[], bool], *,
               subtitles: Sequence[Any] | None = None, subtitle_mode: str = "both",
               truth: dict[str, Any] | None = None) -> Iterator[Any]:
        """The engine's event stream: one PrefillInfo, then StepEvents (speculative runs record their
        draft trees for the Inspect tab).

        Args:
            subtitles: cues put in the prompt as a transcript; ``subtitle_mode`` says who sees it
                (the vanilla run sees it exactly when the target does).
            truth: a generated clip's ground truth (``SceneTruth.to_dict()``); a speculative run then
                forces the draft to keep the video tokens covering its burned-in text.
        """
        from specvlm.engine.prepare import prepare
        from specvlm.engine.stream import stream
        if truth is not None and config.method != "vanilla":
            inputs = self.prepare_forced(pair, clip, prompt, truth, subtitles, subtitle_mode)
        else:
            inputs = prepare(pair, clip, prompt, subtitles=list(subtitles or []), subtitle_mode=subtitle_mode)
        return stream(pair, inputs, config, should_stop=should_stop, record_trees=config.method != "vanilla")

    def prepare_forced(self, pair: Any, clip: Any, prompt: str, truth: dict[str, Any],
                       subtitles: Sequence[Any] | None = None, subtitle_mode: str = "both") -> Any:
        """ModelInputs (as ``stream`` prepares them) whose ``force_keep`` holds the video tokens
        covering the truth's burned-in text (empty when it has none or it is not in the sampled frames)."""
        import torch

        from specvlm.engine.prepare import prepare
        from specvlm.analysis.text_aware import text_tokens_from_truth
        inputs = prepare(pair, clip, prompt, subtitles=list(subtitles or []), subtitle_mode=subtitle_mode)
        with torch.inference_mode():
            tokens = text_tokens_from_truth(truth, clip.timestamps, inputs.token_grid, inputs.frames_per_token)
        if tokens.numel() == 0:
            return inputs
        return dataclasses.replace(inputs, force_keep=tokens.to(torch.long))

    def prefill_layers(self, pair: Any, method: str) -> int | None:
        """How often one prefill of ``method`` polls ``should_stop`` (once per vision block and decoder layer,
        :func:`app.progress.prefill_layers`); the page's progress counts these polls."""
        from app.progress import prefill_layers
        from specvlm.models.stopping import checked_layers
        return prefill_layers(pair, method, checked_layers)

    def make_record(self, events: list[Any], config: Any, prompt: str, pair: Any, clip: Any) -> Any:
        """A :class:`specvlm.analysis.records.RunRecord` of a finished speculative run (for the Inspect tab);
        :meth:`explain` adds why its lowest-acceptance steps failed."""
        from specvlm.analysis.records import record_from_events
        return record_from_events(events, config, prompt=prompt, tokenizer=pair.processor.tokenizer, clip=clip)

    def explain(self, record: Any, pair: Any, clip: Any, prompt: str, *, subtitles: Sequence[Any] = (),
                subtitle_mode: str = "both", truth: dict[str, Any] | None = None,
                should_stop: Callable[[], bool] | None = None) -> Any:
        """Add to a speculative run's record why its lowest-acceptance steps failed: the target's video
        attention where the draft diverged and the withheld subtitle cue holding the step's word
        (:func:`specvlm.analysis.why.explain_rejections`, one extra target forward over the whole prompt,
        about as long as a prefill). Returns the record.

        Raises:
            specvlm.types.Stopped: ``should_stop()`` returned True (polled before every layer).
        """
        import torch

        from specvlm.engine.prepare import prepare
        from specvlm.analysis.why import explain_rejections
        from specvlm.models.stopping import stop_between_layers
        if record.prefill.prune is None:
            return record
        if truth is not None:
            inputs = self.prepare_forced(pair, clip, prompt, truth, subtitles, subtitle_mode)
        else:
            inputs = prepare(pair, clip, prompt, subtitles=list(subtitles or []), subtitle_mode=subtitle_mode)
        with torch.inference_mode(), stop_between_layers(should_stop):
            whys = explain_rejections(pair, inputs, record.steps, record.prefill.prune.keep.tolist(), cues=list(subtitles or []),
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
