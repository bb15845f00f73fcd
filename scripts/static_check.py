#!/usr/bin/env python
"""The decoding engine on the bundled pair: identical tokens, host reads per step, decode tokens/s.

For each clip, vanilla, SpecVLM (the bundled Std-SD tree) and SpecVLM with re-selection run in
interleaved rounds on the same prepared inputs; the script checks that all three outputs are
token-identical, counts host reads per decode step
(:class:`specvlm.runtime.hostreads.HostReadCounter`) and prints median decode tokens/s. On CUDA the
static steps are captured in CUDA graphs once per request; the capture time is logged by
:mod:`specvlm.engine.loop` and is not part of the decode time.

Usage:
    python -m scripts.static_check                         # CPU, shapes_short + shapes_long
    python -m scripts.static_check --device cuda --dtype bfloat16 --rounds 5
"""
from __future__ import annotations

import argparse
import json
import logging
import statistics


from specvlm import assets
from specvlm.config import BUNDLED_STD_TREE, DecodeConfig, ReselectConfig, VideoConfig
from specvlm.runtime.hostreads import HostReadCounter
from specvlm.engine.measures import tokens_per_second
from specvlm.engine.prepare import prepare
from specvlm.engine.stream import generate
from specvlm.models.loading import load_pair
from specvlm.models.presets import BUNDLED_DRAFT, BUNDLED_TARGET
from specvlm.video import load_video

PROMPT = "Describe this video in detail."


def _reads(pair, inputs, cfg) -> float:
    """Host reads per decode step (the prefill and step 0 excluded)."""
    from specvlm.engine.stream import stream
    from specvlm.types import StepEvent

    counter, steps = HostReadCounter(), 0
    for ev in stream(pair, inputs, cfg):
        if isinstance(ev, StepEvent):
            if ev.step == 0:
                counter.__enter__()
            else:
                steps += 1
    counter.__exit__(None, None, None)
    return counter.count / max(steps, 1)


def check_clip(pair, name: str, rounds: int, max_new: int) -> dict:
    """One clip's rows: per run (vanilla, specvlm, specvlm+reselect) median decode s, tokens/s, reads per step;
    identical flag."""
    clip = load_video(assets.path("videos", f"{name}.mp4"), VideoConfig(num_frames=32))
    inputs = prepare(pair, clip, PROMPT)
    configs = {"vanilla": DecodeConfig(method="vanilla", max_new_tokens=max_new),
               "specvlm": DecodeConfig(max_new_tokens=max_new, tree=BUNDLED_STD_TREE),
               "specvlm+reselect": DecodeConfig(max_new_tokens=max_new, tree=BUNDLED_STD_TREE,
                                                reselect=ReselectConfig(enabled=True))}
    runs: dict[str, list] = {}
    for _ in range(rounds):
        for key, cfg in configs.items():
            runs.setdefault(key, []).append(generate(pair, inputs, cfg))
    ids = {k: v[0].token_ids for k, v in runs.items()}
    rows = {}
    for key, res in runs.items():
        dec = statistics.median(r.decode_s for r in res)
        rows[key] = {"decode_s": dec, "tokens_per_s": tokens_per_second(len(ids[key]), dec),
                     "reads_per_step": _reads(pair, inputs, configs[key])}
    return {"clip": name, "tokens": len(ids["vanilla"]),
            "identical": len({tuple(v) for v in ids.values()}) == 1, "rows": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-new", type=int, default=128)
    ap.add_argument("--clips", nargs="+", default=["shapes_short", "shapes_long"])
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    pair = load_pair(str(BUNDLED_TARGET), str(BUNDLED_DRAFT), device=args.device, dtype=args.dtype)
    out = [check_clip(pair, c, args.rounds, args.max_new) for c in args.clips]
    print(json.dumps({"device": str(pair.device), "dtype": args.dtype, "clips": out}, indent=1))


if __name__ == "__main__":
    main()
