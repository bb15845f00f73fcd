"""Loading a target + draft pair by Hub id or local folder, placed on the device(s) it fits.

On a Hugging Face ZeroGPU Space the weights load in the calling thread (:func:`synchronous_loading`).
"""
from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterator
from typing import Any

import torch

from specvlm.config import ConfigError
from specvlm.dtypes import dtype_name
from specvlm.models.errors import ModelLoadError
from specvlm.models.fit import default_gpu_dtype, detect_gpus, estimate_pair, model_size, plan_placement
from specvlm.models.hub import hub_reachable
from specvlm.models.pair import ModelPair, pair_from_models
from specvlm.models.registry import supported_model_types

log = logging.getLogger(__name__)


ASYNC_LOAD_ENV = "HF_DEACTIVATE_ASYNC_LOAD"
"""transformers' switch: "1" loads weights in the calling thread instead of a thread pool."""


def zerogpu_active() -> bool:
    """True on a ZeroGPU Space: ``SPACES_ZERO_GPU`` is true and the ``spaces`` package was imported (by the
    Space's own code, before torch; this library never imports it)."""
    return os.environ.get("SPACES_ZERO_GPU", "").lower() in ("1", "t", "true") and "spaces" in sys.modules


@contextlib.contextmanager
def synchronous_loading() -> Iterator[None]:
    """On ZeroGPU, weights load in the calling thread for the block (``HF_DEACTIVATE_ASYNC_LOAD=1``, restored
    afterwards); elsewhere nothing changes.

    transformers 5 copies weights to the device in a thread pool; the ``spaces`` CUDA emulation's torch
    modes are thread-local, so from another thread those copies reach real CUDA, which the main process of
    a ZeroGPU Space does not have ("Low-level CUDA init reached").

    Source: docs/design.md §9 (ZeroGPU).
    """
    if not zerogpu_active():
        yield
        return
    old = os.environ.get(ASYNC_LOAD_ENV)
    os.environ[ASYNC_LOAD_ENV] = "1"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(ASYNC_LOAD_ENV, None)
        else:
            os.environ[ASYNC_LOAD_ENV] = old


def _resolve_dtype(dtype: str | torch.dtype | None, device: str, gpus: tuple = ()) -> torch.dtype:
    """The requested dtype, or the default: bf16 on GPUs that support it, fp16 on older GPUs, fp32 on CPU."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype is None:
        return default_gpu_dtype(gpus) if device.startswith("cuda") else torch.float32
    try:
        return getattr(torch, dtype_name(dtype))
    except ConfigError as exc:
        raise ModelLoadError(str(exc)) from None


def load_dtype(dtype: str | None, device: str) -> torch.dtype:
    """The dtype :func:`load_pair` loads a pair in on ``device``: ``dtype`` when given, else bfloat16 on GPUs
    that support it, float16 on older GPUs (:func:`specvlm.models.fit.default_gpu_dtype`), float32 on a CPU.

    Raises:
        ModelLoadError: ``dtype`` is not one of :data:`specvlm.dtypes.DTYPES` or their aliases.
    """
    return _resolve_dtype(dtype, device, detect_gpus() if device.startswith("cuda") else ())


def default_device() -> str:
    """The device a model loads on without a choice: ``cuda`` when CUDA is available, else ``cpu``."""
    return "cuda" if torch.cuda.is_available() else "cpu"


def check_device(device: str) -> None:
    """Refuse devices this machine does not have, with a readable message.

    Raises:
        ModelLoadError: not a torch device string, or CUDA asked for without CUDA.
    """
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ModelLoadError(f"device {device!r} was asked for but CUDA is not available on this machine: "
                             "use --device cpu.")
    try:
        torch.device(device)
    except (RuntimeError, ValueError) as exc:
        raise ModelLoadError(f"device {device!r} is not a valid torch device: use cpu, cuda or cuda:N.") from exc


def _looks_local(path: str) -> bool:
    return path.startswith(("/", "./", "../", "~")) or os.path.sep in path and path.count("/") > 1


def _one_line(exc: BaseException, limit: int) -> str:
    """An exception's message on one line (library messages span several), at most ``limit`` characters."""
    return " ".join(str(exc).split())[:limit].rstrip(". ")


def _load_one(path: str, device: str, dtype: torch.dtype, device_map: Any):
    from transformers import AutoConfig, AutoModelForImageTextToText, AutoProcessor

    if _looks_local(path) and not os.path.isdir(os.path.expanduser(path)):
        raise ModelLoadError(f"model folder {path!r} does not exist: give a folder saved with save_pretrained "
                             "(model and processor) or a Hub id such as Qwen/Qwen2.5-VL-7B-Instruct.")
    local = os.path.isdir(os.path.expanduser(path)) or not hub_reachable()
    hint = "" if os.path.isdir(os.path.expanduser(path)) else (
        " The Hugging Face Hub is not reachable from here, so only models already in the local cache load."
        if local else "")
    try:
        cfg = AutoConfig.from_pretrained(path, local_files_only=local)
    except Exception as exc:  # noqa: BLE001 - turned into one readable message
        raise ModelLoadError(
            f"could not load model {path!r}: {exc.__class__.__name__}: {_one_line(exc, 300)}.{hint} Use a "
            "local folder saved with save_pretrained or a Hub id of a Qwen2.5-VL / LLaVA-OneVision / SmolVLM2 / "
            "Qwen3-VL model (remote code is never run)."
        ) from exc
    if cfg.model_type not in supported_model_types():
        raise ModelLoadError(f"model {path!r} has type {cfg.model_type!r}: only "
                             f"{', '.join(supported_model_types())} are supported.")
    kwargs: dict[str, Any] = {"dtype": dtype, "attn_implementation": "sdpa", "local_files_only": local}
    if device_map:
        kwargs["device_map"] = device_map
    try:
        model = AutoModelForImageTextToText.from_pretrained(path, **kwargs).eval()
        processor = AutoProcessor.from_pretrained(path, local_files_only=local)
    except Exception as exc:  # noqa: BLE001
        raise ModelLoadError(f"could not load model {path!r}: {exc.__class__.__name__}: "
                             f"{_one_line(exc, 300)}.") from exc
    if not device_map:
        try:
            model.to(device)
        except (RuntimeError, AssertionError) as exc:
            raise ModelLoadError(f"could not move model {path!r} to {device!r}: {_one_line(exc, 200)}") from exc
    return model, processor


def plan_device_map(target: str, draft: str | None, device: str, dtype: torch.dtype,
                    gpus: tuple = ()) -> Any:
    """The ``device_map`` that loads a pair straight onto its GPU(s), after checking it fits.

    Args:
        target, draft: Hub ids or local folders (draft None = Self-SD).
        device: "cuda" or "cuda:i" (CPU devices need no map: returns None).
        dtype: the load dtype (2 or 4 bytes per parameter and cache entry).
        gpus: :func:`specvlm.models.fit.detect_gpus`.

    Returns:
        None on CPU; ``{"": device}`` when a model's size or the GPUs are unknown, or the pair fits one GPU;
        ``"auto"`` when it needs several GPUs (accelerate shards it).

    Raises:
        PresetTooLargeError: the estimate (:func:`specvlm.models.fit.estimate_pair` at the paper's
            16k video tokens) fits neither the GPU nor all GPUs together.
    """
    if not device.startswith("cuda"):
        return None
    t = model_size(target)
    d = model_size(draft) if draft and draft != target else None
    if not gpus or t is None or (draft and draft != target and d is None):
        return {"": device}
    name = target if not d else f"{target} + {draft}"
    placement = plan_placement(estimate_pair(t, d, torch.finfo(dtype).bits // 8), gpus, device, name)
    log.info("%s", placement.reason)
    return placement.device_map


def load_pair(target: str, draft: str | None = None, *, device: str | None = None, dtype: str | None = None,
              device_map: str | None = None) -> ModelPair:
    """Load a target (and optional Std-SD draft) by Hub id or local folder.

    On a GPU the weights load straight to the device (never staged in host RAM), in bfloat16
    where every GPU supports it and float16 otherwise, after :func:`plan_device_map` has checked
    that the pair fits; a pair that needs several GPUs is sharded with ``device_map="auto"``. On a
    ZeroGPU Space (``spaces`` imported first, as ZeroGPU asks) the weights load in this thread to the
    ``spaces`` emulated ``cuda`` (:func:`synchronous_loading`), at start, outside ``@spaces.GPU``.
    Where the Hub is not reachable (:func:`specvlm.models.hub.hub_reachable`), Hub ids load from
    the local cache only, without network retries.

    Args:
        target: Hub id or local path of the target.
        draft: Hub id or local path of a smaller sibling (Std-SD); None = Self-SD.
        device: "cpu", "cuda", "cuda:1"...; default cuda when available.
        dtype: "float32" | "bfloat16" | "float16"; default bf16 (fp16 on GPUs without bf16) on CUDA,
            fp32 on CPU.
        device_map: overrides the planned placement, e.g. "auto" or {"": "cuda:1"} (accelerate).

    Returns:
        ModelPair, models in eval mode, their language models on this engine's attention (:func:`pair_from_models`).

    Raises:
        ModelLoadError: missing/unsupported model, or draft tokenizer mismatch.
        PresetTooLargeError: the pair cannot fit on the detected GPUs (one line: needed vs available).
    """
    device = device or default_device()
    check_device(device)
    gpus = detect_gpus() if device.startswith("cuda") else ()
    dt = _resolve_dtype(dtype, device, gpus)
    if device_map is None:
        device_map = plan_device_map(target, draft, device, dt, gpus)
    with synchronous_loading():   # on ZeroGPU: to the emulated cuda, in this thread
        log.info("loading target %s (%s, %s)", target, device, dt)
        t_model, t_proc = _load_one(target, device, dt, device_map)
        if draft is None or draft == target:
            return pair_from_models(t_model, t_proc, name=f"{target} (Self-SD)")
        log.info("loading draft %s", draft)
        d_model, d_proc = _load_one(draft, device, dt, device_map)
    return pair_from_models(t_model, t_proc, d_model, d_proc, name=f"{target} + {draft} (Std-SD)")
