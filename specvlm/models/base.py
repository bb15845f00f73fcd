"""Model-family adapters: the only place that knows a family's specifics.

An adapter turns (processor, clip, prompt) into :class:`ModelInputs` and knows
where a model keeps its language model, LM head and video encoder. Generic code
(prefill, drafting, verification) only talks to adapters.

Source: docs/design.md §2-3 and §7.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from specvlm.prompting import check_mode, subtitle_block, subtitle_mask, target_view, user_text
from specvlm.types import VideoClip

log = logging.getLogger(__name__)


class ModelLoadError(ValueError):
    """A model or processor could not be loaded; the message names it and says what to do."""


class TokenizerMismatchError(ModelLoadError):
    """Std-SD draft and target tokenizers really differ (not just padded vocab sizes)."""


@dataclass
class ModelInputs:
    """One request's prompt, ready for prefill.

    Attributes:
        input_ids: int64 (1, L), the full target prompt with video placeholders.
        positions: int64 (R, L) position ids; R = 3 for M-RoPE (Qwen2.5-VL), 1 otherwise.
        video_index: int64 (V,), sequence positions of the video tokens, ascending.
        token_grid: int64 (V, 3), (frame, row, col) per video token in the merged grid
            (frame = temporal group index; row = col = -1 for a newline token).
        frames_per_token: frames covered by one video token along time.
        vision: processor tensors the video encoder needs (family specific).
        prompt_text: the chat-templated prompt string.
        subtitle_mask: bool (L,) positions of the subtitle transcript's tokens, or None
            (:mod:`specvlm.prompting`).
        subtitle_mode: who sees the transcript: ``both``, ``target``, ``draft`` or ``none``.
        subtitle_text: the transcript block as placed in the prompt ("" without subtitles).
        force_keep: int64 (F,) video-token indices the draft must always keep (e.g. tokens
            covering on-screen text), or None; see :func:`specvlm.pruning.select_video_tokens`.
        processor_kwargs: the video keyword arguments the adapter gave the processor (e.g. the clip's
            ``video_metadata``), so another caller (HF ``generate()`` in the benchmark) can reproduce
            the same ids; empty when the adapter does not record them.
        draft_inputs: the draft's own prompt when its video geometry differs from the target's
            (:attr:`specvlm.models.ModelPair.draft_processor`), else None: the draft reads this
            prompt, with the kept set carried to its token grid (:func:`specvlm.regrid.map_keep`).
    """

    input_ids: torch.Tensor
    positions: torch.Tensor
    video_index: torch.Tensor
    token_grid: torch.Tensor
    frames_per_token: int
    vision: dict[str, Any] = field(default_factory=dict)
    prompt_text: str = ""
    subtitle_mask: torch.Tensor | None = None
    subtitle_mode: str = "none"
    subtitle_text: str = ""
    force_keep: torch.Tensor | None = None
    processor_kwargs: dict[str, Any] = field(default_factory=dict)
    draft_inputs: "ModelInputs | None" = None

    @property
    def num_video_tokens(self) -> int:
        return int(self.video_index.numel())

    @property
    def num_subtitle_tokens(self) -> int:
        """Tokens of the subtitle transcript in this prompt (0 without subtitles)."""
        return 0 if self.subtitle_mask is None else int(self.subtitle_mask.sum())

    def draft_drop_mask(self) -> torch.Tensor | None:
        """Bool (L,) non-video tokens the draft's prefill skips (the transcript in ``target`` mode)."""
        if self.subtitle_mode == "target" and self.subtitle_mask is not None:
            return self.subtitle_mask
        return None

    def for_target(self) -> "ModelInputs":
        """The inputs the target sees (without the transcript in ``draft`` mode; else ``self``)."""
        return target_view(self)

    @property
    def next_position(self) -> int:
        """Position of the first generated token: last prompt position + 1.

        Matches ``generate()`` (tested on long, low-fps clips where temporal M-RoPE positions of the
        video exceed the text positions after it); not max + 1 (docs/design.md §7).
        """
        return int(self.positions[0, -1]) + 1


class Adapter(Protocol):
    """What generic code needs from a model family."""

    family: str
    title: str  # the family's name as people write it, e.g. "Qwen2.5-VL"
    frames_per_token: int

    def prepare(self, processor: Any, model: Any, clip: VideoClip, prompt: str,
                subtitles: list | None = None, subtitle_mode: str = "both") -> ModelInputs:
        """Build :class:`ModelInputs` with the model's own processor and chat template.

        ``subtitles`` (cues) go into the prompt as a timestamped transcript after the video
        (:mod:`specvlm.prompting`); ``subtitle_mode`` says who sees it.
        """

    def video_features(self, model: Any, inputs: ModelInputs) -> "torch.Tensor | VideoEncoding":
        """Run the video encoder once: float (V, D) in the model's dtype, D = text hidden size.

        A family whose language model also takes per-video-token features beside the input
        embeddings (e.g. DeepStack) returns a :class:`VideoEncoding` and implements
        ``lm_video_kwargs(is_video, side) -> dict`` (see :func:`video_lm_kwargs`); other
        adapters need neither.
        """

    def language_model(self, model: Any) -> torch.nn.Module:
        """The decoder stack taking ``inputs_embeds``, ``position_ids``, ``attention_mask``, ``cache``."""

    def lm_positions(self, positions: torch.Tensor) -> torch.Tensor:
        """Convert (R, n) positions to what the language model expects."""

    # Optional: ``video_geometry(model) -> tuple`` naming how the model cuts a frame into tokens.
    # Two models of a family whose geometries differ each get their own prompt (Std-SD); an
    # adapter without it declares one geometry for the whole family (:func:`video_geometry`).


def video_geometry(adapter: Adapter, model: Any) -> tuple | None:
    """How ``model`` cuts frames into video tokens (``adapter.video_geometry``), or None when the
    family has one geometry for every size.

    Source: :mod:`specvlm.regrid` (drafts with their own token grid).
    """
    fn = getattr(adapter, "video_geometry", None)
    return None if fn is None else tuple(fn(model))


@dataclass(frozen=True)
class VideoEncoding:
    """What a video encoder produced for one prompt.

    Attributes:
        features: float (V, D), one embedding per video token, in video-token order.
        side: float (S, V, D) per-video-token features the language model takes beside its input
            embeddings (S feature sets, e.g. DeepStack's per-layer features), or None. Generic code
            slices dim 1 like the video tokens (a draft keeps the columns of its kept tokens).

    Source: docs/design.md §4.7 (draft inputs) and §10 (DeepStack).
    """

    features: torch.Tensor
    side: torch.Tensor | None = None


def encode_video(adapter: Adapter, model: Any, inputs: ModelInputs) -> VideoEncoding:
    """Run ``adapter.video_features`` once and return a :class:`VideoEncoding` (side = None for plain tensors).

    Source: docs/design.md §2 (the vision encoder runs once per model and request).
    """
    out = adapter.video_features(model, inputs)
    return out if isinstance(out, VideoEncoding) else VideoEncoding(out)


def video_lm_kwargs(adapter: Adapter, is_video: torch.Tensor, side: torch.Tensor | None) -> dict[str, Any]:
    """Extra language-model keywords for one forward chunk holding video tokens.

    Args:
        adapter: the model's family adapter.
        is_video: bool (n,), which of the chunk's n tokens are video tokens (v of them).
        side: float (S, v, D) side features of exactly those v tokens, in order, or None.

    Returns:
        ``adapter.lm_video_kwargs(is_video, side)``, or {} without side features or video tokens.

    Raises:
        ValueError: ``side`` does not have one column per video token of the chunk.

    Source: docs/design.md §4.7 (the draft sees its kept video tokens only) and §10 (DeepStack).
    """
    if side is None or not bool(is_video.any()):
        return {}
    if side.shape[1] != int(is_video.sum()):
        raise ValueError(f"side features for {side.shape[1]} video tokens do not match the {int(is_video.sum())} "
                         "video tokens of this chunk: slice them with the kept video-token indices.")
    return adapter.lm_video_kwargs(is_video, side)


def message_for(prompt: str, block: str = "") -> list[dict]:
    """A one-turn chat with the video before the text (both families' convention).

    A non-empty subtitle transcript ``block`` is put between the video and the question
    (:func:`specvlm.prompting.user_text`).
    """
    content = [{"type": "video"}, {"type": "text", "text": user_text(prompt, block)}]
    return [{"role": "user", "content": content}]


def attach_subtitles(inputs: ModelInputs, tokenizer: Any, block: str, mode: str) -> ModelInputs:
    """Fill the subtitle fields of freshly prepared inputs (mask located from ``prompt_text``)."""
    if not block:
        return inputs
    inputs.subtitle_mask = subtitle_mask(inputs.input_ids, tokenizer, inputs.prompt_text, block)
    inputs.subtitle_mode = mode
    inputs.subtitle_text = block
    return inputs


def subtitle_block_for(clip: VideoClip, subtitles: list | None, mode: str, frames_per_group: int) -> str:
    """Validate the mode and build the transcript block ("" for no cues or mode ``none``)."""
    check_mode(mode)
    if not subtitles or mode == "none":
        return ""
    return subtitle_block(subtitles, clip.timestamps, frames_per_group)


def check_prompt(prompt: str) -> str:
    """Validate a prompt; raises ValueError for empty prompts."""
    if not isinstance(prompt, str) or not prompt.strip():
        raise ValueError("The prompt is empty: type a question or instruction about the video.")
    return prompt


_ADAPTERS: dict[str, Adapter] = {}


def register(model_type: str, adapter: Adapter) -> None:
    """Register an adapter for a ``config.model_type``."""
    _ADAPTERS[model_type] = adapter


def adapter_for(model: Any) -> Adapter:
    """The adapter for ``model.config.model_type``.

    Raises:
        ModelLoadError: the family is not supported.
    """
    mt = getattr(model.config, "model_type", None)
    if mt not in supported_model_types():
        raise ModelLoadError(
            f"model type {mt!r} is not supported: use a Qwen2.5-VL, Qwen3-VL, LLaVA-OneVision or SmolVLM2 checkpoint "
            f"(supported: {', '.join(supported_model_types())})."
        )
    return _ADAPTERS[mt]


def supported_families() -> list[str]:
    """The supported model families as people name them (e.g. ``Qwen2.5-VL``), one per registered adapter,
    in registration order (MoE and dense variants of a family count once).

    Source: the adapter registry (:func:`register`).
    """
    supported_model_types()
    return list(dict.fromkeys(getattr(a, "title", "") or a.family for a in _ADAPTERS.values()))


def supported_model_types() -> list[str]:
    """The ``config.model_type`` values with a registered adapter, sorted."""
    from specvlm.models import llava_onevision, qwen2_5_vl, qwen3_vl, smolvlm  # noqa: F401  (registration)

    return sorted(_ADAPTERS)
