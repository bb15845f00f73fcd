"""Counting host reads: the places where Python waits for a tensor's value.

On a GPU every such read (``int(t)``, ``t.item()``, ``t.tolist()``, ``t.cpu()``, ``bool(t)``, a
data-dependent shape such as ``nonzero`` or boolean indexing, ``torch.equal``) blocks the host until
the device has finished all queued work, so a decode loop with many of them cannot keep the device busy
and cannot be captured in a CUDA graph. :class:`HostReadCounter` counts them on any device (on a CPU
they are the same calls, so a test here bounds what a GPU run will sync), and the benchmark reports the
count per decode step.

Usage::

    with HostReadCounter() as reads:
        for event in stream(pair, inputs, config):
            ...
    reads.count, reads.by_kind

Source: docs/design.md §11 (the GPU fast path: at most one device-to-host read per step).
"""
from __future__ import annotations

from collections import Counter
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

_T = torch.Tensor
_READS = {
    _T.item: "item", _T.tolist: "tolist", _T.numpy: "numpy", _T.cpu: "cpu",
    _T.__bool__: "bool", _T.__int__: "int", _T.__float__: "float", _T.__index__: "index",
    _T.nonzero: "nonzero", torch.nonzero: "nonzero", torch.argwhere: "nonzero",
    _T.equal: "equal", torch.equal: "equal", torch.masked_select: "masked_select",
    _T.masked_select: "masked_select", torch.unique: "unique", _T.unique: "unique",
}
"""Tensor functions that read a value to the host, by the kind reported."""


def _to_host(args: tuple, kwargs: dict) -> bool:
    """True when a ``Tensor.to(...)`` call moves a tensor from an accelerator to the CPU.

    ``.to(device)`` of a CPU tensor to the CPU is not counted: on a CPU run that is the engine moving
    data to its own device (``.to(pair.device)``), which on a GPU run is no host read either. Code that
    means to read a value on the host says so with ``.cpu()``, ``.tolist()`` or ``.item()``.
    """
    src = args[0] if args and isinstance(args[0], torch.Tensor) else None
    if src is None or src.device.type == "cpu":
        return False
    for a in list(args[1:]) + [kwargs.get("device")]:
        if isinstance(a, (str, torch.device)) and torch.device(a).type == "cpu":
            return True
    return False


def _bool_index(args: tuple) -> bool:
    """True when a ``Tensor.__getitem__`` call indexes with a boolean tensor (data-dependent shape)."""
    index = args[1] if len(args) > 1 else None
    parts = index if isinstance(index, tuple) else (index,)
    return any(isinstance(p, torch.Tensor) and p.dtype == torch.bool for p in parts)


def read_kind(func: Any, args: tuple, kwargs: dict) -> str | None:
    """The kind of host read ``func(*args, **kwargs)`` is, or None when it stays on the device.

    Args:
        func: the torch function or Tensor method being called.
        args, kwargs: its arguments (``args[0]`` is the tensor for methods).

    Returns:
        ``item``, ``tolist``, ``numpy``, ``cpu``, ``bool``, ``int``, ``float``, ``index``, ``nonzero``,
        ``equal``, ``masked_select``, ``unique``, ``to_cpu``, ``bool_index``, or None.
    """
    kind = _READS.get(func)
    if kind is not None:
        return kind
    if func is _T.to and _to_host(args, kwargs):
        return "to_cpu"
    if func is _T.__getitem__ and _bool_index(args):
        return "bool_index"
    return None


class HostReadCounter(TorchFunctionMode):
    """A torch function mode that counts host reads made while it is active (this thread only).

    Attributes:
        count: host reads seen so far.
        by_kind: the same, by kind (:func:`read_kind`).

    Reads made inside another counted call (e.g. a ``tolist`` inside ``item``'s implementation) are not
    counted twice: the mode is inactive while it runs the call it intercepted.
    """

    def __init__(self) -> None:
        super().__init__()
        self.count = 0
        self.by_kind: Counter[str] = Counter()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        kind = read_kind(func, args, kwargs)
        if kind is not None:
            self.count += 1
            self.by_kind[kind] += 1
        return func(*args, **kwargs)

    def reset(self) -> None:
        """Start counting from zero again."""
        self.count = 0
        self.by_kind.clear()
