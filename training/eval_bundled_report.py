"""The bundled evaluation's summary (:mod:`training.eval_bundled`): accuracy, τ per method with SpecVLM's
paired differences, identity, object and text coverage, the quality goals, and the markdown report.

Source: Efron & Tibshirani (1993), percentile bootstrap intervals (the paired τ differences).
"""
from __future__ import annotations

import numpy as np

from specvlm.analysis.metrics import speedup
from specvlm.bench import synth
from training.eval_clips import TRAIN_SEED_LIMIT

ATTRS = ("colour", "shape", "motion", "count", "text")
BASELINES = ("random", "uniform", "window-middle", "frame", "attention")
METHODS = ("specvlm",) + BASELINES
PAIRS = ("std", "self")
PAIR_NAMES = {"std": "Std-SD (bundled draft)", "self": "Self-SD (target as draft)"}


def _ratio(a: float, b: float) -> float | None:
    return a / b if b else None


def motion_confusion(records: list[dict]) -> dict[str, dict[str, int]]:
    """True motion -> {predicted motion (``"missing"`` when the object was not named): count}, from the
    ``motion_pairs`` of :func:`score_caption` (records without them are skipped)."""
    conf: dict[str, dict[str, int]] = {}
    for r in records:
        for true, pred in r["correct"].get("motion_pairs", []):
            row = conf.setdefault(true, {})
            row[pred or "missing"] = row.get(pred or "missing", 0) + 1
    return conf


def tau_differences(recs: list[dict], pairs, methods, n_boot: int = 2000, seed: int = 0) -> dict:
    """SpecVLM's pooled τ minus each baseline's, with a paired bootstrap over videos.

    Pooled τ = accepted draft tokens / verify steps over the videos (as in the τ table). The
    bootstrap resamples videos with replacement (the same videos for both methods: paired) and
    takes the 2.5th and 97.5th percentiles of the difference (Efron & Tibshirani 1993, percentile
    interval). Per video it also counts wins / ties / losses of SpecVLM's τ.

    Args:
        recs: per-video records of one set (``rec["tau"][f"{pair}/{method}"] = [accepted, steps]``).
        pairs, methods: which ``pair/method`` keys to compare with ``pair/specvlm``.

    Returns:
        ``{"pair/method": {"diff", "lo", "hi", "wins", "ties", "losses"}}`` for every baseline present.
    """
    rng = np.random.default_rng(seed)
    out: dict = {}
    for p in pairs:
        for m in methods:
            a_key, b_key = f"{p}/specvlm", f"{p}/{m}"
            both = [r for r in recs if a_key in r["tau"] and b_key in r["tau"]]
            if m == "specvlm" or not both:
                continue
            a = np.array([r["tau"][a_key] for r in both], dtype=float)      # (N, 2): accepted, steps
            b = np.array([r["tau"][b_key] for r in both], dtype=float)
            if a[:, 1].sum() == 0 or b[:, 1].sum() == 0:
                continue
            idx = rng.integers(0, len(both), size=(n_boot, len(both)))
            boot = (a[idx, 0].sum(1) / np.maximum(a[idx, 1].sum(1), 1)
                    - b[idx, 0].sum(1) / np.maximum(b[idx, 1].sum(1), 1))
            per = a[:, 0] / np.maximum(a[:, 1], 1) - b[:, 0] / np.maximum(b[:, 1], 1)
            out[b_key] = {"diff": float(a[:, 0].sum() / a[:, 1].sum() - b[:, 0].sum() / b[:, 1].sum()),
                          "lo": float(np.percentile(boot, 2.5)), "hi": float(np.percentile(boot, 97.5)),
                          "wins": int((per > 1e-9).sum()), "ties": int((np.abs(per) <= 1e-9).sum()),
                          "losses": int((per < -1e-9).sum())}
    return out


def _diff_text(d: dict) -> str:
    sig = "significant" if d["lo"] > 0 or d["hi"] < 0 else "not significant"
    return f"{d['diff']:+.2f}, 95% CI {d['lo']:+.2f}..{d['hi']:+.2f}: {sig}"


def summarise(records: list[dict], args) -> dict:
    """Aggregate per-video records into accuracy, τ, identity and coverage summaries per set."""
    out: dict = {}
    for kind in args.sets:
        recs = [r for r in records if r["set"] == kind]
        if not recs:
            continue
        acc: dict = {}
        for a in ("colour", "shape", "motion", "enter_leave"):
            k = sum(r["correct"][a][0] for r in recs)
            n = sum(r["correct"][a][1] for r in recs)
            acc[a] = k / n if n else None
        for a in ("count", "text", "text_presence", "exact"):
            acc[a] = sum(r["correct"][a] for r in recs) / len(recs)
        acc["mean5"] = float(np.mean([acc[a] for a in ATTRS]))
        acc["min5"] = float(min(acc[a] for a in ATTRS))
        tau, tptf, mism, speed, nruns = {}, {}, {}, {}, {}
        van_s = sum(r["vanilla_decode_s"] for r in recs)
        keys = list(dict.fromkeys(k for r in recs for k in r["tau"]))
        for key in keys:
            has = [r for r in recs if key in r["tau"]]
            acc_sum = sum(r["tau"][key][0] for r in has)
            steps = sum(r["tau"][key][1] for r in has)
            tau[key] = acc_sum / steps if steps else 0.0
            tptf[key] = (acc_sum + steps) / steps if steps else 0.0
            if not key.endswith("@text"):  # a copy of <pair>/specvlm on the text clips
                mism[key] = sum(not r["identical"][key] for r in has)
                nruns[key] = len(has)
            speed[key] = speedup(sum(r["vanilla_decode_s"] for r in has), sum(r["decode_s"][key] for r in has))
        text_recs = [r for r in recs if "text_tokens" in r]
        text_stats = None
        if text_recs:
            n_tt = sum(r["text_tokens"]["text_tokens"] for r in text_recs)
            text_stats = {"clips": len(text_recs), "text_tokens_mean": n_tt / len(text_recs)}
            for st in ("kept", "stage1", "stage2"):
                if all(st in r["text_tokens"] for r in text_recs):  # token-weighted share
                    text_stats[st] = sum(r["text_tokens"][st] * r["text_tokens"]["text_tokens"]
                                         for r in text_recs) / max(n_tt, 1)
            text_stats["keep_rate"] = float(np.mean([r["text_tokens"].get("keep_rate", 0.0) for r in text_recs]))
        cov_all = sum(r["share"]["area"] * r["share"]["num_tokens"] for r in recs)
        n_all = sum(r["share"]["num_tokens"] for r in recs)
        area = cov_all / n_all
        s1 = [r["share"]["stage1"] for r in recs if "stage1" in r["share"]]
        s1_share = _ratio(sum(c for c, _ in s1), sum(k for _, k in s1))
        touch_s1 = _ratio(sum(r["share"].get("stage1_touch", 0) for r in recs), sum(k for _, k in s1))
        touch_all = _ratio(sum(r["share"].get("area_touch", 0) * r["share"]["num_tokens"] for r in recs), n_all)
        keep = {}
        for m in args.methods:
            vals = [r["share"]["keep"][m] for r in recs if m in r["share"]["keep"]]
            if vals:
                sh = _ratio(sum(c for c, _ in vals), sum(k for _, k in vals))
                keep[m] = {"share": sh, "ratio": _ratio(sh, area) if sh is not None else None}
        per_video = [_ratio(r["share"]["stage1"][0] / r["share"]["stage1"][1], r["share"]["area"])
                     for r in recs if r["share"].get("stage1", [0, 0])[1] and r["share"]["area"] > 0]
        out[kind] = {
            "num_videos": len(recs),
            "video_tokens_mean": float(np.mean([r["video_tokens"] for r in recs])),
            "frames": sorted({r["frames"] for r in recs}),
            "accuracy": acc,
            "tau": tau, "tokens_per_target_forward": tptf, "mismatches": mism, "runs": nruns,
            "tau_vs_specvlm": tau_differences(recs, args.pairs, args.methods),
            "decode_speedup_vs_vanilla": speed,
            "coverage": {
                "area_share": area, "stage1_share": s1_share, "stage1_ratio": _ratio(s1_share, area),
                "stage1_ratio_median_per_video": float(np.median(per_video)) if per_video else None,
                "stage1_tokens_mean": float(np.mean([k for _, k in s1])) if s1 else None,
                "touch_share_all": touch_all, "touch_share_stage1": touch_s1,
                "keep_sets": keep,
            },
            "on_screen_text": text_stats,
            "motion_confusion": motion_confusion(recs),
            "seconds_per_video": float(np.mean([r["seconds"] for r in recs])),
        }
    return out


def goals(summary: dict, args) -> dict:
    """The bundled pair's quality checks, each -> {"met": bool | None, "detail": str}."""
    g: dict = {}
    s = summary.get("short")
    if s:
        acc = s["accuracy"]
        g["short accuracy mean >= 90%, none < 75%"] = {
            "met": acc["mean5"] >= 0.9 and acc["min5"] >= 0.75,
            "detail": f"mean {acc['mean5']:.1%}, min {acc['min5']:.1%}"}
    lg = summary.get("long")
    if lg:
        for p in args.pairs:
            t = lg["tau"]
            if f"{p}/specvlm" not in t:
                continue
            sv = t[f"{p}/specvlm"]
            others = {m: t[f"{p}/{m}"] for m in ("random", "window-middle") if f"{p}/{m}" in t}
            diffs = lg.get("tau_vs_specvlm", {})
            g[f"long tau {PAIR_NAMES[p]} >= 2.5 and > random, window-middle"] = {
                "met": (sv >= 2.5 and all(sv > v for v in others.values())) if len(others) == 2 else None,
                "detail": f"specvlm {sv:.2f}; " + ", ".join(
                    f"{m} {v:.2f}" + (f" ({_diff_text(diffs[f'{p}/{m}'])})" if f"{p}/{m}" in diffs else "")
                    for m, v in others.items())}
    for kind, s in summary.items():
        r = s["coverage"]["stage1_ratio"]
        g[f"{kind}: Stage I on object/text >= 2x area share"] = {
            "met": r is not None and r >= 2.0,
            "detail": f"{s['coverage']['stage1_share']:.1%} vs {s['coverage']['area_share']:.1%} "
                      f"({r:.2f}x)" if r is not None else "no Stage I tokens"}
    total = sum(v for s in summary.values() for v in s["mismatches"].values())
    runs = sum(sum(s["runs"].values()) if "runs" in s else s["num_videos"] * len(s["mismatches"])
               for s in summary.values())
    g["greedy SpecVLM/baselines identical to vanilla on every video"] = {
        "met": total == 0, "detail": f"{total} mismatches in {runs} speculative runs"}
    return g


def _pct(x) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def markdown(summary: dict, goal: dict, args, meta: dict) -> str:
    """A markdown report of the summary."""
    sets = [k for k in ("short", "long") if k in summary]
    L = [f"# Bundled model evaluation ({meta['num_videos']} held-out videos per set)", ""]
    L.append("Sets: " + "; ".join(
        f"**{k}**: {summary[k]['num_videos']} clips, {'/'.join(map(str, summary[k]['frames']))} frames, "
        f"{summary[k]['video_tokens_mean']:.0f} video tokens on average" for k in sets) + ".")
    L.append(f"Seeds from {args.seed_base:,} (training < {TRAIN_SEED_LIMIT:,}); prompt \"{args.prompt}\"; "
             f"greedy, max {args.max_new_tokens} new tokens; r = {args.drop_rate}, λ = {args.top_p}; "
             f"draft tree: {_tree_text(args)}.")
    L += ["", "## Attribute accuracy (greedy detailed description)", "",
          "| attribute | " + " | ".join(sets) + " |", "|---|" + "---|" * len(sets)]
    for a in ATTRS + ("mean5", "min5", "enter_leave", "text_presence", "exact"):
        label = {"mean5": "**mean of the 5**", "min5": "lowest of the 5", "enter_leave": "(appears/leaves)",
                 "text_presence": "(text present or not)", "exact": "(exact caption)"}.get(a, a)
        L.append(f"| {label} | " + " | ".join(_pct(summary[k]["accuracy"][a]) for k in sets) + " |")
    for k in sets:
        conf = summary[k].get("motion_confusion") or {}
        if not conf:
            continue
        cols_m = list(synth.MOTIONS) + ["missing"]
        L += ["", f"Motion confusion, {k} (rows: true motion; columns: what the caption said)", "",
              "| true → said | " + " | ".join(cols_m) + " |", "|---|" + "---|" * len(cols_m)]
        for t in synth.MOTIONS:
            row = conf.get(t, {})
            L.append(f"| {t} | " + " | ".join(str(row.get(c, 0)) for c in cols_m) + " |")
    L += ["", "## Mean accepted length τ at r = %.2f (bonus token excluded; pooled over verify steps)" % args.drop_rate,
          ""]
    cols = [(k, p) for p in args.pairs for k in sets]
    L.append("| method | " + " | ".join(f"{PAIR_NAMES[p].split(' ')[0]} {k}" for k, p in cols) + " |")
    L.append("|---|" + "---|" * len(cols))
    for m in args.methods:
        L.append(f"| {m} | " + " | ".join(f"{summary[k]['tau'].get(f'{p}/{m}', float('nan')):.2f}"
                                          for k, p in cols) + " |")
    L += ["", "Outputs differing from vanilla (count of videos): " + "; ".join(
        f"{PAIR_NAMES[p].split(' ')[0]} {k}: {sum(summary[k]['mismatches'][f'{p}/{m}'] for m in args.methods)}"
        for k, p in cols) + "."]
    L.append("Decode-time speedup vs vanilla (CPU, indicative only): " + "; ".join(
        f"{PAIR_NAMES[p].split(' ')[0]} {k} specvlm {summary[k]['decode_speedup_vs_vanilla'].get(f'{p}/specvlm') or 0:.2f}x"
        for k, p in cols if f"{p}/specvlm" in summary[k]["decode_speedup_vs_vanilla"]) + ".")
    diff_rows = [(k, p, m) for k, p in cols for m in args.methods
                 if f"{p}/{m}" in summary[k].get("tau_vs_specvlm", {})]
    if diff_rows:
        L += ["", "SpecVLM's τ minus each baseline's (pooled; 95% paired bootstrap interval over videos; per-video "
                  "wins / ties / losses of SpecVLM):", "",
              "| set | pair | baseline | τ difference | 95% CI | wins / ties / losses |", "|---|---|---|---|---|---|"]
        for k, p, m in diff_rows:
            d = summary[k]["tau_vs_specvlm"][f"{p}/{m}"]
            L.append(f"| {k} | {PAIR_NAMES[p].split(' ')[0]} | {m} | {d['diff']:+.2f} | {d['lo']:+.2f}..{d['hi']:+.2f} "
                     f"| {d['wins']} / {d['ties']} / {d['losses']} |")
    L += ["", "## Where the kept video tokens fall (object boxes + text box)", "",
          "| | " + " | ".join(sets) + " |", "|---|" + "---|" * len(sets)]
    L.append("| area share of object/text pixels | " + " | ".join(
        _pct(summary[k]["coverage"]["area_share"]) for k in sets) + " |")
    L.append("| **Stage I** kept tokens: object/text pixel share | " + " | ".join(
        f"{_pct(summary[k]['coverage']['stage1_share'])} ({summary[k]['coverage']['stage1_ratio'] or 0:.2f}x)"
        for k in sets) + " |")
    L.append("| Stage I tokens per video (mean) | " + " | ".join(
        f"{summary[k]['coverage']['stage1_tokens_mean'] or 0:.1f}" for k in sets) + " |")
    L.append("| tokens touching an object/text: all / Stage I | " + " | ".join(
        f"{_pct(summary[k]['coverage']['touch_share_all'])} / {_pct(summary[k]['coverage']['touch_share_stage1'])}"
        for k in sets) + " |")
    for m in args.methods:
        L.append(f"| kept set of `{m}` | " + " | ".join(
            (lambda d: f"{_pct(d['share'])} ({d['ratio']:.2f}x)" if d else "n/a")(
                summary[k]["coverage"]["keep_sets"].get(m)) for k in sets) + " |")
    if any(summary[k].get("on_screen_text") for k in sets):
        L += ["", "## On-screen text (clips with burned-in text)", "",
              "| | " + " | ".join(sets) + " |", "|---|" + "---|" * len(sets)]
        ts = {k: summary[k].get("on_screen_text") or {} for k in sets}
        L.append("| clips / text tokens per clip | " + " | ".join(
            f"{ts[k].get('clips', 0)} / {ts[k].get('text_tokens_mean', 0):.1f}" for k in sets) + " |")
        for st, label in (("stage1", "Stage I"), ("stage2", "Stage II"), ("kept", "Stage I + II")):
            L.append(f"| share of text tokens kept by {label} | " + " | ".join(_pct(ts[k].get(st)) for k in sets) + " |")
        L.append("| keep rate K/V (a text-blind choice) | " + " | ".join(_pct(ts[k].get("keep_rate")) for k in sets) + " |")
        for p in args.pairs:
            L.append(f"| τ {PAIR_NAMES[p].split(' ')[0]}: SpecVLM → SpecVLM + forced text tokens | " + " | ".join(
                f"{summary[k]['tau'].get(f'{p}/specvlm@text', float('nan')):.2f} → "
                f"{summary[k]['tau'].get(f'{p}/specvlm+text', float('nan')):.2f}" for k in sets) + " |")
    L += ["", "## Quality checks", ""]
    for name, v in goal.items():
        mark = {True: "x", False: " ", None: "?"}[v["met"]]
        L.append(f"- [{mark}] {name}: {v['detail']}" + (" (not fully measured in this run)" if v["met"] is None else ""))
    L += ["", f"Run: {meta['seconds'] / 60:.1f} min, {meta['workers']} worker(s) x {args.threads} thread(s), "
              f"{meta['machine']}; command `{meta['command']}`.", ""]
    return "\n".join(L)


def _tree_text(args) -> str:
    t = getattr(args, "tree", "dynamic")
    if t == "chain":
        return f"chain, depth {args.depth}"
    if t == "static":
        return "static (official-25)"
    return f"dynamic, depth {getattr(args, 'depth', 5)}, top-k {getattr(args, 'top_k', 4)}, " \
           f"{getattr(args, 'total_tokens', 16)} nodes"
