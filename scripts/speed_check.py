"""Speed as a new user meets it: `python -m specvlm generate --compare --json` in cold processes, interleaved.

Each round runs every case once, each in a fresh Python process (model load, first-call costs and all), with the
CLI's default settings unless a case names others; rounds interleave the cases so that a slow minute of the
machine hits all of them alike. Every run compares SpecVLM with vanilla on the same input (the CLI's ``--compare``:
vanilla on the fastest engine), so a ratio never mixes two processes.

Reported per case and overall: decode speedup (vanilla decode time / SpecVLM decode time, the paper's definition),
end-to-end speedup (vanilla's whole request / SpecVLM's, prefill, scoring, pruning and the draft's prefill
included), τ and whether the texts are token-identical. ``--busy N`` keeps N pure-Python spinning processes
running during the rounds (a machine whose cores other work keeps busy).

Examples (from the repository root):
    python -m scripts.speed_check --rounds 3 --out docs/bench/speed_check_idle.json
    python -m scripts.speed_check --rounds 3 --busy 2 --out docs/bench/speed_check_busy.json
    python -m scripts.speed_check --stream-only --rounds 3    # the page's "Watch it stream" example only
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VIDEOS = ROOT / "assets" / "videos"


@dataclass(frozen=True)
class Case:
    """One input: a clip, its subtitles (if any) and extra CLI flags."""

    name: str
    video: str
    args: tuple[str, ...] = ()


@dataclass
class Run:
    """One cold ``generate --compare --json`` run (times in s)."""

    case: str
    round: int
    speedup: float
    e2e_speedup: float
    tau: float
    tokens: int
    identical: bool
    decode_s: float
    vanilla_decode_s: float
    total_s: float
    vanilla_total_s: float
    wall_s: float


@dataclass
class Summary:
    """Medians and extremes over runs."""

    runs: int
    identical: int
    median_speedup: float
    min_speedup: float
    median_e2e_speedup: float
    per_case: dict = field(default_factory=dict)


def default_cases(stream_only: bool = False) -> list[Case]:
    """The app's examples as CLI runs: the bundled clips (with their subtitles) and gradio's ``world.mp4``, or only
    the "Watch it stream" example (``shapes_short.mp4``, 512 new tokens, fixed length)."""
    stream = Case("watch-it-stream", str(VIDEOS / "shapes_short.mp4"), ("--max-new-tokens", "512", "--no-eos"))
    if stream_only:
        return [stream]
    cases = []
    for clip in sorted(VIDEOS.glob("*.mp4")):
        srt = clip.with_suffix(".srt")
        cases.append(Case(clip.name, str(clip), ("--srt", str(srt)) if srt.exists() else ()))
    try:
        import gradio
        world = Path(gradio.__file__).parent / "media_assets" / "videos" / "world.mp4"
        if world.exists():
            cases.append(Case("world.mp4", str(world)))
    except ImportError:
        pass
    return cases + [stream]


def run_once(case: Case, rnd: int, extra: list[str], timeout_s: float) -> Run:
    """One cold process. Raises RuntimeError with the CLI's last error line when it fails."""
    cmd = [sys.executable, "-m", "specvlm", "generate", "--video", case.video, "--compare", "--json",
           *case.args, *extra]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, cwd=ROOT,
                          env={**__import__("os").environ, "HF_HUB_OFFLINE": "1"})
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(no message)"])[-1]
        raise RuntimeError(f"{case.name}: generate failed ({done.returncode}): {last}")
    d = json.loads(done.stdout)
    v = d["vanilla"]
    return Run(case=case.name, round=rnd, speedup=float(d["speedup"]),
               e2e_speedup=round(v["total_s"] / d["total_s"], 4), tau=float(d["tau"]), tokens=int(d["tokens"]),
               identical=bool(d["identical"]), decode_s=d["decode_s"], vanilla_decode_s=v["decode_s"],
               total_s=d["total_s"], vanilla_total_s=v["total_s"], wall_s=round(wall, 3))


def summarise(runs: list[Run]) -> Summary:
    """Median and minimum decode speedup, median end-to-end speedup, overall and per case."""
    def block(rs: list[Run]) -> dict:
        return {"runs": len(rs), "identical": sum(r.identical for r in rs),
                "median_speedup": round(statistics.median(r.speedup for r in rs), 3),
                "min_speedup": round(min(r.speedup for r in rs), 3),
                "median_e2e_speedup": round(statistics.median(r.e2e_speedup for r in rs), 3),
                "median_tau": round(statistics.median(r.tau for r in rs), 2)}
    overall = block(runs)
    per_case = {c: block([r for r in runs if r.case == c]) for c in dict.fromkeys(r.case for r in runs)}
    return Summary(runs=overall["runs"], identical=overall["identical"], median_speedup=overall["median_speedup"],
                   min_speedup=overall["min_speedup"], median_e2e_speedup=overall["median_e2e_speedup"],
                   per_case=per_case)


def render(summary: Summary, machine: str) -> str:
    """A markdown table of the summary with its ``Machine:`` line."""
    lines = ["| case | runs | identical | decode speedup (median, min) | end to end (median) | τ |",
             "|---|---|---|---|---|---|"]
    for c, b in summary.per_case.items():
        lines.append(f"| {c} | {b['runs']} | {b['identical']} | {b['median_speedup']:.2f}x, {b['min_speedup']:.2f}x "
                     f"| {b['median_e2e_speedup']:.2f}x | {b['median_tau']:.2f} |")
    lines.append(f"| **all** | {summary.runs} | {summary.identical} | **{summary.median_speedup:.2f}x**, "
                 f"{summary.min_speedup:.2f}x | {summary.median_e2e_speedup:.2f}x | |")
    return "\n".join(lines + ["", machine])


def main(argv=None) -> int:
    class Fmt(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
        """The docstring as written, and every default."""

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=Fmt)
    ap.add_argument("--rounds", type=int, default=3, help="runs per case, interleaved")
    ap.add_argument("--busy", type=int, default=0, help="busy spinning processes during the rounds")
    ap.add_argument("--stream-only", action="store_true", help="only the 'Watch it stream' case")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds one run may take")
    ap.add_argument("--out", default=None, help="write runs, summary and machine to this JSON file")
    ap.add_argument("extra", nargs=argparse.REMAINDER,
                    help="after --: flags passed to every generate call (e.g. -- --model DIR --draft DIR)")
    args = ap.parse_args(argv)
    if args.rounds < 1 or args.busy < 0:
        ap.error("--rounds must be >= 1 and --busy >= 0")
    extra = [a for a in args.extra if a != "--"]
    from specvlm.bench.load import BackgroundLoad
    from specvlm.bench.machine import machine_info
    from specvlm.bench.report import machine_line

    cases = default_cases(args.stream_only)
    meta = {"machine": machine_info(), "cpu_count": __import__("os").cpu_count(), "date": time.strftime("%Y-%m-%d")}
    runs: list[Run] = []
    with BackgroundLoad(args.busy) as load:
        for rnd in range(args.rounds):
            for case in cases:
                run = run_once(case, rnd, extra, args.timeout)
                runs.append(run)
                print(f"round {rnd + 1}/{args.rounds} {case.name}: {run.speedup:.2f}x decode, "
                      f"{run.e2e_speedup:.2f}x end to end, τ {run.tau:.2f}, "
                      f"{'identical' if run.identical else 'DIFFERENT'}", file=sys.stderr, flush=True)
    meta["background_load"] = load.summary.as_dict() if load.summary else None
    summary = summarise(runs)
    machine = machine_line(meta)
    print(render(summary, machine))
    if args.out:
        Path(args.out).write_text(json.dumps({"command": "python -m scripts.speed_check " + " ".join(
            argv if argv is not None else sys.argv[1:]), "meta": meta, "summary": asdict(summary),
            "runs": [asdict(r) for r in runs]}, indent=1) + "\n")
    return 0 if summary.identical == summary.runs else 1


if __name__ == "__main__":
    sys.exit(main())
