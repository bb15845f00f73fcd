"""What ``scripts/gpu_check.py`` measures: decode runs per variant, and isolated step costs.

* :func:`decode_runs`: the engine's vanilla decoding and SpecVLM on the same clips through
  :func:`specvlm.engine.stream.generate`, SpecVLM plain or with re-selection (a variant): identity (identical,
  near-tie or mismatch with the target's logit margin), prefill times, and the runs' median decode, draft and
  verify step times; an untimed short warm-up pair of runs first, whose wall time holds any graph capture or
  compilation the engine does (``warmup_s``).
* :func:`verify_curve` and :func:`draft_level_ms`: one target forward over 1..n tree tokens and one draft tree
  level in isolation, through the eager forward (:func:`specvlm.engine.forward.lm_forward`).

Source: docs/design.md §4.9 (verify mask), §4.12 (τ, decode time), §11 (the GPU fast path).
"""
from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import replace
from typing import Any

import numpy as np
import torch

from specvlm.analysis.metrics import compare_outputs
from specvlm.bench.stepcost import median_ms
from specvlm.config import DecodeConfig, ReselectConfig
from specvlm.engine import kv
from specvlm.bench.stepcost import additive_mask, verify_mask
from specvlm.engine.forward import embed_tokens, lm_forward
from specvlm.engine.stream import generate
from specvlm.models.registry import adapter_for
from specvlm.types import VideoClip

PROMPT = "Describe this video in detail."
VERIFY_SIZES = (1, 2, 4, 8, 16, 17, 24, 32)
"""Tree tokens n of the isolated verify(n) curve (17 = the default dynamic tree's 16 nodes + root)."""


def median(xs: list[float]) -> float:
    """The median, 0.0 for an empty list."""
    return statistics.median(xs) if xs else 0.0


def make_clip(frames: int, side: int, seed: int) -> VideoClip:
    """A clip of smooth random frames: uint8 (T, side, side, 3), 2 fps."""
    rng = np.random.RandomState(seed)
    base = rng.randint(0, 255, (frames, 8, 8, 3)).astype(np.uint8)
    img = np.repeat(np.repeat(base, -(-side // 8), axis=1), -(-side // 8), axis=2)[:, :side, :side]
    return VideoClip(np.ascontiguousarray(img), np.arange(frames) / 2.0, native_fps=2.0, total_frames=frames,
                     duration=frames / 2.0)


def compare(vanilla: Any, spec: Any, dtype: torch.dtype) -> dict:
    """identical / near-tie / mismatch (:func:`specvlm.analysis.metrics.compare_outputs`) with the target's
    top-1 minus top-2 logit margin at the first divergence, as vanilla decoding recorded it."""
    d = compare_outputs(vanilla.token_ids, spec.token_ids, vanilla.margins, dtype)
    return {"kind": d.kind, "index": d.index, "margin": d.margin}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def prepare_clips(pair: Any, frames: int, side: int, clips: int) -> list[Any]:
    """ModelInputs of ``clips`` random clips of ``frames`` frames of ``side`` px (prepared once, decoded by
    every variant)."""
    return [pair.adapter.prepare(pair.processor, pair.target, make_clip(frames, side, c), PROMPT) for c in range(clips)]


def decode_runs(pair: Any, clips: list[Any], args: argparse.Namespace, dtype: torch.dtype, variant: str) -> dict:
    """Vanilla and SpecVLM on prepared clips, SpecVLM as ``variant`` says: comparisons and the runs' step times.

    Args:
        pair: the ModelPair.
        clips: ModelInputs (:func:`prepare_clips`).
        args: ``new_tokens`` (fixed length), ``warmup_tokens`` (the untimed first pair of runs).
        dtype: the target's dtype (near-tie threshold).
        variant: ``plain`` (the paper's SpecVLM) or ``reselect`` (with re-selection between steps).

    Returns:
        {runs: [comparison per clip], warmup_s, prefill_vanilla_s, prefill_specvlm_s, prune_s, draft_prefill_s,
        decode_ms, draft_step_ms, verify_step_ms, tau_random_weights (lists), L, L_draft, video_tokens, rows}.
    """
    cfg_v = DecodeConfig(method="vanilla", max_new_tokens=args.new_tokens, stop_at_eos=False)
    cfg_s = DecodeConfig(method="specvlm", max_new_tokens=args.new_tokens, stop_at_eos=False,
                         reselect=ReselectConfig(enabled=variant == "reselect"))
    out: dict[str, Any] = {"runs": [], "prefill_vanilla_s": [], "prefill_specvlm_s": [], "prune_s": [],
                           "draft_prefill_s": [], "decode_ms": [], "draft_step_ms": [], "verify_step_ms": [],
                           "tau_random_weights": []}
    t0 = time.perf_counter()
    for cfg in (cfg_v, cfg_s):   # untimed: holds the engine's graph capture, if any
        generate(pair, clips[0], replace(cfg, max_new_tokens=args.warmup_tokens))
    _sync(pair.device)
    out["warmup_s"] = time.perf_counter() - t0
    for inputs in clips:
        van, spec = generate(pair, inputs, cfg_v), generate(pair, inputs, cfg_s)
        out["runs"].append(compare(van, spec, dtype))
        out["prefill_vanilla_s"].append(van.prefill.prefill_s)
        out["prefill_specvlm_s"].append(spec.prefill.prefill_s)
        out["prune_s"].append(spec.prefill.prune_s)
        out["draft_prefill_s"].append(spec.prefill.draft_prefill_s)
        out["decode_ms"] += [s.verify_ms for s in van.steps[1:]]
        out["draft_step_ms"] += [s.draft_ms for s in spec.steps[1:]]
        out["verify_step_ms"] += [s.verify_ms for s in spec.steps[1:]]
        out["tau_random_weights"].append(spec.tau)
        out.update(L=van.prefill.num_prompt_tokens, L_draft=spec.prefill.num_draft_prompt_tokens,
                   video_tokens=van.prefill.num_video_tokens, rows=int(inputs.positions.shape[0]))
    return out


def random_cache(model: Any, length: int, rows: int, chunk: int = 4096) -> tuple[Any, Any]:
    """A KV cache of ``length`` random-token positions (``rows`` position rows: 3 for M-RoPE), chunked prefill."""
    ad = adapter_for(model)
    cache = kv.new_cache(model)
    g = torch.Generator().manual_seed(0)
    vocab = model.get_input_embeddings().weight.shape[0]
    for s in range(0, length, chunk):
        n = min(chunk, length - s)
        ids = torch.randint(0, vocab, (n,), generator=g)
        lm_forward(model, ad, embed_tokens(model, ids), torch.arange(s, s + n).expand(rows, n), cache, rows=None)
    return cache, ad


def draft_level_ms(draft: Any, length: int, rows: int, top_k: int, iters: int, warmup: int) -> float:
    """One dynamic-tree level in isolation: ``top_k`` nodes with a 4-D mask after ``length`` cached tokens (ms)."""
    dev = str(draft.get_input_embeddings().weight.device)
    dtype = draft.get_input_embeddings().weight.dtype
    with torch.inference_mode():
        cache, ad = random_cache(draft, length, rows)
        mask = additive_mask(torch.eye(top_k, dtype=torch.bool), length, dtype, dev)
        toks, pos = torch.randint(0, 7, (top_k,)), torch.full((rows, top_k), length + 1)

        def level() -> None:
            logits = lm_forward(draft, ad, embed_tokens(draft, toks), pos, cache, mask=mask, rows=slice(None))
            logits.float().log_softmax(-1).topk(top_k, dim=-1)

        return median_ms(level, lambda: kv.truncate(cache, length), dev, iters, warmup)


def verify_curve(model: Any, length: int, sizes: tuple[int, ...], rows: int, rounds: int, iters: int,
                 warmup: int) -> dict:
    """Decode step and verify(n) in ms after ``length`` cached tokens, interleaved round by round.

    verify(n) is one target forward over the root and a chain of n - 1 drafted nodes with the
    engine's verify mask and the LM head on every row; decode is one token, no mask, one row.

    Returns:
        {"decode_ms", "verify_ms": {n: ms}, "ratio": {n: median verify(n) / decode per round}}.
    """
    dev = str(model.get_input_embeddings().weight.device)
    dtype = model.get_input_embeddings().weight.dtype
    with torch.inference_mode():
        cache, ad = random_cache(model, length, rows)
        steps = {0: (torch.tensor([7]), torch.full((rows, 1), length), None, slice(-1, None))}
        for n in sizes:
            steps[n] = (torch.randint(0, 7, (n,)), (length + torch.arange(n)).expand(rows, -1),
                        verify_mask(torch.arange(-1, n - 2), length, dtype, dev), slice(None))
        per: dict[int, list[float]] = {k: [] for k in steps}
        for r in range(rounds):
            for k, (ids, pos, mask, sel) in steps.items():
                fn = (lambda ids=ids, pos=pos, mask=mask, sel=sel:
                      lm_forward(model, ad, embed_tokens(model, ids), pos, cache, mask=mask, rows=sel))
                per[k].append(median_ms(fn, lambda: kv.truncate(cache, length), dev, iters, warmup if r == 0 else 0))
    return {"decode_ms": median(per[0]), "verify_ms": {n: median(per[n]) for n in sizes},
            "ratio": {n: median([v / d for v, d in zip(per[n], per[0])]) for n in sizes}}
