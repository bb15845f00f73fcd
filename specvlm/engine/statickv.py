"""Static KV buffers: allocated once per request, written at device-side slots, committed on the device.

:class:`StaticKV` is a transformers :class:`~transformers.cache_utils.Cache` whose layers hold
fixed (B, kv_heads, cap, head_dim) buffers and share one device-side length (an int64 scalar
tensor). A forward writes its n new keys/values with ``index_copy_`` at ``length + arange(n)``
and returns the whole buffers; the attention (:mod:`specvlm.models.staticattn`) hides the slots
at and beyond the length by a key-validity bias. Nothing here reads a value to the host, and
no shape depends on the length, so the steps that use it can be captured in a CUDA graph.

* Advance (a plain token, a draft's pending tokens): ``length += count`` on the device.
* Commit of accepted tree nodes (:meth:`StaticKV.commit`): always ``slots`` entries are gathered
  from the written block and copied to ``length, length + 1, ...``; the length then advances by
  the device-side count. Entries past the count are garbage beyond the length, never seen.
* Rollback (a draft's tree nodes): the length is simply not advanced over them.

Source: docs/design.md §4.10 (commit = prefix + accepted path in path order) and §4.13 (HF
``StaticCache`` writes with ``index_copy_`` at a device-side length; gpt-fast's static cache).
"""
from __future__ import annotations

from typing import Any

import torch
from transformers.cache_utils import Cache, CacheLayerMixin


class Cursor:
    """Where a cache's layers write: the shared device-side length and the next forward's slots.

    Attributes:
        length: int64 scalar device tensor, tokens held.
        slots: int64 (cap,) = arange(cap) on the device.
        write: int64 (n,) slots the next forward writes to, or None = ``length + arange(n)``.

    Source: docs/design.md §4.13.
    """

    def __init__(self, length: torch.Tensor, slots: torch.Tensor):
        self.length, self.slots = length, slots
        self.write: torch.Tensor | None = None

    def write_index(self, n: int) -> torch.Tensor:
        """int64 (n,) slots for n new entries."""
        if self.write is not None:
            return self.write
        return self.slots[:n] + self.length


class StaticKVLayer(CacheLayerMixin):
    """One decoder layer's fixed buffers; the length tensor is shared with the other layers.

    Args:
        keys, values: float (B, kv_heads, cap, head_dim) preallocated buffers.
        cursor: the cache's shared :class:`Cursor`.

    Source: transformers' ``StaticLayer`` (the Cache layer API); docs/design.md §4.13.
    """

    is_compileable = True
    is_sliding = False

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, cursor: "Cursor"):
        super().__init__()
        self.keys, self.values = keys, values
        self.cursor = cursor
        self.is_initialized = True

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        """Nothing to do: the buffers exist from construction."""

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any,
               **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """Write n new entries at the cursor's slots; returns the whole (.., cap, ..) buffers.

        The length is not advanced here (every layer writes the same slots); the step does it once.
        """
        idx = self.cursor.write_index(key_states.shape[-2])
        self.keys.index_copy_(-2, idx, key_states.to(self.keys.dtype))
        self.values.index_copy_(-2, idx, value_states.to(self.values.dtype))
        return self.keys, self.values

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        """(key length, offset) as transformers' static layers report it: the whole buffer."""
        return self.keys.shape[-2], 0

    def get_seq_length(self) -> torch.Tensor:
        """The device-side length (an int64 scalar tensor, as transformers' static layers return)."""
        return self.cursor.length

    def get_max_length(self) -> int:
        """The buffer's capacity in tokens."""
        return self.keys.shape[-2]


class StaticKV(Cache):
    """A request's static KV cache over transformers' public Cache API (see the module docstring).

    Args:
        layers: one :class:`StaticKVLayer` per decoder layer, sharing one :class:`Cursor`.

    Attributes:
        cursor: the shared cursor; length: int64 scalar device tensor, tokens held;
        slots: int64 (cap,) = arange(cap) on the device; capacity: cap, slots per layer.

    Source: docs/design.md §4.10 and §4.13; transformers' ``StaticLayer`` (``index_copy_`` at a device-side length).
    """

    def __init__(self, layers: list[StaticKVLayer]):
        super().__init__(layers=layers)
        self.cursor = layers[0].cursor
        self.length = self.cursor.length
        self.slots = self.cursor.slots
        self.capacity = int(self.slots.shape[0])

    def advance(self, count: torch.Tensor | int) -> None:
        """``length += count`` on the device (count: an int or an int64 scalar tensor)."""
        self.length.add_(count)

    def commit(self, src: torch.Tensor, count: torch.Tensor) -> None:
        """Keep block entries ``length + src`` at ``length + arange(S)``, then advance by ``count``.

        Args:
            src: int64 (S,) offsets into the block written at ``length`` (root first, then the accepted
                nodes in path order; entries at and past ``count`` are padding).
            count: int64 scalar tensor, entries kept (<= S).
        """
        s = int(src.shape[0])
        read = src + self.length
        write = self.slots[:s] + self.length
        for layer in self.layers:
            layer.keys.index_copy_(-2, write, layer.keys.index_select(-2, read))
            layer.values.index_copy_(-2, write, layer.values.index_select(-2, read))
        self.length.add_(count)


def allocate(like: Cache, capacity: int) -> StaticKV:
    """A :class:`StaticKV` of ``capacity`` slots holding a copy of every token in ``like``.

    Args:
        like: a filled cache (per layer keys/values (B, kv_heads, L, head_dim)), e.g. after prefill.
        capacity: slots per layer (>= L plus everything the request will write beyond it).

    Returns:
        The static cache, its length = L (on the buffers' device).

    Raises:
        ValueError: ``capacity`` is smaller than the tokens held.

    Source: docs/design.md §4.13 (buffers sized once per request).
    """
    first = like.layers[0]
    held = int(first.keys.shape[-2])
    if capacity < held:
        raise ValueError(f"capacity={capacity} is below the {held} tokens the cache holds: allocate more slots.")
    dev = first.keys.device
    length = torch.tensor(held, dtype=torch.long, device=dev)
    cursor = Cursor(length, torch.arange(capacity, dtype=torch.long, device=dev))
    layers = []
    for layer in like.layers:
        k, v = layer.keys, layer.values
        kb = k.new_zeros(*k.shape[:-2], capacity, k.shape[-1])
        vb = v.new_zeros(*v.shape[:-2], capacity, v.shape[-1])
        kb[..., :held, :] = k
        vb[..., :held, :] = v
        layers.append(StaticKVLayer(kb, vb, cursor))
    return StaticKV(layers)
