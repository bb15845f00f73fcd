"""Command line: ``python -m specvlm generate|bench ...``.

Examples:
    python -m specvlm generate --video assets/videos/shapes_short.mp4 --prompt "Describe this video."
    python -m specvlm generate --model Qwen/Qwen2.5-VL-7B-Instruct --video clip.mp4 --prompt "..." --json
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys

from specvlm.config import (DECODE_METHODS, TREE_SHAPES, DecodeConfig, PruneConfig, SamplingConfig, TreeConfig,
                            VideoConfig)
from specvlm.prompting import SUBTITLE_MODES, no_transcript_note


def add_model_args(p: argparse.ArgumentParser) -> None:
    """--model/--draft/--device/--dtype, shared by the sub-commands."""
    g = p.add_argument_group("model")
    g.add_argument("--model", help="target: Hub id or local folder (default: the bundled CPU model, or "
                                    "Qwen2.5-VL-7B-Instruct when CUDA is available)")
    g.add_argument("--draft", help="Std-SD draft (same family and tokenizer); default: Self-SD, or the "
                                   "bundled draft when --model is not given")
    g.add_argument("--self-sd", action="store_true", help="use the target as its own draft even for the bundled pair")
    g.add_argument("--device", help="cpu | cuda | cuda:N (default: cuda if available)")
    g.add_argument("--dtype", choices=["float32", "bfloat16", "float16"],
                   help="default: bfloat16 on CUDA, float32 on CPU")
    g.add_argument("--device-map", help='e.g. "auto" to shard a large target across GPUs')


def add_decode_args(p: argparse.ArgumentParser) -> None:
    """Pruning, tree and budget options with the paper's defaults."""
    d = DecodeConfig()
    g = p.add_argument_group("decoding")
    frames = g.add_mutually_exclusive_group()
    frames.add_argument("--num-frames", type=int, default=None,
                        help="frames sampled uniformly (default: the model preset's: 32 for the bundled pair, 128 "
                             "for Qwen2.5-VL, 64 for LLaVA-OneVision; 16 for other --model)")
    frames.add_argument("--fps", type=float, default=None, help="sample at this rate (frames/s) instead of a count")
    g.add_argument("--drop-rate", type=float, default=d.prune.drop_rate, help="r: share of video tokens the "
                   "draft does not see (default %(default)s)")
    g.add_argument("--top-p", type=float, default=d.prune.top_p, help="λ: Stage I cumulative attention share "
                   "(default %(default)s)")
    g.add_argument("--tree", choices=TREE_SHAPES, default=d.tree.shape, help="draft tree shape (default %(default)s)")
    g.add_argument("--depth", type=int, default=d.tree.depth, help="draft tree depth (default %(default)s)")
    g.add_argument("--top-k", type=int, default=d.tree.top_k, help="children per node (default %(default)s)")
    g.add_argument("--total-tokens", type=int, default=d.tree.total_tokens,
                   help="nodes kept in a dynamic tree (default %(default)s)")
    g.add_argument("--min-prob", type=float, default=d.tree.min_prob,
                   help="early stop, in [0, 1): stop drafting deeper once the best path's cumulative draft "
                        "probability is below this (0 = off, default %(default)s). Dynamic and chain trees only "
                        "(static trees ignore it). Greedy output stays identical; sampling keeps the same "
                        "distribution, but a seed's text may change")
    g.add_argument("--max-new-tokens", type=int, default=None,
                   help="generation budget in tokens (default: 128 for the bundled pair, else 256)")
    g.add_argument("--no-eos", action="store_true", help="ignore EOS and generate exactly --max-new-tokens")
    g.add_argument("--temperature", type=float, default=0.0,
                   help="sampling temperature; 0 = greedy (default). Speculative sampling keeps the target "
                        "distribution exactly (recursive rejection sampling over the draft tree)")
    g.add_argument("--top-p-sampling", type=float, default=1.0,
                   help="nucleus sampling mass in (0, 1] (not the pruning λ, which is --top-p)")
    g.add_argument("--seed", type=int, default=0, help="seed for sampling and for the random pruning method (SD-Rand)")


def resolve_models(args: argparse.Namespace):
    """(target, draft, preset) from the arguments and the default preset."""
    from specvlm.models.presets import default_preset

    if args.self_sd and args.draft:
        raise ValueError(f"--self-sd and --draft {args.draft} contradict each other: give one of them.")
    preset = default_preset()
    if args.model:
        # a --model that is a preset's target (e.g. the bundled one) keeps that preset's frame/token defaults
        return args.model, args.draft, preset_of(args.model)
    draft = None if args.self_sd else (args.draft or preset.draft)
    return preset.target, draft, preset


def preset_of(model: str):
    """The preset whose target is ``model`` (same Hub id, or the same local folder), else None."""
    from specvlm.models.presets import PRESETS

    def same(a: str, b: str) -> bool:
        if a == b:
            return True
        return os.path.isdir(a) and os.path.isdir(b) and os.path.samefile(a, b)

    return next((p for p in PRESETS.values() if same(model, p.target)), None)


def load_from_args(args: argparse.Namespace):
    """Load the ModelPair the arguments name (progress goes to the log)."""
    from specvlm.models import load_pair

    target, draft, preset = resolve_models(args)
    return load_pair(target, draft, device=args.device, dtype=args.dtype, device_map=args.device_map), preset


def decode_config(args: argparse.Namespace, method: str, preset) -> DecodeConfig:
    """DecodeConfig from the arguments (raises ConfigError on bad values)."""
    max_new = args.max_new_tokens if args.max_new_tokens is not None else (preset.max_new_tokens if preset else 256)
    return DecodeConfig(
        method=method, max_new_tokens=max_new, stop_at_eos=not args.no_eos,
        prune=PruneConfig(method=method if method != "vanilla" else "specvlm", drop_rate=args.drop_rate,
                          top_p=args.top_p, seed=args.seed),
        tree=TreeConfig(shape=args.tree, depth=args.depth, top_k=args.top_k, total_tokens=args.total_tokens,
                        min_prob=args.min_prob),
        sampling=SamplingConfig(temperature=args.temperature, top_p_sampling=args.top_p_sampling, seed=args.seed),
    )


def video_config(args: argparse.Namespace, pair, preset) -> VideoConfig:
    """VideoConfig from the arguments (``pair`` None: validation only, before any model is loaded)."""
    n = args.num_frames if args.num_frames is not None else (preset.num_frames if preset else 16)
    even = pair is not None and pair.frames_per_token == 2
    return VideoConfig(num_frames=n, fps=args.fps, max_frames=max(256, n), even_frames=even)


def result_json(res) -> dict:
    """The JSON object printed by ``generate --json``."""
    pr = res.prefill.prune
    return {
        "text": res.text, "token_ids": res.token_ids, "method": res.method,
        "num_video_tokens": res.num_video_tokens, "num_kept": res.num_kept,
        "num_prompt_tokens": res.prefill.num_prompt_tokens,
        "target_subtitle_tokens": res.prefill.target_subtitle_tokens,
        "draft_subtitle_tokens": res.prefill.draft_subtitle_tokens,
        "tau": res.tau, "tokens_per_target_forward": res.tokens_per_target_forward,
        "decode_s": res.decode_s, "total_s": res.total_s, "tokens_per_s": res.tokens_per_s,
        "prefill_s": res.prefill.prefill_s, "draft_s": res.draft_s, "verify_s": res.verify_s,
        "accept_lengths": res.accept_lengths,
        "stage1": pr.stage1.tolist() if pr is not None else [],
        "stage2": pr.stage2.tolist() if pr is not None else [],
    }


def subtitle_args(args: argparse.Namespace) -> dict:
    """Keyword arguments for :func:`specvlm.decoding.generate` from ``--srt`` / ``--subtitle-mode``.

    Raises:
        specvlm.subtitles.SubtitleError (a ValueError): unreadable or malformed .srt (the message names it).
        ValueError: ``--subtitle-mode`` without ``--srt``.
    """
    if not args.srt:
        if args.subtitle_mode not in ("both", "none"):
            raise ValueError(f"--subtitle-mode {args.subtitle_mode} needs --srt FILE (the subtitles to show).")
        return {}
    from specvlm.subtitles import load_srt

    try:
        cues = load_srt(args.srt)
    except ValueError as e:
        raise ValueError(f"--srt: {e}") from e
    if not cues:
        print(f"note: --srt {args.srt} has no subtitle cues, so no transcript was added", file=sys.stderr)
        return {}
    return {"subtitles": cues, "subtitle_mode": args.subtitle_mode}


def check_prompt_flag(prompt: str | None) -> None:
    """Raise ValueError naming ``--prompt`` when it is empty or only whitespace."""
    if not (prompt or "").strip():
        raise ValueError("--prompt is empty: type a question or instruction about the video "
                         "(or leave --prompt out for \"Describe this video in detail.\").")


def cmd_generate(args: argparse.Namespace) -> int:
    from specvlm.decoding import generate
    from specvlm.metrics import first_divergence
    from specvlm.video import load_video, probe_video

    # settings and the video path first: a typo must not cost a model download and load
    preset = resolve_models(args)[2]
    cfg = decode_config(args, args.method, preset)
    video_config(args, None, preset)
    if os.path.isdir(args.video):
        raise ValueError(f"--video {args.video} is a folder: give a video file.")
    if not os.path.isfile(args.video):
        raise ValueError(f"--video {args.video}: no such file; check the path.")
    check_prompt_flag(args.prompt)
    probe_video(args.video)   # a file that is no video fails here, before any model is loaded
    extra = subtitle_args(args)
    pair, preset = load_from_args(args)
    clip = load_video(args.video, video_config(args, pair, preset))
    asked = args.num_frames is not None or args.fps is not None
    for note in clip.notes:
        # a clip shorter than the preset's default frame count is not news unless the user asked for more
        if asked or not note.startswith("the video has only"):
            print(f"note: {note}", file=sys.stderr)
    res = generate(pair, clip, args.prompt, cfg, **extra)
    out = result_json(res)
    notes = list(clip.notes)
    missed = no_transcript_note(extra.get("subtitles"), clip.timestamps) \
        if extra.get("subtitle_mode", "none") != "none" else None
    if missed:
        notes.append(missed.replace("no subtitle cue", "no --srt cue", 1))
        print(f"note: {notes[-1]}", file=sys.stderr)
    if args.compare and not cfg.speculative:
        notes.append("--compare needs a speculative --method; vanilla ran alone")
        print(f"note: {notes[-1]}", file=sys.stderr)
    if cfg.speculative and cfg.tree.shape == "static" and cfg.tree.min_prob > 0:
        notes.append("--min-prob has no effect on a static tree (its shape is fixed); use --tree chain or dynamic")
        print(f"note: {notes[-1]}", file=sys.stderr)
    out["notes"] = notes
    if args.compare and cfg.speculative:
        van = generate(pair, clip, args.prompt, decode_config(args, "vanilla", preset), **extra)
        out["vanilla"] = result_json(van)
        out["identical"] = van.token_ids == res.token_ids
        out["first_divergence"] = first_divergence(van.token_ids, res.token_ids)
        out["speedup"] = van.decode_s / res.decode_s if res.decode_s > 0 else None
    if args.json:
        print(json.dumps(out))
        return 0
    print(res.text)
    print(f"\n[{res.method}] {len(res.token_ids)} tokens, {res.tokens_per_s:.1f} tokens/s, decode {res.decode_s:.2f} s, "
          f"total {res.total_s:.2f} s, video tokens {res.num_video_tokens} -> kept {res.num_kept}, "
          f"tau {res.tau:.2f}, tokens/target forward {res.tokens_per_target_forward:.2f}", file=sys.stderr)
    if "vanilla" in out:
        same = "identical" if cfg.sampling.temperature == 0 else "identical (sampling: equal only in distribution)"
        print(f"[vanilla] {out['vanilla']['tokens_per_s']:.1f} tokens/s; speedup {out['speedup']:.2f}x "
              f"(one run each, no warm-up: use `bench` for measured speedups); {same}: {out['identical']}",
              file=sys.stderr)
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    """``python -m specvlm bench``: print the markdown report; write JSON / HTML / SVG when asked."""
    from specvlm import bench

    from specvlm.svgchart import ChartError

    report = bench.report_from_args(args, progress=lambda line: print(line, file=sys.stderr, flush=True))
    print(bench.format_report(report))
    rc, first = 0, True
    for kind, path, write in (("JSON", args.out_json, bench.write_json), ("HTML", args.out_html, bench.write_html),
                              ("SVG", args.out_svg, bench.write_svg)):
        if not path:
            continue
        try:  # one failed write (disk full, folder removed mid-run) must not lose the others
            print(f"{chr(10) if first else ''}{kind}: {write(report, path)}")
            first = False
        except (OSError, ChartError) as exc:
            print(f"error: {kind} not written to {path}: {exc}", file=sys.stderr)
            rc = 1
    return rc


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m specvlm", description=(
        "SpecVLM: lossless speculative decoding for video LLMs. The target keeps every video token; the draft "
        "sees ~10% chosen by the target's attention (Stage I) and spatially uniform filling (Stage II)."))
    p.add_argument("-v", "--verbose", action="store_true", help="log progress to stderr")
    sub = p.add_subparsers(dest="command", required=True)
    g = sub.add_parser("generate", help="decode one video + prompt",
                       description="Decode one video + prompt and print the text (or --json).")
    g.add_argument("--video", required=True, help="video file (mp4, webm, mkv, avi, mov, gif...)")
    g.add_argument("--prompt", default="Describe this video in detail.", help="user prompt")
    g.add_argument("--method", choices=DECODE_METHODS, default="specvlm",
                   help="vanilla, or a speculative method named by its draft pruning (none = SD-Tree, "
                        "random = SD-Rand); default %(default)s")
    g.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                   help="log progress to stderr (also accepted before the sub-command)")
    g.add_argument("--json", action="store_true", help="print one JSON object")
    g.add_argument("--compare", action="store_true", help="also run vanilla; report speedup and identity")
    g.add_argument("--srt", help="SubRip subtitles of the video; the cues go into the prompt as a transcript")
    g.add_argument("--subtitle-mode", choices=SUBTITLE_MODES, default="both",
                   help="who sees the --srt transcript: both models, only the target, only the draft (the "
                        "output is then that of the prompt without subtitles), or none (ignored); default %(default)s")
    add_model_args(g)
    add_decode_args(g)
    g.set_defaults(func=cmd_generate)
    try:
        from specvlm import bench
        bench.add_parser(sub)
    except ImportError:  # pragma: no cover - bench is optional at import time
        pass
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status (2 for input/setting errors)."""
    args = build_parser().parse_args(argv)
    if getattr(args, "bench", False):
        args.func = cmd_bench
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    if not args.verbose:  # no "Loading weights" bars on every run; -v shows them
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    try:
        return args.func(args)
    except ValueError as exc:
        print(f"error: {_flag_names(str(exc))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"\ninterrupted: {args.command} stopped before the end; nothing more was written.", file=sys.stderr)
        return 130


_FLAGS = {"drop_rate": "--drop-rate", "top_p_sampling": "--top-p-sampling", "top_p": "--top-p",
          "num_frames": "--num-frames", "max_new_tokens": "--max-new-tokens", "total_tokens": "--total-tokens",
          "top_k": "--top-k", "depth": "--depth", "min_prob": "--min-prob", "temperature": "--temperature", "fps": "--fps",
          "repeats": "--repeats", "warmup": "--warmup"}


def _flag_names(message: str) -> str:
    """Name settings in an error message by their command-line flags (``drop_rate=`` -> ``--drop-rate=``)."""
    return re.sub(r"(?<![\w-])(" + "|".join(sorted(_FLAGS, key=len, reverse=True)) + r")=",
                  lambda m: _FLAGS[m.group(1)] + "=", message)


if __name__ == "__main__":
    sys.exit(main())
