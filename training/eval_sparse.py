#!/usr/bin/env python
"""Evaluate a bundled pair where information is sparse: the pruning ablation, the subtitle failure, accuracy.

The default pair is the bundled sparse pair (``assets/model_sparse``); ``--draft`` set to the target's
folder evaluates Self-SD.

On held-out clips never seen in training (frames generated in memory):

* **long**: sparse-information scenes (:func:`training.scenes.sparse_scene`, by default 128
  frames of 168x168 px at 8 fps = 2,304 video tokens: small objects, a flash on a few frames, brief
  small text, distractors), each with a subtitle track whose one fact cue (a code, a name, a flag
  colour) the description must report;
* **short**: the 16-frame clips of ``training.eval_bundled`` (large objects), half with a subtitle track.

Per clip, with the subtitles given to both models (the app's default), greedy vanilla decoding gives the
description, scored per attribute (colour, shape, motion, count, on-screen text, subtitle fact); then
speculative decoding at r = 0.9 with ``specvlm``, ``random``, ``window-middle`` and ``frame`` pruning
at the same budget gives τ (pooled over verify steps, bonus token excluded) and SpecVLM's τ minus each baseline's
with a paired 95% bootstrap interval over clips. The **subtitle case** runs SpecVLM again with the
transcript withheld from the draft (subtitle mode ``target``): τ given minus τ withheld with its
interval, and the steps that fail only when the draft lacks the transcript (a *rejection*,
:func:`specvlm.analysis.why.rejections`, = a step whose drafted continuation the target refused; an extra one =
a rejection at an output position where the draft with the transcript had none) with their text,
which should be the subtitle fact. Every
speculative output is compared token by token with vanilla.

Seeds: ``--seed-base`` (default 1.7x10^9) + i for short clips, + 500,000,000 + i for long clips;
training uses seeds below 10^8.

Examples:
    python -m training.eval_sparse --num-videos 4 --sets long                 # quick look
    # the shipped evaluation (assets/model_sparse/eval_sparse*.json): Self-SD, then Std-SD
    T=assets/model_sparse/target
    python -m training.eval_sparse --target $T --draft $T --num-videos 300 --workers 2 --threads 1 \
        --out assets/model_sparse/eval_sparse.json
    python -m training.eval_sparse --target $T --draft assets/model_sparse/draft --num-videos 300 --workers 2 \
        --threads 1 --out assets/model_sparse/eval_sparse_std.json
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import re
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np  # noqa: E402

from training import scenes  # noqa: E402
from specvlm import assets  # noqa: E402
from specvlm.analysis import why  # noqa: E402
from specvlm.bench import captions
from specvlm.bench import synth  # noqa: E402
from specvlm.config import TreeConfig  # noqa: E402
from training import eval_clips as clips  # noqa: E402
from training.eval_runs import (RecordLog, SharedPrefill, add_clip_args, check_clip_args, decode_config,  # noqa: E402
                                load_worker_pair, machine_text, run_jobs)

METHODS = ("specvlm", "random", "window-middle", "frame")
ATTRS = ("colour", "shape", "motion", "count", "text", "fact")
WITHHELD = "specvlm@withheld"
"""τ key of SpecVLM with the subtitle transcript withheld from the draft (subtitle mode ``target``)."""


# ----------------------------------------------------------------------------- clips and scoring

def make_clip(kind: str, index: int, args) -> tuple[np.ndarray, synth.SceneTruth]:
    """Held-out clip ``index`` of set ``kind``: (frames uint8 (T, H, W, 3), truth with cues and fact)."""
    if kind == "long":
        seed = args.seed_base + clips.LONG_SEED_OFFSET + index
        spec = scenes.SparseSpec(num_frames=args.long_frames, height=args.long_side, width=args.long_side,
                                 fps=args.long_fps)
        frames, truth = scenes.sparse_scene(seed, spec)
        return frames, scenes.with_subtitles(truth, seed, scenes.SubtitleSpec(fact_prob=1.0))
    seed, spec = clips.clip_spec("short", index, args)
    frames, truth = synth.generate(seed, spec)
    if np.random.default_rng([seed, 5]).random() < 0.5:
        truth = scenes.with_subtitles(truth, seed)
    return frames, truth


def score(pred: str, truth: synth.SceneTruth) -> dict:
    """:func:`training.eval_clips.score_caption` plus ``fact``: 1 when the subtitle fact is reported
    right (or, without one, none is reported)."""
    out = clips.score_caption(pred, truth)
    want = truth.fact.sentence[:-1].lower() if truth.fact is not None else None
    out["fact"] = int(captions.parse_caption(pred)["fact"] == want)
    return out


def fact_positions(tokenizer, token_ids: list[int]) -> list[int]:
    """Output positions whose token overlaps the words of the subtitle-fact sentence the output writes
    (``" <kind> <value>"`` with the space that starts its first word, as a byte-level BPE writes a word; a
    kind of :data:`specvlm.bench.synth.FACT_KINDS`; the value as written, right or wrong); [] when it
    writes none."""
    return sentence_positions(tokenizer, token_ids, synth.FACT_KINDS)


def sentence_positions(tokenizer, token_ids: list[int], first_words: tuple[str, ...]) -> list[int]:
    """Output positions whose token overlaps the first sentence ``" <word> <rest>"`` whose first word is one
    of ``first_words`` (with the space before it); [] when the output writes none."""
    ends = [len(tokenizer.decode(token_ids[:i + 1])) for i in range(len(token_ids))]
    text = tokenizer.decode(token_ids)
    m = re.search(r"(?:^|\. )((?:" + "|".join(first_words) + r") [^.]+)\.", text)
    if m is None:
        return []
    start, stop = m.start(1), m.end(1)
    if start and text[start - 1] == " ":
        start -= 1
    return [i for i, e in enumerate(ends) if e > start and (ends[i - 1] if i else 0) < stop]


# ----------------------------------------------------------------------------- worker

_W: dict = {}


def init_worker(args) -> None:
    """Load the pair once per process."""
    _W["pair"] = load_worker_pair(args, args.draft)
    _W["args"] = args


def eval_clip(job: tuple[str, int]) -> dict:
    """Evaluate one clip; returns its record (see the module docstring)."""
    from specvlm.engine.stream import generate
    from specvlm.engine.prepare import prepare
    from specvlm.video import frames_to_clip

    kind, index = job
    args, pair = _W["args"], _W["pair"]
    t0 = time.perf_counter()
    frames, truth = make_clip(kind, index, args)
    clip = frames_to_clip(frames, truth.fps)
    cues = list(truth.cues) or None

    cfg = functools.partial(decode_config, args)
    given = prepare(pair, clip, args.prompt, subtitles=cues, subtitle_mode="both")
    shared = SharedPrefill(given)
    van = generate(pair, given, cfg("vanilla"), prefill=shared.get(pair, "vanilla"))
    rec = {"set": kind, "index": index, "seed": truth.seed, "frames": truth.num_frames,
           "size": [truth.height, truth.width], "video_tokens": given.num_video_tokens,
           "truth": captions.describe(truth), "pred": van.text, "correct": score(van.text, truth),
           "has_fact": truth.fact is not None, "tau": {}, "identical": {}, "kept": {}}
    targets = sparse_tokens(truth, given, clips.cell_pixels(pair.target))
    runs = [(m, given, shared) for m in args.methods]
    if truth.fact is not None:
        withheld = prepare(pair, clip, args.prompt, subtitles=cues, subtitle_mode="target")
        runs.append((WITHHELD, withheld, SharedPrefill(withheld)))
    rej = {}
    for key, inputs, sh in runs:
        method = key.split("@")[0]
        r = generate(pair, inputs, cfg(method), prefill=sh.get(pair, method), record_trees=method == "specvlm")
        rec["tau"][key] = [int(sum(r.accept_lengths)), len(r.accept_lengths)]
        rec["identical"][key] = r.token_ids == van.token_ids
        if method == "specvlm":
            rej[key] = [p for _, p, _ in why.rejections(r.steps)]
        keep = set(r.prefill.prune.keep.tolist()) if r.prefill.prune is not None else set()
        rec["kept"][key] = {k: int(bool(keep & v)) for k, v in targets.items() if v}
    if truth.fact is not None:
        tok = pair.processor.tokenizer
        extra = sorted(set(rej[WITHHELD]) - set(rej["specvlm"]))
        span = set(fact_positions(tok, van.token_ids))
        rec["subtitle"] = {"fact": truth.fact.sentence, "fact_positions": sorted(span), "extra_rejections": extra,
                           "extra_on_fact": sum(p in span for p in extra),
                           "extra_text": [tok.decode(van.token_ids[p:p + 1]) for p in extra]}
    rec["seconds"] = time.perf_counter() - t0
    return rec


def sparse_tokens(truth: synth.SceneTruth, inputs, cell_px: int) -> dict[str, set]:
    """Video-token indices under the flash (``flash``) and under the on-screen text (``text``); ``cell_px``:
    :func:`training.eval_clips.cell_pixels`."""
    import dataclasses

    out = {}
    flash = tuple(o for o in truth.objects if o.motion == synth.FLASH)
    for name, t in (("flash", dataclasses.replace(truth, objects=flash, text=None)),
                    ("text", dataclasses.replace(truth, objects=(), text=truth.text))):
        if t.objects or t.text is not None:
            cov = clips.token_coverage(t, inputs.token_grid.numpy(), inputs.frames_per_token, cell_px)
            out[name] = set(np.nonzero(cov > 0)[0].tolist())
    return out


# ----------------------------------------------------------------------------- summary

def paired_difference(recs: list[dict], a_key: str, b_key: str, n_boot: int = 2000, seed: int = 0) -> dict | None:
    """Pooled τ of ``a_key`` minus ``b_key`` with a paired percentile bootstrap over clips (95%).

    ``r["tau"][key]`` is a (numerator, denominator) pair per clip; any pooled ratio works the same way
    (denominators may be fractional, e.g. seconds).

    Returns:
        {"diff", "lo", "hi", "wins", "ties", "losses", "clips"}, or None when no clip has both.
    """
    both = [r for r in recs if a_key in r["tau"] and b_key in r["tau"]]
    if not both:
        return None
    a = np.array([r["tau"][a_key] for r in both], dtype=float)
    b = np.array([r["tau"][b_key] for r in both], dtype=float)
    if a[:, 1].sum() == 0 or b[:, 1].sum() == 0:
        return None
    idx = np.random.default_rng(seed).integers(0, len(both), size=(n_boot, len(both)))
    boot = (a[idx, 0].sum(1) / np.maximum(a[idx, 1].sum(1), 1e-12)
            - b[idx, 0].sum(1) / np.maximum(b[idx, 1].sum(1), 1e-12))
    per = a[:, 0] / np.maximum(a[:, 1], 1e-12) - b[:, 0] / np.maximum(b[:, 1], 1e-12)
    return {"diff": float(a[:, 0].sum() / a[:, 1].sum() - b[:, 0].sum() / b[:, 1].sum()),
            "lo": float(np.percentile(boot, 2.5)), "hi": float(np.percentile(boot, 97.5)),
            "wins": int((per > 1e-9).sum()), "ties": int((np.abs(per) <= 1e-9).sum()),
            "losses": int((per < -1e-9).sum()), "clips": len(both)}


def summarise(records: list[dict], args) -> dict:
    """Per set: accuracy, τ per run, SpecVLM minus each baseline, the subtitle case, kept-set recall."""
    out: dict = {}
    for kind in args.sets:
        recs = [r for r in records if r["set"] == kind]
        if not recs:
            continue
        acc = {a: (sum(r["correct"][a][0] for r in recs) / max(1, sum(r["correct"][a][1] for r in recs)))
               for a in ("colour", "shape", "motion")}
        acc.update({a: float(np.mean([r["correct"][a] for r in recs])) for a in ("count", "text", "fact")})
        facts = [r for r in recs if r["has_fact"]]
        acc["fact_when_stated"] = float(np.mean([r["correct"]["fact"] for r in facts])) if facts else None
        acc["mean"] = float(np.mean([acc[a] for a in ATTRS]))
        keys = list(dict.fromkeys(k for r in recs for k in r["tau"]))
        tau = {k: sum(r["tau"][k][0] for r in recs if k in r["tau"]) /
               max(1, sum(r["tau"][k][1] for r in recs if k in r["tau"])) for k in keys}
        mism = {k: sum(not r["identical"][k] for r in recs if k in r["identical"]) for k in keys}
        runs = {k: sum(k in r["identical"] for r in recs) for k in keys}
        diffs = {m: paired_difference(recs, "specvlm", m) for m in args.methods if m != "specvlm"}
        recall = {k: {t: float(np.mean(v)) for t in ("flash", "text")
                      if (v := [r["kept"][k][t] for r in recs if t in r["kept"].get(k, {})])} for k in keys}
        sub = [r["subtitle"] for r in facts if "subtitle" in r]
        n_extra = sum(len(s["extra_rejections"]) for s in sub)
        subtitle = {
            "clips": len(sub), "given_minus_withheld": paired_difference(recs, "specvlm", WITHHELD),
            "extra_rejections": n_extra, "extra_on_fact": sum(s["extra_on_fact"] for s in sub),
            "share_on_fact": sum(s["extra_on_fact"] for s in sub) / n_extra if n_extra else None,
            "clips_failing_on_fact": sum(s["extra_on_fact"] > 0 for s in sub),
            "examples": [(s["fact"], s["extra_text"]) for s in sub[:5]],
        } if sub else None
        out[kind] = {"num_videos": len(recs), "video_tokens_mean": float(np.mean([r["video_tokens"] for r in recs])),
                     "accuracy": acc, "tau": tau, "mismatches": mism, "runs": runs, "specvlm_minus": diffs,
                     "kept_recall": recall, "subtitle": subtitle,
                     "seconds_per_video": float(np.mean([r["seconds"] for r in recs]))}
    return out


def _excludes_zero_above(d: dict | None) -> bool:
    return d is not None and d["lo"] > 0


def goals(summary: dict) -> dict:
    """The quality checks of the shipped evaluation, each -> {"met": bool, "detail": str}."""
    g: dict = {}
    for kind, s in summary.items():
        g[f"{kind}: vanilla accuracy >= 90% (incl. on-screen text and subtitle fact)"] = {
            "met": s["accuracy"]["mean"] >= 0.9, "detail": f"mean {s['accuracy']['mean']:.1%}"}
    lg = summary.get("long")
    if lg:
        for m, d in lg["specvlm_minus"].items():
            g[f"long: SpecVLM τ above {m}, 95% CI excluding 0"] = {
                "met": _excludes_zero_above(d), "detail": _diff_text(d)}
        sub = lg["subtitle"]
        if sub:
            d = sub["given_minus_withheld"]
            g["long: τ with subtitles given to the draft above τ withheld, 95% CI excluding 0"] = {
                "met": _excludes_zero_above(d), "detail": _diff_text(d)}
            g["long: the steps failing only without the transcript are the subtitle fact (>= 80%)"] = {
                "met": sub["share_on_fact"] is not None and sub["share_on_fact"] >= 0.8,
                "detail": f"{sub['extra_on_fact']} of {sub['extra_rejections']} extra rejections on the fact's tokens"}
    bad = sum(v for s in summary.values() for v in s["mismatches"].values())
    runs = sum(v for s in summary.values() for v in s["runs"].values())
    g["greedy output identical to vanilla in every run"] = {"met": bad == 0, "detail": f"{bad} of {runs} runs differ"}
    return g


def _diff_text(d: dict | None) -> str:
    return "n/a" if d is None else f"{d['diff']:+.2f} (95% CI {d['lo']:+.2f}..{d['hi']:+.2f}; " \
                                   f"per clip {d['wins']} / {d['ties']} / {d['losses']} wins / ties / losses)"


def markdown(summary: dict, goal: dict, meta: dict) -> str:
    """A markdown report (``meta["sd"]``: "Self-SD" or "Std-SD", named in the title when given)."""
    sd = f", {meta['sd']}" if meta.get("sd") else ""
    L = [f"# Sparse-information evaluation{sd} ({meta['num_videos']} held-out clips per set)", ""]
    for kind, s in summary.items():
        a = s["accuracy"]
        L += [f"## {kind}: {s['num_videos']} clips, {s['video_tokens_mean']:.0f} video tokens on average", "",
              "| " + " | ".join(ATTRS) + " | mean |", "|" + "---|" * (len(ATTRS) + 1),
              "| " + " | ".join(f"{100 * a[x]:.1f}%" for x in ATTRS) + f" | **{100 * a['mean']:.1f}%** |", "",
              "| run | τ | differs from vanilla | kept ≥ 1 flash token | kept ≥ 1 text token |",
              "|---|---|---|---|---|"]
        for k, t in s["tau"].items():
            rc = s["kept_recall"].get(k, {})
            L.append(f"| {k} | {t:.2f} | {s['mismatches'][k]} of {s['runs'][k]} | "
                     + " | ".join(f"{100 * rc[x]:.0f}%" if x in rc else "n/a" for x in ("flash", "text")) + " |")
        L += ["", "SpecVLM's τ minus each baseline's (paired bootstrap over clips):", ""]
        L += [f"- {m}: {_diff_text(d)}" for m, d in s["specvlm_minus"].items()]
        if s["subtitle"]:
            sub = s["subtitle"]
            L += ["", f"Subtitle case ({sub['clips']} clips with a fact cue): τ given to the draft minus τ withheld "
                      f"{_diff_text(sub['given_minus_withheld'])}; {sub['extra_rejections']} rejections happen only "
                      f"without the transcript, {sub['extra_on_fact']} of them on the fact's tokens "
                      f"({sub['clips_failing_on_fact']} clips). Examples (fact: text of those steps):", ""]
            L += [f"- `{f}`: " + ", ".join(f"`{t}`" for t in texts) for f, texts in sub["examples"]]
        L.append("")
    L += ["## Quality checks", ""]
    L += [f"- [{'x' if v['met'] else ' '}] {k}: {v['detail']}" for k, v in goal.items()]
    L += ["", f"Run: {meta['seconds'] / 60:.1f} min, {meta['workers']} worker(s), {meta['machine']}; "
              f"command `{meta['command']}`.", ""]
    return "\n".join(L)


# ----------------------------------------------------------------------------- main

def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default=str(assets.path("model_sparse", "target")), help="target model folder")
    ap.add_argument("--draft", default=str(assets.path("model_sparse", "draft")),
                    help="draft model folder (the target's own folder: Self-SD)")
    add_clip_args(ap, num_videos=300, sets="long,short", max_new_tokens=72, seed_base=1_700_000_000)
    ap.add_argument("--methods", default=",".join(METHODS), help="pruning methods (default %(default)s)")
    ap.add_argument("--out", default=None, help="JSON output (summary + per-clip records); markdown next to it")
    args = ap.parse_args(argv)
    check_clip_args(ap, args)
    if "specvlm" not in args.methods:
        ap.error("--methods must include specvlm")
    args.tree_config = TreeConfig(shape=args.tree, depth=args.depth)
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    for what, path in (("target", args.target), ("draft", args.draft)):
        if not Path(path, "config.json").exists():
            print(f"error: no {what} model in {path}", file=sys.stderr)
            return 2
    t0 = time.time()
    log = RecordLog(args.out, {k: v for k, v in vars(args).items()
                               if k not in ("out", "resume", "workers", "num_videos", "tree_config")}, args.resume)
    records, jobs = log.start([(k, i) for k in args.sets for i in range(args.num_videos)])

    def keep(rec: dict) -> None:
        records.append(rec)
        log.add(rec)
        if len(records) % 10 == 0:
            print(f"{len(records)} clips done, {(time.time() - t0) / 60:.1f} min", file=sys.stderr, flush=True)

    run_jobs(args, jobs, init_worker, eval_clip, keep)
    records.sort(key=lambda r: (args.sets.index(r["set"]), r["index"]))
    summary = summarise(records, args)
    goal = goals(summary)
    meta = {"num_videos": args.num_videos, "seconds": time.time() - t0, "workers": max(1, args.workers),
            "sd": "Self-SD" if Path(args.draft).resolve() == Path(args.target).resolve() else "Std-SD",
            "machine": machine_text(),
            "command": "python -m training.eval_sparse " + " ".join(argv if argv is not None else sys.argv[1:])}
    md = markdown(summary, goal, meta)
    print(md)
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        cfg = {k: v for k, v in vars(args).items() if k not in ("out", "resume", "tree_config")}
        out.write_text(json.dumps({"config": cfg, "meta": meta, "summary": summary, "goals": goal,
                                   "records": records}, indent=1, default=float))
        out.with_suffix(".md").write_text(md)
        log.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
