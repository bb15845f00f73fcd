#!/usr/bin/env python
"""GPU check: the real engine on random-weight models of the real architectures at 16k video tokens.

For each setup, random-weight models are built directly on the GPU in bf16 from the
checkpoints' published dimensions (:mod:`specvlm.testing.realdims`: vision tower, M-RoPE, grouped
KV heads, padded vocabularies), at full depth except where one H200 cannot hold it
(LLaVA-OV-72B is built with ``--llava72-layers`` of its 80 decoder layers, 40 by default;
its times are also shown scaled to 80 layers). Then, on clips of ~16k video tokens:

1. the engine's vanilla decoding and SpecVLM (vision tower, two-pass prefill with Stage I
   attention scores, two-stage pruning, draft tree, 4-D-mask verify through the engine's
   grouped-query attention) run on the same inputs; outputs are compared token by token:
   identical, a divergence at a near-tie of the target's logits (allowed in bf16), or a
   mismatch (a bug), with the target's top-1 minus top-2 logit margin at the divergence;
2. the costs are read: target prefill (one pass for vanilla, two passes + Stage I for
   SpecVLM), one decode step and one draft step (medians of the runs' steps), one draft
   tree level in isolation, and verify(n) for n = 1..32 tokens after L cached tokens
   (root + a chain of n - 1 nodes, the engine's verify mask, interleaved with decode steps);
3. the decode-phase speedup these costs imply at the paper's τ:

       speedup(τ) = (τ + 1) · t_decode / (depth · t_level + t_verify(total_tokens + 1))

   and, for the paper's reported speedups, the τ they require.

Random weights make accepted lengths meaningless, so τ comes from the paper, never from
these runs. ``--cpu-smoke`` runs the same code on tiny models of the same structure on
the CPU in seconds (the test).

Usage:
    python -m scripts.gpu_check                        # one H200, < 8 min
    python -m scripts.gpu_check --setups qwen7-self --out-json gpu.json
    python -m scripts.gpu_check --cpu-smoke            # tiny models, CPU, seconds

Source: SpecVLM (arXiv 2508.16201) Sec. 4 (model pairs, r = 0.9, 16k-token regime, reported
speedups); docs/design.md §4.9 (verify mask), §4.12 (τ), §9 (GPU loading).
"""
from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from specvlm.engine import kv
from specvlm.testing import realdims
from specvlm.config import DecodeConfig, TreeConfig
from specvlm.engine.forward import embed_tokens, lm_forward
from specvlm.engine.stream import generate
from specvlm.analysis.metrics import compare_outputs
from specvlm.models.registry import adapter_for
from specvlm.models.pair import pair_from_models
from specvlm.bench.stepcost import median_ms
from specvlm.spec.tree import additive_mask, verify_mask
from specvlm.types import VideoClip

log = logging.getLogger("gpu_check")

#: Mean accepted length τ the paper reports (docs/design.md §5: Self-SD 7B τ ≈ 3.8-4.4).
PAPER_TAU = {"qwen7-self": 3.8}
#: Decoding speedups the paper reports (abstract, Sec. 4): the τ they need is printed.
PAPER_SPEEDUP = {"qwen32-qwen7": 2.11, "llava72-llava7": 2.68}


@dataclass(frozen=True)
class Setup:
    """One target/draft pair to check.

    Attributes:
        key: command-line name.
        name: display name.
        target, draft: architectures (draft None = Self-SD).
        frames: frames per clip (Qwen2.5-VL 128 at 448 px = 16,384 tokens; Qwen3-VL 168 = 84 groups x 196 and
            LLaVA-OV 84 x 196 = 16,464).
        target_layers: decoder layers built for the target (None = all).
    """

    key: str
    name: str
    target: realdims.Arch
    draft: realdims.Arch | None
    frames: int
    target_layers: int | None = None


def gpu_setups(llava72_layers: int) -> dict[str, Setup]:
    """The real-dimension setups, in the order that lets models be reused."""
    r = realdims
    return {s.key: s for s in (
        Setup("qwen7-self", "Qwen2.5-VL-7B Self-SD", r.QWEN2_5_VL_7B, None, 128),
        Setup("qwen32-qwen7", "Qwen2.5-VL-32B + 7B draft", r.QWEN2_5_VL_32B, r.QWEN2_5_VL_7B, 128),
        Setup("qwen3-8b-self", "Qwen3-VL-8B Self-SD", r.QWEN3_VL_8B, None, 168),
        Setup("llava7-self", "LLaVA-OV-7B Self-SD", r.LLAVA_OV_7B, None, 84),
        Setup("llava72-llava7", "LLaVA-OV-72B + 7B draft", r.LLAVA_OV_72B, r.LLAVA_OV_7B, 84, llava72_layers),
    )}


def _tiny(arch: realdims.Arch, hidden: int, layers: int, vocab: int) -> realdims.Arch:
    if arch.family == "qwen3_vl":
        vision = dict(realdims.QWEN3_VISION, depth=2, hidden_size=32, intermediate_size=64, num_heads=2,
                      out_hidden_size=hidden, num_position_embeddings=64, deepstack_visual_indexes=[0, 1])
        return realdims.shrink(arch, name="tiny " + arch.name, hidden=hidden, layers=layers, heads=4, kv_heads=2,
                               intermediate=2 * hidden, vocab=vocab, mrope_section=(hidden // 16, hidden // 32,
                                                                                   hidden // 32), vision=vision)
    if arch.family == "qwen2_5_vl":
        vision = dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, patch_size=14, spatial_merge_size=2,
                      temporal_patch_size=2, out_hidden_size=hidden, fullatt_block_indexes=[1], window_size=56,
                      tokens_per_second=2)
        return realdims.shrink(arch, name="tiny " + arch.name, hidden=hidden, layers=layers, heads=4, kv_heads=2,
                               intermediate=2 * hidden, vocab=vocab, mrope_section=(hidden // 16, hidden // 32,
                                                                                   hidden // 32), vision=vision)
    vision = dict(model_type="siglip_vision_model", hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=2, image_size=28, patch_size=7, vision_use_head=False)
    return realdims.shrink(arch, name="tiny " + arch.name, hidden=hidden, layers=layers, heads=4, kv_heads=2,
                           intermediate=2 * hidden, vocab=vocab, vision=vision)


def smoke_setups() -> dict[str, Setup]:
    """Tiny stand-ins with the setups' structure (padded draft vocabulary included), for the CPU."""
    r = realdims
    q, qd = _tiny(r.QWEN2_5_VL_7B, 64, 2, 512), _tiny(r.QWEN2_5_VL_3B, 32, 1, 448)
    big = _tiny(r.QWEN2_5_VL_32B, 128, 2, 512)
    lv, lbig = _tiny(r.LLAVA_OV_7B, 64, 2, 512), _tiny(r.LLAVA_OV_72B, 128, 3, 512)
    return {s.key: s for s in (
        Setup("qwen7-self", "tiny Qwen2.5-VL Self-SD", q, None, 8),
        Setup("qwen32-qwen7", "tiny Qwen2.5-VL + padded-vocab draft", big, qd, 8),
        Setup("qwen3-8b-self", "tiny Qwen3-VL Self-SD", _tiny(r.QWEN3_VL_8B, 64, 2, 512), None, 8),
        Setup("llava7-self", "tiny LLaVA-OV Self-SD", lv, None, 8),
        Setup("llava72-llava7", "tiny LLaVA-OV + draft", lbig, lv, 8, 2),
    )}


def make_clip(frames: int, side: int, seed: int) -> VideoClip:
    """A clip of smooth random frames: uint8 (T, side, side, 3), 2 fps."""
    rng = np.random.RandomState(seed)
    base = rng.randint(0, 255, (frames, 8, 8, 3)).astype(np.uint8)
    img = np.repeat(np.repeat(base, -(-side // 8), axis=1), -(-side // 8), axis=2)[:, :side, :side]
    return VideoClip(np.ascontiguousarray(img), np.arange(frames) / 2.0, native_fps=2.0, total_frames=frames,
                     duration=frames / 2.0)


PROMPT = "Describe this video in detail."


class ModelStore:
    """Built models kept for reuse by later setups (a 7B target is the next setup's draft)."""

    def __init__(self, dtype: torch.dtype, device: str, frame_side: int) -> None:
        self.dtype, self.device, self.frame_side = dtype, device, frame_side
        self.models: dict[tuple[str, int], tuple[Any, Any]] = {}

    def keep_only(self, wanted: set[tuple[str, int]]) -> None:
        """Free every model not in ``wanted`` (and the GPU's cached blocks)."""
        for k in [k for k in self.models if k not in wanted]:
            del self.models[k]
        if self.device.startswith("cuda"):
            torch.cuda.empty_cache()

    def get(self, arch: realdims.Arch, layers: int) -> tuple[Any, Any]:
        """(model, processor) of ``arch`` with ``layers`` decoder layers, built once."""
        key = (arch.name, layers)
        if key not in self.models:
            self.models[key] = realdims.build(arch, layers=layers, dtype=self.dtype, device=self.device,
                                              frame_side=self.frame_side)
        return self.models[key]


def compare(vanilla: Any, spec: Any, dtype: torch.dtype) -> dict:
    """identical / near-tie / mismatch (:func:`specvlm.analysis.metrics.compare_outputs`) with the target's
    top-1 minus top-2 logit margin at the first divergence, as vanilla decoding recorded it."""
    d = compare_outputs(vanilla.token_ids, spec.token_ids, vanilla.margins, dtype)
    return {"kind": d.kind, "index": d.index, "margin": d.margin}


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


def verify_curve(model: Any, length: int, sizes: range, rows: int, rounds: int, iters: int,
                 warmup: int) -> dict:
    """Decode step and verify(n) in ms after ``length`` cached tokens, interleaved round by round.

    verify(n) is one target forward over the root and a chain of n - 1 drafted nodes with the
    engine's verify mask and the LM head on every row; decode is one token, no mask, one row.
    Returns {"decode_ms", "verify_ms": {n: ms}, "ratio": {n: median verify(n) / decode per round}}.
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
    return {"decode_ms": _median(per[0]), "verify_ms": {n: _median(per[n]) for n in sizes},
            "ratio": {n: _median([v / d for v, d in zip(per[n], per[0])]) for n in sizes}}


def _median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else 0.0


def decode_runs(pair: Any, setup: Setup, args: argparse.Namespace, dtype: torch.dtype) -> dict:
    """Vanilla and SpecVLM on ``args.clips`` clips: comparisons and the runs' step times."""
    new = dict(max_new_tokens=args.new_tokens, stop_at_eos=False)
    cfg_v, cfg_s = DecodeConfig(method="vanilla", **new), DecodeConfig(method="specvlm", **new)
    side = setup.target.vision.get("image_size", args.frame_side)  # fixed-size towers resize to their input
    out: dict[str, Any] = {"runs": [], "prefill_vanilla_s": [], "prefill_specvlm_s": [], "prune_s": [],
                           "draft_prefill_s": [], "decode_ms": [], "draft_step_ms": [], "verify_step_ms": [],
                           "tau_random_weights": []}
    for c in range(args.clips):
        inputs = pair.adapter.prepare(pair.processor, pair.target, make_clip(setup.frames, side, c), PROMPT)
        van = generate(pair, inputs, cfg_v)
        spec = generate(pair, inputs, cfg_s)
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


def projected_speedup(tau: float, t_decode: float, t_level: float, t_verify: float, depth: int) -> float:
    """(τ + 1) · t_decode / (depth · t_level + t_verify): the decode-phase speedup bound (module docstring)."""
    return (tau + 1.0) * t_decode / (depth * t_level + t_verify)


def tau_needed(speedup: float, t_decode: float, t_level: float, t_verify: float, depth: int) -> float:
    """The τ at which :func:`projected_speedup` reaches ``speedup``."""
    return speedup * (depth * t_level + t_verify) / t_decode - 1.0


def summarize(setup: Setup, runs: dict, curve: dict, level_ms: float, built_layers: int) -> dict:
    """One result row: counts, medians, costs scaled to full depth, projections."""
    tree = TreeConfig()
    scale = setup.target.layers / built_layers
    n_verify = min(tree.total_tokens + 1, max(curve["verify_ms"]))
    t_dec, t_ver = curve["decode_ms"] * scale, curve["verify_ms"][n_verify] * scale
    kinds = [r["kind"] for r in runs["runs"]]
    row = {"key": setup.key, "pair": setup.name, "target_layers": f"{built_layers}/{setup.target.layers}",
           "depth_scale": scale, "video_tokens": runs["video_tokens"], "L": runs["L"], "L_draft": runs["L_draft"],
           "counts": {k: kinds.count(k) for k in ("identical", "near-tie", "mismatch")},
           "divergences": [r for r in runs["runs"] if r["kind"] != "identical"],
           "prefill_vanilla_s": _median(runs["prefill_vanilla_s"]),
           "prefill_specvlm_s": _median(runs["prefill_specvlm_s"]), "prune_s": _median(runs["prune_s"]),
           "draft_prefill_s": _median(runs["draft_prefill_s"]), "decode_step_ms": _median(runs["decode_ms"]),
           "draft_step_ms": _median(runs["draft_step_ms"]), "verify_step_ms": _median(runs["verify_step_ms"]),
           "draft_level_ms": level_ms, "verify_curve_ms": curve["verify_ms"], "verify_ratio": curve["ratio"],
           "decode_ms_isolated": curve["decode_ms"], "n_verify": n_verify,
           "tau_random_weights": _median(runs["tau_random_weights"])}
    row["projected"] = {str(t): projected_speedup(t, t_dec, level_ms, t_ver, tree.depth) for t in (2, 3, 4, 5)}
    if setup.key in PAPER_TAU:
        tau = PAPER_TAU[setup.key]
        row["paper_tau"] = tau
        row["speedup_at_paper_tau"] = projected_speedup(tau, t_dec, level_ms, t_ver, tree.depth)
    if setup.key in PAPER_SPEEDUP:
        row["paper_speedup"] = PAPER_SPEEDUP[setup.key]
        row["tau_for_paper_speedup"] = tau_needed(PAPER_SPEEDUP[setup.key], t_dec, level_ms, t_ver, tree.depth)
    return row


def run_setup(setup: Setup, store: ModelStore, args: argparse.Namespace) -> dict:
    """Build (or reuse) the pair, decode, measure the step costs, summarise."""
    t_layers = setup.target_layers or setup.target.layers
    wanted = {(setup.target.name, t_layers)} | ({(setup.draft.name, setup.draft.layers)} if setup.draft else set())
    store.keep_only(wanted)
    if store.device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    target, tproc = store.get(setup.target, t_layers)
    draft, dproc = store.get(setup.draft, setup.draft.layers) if setup.draft else (None, None)
    pair = pair_from_models(target, tproc, draft, dproc, name=setup.name)
    runs = decode_runs(pair, setup, args, store.dtype)
    curve = verify_curve(target, runs["L"], range(1, args.max_verify + 1), runs["rows"], args.rounds, args.iters,
                         args.warmup)
    level = draft_level_ms(pair.draft, runs["L_draft"], runs["rows"], TreeConfig().top_k, args.iters, args.warmup)
    row = summarize(setup, runs, curve, level, t_layers)
    row["peak_gpu_gb"] = torch.cuda.max_memory_allocated() / 1e9 if store.device.startswith("cuda") else None
    return row


def format_results(rows: list[dict], device_name: str) -> str:
    """Markdown tables: outputs and costs per setup, verify(n), and the projections."""
    out = [f"Device: {device_name}", "",
           "| setup | target layers | V | L / L_draft | identical / near-tie / mismatch | prefill s "
           "(vanilla / SpecVLM) | decode ms | draft step ms (level) | verify step ms |", "|" + "---|" * 9]
    for r in rows:
        c = r["counts"]
        out.append(f"| {r['pair']} | {r['target_layers']} | {r['video_tokens']} | {r['L']} / {r['L_draft']} | "
                   f"{c['identical']} / {c['near-tie']} / {c['mismatch']} | "
                   f"{r['prefill_vanilla_s']:.2f} / {r['prefill_specvlm_s']:.2f} | {r['decode_step_ms']:.2f} | "
                   f"{r['draft_step_ms']:.2f} ({r['draft_level_ms']:.2f}) | {r['verify_step_ms']:.2f} |")
    for r in rows:
        for d in r["divergences"]:
            m = "n/a" if d["margin"] is None else f"{d['margin']:.4f}"
            out.append(f"- {r['pair']}: {d['kind']} at token {d['index']}, target top-1 minus top-2 logit {m}")
    out += ["", "verify(n) ms after L cached tokens (ratio to one decode step):", "",
            "| setup | decode | " + " | ".join(f"n={n}" for n in (1, 2, 4, 8, 16, 17, 24, 32)) + " |",
            "|" + "---|" * 10]
    for r in rows:
        cells = [f"{r['verify_curve_ms'][n]:.2f} ({r['verify_ratio'][n]:.2f}x)" if n in r["verify_curve_ms"] else "-"
                 for n in (1, 2, 4, 8, 16, 17, 24, 32)]
        out.append(f"| {r['pair']} | {r['decode_ms_isolated']:.2f} | " + " | ".join(cells) + " |")
    out += ["", "| setup | τ=2 | τ=3 | τ=4 | τ=5 | at the paper's τ | τ needed for the paper's speedup |",
            "|" + "---|" * 7]
    for r in rows:
        p = r["projected"]
        at = f"{r['speedup_at_paper_tau']:.2f}x (τ = {r['paper_tau']})" if "paper_tau" in r else "-"
        need = f"τ = {r['tau_for_paper_speedup']:.2f} for {r['paper_speedup']}x" if "paper_speedup" in r else "-"
        out.append(f"| {r['pair']} | " + " | ".join(f"{p[t]:.2f}x" for t in "2345") + f" | {at} | {need} |")
    depth = TreeConfig().depth
    out.append(f"\nprojected speedup = (τ + 1) · t_decode / ({depth} · t_level + t_verify(n)), n = tree tokens + "
               "root; decode phase only; target costs of a reduced-depth build are scaled to full depth "
               "(layers ratio). Accepted lengths of random weights are not meaningful: τ comes from the paper.")
    return "\n".join(out)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cpu-smoke", action="store_true", help="tiny models of the same structure on the CPU (seconds)")
    p.add_argument("--setups", default="qwen7-self,qwen32-qwen7,llava72-llava7",
                   help="comma list of qwen7-self, qwen32-qwen7, llava7-self, llava72-llava7 "
                        "(default: the paper's three settings)")
    p.add_argument("--device", default="cuda", help="CUDA device (ignored with --cpu-smoke)")
    p.add_argument("--llava72-layers", type=int, default=40, help="decoder layers of LLaVA-OV-72B to build (of 80; "
                                                                  "40 leaves room for the 7B draft on one H200)")
    p.add_argument("--clips", type=int, default=None, help="clips per setup (default 2; 1 with --cpu-smoke)")
    p.add_argument("--new-tokens", type=int, default=None, help="tokens per run (default 48; 8 with --cpu-smoke)")
    p.add_argument("--frame-side", type=int, default=None, help="Qwen2.5-VL frame side in px (448; 56 smoke)")
    p.add_argument("--max-verify", type=int, default=32, help="largest n of verify(n) (default 32)")
    p.add_argument("--rounds", type=int, default=None, help="interleaved rounds of the verify curve (2; 1 smoke)")
    p.add_argument("--iters", type=int, default=None, help="timed calls per size and round (3; 1 smoke)")
    p.add_argument("--warmup", type=int, default=None, help="untimed calls first (2; 0 smoke)")
    p.add_argument("--budget-s", type=float, default=400.0, help="skip the remaining setups after this many s (400)")
    p.add_argument("--out-json", help="also write the results as JSON")
    return p


def _defaults(args: argparse.Namespace) -> argparse.Namespace:
    smoke = args.cpu_smoke
    for name, gpu, cpu in (("clips", 2, 1), ("new_tokens", 48, 8), ("frame_side", 448, 56), ("rounds", 2, 1),
                           ("iters", 3, 1), ("warmup", 2, 0)):
        if getattr(args, name) is None:
            setattr(args, name, cpu if smoke else gpu)
    return args


def run(args: argparse.Namespace) -> list[dict]:
    """Every requested setup within the time budget; one result row each."""
    table = smoke_setups() if args.cpu_smoke else gpu_setups(args.llava72_layers)
    keys = [k.strip() for k in args.setups.split(",") if k.strip()]
    unknown = [k for k in keys if k not in table]
    if unknown:
        raise SystemExit(f"error: unknown setup {unknown[0]!r}: use {', '.join(table)}")
    device = "cpu" if args.cpu_smoke else args.device
    dtype = torch.float32 if args.cpu_smoke else torch.bfloat16
    store, rows, t0 = ModelStore(dtype, device, args.frame_side), [], time.perf_counter()
    for key in [k for k in table if k in keys]:
        if time.perf_counter() - t0 > args.budget_s:
            log.warning("time budget %.0f s used up: skipping %s", args.budget_s, key)
            continue
        with torch.inference_mode():
            row = run_setup(table[key], store, args)
        row["elapsed_s"] = time.perf_counter() - t0
        log.info("%s done after %.0f s", key, row["elapsed_s"])
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    args = _defaults(build_parser().parse_args(argv))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", stream=sys.stderr)
    if not args.cpu_smoke and not torch.cuda.is_available():
        print("error: no CUDA device: use --cpu-smoke for the CPU version", file=sys.stderr)
        return 2
    rows = run(args)
    name = "CPU (tiny models)" if args.cpu_smoke else torch.cuda.get_device_name(torch.device(args.device))
    print(format_results(rows, name))
    if args.out_json:
        Path(args.out_json).write_text(json.dumps({"device": name, "results": rows}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
