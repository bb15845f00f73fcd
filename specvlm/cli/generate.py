"""``python -m specvlm generate``: decode one video + prompt and print the text (or one JSON object)."""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from specvlm.cli.args import (add_common_args, add_decode_args, add_model_args, check_prompt_flag,
                              decode_config, load_from_args, resolve_models, video_config)
from specvlm.config import DECODE_METHODS, DEFAULT_PROMPT, DecodeConfig
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


def compare_json(van, res, cfg, dtype) -> dict:
    """The ``--compare`` fields: identity, the first divergence and its kind, and the decode speedup.

    Args:
        van: the vanilla DecodeResult (its ``margins``: the target's top-1 minus top-2 logit margin
            per generated token).
        res: the speculative DecodeResult of the same request.
        cfg: the speculative run's DecodeConfig (sampling runs are equal only in distribution, so
            their divergence is not classified).
        dtype: the target's dtype (sets the near-tie threshold).

    Returns:
        {identical, first_divergence (token index or None), divergence_margin (logit units or None),
        divergence_kind (``identical`` / ``near-tie`` / ``mismatch``; None when sampling), speedup}.
    """
    from specvlm.analysis.metrics import compare_outputs

    div = compare_outputs(van.token_ids, res.token_ids, van.margins, dtype)
    greedy = cfg.sampling.temperature == 0
    return {"identical": div.identical, "first_divergence": div.index,
            "divergence_margin": div.margin if greedy else None, "divergence_kind": div.kind if greedy else None,
            "speedup": van.decode_s / res.decode_s if res.decode_s > 0 else None}


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
    out["engine"] = cfg.engine
    if args.compare and cfg.speculative:
        van = generate(pair, inputs, decode_config(args, "vanilla", preset))
        out["vanilla"] = result_json(van)
        out.update(compare_json(van, res, cfg, pair.target.get_input_embeddings().weight.dtype))
    if args.json:
        print(json.dumps(out))
        return 0
    print(res.text)
    print(f"\n[{res.method}, {cfg.engine} engine] {len(res.token_ids)} tokens, {res.tokens_per_s:.1f} tokens/s, "
          f"decode {res.decode_s:.2f} s, "
          f"total {res.total_s:.2f} s, video tokens {res.num_video_tokens} -> kept {res.num_kept}, "
          f"tau {res.tau:.2f}, tokens/target forward {res.tokens_per_target_forward:.2f}", file=sys.stderr)
    if "vanilla" in out:
        same = "identical" if cfg.sampling.temperature == 0 else "identical (sampling: equal only in distribution)"
        print(f"[vanilla] {out['vanilla']['tokens_per_s']:.1f} tokens/s; speedup {out['speedup']:.2f}x "
              f"(one run each, no warm-up: use `bench` for measured speedups); {same}: {out['identical']}"
              + (f" ({out['divergence_kind']} at token {out['first_divergence']}, target margin "
                 f"{out['divergence_margin']:.3g})" if out["divergence_margin"] is not None else ""),
              file=sys.stderr)
    return 0
