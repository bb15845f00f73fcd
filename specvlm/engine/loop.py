"""The decode loop: fixed-shape steps over static KV buffers, one host read per step.

After the prefills (:mod:`specvlm.engine.prefill`) the caches are copied into static buffers sized once
per request (:func:`specvlm.engine.statickv.allocate`); every step is a fixed-shape function
(:mod:`specvlm.engine.steps`, :mod:`specvlm.engine.sampledsteps`; captured in a CUDA graph on a GPU,
:mod:`specvlm.engine.graphs`) whose packed result is read once: the token and its logit margin
(vanilla), or the accepted tokens, the bonus and the tree size (speculative), with re-selection's
measure (:mod:`specvlm.engine.reselection`). Sampled steps take uniform noise refilled from the
request's generator before each step. A draft on another device keeps its own step state there; the
tree and the next pending tokens are copied between the devices.

Source: docs/design.md §4.1-4.14.
"""
from __future__ import annotations

import logging
import time
from typing import Any, Callable

import torch

from specvlm.engine.measures import Timer
from specvlm.config import DecodeConfig
from specvlm.engine import reselection, statickv
from specvlm.engine.weights import FusedUnsupported
from specvlm.engine.graphs import step_runner
from specvlm.engine.emit import first_token as _first_token
from specvlm.engine.prefill import speculative_prefill
from specvlm.engine.prefill import subtitle_tokens as _subtitle_tokens
from specvlm.engine.prefill import target_prefill as _prefill
from specvlm.engine.sampledsteps import refresh
from specvlm.engine.staticdraft import FusedDraft, fused_draft
from specvlm.engine.statictarget import FusedTarget, fused_target
from specvlm.engine.steps import (ModelSide, SpecState, decode_step, draft_step, spec_state, tree_shape,
                                  vanilla_state, verify_step)
from specvlm.models.stopping import stop_between_layers
from specvlm.models.pair import ModelPair
from specvlm.spec.deviceaccept import unpack
from specvlm.spec.sampling import make_generator
from specvlm.types import DraftTreeRecord, ModelInputs, PrefillInfo, StepEvent

log = logging.getLogger(__name__)

MARGIN = 8
"""Spare slots in every static buffer beyond what a request can write."""


def rope_dims(inputs: ModelInputs) -> int:
    """R, the rows of the prompt's position ids.

    Source: docs/design.md §7 (M-RoPE positions).
    """
    return int(inputs.positions.shape[0])


def draft_substitute(pair: Any) -> tuple[int, int]:
    """How the draft embeds target tokens it has no row for: (draft rows, substitute id).

    In Std-SD the target's LM head can be larger than the draft's embedding table (padded
    vocabularies: Qwen2.5-VL-7B 152,064 vs 3B 151,936). The target may emit such an id (sampled,
    or greedy when its head favours a padding row); the draft then sees the tokenizer's pad id
    in its place (else its unk id, else 0). Only the draft's context changes, so later drafts
    may be accepted less often; the target still decides every token, so the output does not.

    Args:
        pair: the ModelPair.

    Returns:
        (Vd, substitute): ids >= Vd are replaced by ``substitute`` (< Vd) before the draft
        embeds them.

    Source: docs/design.md §4 (padded vocabularies within a family).
    """
    rows = int(pair.draft.get_input_embeddings().weight.shape[0])
    tok = getattr(pair.processor, "tokenizer", None)
    for name in ("pad_token_id", "unk_token_id"):
        tid = getattr(tok, name, None)
        if isinstance(tid, int) and 0 <= tid < rows:
            return rows, tid
    return rows, 0


def own_draft_state(device: torch.device, draft_device: torch.device) -> bool:
    """True when the draft's steps keep their own state on ``draft_device`` (another device than the target's;
    ``cuda`` and ``cuda:N`` of the current device are one)."""
    def norm(d: torch.device) -> tuple[str, int | None]:
        d = torch.device(d)
        return d.type, (torch.cuda.current_device() if d.type == "cuda" and d.index is None else d.index)
    return norm(device) != norm(draft_device)


def _side(model, adapter, cache, rope_dims: int, capacity: int,
          fused: FusedDraft | FusedTarget | None = None) -> ModelSide:
    dtype = model.get_input_embeddings().weight.dtype
    return ModelSide(model, adapter, statickv.allocate(cache, capacity), rope_dims, dtype, fused)


def _fused(pair: ModelPair, rope_dims: int, max_position: int) -> FusedDraft | None:
    """The draft's fused forward where the fast draft runner supports the draft, else None (logged)."""
    try:
        return fused_draft(pair, rope_dims, max_position)
    except FusedUnsupported as e:
        log.info("fused static draft not used: %s", e)
        return None


def stream_vanilla(pair: ModelPair, inputs, config: DecodeConfig, reuse, should_stop):
    """Plain decoding: :func:`specvlm.engine.steps.decode_step` per token.

    Args:
        pair: target + draft; inputs: prepared ModelInputs; config: the request (``method`` vanilla);
        reuse: a target prefill to copy, or None; should_stop: polled before every step and layer of the prefill.

    Yields:
        One PrefillInfo, then StepEvents (step 0 = the prefill's token).

    Source: docs/design.md §4.9 and §4.13.
    """
    dev = pair.device
    n_sub = _subtitle_tokens(inputs, "target")
    inputs = inputs.for_target()
    with Timer(dev) as t_pre, stop_between_layers(should_stop):
        tp = _prefill(pair, inputs, False, reuse)
    L = int(inputs.input_ids.shape[1])
    yield PrefillInfo(L, inputs.num_video_tokens, 0, None, t_pre.seconds, 0.0, 0.0,
                      inputs.token_grid, inputs.frames_per_token, n_sub, 0)
    last = tp.last_logits
    cap = L + config.max_new_tokens + MARGIN
    side = _side(pair.target, pair.adapter, tp.cache, rope_dims(inputs), cap,
                 fused_target(pair.target, pair.adapter, rope_dims(inputs), inputs.next_position + cap))
    del tp
    em, pick, _, first, event = _first_token(pair, config, last)
    st = vanilla_state(torch.tensor([first], device=dev), inputs.next_position, dev, config.sampling)
    run, t_cap = step_runner(lambda: decode_step(side, st), dev, [st.token, st.pos, st.out, side.cache.length])
    if t_cap:
        log.info("static vanilla step captured in %.3f s", t_cap)
    gen = _generator(pick, config, dev)
    t_dec = time.perf_counter()   # the decode clock starts after the buffers and any capture
    yield event
    step = 0
    while not em.done and not (should_stop and should_stop()):
        step += 1
        with Timer(dev) as t_v:
            if st.noise is not None:
                refresh(st.noise, gen)
            run()
            tok, margin = st.out.tolist()   # the step's one host read
        new, pieces = em.emit([int(tok)])
        yield StepEvent(step, new, 0, [False] * len(new), "".join(pieces), verify_ms=t_v.ms,
                        elapsed_s=time.perf_counter() - t_dec, num_generated=len(em.ids), margin=margin, pieces=pieces)


def stream_speculative(pair: ModelPair, inputs, config: DecodeConfig, reuse, should_stop, record_trees: bool):
    """Speculative decoding: :func:`specvlm.engine.steps.draft_step` and
    :func:`specvlm.engine.steps.verify_step` per step.

    Args:
        pair, inputs, config, reuse, should_stop: as :func:`stream_vanilla` (a speculative ``method``);
        record_trees: attach each step's tree (:class:`DraftTreeRecord`; reads the tree to the host).

    Yields:
        One PrefillInfo, then StepEvents (step 0 = the prefill's token).

    Source: SpecVLM (arXiv 2508.16201) Sec. 3; docs/design.md §4.1-4.13.
    """
    dev, ddev = pair.device, pair.draft.device
    sp = speculative_prefill(pair, inputs, config, reuse, should_stop)   # 4.1-4.7
    t_in, d_in, tp = sp.t_in, sp.d_in, sp.tp
    L = int(t_in.input_ids.shape[1])
    yield sp.info
    rows, sub = draft_substitute(pair)
    dtype = pair.target.get_input_embeddings().weight.dtype
    tree = config.tree.for_prompt(L)
    shape = tree_shape(tree, pair.shared_vocab, dev, config.sampling, dtype)
    split = own_draft_state(dev, ddev)
    dshape = tree_shape(tree, pair.shared_vocab, ddev, config.sampling, dtype) if split else shape
    budget = config.max_new_tokens + 2 * (shape.depth + 1) + shape.nodes + MARGIN
    extra = config.reselect.total_tokens if config.reselect.enabled else 0   # re-selection's slots in the draft
    target = _side(pair.target, pair.adapter, tp.cache, rope_dims(inputs), L + budget,
                   fused_target(pair.target, pair.adapter, rope_dims(inputs), t_in.next_position + budget))
    fused = _fused(pair, rope_dims(d_in), d_in.next_position + budget)
    draft = _side(pair.draft, pair.draft_adapter, sp.d_cache, rope_dims(d_in),
                  sp.d_len + budget + shape.drafted + extra, fused)
    rs = reselection.start(config.reselect, pair, sp, len(target.cache.layers), dev)
    target.tap = rs.tap if rs is not None else None
    last, last_row = tp.last_logits, tp.last_row
    # on a CPU the draft attends up to where it can have written: its prompt, the tokens added and emitted, a tree
    reach = sp.d_len + shape.drafted + 2 if ddev.type == "cpu" and (rs is None or rs.grids is None) else None
    del tp, sp
    offset = d_in.next_position - t_in.next_position
    em, pick, _, first, event = _first_token(pair, config, last)
    st = spec_state(first, t_in.next_position, shape, rows, sub, dev)
    dst = spec_state(first, t_in.next_position, dshape, rows, sub, ddev) if split else st
    if rs is not None:   # beyond the paper: before the first draft (docs/design.md §4.14)
        with Timer(ddev) as t_r:
            event.added, event.unseen_share = reselection.begin(rs, pair, (target, draft), last_row, d_in)
        event.draft_ms = t_r.ms   # in the decode clock, as every step's re-selection
    run_draft, run_verify, run_measure = _spec_runners(pair, target, draft, (st, dst), (shape, dshape), offset, rs)
    gen = _generator(pick, config, dev)
    t_dec = time.perf_counter()   # the decode clock starts after the buffers and any capture
    yield event
    step = 0
    while not em.done and not (should_stop and should_stop()):
        step += 1
        # 4.8 draft tree from the root (the pending tokens enter the draft cache first)
        with Timer(ddev) as t_d:
            if st.noise is not None:
                refresh(st.noise, gen)
                if dst is not st:
                    dst.noise.tree.copy_(st.noise.tree)
            draft.window = None if reach is None else reach + len(em.ids) + (rs.added if rs else 0)
            run_draft()
            _to_verify(dst, st)
        # 4.9-4.10 verify, accept on the device, commit; then re-selection's measure: the step's one host read
        with Timer(dev) as t_v:
            run_verify()
        with Timer(dev) as t_r:
            if rs is not None:
                run_measure()
            out, measured = reselection.read_step(st.out, rs)
            accepted, bonus = unpack(out[:-1])
            n_acc, size = len(accepted), out[-1]
            added, share = ([], None) if rs is None else \
                reselection.after_step(rs, pair, (target, draft), st, measured, d_in, n_acc + 1)
            _to_draft(st, dst)
        new, pieces = em.emit(accepted + [bonus])
        n_new = min(n_acc, len(new))
        rec = _record(st, size, n_acc, bonus) if record_trees else None
        yield StepEvent(step, new, n_new, [i < n_new for i in range(len(new))], "".join(pieces),
                        draft_ms=t_d.ms + (t_r.ms if rs is not None else 0.0), verify_ms=t_v.ms + (
                            0.0 if rs is not None else t_r.ms), tree_size=size,
                        elapsed_s=time.perf_counter() - t_dec, num_generated=len(em.ids), tree=rec, pieces=pieces,
                        added=added, unseen_share=share)


def _spec_runners(pair: ModelPair, target: ModelSide, draft: ModelSide, states, shapes, offset: int,
                  rs) -> tuple[Callable[[], None], Callable[[], None], Callable[[], None]]:
    """The draft, verify and (with re-selection) measure steps, each captured once on CUDA
    (:func:`specvlm.engine.graphs.step_runner`); the draft's on its own device.

    Source: docs/design.md §4.13.
    """
    st, dst = states
    dev, ddev = target.cache.slots.device, draft.cache.slots.device
    rows, sub = draft_substitute(pair)
    saved = st.tensors() + [target.cache.length, draft.cache.length]
    pool = torch.cuda.graph_pool_handle() if dev.type == "cuda" else None
    dpool = pool if dst is st else (torch.cuda.graph_pool_handle() if ddev.type == "cuda" else None)
    dsaved = saved if dst is st else dst.tensors() + [draft.cache.length]
    root = rs is not None and rs.sync and rs.config.trigger == "every"   # only the bonus is ever pending
    run_draft, c1 = step_runner(lambda: draft_step(draft, dst, shapes[1], offset, pair.shared_vocab, root), ddev,
                                dsaved, dpool)
    run_verify, c2 = step_runner(lambda: verify_step(target, st, shapes[0], rows, sub), dev, saved, pool)
    run_measure, c3 = (step_runner(lambda: reselection.measure_step(rs, target.cache, st), dev,
                                   saved + [rs.out], pool) if rs is not None else (lambda: None, 0.0))
    if c1 + c2 + c3:
        log.info("static draft, verify and measure steps captured in %.3f s", c1 + c2 + c3)
    return run_draft, run_verify, run_measure


def _to_verify(dst: SpecState, st: SpecState) -> None:
    """The drafted tree from the draft's device to the target's (nothing when they share one)."""
    if dst is st:
        return
    for a, b in ((st.tokens, dst.tokens), (st.parents, dst.parents), (st.scores, dst.scores), (st.valid, dst.valid)):
        a.copy_(b)
    if st.noise is not None:
        st.noise.draft_probs.copy_(dst.noise.draft_probs)


def _to_draft(st: SpecState, dst: SpecState) -> None:
    """The next pending tokens, root and position from the target's device to the draft's."""
    if dst is st:
        return
    for a, b in ((dst.pending, st.pending), (dst.n_pending, st.n_pending), (dst.root, st.root), (dst.pos, st.pos)):
        a.copy_(b)


def _generator(pick, config: DecodeConfig, device: torch.device) -> torch.Generator | None:
    """The request's generator for the steps' noise: the first token's on a CPU, a device one seeded from
    the same seed elsewhere; None when greedy."""
    if config.sampling.greedy:
        return None
    if device.type == "cpu":
        return pick.gen
    return make_generator((config.sampling.seed + 1) % 2**63, device)


def _record(st, size: int, n_acc: int, bonus: int) -> DraftTreeRecord:
    """The step's tree as a DraftTreeRecord (reads the tree: host reads beyond the step's one)."""
    return DraftTreeRecord(st.tokens[:size].tolist(), st.parents[:size].tolist(), st.scores[:size].tolist(),
                           st.path[:n_acc].tolist(), bonus)
