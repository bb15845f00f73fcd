"""Video-token pruning for the draft: SpecVLM's two stages and the baselines.

Pure functions over tensors: attention scores (V,) in, sorted kept indices out.
Every method keeps exactly K = max(1, floor(V * (1 - r))) of the V video tokens
(``none`` keeps all V). Results are CPU int64 whatever the scores' device.

Source: SpecVLM (Ji et al., EMNLP 2025, arXiv 2508.16201) Sec. 3.2; docs/design.md §4.3-4.6.
"""
from __future__ import annotations

import math

import torch

from specvlm.config import PRUNE_METHODS, ConfigError, PruneConfig
from specvlm.types import PruneResult

SCORE_METHODS = ("specvlm", "attention")
"""Methods that read the verifier's attention scores (they have a Stage I)."""

_TOP_P_RTOL = 1e-6
"""Relative slack on the Stage I threshold so float32 sums that equal λ·total on paper count as reaching it."""

_EMPTY = torch.empty(0, dtype=torch.long)


def kept_count(num_video_tokens: int, drop_rate: float) -> int:
    """Budget K of kept video tokens.

    Args:
        num_video_tokens: V >= 1.
        drop_rate: r in [0, 1), the share of video tokens dropped.

    Returns:
        K = max(1, floor(V * (1 - r))). A 1e-9 slack absorbs float error, so
        V=100, r=0.9 gives exactly 10 (plain float math gives 9.999... -> 9).

    Raises:
        ValueError: V < 1.
        ConfigError: r outside [0, 1).

    Source: docs/design.md §4.3.
    """
    if int(num_video_tokens) < 1:
        raise ValueError(f"num_video_tokens={num_video_tokens!r}: need at least 1 video token.")
    if not (0.0 <= float(drop_rate) < 1.0):
        raise ConfigError(f"drop_rate={drop_rate!r} is out of range: use a value in [0, 1).")
    k = math.floor(int(num_video_tokens) * (1.0 - float(drop_rate)) + 1e-9)
    return max(1, min(int(num_video_tokens), k))


def stage1_top_p(scores: torch.Tensor, budget: int, top_p: float) -> torch.Tensor:
    """Stage I: verifier-guided top-p retention.

    Sorts scores descending (stable: ties go to the lower index) and keeps the
    smallest count k1 whose cumulative sum reaches λ · sum(scores), then clamps
    k1 to the budget K. λ = 0 keeps nothing; all-zero scores keep nothing (no
    signal, so Stage II fills the budget uniformly). The comparison allows a
    relative slack of 1e-6 of the total for float error.

    Args:
        scores: float (V,), non-negative, finite; any device.
        budget: K, the most tokens Stage I may keep (>= 0).
        top_p: λ in [0, 1], the share of total attention mass to cover.

    Returns:
        int64 (k1,) on CPU, sorted ascending, unique, k1 <= min(K, V).

    Raises:
        ValueError: scores not 1-D, empty, non-finite or negative; budget < 0.
        ConfigError: λ outside [0, 1].

    Source: paper Sec. 3.2 (Stage I); docs/design.md §4.4.
    """
    s = _check_scores(scores)
    if (s < 0).any():
        raise ValueError("scores must be non-negative for Stage I top-p retention.")
    if int(budget) < 0:
        raise ValueError(f"budget={budget!r}: must be >= 0.")
    if not (0.0 <= float(top_p) <= 1.0):
        raise ConfigError(f"top_p={top_p!r} is out of range: use a value in [0, 1].")
    order = torch.sort(s, descending=True, stable=True).indices
    cumsum = torch.cumsum(s[order], dim=0)
    total = float(cumsum[-1])
    threshold = float(top_p) * total - _TOP_P_RTOL * total
    if float(top_p) == 0.0 or total <= 0.0:
        k1 = 0
    else:
        k1 = min(int((cumsum < threshold).sum()) + 1, s.numel())
    k1 = min(k1, int(budget))
    return torch.sort(order[:k1]).values


def stage2_uniform(num_video_tokens: int, exclude: torch.Tensor | None, count: int) -> torch.Tensor:
    """Stage II: spatially uniform picks among the tokens Stage I did not keep.

    The M leftovers are taken in original order (frame-major, then raster) and
    entry floor(linspace(0, M-1, count))[i] = floor(i * (M-1) / (count-1)) is
    kept, computed in exact integer arithmetic. count = 1 keeps the first
    leftover; count = 0 keeps nothing. Picks are distinct because count <= M.

    Args:
        num_video_tokens: V >= 1.
        exclude: int (E,) indices in [0, V) already kept (duplicates allowed), or None.
        count: K - k1, the number of tokens to add, 0 <= count <= M.

    Returns:
        int64 (count,) on CPU, sorted ascending, unique, disjoint from ``exclude``.

    Raises:
        ValueError: V < 1, ``exclude`` out of range, or count outside [0, M].

    Source: paper Sec. 3.2 (Stage II); docs/design.md §4.5.
    """
    v = int(num_video_tokens)
    if v < 1:
        raise ValueError(f"num_video_tokens={num_video_tokens!r}: need at least 1 video token.")
    mask = torch.ones(v, dtype=torch.bool)
    if exclude is not None and exclude.numel() > 0:
        ex = exclude.detach().to("cpu", torch.long).reshape(-1)
        if int(ex.min()) < 0 or int(ex.max()) >= v:
            raise ValueError(f"exclude holds indices outside [0, {v}).")
        mask[ex] = False
    leftovers = torch.nonzero(mask).reshape(-1)
    m = int(leftovers.numel())
    if not (0 <= int(count) <= m):
        raise ValueError(f"count={count!r}: must be in [0, {m}] (the tokens left after exclusion).")
    if int(count) == 0:
        return _EMPTY.clone()
    if int(count) == 1:
        return leftovers[:1].clone()
    positions = torch.arange(int(count), dtype=torch.long) * (m - 1) // (int(count) - 1)
    return leftovers[positions]


def select_video_tokens(
    scores: torch.Tensor | None,
    method: str,
    drop_rate: float,
    top_p: float,
    grid: torch.Tensor | None = None,
    seed: int = 0,
    *,
    num_video_tokens: int | None = None,
    force_keep: torch.Tensor | None = None,
) -> PruneResult:
    """Choose which video tokens the draft sees.

    Methods (each keeps exactly K; ``none`` keeps K = V whatever r is):
    ``specvlm`` Stage I top-p then Stage II uniform; ``attention`` top-K by score
    (ties to the lower index); ``random`` K without replacement from a
    ``torch.Generator`` seeded with ``seed``; ``uniform`` floor(linspace(0, V-1, K));
    ``window-front|middle|end`` the contiguous block [s, s+K) with s = 0,
    (V-K)//2, V-K; ``frame`` whole frames at even spacing, see :func:`_frame_keep`.

    Args:
        scores: float (V,) text-to-video attention scores, any device; required
            for ``specvlm`` and ``attention``, optional otherwise.
        method: one of :data:`specvlm.config.PRUNE_METHODS`.
        drop_rate: r in [0, 1).
        top_p: λ in [0, 1] (used by ``specvlm`` only).
        grid: int (V, 3) (frame, row, col) per video token; required for ``frame``.
        seed: RNG seed for ``random``.
        num_video_tokens: V when neither scores nor grid is given.
        force_keep: int (F,) video-token indices that must be kept (e.g. tokens covering
            on-screen text), or None. K does not change; see :func:`_with_forced` for how
            the budget is shared.

    Returns:
        PruneResult with CPU int64 sorted unique ``keep`` (K,), ``stage1`` (k1,)
        (empty unless ``specvlm``/``attention``), ``stage2`` (K-k1,) (empty unless
        ``specvlm``) and ``scores`` as CPU float32 (or None).

    Raises:
        ConfigError: unknown method, r or λ out of range.
        ValueError: scores missing for a score method, malformed scores or grid,
            V unknown or inconsistent, ``frame`` without a grid.

    Source: paper Sec. 3.2 and Sec. 4 baselines; docs/design.md §4.3-4.6.
    """
    if method not in PRUNE_METHODS:
        raise ConfigError(f"pruning method {method!r} is unknown: use one of {', '.join(PRUNE_METHODS)}.")
    if not (0.0 <= float(top_p) <= 1.0):
        raise ConfigError(f"top_p={top_p!r} is out of range: use a value in [0, 1].")
    s = _check_scores(scores) if scores is not None else None
    if method in SCORE_METHODS and s is None:
        raise ValueError(f"pruning method {method!r} needs attention scores, but scores is None.")
    v = _resolve_count(s, grid, num_video_tokens)
    k = kept_count(v, drop_rate)  # validates r for every method
    if method == "none":
        k = v
    stage1, stage2 = _EMPTY.clone(), _EMPTY.clone()
    if method == "specvlm":
        stage1 = stage1_top_p(s, k, top_p)
        stage2 = stage2_uniform(v, stage1, k - int(stage1.numel()))
        keep = torch.sort(torch.cat([stage1, stage2])).values
    elif method == "attention":
        stage1 = torch.sort(torch.sort(s, descending=True, stable=True).indices[:k]).values
        keep = stage1.clone()
    elif method == "none":
        keep = torch.arange(v, dtype=torch.long)
    elif method == "random":
        gen = torch.Generator().manual_seed(int(seed))
        keep = torch.sort(torch.randperm(v, generator=gen)[:k]).values
    elif method == "uniform":
        keep = stage2_uniform(v, None, k)
    elif method.startswith("window-"):
        start = {"window-front": 0, "window-middle": (v - k) // 2, "window-end": v - k}[method]
        keep = torch.arange(start, start + k, dtype=torch.long)
    else:  # frame
        if grid is None:
            raise ValueError("pruning method 'frame' needs the token grid (V, 3) of (frame, row, col).")
        keep = _frame_keep(grid, k)
    scores_out = s.to(torch.float32) if s is not None else None
    forced = None
    if force_keep is not None:
        forced = _forced_set(force_keep, v, k, s)
        keep, stage1, stage2 = _with_forced(method, forced, keep, s, v, k, top_p)
    return PruneResult(keep=keep, stage1=stage1, stage2=stage2, scores=scores_out, num_video_tokens=v, method=method,
                       forced=forced)


def _forced_set(force_keep: torch.Tensor, v: int, k: int, s: torch.Tensor | None) -> torch.Tensor:
    """Sorted unique forced indices, at most K of them (the highest-scoring, else evenly spaced)."""
    f = torch.unique(torch.as_tensor(force_keep).detach().to("cpu", torch.long).reshape(-1))
    if f.numel() and (int(f.min()) < 0 or int(f.max()) >= v):
        raise ValueError(f"force_keep holds indices outside [0, {v}).")
    if f.numel() <= k:
        return f
    if s is not None:
        top = torch.sort(s[f], descending=True, stable=True).indices[:k]
        return torch.sort(f[top]).values
    return f[stage2_uniform(int(f.numel()), None, k)]


def _with_forced(method: str, forced: torch.Tensor, keep: torch.Tensor, s: torch.Tensor | None, v: int, k: int,
                 top_p: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Make room for the forced tokens; exactly K kept (``none``: all V).

    Budget sharing: the F forced tokens are kept first and count against K (if F > K only the K
    highest-scoring forced tokens are kept, or K evenly spaced ones without scores). ``specvlm``:
    the forced tokens' scores count toward Stage I's λ mass; Stage I then adds the best other
    tokens until λ·total is reached, at most K − F; Stage II spreads the remainder uniformly over
    the tokens left. ``attention``: the K − F best other tokens. Other methods: K − F of the
    method's own picks outside the forced set, evenly spaced among them.

    Returns:
        (keep (K,), stage1, stage2), sorted; stages exclude the forced tokens.
    """
    budget = k - int(forced.numel())
    if method == "none":
        return keep, _EMPTY.clone(), _EMPTY.clone()
    if method == "specvlm":
        stage1 = _stage1_after(s, forced, budget, top_p)
        stage2 = stage2_uniform(v, torch.cat([forced, stage1]), budget - int(stage1.numel()))
        return torch.sort(torch.cat([forced, stage1, stage2])).values, stage1, stage2
    if method == "attention":
        order = torch.sort(s, descending=True, stable=True).indices
        rest = order[~torch.isin(order, forced)][:budget]
        stage1 = torch.sort(rest).values
        return torch.sort(torch.cat([forced, stage1])).values, stage1, _EMPTY.clone()
    rest = keep[~torch.isin(keep, forced)]
    rest = rest[stage2_uniform(int(rest.numel()), None, budget)] if rest.numel() else rest
    return torch.sort(torch.cat([forced, rest])).values, _EMPTY.clone(), _EMPTY.clone()


def _stage1_after(s: torch.Tensor, forced: torch.Tensor, budget: int, top_p: float) -> torch.Tensor:
    """Stage I top-p with the forced tokens' mass already covered (same slack as :func:`stage1_top_p`)."""
    order = torch.sort(s, descending=True, stable=True).indices
    order = order[~torch.isin(order, forced)]
    total = float(s.sum())
    need = float(top_p) * total - _TOP_P_RTOL * total - float(s[forced].sum())
    if float(top_p) == 0.0 or total <= 0.0 or need <= 0.0 or order.numel() == 0:
        k1 = 0
    else:
        k1 = min(int((torch.cumsum(s[order], 0) < need).sum()) + 1, int(order.numel()))
    return torch.sort(order[:min(k1, budget)]).values


def prune(
    scores: torch.Tensor | None,
    config: PruneConfig,
    grid: torch.Tensor | None = None,
    *,
    num_video_tokens: int | None = None,
    force_keep: torch.Tensor | None = None,
) -> PruneResult:
    """:func:`select_video_tokens` with settings from a :class:`PruneConfig`.

    Args:
        scores: float (V,) or None (see :func:`select_video_tokens`).
        config: method, drop rate r, top-p λ and seed.
        grid: int (V, 3) (frame, row, col) per video token, for ``frame``.
        num_video_tokens: V when neither scores nor grid is given.
        force_keep: int (F,) video tokens always kept (see :func:`select_video_tokens`).

    Returns:
        The PruneResult.

    Raises:
        ValueError: as :func:`select_video_tokens`.

    Source: docs/design.md §4.3-4.6.
    """
    return select_video_tokens(
        scores, config.method, config.drop_rate, config.top_p, grid=grid, seed=config.seed,
        num_video_tokens=num_video_tokens, force_keep=force_keep,
    )


def _frame_keep(grid: torch.Tensor, k: int) -> torch.Tensor:
    """Temporal pruning: keep whole frames at even spacing, then make the count exactly K.

    Rule: F distinct frame ids (sorted), tokens_per_frame = V / F (mean);
    n = clamp(round_half_up(K / tokens_per_frame), 1, F) frames at sorted-frame positions
    floor(linspace(0, F-1, n)). If those frames hold more than K tokens, keep the
    first K of them in original order (only the last chosen frame is cut, at its
    bottom rows). If they hold fewer, fill the gap with Stage II's uniform rule
    over the tokens of the frames not chosen.

    Args:
        grid: int (V, 3) (frame, row, col) per video token, any device.
        k: K, 1 <= K <= V.

    Returns:
        int64 (K,) on CPU, sorted, unique.

    Raises:
        ValueError: grid not (V, 3) integer.
    """
    frames = grid.detach().to("cpu")[:, 0]
    v = int(frames.numel())
    frame_ids = torch.unique(frames)  # sorted
    f = int(frame_ids.numel())
    n = min(f, max(1, (2 * k * f + v) // (2 * v)))  # round half up of K / (V / F), exact
    chosen = frame_ids[stage2_uniform(f, None, n)]
    keep = torch.nonzero(torch.isin(frames, chosen)).reshape(-1)
    if keep.numel() >= k:
        return keep[:k].clone()
    fill = stage2_uniform(v, keep, k - int(keep.numel()))
    return torch.sort(torch.cat([keep, fill])).values


def _check_scores(scores: torch.Tensor) -> torch.Tensor:
    """Validate scores (V,) and return them as CPU float64 (sums stay exact enough)."""
    if not isinstance(scores, torch.Tensor):
        raise ValueError(f"scores must be a torch.Tensor of shape (V,), got {type(scores).__name__}.")
    if scores.dim() != 1:
        raise ValueError(f"scores must be 1-D (V,), got shape {tuple(scores.shape)}.")
    if scores.numel() < 1:
        raise ValueError("scores is empty: need at least 1 video token.")
    s = scores.detach().to("cpu", torch.float64)
    if not torch.isfinite(s).all():
        raise ValueError("scores contain NaN or infinite values.")
    return s


def _resolve_count(scores: torch.Tensor | None, grid: torch.Tensor | None, num_video_tokens: int | None) -> int:
    """V from scores, grid or the explicit count; all given ones must agree."""
    counts = []
    if scores is not None:
        counts.append(("scores", int(scores.numel())))
    if grid is not None:
        if not isinstance(grid, torch.Tensor) or grid.dim() != 2 or grid.shape[1] != 3:
            raise ValueError(f"grid must be a tensor of shape (V, 3), got {getattr(grid, 'shape', type(grid))}.")
        if grid.dtype.is_floating_point or grid.dtype == torch.bool or grid.is_complex():
            raise ValueError(f"grid must hold integers (frame, row, col), got dtype {grid.dtype}.")
        counts.append(("grid", int(grid.shape[0])))
    if num_video_tokens is not None:
        counts.append(("num_video_tokens", int(num_video_tokens)))
    if not counts:
        raise ValueError("cannot tell the number of video tokens: pass scores, grid or num_video_tokens.")
    if len({c for _, c in counts}) > 1:
        raise ValueError("inconsistent video token counts: " + ", ".join(f"{n}={c}" for n, c in counts) + ".")
    v = counts[0][1]
    if v < 1:
        raise ValueError(f"need at least 1 video token, got {v}.")
    return v
