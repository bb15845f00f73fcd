"""Random-weight models of the presets' real architectures, built in-process (no downloads).

Each :class:`Arch` holds a checkpoint's published dimensions: text hidden size, heads,
key/value heads, MLP width, vocabulary (padded LM-head size), M-RoPE sections, and the
vision tower's width, heads, patch and merge geometry. :func:`build` turns one into a
``...ForConditionalGeneration`` model with random weights and a processor with the real
video geometry, at a chosen decoder depth (``layers``) and vision depth
(``vision_layers``): fewer layers keep the per-layer cost and every tensor shape real
while fitting a CPU or a single GPU. The tokenizer is the small offline one of
:mod:`specvlm.testing.tiny` (its special-token ids are written into the config), so generated
ids above its size decode to nothing; ids, logits and caches are those of the real
vocabulary.

Used by ``scripts/gpu_check.py`` (full depth where memory allows) and
``tests/test_real_dims.py`` (1-2 decoder layers on the CPU).

Source: the published ``config.json`` of Qwen/Qwen2.5-VL-{3B,7B,32B}-Instruct,
Qwen/Qwen3-VL-{2B,8B}-Instruct and llava-hf/llava-onevision-qwen2-{7b,72b}-ov-hf; docs/design.md §7
(tiny configs).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from specvlm.testing.tiny import (LLAVA_CHAT_TEMPLATE, LLAVA_SPECIALS, QWEN_CHAT_TEMPLATE, QWEN_SPECIALS,
                                  build_tokenizer)

log = logging.getLogger(__name__)

QWEN_VISION = dict(depth=32, hidden_size=1280, intermediate_size=3420, num_heads=16, patch_size=14,
                   spatial_merge_size=2, temporal_patch_size=2, window_size=112,
                   fullatt_block_indexes=[7, 15, 23, 31], tokens_per_second=2)
QWEN3_VISION = dict(depth=27, hidden_size=1152, intermediate_size=4304, num_heads=16, patch_size=16,
                    spatial_merge_size=2, temporal_patch_size=2, num_position_embeddings=2304,
                    deepstack_visual_indexes=[8, 16, 24])
QWEN3_SMALL_VISION = dict(QWEN3_VISION, depth=24, hidden_size=1024, intermediate_size=4096,
                          deepstack_visual_indexes=[5, 11, 17])
"""The vision tower of Qwen3-VL-2B and 4B: narrower and shallower than the 8B's, the same patch and merge."""
SIGLIP_SO400M = dict(model_type="siglip_vision_model", hidden_size=1152, intermediate_size=4304,
                     num_hidden_layers=26, num_attention_heads=16, image_size=384, patch_size=14,
                     vision_use_head=False)


@dataclass(frozen=True)
class Arch:
    """A checkpoint's architecture at its published dimensions.

    Attributes:
        name: display name, e.g. "Qwen2.5-VL-7B".
        family: ``qwen2_5_vl``, ``qwen3_vl`` or ``llava_onevision``.
        hidden: text hidden size.
        layers: text decoder layers of the checkpoint.
        heads: attention heads; head_dim = hidden / heads.
        kv_heads: key/value heads.
        intermediate: MLP width.
        vocab: LM-head rows (the padded vocabulary, e.g. 152,064 for Qwen2.5-VL-7B).
        tie_embeddings: input embeddings shared with the LM head.
        mrope_section: M-RoPE (t, h, w) sections of head_dim / 2 (Qwen2.5-VL, Qwen3-VL), else None.
        vision: vision tower config (real widths; its depth key is replaced by ``vision_layers``).
        rope_theta: rotary base.
    """

    name: str
    family: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int
    tie_embeddings: bool = False
    mrope_section: tuple[int, int, int] | None = None
    vision: dict = field(default_factory=dict)
    rope_theta: float = 1_000_000.0

    @property
    def head_dim(self) -> int:
        """Channels per attention head."""
        return self.hidden // self.heads


QWEN2_5_VL_3B = Arch("Qwen2.5-VL-3B", "qwen2_5_vl", 2048, 36, 16, 2, 11008, 151936, True, (16, 24, 24),
                     dict(QWEN_VISION, out_hidden_size=2048))
QWEN2_5_VL_7B = Arch("Qwen2.5-VL-7B", "qwen2_5_vl", 3584, 28, 28, 4, 18944, 152064, False, (16, 24, 24),
                     dict(QWEN_VISION, out_hidden_size=3584))
QWEN2_5_VL_32B = Arch("Qwen2.5-VL-32B", "qwen2_5_vl", 5120, 64, 40, 8, 27648, 152064, False, (16, 24, 24),
                      dict(QWEN_VISION, intermediate_size=3456, out_hidden_size=5120))
QWEN3_VL_8B = Arch("Qwen3-VL-8B", "qwen3_vl", 4096, 36, 32, 8, 12288, 151936, False, (24, 20, 20),
                   dict(QWEN3_VISION, out_hidden_size=4096), rope_theta=5_000_000.0)
QWEN3_VL_2B = Arch("Qwen3-VL-2B", "qwen3_vl", 2048, 28, 16, 8, 6144, 151936, True, (24, 20, 20),
                   dict(QWEN3_SMALL_VISION, out_hidden_size=2048), rope_theta=5_000_000.0)
LLAVA_OV_7B = Arch("LLaVA-OV-7B", "llava_onevision", 3584, 28, 28, 4, 18944, 152128, vision=SIGLIP_SO400M)
LLAVA_OV_72B = Arch("LLaVA-OV-72B", "llava_onevision", 8192, 80, 64, 8, 29568, 152128, vision=SIGLIP_SO400M)
ARCHS = {a.name: a for a in (QWEN2_5_VL_3B, QWEN2_5_VL_7B, QWEN2_5_VL_32B, QWEN3_VL_2B, QWEN3_VL_8B, LLAVA_OV_7B,
                             LLAVA_OV_72B)}


def _text_config(arch: Arch, layers: int, ids: dict[str, int]) -> dict:
    rope: dict[str, Any] = {"rope_type": "default", "rope_theta": arch.rope_theta}
    if arch.mrope_section:
        rope["mrope_section"] = list(arch.mrope_section)
    cfg = dict(vocab_size=arch.vocab, hidden_size=arch.hidden, intermediate_size=arch.intermediate,
               num_hidden_layers=layers, num_attention_heads=arch.heads, num_key_value_heads=arch.kv_heads,
               rope_parameters=rope, max_position_embeddings=128000, tie_word_embeddings=arch.tie_embeddings,
               bos_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|im_end|>"], pad_token_id=ids["<|endoftext|>"],
               rms_norm_eps=1e-6)
    if arch.family == "llava_onevision":
        cfg["model_type"] = "qwen2"
    return cfg


def _instantiate(cls: Any, config: Any, dtype: torch.dtype, device: str, seed: int) -> Any:
    config._attn_implementation = "sdpa"
    torch.manual_seed(seed)
    with torch.device(device):
        model = cls._from_config(config, dtype=dtype, attn_implementation="sdpa")
    return model.eval()


def _qwen(arch: Arch, layers: int, vision_layers: int, dtype: torch.dtype, device: str, seed: int,
          frame_side: int) -> tuple[Any, Any]:
    from transformers import (Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration, Qwen2_5_VLProcessor,
                              Qwen2VLImageProcessor, Qwen2VLVideoProcessor)

    tok = build_tokenizer(QWEN_SPECIALS)
    ids = {t: tok.convert_tokens_to_ids(t) for t in QWEN_SPECIALS}
    vision = dict(arch.vision, depth=vision_layers,
                  fullatt_block_indexes=[i for i in arch.vision["fullatt_block_indexes"] if i < vision_layers]
                  or [vision_layers - 1])
    config = Qwen2_5_VLConfig(text_config=_text_config(arch, layers, ids), vision_config=vision,
                              image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
                              vision_start_token_id=ids["<|vision_start|>"],
                              vision_end_token_id=ids["<|vision_end|>"], tie_word_embeddings=arch.tie_embeddings)
    model = _instantiate(Qwen2_5_VLForConditionalGeneration, config, dtype, device, seed)
    pix = dict(min_pixels=28 * 28, max_pixels=frame_side * frame_side)
    processor = Qwen2_5_VLProcessor(
        image_processor=Qwen2VLImageProcessor(**pix),
        video_processor=Qwen2VLVideoProcessor(**pix, size={"shortest_edge": 28 * 28,
                                                           "longest_edge": frame_side * frame_side}),
        tokenizer=tok, chat_template=QWEN_CHAT_TEMPLATE)
    return model, processor


def _qwen3(arch: Arch, layers: int, vision_layers: int, dtype: torch.dtype, device: str, seed: int,
           frame_side: int) -> tuple[Any, Any]:
    from transformers import (Qwen2VLImageProcessor, Qwen3VLConfig, Qwen3VLForConditionalGeneration,
                              Qwen3VLProcessor, Qwen3VLVideoProcessor)

    tok = build_tokenizer(QWEN_SPECIALS)
    ids = {t: tok.convert_tokens_to_ids(t) for t in QWEN_SPECIALS}
    deep = [i for i in arch.vision["deepstack_visual_indexes"] if i < vision_layers] or [vision_layers - 1]
    text = _text_config(arch, layers, ids)
    text.update(head_dim=arch.head_dim)
    text["rope_parameters"]["mrope_interleaved"] = True
    config = Qwen3VLConfig(text_config=text, vision_config=dict(arch.vision, depth=vision_layers,
                                                                deepstack_visual_indexes=deep),
                           image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
                           vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"],
                           tie_word_embeddings=arch.tie_embeddings)
    model = _instantiate(Qwen3VLForConditionalGeneration, config, dtype, device, seed)
    geo = dict(patch_size=arch.vision["patch_size"], merge_size=arch.vision["spatial_merge_size"],
               temporal_patch_size=arch.vision["temporal_patch_size"])
    factor = geo["patch_size"] * geo["merge_size"]
    # the video budget covers every frame (Qwen3-VL's resize caps frames x height x width): 1,024 frames of frame_side
    size = {"shortest_edge": factor * factor, "longest_edge": frame_side * frame_side * 1024}
    processor = Qwen3VLProcessor(image_processor=Qwen2VLImageProcessor(**geo, size=size),
                                 video_processor=Qwen3VLVideoProcessor(**geo, size=size),
                                 tokenizer=tok, chat_template=QWEN_CHAT_TEMPLATE)
    return model, processor


def _llava(arch: Arch, layers: int, vision_layers: int, dtype: torch.dtype, device: str, seed: int,
           frame_side: int) -> tuple[Any, Any]:
    from transformers import (LlavaOnevisionConfig, LlavaOnevisionForConditionalGeneration,
                              LlavaOnevisionImageProcessor, LlavaOnevisionProcessor, LlavaOnevisionVideoProcessor)

    tok = build_tokenizer(LLAVA_SPECIALS)
    ids = {t: tok.convert_tokens_to_ids(t) for t in LLAVA_SPECIALS}
    vision = dict(arch.vision, num_hidden_layers=vision_layers)
    config = LlavaOnevisionConfig(vision_config=vision, text_config=_text_config(arch, layers, ids),
                                  image_token_id=ids["<image>"], video_token_id=ids["<video>"],
                                  vision_feature_select_strategy="full", vision_feature_layer=-1,
                                  tie_word_embeddings=arch.tie_embeddings)
    model = _instantiate(LlavaOnevisionForConditionalGeneration, config, dtype, device, seed)
    side = vision["image_size"]
    size = {"height": side, "width": side}
    processor = LlavaOnevisionProcessor(
        image_processor=LlavaOnevisionImageProcessor(size=size, crop_size=size),
        video_processor=LlavaOnevisionVideoProcessor(size=size), tokenizer=tok,
        num_image_tokens=(side // vision["patch_size"]) ** 2, vision_feature_select_strategy="full",
        chat_template=LLAVA_CHAT_TEMPLATE)
    return model, processor


def build(arch: Arch, *, layers: int | None = None, vision_layers: int | None = None,
          dtype: torch.dtype = torch.float32, device: str = "cpu", seed: int = 0,
          frame_side: int = 448) -> tuple[Any, Any]:
    """A random-weight model of ``arch`` and its processor.

    Args:
        arch: one of :data:`ARCHS`.
        layers: decoder layers to build (default: the checkpoint's); every other dimension is real.
        vision_layers: vision blocks to build (default: the checkpoint's).
        dtype: parameter dtype.
        device: where the weights are created ("cpu", "cuda", "cuda:1").
        seed: weight seed.
        frame_side: largest frame side in px for the Qwen video processors (448 = 16x16 merged
            tokens per 2-frame group for Qwen2.5-VL, 14x14 for Qwen3-VL); LLaVA-OneVision always
            resizes to its 384 px input.

    Returns:
        (model in eval mode with sdpa attention, processor).

    Raises:
        ValueError: unknown family or a depth < 1.
    """
    layers = arch.layers if layers is None else layers
    vdepth = arch.vision.get("depth", arch.vision.get("num_hidden_layers"))
    vision_layers = vdepth if vision_layers is None else vision_layers
    if layers < 1 or vision_layers < 1:
        raise ValueError(f"build needs layers >= 1 and vision_layers >= 1, got {layers}, {vision_layers}.")
    log.info("building %s: %d/%d decoder layers, %d/%d vision blocks, %s on %s", arch.name, layers, arch.layers,
             vision_layers, vdepth, dtype, device)
    if arch.family == "qwen2_5_vl":
        return _qwen(arch, layers, vision_layers, dtype, device, seed, frame_side)
    if arch.family == "qwen3_vl":
        return _qwen3(arch, layers, vision_layers, dtype, device, seed, frame_side)
    if arch.family == "llava_onevision":
        return _llava(arch, layers, vision_layers, dtype, device, seed, frame_side)
    raise ValueError(f"family {arch.family!r} is unknown: use qwen2_5_vl, qwen3_vl or llava_onevision.")


def shrink(arch: Arch, **dims: Any) -> Arch:
    """A copy of ``arch`` with some dimensions replaced (tiny stand-ins with the same structure)."""
    return replace(arch, **dims)
