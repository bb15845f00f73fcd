"""Re-selection between decode steps: the draft's video tokens follow what the generation turns to.

The verify keeps each layer's queries in fixed buffers (:class:`QueryTap`, the attention's tap: no second
forward). :func:`measure_step` scores the row that chose the target's own token (at a refused step, or
every step with ``trigger="every"``) against the target's committed keys, heads and layers averaged (the
quantity Stage I ranks video tokens by and the Inspect "why" view shows), and ranks the video tokens the
draft lacks, on the device with fixed shapes; its result comes back with the step's one read. When more
than ``min_share`` of the row falls on them, the most attended (with ``track``, their cells in
neighbouring frame groups) enter the draft's buffer by index (:mod:`specvlm.engine.draftcache`: Self-SD
copies the target's keys and values, Std-SD runs a partial prefill), within a capacity fixed per request
from ``total_tokens``; with ``sync`` the draft's buffer becomes the target's at every token it holds. The
output is unchanged: the target verifies every drafted token.

Source: SpecVLM (Ji et al., EMNLP 2025, arXiv 2508.16201) Sec. 3.2 (verifier attention as importance)
and its failure analysis; docs/design.md §4.14.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from specvlm.config import ReselectConfig
from specvlm.engine.draftcache import append_video, copy_rows, only_bonus
from specvlm.models.staticattn import key_bias
from specvlm.spec.adaptive import reselect_tokens, track_picks
from specvlm.spec.grid import map_keep


class QueryTap:
    """Keeps each layer's queries of the forwards it is handed to, in fixed buffers (capturable).

    Attributes:
        bufs: per layer float (1, H, n, d) the last forward's queries after RoPE (allocated by the first).
        scale: the attention's softmax scale.

    Source: docs/design.md §4.9 (the verify forward) and §4.14.
    """

    def __init__(self, layers: int):
        self.bufs: list[torch.Tensor | None] = [None] * layers
        self.scale = 1.0
        self._i = 0

    def __call__(self, query: torch.Tensor, scale: float) -> None:
        i = self._i
        if self.bufs[i] is None or self.bufs[i].shape != query.shape:
            self.bufs[i] = torch.empty_like(query)
        self.bufs[i].copy_(query)
        self.scale = float(scale)
        self._i = (i + 1) % len(self.bufs)


@dataclass
class Reselect:
    """One request's re-selection state (held by the decode loop, never by a model).

    Attributes:
        config: the settings; held: per video token (``PruneResult.keep``'s index space), whether the draft
            holds it (host list); unheld: how many it lacks; lack: bool (V,) on the target's device: not held.
        video_index: int64 (V,) on the target's device, vpos the same host list: the video tokens' sequence positions.
        t_len: the target's committed length (host); synced: (the target's, the draft's) length at the last sync.
        draft_held, grids: bool (Vd,) ``held`` in the draft's own token grid and (target grid, draft grid)
            when it has one, else None.
        sync: rebuild the draft's buffer from the target's at every measured step.
        tap: the verify's queries; out: float64 (2 + 2k,) :func:`measure_step`'s packed result.
        k: candidates ranked per step; token_grid: int (V, 3) the target's (frame group, row, col) per video
            token; cells: the same as a map (frame group, row, col) -> token; added: tokens added so far;
        draft_video: a Std-SD draft's (embeddings (1, Ld, Dd), side features or None) of its prompt.

    Source: docs/design.md §4.7 (the draft's kept set) and §4.14.
    """

    config: ReselectConfig
    held: list[bool]
    unheld: int
    lack: torch.Tensor
    video_index: torch.Tensor
    vpos: list[int]
    t_len: int
    draft_held: torch.Tensor | None
    grids: tuple[torch.Tensor, torch.Tensor] | None
    sync: bool
    tap: QueryTap
    out: torch.Tensor
    k: int
    token_grid: torch.Tensor
    cells: dict[tuple[int, int, int], int]
    added: int = 0
    synced: tuple[int, int] = (0, 0)
    draft_video: Any = field(default=None, repr=False)


def start(config: ReselectConfig, pair: Any, sp: Any, layers: int, device: torch.device) -> Reselect | None:
    """The state before the first step, or None when re-selection is off.

    Args:
        config: the settings; pair: the model pair; sp: the speculative prefill
            (:class:`specvlm.engine.prefill.SpeculativePrefill`); layers: the target's decoder layers;
        device: the target's device.

    Source: docs/design.md §4.7 and §4.14.
    """
    if not config.enabled:
        return None
    t_in, d_in, keep = sp.t_in, sp.d_in, sp.info.prune.keep
    V = int(t_in.num_video_tokens)
    held = torch.zeros(V, dtype=torch.bool)
    held[keep.cpu()] = True
    own = d_in.token_grid.shape != t_in.token_grid.shape or not torch.equal(d_in.token_grid, t_in.token_grid)
    d_held = grids = None
    if own:
        grids = (t_in.token_grid, d_in.token_grid)
        d_held = torch.zeros(int(d_in.num_video_tokens), dtype=torch.bool)
        d_held[map_keep(keep, *grids).cpu()] = True
    k = min(V, config.step_tokens * (2 if config.track else 1))
    cells = {tuple(c): i for i, c in enumerate(t_in.token_grid.long().reshape(-1, 3).tolist())}
    return Reselect(config, held.tolist(), int((~held).sum()), (~held).to(device), t_in.video_index.to(device),
                    t_in.video_index.tolist(), int(t_in.input_ids.shape[1]), d_held, grids,
                    bool(config.sync and pair.self_sd and d_in is t_in), QueryTap(layers),
                    torch.zeros(2 + 2 * k, dtype=torch.float64, device=device), k, t_in.token_grid, cells,
                    draft_video=sp.tp.draft_video)


def row_attention(tap: QueryTap, cache: Any, row: torch.Tensor, video_index: torch.Tensor) -> torch.Tensor:
    """One verify row's attention over the video tokens, from its kept queries and the target's buffer.

    Per layer: softmax over the buffer's valid slots (after the commit exactly the prefix, the root and the
    accepted path: what the row saw), heads averaged; then the mean over layers, read at the video
    positions and normalised over them. Fixed shapes, no host read.

    Args:
        tap: the verify's queries; cache: the target's :class:`~specvlm.engine.statickv.StaticKV`.
        row: int64 (1,) the verify row (0 = the root, i + 1 = node i); video_index: int64 (V,) on the device.

    Returns:
        float32 (V,) summing to 1.

    Source: docs/design.md §4.2 (head-averaged attention, mean over layers); GQA (Ainslie et al. 2023).
    """
    bias = key_bias(cache.length, cache.slots, torch.float32).view(1, 1, -1)
    rows = []
    for q, layer in zip(tap.bufs, cache.layers):
        keys = layer.keys[0]                                                   # (KV, cap, d)
        qr = q[0].index_select(1, row)[:, 0].reshape(keys.shape[0], -1, q.shape[-1]).to(keys.dtype)
        w = torch.softmax(torch.bmm(qr, keys.transpose(1, 2)).float() * tap.scale + bias, -1)
        rows.append(w.mean((0, 1)))
    vid = torch.stack(rows).mean(0).index_select(0, video_index)
    return vid / vid.sum().clamp(min=1e-12)


def measure_step(rs: Reselect, cache: Any, st: Any) -> None:
    """After a verify and its commit: the measured row's unseen share and the lacking tokens ranked, into
    ``rs.out`` = (measured, share, k candidate indices, their attention (-1 = held)); fixed shapes.

    The measured row is the last accepted node's (the root's when none): it chose the target's own token. A
    step is measured when that node has drafted children (refused: :func:`specvlm.analysis.why.rejections`),
    or always with ``trigger="every"``. ``cache``: the target's buffer after the commit; ``st``: the
    :class:`~specvlm.engine.steps.SpecState` after the verify.

    Source: docs/design.md §4.14 (the measured row); SpecVLM Sec. 3.2.
    """
    acc = st.out[:1]
    last = torch.where(acc > 0, st.path.index_select(0, (acc - 1).clamp(min=0)), torch.full_like(acc, -1))
    refused = ((st.parents == last) & st.valid).any().view(1)
    measured = refused | (rs.config.trigger == "every")
    att = row_attention(rs.tap, cache, last + 1, rs.video_index).clamp(min=0)
    total = att.sum()
    share = torch.where(total > 0, (att * rs.lack).sum() / total.clamp(min=1e-30), torch.zeros_like(total))
    w = torch.where(rs.lack, att, torch.full_like(att, -1.0))
    vals, idx = torch.sort(w, descending=True, stable=True)
    rs.out.copy_(torch.cat([measured.double(), share.double().view(1), idx[: rs.k].double(),
                            vals[: rs.k].double()]))


def read_step(st_out: torch.Tensor, rs: Reselect | None) -> tuple[list[int], list[float] | None]:
    """The step's one host read: the verify's packed row, and with re-selection :func:`measure_step`'s too."""
    if rs is None:
        return st_out.tolist(), None
    both = torch.cat([st_out.double(), rs.out]).tolist()
    n = int(st_out.shape[0])
    return [int(v) for v in both[:n]], both[n:]


def pick(rs: Reselect, measured: list[float]) -> tuple[list[int], float | None]:
    """The tokens to add from :func:`measure_step`'s host copy (plain Python: no tensor is read):
    (video-token indices ascending, the share or None when the step was not measured).

    Source: :func:`specvlm.spec.adaptive.pick_unseen` (the same rule over the same ranking).
    """
    if measured[0] < 0.5:
        return [], None
    share, k, c = float(measured[1]), rs.k, rs.config
    n = min(c.step_tokens, c.total_tokens - rs.added, rs.unheld)
    if share <= c.min_share or n <= 0:
        return [], share
    order = [int(i) for i, v in zip(measured[2:2 + k], measured[2 + k:2 + 2 * k]) if v > 0]
    if not c.track:
        return sorted(order[:n]), share
    return track_picks(order, rs.held, rs.cells, c.track, n), share


def after_step(rs: Reselect, pair: Any, sides: tuple[Any, Any], st: Any, measured: list[float],
               d_in: Any, committed: int) -> tuple[list[int], float | None]:
    """After a verify: add what the measured row asks for, or sync the draft's buffer.

    Args:
        rs: the state; pair: the model pair; sides: (target, draft) :class:`~specvlm.engine.steps.ModelSide`;
        st: the :class:`~specvlm.engine.steps.SpecState` after the verify (its pending tokens);
        measured: :func:`measure_step`'s host copy; d_in: the draft's prepared inputs;
        committed: the tokens the verify committed to the target's buffer (the root and the accepted path).

    Returns:
        (video-token indices added, ascending; the unseen share, or None when no row was measured).

    Source: docs/design.md §4.14.
    """
    rs.t_len += committed
    added, share = pick(rs, measured)
    if share is None:
        return [], None
    _apply(rs, pair, sides, added, d_in)
    if rs.sync:
        only_bonus(st)
    return added, share


def begin(rs: Reselect, pair: Any, sides: tuple[Any, Any], last_row: torch.Tensor | None,
          d_in: Any) -> tuple[list[int], float | None]:
    """Before the first draft: with trigger ``every`` the tokens the last prompt position asks for (it chose the
    first token; :attr:`specvlm.engine.prefill.TargetPrefill.last_row`) enter the draft; with ``sync`` the
    draft's buffer becomes the target's prefill at the tokens it holds.

    Returns:
        (video-token indices added, ascending; the last prompt position's unseen share, or None).

    Source: docs/design.md §4.14 (``trigger="every"``).
    """
    added, share = [], None
    if rs.config.trigger == "every" and last_row is not None:
        got = reselect_tokens(last_row, torch.tensor(rs.held), rs.config, rs.config.total_tokens,
                              rs.token_grid if rs.config.track else None)
        added, share = got.added.tolist(), got.unseen_share
    _apply(rs, pair, sides, added, d_in)
    return added, share


def _apply(rs: Reselect, pair: Any, sides: tuple[Any, Any], added: list[int], d_in: Any) -> None:
    """Mark ``added`` held and put them in the draft's buffer: sync, a copy of the target's keys and values
    (Self-SD), or a partial draft prefill in the draft's own grid (Std-SD)."""
    target, draft = sides
    if added:
        for i in added:
            rs.held[i] = True
        rs.unheld -= len(added)
        rs.added += len(added)
        idx = torch.tensor(added, dtype=torch.long, device=rs.lack.device)
        rs.lack.index_fill_(0, idx, False)
    if rs.sync:
        _sync(rs, draft.cache, target.cache, added)
        return
    if not added:
        return
    if pair.self_sd:
        copy_rows(draft.cache, target.cache, rs.video_index.index_select(0, idx))
        return
    d_idx = torch.tensor(added, dtype=torch.long)
    if rs.grids is not None:
        d_idx = map_keep(d_idx, *rs.grids)
        d_idx = d_idx[~rs.draft_held[d_idx]]
        rs.draft_held[d_idx] = True
    if d_idx.numel():
        append_video(draft, pair, d_in, rs.draft_video, d_idx)


def _sync(rs: Reselect, dst: Any, src: Any, added: list[int]) -> None:
    """Self-SD ``sync``: ``dst`` (the draft's buffer) back to its length at the last sync, then ``src``'s (the
    target's) entries committed since and the video tokens just added (the first time: every prompt slot it holds);
    host slot numbers, only what changed is copied (entries' order does not matter). Source: docs/design.md §4.14."""
    lo, keep = rs.synced
    lack = {rs.vpos[i] for i, h in enumerate(rs.held) if not h} if lo == 0 else ()
    pos = [p for p in range(lo, rs.t_len) if p not in lack] + ([rs.vpos[i] for i in added] if lo else [])
    dst.length.fill_(keep)
    copy_rows(dst, src, torch.tensor(pos, dtype=torch.long, device=dst.slots.device))
    rs.synced = (rs.t_len, keep + len(pos))
