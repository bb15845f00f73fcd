"""SmolVLM2 adapter: every sampled frame is one image of pixel-shuffled ``<image>`` tokens.

Prompt layout written by ``SmolVLMProcessor`` for one video (Idefics3 style)::

    You are provided the following series of {eight} frames from a {0:00:02} [H:MM:SS] video.\\n
    \\nFrame from 00:00:<fake_token_around_image><global-img><image>*S<fake_token_around_image>
    \\nFrame from 00:01:<fake_token_around_image><global-img><image>*S<fake_token_around_image>
    ...\\n\\n<question>

The config has no video token id: video tokens are the ``<image>`` tokens
(``config.image_token_id``). Each frame is resized to the processor's square
(``max_image_size``), cut into (side / patch)^2 patches, and the connector's pixel
shuffle merges ``scale_factor``^2 neighbouring patches into one token, in raster
order: S = (side / patch / scale_factor)^2 tokens per frame (512 px, patch 16,
shuffle 4 -> 8 x 8 = 64 for SmolVLM2-256M/500M; 384 px, patch 14, shuffle 3 ->
9 x 9 = 81 for SmolVLM2-2.2B). The frame count (in words, via ``num2words``), the
clip's duration and every frame's MM:SS time are prompt text, so the processor
gets the clip's real metadata. Positions are 1-D (Llama text model).

Source: SmolVLM (Marafioti et al. 2025); transformers' ``SmolVLMProcessor``,
``SmolVLMVideoProcessor`` and ``SmolVLMModel.get_image_features`` (public APIs).
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

from specvlm.models.adapter import (attach_subtitles, message_for,
                                   subtitle_block_for)
from specvlm.text.prompting import check_prompt
from specvlm.types import ModelInputs, VideoClip


def clip_metadata(clip: VideoClip) -> dict[str, Any]:
    """The ``video_metadata`` the processor needs to write the frames' real times and the duration.

    Frame times are ``frames_indices / fps`` in the processor, so the sampled frames' timestamps
    are turned into indices at the stream's native frame rate (the sampled rate for in-memory
    clips without one). Without a duration the processor would fall back to the last frame's
    time and write a different intro.

    Args:
        clip: frames uint8 (T, H, W, 3) and timestamps float (T,) in seconds.

    Returns:
        dict with ``fps`` (frames/s), ``frames_indices`` (T ints), ``total_num_frames`` and
        ``duration`` (s).

    Source: transformers' ``SmolVLMProcessor`` (intro and "Frame from MM:SS:" lines read
    ``VideoMetadata.timestamps`` and ``duration``).
    """
    ts = np.asarray(clip.timestamps, dtype=np.float64)
    fps = float(clip.native_fps) if clip.native_fps and clip.native_fps > 0 else float(clip.sample_fps)
    indices = [int(round(t * fps)) for t in ts]
    duration = float(clip.duration) if clip.duration and clip.duration > 0 else len(ts) / clip.sample_fps
    total = int(clip.total_frames) if clip.total_frames else max(indices) + 1
    return {"fps": fps, "frames_indices": indices, "total_num_frames": total, "duration": duration}


def tokens_side(model: Any) -> int:
    """Tokens along one side of a frame after the pixel shuffle: image_size / patch / scale_factor.

    Source: transformers' ``SmolVLMModel.image_seq_len`` = (image_size / patch)^2 / scale_factor^2.
    """
    vc = model.config.vision_config
    return int(vc.image_size) // int(vc.patch_size) // int(model.config.scale_factor)


def frame_grid(num_frames: int, side: int) -> torch.Tensor:
    """(frame, row, col) of every video token, frame-major then raster: int64 (T * side^2, 3).

    Source: ``SmolVLMConnector.pixel_shuffle`` keeps the patches' raster order over
    (side x side) merged cells.
    """
    return torch.stack(torch.meshgrid(torch.arange(num_frames), torch.arange(side), torch.arange(side),
                                      indexing="ij"), -1).reshape(-1, 3)


class SmolVLMAdapter:
    """Adapter for ``SmolVLMForConditionalGeneration`` (model_type ``smolvlm``, SmolVLM2)."""

    family = "smolvlm"
    title = "SmolVLM2"
    frames_per_token = 1

    def prepare(self, processor: Any, model: Any, clip: VideoClip, prompt: str,
                subtitles: list | None = None, subtitle_mode: str = "both") -> ModelInputs:
        """Chat-template the prompt and process the frames with the clip's real timing.

        Args:
            processor: the model's ``SmolVLMProcessor`` (needs the ``num2words`` package).
            model: the model (for its image token id and vision geometry).
            clip: frames uint8 (T, H, W, 3) + timestamps (s); every frame becomes one image,
                resized by the processor to its square ``max_image_size``.
            prompt: user text.
            subtitles: cues or None; each frame gets its cues as a timestamped transcript line after
                the video (:mod:`specvlm.text.prompting`).
            subtitle_mode: ``both`` | ``target`` | ``draft`` | ``none`` (who sees the transcript).

        Returns:
            ModelInputs with positions int64 (1, L) = arange(L) and token_grid int64 (V, 3) of
            (frame, row, col), V = T * side^2.

        Raises:
            ValueError: empty prompt, unknown subtitle mode, or a processor whose tokens per frame
                differ from the model's (processor and model from different checkpoints).

        Source: transformers' ``SmolVLMProcessor.__call__`` and ``apply_chat_template`` (video layout).
        """
        check_prompt(prompt)
        frames = np.asarray(clip.frames)
        block = subtitle_block_for(clip, subtitles, subtitle_mode, 1)
        text = processor.apply_chat_template(message_for(prompt, block), tokenize=False, add_generation_prompt=True)
        video_kw = {"video_metadata": [clip_metadata(clip)], "do_sample_frames": False}
        enc = processor(text=[text], videos=[frames], return_tensors="pt", **video_kw)
        ids = enc["input_ids"]
        video_index = (ids[0] == model.config.image_token_id).nonzero().flatten()
        n_frames, side = int(enc["pixel_values"].shape[1]), tokens_side(model)
        grid = frame_grid(n_frames, side)
        if grid.shape[0] != video_index.numel():
            raise ValueError(
                f"the processor wrote {video_index.numel()} image tokens for {n_frames} frames but the model makes "
                f"{side * side} per frame: load the processor from the same checkpoint as the model.")
        vision = {k: enc[k] for k in ("pixel_values", "pixel_attention_mask") if k in enc}
        inputs = ModelInputs(ids, torch.arange(ids.shape[1])[None, :], video_index, grid, self.frames_per_token,
                             vision, text, processor_kwargs=video_kw)
        return attach_subtitles(inputs, processor.tokenizer, block, subtitle_mode)

    def video_features(self, model: Any, inputs: ModelInputs) -> torch.Tensor:
        """SigLIP tower + pixel shuffle + projection once for all frames: float (V, D)."""
        dev = model.get_input_embeddings().weight.device
        px = inputs.vision["pixel_values"].to(dev)
        mask = inputs.vision.get("pixel_attention_mask")
        out = model.model.get_image_features(px, None if mask is None else mask.to(dev))
        return torch.cat(list(out.pooler_output), 0)

    def language_model(self, model: Any) -> torch.nn.Module:
        return model.model.text_model

    def video_geometry(self, model: Any) -> tuple[int, int, int]:
        """(frame side px, patch px, pixel-shuffle factor): (512, 16, 4) for 256M/500M, (384, 14, 3) for 2.2B."""
        vc = model.config.vision_config
        return int(vc.image_size), int(vc.patch_size), int(model.config.scale_factor)

    def lm_positions(self, positions: torch.Tensor) -> torch.Tensor:
        """(1, n) -> (1, n)."""
        return positions
