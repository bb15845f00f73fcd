"""SpecVLM Studio: lossless speculative decoding for video LLMs.

Main API::

    from specvlm import load_pair, load_video, stream, generate, DecodeConfig
    pair = load_pair("Qwen/Qwen2.5-VL-7B-Instruct")          # Self-SD
    clip = load_video("clip.mp4")
    for event in stream(pair, clip, "Describe this video.", DecodeConfig()):
        ...

Source: SpecVLM (Ji et al., EMNLP 2025, arXiv 2508.16201).
"""
from __future__ import annotations

import os as _os

from specvlm.config import DecodeConfig, PruneConfig, TreeConfig, VideoConfig, ConfigError
from specvlm.threads import omp_env_defaults as _omp_env_defaults

# OpenMP reads its wait policy once, when torch loads it: bound the idle spin first
# (a no-op when torch is already imported or the user set it; specvlm.threads).
_os.environ.update(_omp_env_defaults())

__all__ = ["DecodeConfig", "PruneConfig", "TreeConfig", "VideoConfig", "ConfigError",
           "load_pair", "load_video", "stream", "generate"]


def __getattr__(name: str):
    # Lazy imports keep `import specvlm` light (no transformers at import time).
    if name in ("stream", "generate"):
        from specvlm import decoding
        return getattr(decoding, name)
    if name == "load_pair":
        from specvlm.models import load_pair
        return load_pair
    if name == "load_video":
        from specvlm.video import load_video
        return load_video
    raise AttributeError(name)
