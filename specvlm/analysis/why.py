"""Why a verify step failed: where the target's attention went when the draft diverged, and subtitle sources.

At a step whose drafted continuation the target refused (a *rejection*), the target chose its own
token at output position ``p``. The query that chose it is the one at output position ``p - 1``;
its attention (head-averaged, mean over layers: the quantity Stage I ranks video tokens by) says
where the target looked for that token. :func:`explain_rejections` computes those rows for the
rejection steps of a run with one extra target forward (the prompt, then the generated tokens with
eager attention, each layer's weights reduced to the wanted rows at once) and splits each row over
the whole input (:data:`SEGMENTS`: video tokens the draft kept or did not see, the subtitle transcript,
the question, the rest of the prompt, the text so far). The largest part names the one explanation
the numbers support (:func:`explanation`): the pruned video, the transcript withheld from the draft,
or neither. The video part of the row (normalised over the video tokens) is kept for the heat maps,
with the share on video tokens outside the draft's kept set, and a withheld subtitle cue holding the
step's word is recorded.

Source: SpecVLM (arXiv 2508.16201) Sec. 3.2 (verifier attention) and its failure analysis on long
subtitled videos; docs/design.md §4.2 (scores) and §4.7 (who sees the transcript).
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from specvlm.analysis.run import RunRecord
from specvlm.engine import kv
from specvlm.models.attention import attention_weights
from specvlm.engine.forward import embed_tokens, is_video, lm_forward, prompt_video
from specvlm.models.adapter import video_lm_kwargs

STOPWORDS = frozenset("a an the is are was it its of in on at to and or this that be".split())
"""Words too common to trace back to one subtitle cue."""

SEGMENTS = ("video_kept", "video_pruned", "transcript", "question", "prompt_other", "text_so_far")
"""The parts of the target's input a step's attention is split into (:func:`segment_masks`): video tokens the
draft kept, video tokens pruned from the draft, the subtitle transcript, the question (the prompt after the
video and transcript), the rest of the prompt (system prompt, template), and the text generated so far."""

EXPLANATIONS = ("pruned_video", "withheld_transcript", "seen_input")
"""What :func:`explanation` can name: the pruned video, the transcript withheld from the draft, or neither
(the draft saw what the target attended most)."""


class WhyError(ValueError):
    """A step cannot be explained (no rejection there, positions out of range)."""


@dataclass(frozen=True)
class StepWhy:
    """Why one verify step failed.

    Attributes:
        step: the verify step number.
        position: output position of the target's own token at that step (0 = first generated token).
        token_id: that token.
        share_unseen: share of the target's video attention (from the query at ``position - 1``) on
            video tokens outside the draft's kept set, in [0, 1].
        top_tokens: video-token indices with the largest attention, most first.
        top_weights: their attention, normalised over all video tokens (sums to <= 1).
        cue: ``(start_s, end_s, text)`` of a subtitle cue holding the step's word that the draft did
            not get, or None.
        word: the output word the token belongs to.
        shares: the same query's attention over the target's whole input, split into :data:`SEGMENTS`
            (shares in [0, 1] summing to 1).
        explanation: the one of :data:`EXPLANATIONS` the shares support (:func:`explanation`).

    Source: SpecVLM Sec. 3.2 (the verifier's attention as importance); computed by :func:`explain_rejections`.
    """

    step: int
    position: int
    token_id: int
    share_unseen: float
    top_tokens: list[int]
    top_weights: list[float]
    cue: tuple[float, float, str] | None = None
    word: str = ""
    shares: dict[str, float] = field(default_factory=dict)
    explanation: str = ""


def rejections(steps: Sequence[Any]) -> list[tuple[int, int, int]]:
    """``(step, position, target token)`` of every step whose drafted continuation the target refused.

    A step with a recorded tree refused the draft when its accepted path ended at a node that had
    drafted children (a whole accepted path is no rejection); without a tree, when it accepted fewer
    draft tokens than it emitted minus one. Step 0 (the prefill token) is skipped.

    Args:
        steps: :class:`specvlm.types.StepEvent` items (a stream's or a run record's) in
            order (``tree`` a DraftTreeRecord, a dict of one, or None).

    Returns:
        list of (step number, output position of the target's token, that token id), in step order.

    Source: docs/design.md §4.8-4.9 (tree verification, accepted path).
    """
    out, pos = [], 0
    for s in steps:
        n = len(s.token_ids)
        if s.step > 0 and s.accept_length < n:
            tree = s.tree
            if tree is not None:
                parents = tree["parents"] if isinstance(tree, dict) else tree.parents
                path = tree["accepted_nodes"] if isinstance(tree, dict) else tree.accepted_nodes
                refused = (path[-1] if path else -1) in parents
            else:
                refused = True
            if refused:
                out.append((int(s.step), pos + int(s.accept_length), int(s.token_ids[s.accept_length])))
        pos += n
    return out


def input_attention_at(pair: Any, inputs: Any, output_ids: Sequence[int], positions: Sequence[int]) -> torch.Tensor:
    """The target's attention over its whole input from the queries that chose output ``positions``.

    One forward: the prompt as in the target's prefill (SDPA), then ``output_ids[:max(positions)]`` with
    eager attention, each layer's weights reduced at once to the wanted rows (head mean).

    Args:
        pair: the :class:`specvlm.models.pair.ModelPair` of the run.
        inputs: the run's :class:`specvlm.types.ModelInputs` (its target view is used).
        output_ids: the generated ids.
        positions: output positions >= 1 (the query at ``p - 1`` chose token ``p``).

    Returns:
        float32 (len(positions), L + n): mean over layers of the head-averaged attention rows over the
        target's L prompt tokens then the n = max(positions) generated tokens; each row sums to 1 (a row
        is 0 after its own query: causal).

    Raises:
        WhyError: a position < 1 or beyond the output.
        RuntimeError: the attention modules returned no weights under eager attention.

    Source: docs/design.md §4.2 (pass B's head-averaged attention, mean over layers).
    """
    pos = [int(p) for p in positions]
    if not pos or min(pos) < 1 or max(pos) > len(output_ids):
        raise WhyError(f"positions {pos} must lie in 1..{len(output_ids)} (the query before each is a generated "
                       "token).")
    model, ad = pair.target, pair.adapter
    t_in = inputs.for_target()
    rows = torch.tensor([p - 1 for p in pos])
    n = max(pos)
    with torch.inference_mode():
        emb, side = prompt_video(model, ad, t_in)
        cache = kv.new_cache(model)
        lm_forward(model, ad, emb, t_in.positions, cache, rows=None,
                   extra=video_lm_kwargs(ad, is_video(t_in), side))
        sink: list[torch.Tensor] = []

        def keep(w: torch.Tensor) -> None:                # (1, H, n, L + n) -> (rows, L + n)
            sink.append(w[0].float().mean(0)[rows.to(w.device)].cpu())

        R = t_in.positions.shape[0]
        p_ids = (t_in.next_position + torch.arange(n)).expand(R, n)
        with attention_weights(keep):   # eager weights for this call only (no model setting changes)
            lm_forward(model, ad, embed_tokens(model, list(output_ids[:n])), p_ids, cache, rows=None)
    if not sink:
        raise RuntimeError("no attention weights were computed for the output queries.")
    att = torch.stack(sink).mean(0)
    return att / att.sum(-1, keepdim=True).clamp(min=1e-12)


def video_attention_at(pair: Any, inputs: Any, output_ids: Sequence[int], positions: Sequence[int]) -> torch.Tensor:
    """The target's attention over the video tokens from the queries that chose output ``positions``.

    Args:
        pair, inputs, output_ids, positions: as :func:`input_attention_at`.

    Returns:
        float32 (len(positions), V): each row normalised over the V video tokens (mean over layers).

    Raises:
        WhyError, RuntimeError: as :func:`input_attention_at`.

    Source: docs/design.md §4.2 (pass B's head-averaged attention, mean over layers).
    """
    return _video_rows(input_attention_at(pair, inputs, output_ids, positions), inputs.for_target().video_index)


def _video_rows(att: torch.Tensor, video_index: torch.Tensor) -> torch.Tensor:
    """(P, L + n) input attention -> (P, V) rows over the video tokens, each normalised to sum 1."""
    vid = att[:, video_index]
    return vid / vid.sum(-1, keepdim=True).clamp(min=1e-12)


def segment_masks(inputs: Any, keep: Sequence[int] | None, num_generated: int) -> dict[str, torch.Tensor]:
    """Which of the target's input positions belong to each part of :data:`SEGMENTS`.

    Args:
        inputs: the run's ModelInputs (its target view is used).
        keep: the draft's kept video-token indices (None = it saw every video token).
        num_generated: n, the generated tokens that follow the prompt.

    Returns:
        :data:`SEGMENTS` name -> bool (L + n,); every position is in exactly one part. ``question`` is
        the prompt after the last video or transcript token (the question and the chat template's suffix),
        ``prompt_other`` the prompt's remaining text (system prompt, template tokens before the video).

    Source: docs/design.md §4.1 (pass B = the text after the video), §4.7 (who sees the transcript).
    """
    t_in = inputs.for_target()
    L = int(t_in.input_ids.shape[1])
    size = L + int(num_generated)
    vid = t_in.video_index.cpu()
    video = torch.zeros(size, dtype=torch.bool)
    video[vid] = True
    kept = torch.zeros(size, dtype=torch.bool)
    kept[vid if keep is None else vid[torch.as_tensor(list(keep), dtype=torch.long)]] = True
    sub = torch.zeros(size, dtype=torch.bool)
    if t_in.subtitle_mask is not None:
        sub[:L] = t_in.subtitle_mask.cpu().bool()
    last = int((video | sub).nonzero().max()) if bool((video | sub).any()) else -1
    question = torch.zeros(size, dtype=torch.bool)
    question[last + 1:L] = True
    generated = torch.zeros(size, dtype=torch.bool)
    generated[L:] = True
    parts = {"video_kept": kept, "video_pruned": video & ~kept, "transcript": sub, "question": question,
             "text_so_far": generated}
    parts["prompt_other"] = ~(video | sub | question | generated)
    return {name: parts[name] for name in SEGMENTS}


def attention_shares(row: torch.Tensor, masks: dict[str, torch.Tensor]) -> dict[str, float]:
    """Share of one attention row (float (L + n,), summing to 1) in each part of :func:`segment_masks`.

    Source: this module (no external reference).
    """
    total = float(row.sum()) or 1.0
    return {name: round(float(row[m].sum()) / total, 6) for name, m in masks.items()}


def explanation(shares: dict[str, float], draft_saw_subtitles: bool = True, pruned: bool = True) -> str:
    """The one explanation the attention shares support: the part of the input the target attended most.

    ``pruned_video`` or ``withheld_transcript`` when that part is one the draft did not see (video tokens
    outside its kept set; the transcript when it was withheld from the draft), else ``seen_input``: the
    draft saw what the target looked at most, so a missing input does not explain the refusal.

    Args:
        shares: :func:`attention_shares` of the step.
        draft_saw_subtitles: False when the transcript was withheld from the draft.
        pruned: False when the draft saw every video token.

    Returns:
        one of :data:`EXPLANATIONS`.

    Source: SpecVLM (arXiv 2508.16201) Sec. 3.2 (the verifier's attention as importance).
    """
    top = max(SEGMENTS, key=lambda k: shares.get(k, 0.0))
    if top == "video_pruned" and pruned:
        return "pruned_video"
    if top == "transcript" and not draft_saw_subtitles:
        return "withheld_transcript"
    return "seen_input"


def word_at(text_pieces: Sequence[str], position: int) -> str:
    """The whitespace-delimited word of the output that token ``position`` belongs to (punctuation stripped).

    Args:
        text_pieces: decoded text of each output token; position: index into them.

    Source: this module (no external reference).
    """
    start = sum(len(t) for t in text_pieces[:position])
    text = "".join(text_pieces)
    a = start
    while a < len(text) and text[a].isspace():      # a token like " 4" starts the word after its space
        a += 1
    if a == start:                                   # a token inside a word ("2" of "42"): back to its start
        while a > 0 and not text[a - 1].isspace():
            a -= 1
    b = a
    while b < len(text) and not text[b].isspace():
        b += 1
    return re.sub(r"^\W+|\W+$", "", text[a:b])


def cue_with(word: str, cues: Sequence[Any]) -> tuple[float, float, str] | None:
    """The first cue (``Cue`` or ``(start_s, end_s, text)``) whose words include ``word`` (case-insensitive),
    or None (also for :data:`STOPWORDS` and words shorter than 2 characters).

    Source: this module (no external reference).
    """
    w = word.lower()
    if len(w) < 2 or w in STOPWORDS:
        return None
    for c in cues:
        start, end, text = (c.start_s, c.end_s, c.text) if hasattr(c, "text") else c
        if w in {re.sub(r"^\W+|\W+$", "", x) for x in text.lower().split()}:
            return float(start), float(end), str(text)
    return None


def _held_at(keep: Sequence[int] | None, steps: Sequence[Any], step: int) -> list[int] | None:
    """The video tokens the draft held at ``step``: ``keep`` and those re-selection added at earlier steps
    (:attr:`specvlm.types.StepEvent.added`); None (every token) when ``keep`` is None."""
    if keep is None:
        return None
    return sorted({int(t) for t in keep} | {int(t) for s in steps if s.step < step for t in getattr(s, "added", [])})


def explain_rejections(pair: Any, inputs: Any, steps: Sequence[Any], keep: Sequence[int] | None,
                       cues: Sequence[Any] = (), draft_saw_subtitles: bool = True,
                       max_steps: int = 12, top: int = 256) -> list[StepWhy]:
    """:class:`StepWhy` for the lowest-acceptance rejection steps of a run (one extra target forward).

    Args:
        pair, inputs: the run's pair and prepared inputs.
        steps: the run's StepEvents (with trees for exact rejections); their text pieces
            (:meth:`specvlm.analysis.run.RunRecord.token_texts`) give each step's word.
        keep: the draft's kept video-token indices (None = it saw every video token); tokens re-selection added
            before a step (``StepEvent.added``) count as seen from then on.
        cues: the subtitle cues of the run; draft_saw_subtitles: False when the transcript was
            withheld from the draft (then a step's word found in a cue is reported).
        max_steps: explain at most this many steps (lowest accepted length first, then earliest).
        top: keep this many most-attended video tokens per step.

    Returns:
        list of StepWhy in step order (each with its attention :data:`SEGMENTS` shares and
        :func:`explanation`); [] when no step refused the draft.

    Source: SpecVLM's failure analysis on long subtitled videos; docs/design.md §4.7 (who sees what).
    """
    rej = [r for r in rejections(steps) if r[1] >= 1]
    acc = {int(s.step): int(s.accept_length) for s in steps}
    rej = sorted(sorted(rej, key=lambda r: (acc[r[0]], r[0]))[:max_steps])
    if not rej:
        return []
    ids = [int(t) for s in steps for t in s.token_ids]
    full = input_attention_at(pair, inputs, ids, [p for _, p, _ in rej])
    n_gen = full.shape[1] - inputs.for_target().input_ids.shape[1]
    att = _video_rows(full, inputs.for_target().video_index)
    V = att.shape[1]
    pieces = RunRecord(steps=list(steps)).token_texts()
    out = []
    for (step, p, tok), row, whole in zip(rej, att, full):
        held = _held_at(keep, steps, step)        # the kept set, plus what re-selection added before this step
        masks = segment_masks(inputs, held, n_gen)
        seen = torch.ones(V, dtype=torch.bool) if held is None else torch.zeros(V, dtype=torch.bool)
        seen[torch.as_tensor([] if held is None else list(held), dtype=torch.long)] = True
        k = min(top, V)
        w, idx = torch.topk(row, k)
        word = word_at(pieces, p)
        cue = cue_with(word, cues) if (cues and not draft_saw_subtitles and word) else None
        shares = attention_shares(whole, masks)
        out.append(StepWhy(step, p, tok, float(row[~seen].sum()), idx.tolist(),
                           [round(float(x), 6) for x in w], cue, word, shares,
                           explanation(shares, draft_saw_subtitles, keep is not None)))
    return out
