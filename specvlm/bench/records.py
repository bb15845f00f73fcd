"""Run records: the fields every run and every per-method summary carries, and their helpers.

One run (of our decoding or of a Hugging Face peer) is a dict with every key of
:data:`RUN_FIELDS` plus ``token_ids``; a per-method summary over rounds has the keys of
:data:`METHOD_FIELDS`. Times are in s or ms as named, throughput in tokens/s, memory in MiB.
"""
from __future__ import annotations

import contextlib
from typing import Any

from specvlm.bench.memory import MemoryProbe

RUN_FIELDS = ("status", "error", "note", "num_generated", "decode_s", "decode_tokens_per_s", "e2e_s", "prefill_s",
              "tau", "tokens_per_target_forward", "target_forwards", "draft_ms_per_step", "verify_ms_per_step",
              "num_video_tokens", "num_kept", "target_kv_tokens", "draft_kv_tokens", "target_kv_mb", "draft_kv_mb",
              "peak_memory_mb", "peak_memory_delta_mb", "identical")
INT_FIELDS = {"num_generated", "target_forwards", "num_video_tokens", "num_kept", "target_kv_tokens",
              "draft_kv_tokens"}
READ_FIELDS = ("host_reads_per_step", "host_reads_by_kind", "host_read_steps")
"""Host reads of a method (:mod:`specvlm.bench.hostreads`, one untimed run): reads per decode step (None when
not counted, the run failed or had no decode step), the same per kind (``{kind: reads per step}``), and the
decode steps counted."""
METHOD_FIELDS = ("input", "method", "label", "draft_mode", "repeats") + RUN_FIELDS + (
    "divergence", "speedup", "speedup_runs", "speedup_min", "speedup_max", "threads_per_round", "vanilla_aa",
    "verify_vs_decode_step", "text", "token_ids") + READ_FIELDS
"""Keys of every per-method record in the JSON report (None where not applicable). ``identical``,
``divergence``, ``speedup`` and ``speedup_runs`` are the comparison with vanilla in the one comparison schema
(:meth:`specvlm.analysis.run.Comparison.to_json`; ``speedup_runs``: the per-round speedups). ``text`` and
``token_ids``: the first measured round's output. ``vanilla_aa``
(vanilla's record, with ``--background-load``): per round, a second vanilla run's tokens/s over
the first's, the run-to-run noise that any single-round speedup carries on that machine."""


def kv_mb(model: Any, tokens: int) -> float:
    """KV-cache size of ``tokens`` tokens for ``model`` in MiB: 2 * layers * kv_heads * head_dim * bytes.

    Args:
        model: a transformers model whose text config has the usual attention fields.
        tokens: cached tokens.
    """
    cfg = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    heads = int(cfg.num_attention_heads)
    kv_heads = int(getattr(cfg, "num_key_value_heads", None) or heads)
    head_dim = int(getattr(cfg, "head_dim", None) or cfg.hidden_size // heads)
    nbytes = model.get_input_embeddings().weight.element_size()
    return 2 * int(cfg.num_hidden_layers) * kv_heads * head_dim * nbytes * tokens / 2**20


def empty_run(status: str = "ok") -> dict:
    """A run record with every field None (``token_ids`` empty) and the given status."""
    return {k: None for k in RUN_FIELDS} | {"status": status, "token_ids": []}


def memory_probe(pair: Any, memory: bool | float) -> MemoryProbe | contextlib.nullcontext:
    """A probe when ``memory`` is truthy (a float: the CPU base in MiB, see MemoryProbe.base_mb)."""
    if memory is False or memory is None:
        return contextlib.nullcontext()
    return MemoryProbe(pair.device, base_mb=None if memory is True else float(memory))


def memory_fields(mem: MemoryProbe | None) -> dict:
    """The peak memory fields of a run record from a finished probe (None when nothing was probed)."""
    if not isinstance(mem, MemoryProbe):
        return {"peak_memory_mb": None, "peak_memory_delta_mb": None}
    return {"peak_memory_mb": mem.peak_mb, "peak_memory_delta_mb": mem.delta_mb}


def by_size(curve: dict) -> dict[int, float]:
    """A step-cost curve keyed by verify size: int keys (the JSON stores them as strings)."""
    return {int(k): v for k, v in curve.items()}


def row_divergence(row: dict) -> dict | None:
    """A result row's divergence from vanilla in the comparison schema (``index``, ``kind``, ``margin``, ...), or
    None when identical or unknown; reports written with flat keys (``first_divergence``, ``divergence_margin``,
    ``divergence_kind``) are read too, a difference without a kind counting as a mismatch."""
    if row.get("divergence") is not None:
        return row["divergence"]
    if row.get("identical") is None or row["identical"]:
        return None
    return {"index": row.get("first_divergence"), "kind": row.get("divergence_kind") or "mismatch",
            "margin": row.get("divergence_margin")}


def row_speedup_runs(row: dict) -> list[float]:
    """A result row's (or sweep point's) per-round speedups; reports that named them ``speedups`` are read too."""
    return list(row.get("speedup_runs") or row.get("speedups") or [])
