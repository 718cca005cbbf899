"""Wall seconds per named phase: where a run's time went before, around and after the search.

A tune on a problem of tens of GiB spends most of its wall time outside the search (the GPU
worker's start, the inputs, the float64 reference, the verification cases); the report says how
much went where, so that what is slow can be found without a profiler on the GPU machine.
"""

from __future__ import annotations

import contextlib
import time
from typing import Iterator


class Phases:
    """Accumulates wall seconds under phase names, in the order phases first ran."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextlib.contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - t0

    def as_dict(self, digits: int = 3) -> dict[str, float]:
        return {k: round(v, digits) for k, v in self.seconds.items()}
