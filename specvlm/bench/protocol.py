"""The measurement protocol: warm-up, then interleaved rounds of every method on every input.

Per input, every method runs ``warmup`` untimed rounds and then ``repeats`` rounds interleaved
A B C A B C ..., so machine drift hits every method alike. Per method the summary gives τ, tokens
per target forward, decode tokens/s, the decode speedup over our vanilla as the median (min/max)
of per-round ratios, end-to-end time, draft and verify time per step, KV lengths, peak memory,
and whether every run was token-identical to vanilla (the first divergence index when not).

Conventions:
    * Speedup = method decode tokens/s / vanilla decode tokens/s in the same round (= vanilla
      decode time / method decode time for the same generated length).
    * Peak memory is measured in the first warm-up round, which is not timed
      (:class:`specvlm.bench.memory.MemoryProbe`): on CUDA ``torch.cuda.max_memory_allocated`` after a
      reset; on a CPU the peak of tensor memory held by torch's CPU allocator, from the
      profiler's allocation events. ``delta`` subtracts the value at the start of the run (KV
      caches + activations); on a CPU ``peak`` = resident set at the start + delta.
    * With ``background_load`` > 0, that many busy worker processes run during the warm-up and
      timed rounds (not during the machine calibration or the isolated step costs).

The goals judged on a report live in :mod:`specvlm.bench.goals`.

Source: SpecVLM (arXiv 2508.16201) Sec. 4 (τ, speedup over vanilla on the same input,
fixed-length fairness setting).
"""
from __future__ import annotations

import os
import platform
import statistics
import time
from collections import Counter
from dataclasses import asdict
from typing import Any, Callable, Sequence

import torch

from specvlm.bench.goals import VERIFY_GOAL_TOKENS
from specvlm.bench.hf_peers import HF_ATTENTION, HF_TIMING
from specvlm.bench.hostreads import count_host_reads
from specvlm.bench.load import BackgroundLoad
from specvlm.bench.machine import machine_info
from specvlm.bench.records import INT_FIELDS, METHOD_FIELDS, RUN_FIELDS, empty_run, row_speedup_runs
from specvlm.bench.runners import hf_inputs, method_label, run_method
from specvlm.bench.settings import PEERS, BenchError, BenchInput, BenchSettings
from specvlm.bench.memory import rss_mb
from specvlm.analysis.metrics import compare_outputs, speedup
from specvlm.analysis.run import Comparison

def bench_input(pair: Any, inp: BenchInput, settings: BenchSettings,
                progress: Callable[[str], None] | None = None) -> list[dict]:
    """Warm up, then run ``settings.repeats`` interleaved rounds of every method on one input.

    Peak memory is measured in the first warm-up round (untimed: on a CPU the probe runs the
    torch profiler); with ``warmup=0`` the memory fields stay None. With ``settings.host_reads`` each
    method's host reads per decode step are counted in one more untimed run before the timed rounds.

    Returns:
        One summary dict per method with the keys of :data:`METHOD_FIELDS`.
    """
    from specvlm.engine.prepare import prepare

    inputs = prepare(pair, inp.clip, inp.prompt)
    enc = hf_inputs(pair, inp, inputs) if set(settings.methods) & set(PEERS) else None
    memory: dict[str, dict] = {}
    base = rss_mb() or True   # one CPU base for every method's peak (the resident set drifts up)
    for w in range(settings.warmup):
        for m in settings.methods:
            rec = run_method(pair, m, inp, inputs, settings, enc, memory=base if w == 0 else False)
            if w == 0:
                memory[m] = rec
    reads = {m: count_host_reads(pair, m, inputs, enc, settings) for m in settings.methods} \
        if settings.host_reads else {}
    runs: dict[str, list[dict]] = {m: [] for m in settings.methods}
    again: list[dict] = []   # a second vanilla run per round under background load: the run-to-run noise
    for r in range(settings.repeats):
        for m in settings.methods:
            rec = run_method(pair, m, inp, inputs, settings, enc)
            runs[m].append(rec)
            if m == "vanilla" and settings.background_load:
                again.append(run_method(pair, m, inp, inputs, settings, enc))
            if progress:
                tps = rec["decode_tokens_per_s"]
                n = rec.get("torch_threads")
                progress(f"[{inp.name}] round {r + 1}/{settings.repeats} {m}: "
                         + (f"{tps:.1f} tokens/s" if tps else rec["status"])
                         + (f" ({n} thread{'s' if n != 1 else ''})" if n else ""))
    rows = [summarize(inp.name, m, runs[m], runs["vanilla"], pair, memory.get(m)) | reads.get(m, {})
            for m in settings.methods]
    if again:
        rows[settings.methods.index("vanilla")]["vanilla_aa"] = [
            s for s in (run_speedup(b, a) for a, b in zip(again, runs["vanilla"]) if a["status"] == b["status"] == "ok")
            if s is not None]
    return rows


def run_speedup(vanilla: dict, method: dict) -> float | None:
    """The decode speedup of one round's method run over its vanilla run
    (:func:`specvlm.analysis.metrics.speedup` of their decode times and token counts)."""
    if not (vanilla.get("decode_s") and method.get("decode_s")):
        return None
    return speedup(vanilla["decode_s"], method["decode_s"], vanilla_tokens=vanilla["num_generated"],
                   method_tokens=method["num_generated"])


def _median(vals: Sequence[Any]) -> float | None:
    xs = [float(v) for v in vals if v is not None]
    return statistics.median(xs) if xs else None


_SEVERITY = {"identical": 0, "near-tie": 1, "mismatch": 2}


def identity(pairs: Sequence[tuple[dict, dict]], dtype: torch.dtype, speedup_runs: Sequence[float] = ()) -> dict:
    """A method's runs against vanilla's runs of the same rounds, the worst round deciding identity, in the one
    comparison schema (:meth:`specvlm.analysis.run.Comparison.to_json`).

    Args:
        pairs: (method run, vanilla run) records of the same rounds (vanilla's carry ``margins``:
            the target's top-1 minus top-2 logit margin per generated token).
        dtype: the target's dtype (sets the near-tie threshold, :func:`specvlm.analysis.metrics.compare_outputs`).
        speedup_runs: the per-round decode speedups (:func:`run_speedup`).

    Returns:
        {identical, divergence (None when identical, else index, kind, margin, threshold, dtype), speedup (their
        median), speedup_runs}; without rounds identical is False and divergence None.
    """
    divs = [compare_outputs(v["token_ids"], r["token_ids"], v.get("margins") or [], dtype) for r, v in pairs]
    if not divs:
        return {"identical": False, "divergence": None, "speedup": None, "speedup_runs": []}
    worst = max(divs, key=lambda d: _SEVERITY[d.kind])
    return Comparison(worst, dtype=str(dtype).removeprefix("torch."), speedup_runs=tuple(speedup_runs)).to_json()


def summarize(name: str, method: str, runs: list[dict], vanilla: list[dict], pair: Any,
              memory_run: dict | None = None) -> dict:
    """Per-method summary over rounds: medians, identity vs vanilla, speedup median/min/max.

    Args:
        name: input name.
        method: the method.
        runs: this method's run records, one per round.
        vanilla: vanilla's run records of the same rounds (speedups are per-round ratios).
        pair: the ModelPair (labels).
        memory_run: the untimed run that measured peak memory (its peak memory fields are
            used); None keeps the rounds' own (None unless they measured it).

    Returns:
        dict with the keys of :data:`METHOD_FIELDS`.
    """
    label, mode = method_label(method, pair)
    rec = {k: None for k in METHOD_FIELDS} | {"input": name, "method": method, "label": label,
                                              "draft_mode": mode}
    ok = [r for r in runs if r["status"] == "ok"]
    rec["repeats"] = len(ok)
    failed = [r for r in runs if r["status"] != "ok"]
    if not ok:
        return rec | {"status": "error", "error": failed[0]["error"], "note": failed[0]["note"]}
    skip = {"status", "error", "note", "identical"}
    for k in RUN_FIELDS:
        if k not in skip:
            rec[k] = _median([r[k] for r in ok])
            if k in INT_FIELDS and rec[k] is not None:
                rec[k] = int(round(rec[k]))
    if memory_run is not None and memory_run["status"] == "ok":
        rec.update(peak_memory_mb=memory_run["peak_memory_mb"], peak_memory_delta_mb=memory_run["peak_memory_delta_mb"])
    rec.update(status="ok", note=ok[0]["note"], text=ok[0].get("text"), token_ids=list(ok[0].get("token_ids") or []),
               error=f"{len(failed)} of {len(runs)} rounds failed: {failed[0]['error']}" if failed else None)
    pairs = [(r, v) for r, v in zip(runs, vanilla) if r["status"] == "ok" and v["status"] == "ok"]
    ratios = [s for s in (run_speedup(v, r) for r, v in pairs) if s is not None]
    rec.update(identity(pairs, pair.target.get_input_embeddings().weight.dtype, ratios))
    if ratios:
        rec.update(speedup_min=min(rec["speedup_runs"]), speedup_max=max(rec["speedup_runs"]))
    rec["threads_per_round"] = [r.get("torch_threads") for r in runs]
    v_step = _median([v["verify_ms_per_step"] for v in vanilla if v["status"] == "ok"])
    if v_step and rec["verify_ms_per_step"] is not None:
        rec["verify_vs_decode_step"] = rec["verify_ms_per_step"] / v_step
    return rec


def _meta(pair: Any, settings: BenchSettings) -> dict:
    import transformers

    def params(m: Any) -> int:
        return int(sum(p.numel() for p in m.parameters()))

    dev = pair.device
    return {
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "platform": platform.platform(),
        "cpu_count": os.cpu_count(), "torch": torch.__version__, "transformers": transformers.__version__,
        "device": str(dev), "gpu": torch.cuda.get_device_name(dev) if dev.type == "cuda" else None,
        "dtype": str(pair.target.get_input_embeddings().weight.dtype).replace("torch.", ""),
        "pair": pair.name, "self_sd": pair.self_sd, "target_params": params(pair.target),
        "draft_params": params(pair.draft), "methods": list(settings.methods), "repeats": settings.repeats,
        "warmup": settings.warmup, "max_new_tokens": settings.config.max_new_tokens,
        "fixed_length": not settings.config.stop_at_eos, "decode_config": asdict(settings.config),
        "hf_timing": HF_TIMING, "hf_attention": HF_ATTENTION,
        "speedup": "median over rounds of method decode tokens/s / vanilla decode tokens/s in the same round",
        "host_reads": "reads of a tensor's value by the host (item, tolist, cpu, bool/int/float of a tensor, nonzero, "
                      "boolean indexing, ...) during the decode steps of one untimed run, per decode step"
                      if settings.host_reads else None,
        "peak_memory": "measured in the first (untimed) warm-up round; CUDA: max_memory_allocated after a reset; "
                       "CPU: peak tensor memory of torch's CPU allocator from the profiler's allocation events "
                       "(peak = resident set before the input's first run + delta); delta = peak - value at the start "
                       "of the run",
    }


def run_bench(pair: Any, inputs: Sequence[BenchInput], settings: BenchSettings | None = None,
              progress: Callable[[str], None] | None = None, threads: Any = None) -> dict:
    """Benchmark every method of ``settings`` on every input.

    Args:
        pair: the ModelPair (Std-SD or Self-SD); ``:self`` methods reuse its target.
        inputs: clips and prompts (inputs with ``sweep=True`` form the length sweep).
        settings: methods, decoding settings, rounds (default: :class:`BenchSettings`).
        progress: called with one line per measured run (the CLI prints it to stderr).
        threads: the process's :class:`specvlm.runtime.threads.ThreadChoice` (from ``configure()`` at start),
            recorded in ``meta.threads`` and the ``Machine:`` line; None records nothing.

    Returns:
        The report: ``meta`` (settings, versions, conventions), ``inputs`` (name,
        num_video_tokens, num_frames, prompt, sweep), ``results`` (one dict per input and
        method with the keys of :data:`METHOD_FIELDS`; times in s or ms as named,
        throughput in tokens/s, memory in MiB), ``step_costs`` (see :func:`measure_step_costs`,
        None when not measured) and ``sweep`` (per method: video tokens, speedup, τ). ``meta``
        holds ``machine`` (:func:`specvlm.bench.machine.machine_info`) and ``background_load``
        (:meth:`specvlm.bench.load.LoadSummary.as_dict`, None without one). The goals are judged
        separately: ``report["verdict"] = specvlm.bench.goals.verdict(report)``.

    Raises:
        BenchError: no inputs or bad settings.
    """
    settings = settings or BenchSettings()
    settings.validate()
    if not inputs:
        raise BenchError("no inputs: give --video, --synthetic-tokens, --sweep or --dataset.")
    machine = machine_info(pair.device)   # calibrated before the runs, on an otherwise idle process
    results, meta_inputs = [], []
    with BackgroundLoad(settings.background_load) as load:
        for inp in inputs:
            rows = bench_input(pair, inp, settings, progress)
            results.extend(rows)
            meta_inputs.append(input_meta(inp, rows))
    return assemble_report(pair, settings, meta_inputs, results, machine, threads, load.summary)


def input_meta(inp: BenchInput, rows: Sequence[dict]) -> dict:
    """The report's ``inputs`` entry of one measured input (``rows``: its per-method summaries, vanilla first)."""
    van = rows[0]
    return {"name": inp.name, "num_video_tokens": van["num_video_tokens"], "target_kv_tokens": van["target_kv_tokens"],
            "num_frames": int(len(inp.clip.frames)), "prompt": inp.prompt, "reference": inp.reference,
            "sweep": inp.sweep}


def failed_input(name: str, error: str, pair: Any, settings: BenchSettings) -> tuple[dict, list[dict]]:
    """The ``inputs`` entry and per-method rows of an input that could not be read or prepared.

    Returns:
        (inputs entry with None sizes and ``error``, one ``status="error"`` row per method carrying ``error``).
    """
    err = empty_run("error") | {"error": error}
    rows = [summarize(name, m, [err], [err], pair) for m in settings.methods]
    meta = {"name": name, "num_video_tokens": None, "target_kv_tokens": None, "num_frames": None, "prompt": None,
            "reference": None, "sweep": False, "error": error}
    return meta, rows


def assemble_report(pair: Any, settings: BenchSettings, meta_inputs: list[dict], results: list[dict],
                    machine: dict, threads: Any = None, load: Any = None) -> dict:
    """The report of :func:`run_bench` from measured inputs; times the isolated step costs when asked.

    Args:
        pair: the ModelPair (settings and sizes in ``meta``; the step costs run on its target).
        settings: the benchmark settings.
        meta_inputs: one :func:`input_meta` entry per input, in report order.
        results: the per-method rows of every input, in the same order.
        machine: :func:`specvlm.bench.machine.machine_info` of the process that measured.
        threads: the process's :class:`specvlm.runtime.threads.ThreadChoice`, or None.
        load: the :class:`specvlm.bench.load.LoadSummary` of the rounds, or None.

    Returns:
        The report dict (see :func:`run_bench`).
    """
    used = Counter(n for r in results for n in (r.get("threads_per_round") or []) if n)
    meta = {**_meta(pair, settings), "machine": machine, "threads": threads_meta(threads),
            "threads_used": {str(k): v for k, v in sorted(used.items())},
            "background_load": load.as_dict() if load else None}
    report = {"meta": meta, "inputs": meta_inputs, "results": results}
    measured = [i for i in meta_inputs if i.get("target_kv_tokens")]
    report["step_costs"] = measure_step_costs(pair, measured) if settings.step_costs and measured else None
    report["sweep"] = sweep_series(report)
    return report


def threads_meta(choice: Any) -> dict | None:
    """``meta.threads``: the ThreadChoice's fields and its one-line description (None without one)."""
    if choice is None:
        return None
    return {**asdict(choice), "describe": choice.describe()}


def measure_step_costs(pair: Any, meta_inputs: Sequence[dict], rounds: int = 5) -> dict:
    """Isolated decode vs verify(n) step costs on the target at the largest input's prompt length.

    Sizes n = 1..``VERIFY_GOAL_TOKENS`` + 1 tokens (root + a chain of n - 1 nodes; n = 17 is the
    default dynamic tree's root + 16 nodes). See :mod:`specvlm.bench.stepcost`.

    Returns:
        {kv_tokens, decode_ms, verify_ms: {n: ms}, ratio: {n: verify / decode}, rounds}
        (dict keys are strings in the JSON).
    """
    L = max(int(i["target_kv_tokens"] or 0) for i in meta_inputs)
    from specvlm.bench.stepcost import verify_cost_curve

    c = verify_cost_curve(pair.target, max(L, 1), tuple(range(1, VERIFY_GOAL_TOKENS + 2)), rounds=rounds)
    return {"kv_tokens": c.kv_tokens, "decode_ms": c.decode_ms, "verify_ms": dict(c.verify_ms),
            "ratio": dict(c.ratio), "rounds": c.rounds}


def sweep_series(report: dict) -> dict[str, list[dict]]:
    """Per method: [{video_tokens, speedup, speedup_min, speedup_max, speedup_runs, tau}] over sweep inputs, by
    length (``speedup_runs``: the per-round ratios)."""
    names = {i["name"]: i["num_video_tokens"] for i in report["inputs"] if i["sweep"]}
    out: dict[str, list[dict]] = {}
    for r in report["results"]:
        if r["input"] in names and r["status"] == "ok":
            out.setdefault(r["method"], []).append({
                "video_tokens": names[r["input"]], "speedup": r["speedup"], "speedup_min": r["speedup_min"],
                "speedup_max": r["speedup_max"], "speedup_runs": row_speedup_runs(r), "tau": r["tau"],
                "decode_tokens_per_s": r["decode_tokens_per_s"]})
    for series in out.values():
        series.sort(key=lambda p: p["video_tokens"] or 0)
    return out
