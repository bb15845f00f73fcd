"""Why a verify step failed: the target's video attention where the draft diverged, and subtitle sources.

At a step whose drafted continuation the target refused (a *rejection*), the target chose its own
token at output position ``p``. The query that chose it is the one at output position ``p - 1``;
its attention over the video tokens (head-averaged, mean over layers: the quantity Stage I ranks
tokens by) says where the target looked for that token. :func:`explain_rejections` computes those
rows for the rejection steps of a run with one extra target forward (the prompt, then the
generated tokens with eager attention, each layer's weights reduced to the wanted rows at once),
and reports the share of that attention on video tokens the draft did not see (outside its kept
set). It also says whether the step's word appears in a subtitle cue that the draft did not get
(subtitle mode ``target``): the draft could not predict a fact it never read.

Source: SpecVLM (arXiv 2508.16201) Sec. 3.2 (verifier attention) and its failure analysis on long
subtitled videos; docs/design.md §4.2 (scores) and §4.7 (who sees the transcript).
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from specvlm.engine import kv
from specvlm.models.attention import attention_weights
from specvlm.engine.forward import embed_tokens, is_video, lm_forward, prompt_video
from specvlm.models.adapter import video_lm_kwargs

STOPWORDS = frozenset("a an the is are was it its of in on at to and or this that be".split())
"""Words too common to trace back to one subtitle cue."""


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


def video_attention_at(pair: Any, inputs: Any, output_ids: Sequence[int], positions: Sequence[int]) -> torch.Tensor:
    """The target's attention over the video tokens from the queries that chose output ``positions``.

    One forward: the prompt as in the target's prefill (SDPA), then ``output_ids[:max(positions)]`` with
    eager attention, each layer's weights reduced at once to the wanted rows (head mean).

    Args:
        pair: the :class:`specvlm.models.pair.ModelPair` of the run.
        inputs: the run's :class:`specvlm.types.ModelInputs` (its target view is used).
        output_ids: the generated ids.
        positions: output positions >= 1 (the query at ``p - 1`` chose token ``p``).

    Returns:
        float32 (len(positions), V): each row normalised over the V video tokens (mean over layers).

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
        vid = t_in.video_index

        def keep(w: torch.Tensor) -> None:                # (1, H, n, L + n) -> (rows, V)
            sink.append(w[0].float().mean(0)[rows.to(w.device)][:, vid.to(w.device)].cpu())

        R = t_in.positions.shape[0]
        p_ids = (t_in.next_position + torch.arange(n)).expand(R, n)
        with attention_weights(keep):   # eager weights for this call only (no model setting changes)
            lm_forward(model, ad, embed_tokens(model, list(output_ids[:n])), p_ids, cache, rows=None)
    if not sink:
        raise RuntimeError("no attention weights were computed for the output queries.")
    att = torch.stack(sink).mean(0)
    return att / att.sum(-1, keepdim=True).clamp(min=1e-12)


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


def explain_rejections(pair: Any, inputs: Any, steps: Sequence[Any], keep: Sequence[int] | None,
                       cues: Sequence[Any] = (), draft_saw_subtitles: bool = True, tokenizer: Any = None,
                       max_steps: int = 12, top: int = 256) -> list[StepWhy]:
    """:class:`StepWhy` for the lowest-acceptance rejection steps of a run (one extra target forward).

    Args:
        pair, inputs: the run's pair and prepared inputs.
        steps: the run's StepEvents (with trees for exact rejections).
        keep: the draft's kept video-token indices (None = it saw every video token).
        cues: the subtitle cues of the run; draft_saw_subtitles: False when the transcript was
            withheld from the draft (then a step's word found in a cue is reported).
        tokenizer: decodes the output to find each step's word (None: no subtitle check).
        max_steps: explain at most this many steps (lowest accepted length first, then earliest).
        top: keep this many most-attended video tokens per step.

    Returns:
        list of StepWhy in step order; [] when no step refused the draft.

    Source: SpecVLM's failure analysis on long subtitled videos; docs/design.md §4.7 (who sees what).
    """
    rej = [r for r in rejections(steps) if r[1] >= 1]
    acc = {int(s.step): int(s.accept_length) for s in steps}
    rej = sorted(sorted(rej, key=lambda r: (acc[r[0]], r[0]))[:max_steps])
    if not rej:
        return []
    ids = [int(t) for s in steps for t in s.token_ids]
    att = video_attention_at(pair, inputs, ids, [p for _, p, _ in rej])
    V = att.shape[1]
    seen = torch.zeros(V, dtype=torch.bool)
    if keep is None:
        seen[:] = True
    else:
        seen[torch.as_tensor(list(keep), dtype=torch.long)] = True
    pieces = [tokenizer.decode([t]) for t in ids] if tokenizer is not None else None
    out = []
    for (step, p, tok), row in zip(rej, att):
        k = min(top, V)
        w, idx = torch.topk(row, k)
        word = word_at(pieces, p) if pieces is not None else ""
        cue = cue_with(word, cues) if (cues and not draft_saw_subtitles and word) else None
        out.append(StepWhy(step, p, tok, float(row[~seen].sum()), idx.tolist(),
                           [round(float(x), 6) for x in w], cue, word))
    return out
