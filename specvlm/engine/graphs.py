"""Running a static step: plainly on the CPU, replayed from a captured CUDA graph on a GPU.

A step function (:mod:`specvlm.engine.steps`) takes no arguments and reads and writes only device
tensors of fixed shapes and addresses, so on CUDA one capture serves every step of the request:
:func:`step_runner` warms it up once on a side stream (restoring the state it changed), captures
it in a ``torch.cuda.CUDAGraph`` and returns the graph's ``replay``. Elsewhere it returns the
function itself. A capture that fails falls back to running the function (logged).

Source: docs/design.md §4.13 (SGLang and gpt-fast capture the decode, draft and verify steps);
PyTorch's CUDA graphs notes (warm-up on a side stream, static input and output tensors).
"""
from __future__ import annotations

import logging
import time
from typing import Callable

import torch

log = logging.getLogger(__name__)


def step_runner(fn: Callable[[], None], device: torch.device, state: list[torch.Tensor],
                pool: object | None = None) -> tuple[Callable[[], None], float]:
    """The callable that runs one step, and the seconds spent capturing it (0.0 when not captured).

    Args:
        fn: the step; mutates only device tensors.
        device: where the step runs; only ``cuda`` captures.
        state: the small tensors ``fn`` changes besides cache slots past the lengths (positions,
            lengths, tokens, outputs): saved before the warm-up run and restored after it.
        pool: a CUDA graph memory pool shared by the request's graphs (``torch.cuda.graph_pool_handle()``).

    Returns:
        (runner, capture seconds).

    Source: PyTorch CUDA graphs notes (side-stream warm-up, static tensors); docs/design.md §4.13.
    """
    if torch.device(device).type != "cuda":
        return fn, 0.0
    t0 = time.perf_counter()
    saved = [t.clone() for t in state]
    try:
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            fn()
        torch.cuda.current_stream(device).wait_stream(side)
        for t, s in zip(state, saved):
            t.copy_(s)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=pool):
            fn()
    except Exception as e:   # noqa: BLE001 - any capture failure: run the step uncaptured
        log.warning("CUDA graph capture failed (%s); the static steps run uncaptured.", e)
        for t, s in zip(state, saved):
            t.copy_(s)
        return fn, 0.0
    torch.cuda.synchronize(device)
    return graph.replay, time.perf_counter() - t0
