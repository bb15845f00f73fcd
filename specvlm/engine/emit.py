"""Tokens to events: the emitter (EOS, the budget, text pieces), the picker (argmax or a seeded draw) and
the prefill's token.

The vanilla and the speculative loop (:mod:`specvlm.engine.loop`) emit tokens, stop at EOS / the budget and
decode text through one :class:`Emitter`, so their events agree.

Source: docs/design.md §4.10 (stop at the first EOS, never exceed max_new_tokens) and §4.12.
"""
from __future__ import annotations

import time

import torch

from specvlm.config import DecodeConfig, SamplingConfig
from specvlm.engine.measures import logit_margin
from specvlm.models.pair import ModelPair
from specvlm.spec.sampling import make_generator, process_logits, sample
from specvlm.types import StepEvent


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
