"""The race: a replay of the two measured runs side by side, on one clock.

Vanilla and speculative decoding run one after the other on the same device (no contention), so the page
never sees them stream at the same time. Once both finished, the race puts each run on a clock that starts
at the run's own start: its prefill (vanilla: the target's; speculative: the target's with scoring, then
pruning and the draft's prefill), then each decode step's tokens at that step's measured time. Every time
comes from the run's record (:class:`specvlm.analysis.run.RunRecord`: the PrefillInfo's seconds and each
StepEvent's ``elapsed_s``); reading the video, which both runs share, is not part of either lane. The page's
script (:mod:`app.page.page_js`) plays the lanes from the data this module writes into the HTML and replays
them on *Replay the race*.

Source: SpecVLM (arXiv 2508.16201) Sec. 4.12 (decode speedup; end-to-end time includes prefill);
docs/design.md §4.12, §12 (what a user feels is the whole Run).
"""
from __future__ import annotations

import dataclasses
import html
import json
from typing import Any

from specvlm.analysis.metrics import speedup
from specvlm.analysis.run import RunRecord, run_speedup

REPLAY_LABEL = "Replay the race"
"""The race's replay button."""


@dataclasses.dataclass(frozen=True)
class Lane:
    """One run on the race clock (seconds from the run's start).

    Attributes:
        name: the panel's name (``Vanilla``, ``SpecVLM``).
        prefill_s: when decoding starts: the prefill's measured seconds (scoring, pruning and the draft's
            prefill included for a speculative run).
        times: per decode step, when its tokens appeared: ``prefill_s`` + the step's ``elapsed_s``.
        pieces: per decode step, (token text, accepted from the draft) of each token it emitted.
        finish_s: when the last token appeared (``prefill_s`` + the decode time).
        tokens: tokens generated, the prefill's token included.
    """

    name: str
    prefill_s: float
    times: list[float]
    pieces: list[list[tuple[str, bool]]]
    finish_s: float
    tokens: int


def lane(name: str, record: RunRecord) -> Lane | None:
    """The run of ``record`` on the race clock, or None before its prefill and first token.

    Source: docs/design.md §4.12 (decode time excludes prefill, scoring, pruning and draft prefill).
    """
    p = record.prefill
    if p is None or not record.steps:
        return None
    start = p.prefill_s + p.prune_s + p.draft_prefill_s
    pieces = []
    for s in record.steps:
        flags = list(s.from_draft) or [False] * len(s.token_ids)
        texts = s.pieces if len(s.pieces) == len(flags) else [s.text] + [""] * (len(flags) - 1)
        pieces.append([(t, bool(f)) for t, f in zip(texts, flags)] or [(s.text, False)])
    return Lane(name, start, [start + s.elapsed_s for s in record.steps], pieces, start + record.decode_s,
                record.num_generated)


def end_to_end_speedup(vanilla: Lane, spec: Lane) -> float | None:
    """Vanilla's whole-run time over the speculative run's, prefill included (per generated token when the
    lengths differ): :func:`specvlm.analysis.metrics.speedup` of the finish times."""
    return speedup(vanilla.finish_s, spec.finish_s, vanilla_tokens=vanilla.tokens, method_tokens=spec.tokens)


def race_data(vanilla: RunRecord, spec: RunRecord, names: tuple[str, str] = ("Vanilla", "SpecVLM")
              ) -> dict[str, Any] | None:
    """The race as plain JSON data for the page's script, or None unless both runs decoded.

    Returns:
        ``{"lanes": [{"name", "prefill_s", "finish_s", "tokens", "steps": [[time_s, [[text, from_draft], ...]],
        ...]}, ...] (vanilla first), "decode_speedup", "end_to_end_speedup"}`` (speedups None when unknown).
    """
    lanes = [lane(n, r) for n, r in zip(names, (vanilla, spec))]
    if None in lanes:
        return None
    return {"lanes": [{"name": ln.name, "prefill_s": ln.prefill_s, "finish_s": ln.finish_s, "tokens": ln.tokens,
                       "steps": [[t, [[x, d] for x, d in p]] for t, p in zip(ln.times, ln.pieces)]} for ln in lanes],
            "decode_speedup": run_speedup(vanilla, spec), "end_to_end_speedup": end_to_end_speedup(*lanes)}


def ratio_text(x: float | None) -> str:
    """``1.34x`` (or ``–`` when unknown)."""
    return "–" if x is None else f"{x:.2f}x"


def race_html(vanilla: RunRecord, spec: RunRecord, names: tuple[str, str] = ("Vanilla", "SpecVLM")) -> str:
    """The race block: what it replays, both finish times, the end-to-end and the decode speedup, a *Replay the
    race* button and both lanes (filled by the page's script from the ``data-race`` JSON); "" unless both
    runs decoded."""
    data = race_data(vanilla, spec, names)
    if data is None:
        return ""
    van, sp = data["lanes"]
    finish = " · ".join(f"**{html.escape(ln['name'])}** finished at **{ln['finish_s']:.2f} s** (prefill "
                        f"{ln['prefill_s']:.2f} s + decode {ln['finish_s'] - ln['prefill_s']:.2f} s)"
                        for ln in (van, sp))
    lanes = "".join(
        f'<div class="race-lane" data-lane="{i}"><div class="race-name"><b>{html.escape(ln["name"])}</b> '
        f'<span class="race-state">finished at {ln["finish_s"]:.2f} s</span></div>'
        f'<div class="race-track"><div class="race-prefill" style="width:0%"></div>'
        f'<div class="race-fill" style="width:0%"></div></div><div class="race-text"></div></div>'
        for i, ln in enumerate((van, sp)))
    verdict = (f"End to end (prefill included): {html.escape(sp['name'])} "
               f"{_verdict(data['end_to_end_speedup'], data['decode_speedup'])} · ") + \
              f"decode alone **{ratio_text(data['decode_speedup'])}**"
    return (f'<div class="specvlm-race" data-race="{html.escape(json.dumps(data), quote=True)}">'
            f'<div class="race-head"><span class="race-title"><b>The race</b>: a replay of the measured runs on '
            f'one clock from each run\'s start (prefill, then every token at its measured time; reading the video, '
            f'shared, is left out)</span> <button type="button" class="race-replay">{REPLAY_LABEL}</button> '
            f'<span class="race-clock">0.00 s</span></div>'
            f'<div class="race-lanes">{lanes}</div>'
            f'<div class="race-result">{_md_bold(finish)}<br>{_md_bold(verdict)}</div></div>')


def _verdict(e2e: float | None, decode: float | None = None) -> str:
    """How the speculative run did end to end against vanilla, in words and its ratio; why, when it lost: its
    longer prefill ate what decoding saved (decode speedup above 1), or decoding itself was slower."""
    if e2e is None:
        return "has no end-to-end time"
    if e2e >= 1:
        return f"**{ratio_text(e2e)}**, faster than vanilla"
    why = ("its prefill costs more than decoding saves" if decode is not None and decode >= 1
           else "its decoding was slower too")
    return f"**{ratio_text(e2e)}**, slower than vanilla ({why})"


def _md_bold(text: str) -> str:
    """``**x**`` -> ``<b>x</b>`` in an already safe string (names are escaped by the caller)."""
    parts = text.split("**")
    return "".join(f"<b>{p}</b>" if i % 2 else p for i, p in enumerate(parts))
