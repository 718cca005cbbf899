"""Where sampler jobs run in this process. A job is a plain function of (policy weights,
operator, seeds) returning plain data; the Ray fleet (`cuda_agent/fleet/`, `train --ray`) runs
the same job in sampler actors on other machines, the operators rebuilt there from their problem
files.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable


class LocalFleet:
    """Jobs on threads of this process (the device serialises GPU work; the sim and replay
    devices are pure and thread-safe)."""

    def __init__(self, workers: int = 1) -> None:
        self.pool = ThreadPoolExecutor(max(1, workers))

    def submit(self, fn: Callable[..., Any], jobs: list[tuple]) -> list[Future]:
        return [self.pool.submit(fn, *job) for job in jobs]

    def gather(self, futures: list[Future]) -> list[Any]:
        """Results in submission order (deterministic whatever finishes first)."""
        return [f.result() for f in futures]

    def close(self) -> None:
        self.pool.shutdown(wait=True)
