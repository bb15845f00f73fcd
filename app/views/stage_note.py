"""What Stage I kept and why, in words, for the pages that show the Stage I / Stage II maps.

Stage I keeps the fewest most-attended video tokens whose text-to-video attention reaches λ of the total
(docs/design.md §4.4); Stage II fills the rest of the budget K evenly (§4.5). When the target's attention is
concentrated, a single token can hold λ on its own, so Stage I keeps one token and the maps are nearly all
Stage II: :func:`stage1_note` says so, with the numbers, next to the maps (the Compare tab's heatmap legend
and the Inspect tab's frame maps).

Source: SpecVLM (arXiv 2508.16201) Sec. 3.2 (two-stage pruning); docs/design.md §4.3-4.5.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

FEW_FRACTION = 0.1
"""Stage I holding at most this fraction of the kept tokens is called "almost nothing" on the page."""


@dataclass(frozen=True)
class StageSplit:
    """How a SpecVLM kept set divides between the two stages.

    Attributes:
        num_video_tokens: V.  num_kept: K.  stage1: k1, Stage I's tokens.  stage2: K - k1 (less forced tokens).
        stage1_share: share of the video attention (scores) that Stage I's tokens hold, in [0, 1].
        top_share: share held by the single most-attended token.
        capped: Stage I stopped at the budget K before its tokens reached λ.
    """

    num_video_tokens: int
    num_kept: int
    stage1: int
    stage2: int
    stage1_share: float
    top_share: float
    capped: bool


def stage_split(prune: Any, top_p: float | None = None) -> StageSplit | None:
    """The :class:`StageSplit` of a PruneResult, or None for a method without both stages or scores.

    Args:
        prune: a :class:`specvlm.types.PruneResult` (tensors or lists; ``scores`` float (V,)).
        top_p: λ of the run (None: unknown; ``capped`` is then judged by k1 == K only).

    Source: docs/design.md §4.4 (Stage I top-p), §4.5 (Stage II).
    """
    if prune is None or getattr(prune, "method", "") != "specvlm" or prune.scores is None:
        return None
    scores = np.asarray(prune.scores, np.float64).reshape(-1)
    s1 = np.asarray(prune.stage1, np.int64).reshape(-1)
    total = float(scores.sum())
    if total <= 0 or scores.size == 0:
        return None
    share = float(scores[s1].sum()) / total if s1.size else 0.0
    k = int(np.asarray(prune.keep).size)
    capped = s1.size >= k and (top_p is None or share < float(top_p))
    return StageSplit(int(scores.size), k, int(s1.size), int(np.asarray(prune.stage2).size), share,
                      float(scores.max()) / total, bool(capped))


def stage1_note(prune: Any, top_p: float | None = None) -> str:
    """One or two sentences on what Stage I kept and why ("" when :func:`stage_split` is None).

    Args:
        prune: the run's PruneResult.
        top_p: λ of the run (None: named as λ without its value).

    Returns:
        Plain text (no markup); it starts "Stage I kept almost nothing" when Stage I holds at most
        :data:`FEW_FRACTION` of the kept tokens.

    Source: SpecVLM (arXiv 2508.16201) Sec. 3.2; docs/design.md §4.4-4.5.
    """
    sp = stage_split(prune, top_p)
    if sp is None:
        return ""
    lam = "λ" if top_p is None else f"λ = {float(top_p):g}"
    tok = "token" if sp.stage1 == 1 else "tokens"
    if sp.capped:
        why = (f"its {sp.stage1} most-attended {tok} fill the whole budget of {sp.num_kept} before reaching {lam} "
               f"of the attention (they hold {sp.stage1_share:.0%})")
    else:
        who = "the most-attended video token alone holds" if sp.stage1 == 1 else \
            f"the {sp.stage1} most-attended video tokens together hold"
        why = (f"{who} {sp.stage1_share:.0%} of the target's text-to-video attention, which reaches {lam} "
               "(Stage I keeps the fewest top tokens that do)")
    head = ("Stage I kept almost nothing" if sp.stage1 <= FEW_FRACTION * sp.num_kept
            else f"Stage I kept {sp.stage1} of the {sp.num_kept} kept tokens")
    fill = (f"; Stage II filled the other {sp.stage2} evenly across the frames, so the maps are mostly Stage II."
            if sp.stage2 else ".")
    return f"{head}: {sp.stage1} {tok} of {sp.num_video_tokens}, because {why}{fill}"
