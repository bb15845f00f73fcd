"""What a benchmark runs: method names, inputs and settings.

A method is ``vanilla``, a pruning method of :data:`specvlm.config.PRUNE_METHODS` (run
speculatively with the pair's draft), the same with the :data:`SELF` suffix (the target drafts
for itself: Self-SD), or a Hugging Face peer of :data:`PEERS`.

Source: SpecVLM (arXiv 2508.16201) Sec. 4 (methods compared, Std-SD and Self-SD).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from specvlm.config import DECODE_METHODS, PRUNE_METHODS, DecodeConfig
from specvlm.types import VideoClip

PEERS = ("hf", "hf-assisted", "prompt-lookup")
"""Hugging Face peers: greedy ``generate()``, assisted generation with our draft, prompt lookup."""
SELF = ":self"
"""Suffix that runs a speculative method with the target as its own draft (Self-SD)."""
DEFAULT_METHODS = ("vanilla", "none", "random", "uniform", "frame", "attention", "specvlm", "specvlm:self",
                   "hf", "hf-assisted", "prompt-lookup")
LABELS = {"vanilla": "vanilla (ours)", "none": "SD-Tree", "random": "SD-Rand", "specvlm": "SpecVLM",
          "hf": "model.generate() (HF, the paper's baseline)", "hf-assisted": "HF assisted",
          "prompt-lookup": "HF prompt lookup"}
"""Row labels. Every speedup is over our vanilla (:func:`specvlm.config.vanilla_config`); Hugging Face's
plain ``model.generate()``, the baseline the paper's speedups are stated over, has its own row."""


class BenchError(ValueError):
    """Bad benchmark settings (unknown method, no inputs, ...); the message says what to change."""


@dataclass
class BenchInput:
    """One benchmark input.

    Attributes:
        name: display name (file name, ``synthetic-4096``, dataset sample id).
        clip: sampled frames.
        prompt: user text.
        reference: reference answer (datasets), or None.
        sweep: True for inputs of a length sweep.
    """

    name: str
    clip: VideoClip
    prompt: str
    reference: str | None = None
    sweep: bool = False


@dataclass
class BenchSettings:
    """How to benchmark.

    Attributes:
        methods: method names: ``vanilla``, a pruning method (speculative), a pruning method +
            ``:self`` (Self-SD with the target's weights), or a peer in :data:`PEERS`.
        config: base decoding settings (pruning, tree, budget, stop_at_eos); ``method`` is replaced.
        repeats: measured rounds per input (>= 1).
        warmup: unmeasured rounds per input before them (>= 0).
        prompt_lookup_tokens: ``prompt_lookup_num_tokens`` for the prompt-lookup peer.
        step_costs: also time isolated verify forwards of 1..``VERIFY_GOAL_TOKENS`` + 1 tokens
            against a decode step on the target at the largest input's prompt length
            (:func:`specvlm.bench.stepcost.verify_cost_curve`; the verify goal is checked on it).
        background_load: busy worker processes run during the warm-up and timed rounds
            (:class:`specvlm.bench.load.BackgroundLoad`); 0 = none.
        host_reads: count each method's host reads per decode step in one extra untimed run after the
            warm-up (:mod:`specvlm.bench.hostreads`).

    Raises:
        BenchError: unknown method or bad counts (from :meth:`validate`).
    """

    methods: tuple[str, ...] = DEFAULT_METHODS
    config: DecodeConfig = field(default_factory=lambda: DecodeConfig(max_new_tokens=128))
    repeats: int = 3
    warmup: int = 1
    prompt_lookup_tokens: int = 10
    step_costs: bool = True
    background_load: int = 0
    host_reads: bool = True

    def validate(self) -> None:
        """Raise :class:`BenchError` for unknown methods or counts out of range."""
        for m in self.methods:
            ok = m in PEERS or m in DECODE_METHODS or (m.endswith(SELF) and base_method(m) in PRUNE_METHODS)
            if not ok:
                raise BenchError(f"method {m!r} is unknown: use vanilla, one of {', '.join(PRUNE_METHODS)} "
                                 f"(optionally with {SELF} for Self-SD), or a peer: {', '.join(PEERS)}.")
        if self.repeats < 1 or self.warmup < 0:
            raise BenchError(f"repeats={self.repeats} and warmup={self.warmup}: use repeats >= 1, warmup >= 0.")
        if self.background_load < 0:
            raise BenchError(f"background_load={self.background_load}: give 0 (none) or more busy worker processes.")


def base_method(method: str) -> str:
    """The method without its :data:`SELF` suffix (``specvlm:self`` -> ``specvlm``)."""
    return method[: -len(SELF)] if method.endswith(SELF) else method


def parse_methods(text: str) -> tuple[str, ...]:
    """Comma list -> method tuple with ``vanilla`` first (speedups need it); ``all`` = defaults.

    Raises:
        BenchError: an unknown method, or an empty list.
    """
    items = [m.strip() for m in text.split(",") if m.strip()]
    if not items:
        raise BenchError(f"--methods {text!r} names no method: give a comma list (e.g. specvlm,none) or 'all'.")
    if items == ["all"]:
        items = list(DEFAULT_METHODS)
    out = ["vanilla"] + [m for m in dict.fromkeys(items) if m != "vanilla"]
    BenchSettings(methods=tuple(out)).validate()
    return tuple(out)


def parse_int_list(text: str) -> list[int]:
    """``"1024,2048"`` -> [1024, 2048]; raises BenchError on non-positive or non-integer items."""
    try:
        vals = [int(x) for x in text.split(",") if x.strip()]
    except ValueError as exc:
        raise BenchError(f"{text!r} is not a comma-separated list of integers.") from exc
    if not vals or min(vals) < 1:
        raise BenchError(f"{text!r}: give positive integers, e.g. 1024,2048,4096.")
    return vals


def drop_redundant_self(methods: Sequence[str], self_sd: bool) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Drop ``X:self`` methods that would repeat ``X`` on a pair that is already Self-SD.

    Returns:
        (the methods kept, in order; the ``:self`` methods dropped). Nothing is dropped for a
        Std-SD pair, or where ``X`` itself is not listed.
    """
    if not self_sd:
        return tuple(methods), ()
    dropped = tuple(m for m in methods if m.endswith(SELF) and m[:-len(SELF)] in methods)
    return tuple(m for m in methods if m not in dropped), dropped
