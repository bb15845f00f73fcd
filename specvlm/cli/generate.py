"""``python -m specvlm generate``: decode one video + prompt and print the text (or one JSON object)."""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from specvlm.cli.args import (add_common_args, add_decode_args, add_model_args, check_prompt_flag,
                              decode_config, load_from_args, resolve_models, video_config)
from specvlm.analysis.run import RunRecord, compare_runs
from specvlm.config import DECODE_METHODS, DEFAULT_PROMPT, DecodeConfig, vanilla_config
from specvlm.text.prompting import SUBTITLE_MODES, no_transcript_note


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """Register the ``generate`` sub-command on ``python -m specvlm``'s sub-parsers."""
    g = sub.add_parser("generate", help="decode one video + prompt",
                       description="Decode one video + prompt and print the text (or --json).")
    g.add_argument("--video", required=True, help="video file (mp4, webm, mkv, avi, mov, gif...)")
    g.add_argument("--prompt", default=DEFAULT_PROMPT, help="user prompt")
    g.add_argument("--method", choices=DECODE_METHODS, default="specvlm",
                   help="vanilla, or a speculative method named by its draft pruning (none = SD-Tree, "
                        "random = SD-Rand); default %(default)s")
    add_common_args(g)
    g.add_argument("--json", action="store_true", help="print one JSON object")
    g.add_argument("--compare", action="store_true", help="also run vanilla; report speedup and identity")
    g.add_argument("--srt", help="SubRip subtitles of the video; the cues go into the prompt as a transcript")
    g.add_argument("--subtitle-mode", choices=SUBTITLE_MODES, default="both",
                   help="who sees the --srt transcript: both models, only the target, only the draft (the "
                        "output is then that of the prompt without subtitles), or none (ignored); default %(default)s")
    add_model_args(g)
    add_decode_args(g)
    g.set_defaults(func=cmd_generate)
    return g


def result_json(res, cfg: DecodeConfig | None = None) -> dict:
    """The JSON object of one run printed by ``generate --json``: the run record's numbers
    (:meth:`specvlm.analysis.run.RunRecord.run_json`) and the stream's end-to-end ``total_s``.

    Args:
        res: the DecodeResult.
        cfg: its DecodeConfig (the record's settings; None = only the method).
    """
    rec = RunRecord.from_events([res.prefill, *res.steps], cfg or {"method": res.method})
    return rec.run_json() | {"total_s": res.total_s}


def compare_json(van, res, cfg, dtype) -> dict:
    """The ``--compare`` fields, the one comparison schema
    (:meth:`specvlm.analysis.run.Comparison.to_json`): identical, divergence (index, kind, margin,
    threshold, dtype; kind and margin None when sampling) and the decode speedup.

    Args:
        van: the vanilla DecodeResult (its steps carry the target's top-1 minus top-2 logit margins).
        res: the speculative DecodeResult of the same request.
        cfg: the speculative run's DecodeConfig (sampling runs are equal only in distribution, so
            their divergence is not classified).
        dtype: the target's dtype (sets the near-tie threshold).
    """
    records = [RunRecord.from_events([r.prefill, *r.steps]) for r in (van, res)]
    return compare_runs(*records, dtype, greedy=cfg.sampling.greedy).to_json()


def subtitle_args(args: argparse.Namespace) -> dict:
    """Keyword arguments for :func:`specvlm.engine.stream.generate` from ``--srt`` / ``--subtitle-mode``.

    Raises:
        specvlm.text.subtitles.SubtitleError (a ValueError): unreadable or malformed .srt (the message names it).
        ValueError: ``--subtitle-mode`` without ``--srt``.
    """
    if not args.srt:
        if args.subtitle_mode not in ("both", "none"):
            raise ValueError(f"--subtitle-mode {args.subtitle_mode} needs --srt FILE (the subtitles to show).")
        return {}
    from specvlm.text.subtitles import load_srt

    try:
        cues = load_srt(args.srt)
    except ValueError as e:
        raise ValueError(f"--srt: {e}") from e
    if not cues:
        print(f"note: --srt {args.srt} has no subtitle cues, so no transcript was added", file=sys.stderr)
        return {}
    return {"subtitles": cues, "subtitle_mode": args.subtitle_mode}


def check_before_load(args: argparse.Namespace) -> DecodeConfig:
    """Settings, prompt and video path first, so a typo does not cost a model download and load.

    Returns:
        The speculative or vanilla DecodeConfig of ``--method``.

    Raises:
        ValueError: a bad setting, an empty prompt, a missing file or folder, or a file that is no video.
    """
    from specvlm.video import probe_video

    preset = resolve_models(args)[2]
    cfg = decode_config(args, args.method, preset)
    video_config(args, None, preset)
    if os.path.isdir(args.video):
        raise ValueError(f"--video {args.video} is a folder: give a video file.")
    if not os.path.isfile(args.video):
        raise ValueError(f"--video {args.video}: no such file; check the path.")
    check_prompt_flag(args.prompt)
    probe_video(args.video)   # a file that is no video fails here, before any model is loaded
    return cfg


def cmd_generate(args: argparse.Namespace) -> int:
    """``python -m specvlm generate``: print the text (and a timing line on stderr), or one JSON object."""
    from specvlm.engine.prepare import prepare
    from specvlm.engine.stream import generate
    from specvlm.video import load_video

    cfg = check_before_load(args)
    extra = subtitle_args(args)
    pair, preset = load_from_args(args)
    clip = load_video(args.video, video_config(args, pair, preset))
    asked = args.num_frames is not None or args.fps is not None
    for note in clip.notes:
        # a clip shorter than the preset's default frame count is not news unless the user asked for more
        if asked or not note.startswith("the video has only"):
            print(f"note: {note}", file=sys.stderr)
    inputs = prepare(pair, clip, args.prompt, **extra)
    res = generate(pair, inputs, cfg)
    out = result_json(res, cfg)
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
        van_cfg = vanilla_config(cfg)
        van = generate(pair, inputs, van_cfg)
        out["vanilla"] = result_json(van, van_cfg)
        out.update(compare_json(van, res, cfg, pair.target.get_input_embeddings().weight.dtype))
    if args.json:
        print(json.dumps(out))
        return 0
    print(res.text)
    print(f"\n[{res.method}] {len(res.token_ids)} tokens, {res.tokens_per_s:.1f} tokens/s, "
          f"decode {res.decode_s:.2f} s, "
          f"total {res.total_s:.2f} s, video tokens {res.num_video_tokens} -> kept {res.num_kept}, "
          f"tau {res.tau:.2f}, tokens/target forward {res.tokens_per_target_forward:.2f}", file=sys.stderr)
    if cfg.speculative and (cfg.prune.adaptive_r or cfg.reselect.enabled):
        fired = [s for s in res.steps if s.added]
        print(f"[{res.prefill.r_reason}" + (f" Re-selection added {sum(len(s.added) for s in fired)} video tokens at "
                                            f"{len(fired)} steps." if cfg.reselect.enabled else "") + "]", file=sys.stderr)
    if "vanilla" in out:
        same = "identical" if cfg.sampling.temperature == 0 else "identical (sampling: equal only in distribution)"
        div, speed = out["divergence"], out["speedup"]
        print(f"[vanilla] {out['vanilla']['tokens_per_s']:.1f} tokens/s; speedup "
              f"{'n/a' if speed is None else f'{speed:.2f}x'} "
              f"(one run each, no warm-up: use `bench` for measured speedups); {same}: {out['identical']}"
              + (f" ({div['kind']} at token {div['index']}, target margin {div['margin']:.3g})"
                 if div is not None and div["margin"] is not None else ""),
              file=sys.stderr)
    return 0
