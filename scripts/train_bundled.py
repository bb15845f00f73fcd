#!/usr/bin/env python
"""Train the bundled Qwen2.5-VL target + draft pair on synthetic shape videos (CPU).

Phase 1 trains the TARGET (Qwen2_5_VLForConditionalGeneration, from scratch)
on clips from ``specvlm.synth`` generated inline: mixed clip lengths
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

Phase 2 trains the DRAFT (same architecture and tokenizer, one text layer),
initialised from the (polished) target's vision tower, embeddings, first layer, norm and
head, and distilled from the frozen target: KL(target || draft) plus
cross-entropy on every labelled text position. Half the draft batches keep only 10-30% of the
video tokens (uniform + random, original M-RoPE positions), as the draft sees
them under SpecVLM pruning.

Both phases have a wall-clock budget (minutes); the learning-rate schedule
follows elapsed time, so a budget run always ends with the decay. State is
checkpointed every ``--ckpt-minutes`` to ``<work>/<phase>/ckpt.pt``; rerunning the
same command resumes (a finished phase is skipped; a larger budget continues it:
delete ``<work>/draft`` after extending the target so the draft is redone). Final models are saved with
``save_pretrained`` (safetensors) plus the processor into ``<out>/target`` and
``<out>/draft`` with a loss-curve PNG.

Training scene seeds are drawn below 10**8; evaluate on seeds >= 10**9.

Examples:
    python scripts/train_bundled.py --smoke                    # a few steps, tiny
    python scripts/train_bundled.py --target-minutes 60 --draft-minutes 22
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from specvlm import synth  # noqa: E402

IGNORE = -100
TRAIN_SEED_LIMIT = 10**8


# ----------------------------------------------------------------------------- model configs

@dataclass(frozen=True)
class ModelSize:
    """Architecture sizes (text + vision tower)."""

    hidden: int = 256
    layers: int = 4
    heads: int = 4
    kv_heads: int = 2
    intermediate: int = 704
    v_hidden: int = 128
    v_depth: int = 2
    v_heads: int = 4
    v_intermediate: int = 256


TARGET_SIZE = ModelSize()
DRAFT_SIZE = ModelSize(layers=1)
TINY_SIZE = ModelSize(hidden=64, layers=2, heads=4, kv_heads=2, intermediate=128,
                      v_hidden=32, v_depth=1, v_heads=2, v_intermediate=64)


def make_config(tokenizer, size: ModelSize):
    """Qwen2_5_VLConfig for the bundled models (vocab = tokenizer size rounded to 64)."""
    from transformers import Qwen2_5_VLConfig

    vocab = int(math.ceil(len(tokenizer) / 64) * 64)
    head_dim = size.hidden // size.heads
    q = head_dim // 2
    t_sec = q - 2 * (3 * q // 8)
    mrope = [t_sec, 3 * q // 8, 3 * q // 8]  # sums to head_dim/2 (16/24/24 at head_dim 128)
    ids = tokenizer.convert_tokens_to_ids
    text = dict(
        vocab_size=vocab, hidden_size=size.hidden, intermediate_size=size.intermediate,
        num_hidden_layers=size.layers, num_attention_heads=size.heads,
        num_key_value_heads=size.kv_heads, max_position_embeddings=32768, rms_norm_eps=1e-6,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": mrope},
        bos_token_id=None, eos_token_id=ids("<|im_end|>"), pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True,
    )
    vision = dict(
        depth=size.v_depth, hidden_size=size.v_hidden, intermediate_size=size.v_intermediate,
        num_heads=size.v_heads, patch_size=14, spatial_merge_size=2, temporal_patch_size=2,
        out_hidden_size=size.hidden, window_size=112, fullatt_block_indexes=[size.v_depth - 1],
        tokens_per_second=4,
    )
    return Qwen2_5_VLConfig(
        text_config=text, vision_config=vision, tie_word_embeddings=True,
        image_token_id=ids("<|image_pad|>"), video_token_id=ids("<|video_pad|>"),
        vision_start_token_id=ids("<|vision_start|>"), vision_end_token_id=ids("<|vision_end|>"),
    )


def build_model(tokenizer, size: ModelSize, seed: int):
    """Fresh Qwen2_5_VLForConditionalGeneration (fp32, sdpa) for ``size``."""
    from transformers import Qwen2_5_VLForConditionalGeneration

    torch.manual_seed(seed)
    cfg = make_config(tokenizer, size)
    model = Qwen2_5_VLForConditionalGeneration._from_config(cfg, attn_implementation="sdpa")
    return model


# ----------------------------------------------------------------------------- data

@dataclass
class DataRecipe:
    """Per-batch sampling of clip shapes and tasks."""

    frames: tuple = (8, 8, 16, 16, 16, 16, 24, 32, 64, 96, 128)
    sides: tuple = (112, 112, 112, 112, 112, 140, 168, 224)
    fps: tuple = (1.0, 2.0, 4.0, 6.0, 8.0)   # low fps: temporal M-RoPE positions up to 4T/fps (256)
    token_budget: int = 3000      # ~ (video + text tokens) per batch
    max_batch: int = 24
    min_batch: int = 2
    p_describe: float = 0.35
    n_questions: int = 4
    curriculum: float = 0.2       # share of the target budget with single-object scenes only
    object_weights: tuple | None = None  # P(1, 2, 3 objects) after the curriculum; None = synth's uniform draw
    label_all_text: bool = True   # loss on every text token (the chat, user turns too), not only answers


SMOKE_RECIPE = DataRecipe(frames=(8,), sides=(56,), token_budget=400, max_batch=4)


def _label_answers(ids: list[int], header: list[int], end_id: int) -> list[int]:
    """Labels = ids on assistant answers (incl. the closing <|im_end|>), IGNORE elsewhere."""
    labels = [IGNORE] * len(ids)
    n, i = len(header), 0
    while i < len(ids):
        if ids[i:i + n] == header:
            j = i + n
            while j < len(ids) and ids[j] != end_id:
                labels[j] = ids[j]
                j += 1
            if j < len(ids):
                labels[j] = ids[j]
            i = j
        i += 1
    return labels


def _label_text(ids: list[int], skip: set[int]) -> list[int]:
    """Labels = ids on every token except those in ``skip`` (video placeholders, padding).

    Modelling the whole chat, user turns included, teaches what follows ``<|im_end|>``
    (another turn), so a fixed-length benchmark run that decodes past the answer stays
    in distribution for both target and draft.
    """
    return [IGNORE if i in skip else i for i in ids]


def conversation(truth, rng: np.random.Generator, p_describe: float, n_q: int) -> list[dict]:
    """Chat messages for one clip: a detailed description or ``n_q`` question turns."""
    video = {"type": "video"}
    if rng.random() < p_describe:
        prompt = synth.DESCRIBE_PROMPTS[0] if rng.random() < 0.7 else \
            synth.DESCRIBE_PROMPTS[rng.integers(len(synth.DESCRIBE_PROMPTS))]
        msgs = [{"role": "user", "content": [video, {"type": "text", "text": prompt}]},
                {"role": "assistant", "content": synth.describe(truth)}]
        if rng.random() < 0.3:  # a follow-up question (cheap extra supervision)
            q, a = synth.questions(truth, rng)[0]
            msgs += [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
        return msgs
    msgs: list[dict] = []
    for k, (q, a) in enumerate(synth.questions(truth, rng)[:n_q]):
        content = [video, {"type": "text", "text": q}] if k == 0 else [{"type": "text", "text": q}]
        msgs += [{"role": "user", "content": content}, {"role": "assistant", "content": a}]
    return msgs


TEXT_VALUES = tuple(str(d) for d in range(10)) + tuple(synth.WORDS)   # every on-screen text the generator draws
STEPS = ("still", "right", "left", "down", "up")
"""Local motion of an object between the two frames of one temporal patch (the ``step`` probe)."""
AUX_HEADS = {"what": 1 + len(synth.COLOURS) + 1, "shape": 1 + len(synth.SHAPES), "step": 1 + len(STEPS),
             "glyph": 1 + len(TEXT_VALUES)}
_COLOUR_IDX = {c: i + 1 for i, c in enumerate(synth.COLOURS)}
_TEXT_CLASS = len(synth.COLOURS) + 1
TEXT_OBJ = 15   # ``obj`` label of burned-in text tokens (objects are 1..3)


def token_labels(truth, frames: np.ndarray, merge: int = 28, temporal: int = 2,
                 min_cover: float = 0.15) -> dict[str, np.ndarray]:
    """Per-video-token auxiliary labels from the generator's ground truth.

    A video token of Qwen2.5-VL covers ``temporal`` frames x a ``merge`` x ``merge`` px
    cell. An object covers a pixel where the pixel is inside its box and has its
    colour (exact: shapes are drawn in flat colours). The label is the object covering
    the largest share of the tube (at least ``min_cover``); burned-in text (its box, drawn
    over everything) wins where it covers ``min_cover``; else background (0).

    Args:
        truth: :class:`specvlm.synth.SceneTruth`; frames: uint8 (T, H, W, 3) from the same call.

    Returns:
        dict of int64 arrays, each (T/temporal * H/merge * W/merge,) in the raster
        order of the video placeholders: ``what`` (0 background, 1..6 colour, 7 text),
        ``shape`` (0 none, 1..3), ``motion`` (0 none, 1..6: the object's whole-clip motion),
        ``step`` (0 none, 1 + index in :data:`STEPS`: where the object's box moved between the
        token's two frames; what a Conv3d patch over those frames can see, unlike ``motion``:
        a bounce is locally an up or a down, a slow mover often a still), ``obj`` (0 none, k + 1 = ``truth.objects[k]``,
        :data:`TEXT_OBJ` = the text), ``glyph`` (0 none, 1 + index in :data:`TEXT_VALUES` on text tokens);
        plus ``cover`` (float32: share of
        the tube's pixels that are object or text pixels, the eval's "object/text pixel" measure).
    """
    T, H, W = truth.num_frames, truth.height, truth.width
    gt, gh, gw = T // temporal, H // merge, W // merge
    T2 = gt * temporal

    def share(mask: np.ndarray) -> np.ndarray:          # (T, H, W) bool -> (gt, gh, gw)
        m = mask[:T2, :gh * merge, :gw * merge].reshape(gt, temporal, gh, merge, gw, merge)
        return m.mean(axis=(1, 3, 5))

    ys, xs = np.arange(H)[None, :, None], np.arange(W)[None, None, :]
    what = np.zeros((gt, gh, gw), np.int64)
    shape = np.zeros_like(what)
    motion = np.zeros_like(what)
    step = np.zeros_like(what)
    obj = np.zeros_like(what)
    glyph = np.zeros_like(what)
    best = np.full((gt, gh, gw), min_cover, np.float64)
    union = np.zeros((T, H, W), bool)
    for k, o in enumerate(truth.objects):
        b = np.asarray(o.boxes, np.int64)[:, :, None, None]           # (T, 4, 1, 1)
        inside = (ys >= b[:, 1]) & (ys < b[:, 3]) & (xs >= b[:, 0]) & (xs < b[:, 2]) & (b[:, 0] >= 0)
        colour = np.all(frames == np.array(synth.COLOURS[o.colour], np.uint8), axis=-1)
        union |= inside & colour
        c = share(inside & colour)
        win = c > best
        best = np.where(win, c, best)
        what[win] = _COLOUR_IDX[o.colour]
        shape[win] = synth.SHAPES.index(o.shape) + 1
        motion[win] = synth.MOTIONS.index(o.motion) + 1
        step[win] = np.broadcast_to(_local_steps(o.boxes, gt, temporal)[:, None, None], win.shape)[win]
        obj[win] = k + 1
    if truth.text is not None:
        x0, y0, x1, y1 = truth.text.box
        on = np.zeros((T, H, W), bool)
        on[truth.text.start_frame:truth.text.end_frame, y0:y1, x0:x1] = True
        win = share(on) > min_cover
        what[win], shape[win], motion[win], step[win], obj[win] = _TEXT_CLASS, 0, 0, 0, TEXT_OBJ
        glyph[win] = 1 + TEXT_VALUES.index(truth.text.text)
        union |= on
    return {"what": what.reshape(-1), "shape": shape.reshape(-1), "motion": motion.reshape(-1),
            "step": step.reshape(-1),
            "obj": obj.reshape(-1), "glyph": glyph.reshape(-1),
            "cover": share(union).astype(np.float32).reshape(-1)}


def _local_steps(boxes, gt: int, temporal: int = 2) -> np.ndarray:
    """int64 (gt,) :data:`STEPS` label + 1 per temporal patch: the box's move from the patch's first
    to its last frame (0 where the object is not visible in both)."""
    b = np.asarray(boxes, np.int64)
    first, last = b[:gt * temporal:temporal], b[temporal - 1:gt * temporal:temporal]
    dx, dy = last[:, 0] - first[:, 0], last[:, 1] - first[:, 1]
    lab = np.where(dx > 0, 2, np.where(dx < 0, 3, np.where(dy > 0, 4, np.where(dy < 0, 5, 1))))
    return np.where((first[:, 0] >= 0) & (last[:, 0] >= 0), lab, 0).astype(np.int64)


def _after_video(ids: list[int], video_id: int) -> int:
    """Index just after the last video placeholder (0 when there is none)."""
    last = max((i for i, t in enumerate(ids) if t == video_id), default=-1)
    return last + 1


def attribute_rows(input_ids: torch.Tensor, truths: list, tokenizer) -> tuple[torch.Tensor, ...]:
    """Query rows that name one object, and which object: for the attention-routing loss.

    Every ``<colour> <shape>`` word pair after the video (captions: "red circle moves ...";
    questions: "Which direction does the red circle move?") gives the colour position (it
    predicts the shape), the shape position (it predicts the motion verb) and, when the next
    word is ``moves``, that position too (it predicts the direction). Every position whose next
    token is the on-screen text's value ("text 7.", or the answer to "What text appears?")
    names the text: its object is ``TEXT_OBJ - 1``, so ``obj + 1`` matches the text tokens' label.

    Returns:
        idx int64 (B, R), valid bool (B, R), obj int64 (B, R): index into ``truths[b].objects``
        (``TEXT_OBJ - 1`` for a text row).
    """
    # bare and spaced forms: a caption starts with its first object's colour ("red circle ...")
    colour = {i: c for c in synth.COLOURS for i in _single_ids(tokenizer, c)}
    shape = {tokenizer(" " + s)["input_ids"][0]: s for s in synth.SHAPES}
    moves = tokenizer(" moves")["input_ids"][0]
    video_id = tokenizer.convert_tokens_to_ids("<|video_pad|>")
    rows: list[list[tuple[int, int]]] = []
    for ids, truth in zip(input_ids.tolist(), truths):
        start = _after_video(ids, video_id)
        found = []
        if truth.text is not None:
            value = set(_single_ids(tokenizer, truth.text.text))
            found += [(j, TEXT_OBJ - 1) for j in range(start, len(ids) - 1) if ids[j + 1] in value]
        for j in range(start, len(ids) - 1):
            c, sh = colour.get(ids[j]), shape.get(ids[j + 1])
            if c is None or sh is None:
                continue
            k = next((k for k, o in enumerate(truth.objects) if o.colour == c and o.shape == sh), None)
            if k is None:
                continue
            found += [(j, k), (j + 1, k)]
            if j + 2 < len(ids) and ids[j + 2] == moves:
                found.append((j + 2, k))
        rows.append(found)
    R = max(1, max(len(r) for r in rows))
    B = len(rows)
    idx = torch.zeros(B, R, dtype=torch.long)
    valid = torch.zeros(B, R, dtype=torch.bool)
    obj = torch.zeros(B, R, dtype=torch.long)
    for b, found in enumerate(rows):
        for r, (j, k) in enumerate(found):
            idx[b, r], valid[b, r], obj[b, r] = j, True, k
    return idx, valid, obj


def _single_ids(tokenizer, word: str) -> list[int]:
    """Ids of ``word`` and `` word`` where each is a single token."""
    out = []
    for w in (word, " " + word):
        t = tokenizer(w)["input_ids"]
        if len(t) == 1:
            out.append(t[0])
    return out


def make_batch(processor, recipe: DataRecipe, seed: int, step: int, single_object: bool) -> dict:
    """Generate one training batch inline.

    All clips in a batch share (T, H, W, fps), so video tensors need no padding.

    Returns:
        dict of tensors for Qwen2_5_VLForConditionalGeneration (input_ids (B, L),
        attention_mask, mm_token_type_ids, pixel_values_videos (P, 1176),
        video_grid_thw (B, 3), second_per_grid_ts (B,), labels (B, L)) plus
        ``meta`` (T, H, W, B) and ``aux`` (per-video-token labels, see
        :func:`token_labels`, concatenated over the batch).
    """
    rng = np.random.default_rng([seed, step])
    T = int(rng.choice(recipe.frames))
    side = int(rng.choice(recipe.sides))
    if T >= 32:
        side = min(side, 168)
    if T >= 64:
        side = min(side, 140)
    other = side if rng.random() < 0.7 else int(rng.choice([s for s in recipe.sides if s <= side] or [side]))
    H, W = (side, other) if rng.random() < 0.5 else (other, side)
    fps = float(rng.choice(recipe.fps))
    n_vid = (T // 2) * (H // 28) * (W // 28)
    B = int(np.clip(recipe.token_budget // (n_vid + 40), recipe.min_batch, recipe.max_batch))
    tok = processor.tokenizer
    header = tok("<|im_start|>assistant\n")["input_ids"]
    end_id = tok.convert_tokens_to_ids("<|im_end|>")
    videos, texts, metas, aux, truths = [], [], [], [], []
    for _ in range(B):
        n_obj = 1 if single_object else None
        if n_obj is None and recipe.object_weights is not None:
            n_obj = int(rng.choice(len(recipe.object_weights), p=recipe.object_weights)) + 1
        spec = synth.SceneSpec(num_frames=T, height=H, width=W, fps=fps, num_objects=n_obj)
        frames, truth = synth.generate(int(rng.integers(TRAIN_SEED_LIMIT)), spec)
        msgs = conversation(truth, rng, recipe.p_describe, recipe.n_questions)
        texts.append(processor.apply_chat_template(msgs, tokenize=False))
        videos.append(frames)
        aux.append(token_labels(truth, frames))
        truths.append(truth)
        metas.append({"fps": fps, "total_num_frames": T, "frames_indices": list(range(T))})
    batch = processor(text=texts, videos=videos, video_metadata=metas, padding=True, return_tensors="pt")
    if recipe.label_all_text:
        skip = {tok.convert_tokens_to_ids("<|video_pad|>"), tok.pad_token_id}
        labels = [_label_text(ids, skip) for ids in batch["input_ids"].tolist()]
    else:
        labels = [_label_answers(ids, header, end_id) for ids in batch["input_ids"].tolist()]
    batch = dict(batch)
    batch["labels"] = torch.tensor(labels)
    batch["labels"][batch["attention_mask"] == 0] = IGNORE
    batch["meta"] = (T, H, W, B)
    batch["aux"] = {k: torch.from_numpy(np.concatenate([a[k] for a in aux])) for k in aux[0]}
    batch["aux"]["attr"] = attribute_rows(batch["input_ids"], truths, tok)
    return batch


# ----------------------------------------------------------------------------- training utils

def lr_at(progress: float, base: float, warmup_frac: float = 0.02, decay_from: float = 0.75) -> float:
    """Constant LR after a short warmup, linear decay to 5% over the last (1 - decay_from) of the budget."""
    if progress < warmup_frac:
        return base * max(progress / warmup_frac, 0.02)
    if progress < decay_from:
        return base
    return base * max(0.05, 1.0 - (progress - decay_from) / (1.0 - decay_from))


def save_loss_plot(path: Path, losses: list[tuple[int, float]], title: str) -> None:
    """Write a small PNG line plot of (step, loss) with PIL (no plotting deps)."""
    from PIL import Image, ImageDraw

    W, H, m = 640, 360, 40
    img = Image.new("RGB", (W, H), "white")
    d = ImageDraw.Draw(img)
    d.text((m, 8), title, fill="black")
    if len(losses) >= 2:
        steps = np.array([s for s, _ in losses], float)
        vals = np.log10(np.maximum(np.array([v for _, v in losses], float), 1e-4))
        k = max(1, len(vals) // 100)
        sm = np.convolve(vals, np.ones(k) / k, mode="valid")
        st = steps[k - 1:]
        lo, hi = float(sm.min()), float(sm.max()) + 1e-9
        xs = m + (st - st[0]) / max(st[-1] - st[0], 1) * (W - 2 * m)
        ys = H - m - (sm - lo) / (hi - lo) * (H - 2 * m)
        d.line(list(zip(xs.tolist(), ys.tolist())), fill=(30, 90, 200), width=2)
        d.rectangle([m, m, W - m, H - m], outline="gray")
        d.text((m, H - m + 5), f"step {int(st[0])}", fill="black")
        d.text((W - m - 80, H - m + 5), f"step {int(st[-1])}", fill="black")
        d.text((2, m - 12), f"loss {10 ** hi:.3g}", fill="black")
        d.text((2, H - m + 14), f"loss {10 ** lo:.3g} (log scale, smoothed {k})", fill="black")
    img.save(path)


def save_final(model, processor, out_dir: Path, losses, title: str, info: dict) -> None:
    """save_pretrained (safetensors) + processor + generation config + loss plot + train info."""
    from transformers import GenerationConfig

    out_dir.mkdir(parents=True, exist_ok=True)
    tok = processor.tokenizer
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    model.generation_config = GenerationConfig(
        eos_token_id=eos, pad_token_id=tok.pad_token_id, do_sample=False, max_new_tokens=128)
    model.config.text_config.eos_token_id = eos
    model.config.text_config.pad_token_id = tok.pad_token_id
    model.save_pretrained(str(out_dir), safe_serialization=True)
    processor.save_pretrained(str(out_dir))
    tok_cfg = out_dir / "tokenizer_config.json"   # a processor loaded offline records how it was loaded: drop it
    cfg = json.loads(tok_cfg.read_text())
    if [cfg.pop(k) for k in ("is_local", "local_files_only") if k in cfg]:
        tok_cfg.write_text(json.dumps(cfg, indent=2, ensure_ascii=False) + "\n")
    save_loss_plot(out_dir / "loss_curve.png", losses, title)
    (out_dir / "training_info.json").write_text(json.dumps(info, indent=1))


class Checkpointer:
    """Resumable training state in ``<work>/<phase>/ckpt.pt`` (atomic replace)."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.path = folder / "ckpt.pt"
        folder.mkdir(parents=True, exist_ok=True)

    def load(self):
        return torch.load(self.path, weights_only=False) if self.path.exists() else None

    def save(self, state: dict) -> None:
        tmp = self.path.with_suffix(".tmp")
        torch.save(state, tmp)
        os.replace(tmp, self.path)


# ----------------------------------------------------------------------------- phases

def _draft_forward(draft, batch: dict, keep_frac: float | None, rng: np.random.Generator):
    """Draft logits on the full sequence or with only ``keep_frac`` of the video tokens.

    Returns:
        logits (B, L', vocab), index (L',) of the kept sequence positions.
    """
    inputs = {k: v for k, v in batch.items() if k not in ("labels", "meta", "aux")}
    L = batch["input_ids"].shape[1]
    if keep_frac is None:
        return draft(**inputs).logits, torch.arange(L)
    m = draft.model
    ids = batch["input_ids"]
    emb = m.get_input_embeddings()(ids)
    vid = m.get_video_features(batch["pixel_values_videos"], batch["video_grid_thw"], return_dict=True)
    vid = torch.cat(vid.pooler_output, dim=0).to(emb.dtype)
    vmask = (ids == draft.config.video_token_id)
    emb = emb.masked_scatter(vmask.unsqueeze(-1).expand_as(emb), vid)
    pos, _ = m.get_rope_index(ids, mm_token_type_ids=batch["mm_token_type_ids"],
                              video_grid_thw=batch["video_grid_thw"],
                              second_per_grid_ts=batch["second_per_grid_ts"],
                              attention_mask=batch["attention_mask"])
    vpos = torch.nonzero(vmask[0]).squeeze(1)           # same layout in every row
    V = len(vpos)
    K = max(1, int(V * keep_frac))
    n_uni = K // 2
    uni = np.linspace(0, V - 1, n_uni).astype(int) if n_uni else np.array([], int)
    rest = np.setdiff1d(np.arange(V), uni)
    rnd = rng.choice(rest, K - len(uni), replace=False)
    kept = vpos[torch.as_tensor(np.sort(np.concatenate([uni, rnd])))]
    text_pos = torch.nonzero(~vmask[0]).squeeze(1)
    index = torch.sort(torch.cat([text_pos, kept])).values
    out = draft(inputs_embeds=emb[:, index], position_ids=pos[:, :, index],
                attention_mask=batch["attention_mask"][:, index])
    return out.logits, index


class VisionProbe(torch.nn.Module):
    """Linear probes on the video features (training aid only; never saved with the model).

    Dense per-token supervision (what covers the token: colour or text, its shape and local motion step;
    labels from :func:`token_labels`) makes the vision tower encode what is drawn where, so the
    language model has something to read, and keeps the feature scale bounded
    (``norm_penalty``: squared excess of the per-token RMS over ``max_rms``).
    """

    def __init__(self, hidden: int, max_rms: float = 1.0):
        super().__init__()
        self.heads = torch.nn.ModuleDict({k: torch.nn.Linear(hidden, n) for k, n in AUX_HEADS.items()})
        self.max_rms = max_rms

    def loss(self, feats: torch.Tensor, aux: dict) -> tuple[torch.Tensor, dict]:
        """feats (N, hidden) float; aux: int64 (N,) labels per head -> (scalar loss, accuracies)."""
        total, acc = feats.new_zeros(()), {}
        for k, head in self.heads.items():
            logits = head(feats.float())
            lab = aux[k]
            # class-balanced: background tokens dominate, weight object tokens up
            w = torch.where(lab > 0, 4.0, 1.0)
            total = total + (F.cross_entropy(logits, lab, reduction="none") * w).sum() / w.sum()
            fg = lab > 0
            acc[k] = float((logits.detach().argmax(-1)[fg] == lab[fg]).float().mean()) if fg.any() else float("nan")
        rms = feats.float().pow(2).mean(-1).sqrt()
        total = total + (F.relu(rms - self.max_rms) ** 2).mean()
        acc["rms"] = float(rms.detach().mean())
        return total, acc


def _capture_video_features(model) -> dict:
    """Forward hook on the vision tower; the dict gets ``feats`` (N, hidden) after each forward."""
    box: dict = {}

    def hook(_mod, _inp, out):
        box["feats"] = out.pooler_output if hasattr(out, "pooler_output") else out[1]

    model.model.visual.register_forward_hook(hook)
    return box


@torch.no_grad()
def video_gap(model, batch: dict) -> tuple[float, float]:
    """(loss with the right videos, loss with videos rolled by one inside the batch).

    The gap says how much the model reads the video (0 = it ignores it).
    """
    model.eval()
    inputs = {k: v for k, v in batch.items() if k not in ("meta", "aux")}
    right = float(model(**inputs).loss)
    B = batch["video_grid_thw"].shape[0]
    pv = batch["pixel_values_videos"].view(B, -1, batch["pixel_values_videos"].shape[-1])
    inputs["pixel_values_videos"] = torch.roll(pv, 1, 0).reshape(-1, pv.shape[-1])
    wrong = float(model(**inputs).loss)
    model.train()
    return right, wrong


FOCUS_IMPL = "train_focus"
_FOCUS: dict = {"rows": None, "out": [], "attr_rows": None, "out_attr": []}


def _focus_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    """SDPA, plus the head-averaged attention of the rows in ``_FOCUS["rows"]`` (training aid).

    ``_FOCUS["rows"]`` = (idx int64 (B, R) query positions, valid bool (B, R), keys_ok bool (B, L));
    appends float32 (B, L): attention of those rows averaged over heads and valid rows — the
    quantity Stage I ranks video tokens by (:func:`specvlm.decoding.attention_scores`).
    """
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    out = sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                 scaling=scaling, **kwargs)
    rows = _FOCUS["rows"]
    if rows is not None and query.shape[2] == key.shape[2]:
        idx, valid, keys_ok = rows
        p = _row_attention(query, key, idx, keys_ok, scaling)                    # (B, R, L)
        w = valid.float()
        _FOCUS["out"].append((p * w[..., None]).sum(1) / w.sum(1).clamp(min=1.0)[:, None])
        if _FOCUS.get("attr_rows") is not None:
            _FOCUS["out_attr"].append(_row_attention(query, key, _FOCUS["attr_rows"], keys_ok, scaling))
    return out


def _row_attention(query, key, idx, keys_ok, scaling) -> torch.Tensor:
    """Head-averaged causal attention probabilities of query rows ``idx`` (B, R) -> float32 (B, R, L)."""
    B, H, L, D = query.shape
    R = idx.shape[1]
    q = query.gather(2, idx[:, None, :, None].expand(B, H, R, D))
    k = key.repeat_interleave(H // key.shape[1], dim=1) if key.shape[1] != H else key
    s = (q @ k.transpose(-1, -2)).float() * (scaling if scaling is not None else D ** -0.5)
    ok = (torch.arange(L)[None, None, :] <= idx[:, :, None]) & keys_ok[:, None, :]
    return s.masked_fill(~ok[:, None], float("-inf")).softmax(-1).mean(1)


def _register_focus() -> None:
    from transformers import AttentionInterface, AttentionMaskInterface
    from transformers.masking_utils import sdpa_mask

    AttentionInterface.register(FOCUS_IMPL, _focus_attention)
    AttentionMaskInterface.register(FOCUS_IMPL, sdpa_mask)


def focus_rows(input_ids: torch.Tensor, attention_mask: torch.Tensor, video_id: int,
               header: list[int]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Query rows whose attention Stage I ranks video tokens by: the prompt after the video.

    For each row of the batch: positions after the last video token up to the end of the first
    ``<|im_start|>assistant\n`` header after it (pass B of :func:`specvlm.decoding.prefill_target`).

    Returns:
        idx int64 (B, R), valid bool (B, R), keys_ok bool (B, L) (non-padding keys).
    """
    B, L = input_ids.shape
    spans = []
    n = len(header)
    for b in range(B):
        ids = input_ids[b].tolist()
        start = _after_video(ids, video_id)
        end = start
        for j in range(start, L - n + 1):
            if ids[j:j + n] == header:
                end = j + n
                break
        spans.append((start, max(end, start + 1)))
    R = max(e - s for s, e in spans)
    idx = torch.zeros(B, R, dtype=torch.long)
    valid = torch.zeros(B, R, dtype=torch.bool)
    for b, (s, e) in enumerate(spans):
        idx[b, :e - s] = torch.arange(s, e)
        valid[b, :e - s] = True
    return idx, valid, attention_mask.bool()


def focus_loss(per_layer: list[torch.Tensor], input_ids: torch.Tensor, video_id: int,
               cover: torch.Tensor) -> tuple[torch.Tensor, float]:
    """-log(coverage-weighted share of the video attention on object/text pixels), mean over layers.

    share = sum_i a_i c_i / sum_i a_i over video tokens i, with a_i the attention and c_i the
    share of token i's pixels that are object or text pixels: the pixel share of attention.

    Args:
        per_layer: float32 (B, L) per layer from :func:`_focus_attention`.
        cover: float32 (B * V,) per-video-token coverage (:func:`token_labels` ``cover``).

    Returns:
        (scalar loss, mean share as a float).
    """
    vmask = input_ids == video_id
    obj = torch.zeros(vmask.shape, dtype=torch.float32)
    obj[vmask] = cover.float()
    has = obj.sum(1) > 0
    losses, shares = [], []
    for a in per_layer:
        share = (a * obj).sum(1) / (a * vmask.float()).sum(1).clamp(min=1e-9)
        losses.append(-torch.log(share[has] + 1e-4).mean())
        shares.append(float(share[has].detach().mean()))
    return torch.stack(losses).mean(), float(np.mean(shares))


def routing_loss(per_layer: list[torch.Tensor], input_ids: torch.Tensor, video_id: int, obj_labels: torch.Tensor,
                 valid: torch.Tensor, obj: torch.Tensor) -> tuple[torch.Tensor, float]:
    """-log(share of a row's video attention on the tokens of the object it names), mean over rows, layers.

    Args:
        per_layer: float32 (B, R, L) per layer (:func:`_row_attention` of :func:`attribute_rows`).
        obj_labels: int64 (B * V,) per-video-token object (:func:`token_labels` ``obj``).
        valid, obj: from :func:`attribute_rows`.

    Returns:
        (scalar loss, mean share); (0, nan) without rows.
    """
    if not bool(valid.any()):
        return per_layer[0].new_zeros(()), float("nan")
    vmask = input_ids == video_id
    lab = torch.zeros(vmask.shape, dtype=torch.long)
    lab[vmask] = obj_labels
    target = (lab[:, None, :] == (obj + 1)[:, :, None]) & vmask[:, None, :]     # (B, R, L)
    losses, shares = [], []
    for a in per_layer:
        share = (a * target).sum(-1) / (a * vmask[:, None, :]).sum(-1).clamp(min=1e-9)
        ok = valid & target.any(-1)
        losses.append(-torch.log(share[ok] + 1e-4).mean())
        shares.append(float(share[ok].detach().mean()))
    return torch.stack(losses).mean(), float(np.mean(shares))


def attribute_token_ids(tokenizer) -> list[int]:
    """Token ids of the shape and motion words (``moves`` too: it decides moving vs bouncing vs still) and the on-screen text values (weighted up by ``--attr-weight``)."""
    words = list(synth.SHAPES) + ["moves", "left", "right", "up", "down", "stays", "still", "bounces"]
    ids = [i for w in words for i in _single_ids(tokenizer, w)[-1:]]        # the spaced form
    ids += [i for v in TEXT_VALUES for i in _single_ids(tokenizer, v)]      # spaced (captions) and bare (answers)
    return sorted(set(ids))


def weighted_lm_loss(logits: torch.Tensor, labels: torch.Tensor, weighted_ids: list[int],
                     weight: float) -> torch.Tensor:
    """Next-token cross-entropy with tokens in ``weighted_ids`` counted ``weight`` times.

    logits float (B, L, vocab); labels int64 (B, L) with IGNORE. Equals the model's own
    loss when ``weight`` is 1.
    """
    tgt = labels[:, 1:]
    mask = tgt != IGNORE
    ce = F.cross_entropy(logits[:, :-1][mask].float(), tgt[mask], reduction="none")
    w = torch.ones_like(ce)
    if weighted_ids and weight != 1.0:
        w = torch.where(torch.isin(tgt[mask], torch.tensor(weighted_ids)), weight, 1.0)
    return (ce * w).sum() / w.sum()


def train_phase(args, phase: str, processor, recipe: DataRecipe, minutes: float, teacher=None,
                init=None, lr: float | None = None):
    """Run (or resume) one phase under a wall-clock budget; returns the trained model.

    ``phase`` is "target" (from scratch), "polish" (the finished target, continued from the
    state dict ``init`` on ``recipe`` with its own LR schedule peaking at ``lr``) or "draft"
    (distilled from ``teacher``).
    """
    from tqdm import tqdm

    is_target = phase in ("target", "polish")
    size = DRAFT_SIZE if phase == "draft" else TARGET_SIZE
    if args.smoke:
        size = TINY_SIZE if is_target else ModelSize(**{**TINY_SIZE.__dict__, "layers": 1})
    work = Checkpointer(Path(args.work) / phase)
    base_lr = args.lr if lr is None else lr
    model = build_model(processor.tokenizer, size, args.seed + (0 if is_target else 1))
    if teacher is not None and not args.smoke:
        _init_draft_from_target(model, teacher)
    probe = VisionProbe(model.config.text_config.hidden_size)
    if init is not None:
        model.load_state_dict(init["model"])
        probe.load_state_dict(init["probe"])
    feats_box = _capture_video_features(model) if is_target else None
    video_id = model.config.video_token_id
    header = processor.tokenizer("<|im_start|>assistant\n")["input_ids"]
    attr_ids = attribute_token_ids(processor.tokenizer)
    if is_target and args.focus_weight > 0:
        _register_focus()
        model.set_attn_implementation({"text_config": FOCUS_IMPL})
    params = list(model.parameters()) + (list(probe.parameters()) if is_target else [])
    opt = torch.optim.AdamW(params, lr=base_lr, betas=(0.9, 0.98), weight_decay=0.01)
    state = work.load()
    step, elapsed, losses = 0, 0.0, []
    diag_recipe = SMOKE_RECIPE if args.smoke else DataRecipe(frames=(16,), sides=(112,), token_budget=2400)
    diag_batch = make_batch(processor, diag_recipe, 10**8 + 17, 0, False) if is_target else None
    if state is not None:
        model.load_state_dict(state["model"])
        if "probe" in state:
            probe.load_state_dict(state["probe"])
        opt.load_state_dict(state["opt"])
        step, elapsed, losses = state["step"], state["elapsed"], state["losses"]
        print(f"[{phase}] resumed at step {step}, {elapsed / 60:.1f} min done", flush=True)
    if state is not None and state.get("done") and state["elapsed"] >= minutes * 60.0 - 1.0:
        model.set_attn_implementation({"text_config": "sdpa"})
        return model, state  # finished; a larger budget continues training (LR back to constant)
    budget = minutes * 60.0
    nparams = sum(p.numel() for p in model.parameters())
    print(f"[{phase}] {nparams / 1e6:.2f}M params, budget {minutes:.1f} min", flush=True)
    model.train()
    t_last_ckpt = time.time()
    bar = tqdm(total=int(budget), initial=int(elapsed), unit="s", desc=phase, mininterval=5,
               file=sys.stdout, dynamic_ncols=False, ncols=110)
    ema = None
    rng = np.random.default_rng([args.seed, 7, step])
    max_steps = args.max_steps
    while elapsed < budget and (max_steps is None or step < max_steps):
        t0 = time.time()
        progress = elapsed / budget
        single = phase == "target" and progress < recipe.curriculum
        offset = {"target": 0, "draft": 10**6, "polish": 2 * 10**6}[phase]
        batch = make_batch(processor, recipe, args.seed + offset, step, single)
        lr = lr_at(progress, base_lr)
        for g in opt.param_groups:
            g["lr"] = lr
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
            if is_target:
                inputs = {k: v for k, v in batch.items() if k not in ("meta", "aux", "labels")}
                if args.focus_weight > 0:
                    _FOCUS["rows"] = focus_rows(batch["input_ids"], batch["attention_mask"], video_id, header)
                    _FOCUS["out"], _FOCUS["out_attr"] = [], []
                    if args.route_weight > 0:
                        _FOCUS["attr_rows"] = batch["aux"]["attr"][0]
                try:
                    logits = model(**inputs).logits
                finally:
                    _FOCUS["rows"] = _FOCUS["attr_rows"] = None
                loss = weighted_lm_loss(logits, batch["labels"], attr_ids, args.attr_weight)
                aux_loss, aux_acc = probe.loss(feats_box.pop("feats"), batch["aux"])
                loss = loss + args.aux_weight * aux_loss
                if args.focus_weight > 0 and _FOCUS["out"]:
                    f_loss, aux_acc["focus"] = focus_loss(_FOCUS["out"], batch["input_ids"], video_id,
                                                          batch["aux"]["cover"])
                    _FOCUS["out"] = []
                    loss = loss + args.focus_weight * f_loss
                if args.route_weight > 0 and _FOCUS["out_attr"]:
                    _, valid_a, obj_a = batch["aux"]["attr"]
                    r_loss, aux_acc["route"] = routing_loss(_FOCUS["out_attr"], batch["input_ids"], video_id,
                                                            batch["aux"]["obj"], valid_a, obj_a)
                    _FOCUS["out_attr"] = []
                    loss = loss + args.route_weight * r_loss
            else:
                loss = _distill_loss(model, teacher, batch, rng, args)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        dt = time.time() - t0
        elapsed += dt
        lv = float(loss.detach())
        losses.append((step, lv))
        ema = lv if ema is None else 0.98 * ema + 0.02 * lv
        T, H, W, B = batch["meta"]
        bar.set_postfix_str(f"step {step} loss {ema:.3f} lr {lr:.1e} {T}f{H}x{W}b{B} {dt:.2f}s", refresh=False)
        bar.update(int(elapsed) - bar.n)
        if is_target and step % args.diag_every == 0:
            right, wrong = video_gap(model, diag_batch)
            bar.write(f"[{phase}] step {step} loss {ema:.3f} | held-out loss right video {right:.3f}, "
                      f"shuffled {wrong:.3f}, gap {wrong - right:.3f} | probe acc "
                      + " ".join(f"{k} {v:.2f}" for k, v in aux_acc.items()))
            sys.stdout.flush()
        if time.time() - t_last_ckpt > args.ckpt_minutes * 60:
            work.save({"model": model.state_dict(), "probe": probe.state_dict(), "opt": opt.state_dict(), "step": step,
                       "elapsed": elapsed, "losses": losses, "done": False})
            t_last_ckpt = time.time()
    bar.close()
    if is_target and args.focus_weight > 0:
        model.set_attn_implementation({"text_config": "sdpa"})
    state = {"model": model.state_dict(), "probe": probe.state_dict(), "opt": opt.state_dict(), "step": step,
             "elapsed": elapsed, "losses": losses, "done": True, "size": size.__dict__}
    work.save(state)
    print(f"[{phase}] done: {step} steps in {elapsed / 60:.1f} min, final loss ema {ema}", flush=True)
    return model, state


def _init_draft_from_target(draft, target) -> None:
    """Copy vision tower, embeddings, final norm/head and layer 0 from the target."""
    tsd = target.state_dict()
    own = draft.state_dict()
    copied = {k: v for k, v in tsd.items() if k in own and own[k].shape == v.shape}
    draft.load_state_dict(copied, strict=False)


def _distill_loss(draft, teacher, batch: dict, rng, args):
    """0.5 * CE(labels) + 0.5 * T^2-free KL(teacher || draft) on every labelled position."""
    labels = batch["labels"]
    with torch.no_grad():
        inputs = {k: v for k, v in batch.items() if k not in ("labels", "meta", "aux")}
        t_logits = teacher(**inputs).logits.float()
    keep = float(rng.uniform(0.1, 0.3)) if rng.random() < args.prune_prob else None
    d_logits, index = _draft_forward(draft, batch, keep, rng)
    d_logits = d_logits.float()
    # predict token i+1 from position i, at answer positions
    lab = labels[:, index]
    tgt = lab[:, 1:]
    mask = tgt != IGNORE
    d = d_logits[:, :-1][mask]
    t = t_logits[:, index][:, :-1][mask]
    ce = F.cross_entropy(d, tgt[mask])
    kl = F.kl_div(F.log_softmax(d, -1), F.log_softmax(t, -1), log_target=True, reduction="batchmean")
    return 0.5 * ce + 0.5 * kl


# ----------------------------------------------------------------------------- main

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
    return args


def main(argv=None) -> None:
    from build_bundled_processor import build_processor

    args = parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    recipe = DataRecipe(token_budget=args.token_budget)
    if args.smoke:
        recipe = SMOKE_RECIPE
        args.max_steps = args.max_steps or 5
        args.work = str(Path(args.work) / "smoke")
        args.out = str(Path(args.work) / "model")
    proc_dir = Path(args.work) / "processor"
    if (proc_dir / "tokenizer.json").exists():
        from transformers import AutoProcessor
        processor = AutoProcessor.from_pretrained(str(proc_dir))
    else:
        processor = build_processor(proc_dir)
    t_start = time.time()
    target, tstate = None, None
    if args.phase in ("all", "target", "draft"):
        target, tstate = train_phase(args, "target", processor, recipe, args.target_minutes)
        info = {"phase": "target", "steps": tstate["step"], "minutes": tstate["elapsed"] / 60,
                "size": (TINY_SIZE if args.smoke else TARGET_SIZE).__dict__, "recipe": recipe.__dict__,
                "command": " ".join(sys.argv)}
        if args.polish_minutes > 0:
            precipe = dataclasses.replace(recipe, object_weights=args.polish_objects, curriculum=0.0,
                                          p_describe=args.polish_describe)
            target, pstate = train_phase(args, "polish", processor, precipe, args.polish_minutes,
                                         init=tstate, lr=args.polish_lr)
            info["polish"] = {"steps": pstate["step"], "minutes": pstate["elapsed"] / 60, "lr": args.polish_lr,
                              "recipe": dataclasses.asdict(precipe)}
            tstate = {**pstate, "losses": tstate["losses"] + [(tstate["step"] + s, v) for s, v in pstate["losses"]]}
        save_final(target, processor, Path(args.out) / "target", tstate["losses"], "target loss", info)
    if args.phase in ("all", "draft"):
        target.eval()
        for p in target.parameters():
            p.requires_grad_(False)
        draft, dstate = train_phase(args, "draft", processor, recipe, args.draft_minutes, teacher=target)
        info = {"phase": "draft", "steps": dstate["step"], "minutes": dstate["elapsed"] / 60,
                "size": dstate["size"], "distilled_from": "target", "command": " ".join(sys.argv)}
        save_final(draft, processor, Path(args.out) / "draft", dstate["losses"], "draft loss", info)
    print(f"all done in {(time.time() - t_start) / 60:.1f} min this run; models in {args.out}", flush=True)


if __name__ == "__main__":
    main()
