"""Qwen3-VL adapter (dense and MoE): timestamped frame groups, interleaved M-RoPE, DeepStack.

What the family needs beyond Qwen2.5-VL (docs/design.md §10):

- The processor writes a ``<t seconds>`` timestamp and vision start/end tokens around every
  2-frame group, so video tokens come in runs separated by text. The draft keeps every such
  text token (generic code keeps all non-video tokens); positions come from the model's own
  full-prompt ``get_rope_index`` (interleaved M-RoPE, one time step per group), sliced.
- Timestamps are prompt text: they are computed from the clip's real frame times (its
  timestamps and native frame rate, :func:`frame_metadata`), so the prompt is the one the
  processor writes for the same frames, and greedy output equals ``model.generate()``.
- DeepStack: features of several vision layers are added into the first LLM layers at the
  video positions. :meth:`Qwen3VLAdapter.video_features` returns them as side features
  (:class:`~specvlm.models.adapter.VideoEncoding`), which generic code cuts to a draft's kept
  video tokens; :meth:`Qwen3VLAdapter.lm_video_kwargs` turns them into the text model's
  ``visual_pos_masks`` / ``deepstack_visual_embeds``.

Dense (``qwen3_vl``) and MoE (``qwen3_vl_moe``) checkpoints share one tokenizer and one
adapter (one family), so an MoE target may take a dense draft.

Source: Qwen3-VL (Qwen team, 2025; DeepStack: Meng et al. 2024, arXiv 2406.04334);
transformers 5.24 ``Qwen3VLModel.get_rope_index``, ``get_video_features``,
``Qwen3VLTextModel.forward`` and ``Qwen3VLProcessor``.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

from specvlm.models.adapter import (VideoEncoding, attach_subtitles, message_for,
                                   subtitle_block_for)
from specvlm.text.prompting import check_prompt
from specvlm.types import ModelInputs, VideoClip

MS_GRID = 1000.0
"""Frame-index rate (per second) used when the clip's times are not on its native frame grid."""


def frame_metadata(timestamps: np.ndarray, native_fps: float = 0.0, total_frames: int = 0) -> dict[str, Any]:
    """Video metadata whose frame times are the clip's real ones (what the processor's timestamps need).

    The processor writes ``<t seconds>`` with t = mean(index / fps) over each 2-frame group.
    Frames on the native grid (t = index / native fps, as decoded) keep their native indices;
    other times (variable frame rate, in-memory clips) use a millisecond grid, which keeps
    every printed 0.1 s digit exact.

    Args:
        timestamps: float (T,) seconds of the frames given to the processor.
        native_fps: the stream's frame rate (frames/s), 0 if unknown.
        total_frames: frames in the stream, 0 if unknown.

    Returns:
        dict with ``fps``, ``frames_indices`` (T ints), ``total_num_frames``.

    Raises:
        ValueError: no timestamps, or timestamps that are negative or decreasing.

    Source: transformers 5.24 ``Qwen3VLProcessor._calculate_timestamps``.
    """
    ts = np.asarray(timestamps, dtype=np.float64).reshape(-1)
    if ts.size == 0 or bool((ts < 0).any()) or bool((np.diff(ts) < 0).any()):
        raise ValueError("clip timestamps must be non-empty, non-negative and non-decreasing seconds: "
                         "load the clip with specvlm.video.load_video or pass the frames' real times.")
    fps = float(native_fps or 0.0)
    if fps <= 0 or not np.allclose(ts * fps, np.round(ts * fps), atol=1e-3):
        fps = MS_GRID
    idx = np.round(ts * fps).astype(np.int64)
    total = max(int(total_frames or 0), int(idx.max()) + 1) if fps != MS_GRID else int(idx.max()) + 1
    return {"fps": fps, "frames_indices": idx.tolist(), "total_num_frames": total}


def _even_frames(clip: VideoClip) -> tuple[np.ndarray, np.ndarray]:
    """Frames uint8 (T', H, W, 3) and times (T',), T' even: an odd clip repeats its last frame."""
    frames = np.asarray(clip.frames)
    ts = np.asarray(clip.timestamps, dtype=np.float64).reshape(-1)
    if len(ts) != len(frames):
        raise ValueError(f"the clip has {len(frames)} frames but {len(ts)} timestamps: give one time per frame.")
    if len(frames) % 2:
        frames = np.concatenate([frames, frames[-1:]], axis=0)
        ts = np.concatenate([ts, ts[-1:]])
    return frames, ts


class Qwen3VLAdapter:
    """Adapter for ``Qwen3VLForConditionalGeneration`` and ``Qwen3VLMoeForConditionalGeneration``.

    Source: module docstring (timestamps, interleaved M-RoPE, DeepStack).
    """

    family = "qwen3_vl"
    title = "Qwen3-VL"
    frames_per_token = 2

    def prepare(self, processor: Any, model: Any, clip: VideoClip, prompt: str,
                subtitles: list | None = None, subtitle_mode: str = "both") -> ModelInputs:
        """Chat-template the prompt, process frames with their real times, compute M-RoPE positions.

        Args:
            processor: the model's ``Qwen3VLProcessor``.
            model: the target model (for ``get_rope_index``).
            clip: frames uint8 (T, H, W, 3) + timestamps (s). An odd T is padded by repeating
                the last frame (temporal patch 2).
            prompt: user text.
            subtitles: cues or None; each 2-frame group gets the cues of both its frames as a
                timestamped transcript line after the video (:mod:`specvlm.text.prompting`).
            subtitle_mode: ``both`` | ``target`` | ``draft`` | ``none`` (who sees the transcript).

        Returns:
            ModelInputs with positions int64 (3, L) and token_grid (V, 3) over (group, h/2, w/2).

        Raises:
            ValueError: empty prompt, bad timestamps, unknown subtitle mode, or a prompt whose
                video tokens do not match the video grid.
        """
        check_prompt(prompt)
        frames, ts = _even_frames(clip)
        meta = frame_metadata(ts, clip.native_fps, clip.total_frames)
        block = subtitle_block_for(clip, subtitles, subtitle_mode, self.frames_per_token)
        text = processor.apply_chat_template(message_for(prompt, block), tokenize=False, add_generation_prompt=True)
        # cap_pixels_per_frame=False: keep the frames as sampled (specvlm.video caps each frame's area)
        enc = processor(text=[text], videos=[frames], video_metadata=[meta], do_sample_frames=False,
                        cap_pixels_per_frame=False, return_tensors="pt")
        ids = enc["input_ids"]
        video_index = (ids[0] == model.config.video_token_id).nonzero().flatten()
        thw = enc["video_grid_thw"]
        positions, _ = model.model.get_rope_index(ids, enc["mm_token_type_ids"], video_grid_thw=thw)
        t, h, w = (int(x) for x in thw[0])
        m = model.config.vision_config.spatial_merge_size
        grid = torch.stack(torch.meshgrid(torch.arange(t), torch.arange(h // m), torch.arange(w // m),
                                          indexing="ij"), -1).reshape(-1, 3)
        if grid.shape[0] != video_index.numel():
            raise ValueError(f"video tokens ({video_index.numel()}) do not match the video grid ({grid.shape[0]}): "
                             "the prompt must contain exactly one video placeholder.")
        vision = {"pixel_values_videos": enc["pixel_values_videos"], "video_grid_thw": thw}
        inputs = ModelInputs(ids, positions[:, 0, :].clone(), video_index, grid, self.frames_per_token,
                             vision, text)
        return attach_subtitles(inputs, processor.tokenizer, block, subtitle_mode)

    def video_features(self, model: Any, inputs: ModelInputs) -> VideoEncoding:
        """Vision tower + mergers once.

        Returns:
            VideoEncoding: features float (V, D) and DeepStack side features float (S, V, D),
            S = len(vision_config.deepstack_visual_indexes), on the model's device.
        """
        dev = model.get_input_embeddings().weight.device
        out = model.model.get_video_features(inputs.vision["pixel_values_videos"].to(dev),
                                             inputs.vision["video_grid_thw"].to(dev), return_dict=True)
        feats = torch.cat(list(out.pooler_output), 0)
        deep = out.deepstack_features or []
        side = torch.stack([torch.cat(list(f), 0) for f in deep]) if deep else None
        return VideoEncoding(feats, side)

    def lm_video_kwargs(self, is_video: torch.Tensor, side: torch.Tensor) -> dict[str, Any]:
        """DeepStack keywords for one chunk: bool (1, n) visual mask + S tensors float (v, D)."""
        return {"visual_pos_masks": is_video.reshape(1, -1).to(side.device),
                "deepstack_visual_embeds": list(side.unbind(0))}

    def language_model(self, model: Any) -> torch.nn.Module:
        return model.model.language_model

    def lm_positions(self, positions: torch.Tensor) -> torch.Tensor:
        """(3, n) -> (3, 1, n)."""
        return positions[:, None, :]
