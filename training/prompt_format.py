"""The prompt format the bundled pairs were trained with, frozen.

The bundled weights (``assets/model/``, ``assets/model_sparse/``) learnt one exact layout of the user turn: the
chat template of :mod:`training.build_bundled_processor`, the video, then the subtitle transcript block of
:mod:`specvlm.text.prompting` (``Subtitles:`` and one ``[t=start-ends] text`` line per 2-frame token group
with a cue), then the question. Training builds its prompts with the library's own functions, so what the app
sends is what the weights saw; the examples below are copies of that layout, and ``tests/test_training_prompt.py``
fails when the library writes anything else for the bundled model. A deliberate change to the prompt format
updates these examples and retrains the bundled pairs (training/README.md).

Source: training/data.py (``conversation``, ``make_batch``); specvlm/models/adapter.py (``message_for``).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PromptExample:
    """One prompt as the bundled target saw it.

    Attributes:
        prompt: the user's question.
        cues: subtitle cues as (start s, end s, text).
        num_frames: frames of the clip (2 per video token group).
        fps: the clip's frame rate (frames per second); frame i is at i / fps s.
        text: the templated prompt with the generation prompt, every run of ``<|video_pad|>`` as one.
    """

    prompt: str
    cues: tuple[tuple[float, float, str], ...]
    num_frames: int
    fps: float
    text: str


TRAINED_PROMPTS: tuple[PromptExample, ...] = (
    PromptExample(
        "Describe this video in detail.", (), 8, 4.0,
        "<|im_start|>user\n<|vision_start|><|video_pad|><|vision_end|>Describe this video in detail.<|im_end|>\n"
        "<|im_start|>assistant\n"),
    PromptExample(
        "What is the code?", ((0.0, 1.0, "The code is 42."), (1.0, 2.0, "The code is 42.")), 8, 4.0,
        "<|im_start|>user\n<|vision_start|><|video_pad|><|vision_end|>Subtitles:\n[t=0.0-1.5s] The code is 42.\n"
        "What is the code?<|im_end|>\n<|im_start|>assistant\n"),
    PromptExample(
        "  What colour is the flag?", ((0.0, 0.4, "Hello there."), (1.0, 1.6, "The flag is blue.")), 8, 4.0,
        "<|im_start|>user\n<|vision_start|><|video_pad|><|vision_end|>Subtitles:\n[t=0.0s] Hello there.\n"
        "[t=1.0-1.5s] The flag is blue.\nWhat colour is the flag?<|im_end|>\n<|im_start|>assistant\n"),
)
"""The frozen examples: no transcript, one fact over two token groups, two cues and a question with leading
spaces."""
