"""Command line: ``python -m specvlm generate|bench ...``.

One module per command (:mod:`specvlm.cli.generate`, :mod:`specvlm.cli.bench`) and one for the
arguments they share (:mod:`specvlm.cli.args`). Only the CLI prints; the library logs.

Examples:
    python -m specvlm generate --video assets/videos/shapes_short.mp4 --prompt "Describe this video."
    python -m specvlm generate --model Qwen/Qwen2.5-VL-7B-Instruct --video clip.mp4 --prompt "..." --json
    python -m specvlm bench --synthetic-tokens 4096 --out-json bench.json
"""
from __future__ import annotations

import argparse
import logging
import re
import sys

from specvlm.bench.distributed import local_ranks
from specvlm.cli import bench, generate
from specvlm.cli.args import resolve_lambda
from specvlm.runtime.threads import configure


def build_parser() -> argparse.ArgumentParser:
    """The ``python -m specvlm`` parser with its ``generate`` and ``bench`` sub-commands."""
    p = argparse.ArgumentParser(prog="python -m specvlm", description=(
        "SpecVLM: lossless speculative decoding for video LLMs. The target keeps every video token; the draft "
        "sees ~10% chosen by the target's attention (Stage I) and spatially uniform filling (Stage II)."))
    p.add_argument("-v", "--verbose", action="store_true", help="log progress to stderr")
    sub = p.add_subparsers(dest="command", required=True)
    generate.add_parser(sub)
    bench.add_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status (2 for input/setting errors)."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    if not args.verbose:  # no "Loading weights" bars on every run; -v shows them
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    try:
        note = resolve_lambda(args)
        if note:
            print(f"note: {note}", file=sys.stderr)
        # once per process, before any model work; torchrun's ranks on one node split its CPUs
        args.thread_choice = configure(args.threads, share=local_ranks())
        return args.func(args)
    except ValueError as exc:
        print(f"error: {_flag_names(str(exc))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"\ninterrupted: {args.command} stopped before the end; nothing more was written.", file=sys.stderr)
        return 130


_FLAGS = {"drop_rate": "--drop-rate", "top_p_sampling": "--top-p-sampling", "top_p": "--lambda",
          "num_frames": "--num-frames", "max_new_tokens": "--max-new-tokens", "total_tokens": "--total-tokens",
          "top_k": "--top-k", "depth": "--depth", "min_prob": "--min-prob", "temperature": "--temperature", "fps": "--fps",
          "repeats": "--repeats", "warmup": "--warmup",
          "background_load": "--background-load"}


def _flag_names(message: str) -> str:
    """Name settings in an error message by their command-line flags (``drop_rate=`` -> ``--drop-rate=``)."""
    return re.sub(r"(?<![\w-])(" + "|".join(sorted(_FLAGS, key=len, reverse=True)) + r")=",
                  lambda m: _FLAGS[m.group(1)] + "=", message)
