"""Small randomly initialised models for tests, scripts and the benchmark (not used by the runtime).

* :mod:`~specvlm.testing.tiny`: tiny Qwen2.5-VL, LLaVA-OneVision and SmolVLM2 pairs.
* :mod:`~specvlm.testing.tiny_qwen3_vl`: a tiny Qwen3-VL pair.
* :mod:`~specvlm.testing.realdims`: models with the real models' layer shapes and few layers.
"""
