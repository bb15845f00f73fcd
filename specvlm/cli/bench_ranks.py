"""``python -m specvlm bench`` as one rank of a ``torchrun`` job (or as a single rank that keeps records).

Every rank parses the same arguments, loads its pair on its own device, measures its shard
(:func:`specvlm.bench.distributed.run_distributed`) and prints its progress to stderr with a
``[rank R]`` prefix; rank 0 prints the merged report and writes the files asked for.

Examples:
    torchrun --nproc-per-node 2 -m specvlm bench --preset tiny --dataset vdc --data-root data/vdc --out-json r.json
    torchrun --nproc-per-node 2 -m specvlm bench ... --out-json r.json --resume   # after a rank ended early
"""
from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path
from types import FrameType
from typing import Any, Callable

from specvlm.bench.distributed import RankInfo, process_group, rank_device, run_distributed

DEFAULT_RECORDS = "bench-records"
"""Records folder without ``--records-dir`` and ``--out-json``."""


def records_dir(args: argparse.Namespace) -> Path:
    """``--records-dir``; else ``<--out-json without suffix>.ranks``; else :data:`DEFAULT_RECORDS`."""
    if args.records_dir:
        return Path(args.records_dir)
    if args.out_json:
        return Path(args.out_json).with_suffix(".ranks")
    return Path(DEFAULT_RECORDS)


def _resume_hint(info: RankInfo, folder: Path) -> str:
    return (f"the inputs rank {info.rank} finished are in {folder / f'rank-{info.rank}.jsonl'}; rerun the same "
            "command with --resume to measure only the rest")


def cmd_bench_ranks(args: argparse.Namespace, plan_from_args: Callable[..., tuple[Any, Any, list]],
                    emit: Callable[[dict, argparse.Namespace], int]) -> int:
    """Run this rank's share of the benchmark; rank 0 prints the merged report and writes the files.

    Args:
        args: the parsed ``bench`` arguments.
        plan_from_args: :func:`specvlm.cli.bench.plan_from_args` (checks the arguments, loads the pair).
        emit: :func:`specvlm.cli.bench.emit` (judges, prints and writes the merged report).

    Returns:
        The exit status: 0, 1 when this rank stopped on an error (one line names the rank and where
        its records are), 143 when the launcher ended it.

    Raises:
        ValueError: bad arguments (``python -m specvlm`` prints them as one line, per rank).
    """
    info = RankInfo.from_env() or RankInfo()
    tag = f"[rank {info.rank}] " if info.distributed else ""

    def progress(line: str) -> None:
        print(tag + line, file=sys.stderr, flush=True)

    folder = records_dir(args)
    if info.rank != 0:   # only rank 0 writes the report files
        args.out_json = args.out_html = args.out_svg = None

    def stopped(signum: int, frame: FrameType | None) -> None:
        progress(f"error: rank {info.rank} was stopped by the launcher (another rank ended early: torchrun's "
                 f"summary names it); {_resume_hint(info, folder)}.")
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, stopped)
    try:
        args.device = rank_device(info, args.device, args.gpus_per_rank)
        with process_group(info):
            pair, settings, plans = plan_from_args(args, progress if info.rank == 0 else None)
            report = run_distributed(pair, plans, settings, info, folder, resume=args.resume, progress=progress,
                                     threads=getattr(args, "thread_choice", None))
    except ValueError:
        raise
    except Exception as exc:  # noqa: BLE001 - one line naming the rank; torchrun ends the others
        progress(f"error: rank {info.rank} ({args.device}) stopped: {exc.__class__.__name__}: {exc}; "
                 f"{_resume_hint(info, folder)}.")
        return 1
    finally:
        signal.signal(signal.SIGTERM, previous)
    if report is None:
        return 0
    return emit(report, args)
