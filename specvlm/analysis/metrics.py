"""Decoding metrics: the decode speedup, first divergence and its cause, peak memory; a run's summary (tokens/s, τ, tokens per target
forward), the timer and the logit margin are :mod:`specvlm.engine.measures`' (re-exported here).

Source: docs/design.md §4.11-4.12; SpecVLM (arXiv 2508.16201) Sec. 4 for τ excluding the bonus token.
"""
from __future__ import annotations

import math
import resource
import statistics
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

import torch

from specvlm.dtypes import NEAR_TIE_MARGIN, dtype_name
# The engine's own measures (it records them while decoding), importable from here as well.
from specvlm.engine.measures import (RunSummary, Timer, is_cuda, logit_margin, summarize, tau,  # noqa: F401
                                     tokens_per_second, tokens_per_target_forward)


def speedup(vanilla_s: float, method_s: float, *, vanilla_tokens: int | None = None,
            method_tokens: int | None = None) -> float | None:
    """The decode speedup of a method over vanilla decoding on the same input: vanilla decode time over
    the method's, per decoded token when the token counts are given (so two runs that generated different
    lengths, e.g. sampled ones, compare their tokens/s; equal lengths give the plain time ratio).

    This is the one speedup definition of the library, the CLI, the benchmark and the app; repeated
    timings of the same input report the median of the per-pair values (:func:`median_speedup`).

    Args:
        vanilla_s: vanilla decode time (s), prefill excluded.
        method_s: the method's decode time (s), prefill excluded.
        vanilla_tokens, method_tokens: tokens each run generated, the prefill's token included
            (:func:`tokens_per_second`); None (both) = the same length.

    Returns:
        The ratio (x), or None when either run decoded nothing.

    Source: docs/design.md §4.12 (speedup = vanilla decode time / method decode time on the same input).
    """
    if vanilla_tokens is None or method_tokens is None:
        return vanilla_s / method_s if vanilla_s > 0 and method_s > 0 else None
    van, meth = tokens_per_second(vanilla_tokens, vanilla_s), tokens_per_second(method_tokens, method_s)
    return meth / van if van > 0 and meth > 0 else None


def median_speedup(speedups: Iterable[float | None]) -> float | None:
    """The median of the known per-pair speedups of repeated, interleaved timings (None when none is known).

    Source: docs/design.md §4.12; a median over pairs resists a shared machine's outliers.
    """
    known = [float(s) for s in speedups if s is not None]
    return statistics.median(known) if known else None


def first_divergence(a: Sequence[int], b: Sequence[int]) -> int | None:
    """Index of the first token where two generations differ.

    Args:
        a: token ids of one generation.
        b: token ids of the other.

    Returns:
        The first index i with a[i] != b[i]; if one is a strict prefix of the
        other, the shorter length; None if identical.

    Source: docs/design.md §4.11 (report the first divergence honestly).
    """
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    if len(a) != len(b):
        return min(len(a), len(b))
    return None


DivergenceKind = Literal["identical", "near-tie", "mismatch"]


@dataclass(frozen=True)
class Divergence:
    """How a speculative output compares with the vanilla output of the same request.

    Attributes:
        identical: True when the token ids are equal.
        index: the first differing token (the shorter length when one is a prefix of the other), or None.
        margin: the target's top-1 minus top-2 logit margin at ``index`` as vanilla decoding saw it
            (logit units), or None (identical, or vanilla has no token there).
        kind: ``identical``; ``near-tie`` (margin below the dtype's threshold: rounding in batched
            verification may flip it); or ``mismatch`` (a real difference: a bug).
        threshold: the near-tie threshold used (logit units), or None when identical.
    """

    identical: bool
    index: int | None
    margin: float | None
    kind: DivergenceKind
    threshold: float | None = None

    def describe(self) -> str:
        """One line for a summary, e.g. ``near-tie at token 12 (margin 0.031 < 0.5)``."""
        if self.identical:
            return "identical"
        m = "no vanilla margin" if self.margin is None else f"margin {self.margin:.3g}"
        rel = "" if self.margin is None else (" < " if self.kind == "near-tie" else " >= ") + f"{self.threshold:g}"
        return f"{self.kind} at token {self.index} ({m}{rel})"

    def to_dict(self) -> dict:
        """Plain JSON-ready fields (identical, index, margin, kind, threshold)."""
        return {"identical": self.identical, "index": self.index, "margin": self.margin, "kind": self.kind,
                "threshold": self.threshold}


def near_tie_threshold(dtype: torch.dtype | str) -> float:
    """The near-tie threshold for a model dtype (see :func:`compare_outputs`).

    Args:
        dtype: a torch dtype or its name (``float32``, ``bfloat16``, ``float16``, ``fp32``, ...).

    Returns:
        Threshold in logit units.

    Raises:
        ConfigError: a dtype other than float32, bfloat16 or float16 (:func:`specvlm.dtypes.dtype_name`).
    """
    return NEAR_TIE_MARGIN[dtype_name(dtype)]


def compare_outputs(vanilla_ids: Sequence[int], spec_ids: Sequence[int], margins: Sequence[float],
                    dtype: torch.dtype | str) -> Divergence:
    """Compare a greedy speculative output with vanilla output; classify the first divergence.

    Speculative decoding verifies many tokens in one batched forward, vanilla one token per
    forward. Both compute the same function, but kernels for different shapes sum in a different
    order, so the target's logits differ by rounding. Where the target's best two tokens are
    closer than that noise, either may win: a divergence there is a *near-tie* (allowed); anywhere
    else it is a *mismatch* (a bug, e.g. in positions, masks or the KV commit).

    Thresholds (:data:`specvlm.dtypes.NEAR_TIE_MARGIN`, logit units), for logits of magnitude
    |z| <= 32 (typical of these models' top tokens) after tens of layers:

    * float32: 1e-3. One ulp at |z| = 32 is 2**-18 = 3.8e-6; differently ordered sums over a
      hidden size d accumulate ~sqrt(d) ulps per layer, which stays around 1e-5 to 1e-4 for 8k
      hidden sizes and 80 layers. 1e-3 sits above that with room to spare and is far below the
      margins a real bug produces (order 1), so float32 outputs are expected to be identical.
    * float16: 0.125 = eight ulps at |z| in [16, 32) (ulp 2**-6); intermediate activations carry
      10 mantissa bits, so layer-to-layer drift of a few ulps of the logits is common.
    * bfloat16: 0.5 = four ulps at |z| in [16, 32) (ulp 2**-3): with 8 mantissa bits the logits
      themselves are rounded in steps of 0.125 there, and hidden-state rounding through the
      layers moves them by a few steps between batched and single-token kernels.

    Args:
        vanilla_ids: token ids of greedy vanilla decoding.
        spec_ids: token ids of greedy speculative decoding on the same request.
        margins: per vanilla token, the target's top-1 minus top-2 logit margin
            (``DecodeResult.margins`` of the vanilla run; ``StepEvent.margin`` per event).
        dtype: the target model's dtype (torch dtype or name).

    Returns:
        Divergence. Where vanilla has no token (or no margin) at the divergence, the margin is None
        and the kind is ``mismatch``: nothing shows the target was undecided there.

    Raises:
        ValueError: unsupported dtype.

    Source: docs/design.md §4.11 (lossless: report the first divergence honestly).
    """
    threshold = near_tie_threshold(dtype)
    index = first_divergence(vanilla_ids, spec_ids)
    if index is None:
        return Divergence(True, None, None, "identical")
    margin = None
    if index < min(len(vanilla_ids), len(margins)):
        margin = float(margins[index])
    tie = margin is not None and math.isfinite(margin) and margin < threshold
    return Divergence(False, index, margin, "near-tie" if tie else "mismatch", threshold)


def peak_memory_mb(device: torch.device | str | None = None) -> float:
    """Peak memory in MiB (2**20 bytes).

    Args:
        device: a CUDA device for ``torch.cuda.max_memory_allocated`` (tensors
            allocated by torch since the last peak reset); anything else gives
            the process's resident-set high-water mark (``ru_maxrss``, whole
            process lifetime, KiB on Linux, bytes on macOS).

    Returns:
        Peak memory in MiB.

    Source: docs/design.md §4.12.
    """
    if is_cuda(device):
        return torch.cuda.max_memory_allocated(device) / 2**20
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    scale = 1 if sys.platform == "darwin" else 1024
    return rss * scale / 2**20
