#!/usr/bin/env python
"""Build the bundled model's tokenizer + Qwen2.5-VL processor offline.

Trains a small byte-level BPE tokenizer (``tokenizers``) on the synthetic
caption/question grammar (``specvlm.bench.synth``), adds the Qwen2.5-VL special
tokens and a Qwen-style chat template, and saves it together with a
``Qwen2VLImageProcessor`` and a ``Qwen2VLVideoProcessor`` as a
``Qwen2_5_VLProcessor``, so ``AutoProcessor.from_pretrained(folder)`` works
with no network. Pixel limits keep small frames at their size (no upscaling):
56x56 <= H*W <= 448x448 px, sides rounded to multiples of 28.

Usage:
    python -m training.build_bundled_processor --out runs/processor

Source: Qwen2.5-VL special tokens and chat layout from
the Qwen2.5-VL-7B-Instruct tokenizer_config.json.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from specvlm.bench import captions
from specvlm.bench import synth

SPECIAL_TOKENS = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
    "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
    "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>",
]
MIN_PIXELS = 56 * 56
MAX_PIXELS = 448 * 448
VOCAB_SIZE = 640

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif content['type'] == 'video' or 'video' in content %}"
    "<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif 'text' in content %}{{ content['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
"""Qwen2-VL chat layout without the default system message (saves tokens)."""


def _corpus(n_scenes: int = 4000, seed: int = 10_000_000) -> list[str]:
    """Grammar sentences for BPE training (seeds far from the training range).

    Every other scene gets a subtitle track (:func:`training.scenes.with_subtitles`) whose
    transcript lines (:func:`specvlm.text.prompting.subtitle_block`, as the app writes them) join the corpus,
    and a flashing object every fifth, so fact values, names and cue words get their own tokens.
    """
    from training import scenes
    from specvlm.text.prompting import subtitle_block

    rng = np.random.default_rng(seed)
    lines = list(captions.DESCRIBE_PROMPTS) + ["user", "assistant", "system", "You are a helpful assistant."]
    lines += [w.lower() for w in synth.WORDS] + list(synth.WORDS) + [str(i) for i in range(100)]
    lines += list(captions.FACT_QUESTIONS.values()) + list(scenes.FILLERS)
    for i in range(n_scenes):
        nobj = 1 + i % 3
        spec = synth.SceneSpec(num_frames=8, height=56, width=56, num_objects=nobj, text_prob=0.5)
        _, truth = synth.generate(seed + i, spec)
        if i % 5 == 4:
            _, truth = scenes.sparse_scene(seed + i, scenes.SparseSpec(num_frames=8, height=56, width=56))
        if i % 2:
            truth = scenes.with_subtitles(truth, seed + i)
            lines.append(subtitle_block(list(truth.cues), np.arange(truth.num_frames) / truth.fps, 2))
        lines.append(captions.describe(truth))
        lines += [q + " " + a for q, a in captions.questions(truth, rng)]
    return lines


def build_tokenizer(vocab_size: int = VOCAB_SIZE, n_scenes: int = 4000):
    """Train the byte-level BPE tokenizer; returns a ``PreTrainedTokenizerFast``.

    Args:
        vocab_size: BPE vocabulary cap (the grammar saturates it at ~500).
        n_scenes: scenes whose captions/questions form the training corpus.

    eos = ``<|im_end|>``, pad = ``<|endoftext|>`` (as in Qwen2.5-VL-Instruct).
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, min_frequency=2,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
    )
    tok.train_from_iterator(_corpus(n_scenes), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
        unk_token=None, bos_token=None, padding_side="right",
        model_max_length=32768, clean_up_tokenization_spaces=False,
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build_processor(out_dir: str | Path | None = None, n_scenes: int = 4000):
    """Build (and optionally save) the ``Qwen2_5_VLProcessor`` for the bundled models.

    Args:
        out_dir: folder to ``save_pretrained`` into, or None.
        n_scenes: tokenizer corpus size (see :func:`build_tokenizer`).

    Returns:
        transformers ``Qwen2_5_VLProcessor``.
    """
    from transformers import Qwen2_5_VLProcessor, Qwen2VLImageProcessor, Qwen2VLVideoProcessor

    tokenizer = build_tokenizer(n_scenes=n_scenes)
    size = {"shortest_edge": MIN_PIXELS, "longest_edge": MAX_PIXELS}
    image_processor = Qwen2VLImageProcessor(size=size)
    video_processor = Qwen2VLVideoProcessor(size=size, do_sample_frames=False, cap_pixels_per_frame=False)
    proc = Qwen2_5_VLProcessor(
        image_processor=image_processor, tokenizer=tokenizer,
        video_processor=video_processor, chat_template=CHAT_TEMPLATE,
    )
    if out_dir is not None:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        proc.save_pretrained(str(out_dir))
    return proc


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="runs/processor", help="output folder (default: runs/processor)")
    args = ap.parse_args()
    proc = build_processor(args.out)
    print(f"saved processor to {args.out}: vocab {len(proc.tokenizer)}")


if __name__ == "__main__":
    main()
