#!/usr/bin/env python
"""The failure-case figures of docs/app.md (and, in brief, the README), regenerated through the app's backend.

Runs the page's failure-case example (:func:`app.page.examples.failure_example`: ``shapes_subtitles`` with its
``.srt``, the bundled sparse target drafting for itself at its preset's settings) as the page runs it, once
with the transcript withheld from the draft (the example's subtitle mode) and once given to both, and prints
what docs/app.md says about it: τ of each, the first rows of the Inspect tab's lowest-acceptance table with
the explanation of each (:mod:`specvlm.analysis.why`), and, with ``--timing-pairs``, the median speedup of
each over ``--rounds`` rounds (timings are noisy: report their spread, never one number alone).

``tests/test_failure_case.py`` runs :func:`figures` without timing and compares it with docs/app.md
and the README.

Example:
    python -m scripts.failure_case_figures --timing-pairs 5 --rounds 3
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from typing import Any

MODES = ("target", "both")
"""Subtitle modes compared: withheld from the draft (the example's), given to both models."""


def run_case(backend: Any, mode: str, timing_pairs: int = 1, rows: int = 3) -> dict[str, Any]:
    """One run of the failure-case example through ``backend`` (an :class:`app.runs.backend.Backend`).

    Args:
        mode: the subtitle mode (``target``: withheld from the draft; ``both``).
        timing_pairs: the page's *Timing runs* (interleaved vanilla / speculative pairs).
        rows: how many rows of the lowest-acceptance table to report.

    Returns:
        ``{"tau", "identical", "text", "speedup", "speedup_runs", "rows": [{"step", "accepted", "text",
        "explanation", "shares"}]}``; ``explanation`` / ``shares`` are None for a step not explained.

    Raises:
        RuntimeError: the example is missing (no sparse pair or clip) or the run did not finish.
    """
    from app.inputs.settings import RunRequest, RunSettings
    from app.page.examples import EXAMPLE_COLUMNS, example_rows, failure_example
    from app.views.inspect_view import lowest_table
    from app.views.summary import comparison_json
    from specvlm.models.presets import PRESETS

    found = example_rows(failure_example(), 128)
    if not found:
        raise RuntimeError("the failure-case example is missing (assets/videos/shapes_subtitles.* or "
                           "assets/model_sparse).")
    ex = dict(zip(EXAMPLE_COLUMNS, found[0]))
    preset = PRESETS[ex["preset"]]
    t = preset.tree
    settings = RunSettings(preset=ex["preset"], subtitle_mode=mode, max_new_tokens=ex["max_new_tokens"],
                           fixed_length=ex["fixed_length"], num_frames=preset.num_frames, timing_pairs=timing_pairs,
                           tree_shape=t.shape, depth=t.depth, top_k=t.top_k, total_tokens=t.total_tokens,
                           min_prob=t.min_prob)
    views: list[Any] = []
    request = RunRequest(video=ex["video"], prompt=ex["prompt"], settings=settings, srt=ex["srt"], truth=ex["truth"])
    for _ in backend.run(request, views=views):
        pass
    if not views or views[0].record is None or views[0].failure:
        raise RuntimeError(f"the failure-case run did not finish: {views[0].failure if views else 'not started'}")
    view = views[0]
    out = comparison_json(view)
    why = {int(w["step"]): w for w in view.record.why or []}
    table = [{"step": int(r[0]), "accepted": int(r[1]), "text": r[4],
              "explanation": why.get(int(r[0]), {}).get("explanation"), "shares": why.get(int(r[0]), {}).get("shares")}
             for r in lowest_table(view.record)[:rows]]
    return {"tau": round(float(out["tau"]), 2), "identical": out["identical"], "text": out["speculative"]["text"],
            "speedup": out["speedup"], "speedup_runs": out["speedup_runs"], "rows": table}


def figures(backend: Any, timing_pairs: int = 1, rounds: int = 1) -> dict[str, Any]:
    """:func:`run_case` for both :data:`MODES`, ``rounds`` times each (interleaved), with the speedups'
    medians per round gathered in ``"speedups"`` (only when ``timing_pairs`` > 1)."""
    out: dict[str, Any] = {}
    for r in range(rounds):
        for mode in MODES:
            got = run_case(backend, mode, timing_pairs)
            first = out.setdefault(mode, got | {"speedups": []})
            if got["tau"] != first["tau"] or got["rows"] != first["rows"]:
                raise RuntimeError(f"round {r + 1} differs from round 1 in mode {mode!r}: {got} vs {first}")
            if timing_pairs > 1 and got["speedup"] is not None:
                first["speedups"].append(got["speedup"])
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--timing-pairs", type=int, default=1, help="the page's Timing runs (1: no timing)")
    ap.add_argument("--rounds", type=int, default=1, help="repeat each mode this many times (timing spread)")
    args = ap.parse_args(argv)
    from app.runs.backend import Backend
    from app.runs.facade import SpecvlmFacade

    fig = figures(Backend(SpecvlmFacade(), device="cpu", dtype="float32"), args.timing_pairs, args.rounds)
    print(json.dumps(fig, indent=1))
    for mode in MODES:
        s = fig[mode]["speedups"]
        if s:
            print(f"{mode}: speedup median of rounds {statistics.median(s):.2f}x, range {min(s):.2f}-{max(s):.2f}x "
                  f"({len(s)} rounds of {args.timing_pairs} pairs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
