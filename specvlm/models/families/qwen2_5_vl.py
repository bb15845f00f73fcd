"""Qwen2.5-VL adapter: chat inputs, 3-D M-RoPE positions, video features.

Source: Qwen2.5-VL technical report (M-RoPE with absolute time); transformers'
``Qwen2_5_VLModel.get_rope_index`` for positions (docs/design.md §7: pass
``mm_token_type_ids`` and compute once over the full prompt).
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

from specvlm.models.adapter import (attach_subtitles, message_for,
                                   subtitle_block_for)
from specvlm.text.prompting import check_prompt
from specvlm.types import ModelInputs, VideoClip


class Qwen25VLAdapter:
    """Adapter for ``Qwen2_5_VLForConditionalGeneration`` (model_type ``qwen2_5_vl``)."""

    family = "qwen2_5_vl"
    title = "Qwen2.5-VL"
    frames_per_token = 2

    def prepare(self, processor: Any, model: Any, clip: VideoClip, prompt: str,
                subtitles: list | None = None, subtitle_mode: str = "both") -> ModelInputs:
        """Chat-template the prompt, process frames with their real timing, compute M-RoPE positions.

        Args:
            processor: the model's ``Qwen2_5_VLProcessor``.
            model: the target model (for ``get_rope_index``).
            clip: frames uint8 (T, H, W, 3) + timestamps (s). An odd T is padded by repeating
                the last frame (temporal patch 2).
            prompt: user text.
            subtitles: cues (:class:`specvlm.text.subtitles.Cue`) or None; each 2-frame token group gets
                the cues of both its frames, as a timestamped transcript line after the video
                (:mod:`specvlm.text.prompting`).
            subtitle_mode: ``both`` | ``target`` | ``draft`` | ``none`` (who sees the transcript).

        Returns:
            ModelInputs with positions int64 (3, L) and token_grid (V, 3) over (t, h/2, w/2).

        Raises:
            ValueError: empty prompt, frames smaller than 28 px or unknown subtitle mode.
        """
        check_prompt(prompt)
        frames = np.asarray(clip.frames)
        if frames.shape[1] < 28 or frames.shape[2] < 28:
            raise ValueError(f"frames of {frames.shape[2]}x{frames.shape[1]} px are too small for Qwen2.5-VL: "
                             "enlarge the clip with specvlm.video.ensure_min_side(clip) (load_video does it by "
                             "default) or use a video at least 28 px on each side.")
        if len(frames) % 2:
            frames = np.concatenate([frames, frames[-1:]], axis=0)
        fps = float(clip.sample_fps) or 1.0
        meta = {"fps": fps, "total_num_frames": len(frames), "frames_indices": list(range(len(frames)))}
        block = subtitle_block_for(clip, subtitles, subtitle_mode, self.frames_per_token)
        text = processor.apply_chat_template(message_for(prompt, block), tokenize=False, add_generation_prompt=True)
        # cap_pixels_per_frame=False: keep the frames as sampled (specvlm.video already caps each frame's
        # area at VideoConfig.max_pixels); also silences transformers' notice about the coming default
        enc = processor(text=[text], videos=[frames], video_metadata=[meta], do_sample_frames=False,
                        cap_pixels_per_frame=False, return_tensors="pt")
        ids = enc["input_ids"]
        vid_id = model.config.video_token_id
        video_index = (ids[0] == vid_id).nonzero().flatten()
        mm = enc.get("mm_token_type_ids")
        if mm is None:
            mm = (ids == vid_id).to(torch.long) * 2
        positions, _ = model.model.get_rope_index(
            ids, mm, video_grid_thw=enc["video_grid_thw"], second_per_grid_ts=enc.get("second_per_grid_ts"),
        )
        t, h, w = (int(x) for x in enc["video_grid_thw"][0])
        m = model.config.vision_config.spatial_merge_size
        grid = torch.stack(torch.meshgrid(torch.arange(t), torch.arange(h // m), torch.arange(w // m),
                                          indexing="ij"), -1).reshape(-1, 3)
        vision = {k: enc[k] for k in ("pixel_values_videos", "video_grid_thw") if k in enc}
        inputs = ModelInputs(ids, positions[:, 0, :].clone(), video_index, grid, self.frames_per_token,
                             vision, text)
        return attach_subtitles(inputs, processor.tokenizer, block, subtitle_mode)

    def video_features(self, model: Any, inputs: ModelInputs) -> torch.Tensor:
        """Video encoder + merger once: float (V, D) on the model's device and dtype."""
        dev = model.get_input_embeddings().weight.device
        px = inputs.vision["pixel_values_videos"].to(dev)
        thw = inputs.vision["video_grid_thw"].to(dev)
        out = model.model.get_video_features(px, thw)
        return torch.cat(list(out.pooler_output), 0)

    def language_model(self, model: Any) -> torch.nn.Module:
        return model.model.language_model

    def lm_positions(self, positions: torch.Tensor) -> torch.Tensor:
        """(3, n) -> (3, 1, n)."""
        return positions[:, None, :]
