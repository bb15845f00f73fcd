"""LLaVA-OneVision adapter: chat inputs, 1-D positions, pooled video features.

Video tokens per frame: (ceil(S/p/2))^2 after 2x2 bilinear pooling (14x14 = 196
at 384 px, patch 14), plus ONE newline token after the last frame.

Source: LLaVA-OneVision (Li et al. 2024); transformers'
``LlavaOnevisionModel.get_video_features``.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from specvlm.models.adapter import (attach_subtitles, message_for,
                                   subtitle_block_for)
from specvlm.text.prompting import check_prompt
from specvlm.types import ModelInputs, VideoClip


class LlavaOnevisionAdapter:
    """Adapter for ``LlavaOnevisionForConditionalGeneration`` (model_type ``llava_onevision``)."""

    family = "llava_onevision"
    title = "LLaVA-OneVision"
    frames_per_token = 1

    def prepare(self, processor: Any, model: Any, clip: VideoClip, prompt: str,
                subtitles: list | None = None, subtitle_mode: str = "both") -> ModelInputs:
        """Chat-template the prompt and process frames.

        Args:
            processor, model, clip, prompt: as for the Qwen2.5-VL adapter.
            subtitles: cues or None; each frame gets its cues as a timestamped transcript line after
                the video (:mod:`specvlm.text.prompting`).
            subtitle_mode: ``both`` | ``target`` | ``draft`` | ``none`` (who sees the transcript).

        Returns:
            ModelInputs with positions int64 (1, L) = arange(L) and token_grid (V, 3); the final
            newline token has grid (T-1, -1, -1).

        Raises:
            ValueError: empty prompt, unknown subtitle mode.
        """
        check_prompt(prompt)
        frames = np.asarray(clip.frames)
        block = subtitle_block_for(clip, subtitles, subtitle_mode, 1)
        text = processor.apply_chat_template(message_for(prompt, block), tokenize=False, add_generation_prompt=True)
        enc = processor(text=[text], videos=[frames], return_tensors="pt")
        ids = enc["input_ids"]
        video_index = (ids[0] == model.config.video_token_id).nonzero().flatten()
        vc = model.config.vision_config
        side = math.ceil(vc.image_size // vc.patch_size / 2)
        n_frames = int(enc["pixel_values_videos"].shape[1])
        grid = torch.stack(torch.meshgrid(torch.arange(n_frames), torch.arange(side), torch.arange(side),
                                          indexing="ij"), -1).reshape(-1, 3)
        grid = torch.cat([grid, torch.tensor([[n_frames - 1, -1, -1]])], 0)
        if grid.shape[0] != video_index.numel():
            raise ValueError(f"video tokens ({video_index.numel()}) do not match the video grid ({grid.shape[0]}).")
        positions = torch.arange(ids.shape[1])[None, :]
        inputs = ModelInputs(ids, positions, video_index, grid, self.frames_per_token,
                             {"pixel_values_videos": enc["pixel_values_videos"]}, text)
        return attach_subtitles(inputs, processor.tokenizer, block, subtitle_mode)

    def video_features(self, model: Any, inputs: ModelInputs) -> torch.Tensor:
        """SigLIP + projector + pooling + newline once: float (V, D)."""
        dev = model.get_input_embeddings().weight.device
        px = inputs.vision["pixel_values_videos"].to(dev)
        cfg = model.config
        out = model.model.get_video_features(
            px, vision_feature_layer=cfg.vision_feature_layer,
            vision_feature_select_strategy=cfg.vision_feature_select_strategy,
        )
        return out.pooler_output.flatten(0, 1)

    def language_model(self, model: Any) -> torch.nn.Module:
        return model.model.language_model

    def lm_positions(self, positions: torch.Tensor) -> torch.Tensor:
        """(1, n) -> (1, n)."""
        return positions
