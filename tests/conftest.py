"""Shared fixtures: tiny models of both families built in-process (no downloads), and the shipped pairs of
``assets/`` (a test module that uses ``bundled_*`` names its folder in ``BUNDLED`` and its budget in ``MAX_NEW``)."""
from __future__ import annotations

import os
import tempfile

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")  # tiny models: one thread is fastest and never oversubscribes
# uploads in this run's own folder: Gradio files identical uploads (the example clips) under one path in the shared
# temp folder, which another server on the machine deletes when its request ends
os.environ.setdefault("GRADIO_TEMP_DIR", tempfile.mkdtemp(prefix="specvlm-tests-gradio-"))

import torch  # noqa: E402

torch.set_num_threads(1)


@pytest.fixture(scope="session")
def qwen_tiny():
    from specvlm.testing.tiny import tiny_qwen2_5_vl
    return tiny_qwen2_5_vl(seed=0)


@pytest.fixture(scope="session")
def qwen_tiny_draft():
    """A 1-layer Qwen2.5-VL draft with the same tokenizer and a differently padded vocab."""
    from specvlm.testing.tiny import tiny_qwen2_5_vl
    return tiny_qwen2_5_vl(seed=1, hidden=32, layers=1, pad_vocab_to=64)


@pytest.fixture(scope="session")
def llava_tiny():
    from specvlm.testing.tiny import tiny_llava_onevision
    return tiny_llava_onevision(seed=0)


@pytest.fixture(scope="session")
def llava_tiny_draft():
    from specvlm.testing.tiny import tiny_llava_onevision
    return tiny_llava_onevision(seed=1, hidden=32, layers=1)


@pytest.fixture(scope="session")
def pairs(qwen_tiny, qwen_tiny_draft, llava_tiny, llava_tiny_draft):
    """ModelPairs keyed (family, "self" | "std"): Self-SD and Std-SD for both families."""
    from specvlm.models.pair import pair_from_models

    return {
        ("qwen", "self"): pair_from_models(*qwen_tiny),
        ("qwen", "std"): pair_from_models(qwen_tiny[0], qwen_tiny[1], qwen_tiny_draft[0], qwen_tiny_draft[1]),
        ("llava", "self"): pair_from_models(*llava_tiny),
        ("llava", "std"): pair_from_models(llava_tiny[0], llava_tiny[1], llava_tiny_draft[0], llava_tiny_draft[1]),
    }


@pytest.fixture(autouse=True)
def _no_thread_policy():
    """Tests that run the CLI in-process install the automatic thread policy; it must not follow
    into later tests (it would change torch's threads whenever other processes are busy)."""
    from specvlm.runtime import threads

    yield
    threads._POLICY = None


@pytest.fixture(scope="module")
def bundled_pair(request):
    """The pair in ``assets/<BUNDLED>/`` of the requesting module, loaded offline on the CPU in float32
    (:func:`helpers.bundled.load_bundled`)."""
    from helpers.bundled import load_bundled
    return load_bundled(request.module.BUNDLED)


@pytest.fixture(scope="session")
def bundled_clip():
    """``assets/videos/shapes_short.mp4`` as 16 frames (:func:`helpers.bundled.shapes_clip`)."""
    from helpers.bundled import shapes_clip
    return shapes_clip()


@pytest.fixture(scope="module")
def bundled_vanilla(request, bundled_pair, bundled_clip):
    """The bundled pair's greedy vanilla decode of the clip, ``MAX_NEW`` tokens at most (the module's budget)."""
    from helpers.bundled import greedy
    return greedy(bundled_pair, bundled_clip, "vanilla", request.module.MAX_NEW)
