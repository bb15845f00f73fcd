"""Arguments shared by ``generate`` and ``bench``: model, decoding and runtime flags, and what they resolve to.

Both sub-commands import this module; neither imports the other, and the library never imports
the CLI.
"""
from __future__ import annotations

import argparse
import os

from specvlm.dtypes import DTYPES
from specvlm.config import (DEFAULT_PROMPT, TREE_SHAPES, DecodeConfig,
                            PruneConfig, RESELECT_TRIGGERS, ReselectConfig, VideoConfig, config_from_settings)
from specvlm.text.prompting import PromptError, check_prompt


def add_common_args(p: argparse.ArgumentParser) -> None:
    """``-v`` (also accepted before the sub-command) and ``--threads``."""
    p.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                   help="log progress to stderr (also accepted before the sub-command)")
    p.add_argument("--threads", metavar="N", default=None,
                   help="torch intra-op CPU threads: a count, or auto (default: $SPECVLM_THREADS, else chosen from "
                        "the CPUs this process may use; a short calibration keeps 1 thread on a busy machine)")


def add_model_args(p: argparse.ArgumentParser) -> None:
    """--model/--draft/--device/--dtype, shared by the sub-commands."""
    g = p.add_argument_group("model")
    g.add_argument("--model", help="target: Hub id or local folder (default: Qwen2.5-VL-7B-Instruct with CUDA; "
                                    "on a CPU SmolVLM2-500M with its 256M draft when the Hub is reachable, "
                                    "else the bundled model)")
    g.add_argument("--draft", help="Std-SD draft (same family and tokenizer); default: Self-SD, or the "
                                   "bundled draft when --model is not given")
    g.add_argument("--self-sd", action="store_true", help="use the target as its own draft even for the bundled pair")
    g.add_argument("--device", help="cpu | cuda | cuda:N (default: cuda if available)")
    g.add_argument("--dtype", choices=DTYPES,
                   help="default: bfloat16 on CUDA, float32 on CPU")
    g.add_argument("--device-map", help='e.g. "auto" to shard a large target across GPUs')


def add_decode_args(p: argparse.ArgumentParser) -> None:
    """Pruning, tree and budget options with the paper's defaults."""
    d = DecodeConfig()
    g = p.add_argument_group("decoding")
    frames = g.add_mutually_exclusive_group()
    frames.add_argument("--num-frames", type=int, default=None,
                        help="frames sampled uniformly (default: the model preset's: 32 for the bundled pair, 128 "
                             f"for Qwen2.5-VL, 64 for LLaVA-OneVision; {VideoConfig.num_frames} for other --model)")
    frames.add_argument("--fps", type=float, default=None, help="sample at this rate (frames/s) instead of a count")
    g.add_argument("--drop-rate", type=float, default=d.prune.drop_rate, help="r: share of video tokens the "
                   "draft does not see (default %(default)s)")
    g.add_argument("--lambda", "--stage1-mass", dest="stage1_mass", type=float, default=None, metavar="λ",
                   help=f"λ: Stage I keeps the video tokens holding this share of the target's attention mass, "
                        f"in [0, 1] (default {d.prune.top_p}). Not nucleus sampling: that is --top-p-sampling")
    g.add_argument("--top-p", dest="top_p_deprecated", type=float, default=None, metavar="λ",
                   help="deprecated spelling of --lambda (kept for old scripts; prints a note)")
    g.add_argument("--tree", choices=TREE_SHAPES, default=None,
                   help=f"draft tree shape (default: the model preset's tree, else {d.tree.shape})")
    g.add_argument("--depth", type=int, default=None,
                   help=f"draft tree depth (default: the preset's, else {d.tree.depth})")
    g.add_argument("--top-k", type=int, default=None,
                   help=f"children per node (default: the preset's, else {d.tree.top_k})")
    g.add_argument("--total-tokens", type=int, default=None,
                   help=f"nodes kept in a dynamic tree (default: the preset's, else {d.tree.total_tokens})")
    g.add_argument("--min-prob", type=float, default=None,
                   help="early stop, in [0, 1): stop drafting deeper once the best path's cumulative draft "
                        f"probability is below this (0 = off; default: the preset's, else {d.tree.min_prob}). "
                        "Dynamic and chain trees only "
                        "(static trees ignore it). Greedy output stays identical; sampling keeps the same "
                        "distribution, but a seed's text may change")
    g.add_argument("--max-new-tokens", type=int, default=None,
                   help="generation budget in tokens (default: 128 for the bundled pair, else "
                        f"{DecodeConfig.max_new_tokens})")
    g.add_argument("--no-eos", action="store_true", help="ignore EOS and generate exactly --max-new-tokens")
    g.add_argument("--temperature", type=float, default=0.0,
                   help="sampling temperature; 0 = greedy (default). Speculative sampling keeps the target "
                        "distribution exactly (recursive rejection sampling over the draft tree)")
    g.add_argument("--top-p-sampling", type=float, default=1.0,
                   help="nucleus sampling mass in (0, 1]; 1 = off (default). The pruning share λ is --lambda")
    g.add_argument("--seed", type=int, default=0, help="seed for sampling and for the random pruning method (SD-Rand)")
    r = ReselectConfig()
    g.add_argument("--adaptive-r", action="store_true",
                   help=f"choose r per clip: keep the fewest most-attended video tokens holding {d.prune.r_mass * 100:.0f}%% of "
                        f"the target's Stage I attention, r bounded to [{d.prune.r_min}, {d.prune.r_max}] "
                        "(--drop-rate is then unused; off = the paper's fixed r)")
    g.add_argument("--reselect", action="store_true",
                   help="re-selection: when the target's attention at the position choosing the next token falls "
                        "mostly on video tokens the draft lacks, add the most attended of them to the draft (output "
                        "unchanged)")
    g.add_argument("--reselect-min-share", type=float, default=r.min_share, metavar="S",
                   help="share of that position's video attention on tokens the draft lacks above which "
                        "a step re-selects, in [0, 1] (default %(default)s)")
    g.add_argument("--reselect-step-tokens", type=int, default=r.step_tokens, metavar="N",
                   help="most video tokens added at one step (default %(default)s)")
    g.add_argument("--reselect-total-tokens", type=int, default=r.total_tokens, metavar="N",
                   help="most video tokens added per request (default %(default)s)")
    g.add_argument("--reselect-trigger", choices=RESELECT_TRIGGERS, default=r.trigger,
                   help="re-select after refused steps only, or before the first draft and after every step "
                        "(default %(default)s)")
    g.add_argument("--reselect-track", type=int, default=r.track, metavar="N",
                   help="also add each picked token's cell in up to N frame groups either side (default %(default)s)")
    g.add_argument("--reselect-sync", action=argparse.BooleanOptionalAction, default=r.sync,
                   help="Self-SD: the draft's cache takes the target's keys and values at every re-selection step "
                        "(default %(default)s)")


def resolve_lambda(args: argparse.Namespace) -> str | None:
    """Fold the deprecated ``--top-p`` into ``args.stage1_mass``; returns the one-line note to print, or None.

    Raises:
        ValueError: ``--top-p`` and ``--lambda`` both given with different values.
    """
    old = getattr(args, "top_p_deprecated", None)
    if old is None:
        return None
    if args.stage1_mass is not None and args.stage1_mass != old:
        raise ValueError(f"--top-p {old} and --lambda {args.stage1_mass} set the same λ: give only --lambda.")
    args.stage1_mass = old
    return ("--top-p is a deprecated spelling of --lambda (Stage I's attention share λ); use --lambda, "
            "and --top-p-sampling for nucleus sampling")


def resolve_models(args: argparse.Namespace):
    """(target, draft, preset) from the arguments and the default preset."""
    from specvlm.models.presets import default_preset

    if args.self_sd and args.draft:
        raise ValueError(f"--self-sd and --draft {args.draft} contradict each other: give one of them.")
    preset = default_preset()
    if args.model:
        # a --model that is a preset's target (e.g. the bundled one) keeps that preset's frame/token/tree defaults:
        # the preset with the same draft (none: Self-SD) when there is one
        return args.model, args.draft, preset_of(args.model, args.draft or None)
    draft = None if args.self_sd else (args.draft or preset.draft)
    return preset.target, draft, preset


def preset_of(model: str, draft: str | None | bool = False):
    """The preset whose target is ``model`` (same Hub id, or the same local folder), else None.

    ``draft``: prefer the preset with this draft (None: the Self-SD preset, no draft), so its tree is the one
    tuned for that pair; without such a preset, or with ``draft=False`` (not given), the first with the target.
    """
    from specvlm.models.presets import PRESETS

    def same(a: str | None, b: str | None) -> bool:
        if a == b:
            return True
        return a is not None and b is not None and os.path.isdir(a) and os.path.isdir(b) and os.path.samefile(a, b)

    found = [p for p in PRESETS.values() if same(model, p.target)]
    if draft is not False:
        found = [p for p in found if same(draft, p.draft)] + found
    return next(iter(found), None)


def load_from_args(args: argparse.Namespace):
    """Load the ModelPair the arguments name (progress goes to the log)."""
    from specvlm.models.loading import load_pair

    target, draft, preset = resolve_models(args)
    return load_pair(target, draft, device=args.device, dtype=args.dtype, device_map=args.device_map), preset


def decode_config(args: argparse.Namespace, method: str, preset) -> DecodeConfig:
    """DecodeConfig from the arguments, each tree option and the budget left unset taken from the preset
    (:func:`specvlm.models.presets.resolve_settings`, the page's and the API's resolver too;
    :func:`specvlm.config.config_from_settings`; raises ConfigError on bad values)."""
    resolved = preset_settings(args, preset)
    lam = getattr(args, "stage1_mass", None)
    return config_from_settings(
        method, max_new_tokens=resolved.max_new_tokens, stop_at_eos=not args.no_eos, drop_rate=args.drop_rate,
        top_p=PruneConfig().top_p if lam is None else lam, seed=args.seed, temperature=args.temperature,
        top_p_sampling=args.top_p_sampling, tree=resolved.tree,
        adaptive_r=bool(getattr(args, "adaptive_r", False)), reselect=reselect_config(args))


def preset_settings(args: argparse.Namespace, preset):
    """The arguments' frames, budget and tree options resolved against ``preset`` (None: a model without one,
    which gets the library's defaults on any device; :func:`specvlm.models.presets.resolve_settings`)."""
    from specvlm.models.presets import resolve_settings

    return resolve_settings(preset, num_frames=getattr(args, "num_frames", None),
                            max_new_tokens=args.max_new_tokens, shape=args.tree, depth=args.depth,
                            top_k=args.top_k, total_tokens=args.total_tokens, min_prob=args.min_prob)


def reselect_config(args: argparse.Namespace) -> ReselectConfig:
    """The :class:`ReselectConfig` of ``--reselect`` and its ``--reselect-*`` options (raises ConfigError)."""
    d = ReselectConfig()
    return ReselectConfig(enabled=bool(getattr(args, "reselect", False)),
                          min_share=getattr(args, "reselect_min_share", d.min_share),
                          step_tokens=getattr(args, "reselect_step_tokens", d.step_tokens),
                          total_tokens=getattr(args, "reselect_total_tokens", d.total_tokens),
                          trigger=getattr(args, "reselect_trigger", d.trigger),
                          track=getattr(args, "reselect_track", d.track), sync=getattr(args, "reselect_sync", d.sync))


def video_config(args: argparse.Namespace, pair, preset) -> VideoConfig:
    """VideoConfig from the arguments (``pair`` None: validation only, before any model is loaded)."""
    n = preset_settings(args, preset).num_frames
    even = pair is not None and pair.frames_per_token == 2
    return VideoConfig(num_frames=n, fps=args.fps, max_frames=max(VideoConfig.max_frames, n), even_frames=even)


def check_prompt_flag(prompt: str | None) -> None:
    """Raise ValueError naming ``--prompt`` when it is empty or only whitespace
    (:func:`specvlm.text.prompting.check_prompt`)."""
    try:
        check_prompt(prompt or "")
    except PromptError:
        raise ValueError("--prompt is empty: type a question or instruction about the video "
                         f"(or leave --prompt out for \"{DEFAULT_PROMPT}\").") from None
