"""``python -m specvlm.cli.stepcost``: draft level / target decode step cost ratios on a preset (JSON lines).

Source: :func:`specvlm.bench.stepcost.draft_cost`.
"""
from __future__ import annotations

from specvlm.bench.stepcost import draft_cost


def main(argv: list[str] | None = None) -> int:
    """``python -m specvlm.cli.stepcost``: draft level / target step ratios on a preset, as JSON lines."""
    import argparse
    import dataclasses
    import json

    from specvlm.models.loading import load_pair
    from specvlm.models.presets import PRESETS, default_preset_name
    from specvlm.engine.threads import configure

    p = argparse.ArgumentParser(prog="python -m specvlm.cli.stepcost", description=main.__doc__)
    p.add_argument("--preset", default=default_preset_name(), choices=sorted(PRESETS))
    p.add_argument("--video-tokens", type=int, nargs="+", default=[768, 16384])
    p.add_argument("--text-tokens", type=int, default=40, help="prompt tokens besides the video")
    p.add_argument("--drop-rate", type=float, default=0.9, help="share of video tokens the draft does not see")
    p.add_argument("--width", type=int, default=4, help="nodes per measured draft level")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--slow", action="store_true", help="measure the module-stack DraftRunner too")
    p.add_argument("--threads", default=None, help="torch threads (default: specvlm.engine.threads policy)")
    a = p.parse_args(argv)
    choice = configure(a.threads)
    preset = PRESETS[a.preset]
    pair = load_pair(preset.target, preset.draft)
    for v in a.video_tokens:
        for fast in ((True, False) if a.slow else (True,)):
            c = draft_cost(pair, v + a.text_tokens, max(1, round(v * (1 - a.drop_rate))) + a.text_tokens,
                           width=a.width, fast=fast, rounds=a.rounds)
            print(json.dumps({"video_tokens": v, "threads": choice.describe(), **dataclasses.asdict(c)}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
