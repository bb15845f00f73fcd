"""The shipped model pairs in ``assets/`` (``model``, ``model_sparse``, ``model_large``) as the tests run them.

Model-generic steps shared by ``tests/test_bundled_model.py`` and ``tests/test_large_pair.py``: load a pair offline
on the CPU in float32, the committed clip ``assets/videos/shapes_short.mp4`` (16 frames), a greedy decode, and the
same prompt through transformers' ``model.generate()``. The fixtures over them are in ``tests/conftest.py``
(``bundled_pair``, ``bundled_clip``, ``bundled_vanilla``; a test module names its folder and budget).
"""
from __future__ import annotations

import os
from pathlib import Path

from specvlm import assets

VIDEO = assets.path("videos", "shapes_short.mp4")
PROMPT = "Describe this video in detail."


def folders(name: str) -> tuple[Path, Path]:
    """The ``target`` and ``draft`` folders of the bundled pair ``assets/<name>/``."""
    return assets.path(name, "target"), assets.path(name, "draft")


def load_bundled(name: str):
    """The pair in ``assets/<name>/`` loaded offline on the CPU in float32 (Self-SD when it has no draft folder)."""
    import torch

    from specvlm.models.loading import load_pair

    os.environ["HF_HUB_OFFLINE"] = "1"
    torch.manual_seed(0)
    target, draft = folders(name)
    return load_pair(str(target), str(draft) if (draft / "config.json").exists() else None, device="cpu",
                     dtype="float32")


def shapes_clip():
    """``assets/videos/shapes_short.mp4`` as 16 evenly spaced frames (168x168 px, 2 objects, no text)."""
    from specvlm.config import VideoConfig
    from specvlm.video import load_video

    return load_video(VIDEO, VideoConfig(num_frames=16, even_frames=True))


def greedy(pair, clip, method: str, max_new_tokens: int, *, self_sd: bool = False):
    """A greedy decode of :data:`PROMPT` with ``method`` ("vanilla", "specvlm", ...); ``self_sd`` drops the pair's
    draft (the target drafts for itself)."""
    from specvlm.config import DecodeConfig
    from specvlm.engine.prepare import prepare
    from specvlm.engine.stream import generate
    from specvlm.models.pair import pair_from_models

    p = pair_from_models(pair.target, pair.processor) if self_sd else pair
    return generate(p, prepare(p, clip, PROMPT), DecodeConfig(method=method, max_new_tokens=max_new_tokens))


def specvlm_and_model_generate(pair, clip, max_new_tokens: int) -> tuple[list[int], list[int]]:
    """Greedy SpecVLM's tokens and the target's ``model.generate()`` tokens for the same prompt.

    ``generate()`` returns the EOS token it stopped at; where the engine did not emit it, it is dropped, so both
    lists compare directly.
    """
    from specvlm.bench.hf_peers import processor_inputs
    from specvlm.config import DecodeConfig
    from specvlm.engine.prepare import prepare
    from specvlm.engine.stream import generate

    inputs = prepare(pair, clip, PROMPT)
    enc = processor_inputs(pair, clip, inputs)
    out = pair.target.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False,
                               pad_token_id=pair.processor.tokenizer.pad_token_id)
    hf = out[0, enc["input_ids"].shape[1]:].tolist()
    res = generate(pair, inputs, DecodeConfig(method="specvlm", max_new_tokens=max_new_tokens))
    eos = pair.target.generation_config.eos_token_id
    eos = set(eos if isinstance(eos, list) else [eos])
    if hf and hf[-1] in eos and (not res.token_ids or res.token_ids[-1] not in eos):
        hf = hf[:-1]
    return res.token_ids, hf


def safetensors_dtypes(folder: Path) -> set[str]:
    """The on-disk dtypes ("BF16", "F32", ...) of every tensor in ``folder``'s ``*.safetensors`` files."""
    from safetensors import safe_open

    found = set()
    for f in sorted(folder.glob("*.safetensors")):
        with safe_open(str(f), framework="pt") as st:
            found.update(str(st.get_slice(k).get_dtype()) for k in st.keys())
    return found
