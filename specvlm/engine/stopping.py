"""Stop checks inside a prefill: a ``should_stop`` callback polled before every layer.

A prefill is one forward per model over the whole prompt (thousands of video tokens), so the
decode loop's check before every step cannot end it; on a CPU a long video's prefill takes
minutes. :func:`stop_between_layers` registers, for the duration of a ``with`` block, a forward
pre-hook on every module held in an ``nn.ModuleList`` of the given models (the decoder layers and
the vision encoder's blocks) that raises :class:`specvlm.types.Stopped` once ``should_stop()``
returns True. The hooks act only in the thread that entered the block (a concurrent request on
the same models is not affected) and are removed when it exits; a check costs one Python call
per layer.

Source: docs/design.md §8 (a Stop button must stop the work, not only the UI).
"""
from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

import torch

from specvlm.types import Stopped


@contextlib.contextmanager
def stop_between_layers(should_stop: Callable[[], bool] | None, *models: Any) -> Iterator[None]:
    """Inside the block, ``should_stop()`` is polled before every layer of ``models`` (this thread only).

    Args:
        should_stop: the callback (None: no checks, nothing registered).
        *models: the models whose layers check (duplicates, e.g. a Self-SD draft, count once).

    Raises:
        Stopped: ``should_stop()`` returned True on entry or before a layer.
    """
    if should_stop is None:
        yield
        return
    owner = threading.get_ident()

    def check(_module: torch.nn.Module, _args: Any) -> None:
        if threading.get_ident() == owner and should_stop():
            raise Stopped("the prefill was stopped")

    handles, seen = [], set()
    for model in models:
        if model is None or id(model) in seen:
            continue
        seen.add(id(model))
        for mod in model.modules():
            if isinstance(mod, torch.nn.ModuleList):
                handles.extend(layer.register_forward_pre_hook(check) for layer in mod)
    try:
        if should_stop():
            raise Stopped("the prefill was stopped")
        yield
    finally:
        for h in handles:
            h.remove()
