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
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np  # noqa: E402

from specvlm import assets  # noqa: E402
from specvlm.analysis.metrics import first_divergence  # noqa: E402
from specvlm.bench import captions, synth  # noqa: E402
from specvlm.config import ConfigError, TreeConfig  # noqa: E402
from training.eval_bundled_report import METHODS, PAIRS, goals, markdown, summarise  # noqa: E402
from training.eval_clips import cell_pixels, clip_spec, score_caption, token_coverage  # noqa: E402
from training.eval_runs import (RecordLog, SharedPrefill, add_clip_args, check_clip_args, decode_config,  # noqa: E402
                                load_worker_pair, machine_text, run_jobs)

ROOT = Path(__file__).resolve().parents[1]

# ----------------------------------------------------------------------------- worker

_W: dict = {}


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
                rec["first_divergence"][key] = first_divergence(r.token_ids, van.token_ids)
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


# ----------------------------------------------------------------------------- main

def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default=str(assets.path("model", "target")), help="target model folder")
    ap.add_argument("--draft", default=str(assets.path("model", "draft")), help="Std-SD draft model folder")
    add_clip_args(ap, num_videos=200, sets="short,long", max_new_tokens=64, seed_base=10**9)
    ap.add_argument("--methods", default=",".join(METHODS), help="speculative methods (default %(default)s)")
    ap.add_argument("--pairs", default="std,self", help="std (bundled draft) and/or self (Self-SD)")
    ap.add_argument("--top-k", type=int, default=TreeConfig.top_k, help="dynamic tree: children per node")
    ap.add_argument("--total-tokens", type=int, default=TreeConfig.total_tokens, help="dynamic tree: nodes kept")
    ap.add_argument("--no-shared-prefill", action="store_true",
                    help="recompute video features and target prefill for every method")
    ap.add_argument("--no-text-keep", dest="text_keep", action="store_false",
                    help="skip the on-screen-text runs (SpecVLM with the text-covering tokens forced)")
    ap.add_argument("--out", default=None, help="JSON output (summary + per-video records)")
    ap.add_argument("--md", default=None, help="markdown output (default: --out with .md)")
    ap.add_argument("--rerender", metavar="JSON", default=None,
                    help="recompute the summary, goals and markdown of an earlier run's JSON from its per-video "
                         "records (no model runs); rewrites JSON (or --out) and its .md (or --md)")
    args = ap.parse_args(argv)
    check_clip_args(ap, args)
    args.pairs = [p for p in args.pairs.split(",") if p]
    try:
        args.tree_config = TreeConfig(shape=args.tree, depth=args.depth, top_k=args.top_k,
                                      total_tokens=args.total_tokens)
    except ConfigError as exc:
        ap.error(str(exc))
    if any(p not in PAIRS for p in args.pairs):
        ap.error("--pairs takes std and/or self")
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
    log = RecordLog(args.out, {k: v for k, v in vars(args).items()
                               if k not in ("out", "md", "resume", "workers", "num_videos", "tree_config")},
                    args.resume)
    records, jobs = log.start(jobs)
    bar = tqdm(total=len(jobs) + len(records), initial=len(records), desc="eval", unit="video",
               dynamic_ncols=False, ncols=110, file=sys.stderr)

    def progress(rec: dict) -> None:
        records.append(rec)
        log.add(rec)
        done = [r for r in records if r["set"] == rec["set"]]
        acc = np.mean([np.mean([r["correct"]["count"], r["correct"]["text"]] +
                               [r["correct"][a][0] / max(r["correct"][a][1], 1) for a in ("colour", "shape", "motion")])
                       for r in done])
        k = f"{args.pairs[0]}/specvlm"
        tau = (sum(r["tau"][k][0] for r in done) / max(1, sum(r["tau"][k][1] for r in done))) if k in rec["tau"] else 0
        bad = sum(not v for r in records for v in r["identical"].values())
        bar.set_postfix_str(f"{rec['set']} acc {acc:.2f} tau {tau:.2f} mismatch {bad}", refresh=False)
        bar.update(1)

    run_jobs(args, jobs, init_worker, eval_video, progress)
    bar.close()
    records.sort(key=lambda r: (args.sets.index(r["set"]), r["index"]))
    seconds = time.time() - t0
    summary = summarise(records, args)
    goal = goals(summary, args)
    meta = {"num_videos": args.num_videos, "seconds": seconds, "workers": max(1, args.workers),
            "machine": machine_text(),
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
        log.finish()
        print(f"wrote {out} and {md_path}", file=sys.stderr)
    elif args.md:
        Path(args.md).write_text(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
