"""The app on a Hugging Face ZeroGPU Space: loading, the GPU function's size and duration, the
presets this hardware can run, and ZeroGPU's own errors in the user's terms.

On ZeroGPU (``SPACES_ZERO_GPU=true``; the platform installs the ``spaces`` package) the models load
to ``cuda`` in the main process, at start, under the ``spaces`` CUDA emulation (its torch modes are
thread-local, so the library loads the weights in the calling thread there:
:func:`specvlm.models.loading.synchronous_loading`).
A Run's GPU work is :meth:`app.runs.worker.DecodeWorker.run` decorated with ``spaces.GPU``
(:func:`gpu_function`): it asks for a whole GPU (``size="xlarge"``) only when the pair's memory
estimate exceeds the ``large`` half, and for a duration sized from the Run's frames and new tokens
(:class:`GpuTime`); the duration ``spaces`` schedules counts against the visitor's daily quota.

Off ZeroGPU every function here is a no-op or answers "not ZeroGPU", and the GPU function is the
worker's generator itself.

Source: docs/design.md §9 (ZeroGPU facts); Hugging Face ZeroGPU documentation (sizes ``large`` =
half an RTX Pro 6000 Blackwell, 48 GB, and ``xlarge`` = the whole 96 GB at twice the quota; daily
quotas); ``spaces`` 0.51 (``spaces.GPU``, ``spaces.zero.client``: how quota and aborts are reported).
"""
from __future__ import annotations

import dataclasses
import math
import os
import re
from collections.abc import Callable, Iterator
from typing import Any

from specvlm.config import DecodeConfig, VideoConfig

LARGE_BYTES = 48 * 10**9
"""Memory of ZeroGPU's default ``large`` size (half an RTX Pro 6000 Blackwell)."""
XLARGE_BYTES = 96 * 10**9
"""Memory of ``size="xlarge"`` (the whole GPU; its requested duration counts twice against the quota)."""
SEVEN_B_WEIGHT_BYTES = 16.6e9
"""bf16 weights of a 7B-class target (Qwen2.5-VL-7B): the model the per-token cost is stated for."""


DEFAULT_FRAMES = 64
"""Most frames a preset suggests on ZeroGPU (the paper's 128 would reserve more than a minute: :class:`GpuTime`)."""
DEFAULT_NEW_TOKENS = 128
"""Most new tokens a preset suggests on ZeroGPU."""


def active() -> bool:
    """True on a ZeroGPU Space (``SPACES_ZERO_GPU`` set to true, as the platform does, and ``spaces``
    importable)."""
    if os.environ.get("SPACES_ZERO_GPU", "").lower() not in ("1", "t", "true"):
        return False
    try:
        import spaces  # noqa: F401
    except ImportError:
        return False
    return True


# ---- size and duration -------------------------------------------------------------------------

def default_budget(frames: int, tokens: int) -> tuple[int, int]:
    """A preset's suggested (frames, new tokens); on ZeroGPU at most :data:`DEFAULT_FRAMES` and
    :data:`DEFAULT_NEW_TOKENS`, so that its default Run reserves less than a minute of the visitor's quota."""
    if not active():
        return frames, tokens
    return min(frames, DEFAULT_FRAMES), min(tokens, DEFAULT_NEW_TOKENS)


def job_estimate(job: Any) -> Any:
    """The pair's memory estimate (:class:`specvlm.models.fit.MemoryEstimate`, bf16) at the job's frames and
    new tokens, or None when a model's size is unknown (a custom model not on disk)."""
    from specvlm.models.fit import estimate_pair, model_size

    target, draft = job.model
    t = model_size(target)
    d = model_size(draft) if draft and draft != target else None
    if t is None or (draft and draft != target and d is None):
        return None
    frames = int(getattr(job.vid, "num_frames", 0) or VideoConfig.num_frames)
    prune = getattr(job.dec, "prune", None)
    kw = {"drop_rate": float(prune.drop_rate)} if prune is not None else {}
    return estimate_pair(t, d, 2, video_tokens=int(round(frames * t.video_tokens_per_frame)),
                         max_new_tokens=int(getattr(job.dec, "max_new_tokens", 0) or DecodeConfig.max_new_tokens), **kw)


def gpu_size(job: Any) -> str:
    """``"xlarge"`` when the job's memory estimate exceeds :data:`LARGE_BYTES`, else ``"large"``."""
    est = job_estimate(job)
    return "xlarge" if est is not None and est.total > LARGE_BYTES else "large"


def _name_billions(name: str) -> float | None:
    m = re.search(r"(\d+(?:\.\d+)?)\s*[bB]\b", name.replace("-", " ").replace("_", " "))
    return float(m.group(1)) if m else None


def weight_factor(job: Any) -> float:
    """The pair's weights relative to a 7B-class target (decoding reads every weight per step), at least 1:
    from the memory estimate, else from a size in the target's name (``72B`` -> ~9), else 1."""
    est = job_estimate(job)
    if est is not None:
        return max(1.0, est.weights / SEVEN_B_WEIGHT_BYTES)
    billions = _name_billions(job.model[0])
    return max(1.0, billions * 2e9 / SEVEN_B_WEIGHT_BYTES) if billions else 1.0


@dataclasses.dataclass(frozen=True)
class GpuTime:
    """How long a Run may hold a ZeroGPU device, in seconds of the GPU it runs on.

    ``base_s + frames * per_frame_s + 2 runs * max_new_tokens * per_token_s * weight_factor + capture``,
    rounded up and clamped to ``[min_s, max_s]``, for a 7B-class bf16 target on the ``large`` half of an RTX
    Pro 6000. ``capture`` is ``capture_s``: the Run's CUDA graphs are captured inside the GPU task (a fresh
    worker per Run keeps nothing from the last one, and ZeroGPU runs no ``torch.compile``), for the vanilla
    and the speculative run together; an
    allowance of a few uncaptured forwards per captured step function (decode, the draft's tree, a few verify
    sizes) until ``scripts/gpu_check.py``'s warm-up column measures it. The costs come from
    ``scripts/gpu_check.py`` scaled to that GPU; the figures behind them and the durations of the presets'
    Runs are in docs/scaling.md (*How a Run's duration is sized*).
    """

    base_s: float = 10.0
    per_frame_s: float = 0.22
    per_token_s: float = 0.075
    capture_s: float = 10.0
    min_s: int = 20
    max_s: int = 300

    def seconds(self, job: Any) -> int:
        """The GPU time ``job`` may need (whole seconds)."""
        frames = int(getattr(job.vid, "num_frames", 0) or VideoConfig.num_frames)
        tokens = int(getattr(job.dec, "max_new_tokens", 0) or DecodeConfig.max_new_tokens)
        raw = (self.base_s + frames * self.per_frame_s + 2 * tokens * self.per_token_s * weight_factor(job)
               + self.capture_s)
        return int(min(self.max_s, max(self.min_s, math.ceil(raw))))


def duration_factor(size: str) -> float:
    """How ``spaces`` stretches a requested duration on this hardware: its ``duration_factor`` for the
    ``large`` size (1.5 on the RTX Pro 6000), 1 for ``xlarge``, off ZeroGPU, or when ``spaces`` does not say."""
    if size == "xlarge" or not active():
        return 1.0
    try:
        from spaces.zero.config import get_config
        return float(get_config()["duration_factor"]) or 1.0
    except Exception:  # an older or newer spaces
        return 1.0


def requested_seconds(job: Any, budget: GpuTime = GpuTime()) -> int:
    """The ``duration`` given to ``spaces.GPU``: :meth:`GpuTime.seconds` over :func:`duration_factor`, so that
    what ``spaces`` schedules is the GPU time the Run may need."""
    return max(1, math.ceil(budget.seconds(job) / duration_factor(gpu_size(job))))


def reserved_seconds(job: Any, budget: GpuTime = GpuTime()) -> int:
    """The GPU time a Run reserves (and that counts against the quota, twice on ``xlarge``): the requested
    duration as ``spaces`` schedules it."""
    return int(round(requested_seconds(job, budget) * duration_factor(gpu_size(job))))


def reserve_note(job: Any, budget: GpuTime = GpuTime()) -> str:
    """'reserves up to 60 s of GPU time' (+ the xlarge note) for the page, "" off ZeroGPU."""
    if not active():
        return ""
    note = f"reserves up to {reserved_seconds(job, budget)} s of GPU time"
    if gpu_size(job) == "xlarge":
        note += " on a whole GPU (xlarge: it counts twice against the daily quota)"
    return note


def settings_note(target: str, draft: str | None, frames: int, tokens: int) -> str:
    """:func:`reserve_note` for a pair at these frames and new tokens ("" off ZeroGPU or when unknown)."""
    if not active():
        return ""
    from app.runs.worker import RunJob
    from specvlm.config import DecodeConfig, VideoConfig
    try:
        return reserve_note(RunJob(video="", prompt="", dec=DecodeConfig(max_new_tokens=tokens),
                                   vid=VideoConfig(num_frames=frames), model=(target, draft)))
    except Exception:  # the note is optional
        return ""


def gpu_function(fn: Callable[[Any], Iterator[list[Any]]], budget: GpuTime = GpuTime()) -> Callable:
    """``fn`` as the Run's GPU function.

    On ZeroGPU: ``job -> iterator`` that calls ``fn`` decorated with ``spaces.GPU`` and a duration of
    :func:`requested_seconds`, with ``size="xlarge"`` when :func:`gpu_size` says so (``spaces`` fixes the
    size per decorated function, so there is one per size); it carries a ``zerogpu`` attribute.
    Elsewhere: ``fn`` itself.
    """
    if not active():
        return fn
    import spaces

    def xlarge(job: Any) -> Iterator[list[Any]]:
        yield from fn(job)

    def duration(job: Any) -> int:
        return requested_seconds(job, budget)

    sized = {"large": spaces.GPU(duration=duration)(fn),
             "xlarge": spaces.GPU(duration=duration, size="xlarge")(xlarge)}

    def run(job: Any) -> Iterator[list[Any]]:
        return sized[gpu_size(job)](job)

    run.zerogpu = sized  # type: ignore[attr-defined]
    return run


# ---- presets ------------------------------------------------------------------------------------

def fitting_presets(presets: dict[str, Any]) -> dict[str, Any]:
    """The presets a ZeroGPU Space can run: those whose estimate fits the whole GPU (:data:`XLARGE_BYTES`)."""
    from specvlm.models.fit import GpuInfo, fitting_presets as fitting

    return fitting(presets, [GpuInfo(0, "ZeroGPU xlarge", XLARGE_BYTES, XLARGE_BYTES, True)])


# ---- ZeroGPU's errors ---------------------------------------------------------------------------

def abort_message(exc: BaseException, where: str, reserved_s: int | None, elapsed_s: float) -> str | None:
    """One line for an error ``spaces`` raised around the GPU function, or None for any other error.

    ``spaces`` raises ``gradio.Error`` s titled "ZeroGPU ...": "ZeroGPU worker error" / "GPU task aborted"
    when the worker process ended without finishing (ZeroGPU ends it when the requested duration is used
    up; it also dies when killed for memory), "ZeroGPU quota exceeded", "ZeroGPU illegal duration",
    "ZeroGPU queue timeout" and "ZeroGPU client error" when no GPU was given.

    Args:
        exc: the exception.
        where: how far the Run got, e.g. "after 14 of 128 vanilla tokens".
        reserved_s: the GPU time the Run reserved (None: unknown).
        elapsed_s: seconds since the GPU function was called.
    """
    title = str(getattr(exc, "title", "") or "")
    if not title.startswith("ZeroGPU"):
        return None
    said = " ".join(str(getattr(exc, "message", "") or exc).split())
    if title == "ZeroGPU worker error":
        if reserved_s is not None and elapsed_s >= reserved_s:
            return (f"The GPU time ran out ({reserved_s} s reserved) {where}: try fewer frames or fewer new "
                    "tokens.")
        return (f"The GPU worker stopped {where} ({said or 'aborted'} after {elapsed_s:.0f} s): try again, or "
                "fewer frames or fewer new tokens.")
    if title == "ZeroGPU quota exceeded":
        return (f"Your ZeroGPU quota is used up: it resets 24 h after first use; signing in to Hugging Face "
                f"(or PRO) gives more. ZeroGPU says: {said}")
    if title == "ZeroGPU illegal duration":
        return f"This Run asks for more GPU time than ZeroGPU allows: try fewer frames or fewer new tokens ({said})."
    if title in ("ZeroGPU queue timeout", "ZeroGPU client error"):
        return f"No ZeroGPU device was free ({said}): try again in a minute."
    return f"{title}: {said}"
