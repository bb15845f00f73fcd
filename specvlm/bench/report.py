"""Report writers: the printed markdown report, JSON, a self-contained HTML page and the sweep SVG.

The charts come from :mod:`specvlm.bench.charts` (plotly in the HTML page, matplotlib for the
static SVG).
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from specvlm.bench.charts import figures, sweep_svg
from specvlm.bench.goals import sampling_temperature
from specvlm.bench.records import by_size, row_divergence
from specvlm.bench.settings import PEERS

STEP_COST_NOISE_RATIO = 0.8
"""A verify(n) / decode ratio below this can only be timing noise (n >= 1 tokens over the same cache)."""


def machine_lines(meta: dict) -> list[str]:
    """The report's ``Machine:`` lines: one, or one per rank of a distributed run (``meta["ranks"]``)."""
    ranks = meta.get("ranks")
    if not ranks:
        line = machine_line(meta)
        return [line] if line else []
    lines = []
    for r in ranks:
        line = machine_line({**meta, **{k: r.get(k) for k in ("machine", "threads", "threads_used",
                                                                "background_load")}})
        n = len(r["inputs"])
        lines.append(line.replace("Machine:", f"Machine (rank {r['rank']}, {r['device']}, {n} input"
                                              f"{'s' if n != 1 else ''}):", 1))
    return lines


def machine_line(meta: dict) -> str:
    """The report's ``Machine:`` line from ``meta`` (empty when the report has no machine figures)."""
    mi = meta.get("machine")
    if not mi:
        return ""
    mhz = f" @ {mi['cpu_mhz']:.0f} MHz" if mi.get("cpu_mhz") else ""
    gpu = f", GPU {mi['gpu']}" if mi.get("gpu") else ""
    threads = (meta.get("threads") or {}).get("describe") or f"{mi['torch_threads']} torch threads"
    load = meta.get("background_load")
    busy = (f"; background load: {load['workers']} busy worker process{'es' if load['workers'] != 1 else ''} "
            f"({load['kind']}) during the rounds, {load['cpu_s']:.1f} CPU s over {load['wall_s']:.1f} s"
            if load else "")
    used = meta.get("threads_used") or {}
    start = (meta.get("threads") or {}).get("threads")
    adapted = (f"; timed runs per intra-op thread count: "
               + ", ".join(f"{k} thread{'s' if k != '1' else ''}: {v}" for k, v in used.items())
               + " (chosen per request from other processes' CPU use)"
               if len(used) > 1 or (used and start is not None and str(start) not in used) else "")
    return (f"Machine: {mi.get('cpu_model') or 'unknown CPU'}{mhz}, {meta.get('cpu_count')} CPUs, "
            f"{threads}{gpu}; right before the run: fp32 matmul "
            f"{mi['matmul_gflops']} GFLOP/s, memory copy {mi['copy_gb_per_s']} GB/s{busy}{adapted}")


def _cell(x: Any, nd: int = 2) -> str:
    if x is None:
        return "-"
    if isinstance(x, bool):
        return "yes" if x else "NO"
    if isinstance(x, float):
        return f"{x:.{nd}f}"
    return str(x)


def _identity_cell(r: dict, sampling: bool = False) -> str:
    if r["method"] == "vanilla":
        return "(reference)"
    if sampling and r["method"] not in PEERS:
        return "n/a (sampling)"
    if r["identical"] is None:
        return "-"
    if r["identical"]:
        return "yes"
    div = row_divergence(r) or {}
    if div.get("kind") == "near-tie":
        return f"near-tie (token {div['index']}, margin {div['margin']:.3g})"
    return f"NO (token {div.get('index')})"


def markdown_table(report: dict, name: str) -> str:
    """One input's results as a markdown table (times: s / ms, throughput: tokens/s, memory: MiB)."""
    head = ("| method | τ | tokens/target fwd | decode tokens/s | speedup (min-max) | e2e s | draft ms/step | "
            "verify ms/step | host reads/step | KV target / draft | peak MiB (Δ) | identical to vanilla |")
    lines = [head, "|" + "---|" * 12]
    sampling = sampling_temperature(report) > 0
    for r in report["results"]:
        if r["input"] != name:
            continue
        if r["status"] != "ok":
            lines.append(f"| {r['label']} | failed: {r['error']} |" + " |" * 10)
            continue
        sp = f"{r['speedup']:.2f}x ({r['speedup_min']:.2f}-{r['speedup_max']:.2f})" if r["speedup"] else "-"
        if r.get("vanilla_aa"):
            sp += f"; vanilla again: {min(r['vanilla_aa']):.2f}-{max(r['vanilla_aa']):.2f}"
        kv = f"{_cell(r['target_kv_tokens'], 0)} / {_cell(r['draft_kv_tokens'], 0)}"
        mem = f"{_cell(r['peak_memory_mb'], 0)} ({_cell(r['peak_memory_delta_mb'], 0)})"
        lines.append(f"| {r['label']} | {_cell(r['tau'])} | {_cell(r['tokens_per_target_forward'])} | "
                     f"{_cell(r['decode_tokens_per_s'], 1)} | {sp} | {_cell(r['e2e_s'])} | "
                     f"{_cell(r['draft_ms_per_step'], 1)} | {_cell(r['verify_ms_per_step'], 1)} | "
                     f"{_cell(r.get('host_reads_per_step'), 1)} | {kv} | {mem} | "
                     f"{_identity_cell(r, sampling)} |")
    return "\n".join(lines)


def format_report(report: dict) -> str:
    """The printed report: one markdown table per input, peer notes, then the verdict lines."""
    m = report["meta"]
    temp = sampling_temperature(report)
    decoding = f", sampling at temperature {temp:g}" if temp > 0 else ", greedy"
    out = [f"## SpecVLM bench: {m['pair']} on {m['device']} ({m['dtype']}), {m['max_new_tokens']} new tokens"
           f"{' (fixed length)' if m['fixed_length'] else ''}{decoding}, {m['repeats']} "
           f"round{'s' if m['repeats'] != 1 else ''} + {m['warmup']} warm-up", ""]
    machine = machine_lines(m)
    if machine:
        out += machine + [""]
    for inp in report["inputs"]:
        if inp.get("error"):
            out += [f"### {inp['name']}: failed: {inp['error']}", ""]
            continue
        out += [f"### {inp['name']}: {inp['num_video_tokens']} video tokens, {inp['num_frames']} frames, "
                f"{inp['target_kv_tokens']} prompt tokens", "", markdown_table(report, inp["name"]), ""]
    notes = {(r["label"], r["note"]) for r in report["results"] if r["note"]}
    out += [f"- {label}: {note}" for label, note in sorted(notes)]
    if set(m["methods"]) & set(PEERS):
        out.append(f"- HF peers: stock generate() with {m['hf_attention']} attention, timed by {m['hf_timing']}")
    out += [f"- speedup: {m['speedup']}", f"- peak memory: {m['peak_memory']}"]
    out += [f"- host reads: {m['host_reads']}"] if m.get("host_reads") else []
    out += [""]
    spread = [r["speedup_max"] / r["speedup_min"] for r in report["results"] if r["speedup_min"]]
    if spread and max(spread) > 1.5:
        out += [f"WARNING: per-round speedups of one method differ up to {max(spread):.1f}x: the machine is noisy "
                "(other load?); use more --repeats or a quiet machine before trusting the verdict.", ""]
    sc = report.get("step_costs")
    if sc:
        ratio = by_size(sc["ratio"])
        sizes = sorted(ratio)
        out += [f"### Step costs (isolated, target, {sc['kv_tokens']} cached tokens, median of {sc['rounds']} "
                f"interleaved rounds): decode step {sc['decode_ms']:.1f} ms", "",
                "| verify tokens | " + " | ".join(str(n) for n in sizes) + " |", "|---" * (len(sizes) + 1) + "|",
                "| x decode step | " + " | ".join(f"{ratio[n]:.2f}" for n in sizes) + " |", "",
                "Ratios are medians of per-round ratios (verify / decode in the same round), so they need not "
                "equal the ratio of the median times in the JSON; the dynamic tree's default (16 nodes + root) "
                "is 17 tokens.", ""]
        if ratio and min(ratio.values()) < STEP_COST_NOISE_RATIO:
            out += [f"WARNING: a verify forward read {min(ratio.values()):.2f}x a decode step; more tokens cannot "
                    "cost less than one, so the machine was busy while the step costs were timed: rerun on a "
                    "quiet machine before trusting the verify goal.", ""]
    out += ["### Verdict", ""] + [f"{v['status']:4}  {v['goal']}: {v['detail']}" for v in report["verdict"]]
    return "\n".join(out)


def write_json(report: dict, path: str | os.PathLike) -> Path:
    """Write the report as JSON (floats as-is; each row keeps its first round's token ids); returns the path."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(report, indent=1, default=str))
    return p


def write_svg(report: dict, path: str | os.PathLike) -> Path:
    """Write the length sweep as a static SVG (speedup and τ vs video tokens) for READMEs.

    Raises:
        specvlm.bench.charts.ChartError: the report has no sweep points.
    """
    labels = {}
    for r in report["results"]:
        labels.setdefault(r["method"], r["label"])
    meta = report.get("meta", {})
    pair = str(meta.get("pair", "")).replace(str(Path.cwd()) + os.sep, "")  # repo-relative model paths
    title = (f"{pair}; {meta.get('max_new_tokens', '?')} new tokens"
             f"{' (fixed length)' if meta.get('fixed_length') else ''}, {meta.get('device', '')}")
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(sweep_svg(report["sweep"], labels, title))
    return p


def write_html(report: dict, path: str | os.PathLike) -> Path:
    """A self-contained plotly HTML report: speedup bars, draft/verify time, sweep plots, tables, verdict.

    plotly.js is inlined once, so the file opens offline (~4.5 MB).
    """
    import html

    import plotly.io as pio

    parts = ["<h1>SpecVLM bench</h1>", f"<pre>{html.escape(format_report(report))}</pre>"]
    for i, fig in enumerate(figures(report)):
        parts.append(pio.to_html(fig, full_html=False, include_plotlyjs="inline" if i == 0 else False))
    parts.append("<details><summary>settings and environment</summary><pre>"
                 f"{html.escape(json.dumps(report['meta'], indent=1, default=str))}</pre></details>")
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text("<!doctype html><html><head><meta charset='utf-8'><title>SpecVLM bench</title></head><body>"
                 + "\n".join(parts) + "</body></html>", encoding="utf-8")
    return p
