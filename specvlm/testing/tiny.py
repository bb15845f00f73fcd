"""Tiny models and processors built in-process from configs (no downloads).

Used by the tests, the benchmark's CPU smoke runs and the GPU check at tiny
sizes. Weights are randomly initialised with a larger-than-default scale so
greedy output is varied rather than a single repeated token.

Source: docs/design.md §7 (tiny configs of the real config classes).
"""
from __future__ import annotations

import logging

import torch

log = logging.getLogger(__name__)

QWEN_SPECIALS = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
    "<|video_pad|>", "<|image_pad|>",
]
LLAVA_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<image>", "<video>"]

QWEN_CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
    "{% for c in message['content'] %}"
    "{% if c['type'] == 'video' %}<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif c['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif c['type'] == 'text' %}{{ c['text'] }}{% endif %}{% endfor %}{% endif %}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
LLAVA_CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
    "{% for c in message['content'] %}"
    "{% if c['type'] == 'video' %}<video>\n"
    "{% elif c['type'] == 'image' %}<image>\n"
    "{% elif c['type'] == 'text' %}{{ c['text'] }}{% endif %}{% endfor %}{% endif %}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

_CORPUS = [
    "a red circle moves from left to right on a plain background",
    "the blue square stays still while a green triangle bounces",
    "describe this video in detail please what happens in the video",
    "subtitles say hello world the number seven appears on screen",
    "user assistant system you are a helpful assistant",
] * 4


def build_tokenizer(specials: list[str], vocab_size: int = 400):
    """A byte-level BPE tokenizer trained offline on a tiny corpus.

    Args:
        specials: special tokens added first (ids 0..len-1 after the byte alphabet).
        vocab_size: target vocabulary size.

    Returns:
        A ``transformers.PreTrainedTokenizerFast`` with ``eos_token`` = ``<|im_end|>``
        and ``pad_token`` = ``<|endoftext|>``.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
    )
    tok.train_from_iterator(_CORPUS, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
        additional_special_tokens=specials,
    )


def _scale_init(model: torch.nn.Module, std: float, seed: int) -> None:
    """Re-initialise weights with N(0, std) so greedy decoding is varied."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim >= 2:
                p.copy_(torch.randn(p.shape, generator=g) * std)
            elif "norm" in name or "ln" in name:
                p.fill_(1.0)
            else:
                p.zero_()


def tiny_qwen2_5_vl(seed: int = 0, hidden: int = 64, layers: int = 2, vocab_size: int = 400, std: float = 0.15,
                    pad_vocab_to: int = 8):
    """A tiny Qwen2.5-VL model and its processor, fp32, eval mode.

    Args:
        seed: weight seed (the tokenizer is deterministic).
        hidden: text hidden size (head_dim = hidden / 4).
        layers: text decoder layers.
        vocab_size: tokenizer vocabulary size.
        std: weight init scale.
        pad_vocab_to: the LM head is padded to a multiple of this (like 151,936 vs 152,064).

    Returns:
        (model, processor): ``Qwen2_5_VLForConditionalGeneration``, ``Qwen2_5_VLProcessor``.
        Frames of 56x56 px give 2x2 = 4 video tokens per 2-frame group.
    """
    from transformers import (Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration,
                              Qwen2_5_VLProcessor, Qwen2VLImageProcessor, Qwen2VLVideoProcessor)

    tok = build_tokenizer(QWEN_SPECIALS, vocab_size)
    ids = {t: tok.convert_tokens_to_ids(t) for t in QWEN_SPECIALS}
    head_dim = hidden // 4
    q = head_dim // 2
    section = [q - 2 * (q // 4), q // 4, q // 4]
    config = Qwen2_5_VLConfig(
        text_config=dict(
            vocab_size=len(tok) + (-len(tok)) % pad_vocab_to, hidden_size=hidden, intermediate_size=hidden * 2,
            num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": section},
            max_position_embeddings=32768, tie_word_embeddings=False,
            bos_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|im_end|>"], pad_token_id=ids["<|endoftext|>"],
        ),
        vision_config=dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, patch_size=14,
                           spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=hidden,
                           fullatt_block_indexes=[1], window_size=56, tokens_per_second=2),
        image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    model = Qwen2_5_VLForConditionalGeneration(config).eval()
    _scale_init(model, std, seed)
    model.generation_config.eos_token_id = ids["<|im_end|>"]
    model.generation_config.pad_token_id = ids["<|endoftext|>"]
    pix = dict(min_pixels=28 * 28, max_pixels=448 * 448)
    processor = Qwen2_5_VLProcessor(
        image_processor=Qwen2VLImageProcessor(**pix),
        video_processor=Qwen2VLVideoProcessor(**pix, size={"shortest_edge": 28 * 28, "longest_edge": 448 * 448}),
        tokenizer=tok, chat_template=QWEN_CHAT_TEMPLATE,
    )
    return model, processor


def tiny_llava_onevision(seed: int = 0, hidden: int = 64, layers: int = 2, vocab_size: int = 400,
                         image_size: int = 28, patch: int = 7, std: float = 0.25):
    """A tiny LLaVA-OneVision model (SigLIP vision + Qwen2 text) and its processor.

    Args:
        seed: weight seed.
        hidden: text hidden size.
        layers: text decoder layers.
        vocab_size: tokenizer vocabulary size.
        image_size: vision input side (px); frames are resized to it.
        patch: vision patch size (px). Tokens per frame = ceil(image_size/patch/2)^2, plus one
            newline token after the last frame.
        std: weight init scale.

    Returns:
        (model, processor): ``LlavaOnevisionForConditionalGeneration``, ``LlavaOnevisionProcessor``.
    """
    from transformers import (LlavaOnevisionConfig, LlavaOnevisionForConditionalGeneration,
                              LlavaOnevisionImageProcessor, LlavaOnevisionProcessor,
                              LlavaOnevisionVideoProcessor)

    tok = build_tokenizer(LLAVA_SPECIALS, vocab_size)
    ids = {t: tok.convert_tokens_to_ids(t) for t in LLAVA_SPECIALS}
    config = LlavaOnevisionConfig(
        vision_config=dict(model_type="siglip_vision_model", hidden_size=32, intermediate_size=64,
                           num_hidden_layers=2, num_attention_heads=2, image_size=image_size,
                           patch_size=patch, vision_use_head=False),
        text_config=dict(model_type="qwen2", vocab_size=len(tok) + (-len(tok)) % 8, hidden_size=hidden,
                         intermediate_size=hidden * 2, num_hidden_layers=layers, num_attention_heads=4,
                         num_key_value_heads=2, max_position_embeddings=32768, tie_word_embeddings=False,
                         eos_token_id=ids["<|im_end|>"], pad_token_id=ids["<|endoftext|>"]),
        image_token_id=ids["<image>"], video_token_id=ids["<video>"],
        vision_feature_select_strategy="full", vision_feature_layer=-1, tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    model = LlavaOnevisionForConditionalGeneration(config).eval()
    _scale_init(model, std, seed)
    model.generation_config.eos_token_id = ids["<|im_end|>"]
    model.generation_config.pad_token_id = ids["<|endoftext|>"]
    size = {"height": image_size, "width": image_size}
    processor = LlavaOnevisionProcessor(
        image_processor=LlavaOnevisionImageProcessor(size=size, crop_size=size),
        video_processor=LlavaOnevisionVideoProcessor(size=size),
        tokenizer=tok, num_image_tokens=(image_size // patch) ** 2,
        vision_feature_select_strategy="full", chat_template=LLAVA_CHAT_TEMPLATE,
    )
    return model, processor


SMOLVLM_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<end_of_utterance>",
                    "<fake_token_around_image>", "<global-img>", "<image>", "<video>"]


def tiny_smolvlm(seed: int = 0, hidden: int = 64, layers: int = 2, vocab_size: int = 400, image_size: int = 512,
                 patch: int = 16, scale_factor: int = 4, std: float = 0.15, pad_vocab_to: int = 8):
    """A tiny SmolVLM2 model (SigLIP-style vision + Llama text) and its processor, fp32, eval mode.

    The vision geometry is real (SmolVLM2-256M/500M by default: 512 px frames, patch 16, pixel
    shuffle 4 -> 8 x 8 = 64 tokens per frame; SmolVLM2-2.2B: ``image_size=384, patch=14,
    scale_factor=3`` -> 81); the widths and depths are tiny. The processor is built from local
    pieces with the family's special tokens and ``<end_of_utterance>`` as EOS; it writes the
    frame-count intro in words, so the ``num2words`` package must be installed.

    Args:
        seed: weight seed (the tokenizer is deterministic).
        hidden: text hidden size (4 heads, 2 key/value heads).
        layers: text decoder layers.
        vocab_size: tokenizer vocabulary size.
        image_size: the square side (px) every frame is resized to.
        patch: vision patch size (px).
        scale_factor: pixel-shuffle factor of the connector.
        std: weight init scale.
        pad_vocab_to: the LM head is padded to a multiple of this.

    Returns:
        (model, processor): ``SmolVLMForConditionalGeneration``, ``SmolVLMProcessor``.
    """
    from transformers import (SmolVLMConfig, SmolVLMForConditionalGeneration, SmolVLMImageProcessor,
                              SmolVLMProcessor, SmolVLMVideoProcessor)
    from transformers.models.smolvlm.processing_smolvlm import DEFAULT_CHAT_TEMPLATE

    tok = build_tokenizer(SMOLVLM_SPECIALS, vocab_size)
    tok.eos_token = "<end_of_utterance>"
    ids = {t: tok.convert_tokens_to_ids(t) for t in SMOLVLM_SPECIALS}
    config = SmolVLMConfig(
        vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                           image_size=image_size, patch_size=patch),
        text_config=dict(model_type="llama", vocab_size=len(tok) + (-len(tok)) % pad_vocab_to, hidden_size=hidden,
                         intermediate_size=hidden * 2, num_hidden_layers=layers, num_attention_heads=4,
                         num_key_value_heads=2, max_position_embeddings=8192, tie_word_embeddings=False,
                         bos_token_id=ids["<|im_start|>"], eos_token_id=ids["<end_of_utterance>"],
                         pad_token_id=ids["<|endoftext|>"]),
        image_token_id=ids["<image>"], scale_factor=scale_factor, tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    model = SmolVLMForConditionalGeneration(config).eval()
    _scale_init(model, std, seed)
    model.generation_config.eos_token_id = ids["<end_of_utterance>"]
    model.generation_config.pad_token_id = ids["<|endoftext|>"]
    side = {"longest_edge": image_size}
    processor = SmolVLMProcessor(
        image_processor=SmolVLMImageProcessor(size=side, max_image_size=side),
        video_processor=SmolVLMVideoProcessor(size=side, max_image_size=side),
        tokenizer=tok, image_seq_len=(image_size // patch // scale_factor) ** 2, chat_template=DEFAULT_CHAT_TEMPLATE,
    )
    return model, processor
