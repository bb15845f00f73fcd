"""Stop checks inside a prefill: a ``should_stop`` callback polled before every layer.

A prefill is one forward per model over the whole prompt (thousands of video tokens), so the
decode loop's check before every step cannot end it: on a CPU a long video's prefill takes
tens of seconds to minutes, most of it in the decoder layers' attention over the whole prompt
(docs/design.md §8). The check (:func:`check`) reads the calling thread's current callback; it runs

* before every block of the vision encoder (and any other ``nn.ModuleList`` outside the language
  model): a forward pre-hook installed once, when a pair is built (:func:`install_stop_checks`,
  from :func:`specvlm.models.pair.pair_from_models`, like the engine's attention). These blocks run
  only in a prefill;
* at the start of every decoder layer's attention: the engine's attention function calls it
  (:func:`specvlm.models.attention.gqa_attention`). A decode step therefore pays one thread-local
  lookup per layer and no module hook (a hook puts every layer call on PyTorch's slower hooked path);
* between the query chunks of a long prompt's causal attention, which the engine's attention cuts into
  chunks of about equal work inside a ``with`` block (:mod:`specvlm.models.chunkattn`, bitwise the same
  output), so one decoder layer over a long video is several checks apart, not one.

:func:`stop_between_layers` sets the callback for the duration of a ``with`` block, on its thread
only: nothing on the shared models changes per request, and a concurrent request on another thread
is not affected.

Source: docs/design.md §8 (a Stop button must stop the work, not only the UI).
"""
from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

import torch

from specvlm.types import Stopped

_LOCAL = threading.local()   # .should_stop: the calling thread's callback inside stop_between_layers


def check() -> None:
    """Raise :class:`~specvlm.types.Stopped` if the calling thread is inside :func:`stop_between_layers`
    and its callback returns True; otherwise return (outside a block: one thread-local lookup)."""
    should_stop = getattr(_LOCAL, "should_stop", None)
    if should_stop is not None and should_stop():
        raise Stopped("the prefill was stopped")


def active() -> bool:
    """Whether the calling thread is inside :func:`stop_between_layers` with a callback.

    Source: this module (no external reference).
    """
    return getattr(_LOCAL, "should_stop", None) is not None


def _check(_module: torch.nn.Module, _args: Any) -> None:
    check()


def install_stop_checks(model: torch.nn.Module, language_model: torch.nn.Module | None = None) -> None:
    """Put the stop check before every layer of ``model`` (each child of an ``nn.ModuleList``) outside
    ``language_model``, whose layers are checked by the engine's attention instead; once per module, so
    calling it again adds nothing. The checks act only inside :func:`stop_between_layers`."""
    skip = {id(m) for m in language_model.modules()} if language_model is not None else set()
    for mod in model.modules():
        if isinstance(mod, torch.nn.ModuleList) and id(mod) not in skip:
            for layer in mod:
                if _check not in layer._forward_pre_hooks.values():
                    layer.register_forward_pre_hook(_check)


def checked_layers(model: torch.nn.Module) -> int:
    """How many layers of ``model`` run the stop check as a forward pre-hook (:func:`install_stop_checks`:
    its vision blocks); the language model's decoder layers, checked by the engine's attention, are not
    counted.

    Source: this module (no external reference).
    """
    return sum(1 for mod in model.modules() if _check in mod._forward_pre_hooks.values())


@contextlib.contextmanager
def stop_between_layers(should_stop: Callable[[], bool] | None) -> Iterator[None]:
    """Inside the block, on this thread, ``should_stop()`` is polled before every vision block of models with
    :func:`install_stop_checks`, at the start of every decoder layer's attention (the engine's
    ``specvlm_gqa``), between the query chunks of a long prompt's attention
    (:func:`specvlm.models.chunkattn.chunk_bounds`), and once on entry.

    Args:
        should_stop: the callback (None: no checks).

    Raises:
        Stopped: ``should_stop()`` returned True on entry or before a layer.
    """
    if should_stop is None:
        yield
        return
    if should_stop():
        raise Stopped("the prefill was stopped")
    before = getattr(_LOCAL, "should_stop", None)
    _LOCAL.should_stop = should_stop
    try:
        yield
    finally:
        _LOCAL.should_stop = before
