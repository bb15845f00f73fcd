"""The app's backend: owns loaded model pairs, validates settings, runs vanilla then
speculative decoding on the same input, and yields UI updates as plain dicts.

No Gradio import here and nothing heavy at import time: ``specvlm`` (and with it torch)
is imported on first use. The decode loop runs in a worker thread that consumes the
engine's stream as fast as it can, so page rendering never adds to the measured decode
time; the request's generator drains it and yields throttled updates. Stop sets a flag
that the engine polls through ``should_stop`` every step.

Update dicts use the keys in :data:`OUTPUT_KEYS` (plus ``"error"``, a readable message the
UI also shows as a toast); each yield carries only what changed, the last one everything.

Robustness (issue 6): every request is checked before any model work against :class:`Limits`
(upload size, duration via a time-limited probe, prompt length, frame and token caps); any
failure ends the request with one message naming the input, never an exception; an
out-of-memory error drops its traceback and frees accelerator memory before the next request;
Stop and closed pages end the decode thread itself; :class:`UploadJanitor` deletes uploads
as soon as no page shows them and no running or queued request needs them.

Source: SpecVLM Studio issues 4 and 6; DESIGN 1-3, 4.12 (metrics), 8 (Gradio traps).
"""
from __future__ import annotations

import contextlib
import dataclasses
import filecmp
import json
import logging
import math
import os
import queue
import threading
import time
import traceback
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from app import plots

log = logging.getLogger(__name__)

DEFAULT_PROMPT = "Describe this video in detail."
"""The CLI's default prompt; the bundled CPU model was trained on it (the paper's VideoDetailCaption wording,
"Please provide a detailed description of the video, ...", is one of its paraphrases and works too with
real models)."""

OUTPUT_KEYS = (
    "status", "vanilla_html", "vanilla_stats", "spec_html", "spec_stats", "summary",
    "gallery", "heatmap_legend", "accept_plot", "time_plot", "heatmaps",
)
"""Keys of the update dicts yielded by :meth:`Backend.run`, in the UI's output order.
``heatmaps`` is the per-session heatmap state for :meth:`Backend.pick_heatmaps`."""

HEATMAP_MODES = {"Pruning stages": "stages", "Raw attention scores": "scores"}
"""Heatmap toggle label -> :func:`app.plots.heatmap_gallery` mode."""

FALLBACK_PRESETS = (
    "Bundled tiny (CPU, Std-SD)", "Bundled tiny (CPU, Self-SD)", "Qwen2.5-VL-7B Self-SD",
    "Qwen2.5-VL-32B + 7B draft", "LLaVA-OneVision-7B Self-SD", "LLaVA-OneVision-72B + 7B draft",
)
"""Preset names shown if ``specvlm.models.presets`` cannot be imported."""

UPDATE_INTERVAL_S = 0.15
"""Minimum time between streamed UI updates while decoding."""


def _shown(model: str) -> str:
    """A model id as shown in the UI: local folders inside the project relative to it, Hub ids as they are."""
    root = Path(__file__).resolve().parents[1]
    try:
        path = Path(model)
        return path.resolve().relative_to(root).as_posix() if path.exists() else model
    except (ValueError, OSError):
        return model


class UserError(ValueError):
    """A problem the person can fix (bad file, bad setting, missing model); message is shown as-is."""


MB = 1024 * 1024
MAX_SRT_MB = 5
"""Largest subtitle file accepted (MiB); real .srt files are kilobytes."""
MAX_TRUTH_MB = 20
"""Largest ground-truth .json accepted (MiB); a generated clip's truth is tens of kilobytes."""

SUBTITLE_MODES = ("both", "target", "draft", "none")
"""Who sees the subtitle transcript (``specvlm.prompting.SUBTITLE_MODES``, repeated here so the page
builds without the engine)."""

SUBTITLE_MODE_CHOICES = (
    ("Both models", "both"), ("Target only", "target"), ("Draft only", "draft"), ("Neither (ignore them)", "none"),
)
"""(label, mode) pairs of the "Subtitles go to" radio."""


def _env_num(name: str, default: float) -> float:
    """A number from the environment (default when unset or unparsable)."""
    raw = os.environ.get(name, "").strip()
    try:
        return float(raw) if raw else default
    except ValueError:
        log.warning("ignoring %s=%r: not a number", name, raw)
        return default


@dataclasses.dataclass(frozen=True)
class Limits:
    """What one request may ask of the server (``app.py`` flags, ``SPECVLM_*`` env vars).

    Attributes:
        max_upload_mb: largest video file accepted (MiB); also Gradio's upload cap.
        max_duration_s: longest video accepted (seconds of stream duration).
        max_prompt_chars: longest prompt accepted (characters).
        max_frames: most frames one request may sample (the Frames slider's maximum).
        max_new_tokens: largest generation budget per run (the slider's maximum).
        video_timeout_s: time limit for probing and decoding one video (seconds).
    """

    max_upload_mb: float = 200.0
    max_duration_s: float = 600.0
    max_prompt_chars: int = 2000
    max_frames: int = 256
    max_new_tokens: int = 1024
    video_timeout_s: float = 60.0

    ENV = {"max_upload_mb": "SPECVLM_MAX_UPLOAD_MB", "max_duration_s": "SPECVLM_MAX_DURATION_S",
           "max_prompt_chars": "SPECVLM_MAX_PROMPT_CHARS", "max_frames": "SPECVLM_MAX_FRAMES",
           "max_new_tokens": "SPECVLM_MAX_NEW_TOKENS", "video_timeout_s": "SPECVLM_VIDEO_TIMEOUT_S"}

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise ValueError(f"limit {f.name}={v!r} must be a positive number.")

    @classmethod
    def from_env(cls, **overrides: Any) -> "Limits":
        """Defaults, replaced by ``SPECVLM_*`` environment variables, replaced by non-None overrides."""
        kw: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            v = _env_num(cls.ENV[f.name], getattr(cls, f.name))
            kw[f.name] = int(v) if f.type in ("int", int) else float(v)
        kw.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**kw)

    def describe(self) -> str:
        """One Markdown line for the page."""
        return (f"Limits on this server: videos up to **{self.max_upload_mb:g} MB** and "
                f"**{_duration(self.max_duration_s)}**, prompts up to {self.max_prompt_chars} characters, "
                f"≤ {self.max_frames} frames, ≤ {self.max_new_tokens} new tokens. "
                "Large videos are downscaled and sampled, never decoded whole.")


@dataclasses.dataclass(frozen=True)
class Settings:
    """Everything the settings panel sets (DESIGN 5 defaults; 128 new tokens suits a CPU).

    Attributes:
        preset: model preset name.
        custom_model: Hub id or local path overriding the preset; ``"target + draft"`` or
            ``"target, draft"`` for Std-SD, a single id for Self-SD.
        method: pruning method of the speculative run (``specvlm`` or a baseline).
        drop_rate: r.  top_p: λ.
        tree_shape, depth, top_k, total_tokens: the draft tree.
        min_prob: stop drafting deeper below this cumulative draft probability (0 = off;
            ``TreeConfig.min_prob``).
        num_frames: frames sampled from the video.
        max_new_tokens: generation budget per run.
        temperature: sampling temperature (0 = greedy).  top_p_sampling: nucleus mass.  seed: sampling seed.
        subtitle_mode: who sees an uploaded transcript: ``both``, ``target``, ``draft`` or ``none``
            (:data:`SUBTITLE_MODES`; vanilla sees it exactly when the target does).
        keep_text: force the draft to keep the video tokens covering the clip's burned-in text
            (needs a ground-truth ``.json`` of a generated clip).
    """

    preset: str = ""
    custom_model: str = ""
    method: str = "specvlm"
    drop_rate: float = 0.9
    top_p: float = 0.4
    tree_shape: str = "dynamic"
    depth: int = 5
    top_k: int = 4
    total_tokens: int = 16
    min_prob: float = 0.0
    num_frames: int = 16
    max_new_tokens: int = 128
    temperature: float = 0.0
    top_p_sampling: float = 1.0
    seed: int = 0
    subtitle_mode: str = "both"
    keep_text: bool = False


class Engine:
    """Thin lazy facade over ``specvlm`` (swap it for a fake in tests).

    Args:
        video_timeout_s: time limit for probing / decoding one video (seconds).
    """

    def __init__(self, video_timeout_s: float = Limits.video_timeout_s) -> None:
        self.video_timeout_s = video_timeout_s

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
        is told not to ask on the console either (a model needing ``trust_remote_code`` fails fast)."""
        from transformers import dynamic_module_utils

        from specvlm.models import load_pair
        dynamic_module_utils.TIME_OUT_REMOTE_CODE = 0  # no interactive "run custom code? [y/N]" prompt
        return load_pair(target, draft, device=device, dtype=dtype)

    def probe_video(self, path: str) -> Any:
        """Stream facts (VideoInfo: duration, size, codec) without decoding, under the time limit."""
        from specvlm.video import probe_video
        return probe_video(path, count_frames=False, timeout_s=self.video_timeout_s)

    def load_video(self, path: str, config: Any) -> Any:
        """Decode and sample frames into a VideoClip (load_video upscales sides under 28 px)."""
        from specvlm.video import load_video
        return load_video(path, config, timeout_s=self.video_timeout_s)

    def load_srt(self, path: str) -> list[Any]:
        """Read and parse a subtitle file into cues (``start_s``, ``end_s``, ``text``)."""
        from specvlm.subtitles import load_srt
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
        from specvlm.decoding import stream
        kw: dict[str, Any] = dict(should_stop=should_stop, record_trees=config.method != "vanilla")
        if truth is not None and config.method != "vanilla":
            kw["inputs"] = self.prepare_forced(pair, clip, prompt, truth, subtitles, subtitle_mode)
        elif subtitles:
            kw.update(subtitles=list(subtitles), subtitle_mode=subtitle_mode)
        return stream(pair, clip, prompt, config, **kw)

    def prepare_forced(self, pair: Any, clip: Any, prompt: str, truth: dict[str, Any],
                       subtitles: Sequence[Any] | None = None, subtitle_mode: str = "both") -> Any:
        """ModelInputs (as ``stream`` prepares them) whose ``force_keep`` holds the video tokens
        covering the truth's burned-in text (empty when it has none or it is not in the sampled frames)."""
        import torch

        from specvlm.inspect import text_tokens_from_truth
        with torch.inference_mode():
            if subtitles:
                inputs = pair.adapter.prepare(pair.processor, pair.target, clip, prompt, subtitles=list(subtitles),
                                              subtitle_mode=subtitle_mode)
            else:
                inputs = pair.adapter.prepare(pair.processor, pair.target, clip, prompt)
            tokens = text_tokens_from_truth(truth, clip.timestamps, inputs.token_grid, inputs.frames_per_token)
        if tokens.numel() == 0:
            return inputs
        return dataclasses.replace(inputs, force_keep=tokens.to(torch.long))

    def make_record(self, events: list[Any], config: Any, prompt: str, pair: Any, clip: Any) -> Any:
        """A :class:`specvlm.inspect.RunRecord` of a finished speculative run (for the Inspect tab)."""
        from specvlm.inspect import record_from_events
        return record_from_events(events, config, prompt=prompt, tokenizer=pair.processor.tokenizer, clip=clip)

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


def engine_importable() -> bool:
    """True if the decoding engine (``specvlm.decoding``) can be imported."""
    try:
        import specvlm.decoding  # noqa: F401
    except Exception:  # ImportError or a broken partial install
        return False
    return True


class _RunState:
    """Accumulates one run's stream for display (text pieces, timings, steps)."""

    def __init__(self, name: str, decode: Callable[[list[int]], str] | None) -> None:
        self.name = name
        self.decode = decode
        self.prefill: Any = None
        self.ids: list[int] = []
        self.pieces: list[tuple[str, bool]] = []
        self.text = ""
        self.times: list[float] = []
        self.counts: list[int] = []
        self.accept: list[int] = []
        self.step_texts: list[str] = []
        self.step_tokens = 0  # tokens emitted by verify/decode steps (step >= 1)
        self.elapsed = 0.0
        self.done = False
        self.stopped = False
        self.error: str | None = None
        self.events: list[Any] = []  # raw engine events (PrefillInfo + StepEvents) for the run record
        self._decoded = ""  # decode(ids) after the last complete token

    def add(self, ev: Any) -> None:
        """Fold one StepEvent in."""
        pieces = self._split(ev)
        self.pieces.extend(pieces)
        self.text += "".join(p for p, _ in pieces)
        self.elapsed = float(ev.elapsed_s)
        self.times.append(self.elapsed)
        self.counts.append(int(ev.num_generated))
        if ev.step >= 1:
            self.accept.append(int(ev.accept_length))
            self.step_texts.append("".join(p for p, _ in pieces))
            self.step_tokens += len(ev.token_ids)

    def _split(self, ev: Any) -> list[tuple[str, bool]]:
        """Per-token (text, from_draft) via incremental decoding; the event's text as one
        piece if there is no tokenizer or decoding fails."""
        flags = list(ev.from_draft) or [False] * len(ev.token_ids)
        if self.decode is None:
            self.ids.extend(ev.token_ids)
            return [(ev.text, bool(flags) and all(flags))]
        out = []
        try:
            for tok, fd in zip(ev.token_ids, flags):
                self.ids.append(int(tok))
                full = self.decode(self.ids)
                if full.endswith("\ufffd"):  # incomplete UTF-8 sequence: wait for the next token
                    continue
                out.append((full[len(self._decoded):], bool(fd)))
                self._decoded = full
        except Exception:  # a tokenizer quirk must not break the page
            log.exception("per-token decode failed; falling back to event text")
            self.decode = None
            return [(ev.text, all(flags))]
        return out

    @property
    def tokens_per_s(self) -> float:
        return self.counts[-1] / self.elapsed if self.counts and self.elapsed > 0 else 0.0

    @property
    def tau(self) -> float:
        return sum(self.accept) / len(self.accept) if self.accept else 0.0

    @property
    def tokens_per_forward(self) -> float:
        return self.step_tokens / len(self.accept) if self.accept else 0.0

    def stats_md(self, speculative: bool) -> str:
        """'0.84 s · 37 tokens · 44.0 tok/s' (+ τ) with a phase marker."""
        n = self.counts[-1] if self.counts else 0
        parts = [f"{self.elapsed:.2f} s", f"{n} tokens", f"{self.tokens_per_s:.1f} tok/s"]
        if speculative and self.accept:
            parts.append(f"τ {self.tau:.2f}")
        if self.prefill is not None:
            parts.append(f"prefill {self.prefill.prefill_s:.2f} s")
        if self.error:
            state = "error"
        elif self.stopped:
            state = "stopped"
        elif self.done:
            state = "done"
        else:
            state = "decoding" if self.counts else "waiting"
        return f"**{self.name}** · {state} · " + " · ".join(parts)


def parse_model_spec(text: str) -> tuple[str, str | None]:
    """Split a custom model field into (target, draft or None).

    Args:
        text: ``"target"``, ``"target + draft"`` or ``"target, draft"``.

    Returns:
        (target, draft); draft None means Self-SD.

    Raises:
        UserError: empty target.
    """
    for sep in ("+", ","):
        if sep in text:
            target, draft = (s.strip() for s in text.split(sep, 1))
            break
    else:
        target, draft = text.strip(), ""
    if not target:
        raise UserError("The custom model field needs a Hub id or local path (optionally 'target + draft').")
    return target, (draft or None)


class Backend:
    """Loads and caches model pairs, runs comparisons, yields UI updates.

    Args:
        engine: the ``specvlm`` facade (default :class:`Engine`); tests pass a fake.
        device: device for models (None: the engine picks, CUDA if available).
        dtype: model dtype name (None: the engine picks).
        max_cached_pairs: model pairs kept loaded (1 frees the old pair before loading a new one).
        update_interval_s: minimum seconds between streamed updates.
        plot_interval_s: minimum seconds between chart updates while decoding.
        limits: per-request limits (default :meth:`Limits.from_env`).
    """

    def __init__(self, engine: Engine | None = None, *, device: str | None = None, dtype: str | None = None,
                 max_cached_pairs: int = 1, update_interval_s: float = UPDATE_INTERVAL_S,
                 plot_interval_s: float = 1.0, limits: Limits | None = None) -> None:
        self.limits = limits or Limits.from_env()
        self.engine = engine or Engine(video_timeout_s=self.limits.video_timeout_s)
        self.device = device
        self.dtype = dtype
        self.max_cached_pairs = max(1, max_cached_pairs)
        self.update_interval_s = update_interval_s
        self.plot_interval_s = plot_interval_s
        self._pairs: OrderedDict[tuple, Any] = OrderedDict()
        self._records: OrderedDict[Any, Any] = OrderedDict()
        self._load_lock = threading.Lock()
        self._stops: dict[str, threading.Event] = {}

    # ---- presets and defaults ------------------------------------------------------------

    def preset_names(self) -> list[str]:
        """Preset names for the dropdown (a fixed list if the engine is not installed)."""
        try:
            return list(self.engine.presets())
        except Exception:
            log.warning("specvlm presets not importable; showing fallback names", exc_info=True)
            return list(FALLBACK_PRESETS)

    def default_settings(self) -> Settings:
        """Paper defaults with the default preset's frames and token budget
        (else 256 new tokens with CUDA, 128 on a CPU)."""
        try:
            preset = self.engine.default_preset()
        except Exception:
            preset = self.preset_names()[0]
        _, frames, max_new = self.preset_info(preset)
        return Settings(preset=preset, num_frames=frames, max_new_tokens=max_new)

    def _cuda(self) -> bool:
        try:
            return bool(self.engine.cuda_available())
        except Exception:
            return False

    def preset_info(self, name: str) -> tuple[str, int, int]:
        """(Markdown description, suggested frames, suggested max new tokens) of a preset."""
        fallback_tokens = 256 if self._cuda() else 128
        try:
            p = self.engine.presets()[name]
        except Exception:
            return ("*Preset details unavailable (engine not installed).*", 16, fallback_tokens)
        kind = "Self-SD (draft = target weights)" if p.draft is None else f"Std-SD, draft `{_shown(p.draft)}`"
        gpu = " · needs a CUDA GPU" if p.requires_cuda else ""
        return (f"{p.description}  \ntarget `{_shown(p.target)}` · {kind}{gpu}", int(getattr(p, "num_frames", 16)),
                int(getattr(p, "max_new_tokens", fallback_tokens)))

    # ---- validation ------------------------------------------------------------------------

    def build_configs(self, s: Settings) -> tuple[Any, Any]:
        """Validate settings into (DecodeConfig, VideoConfig).

        Raises:
            UserError: a setting is missing or out of range (message names it).
        """
        from specvlm.config import ConfigError, DecodeConfig, PruneConfig, SamplingConfig, TreeConfig, VideoConfig
        if s.method == "vanilla":
            raise UserError("Pick a speculative method for the right panel; the left panel is always vanilla.")
        try:
            ints = {k: _as_int(k, getattr(s, k)) for k in ("depth", "top_k", "total_tokens", "num_frames",
                                                           "max_new_tokens")}
            prune = PruneConfig(method=s.method, drop_rate=_as_float("drop rate r", s.drop_rate),
                                top_p=_as_float("λ", s.top_p))
            tree = TreeConfig(shape=s.tree_shape, depth=ints["depth"], top_k=ints["top_k"],
                              total_tokens=ints["total_tokens"],
                              min_prob=_as_float("early stop (min draft probability)", s.min_prob))
            sampling = SamplingConfig(temperature=_as_float("temperature", s.temperature),
                                      top_p_sampling=_as_float("nucleus top-p", s.top_p_sampling),
                                      seed=_as_int("seed", s.seed))
            dec = DecodeConfig(method=s.method, max_new_tokens=ints["max_new_tokens"], prune=prune, tree=tree,
                               sampling=sampling)
            vid = VideoConfig(num_frames=ints["num_frames"], max_frames=self.limits.max_frames)
        except ConfigError as e:
            raise UserError(f"Invalid setting: {e}") from e
        for name, key, cap in (("frames", "num_frames", self.limits.max_frames),
                               ("max new tokens", "max_new_tokens", self.limits.max_new_tokens)):
            if ints[key] > cap:
                raise UserError(f"Invalid setting: {name}={ints[key]} is above this server's limit of {cap}; "
                                f"use 1 to {cap}.")
        return dec, vid

    def check_prompt(self, prompt: Any) -> tuple[str, str]:
        """(prompt to use, note). An empty prompt becomes :data:`DEFAULT_PROMPT` (and says so).

        Raises:
            UserError: longer than ``limits.max_prompt_chars``, or not text.
        """
        if prompt is None:
            prompt = ""
        if not isinstance(prompt, str):
            raise UserError(f"The prompt must be text, got {type(prompt).__name__}.")
        prompt = prompt.replace("\x00", "").strip()
        if not prompt:
            return DEFAULT_PROMPT, "The prompt was empty, so the default prompt was used."
        if len(prompt) > self.limits.max_prompt_chars:
            raise UserError(f"The prompt is {len(prompt)} characters long; this server accepts up to "
                            f"{self.limits.max_prompt_chars}. Shorten it.")
        return prompt, ""

    def check_video(self, video: Any) -> tuple[str, list[str]]:
        """Validate an uploaded video before any model work: present, size and duration limits, readable.

        Returns:
            (path, notes).

        Raises:
            UserError: missing, too large, too long, or not a readable video (message names the file).
        """
        if not video:
            raise UserError("Upload a video (or click an example) first.")
        path = str(video)
        name = Path(path).name
        p = Path(path)
        if not p.is_file():
            raise UserError(f"The video {name!r} is no longer on the server (uploads are removed after use); "
                            "upload it again.")
        size = p.stat().st_size
        if size > self.limits.max_upload_mb * MB:
            raise UserError(f"The video {name!r} is {size / MB:.1f} MB; this server accepts up to "
                            f"{self.limits.max_upload_mb:g} MB. Trim or compress it and try again.")
        probe = getattr(self.engine, "probe_video", None)
        if probe is None:
            return path, []
        try:
            info = probe(path)
        except ImportError as e:
            raise UserError(f"The video reader is not installed: {e}") from e
        except ValueError as e:  # VideoError and friends
            raise UserError(f"Could not read the video: {_upload_name(e, path)}") from e
        dur = float(getattr(info, "duration", 0.0) or 0.0)
        if dur > self.limits.max_duration_s:
            raise UserError(f"The video {name!r} is {_duration(dur)} long; this server accepts up to "
                            f"{_duration(self.limits.max_duration_s)}. Trim it and try again.")
        return path, []

    # ---- models ----------------------------------------------------------------------------

    def resolve_model(self, s: Settings) -> tuple[str, str | None, str]:
        """(target, draft, display name) from the custom field or the preset.

        Raises:
            UserError: unknown preset, engine missing, or a GPU-only preset without CUDA.
        """
        if s.custom_model and s.custom_model.strip():
            target, draft = parse_model_spec(s.custom_model)
            return target, draft, s.custom_model.strip()
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
                raise UserError(f"Preset {s.preset!r} needs the model folder {path}, which is missing: "
                                "build or fetch the bundled model as the README says, or pick another preset.")
        return p.target, p.draft, s.preset

    def get_pair(self, target: str, draft: str | None) -> Any:
        """Load a model pair once and reuse it across requests (LRU of ``max_cached_pairs``).

        Raises:
            UserError: loading failed (message includes the cause).
        """
        key = (target, draft, self.device, self.dtype)
        with self._load_lock:
            if key in self._pairs:
                self._pairs.move_to_end(key)
                return self._pairs[key]
            while len(self._pairs) >= self.max_cached_pairs:
                self._pairs.popitem(last=False)
                self._free()
            msg = None
            try:
                pair = self.engine.load_pair(target, draft, self.device, self.dtype)
            except Exception as e:
                msg = _model_error(target, draft, e, self._is_oom(e))
                log.warning("loading %s failed: %s", target, msg)
                _drop_frames(e)
            if msg is not None:
                self._free()  # outside the except block: the traceback no longer pins half-loaded weights
                raise UserError(msg)
            self._pairs[key] = pair
            return pair

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

    # ---- subtitles -------------------------------------------------------------------------

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
            raw = Path(path).read_bytes()
            return raw.decode("utf-8-sig", errors="replace")
        return "\n".join(f"[{_mmss(c.start_s)} - {_mmss(c.end_s)}] {c.text}" for c in cues)

    def load_cues(self, path: str | None) -> list[Any]:
        """The cues of an uploaded .srt (empty without a file).

        Raises:
            UserError: missing, too large or unparsable (message names the file).
            ImportError: the subtitle parser is not installed.
        """
        if not path:
            return []
        _check_upload(path, "subtitle file", MAX_SRT_MB)
        try:
            return list(self.engine.load_srt(path))
        except ValueError as e:  # SubtitleError
            raise UserError(f"Could not read the subtitle file: {_upload_name(e, path)}") from e

    def load_truth(self, path: str | None) -> dict[str, Any] | None:
        """The ground truth of a generated clip (``specvlm.synth.write_truth``'s JSON), or None without a file.

        Only what forcing needs is checked: ``width``, ``height``, ``fps`` and ``text`` (null, or an
        object with ``start_frame``, ``end_frame`` and a 4-number ``box``).

        Raises:
            UserError: missing, too large, not JSON, or missing / malformed keys (message names the file).
        """
        if not path:
            return None
        name = _check_upload(path, "ground-truth file", MAX_TRUTH_MB)
        try:
            d = json.loads(Path(path).read_bytes().decode("utf-8-sig"))
        except UnicodeDecodeError:
            raise UserError(f"The ground-truth file {name!r} is not UTF-8 text; upload the .json written next to "
                            "a generated clip.") from None
        except json.JSONDecodeError as e:
            raise UserError(f"The ground-truth file {name!r} is not valid JSON ({e.msg} at line {e.lineno}, "
                            f"column {e.colno}).") from None
        problem = _truth_problem(d)
        if problem:
            raise UserError(f"The ground-truth file {name!r} is not a generated clip's truth: {problem}.")
        return d

    def check_subtitle_mode(self, mode: Any) -> str:
        """A :data:`SUBTITLE_MODES` value from a mode or its radio label (empty: ``both``).

        Raises:
            UserError: anything else.
        """
        if mode is None or mode == "":
            return "both"
        labels = {label: value for label, value in SUBTITLE_MODE_CHOICES}
        mode = labels.get(mode, mode)
        if mode not in SUBTITLE_MODES:
            raise UserError(f"Invalid setting: subtitles go to {mode!r}; use one of {', '.join(SUBTITLE_MODES)}.")
        return mode

    # ---- stop ------------------------------------------------------------------------------

    def stop(self, session: str | None = None) -> str:
        """Ask the session's running decode to stop at its next step.

        Returns:
            A status message.
        """
        ev = self._stops.get(session or "default")
        if ev is None:
            return "Nothing is running."
        ev.set()
        return "Stopping after the current step…"

    # ---- the comparison --------------------------------------------------------------------

    def run(self, video: str | None, prompt: str, settings: Settings, *, srt: str | None = None,
            truth: str | None = None, session: str | None = None,
            progress: Callable[[float, str], None] | None = None,
            heatmap_mode: str = "stages") -> Iterator[dict[str, Any]]:
        """Run vanilla then speculative decoding on the same input, yielding UI updates.

        Args:
            video: path of the uploaded video.
            prompt: the question (empty: :data:`DEFAULT_PROMPT`).
            settings: panel settings.
            srt: path of an uploaded .srt; its cues go to both runs (``settings.subtitle_mode`` says
                which model sees them; vanilla sees them exactly when the target does).
            truth: path of a generated clip's ground-truth .json; with ``settings.keep_text`` the
                speculative run's draft always keeps the video tokens covering its burned-in text.
            session: session id for Stop (one run per session).
            progress: ``progress(fraction, description)`` for load / frames / prefill.
            heatmap_mode: ``"stages"`` or ``"scores"`` for the gallery shown.

        Yields:
            Update dicts (keys of :data:`OUTPUT_KEYS`, plus ``"error"`` on failure). Errors never
            raise: they end the run with a readable ``status``; after an out-of-memory error the
            traceback is dropped and accelerator memory released before the message is yielded.
        """
        progress = progress or (lambda f, d: None)
        sid = session or "default"
        stop = threading.Event()
        prev = self._stops.get(sid)
        if prev is not None:
            prev.set()  # a second Run in the same session ends the first
        self._stops[sid] = stop
        runs: list[_RunState] = []
        view: dict[str, Any] = {"session": session}
        failure: str | None = None
        free = False
        try:
            try:
                yield from self._run(video, prompt, settings, stop, progress, heatmap_mode, runs, view,
                                     srt=srt, truth=truth)
            except ValueError as e:  # UserError, and the engine's typed input errors
                failure = str(e) if isinstance(e, UserError) else f"Invalid input: {e}"
            except Exception as e:  # the server keeps running whatever happens
                oom = self._is_oom(e)
                log.error("comparison failed: %s", "".join(traceback.format_exception(e)).rstrip())
                failure = ("Out of memory: try fewer frames, fewer new tokens, a higher drop rate or a smaller model."
                           if oom else f"Decoding failed: {type(e).__name__}: {e}")
                _drop_frames(e)  # the traceback pins the failed step's tensors (KV cache, activations)
                free = True
            if failure is not None:
                if free:  # outside the except block, so the exception no longer holds any tensor
                    self._free()
                yield self._fail(failure, runs, view)
        finally:
            stop.set()
            if self._stops.get(sid) is stop:
                del self._stops[sid]

    def _fail(self, msg: str, runs: list[_RunState], view: dict[str, Any]) -> dict[str, Any]:
        for r in runs:
            if not r.done:
                r.error = msg
        upd = self._full(runs, view) if runs else {}
        upd.update(status=f"**Error:** {msg}", error=msg)
        return upd

    def _run(self, video, prompt, settings, stop, progress, heatmap_mode, runs, view, srt=None, truth=None):
        prompt, prompt_note = self.check_prompt(prompt)
        dec, vid = self.build_configs(settings)
        path, _ = self.check_video(video)
        extra, input_notes = self._extras(settings, srt, truth)
        target, draft, name = self.resolve_model(settings)
        progress(0.05, f"Loading model {name}")
        yield {"status": f"Loading model **{name}** (first time only)…"}
        pair = self.get_pair(target, draft)
        if getattr(pair, "frames_per_token", 1) > 1 and vid.num_frames % pair.frames_per_token:
            vid = dataclasses.replace(vid, even_frames=True)
        if stop.is_set():
            yield {"status": self._final_status(runs, stop)}
            return
        progress(0.2, "Decoding video frames")
        yield {"status": "Decoding video frames…"}
        clip = self._load_clip(path, vid)
        decode = _decoder(pair)
        label = "SpecVLM" if dec.method == "specvlm" else f"SD ({dec.method})"
        van, spec = _RunState("Vanilla", decode), _RunState(label, decode)
        runs += [van, spec]
        view.update(clip=clip, pair=pair, dec=dec, mode=heatmap_mode)
        input_notes = _subtitle_overlap(extra, clip, input_notes)
        notes = "; ".join(n for n in [prompt_note.rstrip("."), *(getattr(clip, "notes", []) or []), *input_notes]
                          if n)
        view["notes"] = notes
        yield self._full(runs, view) | {"status": f"Prefill (vanilla)… {len(clip.frames)} frames. {notes}"}
        if stop.is_set():
            van.stopped = spec.stopped = True
        else:
            progress(0.3, "Prefill (vanilla)")
            van_extra = {k: v for k, v in extra.items() if k != "truth"}  # vanilla prunes nothing
            yield from self._one(van, dataclasses.replace(dec, method="vanilla"), pair, clip, prompt, stop, view,
                                 van_extra)
        if not stop.is_set():
            progress(0.6, f"Prefill + pruning ({label})")
            yield {"status": f"Prefill, scoring and pruning ({label})…"}
            yield from self._one(spec, dec, pair, clip, prompt, stop, view, extra)
            self._store_record(view.get("session"), spec, dec, prompt, pair, clip, _record_meta(extra))
            notes = "; ".join(n for n in [notes, _forced_note(spec, extra)] if n)
        else:
            spec.stopped = True
        yield self._full(runs, view) | {"status": self._final_status(runs, stop, notes)}

    def _extras(self, s: Settings, srt: str | None, truth: str | None) -> tuple[dict[str, Any], list[str]]:
        """(keyword arguments for ``engine.stream``, input notes) from the subtitle and ground-truth uploads.

        Only non-default arguments are included, so engines without subtitle support still work
        for plain requests.

        Raises:
            UserError: bad subtitle mode, unreadable .srt, or a malformed ground-truth .json.
        """
        mode = self.check_subtitle_mode(s.subtitle_mode)
        extra: dict[str, Any] = {}
        notes: list[str] = []
        try:
            cues = self.load_cues(srt)
        except ImportError as e:
            raise UserError(f"The subtitle reader is not installed: {e}") from e
        if cues:
            extra.update(subtitles=cues, subtitle_mode=mode)
            who = {"both": "both models", "target": "the target (and vanilla) only", "draft": "the draft only",
                   "none": "neither model (ignored)"}[mode]
            notes.append(f"{len(cues)} subtitle cue{'s' if len(cues) != 1 else ''} shown to {who}")
        elif srt:
            notes.append(f"the subtitle file {Path(srt).name!r} has no cues, so no transcript was added")
        if s.keep_text:
            d = self.load_truth(truth)
            if d is None:
                notes.append("no on-screen-text tokens were forced: no ground-truth .json was given "
                             "(only generated clips have one)")
            elif not d.get("text"):
                notes.append(f"no on-screen-text tokens were forced: {Path(truth).name!r} says the clip has "
                             "no burned-in text")
            else:
                extra["truth"] = d
        return extra, notes

    def _store_record(self, session: Any, spec: "_RunState", dec: Any, prompt: str, pair: Any, clip: Any,
                      meta: dict[str, Any] | None = None) -> None:
        """Keep the speculative run's record for :meth:`last_record` (never fails the run); ``meta``
        (subtitle mode, forced text) is added to the record's ``meta`` so an export keeps it."""
        make = getattr(self.engine, "make_record", None)
        if make is None or not spec.events:
            return
        try:
            rec = make(spec.events, dec, prompt, pair, clip)
            if meta and isinstance(getattr(rec, "meta", None), dict):
                rec.meta.update(meta)
            self._records[session] = rec
            while len(self._records) > 32:  # bounded: one per recent session
                self._records.popitem(last=False)
        except Exception:  # inspection is optional; the comparison already succeeded
            log.warning("could not build the run record", exc_info=True)

    def last_record(self, session: Any) -> Any:
        """The last speculative run's RunRecord of a session (None if there is none)."""
        return self._records.get(session)

    def _load_clip(self, path: str, vid: Any) -> Any:
        try:
            return self.engine.load_video(path, vid)
        except ImportError as e:
            raise UserError(f"The video reader is not installed: {e}") from e
        except ValueError as e:  # VideoError and friends
            raise UserError(f"Could not read the video: {_upload_name(e, path)}") from e

    def active_workers(self) -> list[threading.Thread]:
        """Decode worker threads still alive (empty when nothing runs; tests check Stop with it)."""
        return [t for t in threading.enumerate() if t.name.startswith(WORKER_PREFIX) and t.is_alive()]

    def _one(self, st: _RunState, dec: Any, pair: Any, clip: Any, prompt: str, stop: threading.Event,
             view: dict[str, Any], extra: dict[str, Any] | None = None) -> Iterator[dict[str, Any]]:
        """Decode one run in a worker thread and yield throttled updates (``extra``: keyword
        arguments for ``engine.stream``: subtitles, subtitle mode, ground truth).

        The worker always ends before this returns (Stop, error or a closed page set ``stop``;
        the engine polls it every step), so a stopped run uses no CPU/GPU afterwards and the next
        queued request never overlaps it.
        """
        q: queue.Queue = queue.Queue()
        done = object()

        def pump() -> None:
            try:
                for ev in self.engine.stream(pair, clip, prompt, dec, stop.is_set, **(extra or {})):
                    q.put(ev)
            except BaseException as e:  # handed to the request thread
                q.put(e)
            finally:
                q.put(done)

        worker = threading.Thread(target=pump, name=f"{WORKER_PREFIX}{st.name}", daemon=True)
        worker.start()
        last, dirty, finished = 0.0, True, False
        try:
            while True:
                items = _drain(q, self.update_interval_s)
                finished = any(it is done for it in items)
                for it in items:
                    if isinstance(it, BaseException):
                        raise it
                    if it is not done:
                        self._fold(st, it, view)
                        dirty = True
                now = time.perf_counter()
                if finished:
                    st.done, st.stopped = not stop.is_set(), stop.is_set()
                if finished or (dirty and now - last >= self.update_interval_s):
                    last, dirty = now, False
                    yield self._step_update(st, view)
                if finished:
                    return
        finally:
            # The end marker, once drained, is no longer in the queue while the worker thread may still be
            # winding down: only a run that has not finished is stopped (else the next run would see Stop).
            if not finished and worker.is_alive() and not _finished(q, done):
                stop.set()  # the page went away or an error: end the engine loop too
            _join(worker)

    def _fold(self, st: _RunState, item: Any, view: dict[str, Any]) -> None:
        st.events.append(item)
        if hasattr(item, "step"):
            st.add(item)
        else:  # PrefillInfo
            st.prefill = item
            if item.prune is not None:
                view["heatmaps"] = self._heatmaps(view["clip"], item)
                view["heatmaps_new"] = True

    def _heatmaps(self, clip: Any, info: Any) -> dict[str, Any]:
        """Both gallery variants for the toggle, computed once per run."""
        p = info.prune
        fpt = int(getattr(info, "frames_per_token", 1) or 1)
        common = dict(keep=p.keep, stage1=p.stage1, stage2=p.stage2, frames_per_token=fpt,
                      timestamps=getattr(clip, "timestamps", None))
        if info.token_grid is None:
            return {"stages": [], "scores": None, "fpt": fpt,
                    "note": "This model gave no token → frame map, so no heatmap."}
        out = {"stages": plots.heatmap_gallery(clip.frames, info.token_grid, mode="stages", **common),
               "scores": None, "fpt": fpt, "note": ""}
        if p.scores is not None:
            out["scores"] = plots.heatmap_gallery(clip.frames, info.token_grid, mode="scores",
                                                  scores=p.scores, **common)
        out["summary"] = f"{p.num_video_tokens} video tokens → {p.num_kept} kept for the draft ({p.method})"
        return out

    @staticmethod
    def pick_heatmaps(state: dict[str, Any] | None, mode: str) -> tuple[list, str]:
        """(gallery items, legend HTML) for a heatmap state and a mode.

        Args:
            state: the ``heatmaps`` value of a run (None before any run).
            mode: a :data:`HEATMAP_MODES` label or ``"stages"`` / ``"scores"``.
        """
        mode = HEATMAP_MODES.get(mode, mode)
        if not state:
            return [], plots.heatmap_legend_html(mode)
        legend = plots.heatmap_legend_html(mode, state.get("fpt", 1))
        if state.get("summary"):
            legend = f"<div><b>{state['summary']}</b></div>" + legend
        if state.get("note"):
            legend += f"<div><i>{state['note']}</i></div>"
        items = state.get(mode)
        if items is None:
            return [], legend + "<div><i>Raw scores are not available for this method.</i></div>"
        return items, legend

    # ---- update assembly -------------------------------------------------------------------

    def _step_update(self, st: _RunState, view: dict[str, Any]) -> dict[str, Any]:
        """Text and stats at every update; charts at most every ``plot_interval_s`` and at the end
        (re-drawing plotly figures is the browser's heaviest work)."""
        spec = st.name != "Vanilla"
        upd: dict[str, Any] = {}
        if spec:
            upd["spec_html"] = plots.tokens_html(st.pieces, legend=False, placeholder="prefill…")
            upd["spec_stats"] = st.stats_md(True)
        else:
            upd["vanilla_html"] = plots.plain_text_html(st.text, placeholder="prefill…")
            upd["vanilla_stats"] = st.stats_md(False)
        if view.pop("heatmaps_new", False):
            upd["heatmaps"] = view["heatmaps"]
            upd["gallery"], upd["heatmap_legend"] = self.pick_heatmaps(view["heatmaps"], view["mode"])
        phase = "stopped" if st.stopped else "finished" if st.done else "decoding"
        upd["status"] = f"{st.name} {phase}: {st.counts[-1] if st.counts else 0} tokens"
        view.setdefault("runs_seen", {})[st.name] = st
        now = time.perf_counter()
        if st.done or st.stopped or now - view.get("plotted", 0.0) >= self.plot_interval_s:
            view["plotted"] = now
            upd["time_plot"] = self._time_fig(view)
            if spec:
                upd["accept_plot"] = self._accept_fig(st, view)
        return upd

    def _accept_fig(self, st: _RunState, view: dict[str, Any]) -> Any:
        dec = view.get("dec")
        return plots.accept_length_figure(st.accept, st.step_texts,
                                          max_depth=getattr(getattr(dec, "tree", None), "depth", None))

    def _time_fig(self, view: dict[str, Any]) -> Any:
        runs = view.get("runs_seen", {})
        return plots.tokens_over_time_figure({n: (r.times, r.counts) for n, r in runs.items()})

    def _full(self, runs: list[_RunState], view: dict[str, Any]) -> dict[str, Any]:
        """A complete update (every key) from the current state."""
        van, spec = runs
        view.setdefault("runs_seen", {}).update({van.name: van, spec.name: spec})
        hm = view.get("heatmaps")
        gallery, legend = self.pick_heatmaps(hm, view.get("mode", "stages"))
        view.pop("heatmaps_new", None)
        return {
            "status": "",
            "vanilla_html": plots.plain_text_html(van.text, placeholder="waiting…"),
            "vanilla_stats": van.stats_md(False),
            "spec_html": plots.tokens_html(spec.pieces, legend=False, placeholder="waiting…"),
            "spec_stats": spec.stats_md(True),
            "summary": summary_md(van, spec, view.get("dec")),
            "gallery": gallery,
            "heatmap_legend": legend,
            "accept_plot": self._accept_fig(spec, view),
            "time_plot": self._time_fig(view),
            "heatmaps": hm,
        }

    def _final_status(self, runs: list[_RunState], stop: threading.Event, notes: str = "") -> str:
        head = "**Stopped.** Ready for the next run." if stop.is_set() else "**Done.** Ready for the next run."
        return f"{head}  \n*Input notes: {notes}*" if notes else head


def _record_meta(extra: dict[str, Any]) -> dict[str, Any]:
    """JSON-ready run settings that the decode config does not hold (for the Inspect record)."""
    meta: dict[str, Any] = {}
    if extra.get("subtitles"):
        meta.update(subtitle_mode=extra.get("subtitle_mode", "both"), subtitle_cues=len(extra["subtitles"]))
    if extra.get("truth") is not None:
        meta["keep_text"] = True
    return meta


def summary_md(van: _RunState, spec: _RunState, dec: Any = None) -> str:
    """The comparison summary (Markdown): speedup, τ, tokens/forward, prefill, kept tokens,
    identical or first divergence.

    Args:
        van: the vanilla run.  spec: the speculative run.  dec: the DecodeConfig.
    """
    if not van.counts and not spec.counts:
        return ""
    rows = ["| | Vanilla | " + spec.name + " |", "|---|---|---|"]
    rows.append(f"| decode time | {van.elapsed:.2f} s | {spec.elapsed:.2f} s |")
    rows.append(f"| tokens | {_last(van.counts)} | {_last(spec.counts)} |")
    rows.append(f"| tokens/s | {van.tokens_per_s:.1f} | {spec.tokens_per_s:.1f} |")
    rows.append(f"| prefill | {_prefill(van)} | {_prefill(spec)} |")
    lines = ["\n".join(rows), ""]
    facts = []
    if van.tokens_per_s > 0 and spec.tokens_per_s > 0:
        facts.append(f"**Decode speedup {spec.tokens_per_s / van.tokens_per_s:.2f}x** (tokens/s ratio)")
    if spec.accept:
        facts.append(f"τ = **{spec.tau:.2f}**")
        facts.append(f"**{spec.tokens_per_forward:.2f}** tokens / target forward")
    p = getattr(spec.prefill, "prune", None)
    if p is not None:
        r = 1 - p.num_kept / max(1, p.num_video_tokens)
        facts.append(f"video tokens **{p.num_video_tokens} → {p.num_kept}** kept (dropped {r:.0%})")
        n_forced = forced_count(p)
        if n_forced:
            facts.append(f"kept **{n_forced}** on-screen-text token{'s' if n_forced != 1 else ''} (forced)")
    lines.append(" · ".join(facts))
    lines.append("")
    sampling = getattr(dec, "sampling", None)
    if sampling is not None and not sampling.greedy:
        lines.append(f"Sampling (temperature {sampling.temperature:g}, nucleus {sampling.top_p_sampling:g}, seed "
                     f"{sampling.seed}): both runs draw from the same target distribution (exact, by recursive "
                     "rejection sampling), but with different random draws, so token-by-token identity is not "
                     "expected.")
    else:
        lines.append(_identity(van, spec))
    return "\n".join(lines)


def forced_count(prune: Any) -> int:
    """How many video tokens a PruneResult kept because they were forced (0 without ``forced``)."""
    forced = getattr(prune, "forced", None)
    if forced is None:
        return 0
    return int(forced.numel()) if hasattr(forced, "numel") else len(forced)


def _forced_note(spec: _RunState, extra: dict[str, Any]) -> str:
    """The status note on forced on-screen-text tokens of a finished speculative run ("" if none were asked for)."""
    if "truth" not in extra or spec.prefill is None:
        return ""
    p = spec.prefill.prune
    n = forced_count(p)
    if n:
        budget = " (the whole draft budget)" if p is not None and n >= p.num_kept else ""
        return f"kept {n} on-screen-text token{'s' if n != 1 else ''}{budget}"
    if p is None:
        return "no on-screen-text tokens were forced: this run did not prune"
    return "no on-screen-text tokens were forced: the text is on none of the sampled frames"


def _truth_problem(d: Any) -> str:
    """What is wrong with a ground-truth dict for forcing text tokens ("" if nothing)."""
    if not isinstance(d, dict):
        return f"expected a JSON object, got {type(d).__name__}"
    for key in ("width", "height", "fps"):
        if key not in d:
            return f"missing key {key!r}"
        v = d[key]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            return f"{key!r} must be a positive number, got {v!r}"
    if "text" not in d:
        return "missing key 'text' (null when the clip has no burned-in text)"
    t = d["text"]
    if t is None:
        return ""
    if not isinstance(t, dict):
        return f"'text' must be an object or null, got {type(t).__name__}"
    for key in ("start_frame", "end_frame", "box"):
        if key not in t:
            return f"missing key 'text.{key}'"
    for key in ("start_frame", "end_frame"):
        if isinstance(t[key], bool) or not isinstance(t[key], (int, float)):
            return f"'text.{key}' must be a number, got {t[key]!r}"
    box = t["box"]
    if not (isinstance(box, list) and len(box) == 4
            and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in box)):
        return f"'text.box' must be 4 numbers [x0, y0, x1, y1], got {box!r}"
    return ""


def _subtitle_overlap(extra: dict[str, Any], clip: Any, notes: list[str]) -> list[str]:
    """Replace the "N cues shown to ..." note when no cue overlaps the sampled frames
    (a transcript of another video, or an offset file): the prompt then gets no transcript."""
    from specvlm.prompting import no_transcript_note

    ts = getattr(clip, "timestamps", None)
    missed = no_transcript_note(extra.get("subtitles"), ts) if ts is not None else None
    if not missed:
        return notes
    return [n for n in notes if "subtitle cue" not in n] + [missed]


def _upload_name(error: Exception, path: str) -> str:
    """The error's message with the server-side path of an upload (a temp folder) shortened to the file's name."""
    text = str(error)
    return text.replace(str(path), Path(path).name) if path else text


def _check_upload(path: str, what: str, max_mb: float) -> str:
    """The file's name after checking it is still there and not over ``max_mb``.

    Raises:
        UserError: missing or too large.
    """
    name = Path(path).name
    try:
        size = Path(path).stat().st_size
    except OSError:
        raise UserError(f"The {what} {name!r} is no longer on the server; upload it again.") from None
    if size > max_mb * MB:
        raise UserError(f"The {what} {name!r} is {size / MB:.1f} MB; {what}s over {max_mb:g} MB are not accepted.")
    return name


def _identity(van: _RunState, spec: _RunState) -> str:
    if not (van.done and spec.done):
        return "Outputs not compared: a run did not finish."
    try:
        from specvlm.metrics import first_divergence
    except ImportError:
        first_divergence = _first_divergence
    i = first_divergence(van.ids, spec.ids)
    if i is None:
        return f"**Outputs identical** ✓ ({len(van.ids)} tokens): speculative decoding was lossless."
    ctx_v = _near(van, i)
    ctx_s = _near(spec, i)
    return (f"**Outputs differ from token {i}** (vanilla …{ctx_v!r} vs speculative …{ctx_s!r}). "
            "Low-precision (bf16/fp16) verification can flip near-ties; fp32 should match exactly.")


def _near(st: _RunState, i: int) -> str:
    if st.decode is None:
        return ""
    try:
        return st.decode(st.ids[max(0, i - 3): i + 3])
    except Exception:
        return ""


def _first_divergence(a: Sequence[int], b: Sequence[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def _prefill(st: _RunState) -> str:
    p = st.prefill
    if p is None:
        return "–"
    s = f"{p.prefill_s:.2f} s"
    extra = (p.prune_s or 0) + (p.draft_prefill_s or 0)
    if p.prune is not None:
        s += f" (+ prune & draft prefill {extra:.2f} s)"
    return s


def _last(xs: list[int]) -> int:
    return xs[-1] if xs else 0


def _mmss(t: float) -> str:
    m, s = divmod(float(t), 60)
    return f"{int(m):02d}:{s:04.1f}"


def _drain(q: queue.Queue, timeout: float) -> list[Any]:
    """Block up to ``timeout`` for one item, then take everything queued."""
    try:
        items = [q.get(timeout=timeout)]
    except queue.Empty:
        return []
    while True:
        try:
            items.append(q.get_nowait())
        except queue.Empty:
            return items


def _decoder(pair: Any) -> Callable[[list[int]], str] | None:
    """ids -> text with special tokens skipped, from the pair's tokenizer (None if absent)."""
    tok = getattr(pair, "processor", None)
    tok = getattr(tok, "tokenizer", tok)
    if tok is None or not hasattr(tok, "decode"):
        return None
    return lambda ids: tok.decode(ids, skip_special_tokens=True)


def _as_int(name: str, v: Any) -> int:
    try:
        f = float(v)
    except (TypeError, ValueError):
        raise UserError(f"Invalid setting: {name} must be a whole number, got {v!r}.") from None
    if not math.isfinite(f) or f != int(f):
        raise UserError(f"Invalid setting: {name} must be a whole number, got {v!r}.")
    return int(f)


def _as_float(name: str, v: Any) -> float:
    try:
        f = float(v)
    except (TypeError, ValueError):
        raise UserError(f"Invalid setting: {name} must be a number, got {v!r}.") from None
    if not math.isfinite(f):
        raise UserError(f"Invalid setting: {name} must be a finite number, got {v!r}.")
    return f


WORKER_PREFIX = "specvlm-decode-"
"""Name prefix of the decode worker threads."""


def _finished(q: queue.Queue, done: object) -> bool:
    """True if the worker already queued its end marker (it is exiting on its own)."""
    with q.mutex:
        return any(it is done for it in q.queue)


def _join(worker: threading.Thread, warn_every_s: float = 30.0) -> None:
    """Wait for a decode worker to end (it polls the stop flag every step; a long prefill
    cannot be interrupted, so this may take that long)."""
    while True:
        worker.join(warn_every_s)
        if not worker.is_alive():
            return
        log.warning("waiting for decode worker %s to end (prefill or a slow step in progress)", worker.name)


def _drop_frames(exc: BaseException | None) -> None:
    """Clear the local variables of every finished frame in an exception's traceback chain so
    the tensors they reference (KV cache, activations) can be freed right away."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if exc.__traceback__ is not None:
            traceback.clear_frames(exc.__traceback__)
            exc.__traceback__ = None
        exc = exc.__cause__ or exc.__context__


def _model_error(target: str, draft: str | None, e: BaseException, oom: bool) -> str:
    """One readable sentence for a model that failed to load."""
    what = f"model {target!r}" + (f" with draft {draft!r}" if draft else "")
    text = str(e)
    if oom:
        return f"Could not load {what}: out of memory. Pick a smaller model or free the GPU."
    if "trust_remote_code" in text or "custom code" in text:
        return (f"Could not load {what}: it needs custom code from its repository (trust_remote_code), which this "
                "app never runs. Use a Qwen2.5-VL or LLaVA-OneVision checkpoint that transformers supports natively.")
    if type(e).__name__ in ("ModelLoadError", "TokenizerMismatchError"):
        return f"Could not load {what}: " + text.removeprefix(f"could not load model {target!r}: ")
    return f"Could not load {what}: {type(e).__name__}: {text}"


def _duration(seconds: float) -> str:
    """'45 s', '10 min', '1 h 30 min'."""
    s = float(seconds)
    if s < 120:
        return f"{s:.0f} s" if s >= 10 else f"{s:.1f} s"
    m = s / 60
    if m < 120:
        return f"{m:.0f} min" if abs(m - round(m)) < 0.05 else f"{m:.1f} min"
    return f"{int(m // 60)} h {int(m % 60)} min"


class UploadJanitor:
    """Deletes uploaded input files (videos, subtitles) as soon as nobody needs them.

    A file is needed while a browser session shows it (:meth:`hold`; released by a new upload
    or when the page closes, :meth:`release_session`), while a request uses it (:meth:`using`),
    or while a queued request refers to it (``queued()``, e.g. Gradio's pending events; None
    there means "unknown" and keeps the file). API requests hold nothing, so their upload is
    deleted when the request ends. Never deleted: files outside ``upload_dir`` and copies of
    ``protected`` files (the examples, which Gradio caches by content and shares between users).

    Args:
        upload_dir: the folder uploads land in (Gradio's upload / cache folder).
        protected: files whose byte-identical copies are kept.
        queued: ``() -> set of paths`` referenced by queued requests, or None if unknown.
    """

    def __init__(self, upload_dir: str | os.PathLike[str], protected: Iterable[str | os.PathLike[str]] = (),
                 queued: Callable[[], set[str] | None] | None = None) -> None:
        self.upload_dir = Path(upload_dir).resolve()
        self._protected: dict[int, list[Path]] = {}
        for f in protected:
            fp = Path(f)
            if fp.is_file():
                self._protected.setdefault(fp.stat().st_size, []).append(fp)
        self.queued = queued
        self._held: dict[tuple[str, str], str] = {}
        self._using: Counter[str] = Counter()
        self._lock = threading.RLock()
        self.deleted: list[str] = []

    def _key(self, path: str | os.PathLike[str] | None) -> str | None:
        if not path:
            return None
        try:
            p = Path(path).resolve()
        except (OSError, RuntimeError):
            return None
        return str(p) if p.is_relative_to(self.upload_dir) and p != self.upload_dir else None

    def hold(self, session: str | None, slot: str, path: str | None) -> None:
        """The session's ``slot`` (e.g. ``"video"``) now shows ``path`` (None: nothing); the file it
        showed before is deleted if no one else needs it."""
        key = (session or "default", slot)
        with self._lock:
            old = self._held.pop(key, None)
            new = self._key(path)
            if new:
                self._held[key] = new
            if old and old != new:
                self._collect([old])

    def release_session(self, session: str | None) -> None:
        """The page closed: drop everything it held."""
        sid = session or "default"
        with self._lock:
            old = [v for (s, _), v in self._held.items() if s == sid]
            for k in [k for k in self._held if k[0] == sid]:
                del self._held[k]
            self._collect(old)

    @contextlib.contextmanager
    def using(self, paths: Iterable[str | None]) -> Iterator[None]:
        """Mark files in use for the duration of a request; afterwards delete the unneeded ones."""
        keys = [k for k in (self._key(p) for p in paths) if k]
        with self._lock:
            self._using.update(keys)
        try:
            yield
        finally:
            with self._lock:
                self._using.subtract(keys)
                self._using += Counter()  # drop zero counts
                self._collect(keys)

    def _needed(self, key: str, queued: set[str] | None) -> bool:
        if self._using[key] > 0 or key in self._held.values():
            return True
        if queued is None or key in queued:
            return True
        p = Path(key)
        try:
            size = p.stat().st_size
        except OSError:
            return False
        return any(_same_file(p, q) for q in self._protected.get(size, ()))

    def _collect(self, keys: Iterable[str]) -> None:
        keys = [k for k in dict.fromkeys(keys) if k]
        if not keys:
            return
        try:
            queued = self.queued() if self.queued is not None else set()
            queued = None if queued is None else {self._key(q) or q for q in queued}
        except Exception:
            log.warning("could not list queued requests; keeping uploads for now", exc_info=True)
            queued = None
        for key in keys:
            if self._needed(key, queued):
                continue
            p = Path(key)
            try:
                p.unlink(missing_ok=True)
                self.deleted.append(key)
                parent = p.parent
                if parent != self.upload_dir and parent.is_relative_to(self.upload_dir) and not any(parent.iterdir()):
                    parent.rmdir()
            except OSError as e:
                log.warning("could not delete upload %s: %s", key, e)


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve() or filecmp.cmp(a, b, shallow=False)
    except OSError:
        return False
