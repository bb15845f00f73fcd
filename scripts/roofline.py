#!/usr/bin/env python
"""Roofline of a speculative step on this machine: what a decode step reads, how fast, and what a verify and a
draft level cost against it.

For a pair (default: the bundled Std-SD pair) and each context length L (target prompt tokens), interleaved:

* **bytes per decode step**: the target language model's weights (as loaded, fp32 on a CPU) plus its KV cache at L
  (layers x 2 x KV heads x head dim x L x bytes per element), all of which one decode step reads;
* **decode ms** and the **GB/s** it reaches (bytes / decode time);
* **verify(k) / decode**: one target forward over k tree tokens (root + k - 1 chain nodes) against a 1-token
  decode step (:func:`specvlm.bench.stepcost.verify_cost_curve`);
* **draft level / decode**: one draft chain node at the draft's pruned context (~10% of the video tokens)
  against the target's decode step (:func:`specvlm.bench.stepcost.draft_cost`, the engine's static forwards);
* **projected speedup** of a chain of depth D at accept length τ: (τ + 1) / (verify(D + 1)/decode + D x level/decode):
  a step verifies the root and D drafted tokens and feeds the draft D times (the pending token and D - 1 levels),
  and emits τ + 1 tokens where vanilla emits one per decode step.

Passing ``--speed`` (a :mod:`scripts.speed_check` JSON) adds the measured median τ and decode speedup per case for
comparison with the projection at the case's context length.

Usage:
    python -m scripts.roofline --out docs/bench/roofline_cpu.json
    python -m scripts.roofline --lengths 320,2800,16400 --depth 4 --tau 3 --speed docs/bench/speed_check_idle.json

Source: SpecVLM (arXiv 2508.16201) Sec. 3 (tree verification in one target forward); docs/design.md §12.
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path


def weight_bytes(model) -> int:
    """Bytes of the language model's parameters (vision tower excluded: it runs once, at prefill)."""
    lm = model.get_decoder() if hasattr(model, "get_decoder") else model
    n = sum(p.numel() * p.element_size() for p in lm.parameters())
    head = model.get_output_embeddings()
    if head is not None and head.weight.data_ptr() != model.get_input_embeddings().weight.data_ptr():
        n += head.weight.numel() * head.weight.element_size()
    return int(n)


def kv_bytes(model, tokens: int) -> int:
    """Bytes of the KV cache at ``tokens`` cached positions (:func:`specvlm.bench.records.kv_mb`, in bytes)."""
    from specvlm.bench.records import kv_mb

    return int(round(kv_mb(model, tokens) * 2**20))


def projected(tau: float, depth: int, verify_ratio: float, level_ratio: float) -> float:
    """Projected decode speedup of a chain of ``depth`` at accept length ``tau`` (see the module docstring)."""
    return (tau + 1.0) / (verify_ratio + depth * level_ratio)


def measure(pair, length: int, depth: int, keep: float, rounds: int) -> dict:
    """One context length's row (times in ms, bytes, GB/s, ratios)."""
    from specvlm.bench.stepcost import draft_cost, verify_cost_curve

    sizes = tuple(sorted({1, 2, 5, depth + 1, 9, 13, 17}))
    vc = verify_cost_curve(pair.target, length, sizes, rounds=rounds)
    dc = draft_cost(pair, length, max(int(length * keep), 16), width=1, rounds=rounds)
    total = weight_bytes(pair.target) + kv_bytes(pair.target, length)
    return {"kv_tokens": length, "weight_mb": weight_bytes(pair.target) / 1e6,
            "kv_mb": kv_bytes(pair.target, length) / 1e6, "bytes_per_step_mb": total / 1e6,
            "decode_ms": vc.decode_ms, "gb_per_s": total / (vc.decode_ms * 1e-3) / 1e9,
            "verify_ms": vc.verify_ms, "verify_ratio": vc.ratio,
            "draft_weight_mb": weight_bytes(pair.draft) / 1e6, "draft_level_ms": dc.chain_ms,
            "draft_level_ratio": dc.chain_ratio, "draft_runner": dc.runner, "static_decode_ms": dc.decode_ms}


def main(argv: list[str] | None = None) -> dict:
    import torch

    from specvlm.models.loading import load_pair
    from specvlm.models.presets import BUNDLED_DRAFT, BUNDLED_TARGET

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--target", default=str(BUNDLED_TARGET), help="target model folder or Hub id")
    ap.add_argument("--draft", default=str(BUNDLED_DRAFT), help="Std-SD draft (the target's own folder: Self-SD)")
    ap.add_argument("--lengths", default="320,2800,16400", help="comma list of target context lengths (tokens)")
    ap.add_argument("--depth", type=int, default=4, help="chain depth D of the projection")
    ap.add_argument("--tau", default="2,3,4,6,8", help="comma list of accept lengths τ to project")
    ap.add_argument("--keep", type=float, default=0.1, help="draft context as a share of the target's")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds per measurement")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    ap.add_argument("--speed", default=None, help="a scripts.speed_check JSON to set beside the projection")
    ap.add_argument("--out", default=None, help="write the rows as JSON here")
    args = ap.parse_args(argv)
    if args.depth < 1 or args.rounds < 1 or not 0 < args.keep <= 1:
        ap.error("--depth and --rounds must be >= 1 and --keep in (0, 1]")
    if args.threads:
        torch.set_num_threads(args.threads)
    pair = load_pair(args.target, None if args.draft == args.target else args.draft, device="cpu")
    taus = [float(t) for t in args.tau.split(",")]
    rows = []
    for L in (int(x) for x in args.lengths.split(",")):
        row = measure(pair, L, args.depth, args.keep, args.rounds)
        v = row["verify_ratio"][args.depth + 1]
        row["projected"] = {f"{t:g}": projected(t, args.depth, v, row["draft_level_ratio"]) for t in taus}
        rows.append(row)
        print(f"L={L}: {row['bytes_per_step_mb']:.0f} MB/step ({row['weight_mb']:.0f} weights + {row['kv_mb']:.0f} KV), "
              f"decode {row['decode_ms']:.2f} ms = {row['gb_per_s']:.1f} GB/s; verify({args.depth + 1})/decode "
              f"{v:.2f}, draft level/decode {row['draft_level_ratio']:.3f}; projected "
              + ", ".join(f"τ {k}: {p:.2f}x" for k, p in row["projected"].items()), flush=True)
    out = {"target": args.target, "draft": args.draft, "depth": args.depth, "threads": torch.get_num_threads(),
           "rows": rows}
    if args.speed:
        sc = json.loads(Path(args.speed).read_text())
        out["measured"] = _measured(sc)
        for m in out["measured"]:
            print(f"measured {m['case']}: τ {m['tau']:.2f}, decode speedup {m['speedup']:.2f}x", flush=True)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(out, indent=1, ensure_ascii=False))
    return out


def _measured(sc: dict) -> list[dict]:
    """Per case of a speed_check JSON: median τ and median decode speedup."""
    cases: dict[str, list[dict]] = {}
    for run in sc.get("runs", []):
        if run.get("ok", True) and run.get("speedup") is not None:
            cases.setdefault(run["case"], []).append(run)
    return [{"case": c, "tau": statistics.median(r.get("tau") or 0.0 for r in runs),
             "speedup": statistics.median(r["speedup"] for r in runs)} for c, runs in cases.items()]


if __name__ == "__main__":
    main()
