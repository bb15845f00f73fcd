"""Runners: one run of a method on one input, as a run record (:mod:`specvlm.bench.records`).

Our methods (vanilla and the speculative ones, Std-SD or Self-SD) run through
:func:`specvlm.engine.stream.generate` on inputs prepared once per input (the processor is not timed);
Hugging Face peers run in :mod:`specvlm.bench.hf_peers`. A failing run becomes a record with
``status="error"``: the benchmark goes on.

Decode time starts when the first token is emitted (after prefill, scoring, pruning and draft
prefill) and ends at the last token; decode tokens/s = tokens emitted after the first emission /
decode time.

Source: SpecVLM (arXiv 2508.16201) Sec. 4 (τ, decode speedup on the same input).
"""
from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

import torch

from specvlm.bench.hf_peers import processor_inputs, run_hf
from specvlm.bench.records import empty_run, kv_mb, memory_fields, memory_probe
from specvlm.bench.settings import LABELS, PEERS, SELF, BenchInput, BenchSettings, base_method
from specvlm.config import DecodeConfig, vanilla_config

log = logging.getLogger(__name__)


def method_label(method: str, pair: Any) -> tuple[str, str | None]:
    """(display label, draft mode ``Std-SD`` / ``Self-SD`` or None) for a method on this pair."""
    label = LABELS.get(base_method(method), base_method(method))
    if method in ("vanilla", "hf", "prompt-lookup"):
        return label, None
    mode = "Self-SD" if method.endswith(SELF) or pair.self_sd else "Std-SD"
    return f"{label} ({mode})", mode


def self_sd_pair(pair: Any) -> Any:
    """The same target drafting for itself (weights shared, no copy)."""
    from specvlm.models.pair import pair_from_models

    if pair.self_sd:
        return pair
    return pair_from_models(pair.target, pair.processor, name=f"{pair.name} (Self-SD)")


def method_config(config: DecodeConfig, method: str) -> DecodeConfig:
    """``config`` for one of our methods: vanilla (:func:`specvlm.config.vanilla_config`), or a speculative
    method with ``config``'s settings.

    Source: docs/design.md §4.13 (the honest baseline).
    """
    base = base_method(method)
    return vanilla_config(config) if base == "vanilla" else replace(config, method=base)


def run_ours(pair: Any, method: str, inputs: Any, config: DecodeConfig, memory: bool | float = False) -> dict:
    """One run of vanilla or a speculative method through :func:`specvlm.engine.stream.generate`.

    Args:
        pair: the ModelPair (a ``:self`` method uses :func:`self_sd_pair`).
        method: ``vanilla``, a pruning method, or one with the ``:self`` suffix.
        inputs: ModelInputs prepared once per input (the processor is not timed).
        config: decoding settings; ``method`` is replaced.
        memory: measure peak memory (:class:`specvlm.bench.memory.MemoryProbe`; on a CPU it runs the
            torch profiler, which slows the run: use it in an untimed round); a float is also the
            CPU base in MiB that the peak is stated over. False: the memory fields are None.

    Returns:
        dict with every key of :data:`RUN_FIELDS` plus ``token_ids`` and ``margins`` (vanilla: the target's
        top-1 minus top-2 logit margin per generated token; times in s and ms as named).
    """
    from specvlm.engine.stream import generate

    run_pair = self_sd_pair(pair) if method.endswith(SELF) else pair
    cfg = method_config(config, method)
    with memory_probe(pair, memory) as mem:
        res = generate(run_pair, inputs, cfg)
    info, n = res.prefill, len(res.token_ids)
    steps = len(res.accept_lengths) if cfg.speculative else max(len(res.steps) - 1, 0)
    d_len = info.num_draft_prompt_tokens if cfg.speculative else None
    out = empty_run()
    out.update(
        token_ids=res.token_ids, margins=res.margins, num_generated=n, decode_s=res.decode_s, text=res.text,
        decode_tokens_per_s=res.tokens_per_s or None,
        e2e_s=res.total_s, prefill_s=info.prefill_s + info.prune_s + info.draft_prefill_s,
        tau=res.tau if cfg.speculative else None, tokens_per_target_forward=res.tokens_per_target_forward,
        target_forwards=steps, num_video_tokens=info.num_video_tokens, num_kept=res.num_kept,
        draft_ms_per_step=res.draft_s * 1e3 / steps if steps and cfg.speculative else None,
        verify_ms_per_step=res.verify_s * 1e3 / steps if steps else None,
        target_kv_tokens=info.num_prompt_tokens, draft_kv_tokens=d_len,
        target_kv_mb=kv_mb(pair.target, info.num_prompt_tokens + n),
        draft_kv_mb=kv_mb(run_pair.draft, d_len + n) if d_len is not None else None,
        **memory_fields(mem),
    )
    out["torch_threads"] = torch.get_num_threads()   # what this run used (specvlm.runtime.threads.adapt)
    return out


def run_method(pair: Any, method: str, inp: BenchInput, inputs: Any, settings: BenchSettings,
               enc: dict | Exception | None = None, memory: bool | float = False) -> dict:
    """One run of any method on one input; exceptions become ``status="error"`` records.

    Args:
        inputs: the adapter's ModelInputs for ``inp`` (our methods).
        enc: the processor output for HF peers (computed here when None).
        memory: measure peak memory in this run (untimed rounds only: see :func:`run_ours`).
    """
    if method in PEERS:
        if enc is None:
            enc = hf_inputs(pair, inp, inputs)
        return run_hf(pair, method, enc, settings.config, settings, memory=memory)
    try:
        return run_ours(pair, method, inputs, settings.config, memory=memory)
    except Exception as exc:  # noqa: BLE001 - reported in the table, the benchmark goes on
        log.exception("%s failed on %s", method, inp.name)
        return empty_run("error") | {"error": f"{exc.__class__.__name__}: {str(exc)[:300]}"}


def hf_inputs(pair: Any, inp: BenchInput, inputs: Any) -> dict | Exception:
    """The processor output for the HF peers on ``inp``, or the exception that building it raised
    (every peer run then reports it)."""
    try:
        return processor_inputs(pair, inp.clip, inputs)
    except Exception as exc:  # noqa: BLE001 - every peer run reports it
        return exc
