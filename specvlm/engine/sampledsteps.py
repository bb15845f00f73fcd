"""The sampled (temperature > 0) parts of the static steps: noise buffers, sampled trees, rejection sampling.

Randomness enters the fixed-shape steps as uniform noise in state buffers that the decode loop refills
from the request's device generator before each step (:func:`refresh`), outside any captured graph;
the steps themselves draw nothing. Children are drawn without replacement by Gumbel-top-k
(:mod:`specvlm.spec.devicesampled`) and verified by recursive rejection sampling
(:func:`specvlm.spec.deviceaccept.sampled_accept`), so the output keeps the target's distribution.

Source: Jeon et al. 2024, "Recursive Speculative Decoding"; Kool et al. 2019 (Gumbel-top-k);
Leviathan et al. 2023 (speculative sampling); docs/design.md §4.11.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from specvlm.config import SamplingConfig, TreeConfig
from specvlm.spec.deviceaccept import sample_token, sampled_accept
from specvlm.spec.devicesampled import (dynamic_noise_shape, sampled_dynamic_tree, sampled_static_tree,
                                        static_noise_shape)
from specvlm.spec.devicestatic import StaticPlan
from specvlm.spec.devicetree import DeviceFeed, DeviceTree
from specvlm.spec.sampling import process_logits


@dataclass(frozen=True)
class SampledShape:
    """What a sampled tree's fixed shape adds: the sampling settings and the noise shapes.

    Attributes:
        sampling: temperature / nucleus (:class:`specvlm.config.SamplingConfig`, temperature > 0).
        tree_noise: shape of the drafting noise; accept_noise: (D + 1, most children + 1).
        nodes: N, nodes every step verifies; drafted: nodes drafted before compaction.

    Source: Jeon et al. 2024 (Recursive Speculative Decoding); Kool et al. 2019 (Gumbel-top-k); docs/design.md §4.11.
    """

    sampling: SamplingConfig
    tree_noise: tuple[int, ...]
    accept_noise: tuple[int, int]
    nodes: int
    drafted: int


def sampled_shape(config: TreeConfig, sampling: SamplingConfig, vocab: int, plan: StaticPlan | None,
                  depth: int) -> SampledShape:
    """The noise shapes and node counts of ``config``'s sampled trees over a draft vocabulary of ``vocab``.

    A chain is the dynamic tree with one child per node (as the host's sampled drafter builds it).

    Source: Jeon et al. 2024 (Recursive Speculative Decoding); Kool et al. 2019 (Gumbel-top-k); docs/design.md §4.11.
    """
    if plan is not None:
        n = int(plan.parents.shape[0])
        kids = int(torch.bincount(plan.parents + 1).max())
        return SampledShape(sampling, static_noise_shape(plan, vocab), (depth + 1, kids + 1), n, n)
    top_k, total = _dynamic(config)
    noise = dynamic_noise_shape(depth, top_k, total, vocab)
    width = min(top_k, total, vocab)
    return SampledShape(sampling, noise, (depth + 1, width + 1), min(total, depth * width), depth * width)


def _dynamic(config: TreeConfig) -> tuple[int, int]:
    """(top_k, total_tokens) of a dynamic tree or chain."""
    if config.shape == "chain":
        return 1, config.depth
    return config.top_k, config.total_tokens


@dataclass
class Noise:
    """Uniform noise buffers of one request, refilled before every step.

    Attributes:
        tree: float32 drafting noise; accept: float32 acceptance noise; token: float32 (1,) a vanilla draw.
        draft_probs: float32 (N + 1, Vd) the rows the last tree's children were drawn from.

    Source: Jeon et al. 2024 (Recursive Speculative Decoding); Kool et al. 2019 (Gumbel-top-k); docs/design.md §4.11.
    """

    tree: torch.Tensor
    accept: torch.Tensor
    token: torch.Tensor
    draft_probs: torch.Tensor


def new_noise(shape: SampledShape | None, vocab: int, device: torch.device) -> Noise:
    """Zeroed noise buffers (vanilla sampling: ``shape`` None, only ``token`` is used).

    Source: Jeon et al. 2024 (Recursive Speculative Decoding); Kool et al. 2019 (Gumbel-top-k); docs/design.md §4.11.
    """
    z = lambda *s: torch.zeros(*s, dtype=torch.float32, device=device)   # noqa: E731
    if shape is None:
        return Noise(z(1), z(1, 1), z(1), z(1, 1))
    return Noise(z(*shape.tree_noise), z(*shape.accept_noise), z(1), z(shape.nodes + 1, vocab))


def refresh(noise: Noise, generator: torch.Generator) -> None:
    """Fill the noise buffers with fresh uniforms in [0, 1) from ``generator`` (on the buffers' device).

    Source: Jeon et al. 2024 (Recursive Speculative Decoding); Kool et al. 2019 (Gumbel-top-k); docs/design.md §4.11.
    """
    for t in (noise.tree, noise.accept, noise.token):
        t.uniform_(0.0, 1.0, generator=generator)


def sample_from(logits: torch.Tensor, sampling: SamplingConfig, noise: Noise) -> torch.Tensor:
    """int64 (1,) a token drawn from the processed ``logits`` (V,) with ``noise.token``.

    Source: Jeon et al. 2024 (Recursive Speculative Decoding); Kool et al. 2019 (Gumbel-top-k); docs/design.md §4.11.
    """
    return sample_token(process_logits(logits, sampling), noise.token[0]).view(1)


def draft_sampled(root_logp: torch.Tensor, feed: DeviceFeed, config: TreeConfig, plan: StaticPlan | None,
                  shape: SampledShape, depth: int, noise: Noise) -> DeviceTree:
    """The sampled tree (children drawn without replacement); its draft rows go to ``noise.draft_probs``.

    Source: Jeon et al. 2024 (Recursive Speculative Decoding); Kool et al. 2019 (Gumbel-top-k); docs/design.md §4.11.
    """
    if plan is not None:
        out = sampled_static_tree(root_logp, feed, shape.sampling, plan, noise.tree)
    else:
        top_k, total = _dynamic(config)
        out = sampled_dynamic_tree(root_logp, feed, shape.sampling, depth, top_k, total, noise.tree, config.min_prob)
    noise.draft_probs.copy_(out.draft_probs)
    return out.tree


def accept_sampled(logits: torch.Tensor, tokens: torch.Tensor, parents: torch.Tensor, shape: SampledShape,
                   depth: int, noise: Noise) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Recursive rejection sampling of the verified tree: (path (D,), accepted count, bonus).

    Source: Jeon et al. 2024 (Recursive Speculative Decoding); Kool et al. 2019 (Gumbel-top-k); docs/design.md §4.11.
    """
    probs = process_logits(logits.float(), shape.sampling)
    kids = shape.accept_noise[1] - 1
    return sampled_accept(tokens, parents, probs, noise.draft_probs, noise.accept, depth, kids)
