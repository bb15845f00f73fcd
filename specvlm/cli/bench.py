"""``python -m specvlm bench``: arguments, inputs and outputs of the benchmark command.

The measurement is :func:`specvlm.bench.run_bench`; the goals are judged by
:func:`specvlm.bench.goals.verdict`; this module turns arguments into both and prints.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any, Callable

from specvlm.bench import goals
from specvlm.bench import report as bench_report
from specvlm.bench.charts import ChartError
from specvlm.bench.inputs import MIN_SYNTHETIC_SIDE, PlannedInput, plan_dataset, plan_files, plan_synthetic
from specvlm.bench.protocol import run_bench
from specvlm.bench.settings import (DEFAULT_METHODS, SELF, BenchError, BenchSettings,
                                    drop_redundant_self, parse_int_list, parse_methods)
from specvlm.cli.args import (add_common_args, add_decode_args, add_model_args, check_prompt_flag,
                              decode_config, load_from_args, preset_settings)
from specvlm.config import DEFAULT_PROMPT, PRUNE_METHODS, VideoConfig

TINY_PRESETS = ("tiny", "tiny-llava")
"""In-process random-weight tiny pairs (no files): smoke runs and tests."""

DESCRIPTION = (
    "Run vanilla, speculative methods (SpecVLM and baselines, Std-SD or Self-SD) and Hugging Face peers on the "
    "same inputs: warm-up, then interleaved rounds. Prints a markdown table per input (tau, tokens per target "
    "forward, decode tokens/s, speedup over our vanilla as median (min-max) of per-round ratios, end-to-end s, "
    "draft/verify ms per step, KV lengths, peak memory, identity to vanilla) and a PASS/FAIL/SKIP verdict on the "
    "goals (stated at 16k video tokens, SKIP on shorter inputs: Std-SD >= 2x vanilla and >= 1.3x SD-Tree, "
    "faster than HF assisted, Self-SD >= 1.3x, verify <= 1.5x a decode step; at any length: speedup grows with "
    "length, vanilla >= 0.95x HF generate, Self-SD memory, every output identical or differing only at a "
    "near-tie of the target's logits).")

EXAMPLES = """examples:
  python -m specvlm bench --synthetic-tokens 4096 --repeats 3 --out-json bench.json --out-html bench.html
  python -m specvlm bench --sweep 1024,2048,4096,8192,16384 --fixed-length --max-new-tokens 128 \\
      --methods vanilla,none,specvlm,specvlm:self,hf,hf-assisted --out-html sweep.html
  python -m specvlm bench --video clip.mp4 --methods vanilla,specvlm,hf --repeats 5
  python -m specvlm bench --preset paper-qwen --dataset vdc --data-root data/VideoDetailCaption --num-samples 20
  python -m specvlm bench --preset tiny --synthetic-tokens 256 --max-new-tokens 16 --repeats 1
  python -m specvlm bench --video clip.mp4 --methods vanilla,specvlm --background-load 2   # on a busy machine
  torchrun --nproc-per-node 8 -m specvlm bench --preset paper-qwen-self --dataset vdc --data-root data/VDC \
      --num-samples 200 --out-json vdc.json          # one rank per GPU; see docs/scaling.md for several nodes
"""


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """Register the ``bench`` sub-command on ``python -m specvlm``'s sub-parsers."""
    from specvlm.bench.datasets import DATASETS
    from specvlm.models.presets import PAPER_SETTINGS

    b = sub.add_parser("bench", help="benchmark methods and HF peers; markdown table, JSON, HTML",
                       description=DESCRIPTION, epilog=EXAMPLES,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(b)
    g = b.add_argument_group("inputs (any mix; default --synthetic-tokens 4096)")
    g.add_argument("--video", action="append", default=[], help="video file (repeatable)")
    g.add_argument("--prompt", default=DEFAULT_PROMPT, help="prompt for videos and generated clips")
    g.add_argument("--synthetic-tokens", help="generated clips sized for ~N video tokens each, e.g. 4096 or 2048,8192")
    g.add_argument("--sweep", help="length sweep over generated clips, e.g. 1024,2048,4096,8192,16384 (plotted)")
    g.add_argument("--synthetic-side", type=int, default=224, help="generated frame side in px (default %(default)s)")
    g.add_argument("--synthetic-fps", type=float, default=2.0,
                   help="frame rate of generated clips (default %(default)s); it sets Qwen2.5-VL's temporal "
                        "M-RoPE positions (tokens_per_second x seconds), so match what the model was trained on")
    g.add_argument("--dataset", choices=sorted(DATASETS), help="a local copy of a paper benchmark")
    g.add_argument("--data-root", help="folder of the local dataset copy")
    g.add_argument("--num-samples", type=int, default=5, help="seeded subset size (default %(default)s)")
    g.add_argument("--data-seed", type=int, default=0, help="subset seed (default %(default)s)")
    r = b.add_argument_group("benchmark")
    r.add_argument("--preset", choices=sorted(PAPER_SETTINGS) + list(TINY_PRESETS),
                   help="paper settings (models, frames, r, λ, 256 tokens) or an in-process tiny pair")
    r.add_argument("--methods", default="all", help="comma list from: " + ", ".join(DEFAULT_METHODS)
                   + f" (or any other pruning method: {', '.join(m for m in PRUNE_METHODS if m not in DEFAULT_METHODS)};"
                   + f" suffix '{SELF}' = Self-SD); default all")
    r.add_argument("--repeats", type=int, default=3, help="measured interleaved rounds (default %(default)s)")
    r.add_argument("--warmup", type=int, default=1, help="unmeasured rounds first (default %(default)s)")
    r.add_argument("--fixed-length", action="store_true", help="ignore EOS: every run generates --max-new-tokens "
                   "(the paper's fairness setting; same as --no-eos)")
    r.add_argument("--prompt-lookup-tokens", type=int, default=10, help="prompt_lookup_num_tokens (default 10)")
    r.add_argument("--no-step-costs", action="store_true",
                   help="skip the isolated decode vs verify(1..17 tokens) timing on the largest input "
                        "(an extra timing pass, long on a CPU); the verify goal then uses the runs' mean verify step")
    r.add_argument("--background-load", type=int, default=0, metavar="N",
                   help="run N busy worker processes (pure-Python spin) during the warm-up and timed rounds, to "
                        "measure the methods on a machine kept busy by other work; they are stopped at the end "
                        "(also on Ctrl-C or an error) and the Machine: line says so (default 0)")
    r.add_argument("--out-json", help="write the report as JSON")
    r.add_argument("--out-html", help="write a plotly HTML report")
    r.add_argument("--out-svg", help="write the length sweep (speedup and τ vs video tokens) as a static SVG")
    d = b.add_argument_group("several processes (launch with torchrun; see docs/scaling.md)")
    d.add_argument("--distributed", action="store_true",
                   help="one rank per device, inputs sharded, one merged report from rank 0 (on by itself under "
                        "torchrun; without torchrun: one rank, with its records file and --resume)")
    d.add_argument("--gpus-per-rank", type=int, default=1, metavar="K",
                   help="GPUs per rank for a pair too large for one: rank r uses GPUs r*K .. r*K+K-1 (default 1)")
    d.add_argument("--records-dir", help="folder of each rank's records (rank-<R>.jsonl, one line per finished "
                                         "input; default: next to --out-json as <name>.ranks, else bench-records)")
    d.add_argument("--resume", action="store_true",
                   help="keep the finished inputs in --records-dir and measure only the rest (an input that "
                        "failed to read is tried again); implies --distributed")
    add_model_args(b)
    add_decode_args(b)
    b.set_defaults(func=cmd_bench)
    return b


def cmd_bench(args: argparse.Namespace) -> int:
    """``python -m specvlm bench``: print the markdown report; write JSON / HTML / SVG when asked
    (under ``torchrun`` or with ``--distributed`` / ``--resume``: :mod:`specvlm.cli.bench_ranks`)."""
    from specvlm.bench.distributed import RankInfo

    if args.distributed or args.resume or RankInfo.from_env() is not None:
        from specvlm.cli.bench_ranks import cmd_bench_ranks

        return cmd_bench_ranks(args, plan_from_args, emit)
    report = report_from_args(args, progress=lambda line: print(line, file=sys.stderr, flush=True))
    return emit(report, args)


def emit(report: dict, args: argparse.Namespace) -> int:
    """Judge the goals, print the report and write the files asked for; returns the exit status."""
    report["verdict"] = goals.verdict(report)
    print(bench_report.format_report(report))
    rc, first = 0, True
    for kind, path, write in (("JSON", args.out_json, bench_report.write_json),
                              ("HTML", args.out_html, bench_report.write_html),
                              ("SVG", args.out_svg, bench_report.write_svg)):
        if not path:
            continue
        try:  # one failed write (disk full, folder removed mid-run) must not lose the others
            print(f"{chr(10) if first else ''}{kind}: {write(report, path)}")
            first = False
        except (OSError, ChartError) as exc:
            print(f"error: {kind} not written to {path}: {exc}", file=sys.stderr)
            rc = 1
    return rc


def _tiny_pair(name: str, self_sd: bool) -> Any:
    from specvlm.models.pair import pair_from_models
    from specvlm.testing.tiny import tiny_llava_onevision, tiny_qwen2_5_vl

    if name == "tiny-llava":
        t, d = tiny_llava_onevision(seed=0), (None if self_sd else tiny_llava_onevision(seed=1, hidden=32, layers=1))
    else:
        t = tiny_qwen2_5_vl(seed=0)
        d = None if self_sd else tiny_qwen2_5_vl(seed=1, hidden=32, layers=1, pad_vocab_to=64)
    if d is None:
        return pair_from_models(*t, name=f"{name} (Self-SD)")
    return pair_from_models(t[0], t[1], d[0], d[1], name=f"{name} (Std-SD)")


def _apply_preset(args: argparse.Namespace) -> Any:
    """Fill unset model/frames/budget arguments from a paper preset; returns it (or None)."""
    from specvlm.models.presets import PAPER_SETTINGS

    s = PAPER_SETTINGS.get(args.preset or "")
    if s is None:
        return None
    if not args.model:
        args.model = s.target
        args.draft = args.draft or (None if args.self_sd else s.draft)
    if args.num_frames is None:
        args.num_frames = s.num_frames
    if args.max_new_tokens is None:
        args.max_new_tokens = s.max_new_tokens
    return s


def check_output_path(flag: str, path: str | os.PathLike) -> Path:
    """Check before a long run that ``path`` can be written (its folder is made if missing).

    Returns:
        The path.

    Raises:
        BenchError: the path is a folder, or its folder cannot be made or written (names ``flag``).
    """
    p = Path(path)
    if p.is_dir():
        raise BenchError(f"{flag} {path}: is a folder; give a file path, e.g. {Path(path) / 'bench.json'}.")
    existed = p.exists()
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        with open(p, "a"):
            pass
    except OSError as exc:
        raise BenchError(f"{flag} {path}: cannot write there ({exc.strerror or exc}); give a writable file path.") \
            from exc
    if not existed:
        p.unlink()
    return p


def check_cli_args(args: argparse.Namespace) -> None:
    """Everything about the ``bench`` arguments that can fail before the (slow) model load and runs.

    Raises:
        BenchError: bad length lists, frame side, prompt or output paths; ``--out-svg`` without
            ``--sweep``.
    """
    _check_length_lists(args)
    if args.synthetic_side < MIN_SYNTHETIC_SIDE:
        raise BenchError(f"--synthetic-side {args.synthetic_side}: give a frame side of at least "
                         f"{MIN_SYNTHETIC_SIDE} px (default 224).")
    check_prompt_flag(args.prompt)
    if args.out_svg and not args.sweep:
        raise BenchError("--out-svg plots the length sweep: add --sweep (e.g. 1024,2048,4096), or use --out-html "
                         "for the charts of other inputs.")
    for flag, path in (("--out-json", args.out_json), ("--out-html", args.out_html), ("--out-svg", args.out_svg)):
        if path:
            check_output_path(flag, path)


def _check_length_lists(args: argparse.Namespace) -> None:
    """Raise BenchError for an empty, malformed or repeating ``--sweep`` / ``--synthetic-tokens`` list."""
    for flag, text in (("--synthetic-tokens", args.synthetic_tokens), ("--sweep", args.sweep)):
        if text is not None and not text.strip(" ,"):
            raise BenchError(f"{flag} {text!r} names no length: give video token counts, e.g. 1024,2048,4096.")
        if text and len(set(parse_int_list(text))) != len(parse_int_list(text)):
            raise BenchError(f"{flag} {text!r} repeats a length: give each video token count once "
                             "(use --repeats for more rounds).")


def plan_inputs(args: argparse.Namespace, pair: Any, vcfg: VideoConfig) -> list[PlannedInput]:
    """Bench inputs from the CLI arguments, named but not yet read: videos, dataset samples, generated
    clips, sweep clips.

    Raises:
        BenchError / DatasetError: bad lists, missing dataset files (unreadable videos raise when read).
    """
    _check_length_lists(args)
    plans = plan_files(args.video, args.prompt, vcfg)
    if args.dataset:
        plans += plan_dataset(args.dataset, args.data_root, args.num_samples, args.data_seed, vcfg)
    if not plans and not args.synthetic_tokens and not args.sweep:
        args.synthetic_tokens = "4096"
    side, fps = args.synthetic_side, args.synthetic_fps
    for text, sweep in ((args.synthetic_tokens, False), (args.sweep, True)):
        if text:
            plans += plan_synthetic(pair, parse_int_list(text), args.prompt, side=side, fps=fps, sweep=sweep)
    return plans


def _setting_notes(args: argparse.Namespace, settings: BenchSettings) -> list[str]:
    """Settings that the run will not use, said once before it starts."""
    notes = []
    if (args.num_frames is not None or args.fps is not None) and not (args.video or args.dataset):
        notes.append("--num-frames / --fps sample video files; generated clips (--synthetic-tokens, --sweep) are "
                     "sized by their video token count instead")
    tree = settings.config.tree
    if tree.shape == "static" and tree.min_prob > 0:
        notes.append("--min-prob has no effect on a static tree (its shape is fixed); use --tree chain or dynamic")
    return notes


def report_from_args(args: argparse.Namespace, progress: Callable[[str], None] | None = None) -> dict:
    """Run ``python -m specvlm bench`` as the arguments say and return the report (the CLI prints it).

    Args:
        args: the parsed ``bench`` arguments.
        progress: called with one line per finished run.

    Returns:
        The report dict (see :func:`run_bench`).

    Raises:
        ValueError: bad settings, inputs or models (the CLI shows the message).
    """
    pair, settings, plans = plan_from_args(args, progress)
    inputs = [p.make() for p in plans]
    if progress:
        for line in [f"{inp.name}: {n}" for inp in inputs for n in inp.clip.notes]:  # decoder fallback, resizing
            progress(f"note: {line}")
    return run_bench(pair, inputs, settings, progress=progress, threads=getattr(args, "thread_choice", None))


def plan_from_args(args: argparse.Namespace, progress: Callable[[str], None] | None = None
                   ) -> tuple[Any, BenchSettings, list[PlannedInput]]:
    """Check the arguments, load the pair (on ``args.device``) and name the inputs (not read yet).

    Returns:
        (ModelPair, BenchSettings, planned inputs in report order); notes on unused settings go to ``progress``.

    Raises:
        ValueError: bad settings, inputs or models.
    """
    setting = _apply_preset(args)
    args.no_eos = args.no_eos or args.fixed_length
    methods = parse_methods(args.methods)       # settings errors before the (slow) model load
    BenchSettings(methods=methods, repeats=args.repeats, warmup=args.warmup,
                  background_load=args.background_load).validate()
    check_cli_args(args)
    if args.preset in TINY_PRESETS:
        pair, preset = _tiny_pair(args.preset, args.self_sd), None
    else:
        pair, preset = load_from_args(args)
    methods, dropped = drop_redundant_self(methods, pair.self_sd)
    settings = BenchSettings(methods=methods, config=decode_config(args, "vanilla", preset),
                             repeats=args.repeats, warmup=args.warmup, prompt_lookup_tokens=args.prompt_lookup_tokens,
                             step_costs=not args.no_step_costs, background_load=args.background_load)
    settings.validate()
    n = preset_settings(args, preset).num_frames
    vcfg = VideoConfig(num_frames=n, fps=args.fps, max_frames=max(VideoConfig.max_frames, n),
                       max_pixels=setting.max_pixels if setting else VideoConfig().max_pixels,
                       even_frames=pair.frames_per_token == 2)
    plans = plan_inputs(args, pair, vcfg)
    notes = [f"the pair is already Self-SD, so {m} would repeat {m[:-len(SELF)]}; skipped" for m in dropped]
    notes += _setting_notes(args, settings)
    if progress:
        for line in notes:
            progress(f"note: {line}")
    return pair, settings, plans
