#!/usr/bin/env python
"""GPU check: the real engine on random-weight models of the real architectures at 16k video tokens.

For each setup, random-weight models are built directly on the GPU in bf16 from the
checkpoints' published dimensions (:mod:`specvlm.testing.realdims`: vision tower, M-RoPE, grouped
KV heads, padded vocabularies), at full depth except where one GPU cannot hold it
(LLaVA-OV-72B is built with ``--llava72-layers`` of its 80 decoder layers, 40 by default;
its target costs are scaled to 80 layers). Then, on clips of ~16k video tokens, for each variant
(``--variants``, default both: ``plain`` SpecVLM and SpecVLM with ``reselect``, re-selection between steps):

1. an untimed short pair of runs (its wall time holds the graph capture), then the engine's
   vanilla decoding and SpecVLM (vision tower, two-pass prefill with Stage I attention scores, two-stage
   pruning, draft tree, verify) on the same inputs; outputs are compared token by token: identical, a
   divergence at a near-tie of the target's logits (allowed in bf16), or a mismatch (a bug);
2. each step's cost beside its byte floor (weights + KV bytes read / the GPU's memory bandwidth, looked up by
   ``torch.cuda.get_device_name`` in :data:`specvlm.models.ceiling.GPU_BANDWIDTH`, or ``--bandwidth``):
   decode step, draft level, verify step;
3. the decode-phase speedup these costs imply at τ 2.5 / 3 / 3.8 (:mod:`scripts.gpu_report`), beside the
   byte ceiling of the pair (the same formula with every step at its floor).

Isolated forwards (verify(n) for n = 1..32 tree tokens and one draft level after L cached tokens) are
timed once per setup. Random weights make accepted lengths meaningless, so τ comes from the paper, never
from these runs. ``--cpu-smoke`` runs the same code on tiny models of the same structure on the CPU in
seconds (the test), with the CPU's measured copy bandwidth as its "GPU" bandwidth.

The default setups (Qwen2.5-VL-7B Self-SD, Qwen2.5-VL-7B + 3B, Qwen3-VL-8B + 2B) are sized for one
prepared run of under 5 minutes on an H100 or H200 (``--budget-s`` skips the rest once it is used up); the
JSON goes to ``docs/bench/gpu_check_<GPU name>.json`` unless ``--out-json`` names another file.

Usage:
    python -m scripts.gpu_check                        # one H100/H200, < 5 min
    python -m scripts.gpu_check --setups qwen7-self,qwen32-qwen7 --variants plain --out-json gpu.json
    python -m scripts.gpu_check --cpu-smoke            # tiny models, CPU, seconds

Source: SpecVLM (arXiv 2508.16201) Sec. 4 (model pairs, r = 0.9, 16k-token regime, reported
speedups); docs/design.md §4.9 (verify mask), §4.12 (τ), §9 (GPU loading), §11 (the GPU fast path).
"""
from __future__ import annotations

import argparse
import json
import logging
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from specvlm.config import TreeConfig
from specvlm.models.ceiling import BandwidthError, gpu_bandwidth
from specvlm.models.pair import pair_from_models
from specvlm.testing import realdims

from scripts.gpu_costs import VERIFY_SIZES, decode_runs, draft_level_ms, prepare_clips, verify_curve
from scripts.gpu_report import PAPER_SPEEDUP, PAPER_TAU, format_results, summarize  # noqa: F401 - re-exported

log = logging.getLogger("gpu_check")
ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SETUPS = "qwen7-self,qwen7-qwen3b,qwen3-8b-2b"
"""One prepared run: the Self-SD 7B that cannot win and the two small-draft pairs that can (docs/design.md §11)."""


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
        Setup("qwen7-qwen3b", "Qwen2.5-VL-7B + 3B draft", r.QWEN2_5_VL_7B, r.QWEN2_5_VL_3B, 128),
        Setup("qwen32-qwen7", "Qwen2.5-VL-32B + 7B draft", r.QWEN2_5_VL_32B, r.QWEN2_5_VL_7B, 128),
        Setup("qwen3-8b-self", "Qwen3-VL-8B Self-SD", r.QWEN3_VL_8B, None, 168),
        Setup("qwen3-8b-2b", "Qwen3-VL-8B + 2B draft", r.QWEN3_VL_8B, r.QWEN3_VL_2B, 168),
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
    q3, q3d = _tiny(r.QWEN3_VL_8B, 64, 2, 512), _tiny(r.QWEN3_VL_2B, 32, 1, 512)
    lv, lbig = _tiny(r.LLAVA_OV_7B, 64, 2, 512), _tiny(r.LLAVA_OV_72B, 128, 3, 512)
    return {s.key: s for s in (
        Setup("qwen7-self", "tiny Qwen2.5-VL Self-SD", q, None, 8),
        Setup("qwen7-qwen3b", "tiny Qwen2.5-VL + padded-vocab draft", q, qd, 8),
        Setup("qwen32-qwen7", "tiny Qwen2.5-VL-32B + padded-vocab draft", big, qd, 8),
        Setup("qwen3-8b-self", "tiny Qwen3-VL Self-SD", q3, None, 8),
        Setup("qwen3-8b-2b", "tiny Qwen3-VL + draft", q3, q3d, 8),
        Setup("llava7-self", "tiny LLaVA-OV Self-SD", lv, None, 8),
        Setup("llava72-llava7", "tiny LLaVA-OV + draft", lbig, lv, 8, 2),
    )}


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


VARIANTS = ("plain", "reselect")
"""SpecVLM as the paper runs it, and with re-selection between steps (:class:`specvlm.config.ReselectConfig`)."""


def run_setup(setup: Setup, store: ModelStore, args: argparse.Namespace) -> dict:
    """Build (or reuse) the pair, decode each variant, time the isolated steps, summarise."""
    t_layers = setup.target_layers or setup.target.layers
    wanted = {(setup.target.name, t_layers)} | ({(setup.draft.name, setup.draft.layers)} if setup.draft else set())
    store.keep_only(wanted)
    if store.device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    target, tproc = store.get(setup.target, t_layers)
    draft, dproc = store.get(setup.draft, setup.draft.layers) if setup.draft else (None, None)
    pair = pair_from_models(target, tproc, draft, dproc, name=setup.name)
    side = setup.target.vision.get("image_size", args.frame_side)  # fixed-size towers resize to their input
    clips = prepare_clips(pair, setup.frames, side, args.clips)
    by_variant = {v: decode_runs(pair, clips, args, store.dtype, v) for v in args.variant_list}
    first = next(iter(by_variant.values()))
    sizes = tuple(n for n in VERIFY_SIZES if n <= args.max_verify)
    curve = verify_curve(target, first["L"], sizes, first["rows"], args.rounds, args.iters, args.warmup)
    level = draft_level_ms(pair.draft, first["L_draft"], first["rows"], TreeConfig().top_k, args.iters, args.warmup)
    dtype_bytes = torch.empty((), dtype=store.dtype).element_size()
    row = summarize(setup, by_variant, curve, level, t_layers, dtype_bytes, args.bandwidth_bytes)
    row["peak_gpu_gb"] = torch.cuda.max_memory_allocated() / 1e9 if store.device.startswith("cuda") else None
    return row


def build_parser() -> argparse.ArgumentParser:
    """The command line (``python -m scripts.gpu_check --help``)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cpu-smoke", "--dry-run", action="store_true",
                   help="tiny models of the same structure on the CPU (seconds)")
    p.add_argument("--setups", default=DEFAULT_SETUPS,
                   help="comma list of qwen7-self, qwen7-qwen3b, qwen32-qwen7, qwen3-8b-self, qwen3-8b-2b, "
                        f"llava7-self, llava72-llava7 (default {DEFAULT_SETUPS})")
    p.add_argument("--variants", default=",".join(VARIANTS),
                   help=f"SpecVLM variants to run: plain, reselect (default {','.join(VARIANTS)})")
    p.add_argument("--device", default="cuda", help="CUDA device (ignored with --cpu-smoke)")
    p.add_argument("--bandwidth", type=float, default=None,
                   help="memory bandwidth in bytes/s for the byte floors, e.g. 3.35e12 (default: by the GPU's name; "
                        "on the CPU: its measured copy bandwidth)")
    p.add_argument("--llava72-layers", type=int, default=40, help="decoder layers of LLaVA-OV-72B to build (of 80; "
                                                                  "40 leaves room for the 7B draft on one H200)")
    p.add_argument("--clips", type=int, default=None, help="clips per setup and variant (default 1)")
    p.add_argument("--new-tokens", type=int, default=None, help="tokens per run (default 32; 8 with --cpu-smoke)")
    p.add_argument("--warmup-tokens", type=int, default=4, help="tokens of the untimed first runs (default 4)")
    p.add_argument("--frame-side", type=int, default=None, help="Qwen frame side in px (448; 56 smoke)")
    p.add_argument("--max-verify", type=int, default=32, help="largest n of the isolated verify(n) (default 32)")
    p.add_argument("--rounds", type=int, default=None, help="interleaved rounds of the verify curve (2; 1 smoke)")
    p.add_argument("--iters", type=int, default=None, help="timed calls per size and round (3; 1 smoke)")
    p.add_argument("--warmup", type=int, default=None, help="untimed calls first (2; 0 smoke)")
    p.add_argument("--budget-s", type=float, default=200.0, help="skip the remaining setups after this many s (200)")
    p.add_argument("--out-json", help="write the results as JSON here (default on a GPU: "
                                      "docs/bench/gpu_check_<GPU name>.json)")
    return p


def _defaults(args: argparse.Namespace) -> argparse.Namespace:
    smoke = args.cpu_smoke
    for name, gpu, cpu in (("clips", 1, 1), ("new_tokens", 32, 8), ("frame_side", 448, 56), ("rounds", 2, 1),
                           ("iters", 3, 1), ("warmup", 2, 0)):
        if getattr(args, name) is None:
            setattr(args, name, cpu if smoke else gpu)
    args.variant_list = [v.strip() for v in args.variants.split(",") if v.strip()]
    bad = [v for v in args.variant_list if v not in VARIANTS] or ([] if args.variant_list else [args.variants])
    if bad:
        raise SystemExit(f"error: --variants {args.variants!r}: use a comma list of {', '.join(VARIANTS)}")
    return args


def device_name(args: argparse.Namespace) -> str:
    """What the results call the device: the GPU's name, or the CPU smoke run's label."""
    return "CPU (tiny models)" if args.cpu_smoke else torch.cuda.get_device_name(torch.device(args.device))


def bandwidth_bytes(args: argparse.Namespace, name: str) -> float:
    """Memory bandwidth (bytes/s) for the byte floors: ``--bandwidth``, else the GPU's by name, else (CPU smoke
    run) the measured copy bandwidth (:func:`specvlm.bench.machine.machine_info`).

    Raises:
        BandwidthError: an unknown GPU and no ``--bandwidth``.
    """
    if args.cpu_smoke and args.bandwidth is None:
        from specvlm.bench.machine import machine_info

        return machine_info("cpu", seconds=0.05)["copy_gb_per_s"] * 1e9
    return gpu_bandwidth(name, args.bandwidth)


def default_json_path(name: str) -> Path:
    """``docs/bench/gpu_check_<name>.json`` with the name's runs of other characters as ``-``."""
    return ROOT / "docs" / "bench" / f"gpu_check_{re.sub(r'[^A-Za-z0-9]+', '-', name).strip('-')}.json"


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
    """Run the check, print the tables, write the JSON; returns the exit status."""
    args = _defaults(build_parser().parse_args(argv))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", stream=sys.stderr)
    if not args.cpu_smoke and not torch.cuda.is_available():
        print("error: no CUDA device: use --cpu-smoke for the CPU version", file=sys.stderr)
        return 2
    name = device_name(args)
    try:
        args.bandwidth_bytes = bandwidth_bytes(args, name)
    except BandwidthError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    rows = run(args)
    print(format_results(rows, name))
    out = Path(args.out_json) if args.out_json else (None if args.cpu_smoke else default_json_path(name))
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"device": name, "bandwidth": args.bandwidth_bytes, "variants": args.variant_list,
                                   "torch": torch.__version__, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                                   "wall_s": time.perf_counter() - t0, "results": rows}, indent=1, default=str))
        print(f"\nJSON: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
