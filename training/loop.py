"""The training loop: one phase (target, polish or draft) under a wall-clock budget, resumable.

The learning-rate schedule follows elapsed time (:func:`lr_at`), so a budget run always ends
with the decay; state is checkpointed every ``--ckpt-minutes`` and a rerun resumes it.
"""
from __future__ import annotations

import math
import sys
import time
from pathlib import Path

import numpy as np
import torch

from training.checkpoints import Checkpointer
from training.data import SMOKE_RECIPE, DataRecipe, attribute_token_ids, make_batch, model_inputs
from training.losses import (
    FOCUS,
    FOCUS_IMPL,
    VisionProbe,
    capture_video_features,
    distill_loss,
    fact_routing_loss,
    focus_loss,
    focus_rows,
    register_focus,
    routing_loss,
    spread_focus_loss,
    video_gap,
    weighted_lm_loss,
)
from training.model import DRAFT_SIZE, SIZES, TINY_SIZE, ModelSize, build_model, init_draft_from_target

SEED_OFFSETS = {"target": 0, "draft": 10**6, "polish": 2 * 10**6}
"""Per-phase offset of the batch seeds, so the phases see different clips."""


def lr_at(progress: float, base: float, warmup_frac: float = 0.02, decay_from: float = 0.75) -> float:
    """Constant LR after a short warmup, linear decay to 5% over the last (1 - decay_from) of the budget."""
    if progress < warmup_frac:
        return base * max(progress / warmup_frac, 0.02)
    if progress < decay_from:
        return base
    return base * max(0.05, 1.0 - (progress - decay_from) / (1.0 - decay_from))


def phase_size(args, phase: str) -> ModelSize:
    """Model sizes of a phase: the bundled sizes, or tiny ones under ``--smoke``."""
    if not args.smoke:
        return DRAFT_SIZE if phase == "draft" else SIZES[getattr(args, "target_size", "bundled")]
    return TINY_SIZE if phase != "draft" else ModelSize(**{**TINY_SIZE.__dict__, "layers": 1})


def target_loss(model, probe: VisionProbe, feats_box: dict, batch: dict, header: list[int],
                attr_ids: list[int], args) -> tuple[torch.Tensor, dict]:
    """Target objective on one batch: weighted LM loss + probe loss + focus and routing losses.

    Returns:
        (scalar loss, probe accuracies and attention shares by name).
    """
    video_id = model.config.video_token_id
    inputs = model_inputs(batch)
    if args.focus_weight > 0:
        FOCUS["rows"] = focus_rows(batch["input_ids"], batch["attention_mask"], video_id, header,
                                   batch.get("text_start"))
        FOCUS["out"], FOCUS["out_attr"] = [], []
        if args.route_weight > 0:
            FOCUS["attr_rows"] = batch["aux"]["attr"][0]
        fact_route = getattr(args, "fact_route_weight", 0.0) > 0 and bool(batch["aux"]["fact"][1].any())
        FOCUS["out_fact"] = []
        if fact_route:
            FOCUS["fact_rows"] = batch["aux"]["fact"][0]
    try:
        logits = model(**inputs).logits
    finally:
        FOCUS["rows"] = FOCUS["attr_rows"] = FOCUS["fact_rows"] = None
    loss = weighted_lm_loss(logits, batch["labels"], attr_ids, args.attr_weight, batch.get("fact"),
                            getattr(args, "fact_weight", 1.0))
    aux_loss, aux_acc = probe.loss(feats_box.pop("feats"), batch["aux"])
    loss = loss + args.aux_weight * aux_loss
    if args.focus_weight > 0 and FOCUS["out"]:
        if getattr(args, "focus_mode", "share") == "spread":
            f_loss, aux_acc["focus"] = spread_focus_loss(FOCUS["out"], batch["input_ids"], video_id,
                                                         batch["aux"]["cover"], batch["aux"]["obj"])
        else:
            f_loss, aux_acc["focus"] = focus_loss(FOCUS["out"], batch["input_ids"], video_id, batch["aux"]["cover"])
        FOCUS["out"] = []
        loss = loss + args.focus_weight * f_loss
    if args.route_weight > 0 and FOCUS["out_attr"]:
        _, valid_a, obj_a = batch["aux"]["attr"]
        r_loss, aux_acc["route"] = routing_loss(FOCUS["out_attr"], batch["input_ids"], video_id,
                                                batch["aux"]["obj"], valid_a, obj_a)
        FOCUS["out_attr"] = []
        loss = loss + args.route_weight * r_loss
    if FOCUS["out_fact"]:
        _, valid_f, target_f = batch["aux"]["fact"]
        fr_loss, aux_acc["fact"] = fact_routing_loss(FOCUS["out_fact"], valid_f, target_f)
        FOCUS["out_fact"] = []
        loss = loss + args.fact_route_weight * fr_loss
    return loss, aux_acc


def _build(args, phase: str, processor, teacher, init):
    """The phase's model, probe and optimizer (not yet resumed)."""
    is_target = phase in ("target", "polish")
    size = phase_size(args, phase)
    model = build_model(processor.tokenizer, size, args.seed + (0 if is_target else 1))
    if teacher is not None and not args.smoke:
        if getattr(args, "init_draft", None):
            model.load_state_dict(saved_state(args.init_draft))
        else:
            init_draft_from_target(model, teacher)
    probe = VisionProbe(model.config.text_config.hidden_size)
    if init is not None:
        model.load_state_dict(init["model"])
        if "probe" in init:      # a target taken from a saved model folder has none: the probe starts fresh
            probe.load_state_dict(init["probe"])
    return model, probe, size


def saved_state(folder: str) -> dict:
    """The float32 state dict of a model folder written by ``save_pretrained`` (e.g. a shipped draft).

    Raises:
        FileNotFoundError: no model there.
    """
    from transformers import Qwen2_5_VLForConditionalGeneration

    if not (Path(folder) / "config.json").exists():
        raise FileNotFoundError(f"--init-draft {folder}: no model there (config.json missing)")
    return Qwen2_5_VLForConditionalGeneration.from_pretrained(folder, dtype=torch.float32).state_dict()


def _resume(work: Checkpointer, model, probe, opt, phase: str):
    """Load the phase's checkpoint into model, probe and optimizer; returns (state, step, elapsed, losses)."""
    state = work.load()
    if state is None:
        return None, 0, 0.0, []
    model.load_state_dict(state["model"])
    if "probe" in state:
        probe.load_state_dict(state["probe"])
    opt.load_state_dict(state["opt"])
    print(f"[{phase}] resumed at step {state['step']}, {state['elapsed'] / 60:.1f} min done", flush=True)
    return state, state["step"], state["elapsed"], state["losses"]


def train_phase(args, phase: str, processor, recipe: DataRecipe, minutes: float, teacher=None,
                init=None, lr: float | None = None, steps: int | None = None):
    """Run (or resume) one phase under a budget; returns (the trained model, its final state).

    The budget is ``steps`` optimizer steps when given (progress = step / steps: the same run on any
    machine), else ``minutes`` of step time (progress = elapsed / budget).

    ``phase`` is "target" (from scratch), "polish" (the finished target, continued from the
    state dict ``init`` on ``recipe`` with its own LR schedule peaking at ``lr``) or "draft"
    (distilled from ``teacher``).
    """
    from tqdm import tqdm

    is_target = phase in ("target", "polish")
    work = Checkpointer(Path(args.work) / phase)
    base_lr = args.lr if lr is None else lr
    model, probe, size = _build(args, phase, processor, teacher, init)
    feats_box = capture_video_features(model) if is_target else None
    header = processor.tokenizer("<|im_start|>assistant\n")["input_ids"]
    attr_ids = attribute_token_ids(processor.tokenizer)
    if is_target and args.focus_weight > 0:
        register_focus()
        model.set_attn_implementation({"text_config": FOCUS_IMPL})
    params = list(model.parameters()) + (list(probe.parameters()) if is_target else [])
    opt = torch.optim.AdamW(params, lr=base_lr, betas=(0.9, 0.98), weight_decay=0.01)
    diag_recipe = SMOKE_RECIPE if args.smoke else DataRecipe(frames=(16,), sides=(112,), token_budget=2400)
    diag_batch = make_batch(processor, diag_recipe, 10**8 + 17, 0, False) if is_target else None
    state, step, elapsed, losses = _resume(work, model, probe, opt, phase)
    finished = state is not None and state.get("done") and (
        state["step"] >= steps if steps else state["elapsed"] >= minutes * 60.0 - 1.0)
    if finished:
        model.set_attn_implementation({"text_config": "sdpa"})
        return model, state  # finished; a larger budget continues training (LR back to constant)
    budget = minutes * 60.0
    nparams = sum(p.numel() for p in model.parameters())
    print(f"[{phase}] {nparams / 1e6:.2f}M params, budget "
          + (f"{steps} steps" if steps else f"{minutes:.1f} min"), flush=True)
    model.train()
    t_last_ckpt = time.time()
    bar = tqdm(total=steps if steps else int(budget), initial=step if steps else int(elapsed),
               unit="step" if steps else "s", desc=phase, mininterval=5 if sys.stdout.isatty() else 60,
               file=sys.stdout, dynamic_ncols=False, ncols=110)
    ema = float("nan")   # the running loss (nan until a first finite loss)
    rng = np.random.default_rng([args.seed, 7, step])
    while (step < steps if steps else elapsed < budget) and (args.max_steps is None or step < args.max_steps):
        t0 = time.time()
        progress = step / steps if steps else elapsed / budget
        single = phase == "target" and progress < recipe.curriculum
        batch = make_batch(processor, recipe, args.seed + SEED_OFFSETS[phase], step, single)
        lr = lr_at(progress, base_lr)
        for g in opt.param_groups:
            g["lr"] = lr
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
            if is_target:
                loss, aux_acc = target_loss(model, probe, feats_box, batch, header, attr_ids, args)
            else:
                loss = distill_loss(model, teacher, batch, rng, args)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        dt = time.time() - t0
        elapsed += dt
        lv = float(loss.detach())
        losses.append((step, lv))
        if math.isfinite(lv):   # a loss term over an empty selection is nan (no gradient): keep it out of the EMA
            ema = lv if not math.isfinite(ema) else 0.98 * ema + 0.02 * lv
        T, H, W, B = batch["meta"]
        bar.set_postfix_str(f"step {step} loss {ema:.3f} lr {lr:.1e} {T}f{H}x{W}b{B} {dt:.2f}s", refresh=False)
        bar.update((step if steps else int(elapsed)) - bar.n)
        if not sys.stdout.isatty() and step % args.log_every == 0:   # a plain log line (nohup)
            bar.write(f"[{phase}] step {step} loss {ema:.3f} lr {lr:.1e} {T}f{H}x{W}b{B} {dt:.2f}s/step "
                      f"{elapsed / 60:.1f} min")
        if is_target and step % args.diag_every == 0:
            _report_gap(bar, phase, step, ema, model, diag_batch, aux_acc)
        if time.time() - t_last_ckpt > args.ckpt_minutes * 60:
            work.save({"model": model.state_dict(), "probe": probe.state_dict(), "opt": opt.state_dict(), "step": step,
                       "elapsed": elapsed, "losses": losses, "done": False, "size": size.__dict__})
            t_last_ckpt = time.time()
    bar.close()
    if is_target and args.focus_weight > 0:
        model.set_attn_implementation({"text_config": "sdpa"})
    state = {"model": model.state_dict(), "probe": probe.state_dict(), "opt": opt.state_dict(), "step": step,
             "elapsed": elapsed, "losses": losses, "done": True, "size": size.__dict__}
    work.save(state)
    print(f"[{phase}] done: {step} steps in {elapsed / 60:.1f} min, final loss ema {ema}", flush=True)
    return model, state


def _report_gap(bar, phase: str, step: int, ema: float, model, diag_batch: dict, aux_acc: dict) -> None:
    """Print the held-out loss with the right and with shuffled videos, and the probe accuracies."""
    right, wrong = video_gap(model, diag_batch)
    bar.write(f"[{phase}] step {step} loss {ema:.3f} | held-out loss right video {right:.3f}, "
              f"shuffled {wrong:.3f}, gap {wrong - right:.3f} | probe acc "
              + " ".join(f"{k} {v:.2f}" for k, v in aux_acc.items()))
    sys.stdout.flush()
