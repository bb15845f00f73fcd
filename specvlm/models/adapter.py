"""Model-family adapters: the only place that knows a family's specifics.

An adapter turns (processor, clip, prompt) into :class:`ModelInputs` and knows
where a model keeps its language model, LM head and video encoder. Generic code
(prefill, drafting, verification) only talks to adapters.

Source: docs/design.md §2-3 and §7.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from specvlm.text.prompting import check_mode, subtitle_block, subtitle_mask, user_text
from specvlm.types import ModelInputs, VideoClip

log = logging.getLogger(__name__)


class Adapter(Protocol):
    """What generic code needs from a model family."""

    family: str
    title: str  # the family's name as people write it, e.g. "Qwen2.5-VL"
    frames_per_token: int

    def prepare(self, processor: Any, model: Any, clip: VideoClip, prompt: str,
                subtitles: list | None = None, subtitle_mode: str = "both") -> ModelInputs:
        """Build :class:`ModelInputs` with the model's own processor and chat template.

        ``subtitles`` (cues) go into the prompt as a timestamped transcript after the video
        (:mod:`specvlm.text.prompting`); ``subtitle_mode`` says who sees it.
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

    Source: :mod:`specvlm.spec.grid` (drafts with their own token grid).
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
    (:func:`specvlm.text.prompting.user_text`).
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
