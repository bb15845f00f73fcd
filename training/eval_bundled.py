#!/usr/bin/env python
"""Evaluate the bundled target + draft on held-out generated videos.

For each held-out clip from :mod:`specvlm.bench.synth` (frames generated in memory,
never written to disk), on a SHORT set (16 frames) and a LONG set (128 frames
of 168x168 px = 2,304 video tokens by default):

* attribute accuracy of the greedy (vanilla) detailed description vs the ground
  truth, read back with :func:`specvlm.bench.captions.parse_caption`: colour, shape and
  motion per ground-truth object (predicted objects matched to true ones by the
  best assignment), object count, on-screen text ("" when there is none);
* with the engine at r = 0.9 (λ = 0.4, default dynamic tree), the mean accepted
  length τ (pooled over all verify steps, bonus token excluded) of ``specvlm``
  and the ``random``, ``uniform``, ``window-middle``, ``frame`` and ``attention``
  baselines, for Std-SD (bundled target + bundled 1-layer draft) and Self-SD
  (the target drafting for itself);
* whether every greedy speculative output is token-identical to vanilla;
* how much of Stage I's kept set (and of each method's kept set) lies on object
  or text pixels vs their area share: each video token of a 2-frame group covers
  a cell of the processed frame (patch x merge px per side, read from the model); it is mapped back
  to the original frame size (processor resize) and compared with the union of
  the ground-truth object boxes and the text box on its two frames.

Held-out seeds: training draws scene seeds below 10**8 and the sample clips use
seeds >= 2*10**9; this script uses ``--seed-base`` (default 10**9) + i for the
short set and ``--seed-base`` + 500,000,000 + i for the long set.

Speed: the target's and the draft's video features and the target's prefill are
computed once per video and shared by all methods (``prefill=`` of
:func:`specvlm.engine.stream.generate`, which copies the KV cache for every request; the
decode loop is the engine's own). ``--workers 2``
runs two single-threaded processes (best on a 2-core CPU for these tiny models).

Examples:
    python -m training.eval_bundled --num-videos 10 --max-new-tokens 48          # quick look
    python -m training.eval_bundled --num-videos 200 --workers 2 --out assets/model/eval.json
"""
from __future__ import annotations

import argparse
import functools
import itertools
import json
import os
import platform
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

from specvlm import assets  # noqa: E402
from specvlm.bench import captions
from specvlm.bench import synth
from specvlm.config import ConfigError, TreeConfig  # noqa: E402
from specvlm.spec.grid import grid_shape  # noqa: E402

ATTRS = ("colour", "shape", "motion", "count", "text")
BASELINES = ("random", "uniform", "window-middle", "frame", "attention")
METHODS = ("specvlm",) + BASELINES
PAIRS = ("std", "self")
PAIR_NAMES = {"std": "Std-SD (bundled draft)", "self": "Self-SD (target as draft)"}
LONG_SEED_OFFSET = 500_000_000
TRAIN_SEED_LIMIT = 10**8
SHORT_SIDES = (112, 140, 168, 224)
SHORT_FPS = (4.0, 6.0, 8.0)


# ----------------------------------------------------------------------------- held-out clips

def clip_spec(kind: str, index: int, args) -> tuple[int, synth.SceneSpec]:
    """(seed, SceneSpec) of held-out clip ``index`` of set ``kind`` ("short" | "long")."""
    if kind == "short":
        seed = args.seed_base + index
        rng = np.random.default_rng([seed, 1])
        side = int(rng.choice(SHORT_SIDES))
        fps = float(rng.choice(SHORT_FPS))
        return seed, synth.SceneSpec(num_frames=args.short_frames, height=side, width=side, fps=fps)
    seed = args.seed_base + LONG_SEED_OFFSET + index
    return seed, synth.SceneSpec(num_frames=args.long_frames, height=args.long_side, width=args.long_side,
                                 fps=args.long_fps)


# ----------------------------------------------------------------------------- accuracy

def score_caption(pred_text: str, truth: synth.SceneTruth) -> dict:
    """Attribute correctness of one description.

    Returns:
        dict: colour/shape/motion/enter_leave -> [correct, total] over the true objects
        (predicted objects matched by the assignment with the most correct attributes;
        a missing prediction counts as wrong); count/text/text_presence/exact -> 0 or 1;
        ``motion_pairs``: [true motion, predicted motion or None] per true object under that assignment.
    """
    p = captions.parse_caption(pred_text)
    true = list(truth.objects)
    pred = list(p["objects"])
    n = len(true)
    slots = pred + [None] * max(0, n - len(pred))

    def hits(t, q) -> tuple[int, int, int, int]:
        if q is None:
            return 0, 0, 0, 0
        return (int(q["colour"] == t.colour), int(q["shape"] == t.shape), int(q["motion"] == t.motion),
                int(q["enters"] == t.enters and q["leaves"] == t.leaves))

    best, best_sum, best_perm = (0, 0, 0, 0), -1, ()
    for perm in itertools.permutations(range(len(slots)), n):
        tot = [sum(x) for x in zip(*(hits(t, slots[j]) for t, j in zip(true, perm)))] or [0, 0, 0, 0]
        if sum(tot[:3]) * 10 + tot[3] > best_sum:
            best_sum, best, best_perm = sum(tot[:3]) * 10 + tot[3], tuple(tot), perm
    true_text = truth.text.text if truth.text is not None else ""
    return {
        "colour": [best[0], n], "shape": [best[1], n], "motion": [best[2], n], "enter_leave": [best[3], n],
        "count": int(p["count"] == n),
        "text": int(p["text"] is not None and p["text"] == true_text),
        "text_presence": int(p["text"] is not None and (p["text"] != "") == (true_text != "")),
        "exact": int(pred_text.strip() == captions.describe(truth)),
        "motion_pairs": [[t.motion, slots[j]["motion"] if slots[j] is not None else None]
                         for t, j in zip(true, best_perm)],
    }


# ----------------------------------------------------------------------------- object / text coverage

def cell_pixels(model) -> int:
    """Processed pixels per side of one video token's cell: the vision patch times the spatial merge of a
    Qwen2.5-VL ``model``'s vision config."""
    vc = model.config.vision_config
    return int(vc.patch_size) * int(vc.spatial_merge_size)


def token_coverage(truth: synth.SceneTruth, token_grid, frames_per_token: int, cell_px: int) -> np.ndarray:
    """Share of object-or-text pixels under each video token.

    Args:
        truth: ground truth (per-frame object boxes, text box and time span) at the original size.
        token_grid: int (V, 3) (frame_group, row, col) per video token.
        frames_per_token: frames per token group (the inputs' ``frames_per_token``).
        cell_px: processed pixels per side of a token's cell (:func:`cell_pixels`).

    Returns:
        float32 (V,): fraction in [0, 1] of the token's frames x cell (processed size, each processed pixel
        mapped back to the original frame by the resize ratio) inside an object box or the text box.
    """
    T, H, W = truth.num_frames, truth.height, truth.width
    mask = np.zeros((T, H, W), bool)
    for o in truth.objects:
        for t, (x0, y0, x1, y1) in enumerate(o.boxes):
            if x0 >= 0:
                mask[t, max(y0, 0):max(y1, 0), max(x0, 0):max(x1, 0)] = True
    if truth.text is not None:
        x0, y0, x1, y1 = truth.text.box
        mask[truth.text.start_frame:truth.text.end_frame, max(y0, 0):y1, max(x0, 0):x1] = True
    fpt = max(1, int(frames_per_token))
    if T % fpt:  # the adapter pads a clip to whole token groups by repeating the last frame
        mask = np.concatenate([mask] + [mask[-1:]] * (fpt - T % fpt), axis=0)
    tg = np.asarray(token_grid, dtype=np.int64)
    g = int(tg[:, 0].max()) + 1
    rows, cols = grid_shape(tg)
    hp, wp = rows * cell_px, cols * cell_px
    ys = np.minimum(((np.arange(hp) + 0.5) * H / hp).astype(np.int64), H - 1)
    xs = np.minimum(((np.arange(wp) + 0.5) * W / wp).astype(np.int64), W - 1)
    m = mask[:, ys][:, :, xs].astype(np.float32)
    if m.shape[0] != fpt * g:
        raise ValueError(f"{m.shape[0]} frames do not match {g} temporal groups of {fpt}")
    cov = m.reshape(g, fpt, rows, cell_px, cols, cell_px).mean(axis=(1, 3, 5))
    return cov[tg[:, 0], tg[:, 1], tg[:, 2]]


# ----------------------------------------------------------------------------- shared prefill

class SharedPrefill:
    """One video's target prefills (with and without attention scores, one video-encoder run) and
    the Std-SD draft's prompt embeddings and side features, computed on first use and passed to
    every request.

    ``generate(..., prefill=...)`` copies the prefill's KV cache, so each request decodes from
    the same state a fresh prefill would give. With ``enabled`` False every request prefills.
    """

    def __init__(self, inputs, enabled: bool = True) -> None:
        self.inputs, self.enabled = inputs, enabled
        self.prefills: dict = {}
        self.draft_video = None

    def get(self, pair, method: str):
        """The prefill for ``method`` on ``pair`` (None when sharing is off)."""
        if not self.enabled:
            return None
        import dataclasses

        import torch

        from specvlm.engine.prefill import prefill_target
        from specvlm.engine.forward import prompt_video
        from specvlm.spec.pruning import SCORE_METHODS

        with_scores = method in SCORE_METHODS
        with torch.inference_mode():
            if with_scores not in self.prefills:
                other = next(iter(self.prefills.values()), None)
                self.prefills[with_scores] = prefill_target(pair, self.inputs.for_target(), with_scores,
                                                            video=(other.embeds, other.side) if other else None)
            if not pair.self_sd and self.draft_video is None:
                d_in = self.inputs.draft_inputs or self.inputs
                self.draft_video = prompt_video(pair.draft, pair.draft_adapter, d_in)
        return dataclasses.replace(self.prefills[with_scores], draft_video=self.draft_video)


# ----------------------------------------------------------------------------- worker

_W: dict = {}


def load_worker_pair(args, draft: str | None):
    """The pair a worker process evaluates with (CPU, float32), after fixing its threads and seed."""
    import torch

    from specvlm.models.loading import load_pair

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    return load_pair(args.target, draft, device="cpu", dtype="float32")


def decode_config(args, method: str):
    """The DecodeConfig of one evaluated method ("vanilla" or a pruning method) from the command line."""
    from specvlm.config import DecodeConfig, PruneConfig
    return DecodeConfig(method=method, max_new_tokens=args.max_new_tokens, tree=args.tree_config,
                        prune=PruneConfig(method=method if method != "vanilla" else "specvlm",
                                          drop_rate=args.drop_rate, top_p=args.top_p, seed=args.seed))


def init_worker(args) -> None:
    """Load the pair(s) once per process."""
    from specvlm.models.pair import pair_from_models

    std = load_worker_pair(args, args.draft if "std" in args.pairs else None)
    _W["pairs"] = {"std": std, "self": pair_from_models(std.target, std.processor, name="Self-SD")}
    _W["args"] = args


def eval_video(job: tuple[str, int]) -> dict:
    """Evaluate one held-out clip; returns its record (see the module docstring)."""
    from specvlm.engine.stream import generate
    from specvlm.engine.prepare import prepare
    from specvlm.video import frames_to_clip

    kind, index = job
    args, pairs = _W["args"], _W["pairs"]
    t0 = time.perf_counter()
    seed, spec = clip_spec(kind, index, args)
    frames, truth = synth.generate(seed, spec)
    clip = frames_to_clip(frames, spec.fps)
    std = pairs["std"]
    inputs = prepare(std, clip, args.prompt)
    shared = SharedPrefill(inputs, enabled=not args.no_shared_prefill)

    cfg = functools.partial(decode_config, args)
    van = generate(std, inputs, cfg("vanilla"), prefill=shared.get(std, "vanilla"))
    rec: dict = {
        "set": kind, "index": index, "seed": seed, "frames": spec.num_frames, "size": [spec.height, spec.width],
        "fps": spec.fps, "video_tokens": inputs.num_video_tokens, "truth": captions.describe(truth),
        "pred": van.text, "new_tokens": len(van.token_ids), "correct": score_caption(van.text, truth),
        "vanilla_decode_s": van.decode_s, "tau": {}, "identical": {}, "first_divergence": {}, "decode_s": {},
    }
    cov = token_coverage(truth, inputs.token_grid.numpy(), inputs.frames_per_token, cell_pixels(std.target))
    share = {"area": float(cov.mean()), "num_tokens": int(cov.size), "keep": {}}
    spec_prune = None
    for p in args.pairs:
        pair = pairs[p]
        for m in args.methods:
            r = generate(pair, inputs, cfg(m), prefill=shared.get(pair, m))
            key = f"{p}/{m}"
            rec["tau"][key] = [int(sum(r.accept_lengths)), len(r.accept_lengths)]
            rec["identical"][key] = r.token_ids == van.token_ids
            if r.token_ids != van.token_ids:
                rec["first_divergence"][key] = next(
                    (i for i, (a, b) in enumerate(zip(r.token_ids, van.token_ids)) if a != b),
                    min(len(r.token_ids), len(van.token_ids)))
            rec["decode_s"][key] = r.decode_s
            pr = r.prefill.prune
            if p == args.pairs[0] and pr is not None:
                keep = pr.keep.numpy()
                share["keep"][m] = [float(cov[keep].sum()), int(keep.size)]
                if m == "specvlm":
                    spec_prune = pr
                    s1 = pr.stage1.numpy()
                    share["stage1"] = [float(cov[s1].sum()), int(s1.size)]
                    share["stage1_touch"] = int((cov[s1] > 0).sum())
                    share["area_touch"] = float((cov > 0).mean())
    rec["share"] = share
    if args.text_keep and truth.text is not None and "specvlm" in args.methods:
        _text_keep(rec, truth, clip, inputs, spec_prune, van, cfg("specvlm"), args, pairs, shared)
    rec["seconds"] = time.perf_counter() - t0
    return rec


def _text_keep(rec: dict, truth, clip, inputs, spec_prune, van, cfg, args, pairs, shared) -> None:
    """On-screen text awareness: which share of the text-covering video tokens each
    SpecVLM stage kept, and τ of SpecVLM with those tokens forced into the draft's view
    (``ModelInputs.force_keep``) next to plain SpecVLM on the same clip
    (keys ``<pair>/specvlm+text`` and ``<pair>/specvlm@text``)."""
    import dataclasses

    from specvlm.engine.stream import generate
    from specvlm.analysis.text_aware import stage_shares, text_tokens_from_truth

    tt = text_tokens_from_truth(truth, clip.timestamps, inputs.token_grid, inputs.frames_per_token)
    if tt.numel() == 0:
        return
    rec["text_tokens"] = stage_shares(spec_prune, tt) if spec_prune is not None else {"text_tokens": int(tt.numel())}
    forced = dataclasses.replace(inputs, force_keep=tt)
    for p in args.pairs:
        r = generate(pairs[p], forced, cfg, prefill=shared.get(pairs[p], "specvlm"))
        rec["tau"][f"{p}/specvlm@text"] = list(rec["tau"][f"{p}/specvlm"])
        rec["identical"][f"{p}/specvlm@text"] = rec["identical"][f"{p}/specvlm"]
        rec["decode_s"][f"{p}/specvlm@text"] = rec["decode_s"][f"{p}/specvlm"]
        key = f"{p}/specvlm+text"
        rec["tau"][key] = [int(sum(r.accept_lengths)), len(r.accept_lengths)]
        rec["identical"][key] = r.token_ids == van.token_ids
        rec["decode_s"][key] = r.decode_s


# ----------------------------------------------------------------------------- summary

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
            speed[key] = _ratio(sum(r["vanilla_decode_s"] for r in has), sum(r["decode_s"][key] for r in has))
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


# ----------------------------------------------------------------------------- main

def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default=str(assets.path("model", "target")), help="target model folder")
    ap.add_argument("--draft", default=str(assets.path("model", "draft")), help="Std-SD draft model folder")
    ap.add_argument("--num-videos", type=int, default=200, help="held-out clips per set (default %(default)s)")
    ap.add_argument("--sets", default="short,long", help="comma list of short,long (default %(default)s)")
    ap.add_argument("--short-frames", type=int, default=16)
    ap.add_argument("--long-frames", type=int, default=128)
    ap.add_argument("--long-side", type=int, default=168, help="long clips are SIDExSIDE px (168 -> 2,304 tokens)")
    ap.add_argument("--long-fps", type=float, default=8.0)
    ap.add_argument("--methods", default=",".join(METHODS), help="speculative methods (default %(default)s)")
    ap.add_argument("--pairs", default="std,self", help="std (bundled draft) and/or self (Self-SD)")
    ap.add_argument("--prompt", default=captions.DESCRIBE_PROMPTS[0])
    ap.add_argument("--max-new-tokens", type=int, default=64, help="captions are <= ~40 tokens")
    ap.add_argument("--drop-rate", type=float, default=0.9, help="r")
    ap.add_argument("--top-p", type=float, default=0.4, help="λ")
    ap.add_argument("--tree", choices=("dynamic", "static", "chain"), default=TreeConfig.shape,
                    help="draft tree shape (default %(default)s)")
    ap.add_argument("--depth", type=int, default=TreeConfig.depth,
                    help="draft tree depth (default %(default)s; τ can never exceed it)")
    ap.add_argument("--top-k", type=int, default=TreeConfig.top_k, help="dynamic tree: children per node")
    ap.add_argument("--total-tokens", type=int, default=TreeConfig.total_tokens, help="dynamic tree: nodes kept")
    ap.add_argument("--seed-base", type=int, default=10**9, help="first held-out scene seed (>= 10**8)")
    ap.add_argument("--seed", type=int, default=0, help="torch seed and the `random` method's seed")
    ap.add_argument("--workers", type=int, default=1, help="processes (each loads the models)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per process")
    ap.add_argument("--no-shared-prefill", action="store_true",
                    help="recompute video features and target prefill for every method")
    ap.add_argument("--no-text-keep", dest="text_keep", action="store_false",
                    help="skip the on-screen-text runs (SpecVLM with the text-covering tokens forced)")
    ap.add_argument("--out", default=None, help="JSON output (summary + per-video records)")
    ap.add_argument("--md", default=None, help="markdown output (default: --out with .md)")
    ap.add_argument("--rerender", metavar="JSON", default=None,
                    help="recompute the summary, goals and markdown of an earlier run's JSON from its per-video "
                         "records (no model runs); rewrites JSON (or --out) and its .md (or --md)")
    ap.add_argument("--resume", action="store_true",
                    help="reuse finished videos from OUT.partial.jsonl (written as records complete)")
    args = ap.parse_args(argv)
    args.sets = [s for s in args.sets.split(",") if s]
    args.methods = [m for m in args.methods.split(",") if m]
    args.pairs = [p for p in args.pairs.split(",") if p]
    try:
        args.tree_config = TreeConfig(shape=args.tree, depth=args.depth, top_k=args.top_k,
                                      total_tokens=args.total_tokens)
    except ConfigError as exc:
        ap.error(str(exc))
    if any(s not in ("short", "long") for s in args.sets):
        ap.error("--sets takes short and/or long")
    if any(p not in PAIRS for p in args.pairs):
        ap.error("--pairs takes std and/or self")
    if args.seed_base < TRAIN_SEED_LIMIT:
        ap.error(f"--seed-base must be >= {TRAIN_SEED_LIMIT} (training seeds are below it)")
    return args


def rerender(path: str, out: str | None = None, md_out: str | None = None) -> str:
    """Recompute summary, goals and markdown of a finished run's JSON from its records; returns the markdown.

    Raises:
        FileNotFoundError: ``path`` does not exist.  KeyError: the JSON has no config/meta/records.
    """
    data = json.loads(Path(path).read_text())
    args = argparse.Namespace(**data["config"])
    summary = summarise(data["records"], args)
    goal = goals(summary, args)
    md = markdown(summary, goal, args, data["meta"])
    data.update(summary=summary, goals=goal)
    dest = Path(out or path)
    dest.write_text(json.dumps(data, indent=1, default=float))
    Path(md_out or dest.with_suffix(".md")).write_text(md)
    return md


def main(argv=None) -> int:
    from tqdm import tqdm

    args = parse_args(argv)
    if args.rerender:
        print(rerender(args.rerender, args.out, args.md))
        return 0
    if not Path(args.target, "config.json").exists():
        print(f"error: no model in {args.target}", file=sys.stderr)
        return 2
    if "std" in args.pairs and not Path(args.draft, "config.json").exists():
        print(f"error: no draft in {args.draft} (use --pairs self)", file=sys.stderr)
        return 2
    jobs = [(k, i) for k in args.sets for i in range(args.num_videos)]
    t0 = time.time()
    records: list[dict] = []
    partial = Path(args.out).with_suffix(".partial.jsonl") if args.out else None
    fingerprint = json.dumps({k: v for k, v in vars(args).items()
                              if k not in ("out", "md", "resume", "workers", "num_videos", "tree_config")},
                             sort_keys=True)
    if partial is not None and args.resume and partial.exists():
        lines = partial.read_text().splitlines()
        if lines and lines[0] == fingerprint:
            wanted = set(jobs)
            records = [r for r in map(json.loads, lines[1:]) if (r["set"], r["index"]) in wanted]
            print(f"resuming: {len(records)} videos already done in {partial}", file=sys.stderr)
        else:
            print(f"not resuming: {partial} was written with other settings", file=sys.stderr)
    done = {(r["set"], r["index"]) for r in records}
    jobs = [j for j in jobs if j not in done]
    if partial is not None:
        partial.parent.mkdir(parents=True, exist_ok=True)
        partial.write_text(fingerprint + "\n" + "".join(json.dumps(r) + "\n" for r in records))
    bar = tqdm(total=len(jobs) + len(records), initial=len(records), desc="eval", unit="video",
               dynamic_ncols=False, ncols=110, file=sys.stderr)

    def progress(rec: dict) -> None:
        records.append(rec)
        if partial is not None:
            with partial.open("a") as f:
                f.write(json.dumps(rec) + "\n")
        done = [r for r in records if r["set"] == rec["set"]]
        acc = np.mean([np.mean([r["correct"]["count"], r["correct"]["text"]] +
                               [r["correct"][a][0] / max(r["correct"][a][1], 1) for a in ("colour", "shape", "motion")])
                       for r in done])
        k = f"{args.pairs[0]}/specvlm"
        tau = (sum(r["tau"][k][0] for r in done) / max(1, sum(r["tau"][k][1] for r in done))) if k in rec["tau"] else 0
        bad = sum(not v for r in records for v in r["identical"].values())
        bar.set_postfix_str(f"{rec['set']} acc {acc:.2f} tau {tau:.2f} mismatch {bad}", refresh=False)
        bar.update(1)

    if args.workers <= 1:
        init_worker(args)
        for job in jobs:
            progress(eval_video(job))
    else:
        import multiprocessing as mp

        # interleave long and short jobs so both sets progress together
        order = sorted(jobs, key=lambda j: (j[1], j[0]))
        with mp.get_context("spawn").Pool(args.workers, initializer=init_worker, initargs=(args,)) as pool:
            for rec in pool.imap_unordered(eval_video, order, chunksize=1):
                progress(rec)
    bar.close()
    records.sort(key=lambda r: (args.sets.index(r["set"]), r["index"]))
    seconds = time.time() - t0
    summary = summarise(records, args)
    goal = goals(summary, args)
    meta = {"num_videos": args.num_videos, "seconds": seconds, "workers": max(1, args.workers),
            "machine": f"{platform.machine()} {os.cpu_count()} CPUs",
            "command": "python " + " ".join([os.path.relpath(__file__, ROOT)] + list(argv or sys.argv[1:]))}
    md = markdown(summary, goal, args, meta)
    print(md)
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        cfg = {k: v for k, v in vars(args).items() if k not in ("out", "md", "resume", "tree_config")}
        for k in ("target", "draft"):
            p = Path(cfg[k]).resolve()
            cfg[k] = str(p.relative_to(ROOT)) if p.is_relative_to(ROOT) else str(p)
        out.write_text(json.dumps({"config": cfg, "meta": meta, "summary": summary, "goals": goal,
                                   "records": records}, indent=1, default=float))
        md_path = Path(args.md) if args.md else out.with_suffix(".md")
        md_path.write_text(md)
        partial.unlink(missing_ok=True)
        print(f"wrote {out} and {md_path}", file=sys.stderr)
    elif args.md:
        Path(args.md).write_text(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
