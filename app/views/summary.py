"""The comparison's summary, for the page (:func:`summary_md`, Markdown) and for scripts
(:func:`comparison_json`, one JSON-ready object): speedup (one pair, or the median of interleaved
timing pairs, with its caveat), τ, tokens per target forward, prefill, kept video tokens, and whether
the outputs are identical or where they first differ.

Source: SpecVLM (arXiv 2508.16201) Sec. 4.12 (τ, tokens per forward, speedup); docs/design.md §1 (the app).
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from app.views.race import end_to_end_speedup, lane
from specvlm.analysis.run import Comparison, run_speedup

if TYPE_CHECKING:
    from app.views.run_view import RunPanel, RunView


@dataclasses.dataclass(frozen=True)
class Speed:
    """The decode speedup a summary reports.

    Attributes:
        speedup: the decode speedup (:func:`specvlm.analysis.metrics.speedup`); the median over the
            interleaved pairs when there are several (None until both runs finished).
        runs: each pair's speedup (the first pair's first).
        note: :func:`app.runs.timing.speed_note` ("" when nothing says the figure is noisy).
    """

    speedup: float | None
    runs: list[float]
    note: str


def summary_md(van: RunPanel, spec: RunPanel, dec: Any = None, comparison: Comparison | None = None,
               speed: Speed | None = None) -> str:
    """The comparison summary (Markdown): speedup, τ, tokens/forward, prefill, kept tokens,
    identical or first divergence, and a timing caveat when the speedup is noisy.

    Args:
        van: the vanilla panel.  spec: the speculative panel.  dec: the DecodeConfig.
        comparison: the library's comparison of the two finished runs (None: not compared).
        speed: the speedup over interleaved pairs and its caveat (None: this pair's speedup so far).
    """
    v, s = van.record, spec.record
    if not v.steps and not s.steps:
        return ""
    v_sum, s_sum = v.summary, s.summary
    rows = ["| | Vanilla | " + spec.name + " |", "|---|---|---|",
            f"| decode time | {v_sum.decode_s:.2f} s | {s_sum.decode_s:.2f} s |",
            f"| tokens | {v.num_generated} | {s.num_generated} |",
            f"| tokens/s | {v_sum.tokens_per_s:.1f} | {s_sum.tokens_per_s:.1f} |",
            f"| prefill | {_prefill(v)} | {_prefill(s)} |"]
    facts = []
    so_far = run_speedup(v, s)
    if speed is not None and speed.speedup is not None and len(speed.runs) > 1:
        spread = f"{min(speed.runs):.2f}-{max(speed.runs):.2f}x"
        facts.append(f"**Decode speedup {speed.speedup:.2f}x** (median of {len(speed.runs)} interleaved pairs of "
                     f"runs, {spread})")
    elif so_far is not None:
        when = "" if van.done and spec.done else " so far, before a run finished"
        facts.append(f"**Decode speedup {so_far:.2f}x** (tokens/s ratio{when})")
    e2e = end_to_end(van, spec)
    if e2e is not None:
        pair = ", the first pair" if speed is not None and len(speed.runs) > 1 else ""
        facts.append(f"**end to end {e2e:.2f}x** (prefill included{pair})")
    if s_sum.accept_lengths:
        facts.append(f"τ = **{s_sum.tau:.2f}**")
        facts.append(f"**{s_sum.tokens_per_target_forward:.2f}** tokens / target forward")
    if s.prefill is not None and s.num_kept is not None:
        r = 1 - s.num_kept / max(1, s.num_video_tokens)
        facts.append(f"video tokens **{s.num_video_tokens} → {s.num_kept}** kept (dropped {r:.0%})")
        if s.num_forced:
            facts.append(f"kept **{s.num_forced}** on-screen-text token{'s' if s.num_forced != 1 else ''} (forced)")
        facts += _beyond(s, dec)
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
        lines.append(_identity(van, spec, comparison))
    return "\n".join(lines)


def end_to_end(van: RunPanel, spec: RunPanel) -> float | None:
    """The end-to-end speedup of the two finished runs shown (:func:`app.views.race.end_to_end_speedup`: prefill,
    scoring, pruning and draft prefill included), or None until both finished."""
    if not (van.done and spec.done):
        return None
    lanes = lane(van.name, van.record), lane(spec.name, spec.record)
    return None if None in lanes else end_to_end_speedup(*lanes)


def _beyond(s: Any, dec: Any) -> list[str]:
    """Facts on adaptive r (the r used and why) and re-selection (tokens added, at how many steps) when on."""
    out = []
    if getattr(getattr(dec, "prune", None), "adaptive_r", False) and s.prefill.r_reason:
        out.append(f"adaptive r = **{s.r_used:.3f}** ({s.prefill.r_reason.rstrip('.')})")
    if getattr(getattr(dec, "reselect", None), "enabled", False):
        fired = s.added_per_step
        out.append(f"re-selection added **{s.num_added}** video tokens at {len(fired)} step"
                   f"{'s' if len(fired) != 1 else ''}")
    return out


def _identity(van: RunPanel, spec: RunPanel, c: Comparison | None) -> str:
    if not (van.done and spec.done) or c is None:
        return "Outputs not compared: a run did not finish."
    d = c.divergence
    if d.identical:
        return (f"**Outputs identical** ✓ ({len(van.record.token_ids)} tokens): speculative decoding was "
                "lossless.")
    head = (f"**Outputs differ from token {d.index}** (vanilla …{c.vanilla_context!r} vs speculative "
            f"…{c.spec_context!r})")
    if d.margin is None:
        return (f"{head}: a **mismatch** (vanilla recorded no logit margin there). Low-precision (bf16/fp16) "
                "verification can flip near-ties; fp32 should match exactly.")
    margin = f"the target's top-1 minus top-2 logit margin there is {d.margin:.3g}"
    if d.kind == "near-tie":
        return (f"{head}: a **near-tie** ({margin}, below {d.threshold:g} for {c.dtype}): batched "
                "verification rounds differently and may flip it; lossless up to the dtype's rounding.")
    return (f"{head}: a **mismatch** ({margin}, not below {d.threshold:g} for {c.dtype}): not a "
            "rounding flip.")


def _prefill(rec: Any) -> str:
    p = rec.prefill
    if p is None:
        return "–"
    s = f"{p.prefill_s:.2f} s"
    if rec.num_kept is not None:
        s += f" (+ prune & draft prefill {p.prune_s + p.draft_prefill_s:.2f} s)"
    return s


def comparison_json(view: RunView | None, error: str | None = None, stopped: bool = False) -> dict[str, Any]:
    """One Run as one JSON-ready object (the ``/compare_json`` endpoint).

    Args:
        view: the run's view (None when the run failed before decoding).
        error: the readable error message, or None.
        stopped: the run was stopped.

    Returns:
        ``{"status": "done" | "stopped" | "error", "error", "notes", "caveat" (e.g. the bundled model on a
        real video, else None), "vanilla": {...}, "speculative": {...}`` (each the run record's
        :meth:`~specvlm.analysis.run.RunRecord.run_json` and ``done``), the comparison
        (:meth:`~specvlm.analysis.run.Comparison.to_json`: ``identical``, ``divergence``, ``speedup``, the
        median over the interleaved pairs when several ran, ``speedup_runs``; None / [] until both runs
        finished), ``"end_to_end_speedup"`` (the shown pair's, prefill included, :func:`end_to_end`, or None),
        ``"speed_note"`` (why the speedup may be noisy, or None), ``"other_cpu_cores"`` (other
        processes' CPU use during the runs, or None), and the speculative run's ``"tau"``,
        ``"accept_lengths"``, ``"video_tokens"``, ``"kept_tokens"`` and ``"forced_tokens"``, as the CLI's.

    Source: SpecVLM (arXiv 2508.16201) Sec. 4.12 (τ, speedup); docs/design.md §1, §3 (the run record).
    """
    status = "error" if error else "stopped" if stopped else "done"
    out: dict[str, Any] = {"status": status, "error": error, "notes": [], "caveat": None, "vanilla": None,
                           "speculative": None,
                           "identical": None, "divergence": None, "speedup": None, "speedup_runs": [],
                           "end_to_end_speedup": None,
                           "speed_note": None, "other_cpu_cores": None, "tau": None,
                           "accept_lengths": [], "video_tokens": None, "kept_tokens": None, "forced_tokens": 0}
    if view is None:
        return out
    van, spec = view.runs["vanilla"], view.runs["spec"]
    out["notes"] = [n for n in [view.prompt_note, *view.notes] if n]
    out["caveat"] = view.caveat.replace("**", "") or None
    out["vanilla"], out["speculative"] = (p.record.run_json() | {"done": p.done} for p in (van, spec))
    out["speculative"]["method"] = getattr(view.dec, "method", None)
    c = view.comparison
    if c is not None and van.done and spec.done:
        out.update(c.to_json())
    e2e = end_to_end(van, spec)
    out["end_to_end_speedup"] = None if e2e is None else round(e2e, 4)
    out["speed_note"] = view.speed().note or None
    out["other_cpu_cores"] = view.load.other_cores if view.load else None
    rec = spec.record
    out["tau"] = rec.tau if rec.accept_lengths else None
    out["accept_lengths"] = list(rec.accept_lengths)
    if rec.prefill is not None:
        out["video_tokens"], out["kept_tokens"], out["forced_tokens"] = rec.num_video_tokens, rec.num_kept, \
            rec.num_forced
    return out
