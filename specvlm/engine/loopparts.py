"""The prefill phase and what the loop starts from: the target prefill (or a reused one), scoring and pruning,
the draft prefill, the first token, the emitter.

The vanilla and the speculative loop (:mod:`specvlm.engine.loop`) emit tokens, stop at EOS / the budget and
decode text through one :class:`Emitter`, so their events agree.

Source: docs/design.md §4.10 (stop at the first EOS, never exceed max_new_tokens) and §4.12.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any, Callable

import torch

from specvlm.engine.measures import Timer, logit_margin
from specvlm.config import DecodeConfig, PruneConfig, SamplingConfig
from specvlm.engine import kv
from specvlm.engine.forward import prompt_video
from specvlm.engine.prefill import TargetPrefill, prefill_draft, prefill_target
from specvlm.models.pair import ModelPair
from specvlm.models.stopping import stop_between_layers
from specvlm.spec.adaptive import adaptive_drop_rate
from specvlm.spec.grid import map_keep
from specvlm.spec.pruning import SCORE_METHODS, prune
from specvlm.spec.sampling import make_generator, process_logits, sample
from specvlm.types import ModelInputs, PrefillInfo, StepEvent


def draft_substitute(pair: Any) -> tuple[int, int]:
    """How the draft embeds target tokens it has no row for: (draft rows, substitute id).

    In Std-SD the target's LM head can be larger than the draft's embedding table (padded
    vocabularies: Qwen2.5-VL-7B 152,064 vs 3B 151,936). The target may emit such an id (sampled,
    or greedy when its head favours a padding row); the draft then sees the tokenizer's pad id
    in its place (else its unk id, else 0). Only the draft's context changes, so later drafts
    may be accepted less often; the target still decides every token, so the output does not.

    Args:
        pair: the ModelPair.

    Returns:
        (Vd, substitute): ids >= Vd are replaced by ``substitute`` (< Vd) before the draft
        embeds them.

    Source: docs/design.md §4 (padded vocabularies within a family).
    """
    rows = int(pair.draft.get_input_embeddings().weight.shape[0])
    tok = getattr(pair.processor, "tokenizer", None)
    for name in ("pad_token_id", "unk_token_id"):
        tid = getattr(tok, name, None)
        if isinstance(tid, int) and 0 <= tid < rows:
            return rows, tid
    return rows, 0


class Emitter:
    """Tracks generated ids, EOS / max_new_tokens truncation and text deltas.

    Source: docs/design.md §4.10 (stop at the first EOS, never exceed max_new_tokens).
    """

    def __init__(self, pair: ModelPair, config: DecodeConfig):
        self.tok = pair.processor.tokenizer
        self.eos = pair.eos_token_ids if config.stop_at_eos else set()
        self.max = config.max_new_tokens
        self.ids: list[int] = []
        self.text = ""
        self.done = False
        self._prefix = self._read = 0

    def take(self, tokens: list[int]) -> list[int]:
        """Append tokens up to the first EOS / the budget; returns those actually emitted."""
        out = []
        for t in tokens:
            if self.done:
                break
            out.append(t)
            self.ids.append(t)
            if t in self.eos or len(self.ids) >= self.max:
                self.done = True
        return out

    def emit(self, tokens: list[int]) -> tuple[list[int], list[str]]:
        """:meth:`take` one token at a time with its text :meth:`delta`: (emitted ids, their text pieces);
        the pieces join to the step's text (``StepEvent.pieces``)."""
        out, pieces = [], []
        for t in tokens:
            got = self.take([t])
            if not got:
                break
            out += got
            pieces.append(self.delta())
        return out, pieces

    def delta(self) -> str:
        """Text for the tokens since the last call (incremental: decodes a short window, not all ids).

        Holds back text that ends in an incomplete UTF-8 sequence (U+FFFD) until it completes or
        the generation ends.
        """
        window = self.tok.decode(self.ids[self._prefix:], skip_special_tokens=True)
        head = self.tok.decode(self.ids[self._prefix:self._read], skip_special_tokens=True)
        if len(window) <= len(head) or (window.endswith("\ufffd") and not self.done):
            return ""
        self._prefix, self._read = self._read, len(self.ids)
        out = window[len(head):]
        self.text += out
        return out


class Picker:
    """Chooses target tokens: argmax when greedy, else a seeded draw from the processed logits.

    The same :func:`specvlm.spec.sampling.process_logits` (temperature, nucleus) is used by vanilla
    sampling and by verification, so both sample from the same target distribution.

    Source: docs/design.md §4.11.
    """

    def __init__(self, sampling: SamplingConfig):
        self.cfg = sampling
        self.greedy = sampling.greedy
        self.gen = None if self.greedy else make_generator(sampling)

    def __call__(self, logits: torch.Tensor) -> int:
        if self.greedy:
            return int(logits.argmax())
        return sample(process_logits(logits.float(), self.cfg).cpu(), self.gen)


def rope_dims(inputs: ModelInputs) -> int:
    """R, the rows of the prompt's position ids.

    Source: docs/design.md §7 (M-RoPE positions).
    """
    return int(inputs.positions.shape[0])


def prefill(pair: ModelPair, inputs: ModelInputs, with_scores: bool, reuse: TargetPrefill | None) -> TargetPrefill:
    """The target prefill: computed, or a copy of ``reuse`` after checking that it fits ``inputs``.

    Source: docs/design.md §4.1-4.2.
    """
    if reuse is None:
        return prefill_target(pair, inputs, with_scores=with_scores)
    held, L = kv.cache_length(reuse.cache), int(inputs.input_ids.shape[1])
    if held != L:
        raise ValueError(f"prefill holds {held} tokens but the target's prompt has {L}: make it with "
                         "prefill_target(pair, inputs.for_target(), ...) for these inputs.")
    if with_scores and reuse.scores is None:
        raise ValueError("prefill has no attention scores, which this pruning method needs: make it with "
                         "prefill_target(..., with_scores=True).")
    return replace(reuse, cache=kv.clone_cache(pair.target, reuse.cache))


def subtitle_tokens(inputs: ModelInputs, seen_by: str) -> int:
    """Transcript tokens in the prompt of ``seen_by`` ("target" or "draft").

    Source: docs/design.md §2 (subtitle modes).
    """
    hidden = {"target": "draft", "draft": "target"}[seen_by]
    return 0 if inputs.subtitle_mode in (hidden, "none") else inputs.num_subtitle_tokens


def first_token(pair: ModelPair, config: DecodeConfig, last_logits: torch.Tensor):
    """Emitter, picker, decode clock, the prefill's token and its step-0 StepEvent.

    Source: docs/design.md §4.9 and §4.12.
    """
    em = Emitter(pair, config)
    pick = Picker(config.sampling)
    t_dec = time.perf_counter()
    first = pick(last_logits)
    _, pieces = em.emit([first])
    return em, pick, t_dec, first, StepEvent(0, [first], 0, [False], "".join(pieces), num_generated=1,
                                             margin=logit_margin(last_logits), pieces=pieces)


@dataclass
class SpeculativePrefill:
    """What both speculative loops start from (docs/design.md §4.1-4.7).

    Attributes:
        t_in: the target's inputs (without the transcript in subtitle mode ``draft``).
        d_in: the draft's inputs (its own prompt when its token grid differs).
        tp: the target prefill (KV cache of L tokens, last logits, scores).
        d_cache: the draft's KV cache over the kept video tokens; d_len: its length in tokens.
        info: the PrefillInfo event the loop yields first.
    """

    t_in: ModelInputs
    d_in: ModelInputs
    tp: TargetPrefill
    d_cache: Any
    d_len: int
    info: PrefillInfo


def speculative_prefill(pair: ModelPair, inputs: ModelInputs, config: DecodeConfig, reuse: TargetPrefill | None,
                        should_stop: Callable[[], bool] | None) -> SpeculativePrefill:
    """Target prefill (two passes, scores), pruning and the draft prefill on the kept video tokens.

    Raises:
        Stopped: ``should_stop`` turned True between two layers of a prefill.
        ValueError: as :func:`prefill` for a ``reuse`` of other inputs.

    Source: SpecVLM (arXiv 2508.16201) Sec. 3.1-3.2; docs/design.md §4.1-4.7.
    """
    t_in = inputs.for_target()
    # 4.1-4.2 target prefill in two passes, attention scores from pass B
    with Timer(pair.device) as t_pre, stop_between_layers(should_stop):
        tp = prefill(pair, t_in, config.prune.method in SCORE_METHODS, reuse)
    # 4.3-4.6 pruning (pure), with r chosen per clip when asked
    with Timer() as t_prune:
        pcfg, why_r = drop_rate_for(config, tp.scores)
        pr = prune(tp.scores, pcfg, grid=inputs.token_grid, num_video_tokens=inputs.num_video_tokens,
                   force_keep=inputs.force_keep)
    # 4.7 draft prefill on kept video tokens (+ transcript if the draft sees it), original positions;
    # a draft with its own token grid reads its own prompt, the kept set carried over by overlap
    d_in = inputs.draft_inputs or inputs
    with Timer(pair.draft.device) as t_dpre, stop_between_layers(should_stop):
        if config.reselect.enabled and not pair.self_sd and tp.draft_video is None:  # kept for re-selection
            tp = replace(tp, draft_video=prompt_video(pair.draft, pair.draft_adapter, d_in))
        keep = pr.keep if d_in is inputs else map_keep(pr.keep, inputs.token_grid, d_in.token_grid)
        d_cache, d_len = prefill_draft(pair, d_in, tp, keep, target_inputs=t_in)
    info = PrefillInfo(int(t_in.input_ids.shape[1]), inputs.num_video_tokens, d_len, pr, t_pre.seconds,
                       t_prune.seconds, t_dpre.seconds, inputs.token_grid, inputs.frames_per_token,
                       subtitle_tokens(inputs, "target"), subtitle_tokens(d_in, "draft"), float(pcfg.drop_rate), why_r)
    return SpeculativePrefill(t_in, d_in, tp, d_cache, d_len, info)


def drop_rate_for(config: DecodeConfig, scores: torch.Tensor | None) -> tuple[PruneConfig, str]:
    """The pruning settings a request uses and one sentence on its r: ``drop_rate``, or with
    ``adaptive_r`` the clip's own r from the Stage I scores (:func:`specvlm.spec.adaptive.adaptive_drop_rate`).

    Source: SpecVLM (arXiv 2508.16201) Sec. 3.2 and 4 (r = 0.9 fixed); docs/design.md §4.3.
    """
    p = config.prune
    if p.method == "none":
        return replace(p, drop_rate=0.0), "r = 0: the draft sees every video token (method none)."
    if not p.adaptive_r:
        return p, f"r = {p.drop_rate:g} as set (fixed drop rate)."
    if scores is None:
        return p, f"r = {p.drop_rate:g} as set: method {p.method} has no attention scores to adapt r from."
    r, why = adaptive_drop_rate(scores, p)
    return replace(p, drop_rate=r), why
