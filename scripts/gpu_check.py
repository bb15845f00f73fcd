#!/usr/bin/env python
"""GPU check: step costs of real-size Qwen2.5-VL models at 16k video tokens, and the projected speedup.

Builds random-weight models from the published text configs written inline (no
download, no Hub): Qwen2.5-VL-7B, and Qwen2.5-VL-32B with the 7B as its draft. The
vision tower is skipped (a 1-block stub is built): the prompt is random token
embeddings of ``text + V`` tokens fed through :func:`specvlm.decoding.lm_forward`
with explicit positions (values do not change the cost). The cache is the engine's
(:func:`specvlm.kv.new_cache`), so engine changes show up here.

Measured per pair (median of ``--iters`` after warm-up, CUDA-synchronised, ms):
    t_vanilla  one target decode step (1 token) after the L = text + V prompt;
    t_draft    one draft forward of ``top_k`` tree nodes (one dynamic-tree level, 4-D mask)
               after text + keep * V tokens (SpecVLM keeps 10%); ``t_draft_chain`` = 1 token;
    t_verify   one target forward over root + ``nodes`` tree nodes with
               :func:`specvlm.tree.verify_mask`, LM head on every row.
After each timed step the cache is rolled back (:func:`specvlm.kv.truncate`).

Projected speedup (printed for τ = 2..5):

    speedup(τ) ≈ (τ + 1) · t_vanilla / (depth · t_draft + t_verify)

Each verify step emits τ accepted draft tokens + 1 bonus token at the price of one
target forward and ``depth`` draft forwards (the pending tokens + depth - 1 tree
levels); vanilla emits 1 token per ``t_vanilla``. Host-side bookkeeping, prefill and
pruning are left out, so this is an upper bound for the decode phase.

Usage:
    python -m scripts.gpu_check                       # H200: 7B Self-SD and 32B + 7B, 16k video tokens (< 8 min)
    python -m scripts.gpu_check --pairs 7b-self --out-json gpu.json
    python -m scripts.gpu_check --tiny                # the same code at tiny sizes on the CPU (tests)

Source: Qwen2.5-VL-7B/32B-Instruct ``config.json`` (published text configs); SpecVLM
(arXiv 2508.16201) Sec. 4 (r = 0.9, 16k-token regime); DESIGN 4.9 (verify mask).
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

import torch

from specvlm import kv
from specvlm.decoding import embed_tokens, lm_forward
from specvlm.stepcost import median_ms as _median_ms, random_prefill
from specvlm.tree import additive_mask, verify_mask

log = logging.getLogger("gpu_check")

# Published text configs (Qwen/Qwen2.5-VL-*-Instruct config.json).
QWEN7 = dict(hidden_size=3584, num_hidden_layers=28, num_attention_heads=28, num_key_value_heads=4,
             intermediate_size=18944, vocab_size=152064, rope_theta=1_000_000.0, mrope_section=[16, 24, 24])
QWEN32 = dict(hidden_size=5120, num_hidden_layers=64, num_attention_heads=40, num_key_value_heads=8,
              intermediate_size=27648, vocab_size=152064, rope_theta=1_000_000.0, mrope_section=[16, 24, 24])
# Tiny stand-ins with the same structure (head_dim 16 -> mrope_section sums to 8).
TINY = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            intermediate_size=128, vocab_size=1024, rope_theta=10000.0, mrope_section=[4, 2, 2])
TINY_BIG = dict(TINY, hidden_size=128, num_hidden_layers=3, num_attention_heads=8, intermediate_size=256,
                mrope_section=[4, 2, 2])

PAIRS = {"7b-self": ("Qwen2.5-VL-7B Self-SD", QWEN7, None), "32b-7b": ("Qwen2.5-VL-32B + 7B draft", QWEN32, QWEN7)}
TINY_PAIRS = {"7b-self": ("tiny Self-SD", TINY, None), "32b-7b": ("tiny-big + tiny draft", TINY_BIG, TINY)}


def build_model(text: dict, dtype: torch.dtype, device: str) -> Any:
    """A random-weight ``Qwen2_5_VLForConditionalGeneration`` with the given text config.

    The vision tower is a 1-block stub (never run). Weights are created directly on
    ``device`` in ``dtype`` (seconds for 32B on a GPU).

    Args:
        text: hidden_size, num_hidden_layers, num_attention_heads, num_key_value_heads,
            intermediate_size, vocab_size, rope_theta, mrope_section.
        dtype: parameter dtype (bf16 on CUDA).
        device: "cuda", "cuda:1" or "cpu".
    """
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    t = dict(text)
    rope = {"rope_type": "default", "rope_theta": t.pop("rope_theta"), "mrope_section": t.pop("mrope_section")}
    cfg = Qwen2_5_VLConfig(
        text_config=dict(t, rope_parameters=rope, max_position_embeddings=128000, tie_word_embeddings=False),
        vision_config=dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=t["hidden_size"],
                           fullatt_block_indexes=[0]),
        tie_word_embeddings=False,
    )
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen2_5_VLForConditionalGeneration._from_config(cfg, dtype=dtype, attn_implementation="sdpa")
    return model.eval()


def tree_parents(nodes: int, top_k: int) -> torch.Tensor:
    """A breadth-first tree of ``nodes`` nodes, at most ``top_k`` children each: int64 (N,), -1 = child of the root."""
    parents = []
    for i in range(nodes):
        parents.append(-1 if i < top_k else (i - top_k) // top_k)
    return torch.tensor(parents, dtype=torch.long)


def step_costs(target: Any, draft: Any, *, video_tokens: int, text_tokens: int, keep: float, nodes: int,
               top_k: int, iters: int, warmup: int, chunk: int) -> dict:
    """Measure t_vanilla, t_draft (level and chain) and t_verify in ms (see the module docstring).

    Returns:
        dict: L (target prompt tokens), L_draft, and the four times in ms.
    """
    dev = str(target.get_input_embeddings().weight.device)
    dtype = target.get_input_embeddings().weight.dtype
    L = text_tokens + video_tokens
    cache, ad = random_prefill(target, L, chunk=chunk, seed=0)
    tok = torch.tensor([7])

    def vanilla() -> None:
        logits = lm_forward(target, ad, embed_tokens(target, tok), torch.full((3, 1), L), cache)
        logits.argmax(-1)

    reset = lambda: kv.truncate(cache, L)  # noqa: E731
    t_van = _median_ms(vanilla, reset, dev, iters, warmup)
    parents = tree_parents(nodes, top_k)
    depths = torch.ones(nodes, dtype=torch.long)
    for i, p in enumerate(parents.tolist()):
        depths[i] = 1 if p < 0 else depths[p] + 1
    vtoks = torch.randint(0, 1000, (nodes + 1,))
    vpos = (L + torch.cat([torch.zeros(1, dtype=torch.long), depths])).expand(3, -1)
    vmask = verify_mask(parents, L, dtype, dev)

    def verify() -> None:
        logits = lm_forward(target, ad, embed_tokens(target, vtoks), vpos, cache, mask=vmask, rows=slice(None))
        logits.argmax(-1)

    t_ver = _median_ms(verify, reset, dev, iters, warmup)
    del cache
    Ld = text_tokens + max(1, int(video_tokens * keep))
    dcache, dad = random_prefill(draft, Ld, chunk=chunk, seed=1)
    lmask = additive_mask(torch.eye(top_k, dtype=torch.bool), Ld, dtype, dev)
    ltoks, lpos = torch.randint(0, 1000, (top_k,)), torch.full((3, top_k), L + 1)

    def level() -> None:
        logits = lm_forward(draft, dad, embed_tokens(draft, ltoks), lpos, dcache, mask=lmask, rows=slice(None))
        logits.float().log_softmax(-1).topk(top_k, dim=-1)

    def chain() -> None:
        logits = lm_forward(draft, dad, embed_tokens(draft, tok), torch.full((3, 1), L), dcache)
        logits.float().log_softmax(-1).topk(top_k, dim=-1)

    dreset = lambda: kv.truncate(dcache, Ld)  # noqa: E731
    t_lvl = _median_ms(level, dreset, dev, iters, warmup)
    t_chain = _median_ms(chain, dreset, dev, iters, warmup)
    return {"L": L, "L_draft": Ld, "t_vanilla_ms": t_van, "t_draft_ms": t_lvl, "t_draft_chain_ms": t_chain,
            "t_verify_ms": t_ver}


def projected_speedup(tau: float, t_vanilla: float, t_draft: float, t_verify: float, depth: int) -> float:
    """(τ + 1) · t_vanilla / (depth · t_draft + t_verify): decode-phase speedup bound (see module docstring)."""
    return (tau + 1.0) * t_vanilla / (depth * t_draft + t_verify)


def run(args: argparse.Namespace) -> list[dict]:
    """Build each pair, measure, project; returns one result dict per pair."""
    table = TINY_PAIRS if args.tiny else PAIRS
    dev = "cpu" if args.tiny else args.device
    dtype = torch.float32 if args.tiny else torch.bfloat16
    t_start = time.perf_counter()
    results, models = [], {}
    for key in args.pairs.split(","):
        if key not in table:
            raise SystemExit(f"unknown pair {key!r}: use {', '.join(table)}")
        if time.perf_counter() - t_start > args.budget_s:
            log.warning("time budget %.0f s used up: skipping %s", args.budget_s, key)
            continue
        name, tcfg, dcfg = table[key]
        models = {k: m for k, m in models.items() if k in (id(tcfg), id(dcfg))}  # free what is not needed
        if dev.startswith("cuda"):
            torch.cuda.empty_cache()
        for cfg in (tcfg, dcfg or tcfg):
            if id(cfg) not in models:
                log.info("building %s layers=%d hidden=%d", name, cfg["num_hidden_layers"], cfg["hidden_size"])
                models[id(cfg)] = build_model(cfg, dtype, dev)
        target, draft = models[id(tcfg)], models[id(dcfg or tcfg)]
        with torch.inference_mode():
            r = step_costs(target, draft, video_tokens=args.video_tokens, text_tokens=args.text_tokens,
                           keep=1 - args.drop_rate, nodes=args.nodes, top_k=args.top_k, iters=args.iters,
                           warmup=args.warmup, chunk=args.chunk)
        r.update(pair=name, video_tokens=args.video_tokens, nodes=args.nodes, depth=args.depth, device=dev,
                 dtype=str(dtype).replace("torch.", ""),
                 verify_over_vanilla=r["t_verify_ms"] / r["t_vanilla_ms"],
                 projected={str(t): projected_speedup(t, r["t_vanilla_ms"], r["t_draft_ms"], r["t_verify_ms"],
                                                      args.depth) for t in (2, 3, 4, 5)},
                 peak_gpu_mb=torch.cuda.max_memory_allocated() / 2**20 if dev.startswith("cuda") else None,
                 elapsed_s=time.perf_counter() - t_start)
        results.append(r)
    return results


def format_results(results: list[dict]) -> str:
    """Markdown table of step costs (ms) and projected speedups."""
    lines = ["| pair | V | L target / draft | vanilla ms | draft ms (level / chain) | verify ms | verify/vanilla "
             "| τ=2 | τ=3 | τ=4 | τ=5 |", "|" + "---|" * 11]
    for r in results:
        p = r["projected"]
        lines.append(f"| {r['pair']} | {r['video_tokens']} | {r['L']} / {r['L_draft']} | {r['t_vanilla_ms']:.2f} | "
                     f"{r['t_draft_ms']:.2f} / {r['t_draft_chain_ms']:.2f} | {r['t_verify_ms']:.2f} | "
                     f"{r['verify_over_vanilla']:.2f}x | " + " | ".join(f"{p[t]:.2f}x" for t in "2345") + " |")
    lines.append(f"\nprojected speedup = (τ + 1) · t_vanilla / (depth · t_draft + t_verify), depth = "
                 f"{results[0]['depth'] if results else '-'}, t_draft = one tree level; decode phase only.")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tiny", action="store_true", help="tiny models on the CPU (the test); default real sizes on CUDA")
    p.add_argument("--pairs", default="7b-self,32b-7b", help="comma list of 7b-self, 32b-7b (default both)")
    p.add_argument("--device", default="cuda", help="CUDA device (ignored with --tiny)")
    p.add_argument("--video-tokens", type=int, default=None, help="V (default 16384; 512 with --tiny)")
    p.add_argument("--text-tokens", type=int, default=64, help="non-video prompt tokens (default 64)")
    p.add_argument("--drop-rate", type=float, default=0.9, help="r: the draft keeps (1 - r) of V (default 0.9)")
    p.add_argument("--nodes", type=int, default=16, help="tree nodes verified besides the root (default 16)")
    p.add_argument("--top-k", type=int, default=4, help="nodes per draft tree level (default 4)")
    p.add_argument("--depth", type=int, default=5, help="draft tree depth = draft forwards per step (default 5)")
    p.add_argument("--iters", type=int, default=20, help="timed repetitions per step (default 20)")
    p.add_argument("--warmup", type=int, default=3, help="untimed repetitions first (default 3)")
    p.add_argument("--chunk", type=int, default=4096, help="prefill chunk in tokens (default 4096)")
    p.add_argument("--budget-s", type=float, default=420.0, help="skip remaining pairs after this many s (420)")
    p.add_argument("--out-json", help="also write the results as JSON")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", stream=sys.stderr)
    if args.video_tokens is None:
        args.video_tokens = 512 if args.tiny else 16384
    if not args.tiny and not torch.cuda.is_available():
        print("error: no CUDA device; use --tiny for the CPU version", file=sys.stderr)
        return 2
    results = run(args)
    print(format_results(results))
    if args.out_json:
        Path(args.out_json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
