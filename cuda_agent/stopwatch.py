"""Wall seconds per named phase: where a run's time went before, around and after the search.

A tune on a problem of tens of GiB spends most of its wall time outside the search (the GPU
worker's start, the inputs, the float64 reference, the verification cases); the report says how
much went where, so that what is slow can be found without a profiler on the GPU machine.
"""

from __future__ import annotations

import contextlib
import time
from typing import Callable, Iterator


class Phases:
    """Accumulates wall seconds under phase names, in the order phases first ran; with `mark`,
    also what it reads at the end of each phase (the GPU worker's peak memory so far), so that
    a bound passed during set-up is placed in the step that passed it."""

    def __init__(self, mark: Callable[[], int] | None = None,
                 on_end: Callable[[str, float, int | None], None] | None = None) -> None:
        """`on_end(name, seconds, mark)` is told of each phase as it ends."""
        self.seconds: dict[str, float] = {}
        self.marks: dict[str, int] = {}
        self._mark = mark
        self._on_end = on_end

    @contextlib.contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            took = time.perf_counter() - t0
            self.seconds[name] = self.seconds.get(name, 0.0) + took
            mark = None
            if self._mark is not None:
                mark = self._mark()
                self.marks[name] = max(self.marks.get(name, 0), mark)
            if self._on_end is not None:
                self._on_end(name, took, mark)

    def as_dict(self, digits: int = 3) -> dict[str, float]:
        return {k: round(v, digits) for k, v in self.seconds.items()}
