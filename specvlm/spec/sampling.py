"""Lossless sampling: logits processing, sampling and speculative verification that keeps
the target distribution exactly (docs/design.md §4.11).

Pure functions over tensors. All randomness comes from one ``torch.Generator`` per request
(:func:`make_generator`), consumed in a fixed order, so the same seed, method and settings give
the same output. Every random number is a single uniform ``u ~ U[0, 1)`` drawn with
``torch.rand((), generator=g, device=g.device)``: the probabilities may live on any device.

The sampled trees and their recursive rejection sampling run on the device
(:mod:`specvlm.spec.devicesampled`, :mod:`specvlm.spec.deviceaccept`) with the same
:func:`process_logits`.

Source: Leviathan et al. 2023 ("Fast Inference from Transformers via Speculative Decoding");
Chen et al. 2023 ("Accelerating LLM Decoding with Speculative Sampling"); Jeon et al. 2024
("Recursive Speculative Decoding: Accelerating LLM Inference via Sampling Without
Replacement"); Holtzman et al. 2020 (nucleus sampling); docs/design.md §4.8-4.11.
"""
from __future__ import annotations

import torch

from specvlm.config import SamplingConfig


# --------------------------------------------------------------------------- config
def make_generator(cfg: SamplingConfig | int, device: torch.device | str = "cpu") -> torch.Generator:
    """A fresh generator seeded with ``cfg.seed`` (or an int seed); one per request."""
    seed = cfg if isinstance(cfg, int) else cfg.seed
    g = torch.Generator(device=device)
    g.manual_seed(int(seed))
    return g


# --------------------------------------------------------------------------- logits -> probs
def process_logits(logits: torch.Tensor, cfg: SamplingConfig) -> torch.Tensor:
    """Temperature, then nucleus (top-p) filtering, renormalised.

    The one processing used by vanilla sampling, by the target in verification and (with the
    draft's config) by the draft. Log-probabilities are valid input (``log_softmax`` only shifts
    each row by a constant, which neither step sees).

    Args:
        logits: float (..., V) logits or log-probs; ``-inf`` entries are allowed.
        cfg: temperature (0 = one-hot argmax, first index on ties) and ``top_p_sampling``.

    Returns:
        float32 (..., V) probabilities summing to 1 per row. Nucleus keeps, per row, the
        smallest set of most probable tokens whose mass is >= ``top_p_sampling`` (sorted
        descending, a token is kept iff the mass strictly before it is < top_p; ties broken
        by lower token id first).

    Source: Holtzman et al. 2020 (nucleus sampling), Sec. 3.1.
    """
    x = logits.float()
    if cfg.greedy:
        return torch.zeros_like(x).scatter_(-1, x.argmax(-1, keepdim=True), 1.0)
    probs = torch.softmax(x / float(cfg.temperature), dim=-1)
    if cfg.top_p_sampling >= 1.0:
        return probs
    sp, idx = torch.sort(probs, dim=-1, descending=True, stable=True)
    before = sp.cumsum(-1) - sp
    keep_sorted = before < cfg.top_p_sampling
    keep_sorted[..., 0] = True
    keep = torch.zeros_like(keep_sorted).scatter_(-1, idx, keep_sorted)
    probs = probs * keep
    return probs / probs.sum(-1, keepdim=True)


# --------------------------------------------------------------------------- sampling
def _uniform(generator: torch.Generator) -> float:
    """One float in [0, 1) from ``generator`` (drawn on the generator's device)."""
    return float(torch.rand((), generator=generator, device=generator.device))


def sample(probs: torch.Tensor, generator: torch.Generator) -> int:
    """One token from a categorical distribution by inverse CDF (one uniform per call).

    Args:
        probs: float (V,) non-negative weights (normalisation not required), any device.
        generator: the request's generator.

    Returns:
        Token id with probability probs[i] / sum(probs); never a zero-weight token.
    """
    p = probs.float()
    c = p.cumsum(-1)
    i = int(torch.searchsorted(c, c[-1:] * _uniform(generator), right=True))
    # right=True never lands on a zero-weight token (its CDF equals its predecessor's), except
    # past the end when u * total rounds onto the last CDF value.
    if i >= p.numel():
        i = int(torch.nonzero(p > 0)[-1])
    return i
