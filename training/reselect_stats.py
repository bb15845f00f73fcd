"""Statistics of the re-selection evaluation (:mod:`training.eval_reselect`): pure functions over its rows.

A row is one decode of one clip (``set``, ``index``, ``pair``, ``run``) with its counts: accepted draft tokens
and verify steps (τ = their pooled ratio, bonus token excluded), generated tokens, decode seconds, the
draft's cost, the video tokens re-selection added. Differences between two runs are paired over the clips
both finished, with a 95% percentile bootstrap over clips of the pooled ratios
(:func:`training.eval_sparse.paired_difference`); the share of the τ lost to pruning that re-selection
recovers is bootstrapped the same way (:func:`recovered_share`).

Source: the τ convention of docs/design.md §4.12; the paired bootstrap of training/eval_sparse.py.
"""
from __future__ import annotations

import numpy as np

from specvlm.config import ReselectConfig
from training import eval_sparse as es

SPEC_RUNS = ("none", "specvlm", "reselect", "adaptive")
"""Speculative runs per clip and pair: unpruned draft, SpecVLM at r = 0.9, + re-selection, + adaptive r."""
ALL_RUNS = SPEC_RUNS + ("textkept",)
"""Also ``textkept``, a diagnostic: SpecVLM with the tokens under the on-screen text forced into the kept set."""
MEASURES = {
    "tau": ("accepted", "steps"),
    "tokens_per_s": ("decoded", "decode_s"),
    "tau_per_kcost": ("accepted", "kcost"),
}
"""measure -> (numerator, denominator) of a row; a measure is the pooled ratio over clips. ``decoded``: tokens
of the decode steps (the prefill's token excluded); ``kcost``: draft cost in thousands of token reads."""


def ratio_pairs(rows: dict, run: str, measure: str) -> np.ndarray:
    """float64 (C, 2) of (numerator, denominator) of ``measure`` for ``run`` over the clips of ``rows``.

    Args:
        rows: clip key -> {run: row} (every clip holding ``run``).
        run, measure: a run name and a key of :data:`MEASURES`.
    """
    num, den = MEASURES[measure]
    return np.array([[by_run[run][num], by_run[run][den]] for by_run in rows.values()], dtype=float)


def pooled(pairs: np.ndarray) -> float | None:
    """Σ numerator / Σ denominator of (C, 2) pairs; None when the denominator sums to 0."""
    den = float(pairs[:, 1].sum()) if len(pairs) else 0.0
    return float(pairs[:, 0].sum()) / den if den > 0 else None


def paired_ci(a: np.ndarray, b: np.ndarray, n_boot: int = 2000, seed: int = 0) -> dict | None:
    """Pooled ratio of ``a`` minus that of ``b`` (the same clips, in order) with a paired 95% bootstrap.

    Args:
        a, b: float (C, 2) (numerator, denominator) per clip.
        n_boot, seed: bootstrap replicates and their RNG seed.

    Returns:
        {"diff", "lo", "hi", "wins", "ties", "losses", "clips"} (:func:`training.eval_sparse.paired_difference`),
        or None without clips or with a zero denominator.
    """
    recs = [{"tau": {"a": list(x), "b": list(y)}} for x, y in zip(a, b)]
    return es.paired_difference(recs, "a", "b", n_boot=n_boot, seed=seed)


def recovered_share(pruned: np.ndarray, unpruned: np.ndarray, reselect: np.ndarray,
                    n_boot: int = 2000, seed: int = 0) -> dict | None:
    """Share of the τ lost to pruning that re-selection recovers, (τ_res − τ_pru) / (τ_unp − τ_pru).

    Each τ is pooled over the clips' verify steps; the 95% interval is the percentile bootstrap over clips
    (the same clips resampled for all three runs). A replicate where pruning lost no τ has no share and is left
    out (counted in ``undefined``).

    Args:
        pruned, unpruned, reselect: float (C, 2) (accepted, steps) per clip, the same clips in order.
        n_boot, seed: bootstrap replicates and their RNG seed.

    Returns:
        {"share", "lo", "hi", "lost", "recovered", "clips", "undefined"} (``lost`` = τ_unp − τ_pru,
        ``recovered`` = τ_res − τ_pru); ``share``, ``lo``, ``hi`` None when pruning lost no τ over all clips;
        None without clips.
    """
    n = len(pruned)
    if n == 0 or min(x[:, 1].sum() for x in (pruned, unpruned, reselect)) <= 0:
        return None
    p, u, r = (pooled(x) for x in (pruned, unpruned, reselect))
    out = {"lost": u - p, "recovered": r - p, "clips": n, "share": None, "lo": None, "hi": None, "undefined": 0}
    if u - p <= 0:
        return out
    idx = np.random.default_rng(seed).integers(0, n, size=(n_boot, n))

    def boot(x: np.ndarray) -> np.ndarray:
        return x[idx, 0].sum(1) / np.maximum(x[idx, 1].sum(1), 1e-12)

    bp, bu, br = boot(pruned), boot(unpruned), boot(reselect)
    ok = bu - bp > 1e-12
    shares = (br[ok] - bp[ok]) / (bu[ok] - bp[ok])
    out.update(share=(r - p) / (u - p), undefined=int((~ok).sum()))
    if len(shares):
        out.update(lo=float(np.percentile(shares, 2.5)), hi=float(np.percentile(shares, 97.5)))
    return out


def complete_clips(rows: list[dict], kind: str, pair: str, runs: tuple) -> dict:
    """(set, index) -> {run: row} for the clips of set ``kind`` holding vanilla and every run of ``runs``
    for ``pair`` (vanilla rows have pair "target")."""
    by: dict = {}
    for r in rows:
        if r["set"] == kind and r["pair"] in (pair, "target"):
            by.setdefault(r["index"], {})[r["run"]] = r
    return {(kind, i): v for i, v in sorted(by.items()) if "vanilla" in v and all(k in v for k in runs)}


def pruning_refusals(clips: dict) -> dict | None:
    """Refusals SpecVLM's draft meets where the unpruned draft met none (same output position), and how many
    fall on the output's on-screen-text sentence or its subtitle-fact sentence; None when the rows lack
    the positions."""
    rows = [c for c in clips.values() if "refused_at" in c["specvlm"] and "refused_at" in c["none"]
            and "text_at" in c["vanilla"]]
    if not rows:
        return None
    extra = [(c, p) for c in rows for p, _ in c["specvlm"]["refused_at"]
             if p not in {q for q, _ in c["none"]["refused_at"]}]
    return {"clips": len(rows), "extra": len(extra),
            "on_text": sum(p in c["vanilla"]["text_at"] for c, p in extra),
            "on_fact": sum(p in c["vanilla"]["fact_at"] for c, p in extra)}


def _run_stats(clips: dict, run: str, min_share: float) -> dict:
    rows = [c[run] for c in clips.values()]
    out = {m: pooled(ratio_pairs(clips, run, m)) for m in MEASURES}
    out["mismatches"] = sum(not r["identical"] for r in rows)
    out["draft_ms_per_step"] = 1000 * sum(r["draft_s"] for r in rows) / max(1, sum(r["steps"] for r in rows))
    out["kcost_per_step"] = sum(r["kcost"] for r in rows) / max(1, sum(r["steps"] for r in rows))
    van = ratio_pairs(clips, "vanilla", "tokens_per_s")
    out["speedup"] = (out["tokens_per_s"] / pooled(van)) if out["tokens_per_s"] and pooled(van) else None
    out["draft_video_tokens"] = float(np.mean([r["draft_video_tokens"] for r in rows]))
    out["added_per_clip"] = float(np.mean([r["added"] for r in rows]))
    out["steps_added"] = sum(r["steps_added"] for r in rows)
    out["clips_added"] = sum(r["added"] > 0 for r in rows)
    for t in ("text", "flash"):
        held = [r["hits"][t] for r in rows if t in r["hits"]]
        if held:
            out[f"{t}_kept"] = float(np.mean([h["kept"] > 0 for h in held]))
            out[f"{t}_added"] = sum(h["added"] for h in held)
            out[f"{t}_final"] = float(np.mean([h["kept"] + h["added"] > 0 for h in held]))
            out[f"{t}_kept_share"] = sum(h["kept"] for h in held) / max(1, sum(h["tokens"] for h in held))
            out[f"{t}_stage1_share"] = sum(h["stage1"] for h in held) / max(1, sum(h["tokens"] for h in held))
    r_used = [r["r_used"] for r in rows if r.get("r_used") is not None]
    if r_used:
        out["r_used"] = {"mean": float(np.mean(r_used)), "min": float(min(r_used)), "max": float(max(r_used)),
                         "examples": list(dict.fromkeys(str(r.get("r_reason")) for r in rows))[:2]}
    shares = [x for r in rows for x in r.get("unseen_shares", [])]
    if shares:
        out["unseen_share"] = {"measured": len(shares), "mean": float(np.mean(shares)),
                               "median": float(np.median(shares)),
                               "above_min": sum(x > min_share for x in shares)}
    return out


def summarise_pair(rows: list[dict], kind: str, pair: str, runs: tuple, n_boot: int = 2000,
                   min_share: float = ReselectConfig.min_share) -> dict | None:
    """Everything the report shows for one set and pair, over the clips that finished every run
    (``min_share``: re-selection's threshold, to count the measured steps above it).

    Returns:
        {"clips", "runs": {run: stats}, "diff": {name: paired_ci}, "recovered_share", "vanilla": accuracy},
        or None when no clip finished every run.
    """
    clips = complete_clips(rows, kind, pair, runs)
    if not clips:
        return None
    out = {"clips": len(clips), "runs": {r: _run_stats(clips, r, min_share) for r in runs}, "diff": {}}
    out["runs"]["vanilla"] = {"tokens_per_s": pooled(ratio_pairs(clips, "vanilla", "tokens_per_s"))}
    comparisons = [("reselect", "specvlm", "tau"), ("adaptive", "specvlm", "tau"), ("none", "specvlm", "tau"),
                   ("textkept", "specvlm", "tau"),
                   ("reselect", "specvlm", "tokens_per_s"), ("adaptive", "specvlm", "tokens_per_s"),
                   ("adaptive", "specvlm", "tau_per_kcost"), ("reselect", "specvlm", "tau_per_kcost")]
    for a, b, m in comparisons:
        if a in runs and b in runs:
            out["diff"][f"{a}-{b}:{m}"] = paired_ci(ratio_pairs(clips, a, m), ratio_pairs(clips, b, m), n_boot)
    if {"none", "specvlm", "reselect"} <= set(runs):
        out["recovered_share"] = recovered_share(*(ratio_pairs(clips, r, "tau") for r in
                                                   ("specvlm", "none", "reselect")), n_boot=n_boot)
    out["pruning_refusals"] = pruning_refusals(clips) if {"none", "specvlm"} <= set(runs) else None
    out["vanilla"] = {}
    for attr, has in (("text", "has_text"), ("fact", "has_fact")):
        held = [c["vanilla"]["correct"][attr] for c in clips.values() if c["vanilla"][has]]
        out["vanilla"][attr] = float(np.mean(held)) if held else None
        out["vanilla"][f"clips_with_{attr}"] = len(held)
    return out
