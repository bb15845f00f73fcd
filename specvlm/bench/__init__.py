"""Benchmark: every decoding method and its peers on the same model pair and inputs.

The package is split by job:

* :mod:`~specvlm.bench.settings`: method names, :class:`BenchInput`, :class:`BenchSettings`.
* :mod:`~specvlm.bench.inputs`: generated clips sized to a video token count, files, datasets.
* :mod:`~specvlm.bench.runners` and :mod:`~specvlm.bench.hf_peers`: one run of our methods or
  of a Hugging Face peer, as a run record (:mod:`~specvlm.bench.records`).
* :mod:`~specvlm.bench.protocol`: warm-up and interleaved rounds (:func:`run_bench`), with an
  optional background load (:mod:`~specvlm.bench.load`) and machine calibration
  (:mod:`~specvlm.bench.machine`).
* :mod:`~specvlm.bench.distributed`: the same protocol over ``torchrun`` ranks, one device each,
  merged into one report (:func:`~specvlm.bench.distributed.run_distributed`).
* :mod:`~specvlm.bench.goals`: the goals judged on a report (:func:`verdict`).
* :mod:`~specvlm.bench.report` and :mod:`~specvlm.bench.charts`: markdown, JSON, HTML, SVG.

``python -m specvlm bench`` (:mod:`specvlm.cli.bench`) wires them together.

Example:
    >>> report = run_bench(pair, [BenchInput("clip", clip, "Describe this video.")])
    >>> report["verdict"] = verdict(report)
    >>> print(format_report(report))
"""
from specvlm.bench.charts import ChartError, sweep_svg
from specvlm.bench.goals import GOAL_VIDEO_TOKENS, VERIFY_GOAL_TOKENS, speedup_trend, verdict
from specvlm.bench.inputs import MIN_SYNTHETIC_SIDE, max_video_tokens, synthetic_clip
from specvlm.bench.load import BackgroundLoad
from specvlm.bench.machine import machine_info
from specvlm.bench.protocol import bench_input, measure_step_costs, run_bench, summarize, sweep_series
from specvlm.bench.records import METHOD_FIELDS, RUN_FIELDS, kv_mb
from specvlm.bench.report import format_report, markdown_table, write_html, write_json, write_svg
from specvlm.bench.runners import run_method, run_ours, self_sd_pair
from specvlm.bench.hf_peers import processor_inputs, run_hf
from specvlm.bench.settings import (DEFAULT_METHODS, PEERS, SELF, BenchError, BenchInput, BenchSettings,
                                    drop_redundant_self, parse_int_list, parse_methods)

__all__ = [
    "BackgroundLoad", "BenchError", "BenchInput", "BenchSettings", "ChartError", "DEFAULT_METHODS",
    "GOAL_VIDEO_TOKENS", "METHOD_FIELDS", "MIN_SYNTHETIC_SIDE", "PEERS", "RUN_FIELDS", "SELF", "VERIFY_GOAL_TOKENS",
    "bench_input", "drop_redundant_self", "format_report", "kv_mb", "machine_info", "markdown_table",
    "max_video_tokens", "measure_step_costs", "parse_int_list", "parse_methods", "processor_inputs", "run_bench",
    "run_hf", "run_method", "run_ours", "self_sd_pair", "speedup_trend", "summarize", "sweep_series", "sweep_svg",
    "synthetic_clip", "verdict", "write_html", "write_json", "write_svg",
]
