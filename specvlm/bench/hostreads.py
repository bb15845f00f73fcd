"""Host reads per decode step of each benchmarked method, counted in one untimed run.

A host read (``item``, ``tolist``, ``cpu``, ``bool``/``int``/``float`` of a tensor, ``nonzero``,
boolean indexing, ...) makes Python wait for the device; on a GPU each one is a sync, and a step with
more than one cannot be captured whole in a CUDA graph. :class:`specvlm.runtime.hostreads.HostReadCounter`
counts them; here they are counted during the decode steps only (the counter is reset once the first
token is out: our step-0 event, or the first token a Hugging Face streamer receives) and divided by the
number of decode steps (our StepEvents after step 0; the streamer's later callbacks for the peers).

The counter intercepts every torch call, which slows the run, so the count comes from an extra run
before the timed rounds, never from a timed one.

Source: docs/design.md §11 (the GPU fast path: at most one device-to-host read per step).
"""
from __future__ import annotations

import logging
from typing import Any

from specvlm.bench.records import READ_FIELDS  # noqa: F401 - the fields set here
from specvlm.bench.settings import PEERS, SELF, BenchSettings
from specvlm.config import DecodeConfig
from specvlm.runtime.hostreads import HostReadCounter
from specvlm.types import StepEvent

log = logging.getLogger(__name__)



def per_step(reads: HostReadCounter, steps: int) -> dict:
    """The :data:`READ_FIELDS` of a counter that saw ``steps`` decode steps (None values when ``steps`` < 1)."""
    if steps < 1:
        return {"host_reads_per_step": None, "host_reads_by_kind": None, "host_read_steps": steps}
    return {"host_reads_per_step": reads.count / steps,
            "host_reads_by_kind": {k: n / steps for k, n in sorted(reads.by_kind.items())},
            "host_read_steps": steps}


def ours(pair: Any, inputs: Any, config: DecodeConfig) -> dict:
    """Host reads per decode step of one :func:`specvlm.engine.stream.stream` run.

    Args:
        pair: the ModelPair.
        inputs: prepared ModelInputs.
        config: the run's settings (method, engine, tree, budget).

    Returns:
        The :data:`READ_FIELDS`.
    """
    from specvlm.engine.stream import stream

    steps = 0
    with HostReadCounter() as reads:
        for ev in stream(pair, inputs, config):
            if not isinstance(ev, StepEvent):
                continue
            if ev.step == 0:
                reads.reset()   # prefill, scoring, pruning and draft prefill are not decode steps
            else:
                steps += 1
    return per_step(reads, steps)


def peer(pair: Any, method: str, enc: dict, config: DecodeConfig, settings: BenchSettings) -> dict:
    """Host reads per decode step of one Hugging Face ``generate()`` call (see :mod:`specvlm.bench.hf_peers`).

    The timing streamer's callbacks mark the steps: the counter is reset at the first generated token,
    and every later callback is one decode step (one verify step for assisted generation).

    Returns:
        The :data:`READ_FIELDS`.
    """
    from specvlm.bench.hf_peers import hf_generate_call

    with HostReadCounter() as reads:
        streamer = hf_generate_call(pair, method, enc, config, settings, on_first=reads.reset)
    return per_step(reads, len(streamer.calls) - 1)


def count_host_reads(pair: Any, method: str, inputs: Any, enc: dict | Exception | None, settings: BenchSettings
                     ) -> dict:
    """The :data:`READ_FIELDS` of one method on one input, from one untimed run; a failing run gives None values.

    Args:
        pair: the ModelPair (``:self`` methods draft with the target, as in the timed runs).
        method: a benchmark method (:data:`specvlm.bench.settings.DEFAULT_METHODS` and the like).
        inputs: prepared ModelInputs (our methods).
        enc: the processor output for the peers, or the exception that building it raised.
        settings: the benchmark settings (``config``: budget, engine, tree; ``method`` is replaced).
    """
    from specvlm.bench.runners import method_config, self_sd_pair

    try:
        if method in PEERS:
            if enc is None or isinstance(enc, Exception):
                return per_step(HostReadCounter(), 0)
            return peer(pair, method, enc, settings.config, settings)
        run_pair = self_sd_pair(pair) if method.endswith(SELF) else pair
        return ours(run_pair, inputs, method_config(settings.config, method))
    except Exception as exc:  # noqa: BLE001 - the timed rounds report the failure itself
        log.warning("host reads of %s not counted: %s", method, exc)
        return per_step(HostReadCounter(), 0)
