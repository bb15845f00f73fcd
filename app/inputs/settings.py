"""What a request may ask and what it asks: server limits (one home for each default and its
environment variable), the run settings of the panel and the typed run request.

The run settings take their defaults from :mod:`specvlm.config` (``DecodeConfig``, ``TreeConfig``,
``PruneConfig``, ``SamplingConfig``, ``VideoConfig``); only the app's own choices live here (a
smaller token budget on a CPU, who sees the subtitles, on-screen-text forcing). Everything here is
plain data: a :class:`RunRequest` can be built, checked and pickled without a model.

Source: SpecVLM (arXiv 2508.16201) Sec. 4 for the paper defaults; docs/design.md §1 (the app).
"""
from __future__ import annotations

import dataclasses
import inspect
import logging
import math
import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from specvlm.config import (DEFAULT_PROMPT, PRUNE_METHODS, TREE_SHAPES, ConfigError, DecodeConfig,
                            ReselectConfig, VideoConfig, config_from_settings)
from specvlm.text import prompting
from specvlm.text.prompting import SUBTITLE_MODES

from app.runs.timing import MAX_REPEATS

if TYPE_CHECKING:
    from specvlm.models.presets import PresetSettings

log = logging.getLogger(__name__)

__all__ = ["DEFAULT_PROMPT", "PRUNE_METHODS", "TREE_SHAPES", "SUBTITLE_MODES", "UserError", "Limits",
           "RunSettings", "RunRequest", "PRESET_FIELDS", "resolve", "build_configs", "check_prompt",
           "check_subtitle_mode", "old_name_notes"]

MB = 1024 * 1024
MAX_SRT_MB = 5
"""Largest subtitle file accepted (MiB); real .srt files are kilobytes."""
MAX_TRUTH_MB = 20
"""Largest ground-truth .json accepted (MiB); a generated clip's truth is tens of kilobytes."""
UPDATE_INTERVAL_S = 0.15
"""Minimum time between streamed UI updates while decoding."""
PLOT_INTERVAL_S = 0.4
"""Minimum time between chart updates while decoding: more than twice a second, so the charts keep up with a fast
SpecVLM run (re-drawing plotly figures is the browser's heaviest work)."""

HEATMAP_MODES = {"Pruning stages": "stages", "Raw attention scores": "scores"}
"""Heatmap toggle label -> :func:`app.views.plots.heatmap_gallery` mode."""

SUBTITLE_MODE_CHOICES = tuple(zip(
    ("Both models", "Target only", "Draft only", "Neither (ignore them)"), SUBTITLE_MODES))
"""(label, mode) pairs of the "Subtitles go to" radio, one per :data:`specvlm.text.prompting.SUBTITLE_MODES`."""


class UserError(ValueError):
    """A problem the person can fix (bad file, bad setting, missing model); message is shown as-is."""


def _env_num(name: str, default: float) -> float:
    """A number from the environment (default when unset or unparsable)."""
    raw = os.environ.get(name, "").strip()
    try:
        return float(raw) if raw else default
    except ValueError:
        log.warning("ignoring %s=%r: not a number", name, raw)
        return default


def duration_text(seconds: float) -> str:
    """'45 s', '10 min', '1 h 30 min'."""
    s = float(seconds)
    if s < 120:
        return f"{s:.0f} s" if s >= 10 else f"{s:.1f} s"
    m = s / 60
    if m < 120:
        return f"{m:.0f} min" if abs(m - round(m)) < 0.05 else f"{m:.1f} min"
    return f"{int(m // 60)} h {int(m % 60)} min"


@dataclasses.dataclass(frozen=True)
class Limits:
    """What one request may ask of the server (``app.py`` flags, ``SPECVLM_*`` env vars).

    Attributes:
        max_upload_mb: largest video file accepted (MiB); also Gradio's upload cap.
        max_duration_s: longest video accepted (seconds of stream duration).
        max_prompt_chars: longest prompt accepted (characters).
        max_frames: most frames one request may sample (the Frames slider's maximum; the library's
            ``VideoConfig.max_frames``).
        max_new_tokens: largest generation budget per run (the slider's maximum).
        video_timeout_s: time limit for probing and decoding one video (seconds).
    """

    max_upload_mb: float = 200.0
    max_duration_s: float = 600.0
    max_prompt_chars: int = 2000
    max_frames: int = VideoConfig.max_frames
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
                f"**{duration_text(self.max_duration_s)}**, prompts up to {self.max_prompt_chars} characters, "
                f"≤ {self.max_frames} frames, ≤ {self.max_new_tokens} new tokens. "
                "Large videos are downscaled and sampled, never decoded whole.")


_DEC = DecodeConfig()


@dataclasses.dataclass(frozen=True)
class RunSettings:
    """Everything the settings panel sets; defaults are the library's (:mod:`specvlm.config`).

    Attributes:
        preset: model preset name.
        custom_model: Hub id or local path overriding the preset; ``"target + draft"`` or
            ``"target, draft"`` for Std-SD, a single id for Self-SD.
        method: pruning method of the speculative run (``specvlm`` or a baseline).
        drop_rate: r.  top_p: λ (Stage I attention share).
        tree_shape, depth, top_k, total_tokens, min_prob: the draft tree (``TreeConfig``).
        num_frames: frames sampled from the video.
        max_new_tokens: generation budget per run.
            These seven (:data:`PRESET_FIELDS`) are None when not set: the preset's then apply
            (:func:`specvlm.models.presets.resolve_settings`, as for the CLI's flags).
        temperature, top_p_sampling, seed: sampling (temperature 0 = greedy).
        subtitle_mode: who sees an uploaded transcript (:data:`SUBTITLE_MODES`; vanilla sees it
            exactly when the target does).
        keep_text: force the draft to keep the video tokens covering the clip's burned-in text
            (needs a ground-truth ``.json`` of a generated clip).
        fixed_length: ignore EOS and generate exactly ``max_new_tokens`` (``DecodeConfig.stop_at_eos``
            False; the CLI's ``--no-eos``): a decode long enough to watch, stop and time.
        timing_pairs: interleaved vanilla / speculative pairs of runs; the speedup is their median
            (1 to :data:`app.runs.timing.MAX_REPEATS`; pairs after the first are timed, not shown).
        reselect, reselect_min_share, reselect_step_tokens, reselect_total_tokens: re-selection of the draft's
            video tokens during decoding (:class:`specvlm.config.ReselectConfig`; off by default).
        adaptive_r: r per clip from the target's attention (:attr:`specvlm.config.PruneConfig.adaptive_r`).
    """

    preset: str = ""
    custom_model: str = ""
    method: str = _DEC.method
    drop_rate: float = _DEC.prune.drop_rate
    top_p: float = _DEC.prune.top_p
    tree_shape: str | None = None
    depth: int | None = None
    top_k: int | None = None
    total_tokens: int | None = None
    min_prob: float | None = None
    num_frames: int | None = None
    max_new_tokens: int | None = None
    temperature: float = _DEC.sampling.temperature
    top_p_sampling: float = _DEC.sampling.top_p_sampling
    seed: int = _DEC.sampling.seed
    subtitle_mode: str = SUBTITLE_MODES[0]
    keep_text: bool = False
    fixed_length: bool = not _DEC.stop_at_eos
    timing_pairs: int = 1
    reselect: bool = _DEC.reselect.enabled
    reselect_min_share: float = _DEC.reselect.min_share
    reselect_step_tokens: int = _DEC.reselect.step_tokens
    reselect_total_tokens: int = _DEC.reselect.total_tokens
    adaptive_r: bool = _DEC.prune.adaptive_r


PRESET_FIELDS = ("tree_shape", "depth", "top_k", "total_tokens", "min_prob", "num_frames", "max_new_tokens")
"""The :class:`RunSettings` a preset decides where the request leaves them unset (None)."""


@dataclasses.dataclass(frozen=True)
class Field:
    """One input of ``/compare`` and ``/compare_json``: the component's name, the :class:`RunSettings` field
    it sets (None for the request's own inputs: uploads, prompt, heatmap mode), for those the default, and for
    an old spelling kept for API callers the name that replaced it (its default is None: not given)."""

    name: str
    setting: str | None = None
    default: Any = None
    renamed_to: str | None = None


FIELDS = (Field("video"), Field("prompt", default=DEFAULT_PROMPT), Field("preset", "preset"),
          Field("custom", "custom_model"), Field("method", "method"), Field("drop_rate", "drop_rate"),
          Field("lambda_", "top_p"), Field("tree", "tree_shape"), Field("depth", "depth"), Field("top_k", "top_k"),
          Field("total", "total_tokens"), Field("frames", "num_frames"), Field("max_new_tokens", "max_new_tokens"),
          Field("hm_mode", default="Pruning stages"), Field("temperature", "temperature"),
          Field("top_p_sampling", "top_p_sampling"), Field("seed", "seed"), Field("srt"),
          Field("subtitle_mode", "subtitle_mode"), Field("truth"), Field("keep_text", "keep_text"),
          Field("min_prob", "min_prob"), Field("fixed_length", "fixed_length"), Field("timing_pairs", "timing_pairs"),
          Field("top_p", "top_p", renamed_to="lambda_"),
          Field("max_new", "max_new_tokens", renamed_to="max_new_tokens"), Field("reselect", "reselect"),
          Field("reselect_min_share", "reselect_min_share"), Field("reselect_step_tokens", "reselect_step_tokens"),
          Field("reselect_total_tokens", "reselect_total_tokens"), Field("adaptive_r", "adaptive_r"))
"""The one table of ``/compare``'s inputs, in order (new ones are appended, so API callers that pass fewer
arguments keep working); the handlers' parameters (:func:`handler_parameters`), the page's input list and
:meth:`RunRequest.from_inputs` all read it. ``lambda_`` and ``max_new_tokens`` are the CLI's names (``--lambda``,
``--max-new-tokens``); ``top_p`` and ``max_new``, their old spellings, still work (:func:`old_name_notes`)."""

COMPARE_INPUTS = tuple(f.name for f in FIELDS)
"""Inputs of ``/compare`` by component name, in order."""

_SETTING_OF = {f.name: f.setting for f in FIELDS if f.setting}
"""Component name -> :class:`RunSettings` field (old names after the new ones)."""


def handler_parameters(defaults: RunSettings) -> list[inspect.Parameter]:
    """The named parameters of ``/compare`` and ``/compare_json``, one per :data:`FIELDS` entry, with the
    defaults of ``defaults`` (the video has none; the :data:`PRESET_FIELDS` default to None: the chosen preset's)."""
    return [inspect.Parameter(f.name, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                              default=(inspect.Parameter.empty if f.name == "video" else
                                       None if f.renamed_to or f.setting in PRESET_FIELDS else
                                       getattr(defaults, f.setting) if f.setting else f.default))
            for f in FIELDS]


def old_name_notes(values: Mapping[str, Any]) -> list[str]:
    """One note per old input name given a value (``top_p``, ``max_new``): what replaced it. Their values are
    used (:meth:`RunRequest.from_inputs` reads them after the new names)."""
    return [f"'{f.name}' is the old name of '{f.renamed_to}' (as on the command line): it still works, "
            f"use '{f.renamed_to}'" for f in FIELDS if f.renamed_to and values.get(f.name) is not None]


def bind_inputs(fn: Any, args: tuple, kwargs: dict) -> dict[str, Any]:
    """A handler's arguments by name, defaults filled in, by the signature built from :data:`FIELDS`
    (``fn.__signature__``: Gradio passes every input and its request in order, Python callers may pass fewer)."""
    bound = fn.__signature__.bind(*args, **kwargs)
    bound.apply_defaults()
    return bound.arguments


@dataclasses.dataclass(frozen=True)
class RunRequest:
    """One press of Run: the uploads, the prompt and the settings (plain, picklable data).

    Attributes:
        video: path of the uploaded video (None: nothing uploaded).
        prompt: the question (empty: :data:`DEFAULT_PROMPT`).
        settings: the panel's settings.
        srt: path of an uploaded .srt; its cues go to both runs as ``settings.subtitle_mode`` says.
        truth: path of a generated clip's ground-truth .json (used with ``settings.keep_text``).
        heatmap_mode: ``"stages"`` or ``"scores"`` (or a :data:`HEATMAP_MODES` label) for the gallery.
    """

    video: str | None
    prompt: str = DEFAULT_PROMPT
    settings: RunSettings = RunSettings()
    srt: str | None = None
    truth: str | None = None
    heatmap_mode: str = "stages"

    @classmethod
    def from_inputs(cls, values: Mapping[str, Any]) -> "RunRequest":
        """Build from ``/compare``'s inputs keyed by :data:`COMPARE_INPUTS` names (missing ones: defaults;
        None numbers, e.g. an empty Seed box, fall back to the default; an old name given wins over the new)."""
        d = RunSettings()
        kw = {field: values[name] for name, field in _SETTING_OF.items()
              if name in values and values[name] is not None}
        kw["custom_model"] = kw.get("custom_model") or ""
        kw["subtitle_mode"] = kw.get("subtitle_mode") or d.subtitle_mode
        kw["keep_text"] = bool(kw.get("keep_text", d.keep_text))
        kw["fixed_length"] = bool(kw.get("fixed_length", d.fixed_length))
        kw["reselect"], kw["adaptive_r"] = bool(kw.get("reselect", d.reselect)), bool(kw.get("adaptive_r", d.adaptive_r))
        return cls(video=values.get("video") or None, prompt=values.get("prompt") or "",
                   settings=RunSettings(**kw), srt=values.get("srt") or None, truth=values.get("truth") or None,
                   heatmap_mode=HEATMAP_MODES.get(values.get("hm_mode") or "stages", values.get("hm_mode") or "stages"))


def device_type_of(device: str | None, cuda_available: bool) -> str:
    """The torch device type a server decodes on: its ``--device``'s, else ``cuda`` when available, else ``cpu``."""
    return (device or ("cuda" if cuda_available else "cpu")).split(":")[0]


def build_configs(s: RunSettings, limits: Limits, device_type: str = "cpu",
                  presets: Mapping[str, Any] | None = None,
                  budget: Callable[[int, int], tuple[int, int]] | None = None) -> tuple[DecodeConfig, VideoConfig]:
    """Validate settings into (DecodeConfig, VideoConfig). The :data:`PRESET_FIELDS` left unset are the preset's
    (:func:`resolve`; ``device_type`` ``cuda`` gives a custom model the GPU budget).

    Args:
        s: the Run's settings.  limits: the server's limits.  device_type: ``cpu`` or ``cuda``.
        presets: preset name -> Preset (None: the library's presets).
        budget: caps the preset's (frames, new tokens) (ZeroGPU's :func:`app.runs.zerogpu.default_budget`).

    Raises:
        UserError: a setting is missing or out of range (message names it).
    """
    if s.method == "vanilla":
        raise UserError("Pick a speculative method for the right panel; the left panel is always vanilla.")
    try:
        r = resolve(s, presets, device_type == "cuda", server_budget(limits, budget))
        ints = {"num_frames": r.num_frames, "max_new_tokens": r.max_new_tokens}
        ints |= {k: _as_int(k, getattr(s, k))
                 for k in ("timing_pairs", "reselect_step_tokens", "reselect_total_tokens")}
        reselect = ReselectConfig(enabled=bool(s.reselect), min_share=_as_float("re-selection share",
                                                                                 s.reselect_min_share),
                                  step_tokens=ints["reselect_step_tokens"], total_tokens=ints["reselect_total_tokens"])
        dec = config_from_settings(
            s.method, max_new_tokens=ints["max_new_tokens"], drop_rate=_as_float("drop rate r", s.drop_rate),
            top_p=_as_float("λ", s.top_p), seed=_as_int("seed", s.seed),
            temperature=_as_float("temperature", s.temperature),
            top_p_sampling=_as_float("nucleus top-p", s.top_p_sampling),
            tree=r.tree, stop_at_eos=not s.fixed_length,
            adaptive_r=bool(s.adaptive_r), reselect=reselect)
        vid = VideoConfig(num_frames=ints["num_frames"], max_frames=limits.max_frames)
    except ConfigError as e:
        raise UserError(f"Invalid setting: {e}") from e
    if not 1 <= ints["timing_pairs"] <= MAX_REPEATS:
        raise UserError(f"Invalid setting: timing runs={ints['timing_pairs']} must be 1 to {MAX_REPEATS}.")
    for name, key, cap in (("frames", "num_frames", limits.max_frames),
                           ("max new tokens", "max_new_tokens", limits.max_new_tokens)):
        if ints[key] > cap:
            raise UserError(f"Invalid setting: {name}={ints[key]} is above this server's limit of {cap}; "
                            f"use 1 to {cap}.")
    return dec, vid


def check_prompt(prompt: Any, limits: Limits) -> tuple[str, str]:
    """(prompt to use, note). An empty prompt becomes :data:`DEFAULT_PROMPT` (and says so).

    Raises:
        UserError: longer than ``limits.max_prompt_chars``, or not text.
    """
    prompt = "" if prompt is None else prompt
    if isinstance(prompt, str):
        prompt = prompt.replace("\x00", "").strip()
        if not prompt:
            return DEFAULT_PROMPT, "The prompt was empty, so the default prompt was used."
    try:
        return prompting.check_prompt(prompt, max_chars=limits.max_prompt_chars), ""
    except prompting.PromptError as e:
        raise UserError(str(e)) from None


def check_subtitle_mode(mode: Any) -> str:
    """A :data:`SUBTITLE_MODES` value from a mode or its radio label (empty: ``both``).

    Raises:
        UserError: anything else.
    """
    if mode is None or mode == "":
        return SUBTITLE_MODES[0]
    mode = dict(SUBTITLE_MODE_CHOICES).get(mode, mode)
    if mode not in SUBTITLE_MODES:
        raise UserError(f"Invalid setting: subtitles go to {mode!r}; use one of {', '.join(SUBTITLE_MODES)}.")
    return mode


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


def resolve(s: RunSettings, presets: Mapping[str, Any] | None = None, cuda: bool = False,
            budget: Callable[[int, int], tuple[int, int]] | None = None) -> PresetSettings:
    """The :data:`PRESET_FIELDS` of ``s`` resolved: each it sets, else its preset's, by the library's one resolver
    (:func:`specvlm.models.presets.resolve_settings`, the CLI's too). A custom model has no preset: the library's
    defaults apply (the CPU budget unless ``cuda``).

    Args:
        s: the Run's settings.  presets: preset name -> Preset (None: the library's presets).
        cuda: the server decodes on CUDA.  budget: caps the preset's (frames, new tokens).

    Raises:
        UserError: a tree option is not a number or is out of range (message names it).
    """
    from specvlm.models.presets import PRESETS, resolve_settings

    presets = PRESETS if presets is None else presets
    preset = None if s.custom_model else presets.get(s.preset)
    opt = lambda name, v, conv: None if v is None else conv(name, v)   # noqa: E731
    try:
        return resolve_settings(preset, cuda=cuda, budget=budget, num_frames=opt("frames", s.num_frames, _as_int),
                             max_new_tokens=opt("max new tokens", s.max_new_tokens, _as_int), shape=s.tree_shape,
                             depth=opt("depth", s.depth, _as_int), top_k=opt("top-k", s.top_k, _as_int),
                             total_tokens=opt("total tokens", s.total_tokens, _as_int),
                             min_prob=opt("early stop (min draft probability)", s.min_prob, _as_float))
    except ConfigError as e:
        raise UserError(f"Invalid setting: {e}") from e


def server_budget(limits: Limits, budget: Callable[[int, int], tuple[int, int]] | None = None
                  ) -> Callable[[int, int], tuple[int, int]]:
    """A preset's suggested (frames, new tokens) as a server offers them: capped by ``budget`` (None: as they are)
    and by the server's limits (as the page's sliders are)."""
    def capped(frames: int, tokens: int) -> tuple[int, int]:
        frames, tokens = budget(frames, tokens) if budget else (frames, tokens)
        return min(frames, limits.max_frames), min(tokens, limits.max_new_tokens)
    return capped


def preset_widgets(r: PresetSettings) -> dict[str, Any]:
    """The :data:`PRESET_FIELDS` of resolved settings as the page's widget values (the tree's top level)."""
    t = r.tree
    return {"tree_shape": t.shape, "depth": int(t.depth), "top_k": int(t.top_k), "total_tokens": int(t.total_tokens),
            "min_prob": float(t.min_prob), "num_frames": int(r.num_frames), "max_new_tokens": int(r.max_new_tokens)}
