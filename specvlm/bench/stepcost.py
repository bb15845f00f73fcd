"""Isolated step costs: one target decode step vs one verify forward of n tree tokens.

The benchmark's verify goal (:mod:`specvlm.bench.goals`) reads "a verify forward of up
to 16 tree tokens costs <= 1.5x a single decode step". Timing whole runs gives only the *mean* verify step
of the trees actually drafted (an early stop trims them), mixed with run-to-run
noise. :func:`verify_cost_curve` measures the quantity itself: over one cache of
``L`` prompt tokens it times a 1-token decode step and verify forwards of
1..``max_tokens`` tokens (root + a chain of drafted nodes, the engine's 4-D mask
and ``lm_forward``), interleaved round by round (decode, verify 1, ..., verify n,
decode, ...) so machine drift hits every size alike, and reports per size the
median of the per-round ratios verify / decode.

Token values do not change the cost (no data-dependent branches on the fixed-size
path), so the cache is filled with random token embeddings at explicit positions.

Source: SpecVLM (arXiv 2508.16201) Sec. 3 (tree verification in one target forward); the
engine's verify mask and positions (next position + node depth), :func:`verify_mask`.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from specvlm.engine import kv
from specvlm.engine.forward import embed_tokens, lm_forward
from specvlm.analysis.metrics import Timer
from specvlm.models.registry import adapter_for


def random_prefill(model: Any, length: int, *, chunk: int = 4096, seed: int = 0) -> tuple[Any, Any]:
    """A KV cache of ``length`` random-token prompt positions (1-D positions, chunked prefill).

    Args:
        model: a ``...ForConditionalGeneration`` model (its language model is run).
        length: L, prompt tokens to cache (>= 1).
        chunk: tokens per prefill forward.
        seed: token-id seed.

    Returns:
        (cache holding L tokens, the model's adapter).

    Raises:
        ValueError: ``length`` < 1.
    """
    if length < 1:
        raise ValueError(f"random_prefill needs length >= 1, got {length}.")
    ad = adapter_for(model)
    cache = kv.new_cache(model)
    g = torch.Generator().manual_seed(seed)
    vocab = model.get_input_embeddings().weight.shape[0]
    for s in range(0, length, chunk):
        n = min(chunk, length - s)
        ids = torch.randint(0, vocab, (n,), generator=g)
        lm_forward(model, ad, embed_tokens(model, ids), torch.arange(s, s + n).expand(3, n), cache, rows=None)
    return cache, ad


def median_ms(fn: Callable[[], None], reset: Callable[[], None], device: str, iters: int, warmup: int) -> float:
    """Median wall time of ``fn`` in ms over ``iters`` calls after ``warmup`` untimed ones;
    ``reset`` runs after every call (outside the clock). CUDA-synchronised on GPU."""
    times = []
    for i in range(warmup + iters):
        with Timer(device) as t:
            fn()
        reset()
        if i >= warmup:
            times.append(t.ms)
    return statistics.median(times)


@dataclass(frozen=True)
class VerifyCost:
    """Result of :func:`verify_cost_curve`.

    Attributes:
        kv_tokens: L, tokens in the cache before each step.
        decode_ms: median 1-token decode step (ms).
        verify_ms: {tokens n: median verify forward over n tokens (ms)}, n = root + n-1 chain nodes.
        ratio: {n: median over rounds of verify(n) / decode in the same round}.
        rounds: interleaved rounds measured.
    """

    kv_tokens: int
    decode_ms: float
    verify_ms: dict[int, float] = field(default_factory=dict)
    ratio: dict[int, float] = field(default_factory=dict)
    rounds: int = 0

    def worst_ratio(self, up_to: int) -> tuple[int, float] | None:
        """(n, ratio) of the costliest measured size n <= ``up_to`` relative to decode, or None."""
        sizes = [n for n in self.ratio if n <= up_to]
        if not sizes:
            return None
        n = max(sizes, key=lambda s: self.ratio[s])
        return n, self.ratio[n]


def verify_cost_curve(model: Any, kv_tokens: int, sizes: tuple[int, ...] = tuple(range(1, 18)), *,
                      rounds: int = 5, iters: int = 3, warmup: int = 2, seed: int = 0) -> VerifyCost:
    """Time a decode step and verify forwards of each size in ``sizes`` after ``kv_tokens`` cached tokens.

    Each size n is one target forward over n tokens (the root and a chain of n - 1 drafted
    nodes) with :func:`verify_mask` and the LM head on every row, exactly what the
    engine's verify step runs; the decode step is one token with no mask and the LM head on
    one row, what vanilla decoding runs. The cache is rolled back after every call.

    Args:
        model: the target model, already on its device, with the engine's attention
            (:func:`specvlm.models.attention.use_fast_attention`) when that is what is measured.
        kv_tokens: L (e.g. the benchmark input's target prompt length).
        sizes: verify sizes n in tokens (each >= 1).
        rounds: interleaved rounds; each round times every size ``iters`` times (median).
        iters, warmup: timed / untimed calls per size and round (warm-up in the first round only).
        seed: token-id seed.

    Returns:
        :class:`VerifyCost` (times in ms, ratios dimensionless).

    Raises:
        ValueError: an empty ``sizes``, a size < 1, or ``rounds``/``iters`` < 1.
    """
    if not sizes or min(sizes) < 1 or rounds < 1 or iters < 1:
        raise ValueError(f"verify_cost_curve needs sizes >= 1, rounds >= 1 and iters >= 1 (got {sizes}, "
                         f"{rounds}, {iters}).")
    dev = str(model.get_input_embeddings().weight.device)
    dtype = model.get_input_embeddings().weight.dtype
    L = int(kv_tokens)
    with torch.inference_mode():
        cache, ad = random_prefill(model, L, seed=seed)
        reset = lambda: kv.truncate(cache, L)  # noqa: E731
        tok = torch.tensor([7])
        steps = {0: lambda: lm_forward(model, ad, embed_tokens(model, tok), torch.full((3, 1), L), cache)}
        for n in sizes:
            ids = torch.randint(0, 7, (n,))
            pos = (L + torch.arange(n)).expand(3, -1)
            mask = verify_mask(torch.arange(-1, n - 2), L, dtype, dev)  # root + chain of n - 1 nodes
            steps[n] = (lambda ids=ids, pos=pos, mask=mask:
                        lm_forward(model, ad, embed_tokens(model, ids), pos, cache, mask=mask, rows=slice(None)))
        per: dict[int, list[float]] = {k: [] for k in steps}
        ratios: dict[int, list[float]] = {n: [] for n in sizes}
        for r in range(rounds):
            for k, fn in steps.items():
                per[k].append(median_ms(fn, reset, dev, iters, warmup if r == 0 else 0))
            for n in sizes:
                ratios[n].append(per[n][-1] / per[0][-1])
    return VerifyCost(kv_tokens=L, decode_ms=statistics.median(per[0]),
                      verify_ms={n: statistics.median(per[n]) for n in sizes},
                      ratio={n: statistics.median(ratios[n]) for n in sizes}, rounds=rounds)


@dataclass(frozen=True)
class DraftCost:
    """Result of :func:`draft_cost`: one draft tree level against one target decode step.

    Attributes:
        target_tokens / draft_tokens: tokens cached by the target / the draft before each step.
        width: nodes fed in the measured draft level (siblings under a 4-D tree mask).
        decode_ms: median 1-token target decode step (ms).
        level_ms: median draft level of ``width`` nodes (ms).
        chain_ms: median draft feed of one chain node (no mask; ms).
        level_ratio / chain_ratio: medians over rounds of level / decode and chain / decode
            measured in the same round.
        runner: the draft forward measured: ``fused`` or ``module stack``.
        rounds: interleaved rounds.
    """

    target_tokens: int
    draft_tokens: int
    width: int
    decode_ms: float
    level_ms: float
    chain_ms: float
    level_ratio: float
    chain_ratio: float
    runner: str
    rounds: int


def draft_cost(pair: Any, target_tokens: int, draft_tokens: int, *, width: int = 4, fast: bool = True,
               rounds: int = 7, iters: int = 5, warmup: int = 3, seed: int = 0) -> DraftCost:
    """Time a target decode step, a draft tree level and a draft chain node, interleaved.

    Each is the engine's static forward (:func:`specvlm.engine.steps.static_forward`) over a static buffer:
    the target's one-token decode step, the draft on ``width`` sibling nodes (each sees the buffer and
    itself: the tree block's bias), and the draft on one chain node (no block, a single query). Nothing
    advances a buffer's length, so every call measures the same state. Ratios are taken per round, so
    machine drift hits both sides alike.

    Args:
        pair: the model pair (a Self-SD pair measures the target drafting for itself).
        target_tokens: L, tokens in the target's cache (prompt incl. video tokens).
        draft_tokens: tokens in the draft's cache (text + kept video tokens).
        width: nodes in the measured level (the dynamic tree's ``top_k``).
        fast: the engine's fused draft forward where the draft supports it
            (:func:`specvlm.engine.staticdraft.fused_draft`); False measures the module stack.
        rounds, iters, warmup: as in :func:`verify_cost_curve`.
        seed: token-id seed.

    Returns:
        :class:`DraftCost` (times in ms, ratios dimensionless).

    Raises:
        ValueError: a token count < 1, ``width`` < 1, or ``rounds``/``iters`` < 1.
    """
    from specvlm.engine import statickv
    from specvlm.engine.staticdraft import fused_draft
    from specvlm.engine.statictarget import fused_target
    from specvlm.engine.steps import ModelSide, static_forward
    from specvlm.engine.weights import FusedUnsupported
    from specvlm.models.staticattn import allowed_bias

    if min(target_tokens, draft_tokens, width, rounds, iters) < 1:
        raise ValueError(f"draft_cost needs token counts, width, rounds and iters >= 1 (got {target_tokens}, "
                         f"{draft_tokens}, {width}, {rounds}, {iters}).")
    dev = str(pair.target.get_input_embeddings().weight.device)
    with torch.inference_mode():
        t_cache, ad = random_prefill(pair.target, target_tokens, seed=seed)
        d_cache, _ = random_prefill(pair.draft, draft_tokens, seed=seed + 1)
        cap = max(target_tokens, draft_tokens) + width + 8
        fused = None
        if fast:
            try:
                fused = fused_draft(pair, 3, cap)
            except FusedUnsupported:
                fused = None
        tdt = pair.target.get_input_embeddings().weight.dtype
        target = ModelSide(pair.target, ad, statickv.allocate(t_cache, target_tokens + 8), 3, tdt,
                           fused_target(pair.target, ad, 3, cap))
        ddt = pair.draft.get_input_embeddings().weight.dtype
        draft = ModelSide(pair.draft, pair.draft_adapter, statickv.allocate(d_cache, draft_tokens + width + 8), 3,
                          ddt, fused)
        tok, pos = torch.tensor([7], device=dev), torch.tensor([draft_tokens], device=dev)
        nodes = torch.arange(width, device=dev) + 3
        slots = draft.cache.slots[:width] + draft.cache.length
        eye = allowed_bias(torch.eye(width, dtype=torch.bool, device=dev), ddt)
        steps = {
            "decode": (lambda: static_forward(target, tok, torch.tensor([target_tokens], device=dev), None, None,
                                              visible=target.cache.length + 1), lambda: None),
            "level": (lambda: static_forward(draft, nodes, pos.expand(width), slots, eye), lambda: None),
            "chain": (lambda: static_forward(draft, tok, pos, None, None, visible=draft.cache.length + 1),
                      lambda: None),
        }
        per: dict[str, list[float]] = {k: [] for k in steps}
        for r in range(rounds):
            for k, (fn, reset) in steps.items():
                per[k].append(median_ms(fn, reset, dev, iters, warmup if r == 0 else 0))
    ratio = {k: statistics.median(a / b for a, b in zip(per[k], per["decode"])) for k in ("level", "chain")}
    return DraftCost(target_tokens, draft_tokens, width, statistics.median(per["decode"]),
                     statistics.median(per["level"]), statistics.median(per["chain"]), ratio["level"],
                     ratio["chain"], "fused" if fused is not None else "module stack", rounds)


def ancestor_mask(parents: torch.Tensor) -> torch.Tensor:
    """Which nodes each node may attend to (its ancestors and itself).

    Args:
        parents: int64 (N,), parents-first order (parents[i] < i or -1).

    Returns:
        bool (N, N): [i, j] True iff j == i or j is an ancestor of i.
    """
    n = int(parents.numel())
    par = parents.tolist()
    if par == list(range(-1, n - 1)):   # a chain: every earlier node is an ancestor
        return torch.ones(n, n, dtype=torch.bool).tril_()
    mask = torch.eye(n, dtype=torch.bool)
    for i in range(n):
        p = par[i]
        if p >= 0:
            mask[i] |= mask[p]
    return mask


def verify_mask(parents: torch.Tensor, prefix_len: int, dtype: torch.dtype,
                device: torch.device | str = "cpu") -> torch.Tensor:
    """4-D additive mask for verifying [root] + N tree nodes after a cached prefix.

    Args:
        parents: int64 (N,) tree parents.
        prefix_len: P, tokens already in the KV cache (all visible).
        dtype: float dtype of the model (mask values 0 / dtype min).

    Returns:
        float (1, 1, N+1, P+N+1): prefix fully visible; the root sees itself; a node sees the
        root, its ancestors and itself. A bool mask is silently wrong under eager attention.
    """
    n = int(parents.numel())
    allowed = torch.zeros(n + 1, n + 1, dtype=torch.bool)
    allowed[:, 0] = True
    allowed[1:, 1:] = ancestor_mask(parents)
    return additive_mask(allowed, prefix_len, dtype, device)


def additive_mask(allowed: torch.Tensor, prefix_len: int, dtype: torch.dtype,
                  device: torch.device | str = "cpu") -> torch.Tensor:
    """bool (q, k) block after a fully visible prefix -> float (1, 1, q, prefix_len + k)."""
    q, k = allowed.shape
    mask = torch.zeros(q, prefix_len + k, dtype=dtype)
    mask[:, prefix_len:].masked_fill_(~allowed, torch.finfo(dtype).min)
    return mask.to(device)[None, None]
