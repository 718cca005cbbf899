"""Where sampler jobs run. A job is a plain function of (policy weights, operator, seeds)
returning plain data; a cluster fleet needs only the same `submit`/`gather` pair over remote
tasks (with operators rebuilt remotely from their problem files). Only the local pool exists
today: Ray is not installed on the machines this was built on, so no Ray code ships untested.
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
