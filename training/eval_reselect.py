#!/usr/bin/env python
"""Evaluate re-selection during decoding and adaptive r on the bundled sparse pair.

On the held-out clip sets of :mod:`training.reselect_clips` (``long`` sparse-information clips with a
subtitle fact, ``text`` long clips whose reported fact is small burned-in text on a few frames, ``short``
clips as the no-harm set), per clip: greedy vanilla decoding, then for each pair (``self``: the target
drafting for itself; ``std``: the bundled 1-layer draft), each with its preset's draft tree:

* ``none``: the draft sees every video token (r = 0);
* ``specvlm``: SpecVLM pruning at r = 0.9, λ = 0.4;
* ``reselect``: the same plus re-selection during decoding (``DecodeConfig.reselect``; its threshold, budgets and
  mode: ``--min-share``, ``--step-tokens``, ``--total-tokens``, ``--trigger``, ``--track``, ``--sync``, by default
  ``ReselectConfig``'s);
* ``textkept`` (on request, a diagnostic): SpecVLM with every video token under the clip's on-screen text forced
  into the kept set (same budget);
* ``adaptive``: SpecVLM with r chosen per clip (``PruneConfig.adaptive_r``; ``--r-min``, ``--r-max``,
  ``--r-mass``, by default ``PruneConfig``'s).

Each decode is one JSON line of ``--rows`` (τ's counts, decode and draft time, the draft's cost, the video
tokens added and where they lie, r used, identity with vanilla), appended as it finishes; a rerun skips the
rows already there, so an interrupted evaluation resumes where it stopped. The draft's cost is
Σ over verify steps of the draft's context length (its prompt after pruning + tokens added so far +
tokens generated) × the nodes it drafted, in thousands of token reads. The summary (:mod:`training.reselect_stats`)
and the report (:mod:`training.reselect_report`) are computed from the rows, also part-way (``--report-only``).

Examples:
    python -m training.eval_reselect --num-videos 4 --sets text --rows /tmp/r.jsonl     # quick look
    # the shipped evaluation (Self-SD; ``--pairs self,std`` adds the 1-layer draft)
    python -m training.eval_reselect --num-videos 300 --threads 1 \
        --rows assets/model_sparse/eval_reselect.rows.jsonl --out assets/model_sparse/eval_reselect.json
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from specvlm import assets  # noqa: E402
from specvlm.bench import captions  # noqa: E402
from specvlm.config import PruneConfig, ReselectConfig  # noqa: E402
from training import eval_bundled as eb  # noqa: E402
from training import eval_clips, eval_runs  # noqa: E402
from training import eval_sparse as es  # noqa: E402
from training import reselect_clips as rc  # noqa: E402
from training import reselect_report as report  # noqa: E402
from training import reselect_stats as stats  # noqa: E402

PAIRS = ("self", "std")
SETTINGS_KEYS = ("target", "draft", "seed_base", "long_frames", "long_side", "long_fps", "short_frames",
                 "prompt", "max_new_tokens", "drop_rate", "top_p", "seed", "min_share", "step_tokens",
                 "total_tokens", "trigger", "track", "sync", "r_min", "r_max", "r_mass")
"""Arguments a row depends on: the first line of the rows file records them, and a resume must match."""


class RowsMismatchError(ValueError):
    """The rows file was written with other settings than this run's."""


@dataclass
class Context:
    """What every clip's decodes share: the arguments and the loaded pairs (name -> ModelPair)."""

    args: argparse.Namespace
    pairs: dict = field(default_factory=dict)


# ----------------------------------------------------------------------------- one decode

def decode_config(args, pair: str, run: str):
    """The DecodeConfig of ``run`` (``vanilla`` or one of :data:`training.reselect_stats.SPEC_RUNS`) for
    ``pair`` ("self" | "std"): the pair's preset tree; r, λ, the re-selection budget and the adaptive r's
    bounds from the command line."""
    from specvlm.config import BUNDLED_SELF_TREE, BUNDLED_STD_TREE, DecodeConfig, PruneConfig, ReselectConfig

    method = {"vanilla": "vanilla", "none": "none"}.get(run, "specvlm")
    prune = PruneConfig(method=method if run != "vanilla" else "specvlm", drop_rate=args.drop_rate,
                        top_p=args.top_p, seed=args.seed, adaptive_r=run == "adaptive", r_min=args.r_min,
                        r_max=args.r_max, r_mass=args.r_mass)
    reselect = ReselectConfig(enabled=run == "reselect", min_share=args.min_share, step_tokens=args.step_tokens,
                              total_tokens=args.total_tokens, trigger=args.trigger, track=args.track,
                              sync=args.sync)
    tree = BUNDLED_SELF_TREE if pair == "self" else BUNDLED_STD_TREE
    return DecodeConfig(method=method, max_new_tokens=args.max_new_tokens, tree=tree, prune=prune,
                        reselect=reselect)


def refused_at(steps: list) -> list[list[int]]:
    """[output position, target token] of each verify step whose drafted continuation the target refused: it
    accepted fewer draft tokens than it drafted and emitted its own token after them (a step cut at the end of
    the output is no refusal)."""
    out = []
    for s in steps:
        a = s.accept_length
        if a < s.tree_size and a < len(s.token_ids):
            out.append([s.num_generated - len(s.token_ids) + a, int(s.token_ids[a])])
    return out


def result_row(res, vanilla_ids: list[int] | None, targets: dict) -> dict:
    """The counts of one finished decode (a :class:`specvlm.types.DecodeResult`).

    Args:
        res: the decode.
        vanilla_ids: the vanilla output of the clip (None: ``res`` is the vanilla decode).
        targets: name -> set of video-token indices holding it (``text``, ``flash``;
            :func:`training.eval_sparse.sparse_tokens`).
    """
    info = res.prefill
    steps = [s for s in res.steps if s.step > 0]
    ctx0 = info.num_draft_prompt_tokens
    added: list[int] = [int(i) for s in res.steps if s.step == 0 for i in s.added]   # before the first draft
    kcost, steps_added = 0.0, int(bool(added))
    for s in steps:
        generated_before = s.num_generated - len(s.token_ids)
        kcost += (ctx0 + len(added) + generated_before) * s.tree_size / 1000
        new = list(s.added)
        steps_added += bool(new)
        added += [int(i) for i in new]
    keep = (set(info.prune.keep.tolist()) if info.prune is not None and vanilla_ids is not None
            else set(range(info.num_video_tokens)))
    stage1 = set(info.prune.stage1.tolist()) if info.prune is not None else set()
    row = {"accepted": int(sum(s.accept_length for s in steps)), "steps": len(steps),
           "decoded": max(0, len(res.token_ids) - 1), "decode_s": res.decode_s, "draft_s": res.draft_s,
           "verify_s": res.verify_s, "kcost": kcost if vanilla_ids is not None else 0.0,
           "draft_video_tokens": len(keep), "added": len(added), "steps_added": steps_added,
           "added_at": [[int(s.step), len(s.added)] for s in res.steps if s.added],
           "unseen_shares": [round(float(s.unseen_share), 4) for s in steps if s.unseen_share is not None],
           "refused_at": refused_at(steps),
           "r_used": info.r_used, "r_reason": info.r_reason,
           "hits": {t: {"kept": len(keep & v), "stage1": len(stage1 & v), "added": len(set(added) & v),
                        "tokens": len(v)} for t, v in targets.items() if v},
           "identical": vanilla_ids is None or res.token_ids == vanilla_ids}
    return row


# ----------------------------------------------------------------------------- one clip

def eval_clip(ctx: Context, kind: str, index: int, todo: list[tuple[str, str]], vanilla: dict | None):
    """Decode clip ``index`` of set ``kind`` for each (pair, run) of ``todo``; yields each row when done.

    ``vanilla``: the clip's vanilla row when already done (its ``token_ids`` are compared), else it is
    decoded first and yielded too.
    """
    from specvlm.engine.prepare import prepare, with_force_keep
    from specvlm.engine.stream import generate
    from specvlm.video import frames_to_clip

    args = ctx.args
    frames, truth = rc.make_clip(kind, index, args.clips)
    clip = frames_to_clip(frames, truth.fps)
    cues = list(truth.cues) or None
    base = {"set": kind, "index": index, "seed": int(truth.seed)}
    prepared: dict = {}

    def inputs_of(pair_name: str):
        if pair_name not in prepared:
            pair = ctx.pairs[pair_name]
            inputs = prepare(pair, clip, args.prompt, subtitles=cues, subtitle_mode="both")
            prepared[pair_name] = (inputs, eval_runs.SharedPrefill(inputs),
                                   es.sparse_tokens(truth, inputs, eval_clips.cell_pixels(pair.target)))
        return prepared[pair_name]

    tok = next(iter(ctx.pairs.values())).processor.tokenizer
    if vanilla is None:
        name = next(iter(ctx.pairs))
        inputs, shared, targets = inputs_of(name)
        t0 = time.perf_counter()
        res = generate(ctx.pairs[name], inputs, decode_config(args, name, "vanilla"),
                       prefill=shared.get(ctx.pairs[name], "vanilla"))
        vanilla = {**base, "pair": "target", "run": "vanilla", **result_row(res, None, targets),
                   "video_tokens": inputs.num_video_tokens, "token_ids": res.token_ids, "text": res.text,
                   "truth": captions.describe(truth), "correct": es.score(res.text, truth),
                   "has_text": truth.text is not None, "has_fact": truth.fact is not None,
                   "text_at": es.sentence_positions(tok, res.token_ids, ("text",)),
                   "fact_at": es.fact_positions(tok, res.token_ids),
                   "seconds": time.perf_counter() - t0}
        yield vanilla
    for pair_name, run in todo:
        inputs, shared, targets = inputs_of(pair_name)
        pair = ctx.pairs[pair_name]
        cfg = decode_config(args, pair_name, run)
        if run == "textkept" and targets.get("text"):
            inputs = with_force_keep(inputs, sorted(targets["text"]))
            shared = eval_runs.SharedPrefill(inputs)
        t0 = time.perf_counter()
        res = generate(pair, inputs, cfg, prefill=shared.get(pair, cfg.prune.method))
        yield {**base, "pair": pair_name, "run": run, **result_row(res, vanilla["token_ids"], targets),
               "seconds": time.perf_counter() - t0}


# ----------------------------------------------------------------------------- rows file (resume)

def settings_of(args) -> dict:
    """The arguments the rows depend on (:data:`SETTINGS_KEYS`; model folders inside the repository relative
    to its root, so another checkout resumes the same file)."""
    out = {k: getattr(args, k) for k in SETTINGS_KEYS}
    for k, plain in (("trigger", "refused"), ("track", 0), ("sync", False)):   # left out when plain: rows files
        if out[k] == plain:                                                     # without them resume
            del out[k]
    for k in ("target", "draft"):
        path = Path(out[k]).resolve()
        out[k] = str(path.relative_to(eb.ROOT)) if path.is_relative_to(eb.ROOT) else str(path)
    return out


def read_rows(path: Path, settings: dict) -> list[dict]:
    """The rows already in ``path`` (none when it does not exist).

    Raises:
        RowsMismatchError: the file's first line records other settings.
    """
    if not path.exists() or not path.read_text().strip():
        return []
    lines = path.read_text().splitlines()
    head = json.loads(lines[0])
    if head != {"settings": settings}:
        raise RowsMismatchError(f"{path} holds rows of other settings ({head}); pass another --rows file or "
                                "run with that file's settings")
    return [json.loads(x) for x in lines[1:] if x.strip()]


def append_row(path: Path, row: dict, settings: dict) -> None:
    """Append one row to ``path`` (writing the settings line first in a new file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        if f.tell() == 0:
            f.write(json.dumps({"settings": settings}) + "\n")
        f.write(json.dumps(row) + "\n")


def plan(rows: list[dict], sets: list[str], num_videos: int, pairs: list[str], runs: list[str]) -> list:
    """(set, index, todo [(pair, run)], vanilla row or None) of every clip with work left, clip-major
    (index, then set) so a part-way run covers every set."""
    done = {(r["set"], r["index"], r["pair"], r["run"]): r for r in rows}
    out = []
    for i in range(num_videos):
        for kind in sets:
            todo = [(p, r) for p in pairs for r in runs if (kind, i, p, r) not in done]
            vanilla = done.get((kind, i, "target", "vanilla"))
            if todo or vanilla is None:
                out.append((kind, i, todo, vanilla))
    return out


# ----------------------------------------------------------------------------- main

def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default=str(assets.path("model_sparse", "target")), help="target model folder")
    ap.add_argument("--draft", default=str(assets.path("model_sparse", "draft")), help="Std-SD draft folder")
    ap.add_argument("--pairs", default="self", help="comma list of self,std (default %(default)s)")
    ap.add_argument("--runs", default=",".join(stats.SPEC_RUNS), help="speculative runs (default %(default)s)")
    ap.add_argument("--sets", default=",".join(rc.SETS), help="comma list of long,text,short")
    ap.add_argument("--num-videos", type=int, default=300, help="held-out clips per set (default %(default)s)")
    ap.add_argument("--seed-base", type=int, default=rc.SEED_BASE, help="first held-out scene seed (>= 10**8)")
    ap.add_argument("--long-frames", type=int, default=rc.ClipSettings.long_frames)
    ap.add_argument("--long-side", type=int, default=rc.ClipSettings.long_side)
    ap.add_argument("--long-fps", type=float, default=rc.ClipSettings.long_fps)
    ap.add_argument("--short-frames", type=int, default=rc.ClipSettings.short_frames)
    ap.add_argument("--prompt", default=captions.DESCRIBE_PROMPTS[0])
    ap.add_argument("--max-new-tokens", type=int, default=72)
    ap.add_argument("--drop-rate", type=float, default=0.9, help="r of the pruned runs")
    ap.add_argument("--top-p", type=float, default=0.4, help="λ")
    ap.add_argument("--min-share", type=float, default=ReselectConfig.min_share, help="re-selection's threshold")
    ap.add_argument("--step-tokens", type=int, default=ReselectConfig.step_tokens, help="most added per step")
    ap.add_argument("--total-tokens", type=int, default=ReselectConfig.total_tokens, help="most added per decode")
    ap.add_argument("--trigger", default=ReselectConfig.trigger, help="re-selection's steps: refused or every")
    ap.add_argument("--track", type=int, default=ReselectConfig.track, help="frame groups either side added too")
    ap.add_argument("--sync", action=argparse.BooleanOptionalAction, default=ReselectConfig.sync,
                    help="Self-SD: rebuild the draft's cache from the target's")
    ap.add_argument("--r-min", type=float, default=PruneConfig.r_min, help="adaptive r's lower bound")
    ap.add_argument("--r-max", type=float, default=PruneConfig.r_max, help="adaptive r's upper bound")
    ap.add_argument("--r-mass", type=float, default=PruneConfig.r_mass, help="adaptive r's attention share")
    ap.add_argument("--seed", type=int, default=0, help="torch seed")
    ap.add_argument("--threads", type=int, default=1, help="torch threads")
    ap.add_argument("--boot", type=int, default=2000, help="bootstrap replicates")
    ap.add_argument("--rows", required=True, help="JSON-lines file of the decodes, appended to and resumed from")
    ap.add_argument("--out", default=None, help="summary JSON (markdown next to it)")
    ap.add_argument("--report-only", action="store_true", help="summarise the rows file without decoding")
    args = ap.parse_args(argv)
    args.sets, args.pairs, args.runs = ([x for x in s.split(",") if x] for s in (args.sets, args.pairs, args.runs))
    for name, got, allowed in (("--sets", args.sets, rc.SETS), ("--pairs", args.pairs, PAIRS),
                               ("--runs", args.runs, stats.ALL_RUNS)):
        if not got or any(x not in allowed for x in got):
            ap.error(f"{name} takes a comma list of {','.join(allowed)}")
    try:
        args.clips = rc.ClipSettings(args.seed_base, args.long_frames, args.long_side, args.long_fps,
                                     args.short_frames)
    except ValueError as e:
        ap.error(str(e))
    return args


def load_pairs(args) -> dict:
    """name -> ModelPair of ``args.pairs`` (CPU, float32, ``args.threads`` torch threads)."""
    out = {}
    for name in args.pairs:
        out[name] = eval_runs.load_worker_pair(args, None if name == "self" else args.draft)
    return out


def run(args, t0: float) -> None:
    """Decode every (clip, pair, run) not yet in the rows file, appending rows as they finish."""
    rows_path, settings = Path(args.rows), settings_of(args)
    rows = read_rows(rows_path, settings)
    work = plan(rows, args.sets, args.num_videos, args.pairs, args.runs)
    print(f"{len(rows)} rows done, {len(work)} clips with work left", file=sys.stderr, flush=True)
    ctx = Context(args, load_pairs(args))
    for n, (kind, index, todo, vanilla) in enumerate(work, 1):
        for row in eval_clip(ctx, kind, index, todo, vanilla):
            append_row(rows_path, row, settings)
        if n % 5 == 0 or n == len(work):
            print(f"{n} of {len(work)} clips, {(time.time() - t0) / 60:.1f} min", file=sys.stderr, flush=True)


def main(argv=None) -> int:
    args = parse_args(argv)
    t0 = time.time()
    try:
        if not args.report_only:
            run(args, t0)
        rows = read_rows(Path(args.rows), settings_of(args))
    except RowsMismatchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    summary = report.summarise(rows, args.sets, args.pairs, args.runs, n_boot=args.boot, min_share=args.min_share)
    goal = report.goals(summary)
    meta = {"rows": len(rows), "machine": f"{platform.machine()} {os.cpu_count()} CPUs",
            "threads": args.threads, "minutes": (time.time() - t0) / 60, "max_new_tokens": args.max_new_tokens,
            "drop_rate": args.drop_rate, "top_p": args.top_p,
            "command": "python -m training.eval_reselect " + " ".join(argv if argv is not None else sys.argv[1:])}
    md = report.markdown(summary, goal, meta)
    print(md)
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        cfg = {**settings_of(args), "sets": args.sets, "pairs": args.pairs, "runs": args.runs,
               "num_videos": args.num_videos, "rows": args.rows}
        out.write_text(json.dumps({"config": cfg, "meta": meta, "summary": summary, "goals": goal},
                                  indent=1, default=float))
        out.with_suffix(".md").write_text(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
