"""A peak-memory counter for the CPU: the bytes of the tensors alive at each moment, counted by a
dispatch mode as torch's CUDA allocator counts them on the GPU (`max_memory_allocated`), so that
the worker's memory plan can be held to its bound in CPU tests (issue 33, item 1).

Every op's new storages are counted from the op that made them until the last tensor using them
is freed; views and in-place results add nothing. What one op allocates and frees inside itself
(a fused kernel's temporaries) is not seen, nor what was allocated before the mode started: the
worker's own allocations, each a separate op, are what it counts.
"""

from __future__ import annotations

import traceback
import weakref
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from cuda_agent.runner.memory import PeakTracker


class LiveBytes(TorchDispatchMode):
    """`with LiveBytes() as live:` ... `live.allocated`, `live.peak` (bytes)."""

    def __init__(self, where: bool = False) -> None:
        super().__init__()
        self.allocated = 0
        self.peak = 0
        self.where = where  # keep the Python stack of the highest peak: where a bound passed
        self.top = 0
        """the highest count since the mode was made (`peak` is reset by each section)"""
        self.top_stack: list[str] = []
        self._refs: dict[int, list[int]] = {}  # storage address -> [bytes, live tensors]
        self.cap: int | None = None
        """live bytes past which a new storage fails as torch's capped allocator fails"""

    def _release(self, key: int) -> None:
        entry = self._refs.get(key)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] == 0:
            self.allocated -= entry[0]
            del self._refs[key]

    def _track(self, t: torch.Tensor) -> None:
        storage = t.untyped_storage()
        key = storage.data_ptr()
        if key == 0 and storage.nbytes() == 0:
            return
        entry = self._refs.get(key)
        if entry is None:
            if self.cap is not None and self.allocated + storage.nbytes() > self.cap:
                raise torch.OutOfMemoryError(f"live bytes would pass the cap ({self.cap})")
            entry = self._refs[key] = [storage.nbytes(), 0]
            self.allocated += entry[0]
            self.peak = max(self.peak, self.allocated)
            if self.allocated > self.top:
                self.top = self.allocated
                if self.where:
                    self.top_stack = traceback.format_stack(limit=14)[:-3]
        entry[1] += 1
        weakref.finalize(t, self._release, key)

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (),
                           kwargs: dict | None = None) -> Any:
        before = {id(x) for x in _tensors((args, kwargs or {}))}
        out = func(*args, **(kwargs or {}))
        for x in _tensors(out):
            if id(x) not in before and x.device.type != "meta":
                self._track(x)
        return out

    def reset_peak(self) -> None:
        self.peak = self.allocated


def _tensors(tree: Any) -> list[torch.Tensor]:
    """The tensors in an aten op's arguments or results (tuples, lists and dicts of them, as
    `tree_flatten` finds them): torch's generic pytree walk was half of a memory test's CPU
    time, run twice for each of hundreds of thousands of small ops under the mode."""
    if isinstance(tree, torch.Tensor):
        return [tree]
    if isinstance(tree, (tuple, list)):
        return [t for x in tree for t in _tensors(x)]
    if isinstance(tree, dict):
        return [t for x in tree.values() for t in _tensors(x)]
    return []


class LiveBytesTracker(PeakTracker):
    """The worker's `PeakTracker` on the CPU, counting with a `LiveBytes` mode the caller runs
    the worker under."""

    def __init__(self, live: LiveBytes) -> None:
        super().__init__(torch.device("cpu"))
        self.live = live

    def start(self) -> None:
        self.live.reset_peak()
        self.peak = 0

    def allocated(self) -> int:
        return self.live.allocated

    def overall(self) -> int:
        return max(self.peak, self.live.peak)

    def section(self, fn: Any, count: bool = True, cap: int | None = None
                ) -> tuple[Any, int]:
        self.peak = self.overall()
        base = self.live.allocated
        self.live.reset_peak()
        self.live.cap = None if cap is None else base + cap
        try:
            result = fn()
        finally:
            self.live.cap = None
            top = self.live.peak
            if count:
                self.peak = max(self.peak, top)
            else:
                self.live.reset_peak()
        return result, top - base
