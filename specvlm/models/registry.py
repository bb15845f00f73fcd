"""The adapter registry: which adapter serves which ``config.model_type`` (a static table).

Source: docs/design.md §3 (supported families).
"""
from __future__ import annotations

from typing import Any

from specvlm.models.adapter import Adapter
from specvlm.models.errors import ModelLoadError
from specvlm.models.families.llava_onevision import LlavaOnevisionAdapter
from specvlm.models.families.qwen2_5_vl import Qwen25VLAdapter
from specvlm.models.families.qwen3_vl import Qwen3VLAdapter
from specvlm.models.families.smolvlm import SmolVLMAdapter

_QWEN3_VL = Qwen3VLAdapter()
ADAPTERS: dict[str, Adapter] = {
    "llava_onevision": LlavaOnevisionAdapter(),
    "qwen2_5_vl": Qwen25VLAdapter(),
    "qwen3_vl": _QWEN3_VL,
    "qwen3_vl_moe": _QWEN3_VL,   # MoE and dense Qwen3-VL share one adapter
    "smolvlm": SmolVLMAdapter(),
}
"""``config.model_type`` -> adapter."""


def adapter_for(model: Any) -> Adapter:
    """The adapter for ``model.config.model_type``.

    Raises:
        ModelLoadError: the family is not supported.
    """
    mt = getattr(model.config, "model_type", None)
    if mt not in supported_model_types():
        raise ModelLoadError(
            f"model type {mt!r} is not supported: use a Qwen2.5-VL, Qwen3-VL, LLaVA-OneVision or SmolVLM2 checkpoint "
            f"(supported: {', '.join(supported_model_types())})."
        )
    return ADAPTERS[mt]


def supported_families() -> list[str]:
    """The supported model families as people name them (e.g. ``Qwen2.5-VL``), one per registered adapter,
    in table order (MoE and dense variants of a family count once).

    Source: the adapter table (:data:`ADAPTERS`).
    """
    return list(dict.fromkeys(getattr(a, "title", "") or a.family for a in ADAPTERS.values()))


def supported_model_types() -> list[str]:
    """The ``config.model_type`` values with an adapter, sorted."""
    return sorted(ADAPTERS)
