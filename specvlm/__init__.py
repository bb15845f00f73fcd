"""SpecVLM Studio: lossless speculative decoding for video LLMs.

Main API::

    from specvlm import load_pair, load_video, prepare, stream, generate, DecodeConfig
    pair = load_pair("Qwen/Qwen2.5-VL-7B-Instruct")          # Self-SD
    inputs = prepare(pair, load_video("clip.mp4"), "Describe this video.")
    for event in stream(pair, inputs, DecodeConfig()):
        ...
    result = generate(pair, inputs, DecodeConfig(method="vanilla"))   # same inputs, another method

Source: SpecVLM (Ji et al., EMNLP 2025, arXiv 2508.16201).
"""
from __future__ import annotations

import os as _os

from specvlm.config import DecodeConfig, PruneConfig, ReselectConfig, TreeConfig, VideoConfig, ConfigError
from specvlm.runtime.threads import omp_env_defaults as _omp_env_defaults

# OpenMP reads its wait policy once, when torch loads it: bound the idle spin first
# (a no-op when torch is already imported or the user set it; specvlm.runtime.threads).
_os.environ.update(_omp_env_defaults())

__all__ = ["DecodeConfig", "PruneConfig", "ReselectConfig", "TreeConfig", "VideoConfig", "ConfigError",
           "load_pair", "load_video", "prepare", "stream", "generate"]


def __getattr__(name: str):
    # Lazy imports keep `import specvlm` light (no transformers at import time).
    if name == "stream":
        from specvlm.engine.stream import stream
        return stream
    if name == "generate":
        from specvlm.engine.stream import generate
        return generate
    if name == "prepare":
        from specvlm.engine.prepare import prepare
        return prepare
    if name == "load_pair":
        from specvlm.models.loading import load_pair
        return load_pair
    if name == "load_video":
        from specvlm.video import load_video
        return load_video
    raise AttributeError(name)
