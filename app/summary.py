"""The comparison's summary, for the page (:func:`summary_md`, Markdown) and for scripts
(:func:`comparison_json`, one JSON-ready object): speedup (one pair, or the median of interleaved
timing pairs, with its caveat), τ, tokens per target forward, prefill, kept video tokens, and whether
the outputs are identical or where they first differ.

Source: SpecVLM (arXiv 2508.16201) Sec. 4.12 (τ, tokens per forward, speedup); docs/design.md §1 (the app).
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from app.worker import Outcome

if TYPE_CHECKING:
    from app.view import RunProgress, RunView


@dataclasses.dataclass(frozen=True)
class Speed:
    """The decode speedup a summary reports.

    Attributes:
        speedup: tokens/s of the speculative run over the vanilla run's; the median over the
            interleaved pairs when there are several (None until both runs finished).
        runs: each pair's speedup (the first pair's first).
        note: :func:`app.timing.speed_note` ("" when nothing says the figure is noisy).
    """

    speedup: float | None
    runs: list[float]
    note: str


def summary_md(van: RunProgress, spec: RunProgress, dec: Any = None, outcome: Outcome | None = None,
               speed: Speed | None = None) -> str:
    """The comparison summary (Markdown): speedup, τ, tokens/forward, prefill, kept tokens,
    identical or first divergence, and a timing caveat when the speedup is noisy.

    Args:
        van: the vanilla run.  spec: the speculative run.  dec: the DecodeConfig.
        outcome: the worker's comparison of the two outputs (None: not compared).
        speed: the speedup over interleaved pairs and its caveat (None: this pair's tokens/s ratio).
    """
    if not van.counts and not spec.counts:
        return ""
    rows = ["| | Vanilla | " + spec.name + " |", "|---|---|---|",
            f"| decode time | {van.elapsed:.2f} s | {spec.elapsed:.2f} s |",
            f"| tokens | {last(van.counts)} | {last(spec.counts)} |",
            f"| tokens/s | {van.tokens_per_s:.1f} | {spec.tokens_per_s:.1f} |",
            f"| prefill | {_prefill(van)} | {_prefill(spec)} |"]
    facts = []
    if speed is not None and speed.speedup is not None and len(speed.runs) > 1:
        spread = f"{min(speed.runs):.2f}-{max(speed.runs):.2f}x"
        facts.append(f"**Decode speedup {speed.speedup:.2f}x** (median of {len(speed.runs)} interleaved pairs of "
                     f"runs, {spread})")
    elif van.tokens_per_s > 0 and spec.tokens_per_s > 0:
        so_far = "" if van.done and spec.done else " so far, before a run finished"
        facts.append(f"**Decode speedup {spec.tokens_per_s / van.tokens_per_s:.2f}x** (tokens/s ratio{so_far})")
    if spec.accept:
        facts.append(f"τ = **{spec.tau:.2f}**")
        facts.append(f"**{spec.tokens_per_forward:.2f}** tokens / target forward")
    p = spec.prefill
    if p is not None and p.num_kept is not None:
        r = 1 - p.num_kept / max(1, p.num_video_tokens)
        facts.append(f"video tokens **{p.num_video_tokens} → {p.num_kept}** kept (dropped {r:.0%})")
        if p.num_forced:
            facts.append(f"kept **{p.num_forced}** on-screen-text token{'s' if p.num_forced != 1 else ''} (forced)")
    lines = ["\n".join(rows), "", " · ".join(facts), ""]
    if speed is not None and speed.note:
        lines += [f"*{speed.note}*", ""]
    sampling = getattr(dec, "sampling", None)
    if sampling is not None and not sampling.greedy:
        lines.append(f"Sampling (temperature {sampling.temperature:g}, nucleus {sampling.top_p_sampling:g}, seed "
                     f"{sampling.seed}): both runs draw from the same target distribution (exact, by recursive "
                     "rejection sampling), but with different random draws, so token-by-token identity is not "
                     "expected.")
    else:
        lines.append(_identity(van, spec, outcome))
    return "\n".join(lines)


def _identity(van: RunProgress, spec: RunProgress, outcome: Outcome | None) -> str:
    if not (van.done and spec.done) or outcome is None:
        return "Outputs not compared: a run did not finish."
    if outcome.index is None:
        return f"**Outputs identical** ✓ ({outcome.num_tokens} tokens): speculative decoding was lossless."
    head = (f"**Outputs differ from token {outcome.index}** (vanilla …{outcome.vanilla_context!r} vs speculative "
            f"…{outcome.spec_context!r})")
    if outcome.margin is None:
        return (f"{head}: a **mismatch** (vanilla recorded no logit margin there). Low-precision (bf16/fp16) "
                "verification can flip near-ties; fp32 should match exactly.")
    margin = f"the target's top-1 minus top-2 logit margin there is {outcome.margin:.3g}"
    if outcome.kind == "near-tie":
        return (f"{head}: a **near-tie** ({margin}, below {outcome.threshold:g} for {outcome.dtype}): batched "
                "verification rounds differently and may flip it; lossless up to the dtype's rounding.")
    return (f"{head}: a **mismatch** ({margin}, not below {outcome.threshold:g} for {outcome.dtype}): not a "
            "rounding flip.")


def _prefill(st: RunProgress) -> str:
    p = st.prefill
    if p is None:
        return "–"
    s = f"{p.prefill_s:.2f} s"
    if p.num_kept is not None:
        s += f" (+ prune & draft prefill {p.prune_s + p.draft_prefill_s:.2f} s)"
    return s


def last(xs: list[int]) -> int:
    """The last element (0 for an empty list)."""
    return xs[-1] if xs else 0


def comparison_json(view: RunView | None, error: str | None = None, stopped: bool = False) -> dict[str, Any]:
    """One Run as one JSON-ready object (the ``/compare_json`` endpoint).

    Args:
        view: the run's view (None when the run failed before decoding).
        error: the readable error message, or None.
        stopped: the run was stopped.

    Returns:
        ``{"status": "done" | "stopped" | "error", "error", "notes", "caveat" (e.g. the bundled model on a
        real video, else None), "vanilla": {...}, "speculative": {...},
        "identical", "divergence": {"index", "kind", "margin", "threshold", "dtype"} or None, "speedup" (the
        median over the interleaved pairs when several ran), "speedup_runs" (each pair's), "speed_note" (why the
        speedup may be noisy, or None), "other_cpu_cores" (other processes' CPU use during the runs, or None),
        "tau", "accept_lengths", "video_tokens", "kept_tokens", "forced_tokens"}``; each run holds ``text``,
        ``token_ids``, ``tokens``, ``decode_s``, ``tokens_per_s`` and ``prefill_s`` (seconds).

    Source: SpecVLM (arXiv 2508.16201) Sec. 4.12 (τ, speedup); docs/design.md §1 (the app).
    """
    status = "error" if error else "stopped" if stopped else "done"
    out: dict[str, Any] = {"status": status, "error": error, "notes": [], "caveat": None, "vanilla": None,
                           "speculative": None,
                           "identical": None, "divergence": None, "speedup": None, "speedup_runs": [],
                           "speed_note": None, "other_cpu_cores": None, "tau": None,
                           "accept_lengths": [], "video_tokens": None, "kept_tokens": None, "forced_tokens": 0}
    if view is None:
        return out
    van, spec = view.runs["vanilla"], view.runs["spec"]
    out["notes"] = [n for n in [view.prompt_note, *view.notes] if n]
    out["caveat"] = view.caveat.replace("**", "") or None
    out["vanilla"], out["speculative"] = _run_json(van), _run_json(spec)
    out["speculative"]["method"] = getattr(view.dec, "method", None)
    speed = view.speed()
    if speed.speedup is not None:
        out["speedup"] = round(speed.speedup, 4)
        out["speedup_runs"] = [round(r, 4) for r in speed.runs]
    out["speed_note"] = speed.note or None
    out["other_cpu_cores"] = view.load.other_cores if view.load else None
    out["tau"] = round(spec.tau, 4) if spec.accept else None
    out["accept_lengths"] = list(spec.accept)
    p = spec.prefill
    if p is not None:
        out["video_tokens"], out["kept_tokens"], out["forced_tokens"] = p.num_video_tokens, p.num_kept, p.num_forced
    o = view.outcome
    if o is not None and van.done and spec.done:
        out["identical"] = o.index is None
        if o.index is not None:
            out["divergence"] = {"index": o.index, "kind": o.kind, "margin": o.margin, "threshold": o.threshold,
                                 "dtype": o.dtype}
    return out


def _run_json(st: RunProgress) -> dict[str, Any]:
    return {"text": st.text, "token_ids": [int(t) for t in st.ids], "tokens": last(st.counts),
            "decode_s": round(st.elapsed, 4), "tokens_per_s": round(st.tokens_per_s, 3),
            "prefill_s": None if st.prefill is None else round(st.prefill.prefill_s, 4), "done": st.done}
