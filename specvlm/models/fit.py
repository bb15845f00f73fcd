"""Will a model pair fit on this machine's GPUs, in which dtype, and how is it placed?

Before loading, :func:`estimate_pair` adds up the parameters (times bytes per
parameter) and the KV caches at the run's settings (target: every prompt token,
Std-SD draft or Self-SD second cache: ``1 - r`` of the video tokens), plus a margin
for activations and the CUDA context. :func:`plan_placement` then puts the pair on one
GPU when it fits there (weights load straight to that device), shards it over all GPUs
with ``device_map="auto"`` when only their sum is enough, and otherwise refuses with a
one-line message naming needed and available memory. :func:`fitting_presets` lists the presets
that fit given GPUs (the app offers only those on ZeroGPU, :func:`app.runs.zerogpu.fitting_presets`).

Parameter counts of the presets' checkpoints are listed in :data:`KNOWN_SIZES` (from
the checkpoints' published ``config.json`` and safetensors index, so no download is
needed); any other model is measured from its config on the ``meta`` device when the
config is on disk.

Source: docs/design.md §9 (load straight to the device, bf16 only where supported);
SpecVLM (arXiv 2508.16201) Sec. 4.1 (frames per model, r = 0.9).
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any, Sequence

import torch

from specvlm.config import DecodeConfig, PruneConfig
from specvlm.models.errors import ModelLoadError

log = logging.getLogger(__name__)

GIB = 2**30
#: Margin for activations (vision tower, prefill chunk, logits) and the CUDA context.
OVERHEAD_BYTES = 1.5 * GIB
OVERHEAD_SHARE = 0.10
#: Video tokens assumed when nothing says otherwise: the paper's long-video regime.
DEFAULT_VIDEO_TOKENS = 16_384
DEFAULT_TEXT_TOKENS = 512
#: Tree tokens verified per step (cache slots beyond the accepted tokens).
TREE_SLOTS = 64


class PresetTooLargeError(ModelLoadError):
    """A model pair needs more GPU memory than the detected GPUs have."""


@dataclass(frozen=True)
class ModelSize:
    """What memory a checkpoint needs, independent of dtype.

    Attributes:
        params: parameter count (vision tower included).
        layers: decoder layers (KV cache entries per token).
        kv_heads: key/value heads per layer.
        head_dim: channels per head.
        video_tokens_per_frame: merged video tokens one frame gives at the family's default
            video resolution (Qwen2.5-VL: 256 per 2-frame group at 448x448; LLaVA-OV: 196).
    """

    params: float
    layers: int
    kv_heads: int
    head_dim: int
    video_tokens_per_frame: float = DEFAULT_VIDEO_TOKENS / 128

    def weight_bytes(self, dtype_bytes: int) -> float:
        """Bytes of the weights in a dtype of ``dtype_bytes`` bytes per parameter."""
        return self.params * dtype_bytes

    def kv_bytes(self, tokens: int, dtype_bytes: int) -> float:
        """Bytes of the K and V caches of ``tokens`` tokens (2 · layers · kv_heads · head_dim · bytes each)."""
        return 2.0 * self.layers * self.kv_heads * self.head_dim * dtype_bytes * tokens


_QWEN_VIDEO = 128.0  # 16x16 = 256 merged tokens per 2-frame group at 448x448
_QWEN3_VIDEO = 98.0  # 14x14 = 196 merged tokens per 2-frame group at 448x448 (patch 16, merge 2)
_LLAVA_VIDEO = 196.0  # 14x14 pooled SigLIP tokens per frame at 384x384
_SMOL_VIDEO = 64.0  # 8x8 pixel-shuffled tokens per 512 px frame (256M / 500M)
_SMOL_2B_VIDEO = 81.0  # 9x9 pixel-shuffled tokens per 384 px frame (2.2B)
KNOWN_SIZES: dict[str, ModelSize] = {
    "Qwen/Qwen2.5-VL-3B-Instruct": ModelSize(3.75e9, 36, 2, 128, _QWEN_VIDEO),
    "Qwen/Qwen2.5-VL-7B-Instruct": ModelSize(8.29e9, 28, 4, 128, _QWEN_VIDEO),
    "Qwen/Qwen2.5-VL-32B-Instruct": ModelSize(33.5e9, 64, 8, 128, _QWEN_VIDEO),
    "Qwen/Qwen2.5-VL-72B-Instruct": ModelSize(73.4e9, 80, 8, 128, _QWEN_VIDEO),
    "Qwen/Qwen3-VL-2B-Instruct": ModelSize(2.13e9, 28, 8, 128, _QWEN3_VIDEO),
    "Qwen/Qwen3-VL-8B-Instruct": ModelSize(8.77e9, 36, 8, 128, _QWEN3_VIDEO),
    "Qwen/Qwen3-VL-32B-Instruct": ModelSize(33.4e9, 64, 8, 128, _QWEN3_VIDEO),
    "Qwen/Qwen3-VL-30B-A3B-Instruct": ModelSize(31.1e9, 48, 4, 128, _QWEN3_VIDEO),
    "llava-hf/llava-onevision-qwen2-0.5b-ov-hf": ModelSize(0.894e9, 24, 2, 64, _LLAVA_VIDEO),
    "llava-hf/llava-onevision-qwen2-7b-ov-hf": ModelSize(8.03e9, 28, 4, 128, _LLAVA_VIDEO),
    "llava-hf/llava-onevision-qwen2-72b-ov-hf": ModelSize(73.2e9, 80, 8, 128, _LLAVA_VIDEO),
    "HuggingFaceTB/SmolVLM2-2.2B-Instruct": ModelSize(2.25e9, 24, 32, 64, _SMOL_2B_VIDEO),
    "HuggingFaceTB/SmolVLM2-500M-Video-Instruct": ModelSize(0.51e9, 32, 5, 64, _SMOL_VIDEO),
    "HuggingFaceTB/SmolVLM2-256M-Video-Instruct": ModelSize(0.26e9, 30, 3, 64, _SMOL_VIDEO),
}


def size_from_config(config: Any) -> ModelSize:
    """Count a config's parameters on the ``meta`` device (no memory, no weights) and read its KV geometry.

    Args:
        config: a ``PretrainedConfig`` of an image-text-to-text model.

    Returns:
        :class:`ModelSize` (``video_tokens_per_frame`` left at the paper-regime default).
    """
    from transformers import AutoModelForImageTextToText

    with torch.device("meta"):
        model = AutoModelForImageTextToText.from_config(config)
    params = float(sum(p.numel() for p in model.parameters()))
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    heads = int(text.num_attention_heads)
    head_dim = int(getattr(text, "head_dim", None) or text.hidden_size // heads)
    kv_heads = int(getattr(text, "num_key_value_heads", None) or heads)
    return ModelSize(params, int(text.num_hidden_layers), kv_heads, head_dim)


def model_size(path: str) -> ModelSize | None:
    """The size of a Hub id or local folder: :data:`KNOWN_SIZES`, else its config when on disk, else None.

    Never uses the network: a Hub id not listed is looked up in the local Hub cache only.
    """
    if path in KNOWN_SIZES:
        return KNOWN_SIZES[path]
    try:
        from transformers import AutoConfig

        cfg = AutoConfig.from_pretrained(os.path.expanduser(path), local_files_only=True, trust_remote_code=False)
        return size_from_config(cfg)
    except Exception as exc:  # noqa: BLE001 - unknown size only means no check
        log.debug("size of %s unknown: %s", path, exc)
        return None


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes a pair needs on GPUs, by part.

    Attributes:
        weights: parameters of the target (+ Std-SD draft) at the dtype.
        kv: KV caches of the target and the draft at the given token counts.
        overhead: activations and CUDA context margin.
        tokens: target prompt + generated tokens the KV estimate assumes.
    """

    weights: float
    kv: float
    overhead: float
    tokens: int

    @property
    def total(self) -> float:
        """Bytes in all."""
        return self.weights + self.kv + self.overhead


def estimate_pair(target: ModelSize, draft: ModelSize | None, dtype_bytes: int, *,
                  video_tokens: int = DEFAULT_VIDEO_TOKENS, text_tokens: int = DEFAULT_TEXT_TOKENS,
                  max_new_tokens: int = DecodeConfig.max_new_tokens,
                  drop_rate: float = PruneConfig.drop_rate) -> MemoryEstimate:
    """Memory of a target and a Std-SD draft (``draft`` None = Self-SD) for one request.

    Args:
        target, draft: sizes (:func:`model_size`).
        dtype_bytes: bytes per parameter and per cache entry (2 for bf16/fp16, 4 for fp32).
        video_tokens: V, video tokens of the target's prompt.
        text_tokens: non-video prompt tokens.
        max_new_tokens: generation budget (cache grows by it, plus the verified tree's slots).
        drop_rate: r; the draft caches ``(1 - r) · V`` video tokens (Self-SD: a second cache on the
            target's geometry).

    Returns:
        :class:`MemoryEstimate` in bytes.
    """
    t_tokens = text_tokens + video_tokens + max_new_tokens + TREE_SLOTS
    d_tokens = text_tokens + int(round((1.0 - drop_rate) * video_tokens)) + max_new_tokens + TREE_SLOTS
    weights = target.weight_bytes(dtype_bytes) + (draft.weight_bytes(dtype_bytes) if draft else 0.0)
    kv = target.kv_bytes(t_tokens, dtype_bytes) + (draft or target).kv_bytes(d_tokens, dtype_bytes)
    return MemoryEstimate(weights, kv, OVERHEAD_BYTES + OVERHEAD_SHARE * weights, t_tokens)


def preset_estimate(preset: Any, dtype_bytes: int = 2) -> MemoryEstimate | None:
    """:func:`estimate_pair` at a preset's frames and token budget; None when a model's size is unknown."""
    t = model_size(preset.target)
    d = model_size(preset.draft) if preset.draft else None
    if t is None or (preset.draft and d is None):
        return None
    video = int(round(preset.num_frames * t.video_tokens_per_frame))
    return estimate_pair(t, d, dtype_bytes, video_tokens=video, max_new_tokens=preset.max_new_tokens)


@dataclass(frozen=True)
class GpuInfo:
    """One CUDA device as seen at load time.

    Attributes:
        index: CUDA ordinal.
        name: device name, e.g. "NVIDIA A10G".
        total_bytes: memory of the device.
        free_bytes: memory free now (``torch.cuda.mem_get_info``; total when unknown).
        bf16: True when the device computes in bfloat16 natively (compute capability >= 8.0).
    """

    index: int
    name: str
    total_bytes: int
    free_bytes: int
    bf16: bool


def detect_gpus() -> tuple[GpuInfo, ...]:
    """The visible CUDA devices (empty without CUDA, or where the devices cannot be queried yet,
    e.g. outside a ZeroGPU worker)."""
    if not torch.cuda.is_available():
        return ()
    gpus = []
    try:
        for i in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(i)
            try:
                free, _ = torch.cuda.mem_get_info(i)
            except (RuntimeError, AssertionError):
                free = props.total_memory
            gpus.append(GpuInfo(i, str(props.name), int(props.total_memory), int(free), int(props.major) >= 8))
    except Exception as exc:  # noqa: BLE001 - no placement check is better than no model
        log.warning("could not query the CUDA devices (%s): loading without a memory check", exc)
        return ()
    return tuple(gpus)


def default_gpu_dtype(gpus: Sequence[GpuInfo]) -> torch.dtype:
    """bfloat16 unless a GPU lacks native bfloat16 (compute capability < 8.0, e.g. T4, V100): then float16.

    With no GPU details (``gpus`` empty) bfloat16 is assumed.
    """
    return torch.float16 if any(not g.bf16 for g in gpus) else torch.bfloat16


def _gb(n: float) -> str:
    return f"{n / 1e9:.1f} GB"


@dataclass(frozen=True)
class Placement:
    """Where a pair's weights go.

    Attributes:
        device_map: passed to ``from_pretrained``: ``{"": "cuda:i"}`` (all on one GPU, loaded straight
            there) or ``"auto"`` (sharded over all GPUs by accelerate).
        reason: one line for the log and the UI.
    """

    device_map: Any
    reason: str


def plan_placement(estimate: MemoryEstimate, gpus: Sequence[GpuInfo], device: str = "cuda",
                   name: str = "this model pair") -> Placement:
    """Choose one GPU, all GPUs, or refuse.

    Args:
        estimate: the pair's memory (:func:`estimate_pair`).
        gpus: :func:`detect_gpus`.
        device: "cuda" (GPU 0 first) or "cuda:i".
        name: what the message calls the pair.

    Returns:
        :class:`Placement`.

    Raises:
        PresetTooLargeError: the estimate exceeds the chosen GPU's free memory and the sum over all GPUs.
    """
    need = estimate.total
    index = torch.device(device).index or 0
    one = next((g for g in gpus if g.index == index), None)
    if one is not None and need <= one.free_bytes:
        return Placement({"": f"cuda:{one.index}"}, f"{name}: ~{_gb(need)} on GPU {one.index} ({one.name}, "
                                                   f"{_gb(one.free_bytes)} free)")
    free = sum(g.free_bytes for g in gpus)
    if len(gpus) > 1 and need <= free:
        return Placement("auto", f"{name}: ~{_gb(need)} sharded over {len(gpus)} GPUs ({_gb(free)} free)")
    where = f"{_gb(free)} free on {len(gpus)} GPU{'s' * (len(gpus) != 1)}" + (
        f" ({', '.join(sorted({g.name for g in gpus}))})" if gpus else "")
    raise PresetTooLargeError(
        f"{name} needs ~{_gb(need)} of GPU memory (weights {_gb(estimate.weights)} + KV cache {_gb(estimate.kv)} "
        f"at {estimate.tokens:,} tokens + {_gb(estimate.overhead)} margin) but this machine has {where}: "
        "pick a smaller preset, fewer frames, or more GPUs.")


def preset_fits(preset: Any, gpus: Sequence[GpuInfo] | None = None) -> tuple[bool, str]:
    """Whether a preset can run here, and why not.

    CPU presets (``requires_cuda`` False) always fit; a GPU preset needs a GPU, and when its
    size is known (:func:`preset_estimate`), room for its estimate on one GPU or over all.

    Args:
        preset: a :class:`specvlm.models.presets.Preset`.
        gpus: :func:`detect_gpus` (detected when None).

    Returns:
        (fits, one-line reason; "" when it fits).
    """
    if not getattr(preset, "requires_cuda", True):
        return True, ""
    gpus = detect_gpus() if gpus is None else tuple(gpus)
    if not gpus:
        return False, f"{preset.name} needs a CUDA GPU and none is available here."
    est = preset_estimate(preset, dtype_bytes=2)
    if est is None:
        return True, ""
    try:
        plan_placement(est, gpus, name=preset.name)
    except PresetTooLargeError as exc:
        return False, str(exc)
    return True, ""


def fitting_presets(presets: dict[str, Any], gpus: Sequence[GpuInfo] | None = None) -> dict[str, Any]:
    """The presets that :func:`preset_fits` this machine, in their order (what the app lists)."""
    gpus = detect_gpus() if gpus is None else tuple(gpus)
    return {k: p for k, p in presets.items() if preset_fits(p, gpus)[0]}
