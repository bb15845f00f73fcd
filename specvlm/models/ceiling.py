"""Byte floors and speedup ceilings: what a GPU's memory bandwidth allows a model pair at best.

One decode step of a batch-1 LLM reads every weight of its decoder layers and LM head once, plus its KV
cache; on a GPU that read, not the arithmetic, bounds the step. So a step costs at least
``(weight bytes + KV bytes per token x cached tokens) / memory bandwidth`` (its *byte floor*), a verify of a
few tree tokens reads the same bytes, and a draft level reads the draft's weights plus its (pruned) KV.
With a tree of ``depth`` levels and τ accepted draft tokens per step on average, speculative decoding then
gains at most

    speedup(τ) = (τ + 1) / (depth · ρ + 1),    ρ = draft level bytes / target step bytes

over vanilla decoding at its own floor (every step at its byte floor). With every draft accepted
(τ = depth) this is the pair's *ceiling*. A Self-SD draft reads the target's whole weights, so at 16k
video tokens ρ is ~0.94 for Qwen2.5-VL-7B and the ceiling ~1.05x: pruning the draft's video only saves the KV
share. A small draft of the same family and tokenizer (Qwen3-VL-2B for 8B: ρ ~0.21) lifts it to ~2x at τ 3.

:data:`DECODER_DIMS` holds the text decoders' published dimensions by Hub id; :data:`GPU_BANDWIDTH` the
peak memory bandwidth of known GPUs, looked up by ``torch.cuda.get_device_name``.

Source: docs/design.md §11 (byte floor, ceilings by pair); SpecVLM (arXiv 2508.16201) Sec. 4 (r = 0.9,
depth-5 trees); Leviathan et al. 2023 (expected speedup of speculative decoding).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from specvlm.config import PruneConfig, TreeConfig
from specvlm.models.fit import DEFAULT_TEXT_TOKENS, DEFAULT_VIDEO_TOKENS, KNOWN_SIZES

PROJECTION_TAUS = (2.5, 3.0, 3.8)
"""Mean accepted lengths the projections are stated at (3.8: the paper's Self-SD 7B τ, docs/design.md §5)."""


class BandwidthError(ValueError):
    """A GPU whose memory bandwidth is not known; the message says how to give it."""


@dataclass(frozen=True)
class DecoderDims:
    """A text decoder's dimensions (the checkpoint's published ``config.json``).

    Attributes:
        hidden: hidden size.
        layers: decoder layers.
        heads: attention (query) heads.
        kv_heads: key/value heads.
        head_dim: channels per head.
        intermediate: MLP width (gate, up and down projections).
        vocab: LM-head rows (the padded vocabulary).
    """

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int

    def step_params(self) -> float:
        """Parameters one decode step reads: every decoder layer's projections and the LM head (biases and
        norms, a fraction of a percent, are left out; the input embedding reads one row)."""
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        layer = self.hidden * (2 * q + 2 * kv) + 3 * self.hidden * self.intermediate
        return float(self.layers * layer + self.vocab * self.hidden)

    def kv_bytes_per_token(self, dtype_bytes: int = 2) -> float:
        """Bytes of K and V one cached token holds: 2 · layers · kv_heads · head_dim · ``dtype_bytes``."""
        return 2.0 * self.layers * self.kv_heads * self.head_dim * dtype_bytes

    def step_bytes(self, cached_tokens: int, dtype_bytes: int = 2) -> float:
        """Bytes one decode step reads after ``cached_tokens`` tokens: weights + KV cache."""
        return self.step_params() * dtype_bytes + self.kv_bytes_per_token(dtype_bytes) * cached_tokens


DECODER_DIMS: dict[str, DecoderDims] = {
    "Qwen/Qwen2.5-VL-3B-Instruct": DecoderDims(2048, 36, 16, 2, 128, 11008, 151936),
    "Qwen/Qwen2.5-VL-7B-Instruct": DecoderDims(3584, 28, 28, 4, 128, 18944, 152064),
    "Qwen/Qwen2.5-VL-32B-Instruct": DecoderDims(5120, 64, 40, 8, 128, 27648, 152064),
    "Qwen/Qwen3-VL-2B-Instruct": DecoderDims(2048, 28, 16, 8, 128, 6144, 151936),
    "Qwen/Qwen3-VL-8B-Instruct": DecoderDims(4096, 36, 32, 8, 128, 12288, 151936),
    "Qwen/Qwen3-VL-32B-Instruct": DecoderDims(5120, 64, 64, 8, 128, 25600, 151936),
    "llava-hf/llava-onevision-qwen2-7b-ov-hf": DecoderDims(3584, 28, 28, 4, 128, 18944, 152128),
    "llava-hf/llava-onevision-qwen2-72b-ov-hf": DecoderDims(8192, 80, 64, 8, 128, 29568, 152128),
    "HuggingFaceTB/SmolVLM2-2.2B-Instruct": DecoderDims(2048, 24, 32, 32, 64, 8192, 49280),
    "HuggingFaceTB/SmolVLM2-500M-Video-Instruct": DecoderDims(960, 32, 15, 5, 64, 2560, 49280),
    "HuggingFaceTB/SmolVLM2-256M-Video-Instruct": DecoderDims(576, 30, 9, 3, 64, 1536, 49280),
}
"""Text decoders of the presets' dense checkpoints (a mixture-of-experts target reads only its active experts
per token, which these dimensions cannot say, so it has no entry)."""


@dataclass(frozen=True)
class Ceiling:
    """What the memory bandwidth allows a pair at best, in bytes read per step (dtype-independent ratios).

    Attributes:
        video_tokens: V, the video tokens of the target's prompt.
        target_step_bytes: bytes of one target decode step (weights + KV of the whole prompt); a verify
            of a few tree tokens reads the same.
        draft_level_bytes: bytes of one draft tree level (the draft's weights + its pruned KV).
        depth: draft tree levels per step.
    """

    video_tokens: int
    target_step_bytes: float
    draft_level_bytes: float
    depth: int

    @property
    def draft_ratio(self) -> float:
        """ρ: a draft level's bytes over a target step's."""
        return self.draft_level_bytes / self.target_step_bytes

    def speedup(self, tau: float) -> float:
        """Decode speedup over vanilla at mean accepted length ``tau``, every step at its byte floor:
        (τ + 1) / (depth · ρ + 1)."""
        return projected_speedup(tau, 1.0, self.draft_ratio, 1.0, self.depth)

    @property
    def all_accepted(self) -> float:
        """The ceiling: :meth:`speedup` with every drafted token accepted (τ = depth)."""
        return self.speedup(self.depth)

    def describe(self) -> str:
        """One line for a preset, e.g. ``GPU ceiling by bytes at 16,384 video tokens: 1.05x with every draft
        accepted, 0.84x at τ 3.8 (a draft level reads 94% of a target step's bytes)``."""
        at = ", ".join(f"{self.speedup(t):.2f}x at τ {t:g}" for t in PROJECTION_TAUS)
        return (f"GPU ceiling by bytes at {self.video_tokens:,} video tokens: {self.all_accepted:.2f}x with every "
                f"draft accepted, {at} (a draft level reads {self.draft_ratio:.0%} of a target step's bytes)")


def projected_speedup(tau: float, t_decode: float, t_level: float, t_verify: float, depth: int) -> float:
    """Decode-phase speedup of speculative decoding over vanilla from step costs (any one unit):
    ``(τ + 1) · t_decode / (depth · t_level + t_verify)``.

    Args:
        tau: mean accepted draft tokens per verify step (τ, bonus token excluded).
        t_decode: one vanilla decode step.
        t_level: one draft tree level.
        t_verify: one verify forward of the tree.
        depth: draft levels per step.

    Raises:
        ValueError: a non-positive denominator.
    """
    cost = depth * t_level + t_verify
    if not cost > 0:
        raise ValueError(f"depth · t_level + t_verify = {cost!r}: give positive step costs.")
    return (tau + 1.0) * t_decode / cost


def tau_needed(speedup: float, t_decode: float, t_level: float, t_verify: float, depth: int) -> float:
    """The τ at which :func:`projected_speedup` reaches ``speedup``."""
    return speedup * (depth * t_level + t_verify) / t_decode - 1.0


def pair_ceiling(target: DecoderDims, draft: DecoderDims | None, *, video_tokens: int = DEFAULT_VIDEO_TOKENS,
                 text_tokens: int = DEFAULT_TEXT_TOKENS, drop_rate: float = PruneConfig.drop_rate,
                 depth: int = TreeConfig.depth) -> Ceiling:
    """The byte ceiling of a pair (``draft`` None = Self-SD: the target drafts on its pruned video).

    The target caches every prompt token (``text_tokens + video_tokens``); the draft caches the text and
    K = max(1, floor(V · (1 - r))) video tokens (docs/design.md §4.3).

    Args:
        target, draft: decoder dimensions (:data:`DECODER_DIMS`).
        video_tokens: V.
        text_tokens: prompt tokens that are not video.
        drop_rate: r.
        depth: draft tree levels per step.

    Returns:
        :class:`Ceiling` (byte counts at 2 bytes per parameter; the ratios do not depend on it).
    """
    kept = max(1, math.floor(video_tokens * (1.0 - drop_rate)))
    return Ceiling(video_tokens, target.step_bytes(text_tokens + video_tokens),
                   (draft or target).step_bytes(text_tokens + kept), int(depth))


def preset_ceiling(target: str, draft: str | None, num_frames: int, depth: int) -> Ceiling | None:
    """:func:`pair_ceiling` of two Hub ids at ``num_frames`` frames (the family's video tokens per frame,
    :data:`specvlm.models.fit.KNOWN_SIZES`); None when a model's dimensions are not in :data:`DECODER_DIMS`."""
    t, d = DECODER_DIMS.get(target), DECODER_DIMS.get(draft) if draft else None
    if t is None or (draft and d is None) or target not in KNOWN_SIZES:
        return None
    video = int(round(num_frames * KNOWN_SIZES[target].video_tokens_per_frame))
    return pair_ceiling(t, d, video_tokens=video, depth=depth)


def ceiling_note(ceiling: Ceiling, self_sd: bool) -> str:
    """Why a pair cannot beat vanilla decoding on a GPU, or "" when it can at the paper's τ.

    A pair cannot win when :meth:`Ceiling.speedup` at the largest of :data:`PROJECTION_TAUS` stays below 1:
    then a measured slowdown is what the bytes allow, not a failure of the method.
    """
    if ceiling.speedup(max(PROJECTION_TAUS)) >= 1.0:
        return ""
    why = ("the draft is the target itself, so every draft level reads its whole weights and pruning the video "
           "saves only the KV share" if self_sd else "the draft reads almost as many bytes as the target")
    return (f"On a GPU this pair cannot beat vanilla decoding at {ceiling.video_tokens:,} video tokens: {why}; a "
            "slowdown here is the expected result, not SpecVLM's. A Std-SD pair with a small draft (e.g. "
            "Qwen3-VL-8B + 2B) can win")


def byte_floor_ms(step_bytes: float, bandwidth: float) -> float:
    """The least time (ms) a step reading ``step_bytes`` bytes can take at ``bandwidth`` bytes/s."""
    return 1e3 * step_bytes / bandwidth


GPU_BANDWIDTH: tuple[tuple[tuple[str, ...], float], ...] = (
    (("H200",), 4.8e12),
    (("H100", "PCIE"), 2.0e12),
    (("H100",), 3.35e12),
    (("A100", "80GB"), 2.0e12),
    (("A100",), 1.555e12),
    (("L40S",), 0.864e12),
    (("RTX PRO 6000", "BLACKWELL"), 1.8e12),
    (("A10G",), 0.6e12),
)
"""Peak memory bandwidth (bytes/s) by words of ``torch.cuda.get_device_name`` (every word must appear,
upper-cased; the first match wins): H200 4.8 TB/s, H100 PCIe 2.0, H100 SXM 3.35, A100 80GB 2.0, A100 40GB
1.555, L40S 0.864, RTX Pro 6000 Blackwell 1.8, A10G 0.6 (the vendors' data sheets)."""


def gpu_bandwidth(device_name: str, override: float | None = None) -> float:
    """Memory bandwidth in bytes/s of a GPU named ``device_name`` (:data:`GPU_BANDWIDTH`).

    Args:
        device_name: ``torch.cuda.get_device_name(...)``, e.g. ``"NVIDIA H100 80GB HBM3"``.
        override: bytes/s to use instead (``--bandwidth``), or None.

    Raises:
        BandwidthError: an unknown GPU and no override, or a non-positive override.
    """
    if override is not None:
        if not override > 0:
            raise BandwidthError(f"bandwidth {override!r}: give the GPU's memory bandwidth in bytes/s, e.g. 3.35e12.")
        return float(override)
    name = device_name.upper()
    for words, bandwidth in GPU_BANDWIDTH:
        if all(w in name for w in words):
            return bandwidth
    raise BandwidthError(f"the memory bandwidth of {device_name!r} is not known: give it with --bandwidth "
                         "(bytes/s, e.g. 3.35e12 for an H100 SXM).")
