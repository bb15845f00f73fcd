"""Training data: synthetic clips from :mod:`specvlm.bench.synth` and :mod:`training.scenes`,
conversations (with the app's subtitle transcript, :mod:`specvlm.text.prompting`), per-token labels, batches.

Training scene seeds are drawn below :data:`TRAIN_SEED_LIMIT`; evaluation uses seeds >= 10**9.
"""
from __future__ import annotations

from dataclasses import dataclass
import re

import numpy as np
import torch

from training import scenes
from training.model import CELL_PX, TEMPORAL_PATCH
from training.token_labels import TEXT_OBJ, TEXT_VALUES, token_labels
from specvlm.bench import captions
from specvlm.bench import synth
from specvlm.text.prompting import subtitle_block, user_text

IGNORE = -100


TRAIN_SEED_LIMIT = 10**8


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
    p_sparse_long: float = 0.0    # share of clips of >= 48 frames that are sparse scenes (scenes.sparse_scene)
    p_sparse_short: float = 0.0   # the same for shorter clips
    p_subtitles: float = 0.0      # share of clips with a subtitle track (scenes.with_subtitles)
    min_cover: float = 0.15       # token_labels: least share of a token's tube an object must cover


SPARSE_RECIPE_CHANGES = dict(
    frames=(8, 16, 16, 16, 24, 32, 64, 96, 128, 128), p_sparse_long=0.7, p_sparse_short=0.15,
    p_subtitles=0.4, min_cover=0.03)
"""The sparse-information recipe (``--recipe sparse``): more long clips, 70% of them sparse scenes,
40% of all clips with subtitles, labels for objects covering >= 3% of a token's tube."""


SMOKE_RECIPE = DataRecipe(frames=(8,), sides=(56,), token_budget=400, max_batch=4)


BATCH_EXTRAS = ("meta", "aux", "text_start", "labels", "fact")
"""Keys of a :func:`make_batch` batch that are not model inputs."""


def model_inputs(batch: dict, labels: bool = False) -> dict:
    """The model's keyword arguments from a :func:`make_batch` batch (``labels`` too when asked)."""
    drop = set(BATCH_EXTRAS) - ({"labels"} if labels else set())
    return {k: v for k, v in batch.items() if k not in drop}


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


def conversation(truth, rng: np.random.Generator, p_describe: float, n_q: int, block: str = "") -> list[dict]:
    """Chat messages for one clip: a detailed description or ``n_q`` question turns.

    A subtitle transcript ``block`` (:func:`specvlm.text.prompting.subtitle_block`) goes between the video
    and the first question, as :func:`specvlm.models.adapter.message_for` places it.
    """
    video = {"type": "video"}
    if rng.random() < p_describe:
        prompt = captions.DESCRIBE_PROMPTS[0] if rng.random() < 0.7 else \
            captions.DESCRIBE_PROMPTS[rng.integers(len(captions.DESCRIBE_PROMPTS))]
        msgs = [{"role": "user", "content": [video, {"type": "text", "text": user_text(prompt, block)}]},
                {"role": "assistant", "content": captions.describe(truth)}]
        if rng.random() < 0.3:  # a follow-up question (cheap extra supervision)
            q, a = captions.questions(truth, rng)[0]
            msgs += [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
        return msgs
    msgs: list[dict] = []
    for k, (q, a) in enumerate(captions.questions(truth, rng)[:n_q]):
        content = [video, {"type": "text", "text": user_text(q, block)}] if k == 0 else [{"type": "text", "text": q}]
        msgs += [{"role": "user", "content": content}, {"role": "assistant", "content": a}]
    return msgs


def after_video(ids: list[int], video_id: int) -> int:
    """Index just after the last video placeholder (0 when there is none)."""
    last = max((i for i, t in enumerate(ids) if t == video_id), default=-1)
    return last + 1


def attribute_rows(input_ids: torch.Tensor, truths: list, tokenizer,
                   text_start: torch.Tensor | None = None) -> tuple[torch.Tensor, ...]:
    """Query rows that name one object, and which object: for the attention-routing loss.

    Every ``<colour> <shape>`` word pair after the video (captions: "red circle moves ...";
    questions: "Which direction does the red circle move?") gives the colour position (it
    predicts the shape), the shape position (it predicts the motion verb) and, when the next
    word is ``moves``, that position too (it predicts the direction). Every position whose next
    token is the on-screen text's value ("text 7.", or the answer to "What text appears?")
    names the text: its object is ``TEXT_OBJ - 1``, so ``obj + 1`` matches the text tokens' label.
    Rows are searched from ``text_start[b]`` (after the subtitle transcript, whose timestamps hold
    digits) or, without it, from just after the video.

    Returns:
        idx int64 (B, R), valid bool (B, R), obj int64 (B, R): index into ``truths[b].objects``
        (``TEXT_OBJ - 1`` for a text row).
    """
    # bare and spaced forms: a caption starts with its first object's colour ("red circle ...")
    colour = {i: c for c in synth.COLOURS for i in single_ids(tokenizer, c)}
    shape = {tokenizer(" " + s)["input_ids"][0]: s for s in synth.SHAPES}
    moves = tokenizer(" moves")["input_ids"][0]
    video_id = tokenizer.convert_tokens_to_ids("<|video_pad|>")
    rows: list[list[tuple[int, int]]] = []
    for b, (ids, truth) in enumerate(zip(input_ids.tolist(), truths)):
        start = after_video(ids, video_id) if text_start is None else int(text_start[b])
        found = []
        if truth.text is not None:
            value = set(single_ids(tokenizer, truth.text.text))
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


def single_ids(tokenizer, word: str) -> list[int]:
    """Ids of ``word`` and `` word`` where each is a single token."""
    out = []
    for w in (word, " " + word):
        t = tokenizer(w)["input_ids"]
        if len(t) == 1:
            out.append(t[0])
    return out


def attribute_token_ids(tokenizer) -> list[int]:
    """Token ids of the shape and motion words (``moves`` too: it decides moving vs bouncing vs still) and the on-screen text values (weighted up by ``--attr-weight``)."""
    words = list(synth.SHAPES) + ["moves", "left", "right", "up", "down", "stays", "still", "bounces"]
    ids = [i for w in words for i in single_ids(tokenizer, w)[-1:]]        # the spaced form
    ids += [i for v in TEXT_VALUES for i in single_ids(tokenizer, v)]      # spaced (captions) and bare (answers)
    return sorted(set(ids))


def token_spans(tokenizer, ids: list[int]) -> tuple[str, list[int]]:
    """(text, ends): the decoded text of ``ids`` and the end character offset of each token in it (a token
    decodes to the same characters alone as in context with this project's tokenizers)."""
    cache: dict[int, str] = {}
    ends, n = [], 0
    for t in ids:
        if t not in cache:
            cache[t] = tokenizer.decode([t])
        n += len(cache[t])
        ends.append(n)
    return "".join(cache[t] for t in ids), ends


def _overlap(ends: list[int], spans: list[tuple[int, int]], lo: int, hi: int) -> list[int]:
    """Token indices in [lo, hi) whose characters overlap any (start, stop) span."""
    out = []
    for i in range(lo, hi):
        a, b = (ends[i - 1] if i else 0), ends[i]
        if b > a and any(b > s and a < e for s, e in spans):
            out.append(i)
    return out


def _word(w: str) -> str:
    return r"(?<![A-Za-z0-9])" + re.escape(w) + r"(?![A-Za-z0-9])"


def fact_mask(input_ids: torch.Tensor, truths: list, tokenizer, text_start: torch.Tensor) -> torch.Tensor:
    """bool (B, L): where the answers write the clip's subtitle fact: at or after ``text_start[b]`` (after the
    video and the subtitle transcript), every token overlapping ``"<kind> <value>"`` (a description's
    "code 53.") or a bare ``"<value>."`` (the answer to the fact question), however many tokens the words
    take ("flag purple." marks; the colour of "purple triangle" does not); all False for a clip without a
    fact. Weighted ``--fact-weight`` in the LM loss."""
    out = torch.zeros(input_ids.shape, dtype=torch.bool)
    for b, truth in enumerate(truths):
        if truth.fact is None:
            continue
        ids = input_ids[b].tolist()
        text, ends = token_spans(tokenizer, ids)
        pat = r"(?:" + _word(truth.fact.kind) + r" )?" + _word(truth.fact.value) + r"(?=\.)"
        spans = [m.span() for m in re.finditer(pat, text)]
        hit = _overlap(ends, spans, int(text_start[b]), len(ids))
        out[b, hit] = True
    return out


def fact_rows(input_ids: torch.Tensor, fact: torch.Tensor, truths: list, tokenizer,
              text_start: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Query rows that should copy a subtitle fact from the transcript: for the fact routing loss.

    A row is a position after the transcript whose next token writes part of the clip's fact word
    (the kind or the value; ``fact`` of :func:`fact_mask`, shifted by one). Its target keys are the
    transcript tokens holding the same characters of the same word (after the video, before
    ``text_start[b]``): the row about to write the "3" of "code 53" attends to the "3" of the cue
    "The code is 53.", whatever the tokens around it (an induction pattern: read the next character
    where the word stands in the cue). A next token with no character of either word (a space) gives no row.

    Returns:
        idx int64 (B, R), valid bool (B, R) (no valid row for clips without a fact or whose transcript does
        not hold the words), target bool (B, R, L): per row, the transcript positions to attend to.
    """
    B, L = input_ids.shape
    video_id = tokenizer.convert_tokens_to_ids("<|video_pad|>")
    rows: list[list[tuple[int, list[int]]]] = []
    for b, truth in enumerate(truths):
        found: list[tuple[int, list[int]]] = []
        if truth.fact is not None:
            ids = input_ids[b].tolist()
            lo, hi = after_video(ids, video_id), int(text_start[b])
            text, ends = token_spans(tokenizer, ids)
            c_lo, c_hi = (ends[lo - 1] if lo else 0), (ends[hi - 1] if hi else 0)
            for j in fact[b].nonzero().flatten().tolist():
                if j < 1:
                    continue
                a, z = ends[j - 1], ends[j]
                keys: list[int] = []
                for word in (truth.fact.kind, truth.fact.value):
                    at = next((m.start() for m in re.finditer(_word(word), text)
                               if m.start() < z and m.end() > a and m.start() >= c_hi), None)
                    if at is None:
                        continue
                    ra, rz = max(a - at, 0), min(z - at, len(word))
                    spans = [(m.start() + ra, m.start() + rz) for m in re.finditer(_word(word), text)
                             if c_lo <= m.start() and m.end() <= c_hi]
                    keys += _overlap(ends, spans, lo, hi) if rz > ra else []
                if keys:
                    found.append((j - 1, keys))
        rows.append(found)
    R = max(1, max(len(r) for r in rows))
    idx = torch.zeros(B, R, dtype=torch.long)
    valid = torch.zeros(B, R, dtype=torch.bool)
    target = torch.zeros(B, R, L, dtype=torch.bool)
    for b, found in enumerate(rows):
        for r, (j, keys) in enumerate(found):
            idx[b, r], valid[b, r] = j, True
            target[b, r, keys] = True
    return idx, valid, target


def _clip(recipe: DataRecipe, rng: np.random.Generator, T: int, H: int, W: int, fps: float,
          n_obj: int | None) -> tuple[np.ndarray, synth.SceneTruth]:
    """One training clip: a sparse scene or a plain one (per the recipe), maybe with subtitles."""
    seed = int(rng.integers(TRAIN_SEED_LIMIT))
    p_sparse = recipe.p_sparse_long if T >= 48 else recipe.p_sparse_short
    if T >= 8 and rng.random() < p_sparse:
        frames, truth = scenes.sparse_scene(seed, scenes.SparseSpec(
            num_frames=T, height=H, width=W, fps=fps, num_objects=min(n_obj, 2) if n_obj else None))
    else:
        frames, truth = synth.generate(seed, synth.SceneSpec(num_frames=T, height=H, width=W, fps=fps,
                                                             num_objects=n_obj))
    if rng.random() < recipe.p_subtitles:
        truth = scenes.with_subtitles(truth, seed)
    return frames, truth


def transcript_end(ids: list[int], tokenizer, text: str, block: str, video_id: int) -> int:
    """Index just after the subtitle transcript in ``ids`` (unpadded), or after the video without one.

    Stage I's queries (pass B of the target prefill) start there: the transcript goes into pass A.
    """
    if not block:
        return after_video(ids, video_id)
    from specvlm.text.prompting import subtitle_mask

    mask = subtitle_mask(torch.tensor(ids), tokenizer, text, block)
    return int(mask.nonzero().max()) + 1


def make_batch(processor, recipe: DataRecipe, seed: int, step: int, single_object: bool) -> dict:
    """Generate one training batch inline.

    All clips in a batch share (T, H, W, fps), so video tensors need no padding.

    Returns:
        dict of tensors for Qwen2_5_VLForConditionalGeneration (input_ids (B, L),
        attention_mask, mm_token_type_ids, pixel_values_videos (P, 1176),
        video_grid_thw (B, 3), second_per_grid_ts (B,), labels (B, L)) plus
        ``meta`` (T, H, W, B), ``aux`` (per-video-token labels, see
        :func:`training.token_labels.token_labels`, concatenated over the batch), ``text_start`` int64 (B,): the first
        position after the video and the subtitle transcript (where Stage I's queries start), and
        ``fact`` bool (B, L): :func:`fact_mask` (and ``aux["fact"]``: :func:`fact_rows`).
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
    n_vid = (T // TEMPORAL_PATCH) * (H // CELL_PX) * (W // CELL_PX)
    B = int(np.clip(recipe.token_budget // (n_vid + 40), recipe.min_batch, recipe.max_batch))
    tok = processor.tokenizer
    header = tok("<|im_start|>assistant\n")["input_ids"]
    end_id = tok.convert_tokens_to_ids("<|im_end|>")
    video_id = tok.convert_tokens_to_ids("<|video_pad|>")
    videos, texts, blocks, metas, aux, truths = [], [], [], [], [], []
    for _ in range(B):
        n_obj = 1 if single_object else None
        if n_obj is None and recipe.object_weights is not None:
            n_obj = int(rng.choice(len(recipe.object_weights), p=recipe.object_weights)) + 1
        frames, truth = _clip(recipe, rng, T, H, W, fps, n_obj)
        block = subtitle_block(list(truth.cues), np.arange(T) / fps, 2) if truth.cues else ""
        msgs = conversation(truth, rng, recipe.p_describe, recipe.n_questions, block)
        texts.append(processor.apply_chat_template(msgs, tokenize=False))
        blocks.append(block)
        videos.append(frames)
        aux.append(token_labels(truth, frames, min_cover=recipe.min_cover))
        truths.append(truth)
        metas.append({"fps": fps, "total_num_frames": T, "frames_indices": list(range(T))})
    batch = processor(text=texts, videos=videos, video_metadata=metas, padding=True, return_tensors="pt")
    ids_rows = [ids[:int(m.sum())] for ids, m in zip(batch["input_ids"].tolist(), batch["attention_mask"])]
    if recipe.label_all_text:
        skip = {video_id, tok.pad_token_id}
        labels = [_label_text(ids, skip) for ids in batch["input_ids"].tolist()]
    else:
        labels = [_label_answers(ids, header, end_id) for ids in batch["input_ids"].tolist()]
    batch = dict(batch)
    batch["labels"] = torch.tensor(labels)
    batch["labels"][batch["attention_mask"] == 0] = IGNORE
    batch["meta"] = (T, H, W, B)
    batch["text_start"] = torch.tensor([transcript_end(ids, tok, text, block, video_id)
                                        for ids, text, block in zip(ids_rows, texts, blocks)])
    batch["aux"] = {k: torch.from_numpy(np.concatenate([a[k] for a in aux])) for k in aux[0]}
    batch["aux"]["attr"] = attribute_rows(batch["input_ids"], truths, tok, batch["text_start"])
    batch["fact"] = fact_mask(batch["input_ids"], truths, tok, batch["text_start"])
    batch["aux"]["fact"] = fact_rows(batch["input_ids"], batch["fact"], truths, tok, batch["text_start"])
    return batch
