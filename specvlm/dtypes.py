"""Model dtypes by name, and how close a greedy tie may be per dtype (one home for both).

Source: docs/design.md §4.11 (near-tie margins at a divergence).
"""
from __future__ import annotations

from specvlm.config import ConfigError

NEAR_TIE_MARGIN: dict[str, float] = {"float32": 1e-3, "float16": 0.125, "bfloat16": 0.5}
"""Largest target top-1 minus top-2 logit margin (logit units) at which greedy speculative output may
legitimately differ from vanilla output, per model dtype; see :func:`specvlm.analysis.metrics.compare_outputs`
for how the numbers were chosen."""


DTYPES = ("float32", "bfloat16", "float16")
"""Model dtypes the library runs, by name. Without a choice a model loads in float32 on a CPU and in bfloat16 on
CUDA (float16 on GPUs without native bfloat16): :func:`specvlm.models.loading.load_pair`."""
_DTYPE_ALIASES = {"fp32": "float32", "float": "float32", "bf16": "bfloat16", "fp16": "float16", "half": "float16"}


def dtype_name(dtype: object) -> str:
    """The name in :data:`DTYPES` of a torch dtype (``torch.bfloat16``) or of a name or alias (``"bf16"``).

    Raises:
        ConfigError: any other dtype.
    """
    name = str(dtype).removeprefix("torch.")
    name = _DTYPE_ALIASES.get(name, name)
    if name not in DTYPES:
        raise ConfigError(f"dtype {dtype!r} is unknown: use {', '.join(DTYPES)}.")
    return name
