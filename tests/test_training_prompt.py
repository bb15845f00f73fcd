"""The library writes the bundled pairs' prompts exactly as their weights were trained on
(training/prompt_format.py): a change to specvlm/text/prompting.py or to the bundled chat template fails here."""
from __future__ import annotations

import re

import numpy as np
import pytest

from specvlm import assets
from specvlm.engine.prepare import prepare
from specvlm.models.loading import load_pair
from specvlm.text import prompting
from specvlm.text.subtitles import Cue
from specvlm.types import VideoClip
from training.build_bundled_processor import CHAT_TEMPLATE
from training.prompt_format import TRAINED_PROMPTS, PromptExample

BUNDLED = ("model", "model_sparse", "model_large")


@pytest.fixture(scope="module", params=BUNDLED)
def pair(request):
    return load_pair(str(assets.path(request.param, "target")), None, device="cpu", dtype="float32")


def library_prompt(pair, example: PromptExample) -> str:
    """The prompt the engine feeds the target for ``example``, each run of video tokens written once."""
    n = example.num_frames
    clip = VideoClip(frames=np.zeros((n, 56, 56, 3), np.uint8), timestamps=np.arange(n) / example.fps)
    inputs = prepare(pair, clip, example.prompt, subtitles=[Cue(*c) for c in example.cues] or None)
    text = pair.processor.tokenizer.decode(inputs.input_ids[0].tolist())
    return re.sub(r"(<\|video_pad\|>)+", "<|video_pad|>", text)


@pytest.mark.parametrize("example", TRAINED_PROMPTS, ids=["plain", "fact", "two-cues"])
def test_the_library_writes_the_trained_prompt(pair, example):
    assert library_prompt(pair, example) == example.text


def test_a_changed_transcript_header_is_caught(pair, monkeypatch):
    monkeypatch.setattr(prompting, "HEADER", "Transcript:")
    example = TRAINED_PROMPTS[1]
    assert library_prompt(pair, example) == example.text.replace("Subtitles:", "Transcript:")


@pytest.mark.parametrize("name", BUNDLED)
def test_the_bundled_chat_template_is_the_trained_one(name):
    assert assets.path(name, "target", "chat_template.jinja").read_text() == CHAT_TEMPLATE
    assert assets.path(name, "draft", "chat_template.jinja").read_text() == CHAT_TEMPLATE
