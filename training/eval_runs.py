"""How the bundled evaluations run: the worker's model pair and decode settings, one video's prefill shared by
every method, per-clip records kept as they complete (so a run resumes), and the clips spread over processes.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

from specvlm.config import TreeConfig
from training.eval_clips import TRAIN_SEED_LIMIT

Job = tuple[str, int]
"""(set, index): one held-out clip."""


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


def add_clip_args(ap: argparse.ArgumentParser, *, num_videos: int, sets: str, max_new_tokens: int,
                  seed_base: int) -> None:
    """The options both evaluations take: clips, prompt, decoding, seeds, processes, resume (defaults given)."""
    from specvlm.bench import captions

    ap.add_argument("--num-videos", type=int, default=num_videos, help="held-out clips per set (default %(default)s)")
    ap.add_argument("--sets", default=sets, help="comma list of short,long (default %(default)s)")
    ap.add_argument("--short-frames", type=int, default=16)
    ap.add_argument("--long-frames", type=int, default=128)
    ap.add_argument("--long-side", type=int, default=168, help="long clips are SIDExSIDE px (168 -> 2,304 tokens)")
    ap.add_argument("--long-fps", type=float, default=8.0)
    ap.add_argument("--prompt", default=captions.DESCRIBE_PROMPTS[0])
    ap.add_argument("--max-new-tokens", type=int, default=max_new_tokens, help="captions are <= ~40 tokens")
    ap.add_argument("--drop-rate", type=float, default=0.9, help="r")
    ap.add_argument("--top-p", type=float, default=0.4, help="λ")
    ap.add_argument("--tree", choices=("dynamic", "static", "chain"), default=TreeConfig.shape,
                    help="draft tree shape (default %(default)s)")
    ap.add_argument("--depth", type=int, default=TreeConfig.depth,
                    help="draft tree depth (default %(default)s; τ can never exceed it)")
    ap.add_argument("--seed-base", type=int, default=seed_base, help="first held-out scene seed (>= 10**8)")
    ap.add_argument("--seed", type=int, default=0, help="torch seed and the `random` method's seed")
    ap.add_argument("--workers", type=int, default=1, help="processes (each loads the models)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per process")
    ap.add_argument("--resume", action="store_true",
                    help="reuse the clips finished in OUT.partial.jsonl (written as records complete)")


def check_clip_args(ap: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Split the comma lists (sets, methods) and reject unknown sets and training seeds (``ap.error``)."""
    args.sets = [s for s in args.sets.split(",") if s]
    args.methods = [m for m in args.methods.split(",") if m]
    if any(s not in ("short", "long") for s in args.sets):
        ap.error("--sets takes short and/or long")
    if args.seed_base < TRAIN_SEED_LIMIT:
        ap.error(f"--seed-base must be >= {TRAIN_SEED_LIMIT} (training seeds are below it)")


class RecordLog:
    """Per-clip records written to ``OUT.partial.jsonl`` as they complete (first line: the settings'
    fingerprint), so that ``--resume`` reuses the clips an interrupted run finished with the same settings.

    Args:
        out: the run's JSON output (None: nothing is written).
        settings: the settings that decide a clip's record (compared on resume).
        resume: reuse finished clips.
    """

    def __init__(self, out: str | None, settings: dict, resume: bool) -> None:
        self.path = Path(out).with_suffix(".partial.jsonl") if out else None
        self.fingerprint = json.dumps(settings, sort_keys=True)
        self.resume = resume

    def start(self, jobs: list[Job]) -> tuple[list[dict], list[Job]]:
        """(the records finished earlier, the jobs left); the log is rewritten with those records."""
        records: list[dict] = []
        if self.path is not None and self.resume and self.path.exists():
            lines = self.path.read_text().splitlines()
            if lines and lines[0] == self.fingerprint:
                wanted = set(jobs)
                records = [r for r in map(json.loads, lines[1:]) if (r["set"], r["index"]) in wanted]
                print(f"resuming: {len(records)} clips already done in {self.path}", file=sys.stderr)
            else:
                print(f"not resuming: {self.path} was written with other settings", file=sys.stderr)
        done = {(r["set"], r["index"]) for r in records}
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.write_text(self.fingerprint + "\n" + "".join(json.dumps(r) + "\n" for r in records))
        return records, [j for j in jobs if j not in done]

    def add(self, rec: dict) -> None:
        """Append one finished clip's record."""
        if self.path is not None:
            with self.path.open("a") as f:
                f.write(json.dumps(rec) + "\n")

    def finish(self) -> None:
        """Remove the log (the run wrote its full output)."""
        if self.path is not None:
            self.path.unlink(missing_ok=True)


def run_jobs(args: argparse.Namespace, jobs: Iterable[Job], init_worker: Callable[[argparse.Namespace], None],
             evaluate: Callable[[Job], dict], keep: Callable[[dict], None]) -> None:
    """Evaluate ``jobs`` (long and short clips interleaved) in this process (``args.workers`` <= 1) or in that
    many spawned processes, each set up by ``init_worker(args)``; ``keep`` gets each record as it completes."""
    order = sorted(jobs, key=lambda j: (j[1], j[0]))
    if args.workers <= 1:
        init_worker(args)
        for job in order:
            keep(evaluate(job))
        return
    import multiprocessing as mp

    with mp.get_context("spawn").Pool(args.workers, initializer=init_worker, initargs=(args,)) as pool:
        for rec in pool.imap_unordered(evaluate, order, chunksize=1):
            keep(rec)


def machine_text() -> str:
    """E.g. ``x86_64 2 CPUs``."""
    return f"{platform.machine()} {os.cpu_count()} CPUs"
