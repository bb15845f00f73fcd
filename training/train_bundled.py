#!/usr/bin/env python
"""Train the bundled Qwen2.5-VL target + draft pair on synthetic shape videos (CPU).

Phase 1 trains the TARGET (Qwen2_5_VLForConditionalGeneration, from scratch)
on clips from ``specvlm.bench.synth`` generated inline: mixed clip lengths
(8-128 frames) and sizes (112-224 px), a single-object curriculum first, a mix of
detailed descriptions and multi-turn single-attribute questions, AdamW at a
constant learning rate with a linear decay over the last part of the wall-clock
budget. The loss covers every text token of the chat (``DataRecipe.label_all_text``; shape and motion words weighted ``--attr-weight``), plus a
per-video-token probe loss on the vision features (:class:`VisionProbe`) that makes the vision
tower encode what is drawn where, plus a focus loss (``--focus-weight``, :func:`focus_loss`):
the prompt's text-to-video attention, as Stage I reads it, should fall on object/text tokens; and a
routing loss (``--route-weight``, :func:`routing_loss`): the caption words that name an object attend to it.

An optional POLISH phase (``--polish-minutes``, off by default) continues the finished
target on scenes weighted towards two and three objects (``--polish-objects``, no
curriculum, ``--polish-describe`` share of descriptions) with its own short schedule
(peak ``--polish-lr``, same losses): the multi-object captions are where a from-scratch
run stays weakest (it copies the previous object's motion or names an object twice).
``--polish-recipe`` gives that phase (and the draft after it) another data recipe: a target
that first learns the plain scenes, then the sparse-information mix. ``--init-target DIR`` skips the
target phase and polishes a saved target instead (its weights and its processor).

Phase 2 trains the DRAFT (same architecture and tokenizer, one text layer),
initialised from the (polished) target's vision tower, embeddings, first layer, norm and
head, and distilled from the frozen target: KL(target || draft) plus
cross-entropy on every labelled text position. Half the draft batches keep only 10-30% of the
video tokens (uniform + random, original M-RoPE positions), as the draft sees
them under SpecVLM pruning.

``--recipe sparse`` adds sparse-information scenes (:mod:`training.scenes`: small
objects, an object that flashes on a few frames, brief small text, distractor shapes) to 70% of
the clips of 48+ frames and 15% of the shorter ones, and a subtitle track to 40% of all clips,
placed in the prompt as the app places it (:mod:`specvlm.text.prompting`), often with a fact (a code,
a name, a flag colour) that the description reports (``--fact-weight`` counts the fact's words in answers
more; ``--fact-route-weight`` trains the positions that write them to attend to them in the transcript); ``--focus-mode spread`` trains the prompt's
video attention towards an equal share per named object or text, so Stage I keeps a flash's few
tokens first; ``--salient-prob`` makes part of the draft's pruned batches keep those tokens first.

Each phase has a budget: optimizer steps (``--target-steps``, ``--draft-steps``,
``--polish-steps``: the same run on any machine) or wall-clock minutes of step time; the
learning-rate schedule follows the progress through it, so a budget run always ends with the decay. State is
checkpointed every ``--ckpt-minutes`` to ``<work>/<phase>/ckpt.pt``; rerunning the
same command resumes (a finished phase is skipped; a larger budget continues it:
delete ``<work>/draft`` after extending the target so the draft is redone). Final models are saved with
``save_pretrained`` (safetensors) plus the processor into ``<out>/target`` and
``<out>/draft`` with a loss-curve PNG.

Training scene seeds are drawn below 10**8; evaluate on seeds >= 10**9.

The phases live in :mod:`training`; this module is the command line.

Examples (from the repository root):
    python -m training.train_bundled --smoke                    # a few steps, tiny
    python -m training.train_bundled --target-minutes 60 --draft-minutes 22
    python -m training.train_bundled --recipe sparse --focus-mode spread --salient-prob 0.5 \
        --target-steps 3600 --draft-steps 450 --work runs/sparse --out runs/sparse/model
    python -m training.train_bundled --recipe bundled --target-steps 3000 --polish-recipe sparse \
        --polish-steps 1500 --polish-lr 1e-3 --fact-weight 5 --focus-mode spread --salient-prob 0.5 \
        --draft-steps 450 --work runs/staged --out runs/staged/model    # plain scenes first
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from pathlib import Path

import torch

from training.build_bundled_processor import build_processor
from training.checkpoints import save_final
from training.data import SMOKE_RECIPE, SPARSE_RECIPE_CHANGES, DataRecipe
from training.loop import train_phase
from training.model import SIZES, TINY_SIZE


def parse_args(argv=None):
    class Fmt(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
        """The module docstring as written, and every option's default in --help."""

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=Fmt)
    ap.add_argument("--out", default="assets/model", help="final models go to OUT/target and OUT/draft")
    ap.add_argument("--work", default="runs/bundled", help="checkpoints, logs (resumable)")
    ap.add_argument("--target-minutes", type=float, default=60.0, help="wall budget of the target phase")
    ap.add_argument("--draft-minutes", type=float, default=22.0, help="wall budget of the draft phase")
    ap.add_argument("--polish-minutes", type=float, default=0.0,
                    help="wall budget of an optional phase between target and draft: the finished target "
                         "continued on --polish-objects scenes with its own LR schedule (0 = off)")
    ap.add_argument("--polish-lr", type=float, default=3e-4, help="peak learning rate of the polish phase")
    ap.add_argument("--polish-objects", default="0.2,0.35,0.45",
                    help="polish phase: P(1, 2, 3 objects) per clip, comma-separated")
    ap.add_argument("--polish-describe", type=float, default=0.35,
                    help="polish phase: share of conversations that are detailed descriptions (rest: questions)")
    ap.add_argument("--target-steps", type=int, default=None,
                    help="budget of the target phase in optimizer steps (the LR schedule follows step / N; "
                         "replaces --target-minutes, the same run on any machine)")
    ap.add_argument("--draft-steps", type=int, default=None, help="budget of the draft phase in steps")
    ap.add_argument("--polish-steps", type=int, default=None, help="budget of the polish phase in steps")
    ap.add_argument("--recipe", choices=("bundled", "sparse"), default="bundled",
                    help="data recipe: bundled (large objects) or sparse (plus long sparse-information scenes and "
                         "subtitle tracks, training/scenes.py)")
    ap.add_argument("--init-target", default=None, metavar="DIR",
                    help="take the target from a saved model folder (its weights and processor, e.g. assets/model/target) "
                         "instead of training one: the polish phase and the draft continue from it (give --target-size "
                         "for a grown target)")
    ap.add_argument("--target-size", choices=("bundled", "large"), default="bundled",
                    help="target sizes (training/model.py): bundled (4 M parameters) or large (25 M, grown from a "
                         "trained bundled target by `python -m training.grow`, then given with --init-target)")
    ap.add_argument("--init-draft", default=None, metavar="DIR",
                    help="start the draft from a saved draft folder (e.g. assets/model_sparse/draft) instead of the "
                         "target's first layer (needed when the target is wider than the draft)")
    ap.add_argument("--polish-recipe", choices=("same", "bundled", "sparse"), default="same",
                    help="data recipe of the polish phase and of the draft distilled after it (same = --recipe): "
                         "e.g. a target first trained on plain scenes, then polished on the sparse mix")
    ap.add_argument("--focus-mode", choices=("share", "spread"), default="share",
                    help="target focus loss: share = -log(share of the prompt's video attention on object/text "
                         "pixels); spread = cross-entropy against an equal share per named object/text")
    ap.add_argument("--salient-prob", type=float, default=0.0,
                    help="draft: share of the pruned batches that keep the object/text tokens first (as Stage I)")
    ap.add_argument("--log-every", type=int, default=25, help="steps between plain log lines when not on a terminal")
    ap.add_argument("--phase", choices=("all", "target", "draft"), default="all")
    ap.add_argument("--lr", type=float, default=1.5e-3, help="peak learning rate (AdamW)")
    ap.add_argument("--token-budget", type=int, default=3000, help="~video+text tokens per batch")
    ap.add_argument("--prune-prob", type=float, default=0.5, help="draft: share of batches with pruned video")
    ap.add_argument("--ckpt-minutes", type=float, default=4.0, help="checkpoint interval")
    ap.add_argument("--max-steps", type=int, default=None, help="stop a phase after this many steps")
    ap.add_argument("--aux-weight", type=float, default=0.5,
                    help="target: weight of the per-video-token probe loss (0 = off)")
    ap.add_argument("--focus-weight", type=float, default=0.3,
                    help="target: weight of the focus loss, -log(share of the prompt's text-to-video attention "
                         "on object/text tokens) (0 = off)")
    ap.add_argument("--route-weight", type=float, default=0.3,
                    help="target: weight of the routing loss: a caption word naming an object (its colour and "
                         "shape words) should attend to that object's video tokens (0 = off; needs --focus-weight > 0)")
    ap.add_argument("--attr-weight", type=float, default=3.0,
                    help="target: cross-entropy weight of shape and motion words (1 = plain loss)")
    ap.add_argument("--fact-weight", type=float, default=1.0,
                    help="target: cross-entropy weight of a subtitle fact's kind and value words in answers (after "
                         "the transcript; 1 = plain loss)")
    ap.add_argument("--fact-route-weight", type=float, default=0.0,
                    help="target: weight of the fact routing loss: a position that writes a subtitle fact's word "
                         "attends to that word in the transcript (0 = off; needs --focus-weight > 0)")
    ap.add_argument("--diag-every", type=int, default=50,
                    help="target: steps between held-out right-vs-shuffled-video loss checks")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    ap.add_argument("--bf16", action="store_true", help="bf16 autocast (CPU AMX)")
    ap.add_argument("--smoke", action="store_true", help="tiny model, tiny clips, 5 steps per phase")
    args = ap.parse_args(argv)
    try:   # checked here, not after a two-hour target phase
        weights = tuple(float(w) for w in args.polish_objects.split(","))
    except ValueError:
        weights = ()
    if len(weights) != 3 or min(weights) < 0 or abs(sum(weights) - 1.0) > 1e-6:
        ap.error(f"--polish-objects {args.polish_objects!r}: give three probabilities summing to 1, e.g. 0.2,0.35,0.45")
    args.polish_objects = weights
    if args.init_target and not (Path(args.init_target) / "config.json").exists():
        ap.error(f"--init-target {args.init_target}: no model there (config.json missing); give a folder written by "
                 "save_pretrained, e.g. assets/model/target")
    return args


def data_recipe(name: str, args) -> DataRecipe:
    """The :class:`DataRecipe` called ``name`` ("bundled" or "sparse"), at ``--token-budget``; tiny under ``--smoke``."""
    if args.smoke:
        return SMOKE_RECIPE if name == "bundled" else dataclasses.replace(
            SMOKE_RECIPE, frames=(8, 48), p_sparse_long=1.0, p_subtitles=0.5, min_cover=0.03)
    recipe = DataRecipe(token_budget=args.token_budget)
    return dataclasses.replace(recipe, **SPARSE_RECIPE_CHANGES) if name == "sparse" else recipe


def init_target(folder: Path) -> tuple[torch.nn.Module, dict, dict]:
    """A saved target (``save_pretrained`` folder) as a finished target phase: (model, state, info).

    state = {"model": state dict, "step", "elapsed", "losses": []} as :func:`training.loop.train_phase`
    returns it (no probe: the polish phase starts a fresh one); info = the folder's ``training_info.json``
    (if any) under ``init_target``, with the folder's path.

    Raises:
        FileNotFoundError: ``folder`` holds no model.
    """
    import json

    from transformers import Qwen2_5_VLForConditionalGeneration

    if not (folder / "config.json").exists():
        raise FileNotFoundError(f"--init-target {folder}: no model there (config.json missing); give a folder "
                                "written by save_pretrained, e.g. assets/model/target")
    model = Qwen2_5_VLForConditionalGeneration.from_pretrained(str(folder), dtype=torch.float32)
    src = json.loads((folder / "training_info.json").read_text()) if (folder / "training_info.json").exists() else {}
    steps = int(src.get("steps", 0)) + int(src.get("polish", {}).get("steps", 0))
    state = {"model": model.state_dict(), "step": steps, "elapsed": 60.0 * float(src.get("minutes", 0.0)),
             "losses": []}
    return model, state, {"phase": "target", "init_target": {"path": str(folder), "training_info": src}}


def main(argv=None) -> None:
    args = parse_args(argv)
    command = "python -m training.train_bundled " + " ".join(sys.argv[1:] if argv is None else argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    recipe = data_recipe(args.recipe, args)
    polished = args.polish_minutes > 0 or args.polish_steps
    late = data_recipe(args.recipe if args.polish_recipe == "same" or not polished else args.polish_recipe, args)
    if args.smoke:
        args.max_steps = args.max_steps or 5
        args.work = str(Path(args.work) / "smoke")
        args.out = str(Path(args.work) / "model")
    proc_dir = Path(args.work) / "processor"
    if args.init_target and not (proc_dir / "tokenizer.json").exists():
        from transformers import AutoProcessor
        AutoProcessor.from_pretrained(args.init_target).save_pretrained(str(proc_dir))
    if (proc_dir / "tokenizer.json").exists():
        from transformers import AutoProcessor
        processor = AutoProcessor.from_pretrained(str(proc_dir))
    else:
        processor = build_processor(proc_dir)
    t_start = time.time()
    target, tstate = None, None
    if args.phase in ("all", "target", "draft"):
        if args.init_target:
            target, tstate, info = init_target(Path(args.init_target))
        else:
            target, tstate = train_phase(args, "target", processor, recipe, args.target_minutes,
                                         steps=args.target_steps)
            info = {"phase": "target", "steps": tstate["step"], "minutes": tstate["elapsed"] / 60,
                    "size": (TINY_SIZE if args.smoke else SIZES[args.target_size]).__dict__, "recipe": recipe.__dict__}
        info["command"] = command
        if polished:
            precipe = dataclasses.replace(late, object_weights=args.polish_objects, curriculum=0.0,
                                          p_describe=args.polish_describe)
            target, pstate = train_phase(args, "polish", processor, precipe, args.polish_minutes,
                                         init=tstate, lr=args.polish_lr, steps=args.polish_steps)
            info["polish"] = {"steps": pstate["step"], "minutes": pstate["elapsed"] / 60, "lr": args.polish_lr,
                              "recipe": dataclasses.asdict(precipe)}
            tstate = {**pstate, "losses": tstate["losses"] + [(tstate["step"] + s, v) for s, v in pstate["losses"]]}
        save_final(target, processor, Path(args.out) / "target", tstate["losses"], "target loss", info)
    if args.phase in ("all", "draft"):
        target.eval()
        for p in target.parameters():
            p.requires_grad_(False)
        draft, dstate = train_phase(args, "draft", processor, late, args.draft_minutes, teacher=target,
                                    steps=args.draft_steps)
        info = {"phase": "draft", "steps": dstate["step"], "minutes": dstate["elapsed"] / 60,
                "size": dstate["size"], "distilled_from": "target", "recipe": dataclasses.asdict(late),
                "command": command}
        save_final(draft, processor, Path(args.out) / "draft", dstate["losses"], "draft loss", info)
    print(f"all done in {(time.time() - t_start) / 60:.1f} min this run; models in {args.out}", flush=True)


if __name__ == "__main__":
    main()
