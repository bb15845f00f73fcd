"""One adapter per supported model family (Qwen2.5-VL, Qwen3-VL, LLaVA-OneVision, SmolVLM2)."""
