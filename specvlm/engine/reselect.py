"""Re-selection during decoding: the draft's video tokens follow what the generation turns to.

At a verify step whose drafted continuation the target refused, the target's attention from the
diverging position (the query that chose the target's own token) says where it looked. The verify
forward's query states are kept (:func:`specvlm.models.attention.query_tap`: no second forward) and
only that one row is scored against the target's cached keys, every layer, heads averaged: the
quantity Stage I ranks video tokens by and the Inspect "why" view shows
(:func:`specvlm.analysis.why.input_attention_at`). With ``trigger="every"`` a step whose drafted path the
target took whole is measured too, from the row after that path (the one that chose the bonus token).
When more than ``min_share`` of the row's video part falls on video tokens the draft lacks, the most
attended of them (and, with ``track``, their cells in neighbouring frame groups) enter the draft's cache
(:func:`specvlm.spec.adaptive.reselect_tokens`), at their original positions:

* Self-SD (the target drafts for itself): their keys and values are copied from the target's cache
  (the draft's own would have been computed over the pruned context; the draft may be approximate).
* Std-SD: a partial draft prefill of just those tokens, with the draft's own video features and
  M-RoPE positions from the prepared inputs.

The tokens go after the draft's cache (attention does not depend on the order of cached entries; RoPE
carries their positions). The output is unchanged: the target verifies every drafted token.

Source: SpecVLM (Ji et al., EMNLP 2025, arXiv 2508.16201) Sec. 3.2 (verifier attention as importance)
and its failure analysis; docs/design.md §4.7 (original positions), §4.9 (verify), §7 (cache layout).
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Iterator

import torch

from specvlm.config import ReselectConfig
from specvlm.engine import kv
from specvlm.engine.fastdraft import FastDraftRunner
from specvlm.engine.forward import device_of, lm_forward
from specvlm.models.adapter import video_lm_kwargs
from specvlm.models.attention import query_tap
from specvlm.spec.adaptive import reselect_tokens
from specvlm.spec.grid import map_keep
from specvlm.spec.tree import DraftTree


@dataclass
class ReselectState:
    """One request's re-selection state (held by the decode loop, never by a model).

    Attributes:
        config: the settings.
        held: bool (V,) video tokens (index space of ``PruneResult.keep``) the draft's cache holds.
        draft_held: bool (Vd,) the same in the draft's own token grid when it differs, else None.
        added: video tokens added so far.
        queries: the last verify forward's per-layer (query (B, H, n, d), scale).
        synced: the last step rebuilt the draft's cache from the target's (it then holds the accepted tokens).

    Source: docs/design.md §4.7 (the draft's kept set).
    """

    config: ReselectConfig
    held: torch.Tensor
    draft_held: torch.Tensor | None = None
    added: int = 0
    queries: list[tuple[torch.Tensor, float]] = field(default_factory=list)
    synced: bool = False

    @contextlib.contextmanager
    def capture(self) -> Iterator[None]:
        """Keep the query states of the forward run inside (the verify) in :attr:`queries`."""
        self.queries = []
        with query_tap(lambda q, scale: self.queries.append((q.detach(), float(scale)))):
            yield


def start(config: ReselectConfig, keep: torch.Tensor, num_video: int, draft_keep: torch.Tensor | None = None,
          num_draft_video: int = 0) -> ReselectState | None:
    """The state before the first step, or None when re-selection is off.

    Args:
        config: the settings; keep: int64 (K,) the draft's kept video tokens; num_video: V.
        draft_keep: int64 the kept set in the draft's own token grid when it differs (else None);
        num_draft_video: Vd, the draft's video tokens then.

    Source: docs/design.md §4.7.
    """
    if not config.enabled:
        return None
    held = torch.zeros(num_video, dtype=torch.bool)
    held[keep.cpu()] = True
    d_held = None
    if draft_keep is not None:
        d_held = torch.zeros(num_draft_video, dtype=torch.bool)
        d_held[draft_keep.cpu()] = True
    return ReselectState(config, held, d_held)


def begin(state: ReselectState, pair: Any, runner: Any, tp: Any, sp_in: tuple[Any, Any],
          draft_video: Any, grids: Any) -> tuple[list[int], float | None]:
    """Before the first draft: with trigger ``every``, the tokens the last prompt position (it chose the first
    token; :attr:`specvlm.engine.prefill.TargetPrefill.last_row`) asks for enter the draft; with ``sync``
    (Self-SD on the target's own prompt) the draft's cache becomes the target's prefill keys and values at
    the tokens it holds (:func:`sync_from_target`).

    Args:
        state: the request's state; pair: the model pair; runner: the draft runner after the draft prefill.
        tp: the target prefill (its cache of L prompt tokens and ``last_row`` float32 (V,)).
        sp_in: (the target's, the draft's) prepared inputs.
        draft_video, grids: as :func:`step`.

    Returns:
        (video-token indices added, ascending; the last prompt position's unseen share, or None when not measured).

    Source: SpecVLM Sec. 3.2 (the verifier's attention as importance); Self-SD drafts with the target's weights.
    """
    t_in, d_in = sp_in
    added, share = torch.empty(0, dtype=torch.long), None
    if state.config.trigger == "every" and tp.last_row is not None:
        pick = reselect_tokens(tp.last_row, state.held, state.config, state.config.total_tokens,
                               t_in.token_grid if state.config.track else None)
        added, share = pick.added, pick.unseen_share
    state.held[added] = True
    state.added += int(added.numel())
    if state.config.sync and pair.self_sd and d_in is t_in:
        sync_from_target(runner, tp.cache, held_positions(state.held, t_in.video_index, tp.cache))
    elif added.numel():
        _add(state, pair, runner, tp.cache, added, t_in, d_in, draft_video, grids)
    return added.tolist(), share


def diverging_row(tree: DraftTree, path: list[int]) -> int | None:
    """The verify block's row whose query chose the target's own token, or None when the target took the
    whole drafted path (nothing refused): row 0 is the root, row i + 1 node i.

    Source: :func:`specvlm.analysis.why.rejections` (refused = the accepted path ends at a node with children).
    """
    last = path[-1] if path else -1
    if last not in set(tree.parents.tolist()):
        return None
    return last + 1


def measured_row(tree: DraftTree, path: list[int], trigger: str) -> int | None:
    """The verify row re-selection reads: the diverging row (:func:`diverging_row`); with trigger ``every``
    also, when the target took the whole drafted path, the row after its last node (it chose the bonus token,
    and the next draft starts right after it).

    Source: :class:`specvlm.config.ReselectConfig` (``trigger``).
    """
    row = diverging_row(tree, path)
    if row is None and trigger == "every":
        return path[-1] + 1 if path else 0
    return row


def video_attention(queries: list[tuple[torch.Tensor, float]], cache: Any, row: int,
                    video_index: torch.Tensor) -> torch.Tensor:
    """One verify row's attention over the video tokens, from its kept queries and the target's cache.

    Per layer: softmax over every key the row saw (the cache after the commit holds exactly the prefix,
    the root and the accepted path), heads averaged; then the mean over layers, read at the video
    positions and normalised over them.

    Args:
        queries: per layer (query (1, H, n, d) after RoPE, scale) of the verify forward.
        cache: the target's KV cache after the commit (keys (1, KV, L, d) per layer).
        row: the verify row (:func:`measured_row`).
        video_index: int64 (V,) sequence positions of the video tokens in the target's prompt.

    Returns:
        float32 (V,) summing to 1.

    Source: docs/design.md §4.2 (head-averaged attention, mean over layers); GQA (Ainslie et al. 2023).
    """
    rows = []
    for (q, scale), layer in zip(queries, cache.layers):
        keys = layer.keys[0]                                             # (KV, T, d): what the row saw
        kvh = keys.shape[0]
        qr = q[0, :, row].reshape(kvh, -1, q.shape[-1]).to(keys.dtype)   # (KV, G, d)
        w = torch.softmax(torch.bmm(qr, keys.transpose(1, 2)).float() * scale, -1)
        rows.append(w.mean((0, 1)))
    vid = torch.stack(rows).mean(0)[video_index.to(rows[0].device)].cpu()
    return vid / vid.sum().clamp(min=1e-12)


def step(state: ReselectState, pair: Any, runner: Any, target_cache: Any, tree: DraftTree, path: list[int],
         t_in: Any, d_in: Any, draft_video: tuple[torch.Tensor, torch.Tensor | None] | None,
         grids: tuple[torch.Tensor, torch.Tensor] | None) -> tuple[list[int], float | None]:
    """After a verify and its commit: measure the row :func:`measured_row` names and add the tokens it asks for.

    Args:
        state: the request's state (its :attr:`ReselectState.queries` from this verify).
        pair: the model pair; runner: the draft runner (between steps: pending tokens fed, no tree node).
        target_cache: the target's cache after the commit; tree, path: the verified tree and accepted path.
        t_in, d_in: the target's and the draft's prepared inputs.
        draft_video: a Std-SD draft's (embeddings (1, Ld, Dd), side features or None) of its prompt.
        grids: (target grid, draft grid) when the draft has its own token grid, else None.

    With ``sync`` (Self-SD on the target's own prompt) a measured step rebuilds the draft's cache from the
    target's instead (:func:`sync_from_target`) and sets :attr:`ReselectState.synced`.

    Returns:
        (video-token indices added, ascending; the unseen share, or None when no row was measured).

    Source: SpecVLM Sec. 3.2, re-applied during decoding; docs/design.md §4.7.
    """
    row = measured_row(tree, path, state.config.trigger)
    state.synced = False
    if row is None or not state.queries:
        return [], None
    att = video_attention(state.queries, target_cache, row, t_in.video_index)
    state.queries = []
    pick = reselect_tokens(att, state.held, state.config, state.config.total_tokens - state.added,
                           t_in.token_grid if state.config.track else None)
    state.held[pick.added] = True
    state.added += int(pick.added.numel())
    if state.config.sync and pair.self_sd and d_in is t_in:
        sync_from_target(runner, target_cache, held_positions(state.held, t_in.video_index, target_cache))
        state.synced = True
    elif pick.added.numel():
        _add(state, pair, runner, target_cache, pick.added, t_in, d_in, draft_video, grids)
    return pick.added.tolist(), pick.unseen_share


def _add(state: ReselectState, pair: Any, runner: Any, target_cache: Any, added: torch.Tensor, t_in: Any,
         d_in: Any, draft_video: Any, grids: Any) -> None:
    """Put video tokens ``added`` (A,) into the draft's cache: Self-SD copies the target's keys and values,
    Std-SD runs a partial draft prefill (in its own token grid when it has one)."""
    if pair.self_sd:
        copy_target_kv(runner, target_cache, t_in.video_index[added])
        return
    d_idx = added if grids is None else map_keep(added, *grids)
    if state.draft_held is not None:
        d_idx = d_idx[~state.draft_held[d_idx]]
        state.draft_held[d_idx] = True
    if d_idx.numel():
        prefill_video(runner, pair, d_in, draft_video, d_idx)


def held_positions(held: torch.Tensor, video_index: torch.Tensor, target_cache: Any) -> torch.Tensor:
    """int64 (P,) ascending sequence positions of the target's cache the draft holds: every non-video token
    and the held video tokens (``held`` bool (V,), ``video_index`` int64 (V,) their sequence positions).

    Source: docs/design.md §4.7 (the draft's sequence: all non-video tokens + kept video tokens).
    """
    keep = torch.ones(kv.cache_length(target_cache), dtype=torch.bool)
    keep[video_index.cpu()[~held.cpu()]] = False
    return keep.nonzero().flatten()


def sync_from_target(runner: Any, target_cache: Any, seq_pos: torch.Tensor) -> None:
    """Self-SD: the draft's cache becomes the target's keys and values at sequence positions ``seq_pos`` (P,)
    (the whole committed cache: the next draft feeds only the bonus token).

    Source: docs/design.md §7 (per-layer keys/values (B, KV, L, d)); Self-SD drafts with the target's weights.
    """
    n = int(seq_pos.numel())
    if isinstance(runner, FastDraftRunner):
        runner._reserve(n)
        for i, layer in enumerate(target_cache.layers):
            idx = seq_pos.to(layer.keys.device)
            runner.k[i][:, :n] = layer.keys[0].index_select(-2, idx)
            runner.v[i][:, :n] = layer.values[0].index_select(-2, idx)
        runner.length = 0
        _advance_fast(runner, n)
        return
    kv.truncate(runner.cache, 0)
    for i, src in enumerate(target_cache.layers):
        idx = seq_pos.to(src.keys.device)
        runner.cache.update(src.keys.index_select(-2, idx), src.values.index_select(-2, idx), i)
    runner.base = kv.cache_length(runner.cache)


def copy_target_kv(runner: Any, target_cache: Any, seq_pos: torch.Tensor) -> None:
    """Self-SD: append the target's keys and values at sequence positions ``seq_pos`` (A,) to the draft's cache.

    Source: docs/design.md §7 (per-layer keys/values (B, KV, L, d)).
    """
    ks, vs = [], []
    for layer in target_cache.layers:
        idx = seq_pos.to(layer.keys.device)
        ks.append(layer.keys.index_select(-2, idx))
        vs.append(layer.values.index_select(-2, idx))
    if isinstance(runner, FastDraftRunner):
        a = int(seq_pos.numel())
        runner._reserve(runner.length + a)
        for i, (k, v) in enumerate(zip(ks, vs)):
            runner.k[i][:, runner.length:runner.length + a] = k[0]
            runner.v[i][:, runner.length:runner.length + a] = v[0]
        _advance_fast(runner, a)
        return
    for i, (k, v) in enumerate(zip(ks, vs)):
        runner.cache.update(k, v, i)
    runner.base = kv.cache_length(runner.cache)


def prefill_video(runner: Any, pair: Any, d_in: Any, draft_video: tuple[torch.Tensor, torch.Tensor | None],
                  d_idx: torch.Tensor) -> None:
    """Std-SD: a partial draft prefill of the draft's video tokens ``d_idx`` (A,), at their original
    (M-RoPE) positions, appended to the draft's cache (causal among themselves, seeing the whole cache).

    Source: docs/design.md §4.7 (draft prefill at original positions) and §10 (DeepStack side features).
    """
    d_idx = torch.sort(d_idx.cpu()).values
    emb, side = draft_video
    seq = d_in.video_index[d_idx]
    x = emb[:, seq.to(emb.device)]
    pos = d_in.positions[:, seq]
    ad, model = pair.draft_adapter, pair.draft
    if isinstance(runner, FastDraftRunner):
        cos, sin = runner.lm.rotary_emb(x, ad.lm_positions(pos.to(device_of(model))))
        cos, sin = cos.reshape(x.shape[1], -1), sin.reshape(x.shape[1], -1)
        h = sin.shape[-1] // 2
        a = x.shape[1]
        runner._forward(x[0], cos, torch.cat([-sin[:, :h], sin[:, h:]], -1),
                        torch.ones(a, a, dtype=torch.bool).tril_())
        runner.base, runner.chain = runner.length, []
        return
    extra = video_lm_kwargs(ad, torch.ones(x.shape[1], dtype=torch.bool),
                            None if side is None else side[:, d_idx.to(side.device)])
    lm_forward(model, ad, x, pos, runner.cache, rows=None, extra=extra)
    runner.base = kv.cache_length(runner.cache)


def _advance_fast(runner: FastDraftRunner, n: int) -> None:
    """A FastDraftRunner after ``n`` entries were written at its length: they count as cached (the chain
    reuse of the next ``feed_pending`` no longer applies: they sit where chain nodes were)."""
    runner.length += n
    runner.base, runner.chain = runner.length, []
