"""``scripts/gpu_check.py``'s result rows and tables: step costs beside their byte floors, and projections.

Per setup and variant (SpecVLM plain, or with re-selection), the runs' decode step, draft level (the
run's draft time per step over the tree's depth)
and verify step are set beside their byte floors (bytes read / the GPU's memory bandwidth,
:mod:`specvlm.models.ceiling`), and the decode-phase speedup the measured costs imply is projected at the τ of
:data:`specvlm.models.ceiling.PROJECTION_TAUS` (and the paper's, where it states one):

    speedup(τ) = (τ + 1) · t_decode / (depth · t_level + t_verify)

next to the byte ceiling, the same formula with every step at its floor.

Source: docs/design.md §4.12 (τ), §11 (byte floor, ceilings by pair).
"""
from __future__ import annotations

from typing import Any

from specvlm.config import TreeConfig
from specvlm.models.ceiling import (PROJECTION_TAUS, Ceiling, DecoderDims, byte_floor_ms, projected_speedup,
                                    tau_needed)
from specvlm.testing import realdims

from scripts.gpu_costs import median

PAPER_TAU = {"qwen7-self": 3.8}
"""Mean accepted length τ the paper reports (docs/design.md §5: Self-SD 7B τ ≈ 3.8-4.4)."""
PAPER_SPEEDUP = {"qwen32-qwen7": 2.11, "llava72-llava7": 2.68}
"""Decoding speedups the paper reports (abstract, Sec. 4): the τ they need is printed."""


def dims(arch: realdims.Arch) -> DecoderDims:
    """The decoder dimensions of a real-dimension architecture."""
    return DecoderDims(arch.hidden, arch.layers, arch.heads, arch.kv_heads, arch.head_dim, arch.intermediate,
                       arch.vocab)


def floors(target: realdims.Arch, draft: realdims.Arch | None, video_tokens: int, L: int, L_draft: int,
           dtype_bytes: int, bandwidth: float, depth: int) -> dict:
    """Byte floors (ms) of a decode step, a verify step and a draft level at full depth, and the byte ceiling.

    Args:
        target, draft: architectures (draft None = Self-SD).
        video_tokens: V of the prompt.
        L, L_draft: tokens the target's and the draft's caches hold.
        dtype_bytes: bytes per parameter and cache entry.
        bandwidth: memory bandwidth (bytes/s).
        depth: draft tree levels per step.

    Returns:
        {bandwidth, target_step_bytes, draft_level_bytes, decode_ms, verify_ms, draft_level_ms,
        ceiling: {all_accepted, "τ": speedup}}.
    """
    t, d = dims(target), dims(draft or target)
    c = Ceiling(video_tokens, t.step_bytes(L, dtype_bytes), d.step_bytes(L_draft, dtype_bytes), depth)
    step = byte_floor_ms(c.target_step_bytes, bandwidth)
    return {"bandwidth": bandwidth, "target_step_bytes": c.target_step_bytes, "draft_level_bytes": c.draft_level_bytes,
            "decode_ms": step, "verify_ms": step, "draft_level_ms": byte_floor_ms(c.draft_level_bytes, bandwidth),
            "ceiling": {"all_accepted": c.all_accepted, **{str(x): c.speedup(x) for x in PROJECTION_TAUS}}}


def variant_row(key: str, runs: dict, scale: float, draft_scale: float, floor: dict, depth: int) -> dict:
    """One variant's costs (scaled to full depth), their ratio to the byte floors, and the projections."""
    kinds = [r["kind"] for r in runs["runs"]]
    t_dec = median(runs["decode_ms"]) * scale
    t_ver = median(runs["verify_step_ms"]) * scale
    t_level = median(runs["draft_step_ms"]) * draft_scale / depth
    row = {"counts": {k: kinds.count(k) for k in ("identical", "near-tie", "mismatch")},
           "divergences": [r for r in runs["runs"] if r["kind"] != "identical"], "warmup_s": runs["warmup_s"],
           "prefill_vanilla_s": median(runs["prefill_vanilla_s"]),
           "prefill_specvlm_s": median(runs["prefill_specvlm_s"]),
           "prune_s": median(runs["prune_s"]), "draft_prefill_s": median(runs["draft_prefill_s"]),
           "decode_step_ms": t_dec, "draft_level_ms": t_level, "verify_step_ms": t_ver,
           "tau_random_weights": median(runs["tau_random_weights"]),
           "vs_floor": {"decode": t_dec / floor["decode_ms"], "verify": t_ver / floor["verify_ms"],
                        "draft_level": t_level / floor["draft_level_ms"]}}
    ok = t_dec > 0 and t_ver > 0
    row["projected"] = {str(x): projected_speedup(x, t_dec, t_level, t_ver, depth) if ok else None
                        for x in PROJECTION_TAUS}
    if key in PAPER_TAU and ok:
        row.update(paper_tau=PAPER_TAU[key],
                   speedup_at_paper_tau=projected_speedup(PAPER_TAU[key], t_dec, t_level, t_ver, depth))
    if key in PAPER_SPEEDUP and ok:
        row.update(paper_speedup=PAPER_SPEEDUP[key],
                   tau_for_paper_speedup=tau_needed(PAPER_SPEEDUP[key], t_dec, t_level, t_ver, depth))
    return row


def summarize(setup: Any, by_variant: dict[str, dict], curve: dict, level_ms: float, built_layers: int,
              dtype_bytes: int, bandwidth: float) -> dict:
    """One result row: sizes, byte floors, per variant costs and projections, the isolated step costs."""
    depth = TreeConfig().depth
    scale = setup.target.layers / built_layers
    first = next(iter(by_variant.values()))
    floor = floors(setup.target, setup.draft, first["video_tokens"], first["L"], first["L_draft"], dtype_bytes,
                   bandwidth, depth)
    draft_scale = scale if setup.draft is None else 1.0
    n_verify = min(TreeConfig().total_tokens + 1, max(curve["verify_ms"]))
    return {"key": setup.key, "pair": setup.name, "target_layers": f"{built_layers}/{setup.target.layers}",
            "depth_scale": scale, "video_tokens": first["video_tokens"], "L": first["L"], "L_draft": first["L_draft"],
            "floor": floor, "variants": {e: variant_row(setup.key, r, scale, draft_scale, floor, depth)
                                        for e, r in by_variant.items()},
            "isolated": {"decode_ms": curve["decode_ms"] * scale, "draft_level_ms": level_ms * draft_scale,
                         "verify_curve_ms": {n: v * scale for n, v in curve["verify_ms"].items()},
                         "verify_ratio": curve["ratio"], "n_verify": n_verify}}


def _x(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}x"


def format_results(rows: list[dict], device_name: str) -> str:
    """Markdown tables: costs beside byte floors per setup and variant, projections, the isolated verify curve."""
    bw = rows[0]["floor"]["bandwidth"] / 1e12 if rows else 0.0
    out = [f"Device: {device_name} (memory bandwidth {bw:.3g} TB/s)", "",
           "| setup | variant | target layers | V | L / L_draft | identical / near-tie / mismatch | warm-up s | "
           "decode ms (x floor) | draft level ms (x floor) | verify step ms (x floor) |", "|" + "---|" * 10]
    for r in rows:
        f = r["floor"]
        for e, x in r["variants"].items():
            c, v = x["counts"], x["vs_floor"]
            out.append(f"| {r['pair']} | {e} | {r['target_layers']} | {r['video_tokens']} | {r['L']} / "
                       f"{r['L_draft']} | {c['identical']} / {c['near-tie']} / {c['mismatch']} | {x['warmup_s']:.1f} | "
                       f"{x['decode_step_ms']:.2f} ({v['decode']:.1f}x of {f['decode_ms']:.2f}) | "
                       f"{x['draft_level_ms']:.2f} ({v['draft_level']:.1f}x of {f['draft_level_ms']:.2f}) | "
                       f"{x['verify_step_ms']:.2f} ({v['verify']:.1f}x of {f['verify_ms']:.2f}) |")
            for d in x["divergences"]:
                m = "n/a" if d["margin"] is None else f"{d['margin']:.4f}"
                out.append(f"- {r['pair']} ({e}): {d['kind']} at token {d['index']}, target top-1 minus top-2 {m}")
    taus = [str(t) for t in PROJECTION_TAUS]
    out += ["", "| setup | variant | " + " | ".join(f"τ={t}" for t in taus) + " | at the paper's τ | "
            "τ needed for the paper's speedup |", "|" + "---|" * (len(taus) + 4)]
    for r in rows:
        for e, x in r["variants"].items():
            at = f"{x['speedup_at_paper_tau']:.2f}x (τ = {x['paper_tau']})" if "paper_tau" in x else "-"
            need = f"τ = {x['tau_for_paper_speedup']:.2f} for {x['paper_speedup']}x" if "paper_speedup" in x else "-"
            cells = " | ".join(_x(x["projected"][t]) for t in taus)
            out.append(f"| {r['pair']} | {e} | {cells} | {at} | {need} |")
        ceil = r["floor"]["ceiling"]
        out.append(f"| {r['pair']} | byte floor | " + " | ".join(_x(ceil[t]) for t in taus)
                   + f" | every draft accepted: {_x(ceil['all_accepted'])} | - |")
    sizes = (1, 2, 4, 8, 16, 17, 24, 32)
    out += ["", "Isolated eager forwards: verify(n) ms after L cached tokens (ratio to one decode step):", "",
            "| setup | decode | draft level | " + " | ".join(f"n={n}" for n in sizes) + " |", "|" + "---|" * 11]
    for r in rows:
        i = r["isolated"]
        cells = [f"{i['verify_curve_ms'][n]:.2f} ({i['verify_ratio'][n]:.2f}x)" if n in i["verify_curve_ms"] else "-"
                 for n in sizes]
        out.append(f"| {r['pair']} | {i['decode_ms']:.2f} | {i['draft_level_ms']:.2f} | " + " | ".join(cells) + " |")
    depth = TreeConfig().depth
    out.append(f"\nprojected speedup = (τ + 1) · t_decode / ({depth} · t_level + t_verify); decode phase only; "
               "t_level = the run's draft time per step / depth; byte floor = (weights + KV bytes) / bandwidth; "
               "target costs of a reduced-depth build are scaled to full depth (layers ratio). Accepted lengths of "
               "random weights are not meaningful: τ comes from the paper. Warm-up: the wall time of an untimed "
               "short vanilla + SpecVLM pair of runs, which holds any graph capture or compilation.")
    return "\n".join(out)
