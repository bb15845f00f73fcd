"""Beyond the paper: the draft's video budget and its video tokens follow the clip and the generation.

Two pure rules over attention rows:

* :func:`adaptive_drop_rate`: r per clip from the target's Stage I scores. A clip whose attention sits
  on a few tokens gets a high r (a small draft budget); one whose attention is spread (an
  information-dense video) gets a lower r, within [r_min, r_max].
* :func:`reselect_tokens`: after a verify step, which video tokens the draft lacks should enter its
  cache, from the target's attention at the position that chose the next token (optionally with the
  same cell in neighbouring frame groups, :func:`track_cells`).

Neither changes the output: the target verifies every drafted token (docs/design.md §4.9).

Source: SpecVLM (Ji et al., EMNLP 2025, arXiv 2508.16201) Sec. 3.2 (verifier attention as importance)
and its failure analysis (pruning loses what the generation later turns to); docs/design.md §4.2-4.3.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from specvlm.config import PruneConfig, ReselectConfig


def adaptive_drop_rate(scores: torch.Tensor, config: PruneConfig) -> tuple[float, str]:
    """The drop rate r for one clip: keep the fewest most-attended video tokens holding ``r_mass`` of the
    target's Stage I attention, r = 1 - kept / V, bounded to [``r_min``, ``r_max``].

    Args:
        scores: float (V,) text-to-video attention scores (:attr:`specvlm.types.PruneResult.scores`).
        config: the pruning settings (``r_mass``, ``r_min``, ``r_max``).

    Returns:
        (r in [r_min, r_max], one sentence saying why). All-zero scores carry no signal: r = r_max.

    Source: SpecVLM Sec. 3.2 (Stage I top-p over the verifier's attention), applied to the budget itself.
    """
    s = scores.detach().float().cpu().clamp(min=0).reshape(-1)
    V, total = int(s.numel()), float(s.sum())
    if V == 0 or total <= 0:
        return float(config.r_max), f"the attention scores carry no signal, so r = r_max = {config.r_max:g}."
    cum = torch.cumsum(torch.sort(s, descending=True).values, 0)
    need = int(torch.searchsorted(cum, torch.tensor(config.r_mass * total * (1 - 1e-6)))) + 1
    raw = 1.0 - min(need, V) / V
    r = min(max(raw, config.r_min), config.r_max)
    bound = " (bounded to r_max)" if raw > config.r_max else " (bounded to r_min)" if raw < config.r_min else ""
    return float(r), (f"{min(need, V)} of {V} video tokens ({min(need, V) / V:.1%}) hold {config.r_mass:.0%} of the "
                      f"target's attention, so r = {r:.3f}{bound}.")


@dataclass(frozen=True)
class Reselection:
    """What one verify step's attention says about the draft's video tokens.

    Attributes:
        unseen_share: share of the video attention row on tokens the draft lacks, in [0, 1].
        added: int64 (A,) sorted video-token indices to add (empty when the share is not above
            ``min_share`` or the budget is spent).

    Source: :func:`reselect_tokens`.
    """

    unseen_share: float
    added: torch.Tensor


def reselect_tokens(video_row: torch.Tensor, held: torch.Tensor, config: ReselectConfig,
                    budget_left: int, token_grid: torch.Tensor | None = None) -> Reselection:
    """The most attended video tokens the draft lacks, when enough attention falls on them.

    Args:
        video_row: float (V,) the target's attention from the measured position over the V video tokens
            (any scale; it is normalised here).
        held: bool (V,) video tokens already in the draft's cache.
        config: ``min_share``, ``step_tokens`` and ``track``.
        budget_left: tokens the request may still add (``total_tokens`` minus those added so far).
        token_grid: int (V, 3) (frame group, row, col) of each video token, for ``track`` (None = no track).

    Returns:
        :class:`Reselection`: the unseen share, and up to min(step_tokens, budget_left) indices of
        unheld tokens, sorted ascending: the most attended ones with positive attention, each followed by
        its cell in up to ``track`` frame groups either side (nearest first) while the budget lasts.

    Source: SpecVLM Sec. 3.2 (the verifier's attention as importance), re-applied during decoding.
    """
    row = video_row.detach().float().cpu().clamp(min=0).reshape(-1)
    lack = ~held.cpu().reshape(-1)
    total = float(row.sum())
    share = float(row[lack].sum()) / total if total > 0 else 0.0
    w = torch.where(lack, row, torch.full_like(row, -1.0))
    order = torch.argsort(w, descending=True, stable=True)
    return pick_unseen(share, order[w[order] > 0], lack, config, budget_left, token_grid)


def pick_unseen(share: float, order: torch.Tensor, lack: torch.Tensor, config: ReselectConfig, budget_left: int,
                token_grid: torch.Tensor | None = None) -> Reselection:
    """:func:`reselect_tokens` from its ranking: the tokens to add given the unseen share and the candidates.

    Args:
        share: the row's share on tokens the draft lacks, in [0, 1].
        order: int64 (C,) unheld video tokens with positive attention, most attended first (ties by index);
            at least min(step_tokens, budget_left) of them when there are that many, twice that with ``track``.
        lack: bool (V,) tokens the draft lacks; config, budget_left, token_grid: as :func:`reselect_tokens`.

    Returns:
        :class:`Reselection` as :func:`reselect_tokens`.

    Source: SpecVLM Sec. 3.2 (the verifier's attention as importance), re-applied during decoding.
    """
    n = min(int(config.step_tokens), int(budget_left), int(lack.sum()))
    if share <= config.min_share or n <= 0:
        return Reselection(share, torch.empty(0, dtype=torch.long))
    order = order.cpu().long()
    if config.track == 0 or token_grid is None:
        return Reselection(share, torch.sort(order[:n]).values)
    return Reselection(share, track_cells(order, lack.cpu(), token_grid, config.track, n))


def track_cells(order: torch.Tensor, lack: torch.Tensor, token_grid: torch.Tensor, track: int,
                n: int) -> torch.Tensor:
    """Up to ``n`` tokens: each of ``order`` in turn, then its grid cell in the frame groups 1..``track``
    before and after it (nearest first), keeping only tokens in ``lack`` and each once (:func:`track_picks`).

    Args:
        order: int64 (C,) candidate video tokens, most wanted first; lack: bool (V,) tokens that may be added.
        token_grid: int (V, 3) (frame group, row, col); track: frame groups either side; n: most tokens.

    Returns:
        int64 (<= n,) sorted ascending.

    Source: the draft's missing objects persist across frames (a picked cell's track).
    """
    cells = {tuple(c): i for i, c in enumerate(torch.as_tensor(token_grid).long().reshape(-1, 3).tolist())}
    held = [not x for x in lack.cpu().tolist()]
    return torch.tensor(track_picks(order.tolist(), held, cells, track, n), dtype=torch.long)


def track_picks(order: list[int], held: list[bool], cells: dict[tuple[int, int, int], int], track: int,
                n: int) -> list[int]:
    """:func:`track_cells` over plain lists (no tensor is read: the decode loop calls it between steps).

    Args:
        order: candidates, most wanted first; held: per video token, whether the draft holds it;
        cells: (frame group, row, col) -> video token; track: frame groups either side; n: most tokens.

    Returns:
        ascending token indices.

    Source: the draft's missing objects persist across frames (a picked cell's track).
    """
    where = {i: cell for cell, i in cells.items()}
    taken: set[int] = set()
    for i in order:
        t, r, col = where[i]
        for j in [i] + [cells.get((t + s * d, r, col), -1) for d in range(1, track + 1) for s in (-1, 1)]:
            if j >= 0 and not held[j] and j not in taken and len(taken) < n:
                taken.add(j)
        if len(taken) >= n:
            break
    return sorted(taken)
