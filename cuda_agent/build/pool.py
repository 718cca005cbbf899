"""A pool of compile processes: one job per process at a time, each with a timeout, all under a
deadline.

Each process is a `procs.Child` (no re-import of the user's `__main__`). A job whose process
outlives its timeout is killed and comes back as a `compile_timeout` (the candidate's own
failure: its source is too slow to compile). A process that dies on a job is replaced and the
job is tried once more in a fresh one; dying twice makes it a `compile_crash`. A job not
finished when the deadline comes is killed and comes back `CUT`: the run's time was up, which
says nothing about the candidate. A process that cannot start is a `HostError`.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from multiprocessing.connection import Connection, wait
from typing import Any, Callable, cast

from .. import procs

CUT = "cut"
"""error kind of a job the deadline stopped: not compiled, and not the candidate's failure"""

CRASHED = "the compiler's process died compiling this source, twice (a crash, or killed for " \
          "memory)"

_TARGET = "cuda_agent.build.pool:serve"


def serve(conn: Connection, fn: Callable[[Any], dict[str, Any]]) -> None:
    """A compile process's loop: a job in, `fn(job)` out, until the parent hangs up."""
    while True:
        try:
            job = conn.recv()
        except (EOFError, OSError):
            return
        conn.send(fn(job))


class PoolClosed(Exception):
    """The pool was closed while a build waited on it (the run is ending)."""


class CompilePool:
    """Up to `size` compile processes shared by every thread that builds."""

    def __init__(self, size: int, fn: Callable[[Any], dict[str, Any]]) -> None:
        self.size = size
        self.fn = fn
        self._idle: list[procs.Child] = []
        self._live = 0  # started and not discarded: idle, busy, or starting
        self._cond = threading.Condition()
        self._closed = False

    @property
    def started(self) -> bool:
        return self._live > 0

    # -- processes ---------------------------------------------------------------------------
    def _checkout(self, want: int, block: bool, deadline: float | None) -> list[procs.Child]:
        """Up to `want` processes: idle ones first, then new ones while under `size`; with
        `block`, wait for one (another thread holds them all) until the deadline."""
        with self._cond:
            while True:
                if self._closed:
                    raise PoolClosed
                got = [self._idle.pop() for _ in range(min(want, len(self._idle)))]
                new = min(want - len(got), self.size - self._live)
                self._live += new
                if got or new or not block:
                    break
                if deadline is not None and time.monotonic() >= deadline:
                    break
                self._cond.wait(0.5)
        fresh: list[procs.Child] = []
        try:
            for _ in range(new):
                fresh.append(procs.start(_TARGET, (self.fn,), "compile"))
            for child in fresh:  # started side by side, then each waited for
                child.wait_ready(procs.START_TIMEOUT_S)
        except BaseException:
            for child in fresh:
                child.close()
            with self._cond:
                self._live -= new
                self._idle.extend(got)
                self._cond.notify_all()
            raise
        return got + fresh

    def _checkin(self, child: procs.Child) -> None:
        with self._cond:
            if self._closed:
                child.close()
                self._live -= 1
            else:
                self._idle.append(child)
            self._cond.notify_all()

    def _discard(self, child: procs.Child) -> None:
        child.close()
        with self._cond:
            self._live -= 1
            self._cond.notify_all()

    # -- jobs --------------------------------------------------------------------------------
    def run(self, jobs: list[Any], timeout_s: float | None = None,
            deadline: float | None = None) -> list[dict[str, Any]]:
        """`fn(job)` for every job, in order; timeouts, crashes and the deadline come back as
        results (see the module's docstring). `deadline` is a `time.monotonic()` instant."""
        results: list[dict[str, Any] | None] = [None] * len(jobs)
        queue = deque(range(len(jobs)))
        tries = [0] * len(jobs)
        busy: dict[Connection, tuple[procs.Child, int, float]] = {}

        def died(child: procs.Child, i: int) -> None:
            self._discard(child)
            tries[i] += 1
            if tries[i] >= 2:
                results[i] = {"error_kind": "compile_crash", "error_msg": CRASHED,
                              "seconds": 0.0, "per_kernel": {}}
            else:
                queue.appendleft(i)  # once more, in a fresh process

        try:
            while queue or busy:
                if deadline is not None and time.monotonic() >= deadline:
                    break
                if queue:
                    for child in self._checkout(len(queue), not busy, deadline):
                        i = queue.popleft()
                        try:
                            child.conn.send(jobs[i])
                        except OSError:
                            died(child, i)
                            continue
                        busy[child.conn] = (child, i, time.monotonic())
                if not busy:
                    continue
                now = time.monotonic()
                waits = [1.0]  # wake now and then: the pool may be closed under us
                if deadline is not None:
                    waits.append(deadline - now)
                if timeout_s is not None:
                    waits.extend(t0 + timeout_s - now for _, _, t0 in busy.values())
                for ready in wait(list(busy), max(0.0, min(waits))):
                    # wait() hands back some of the objects it was given: Connections here
                    conn = cast(Connection, ready)
                    child, i, _ = busy.pop(conn)
                    try:
                        results[i] = conn.recv()
                    except (EOFError, OSError):
                        died(child, i)
                        continue
                    self._checkin(child)
                if timeout_s is not None:
                    now = time.monotonic()
                    for conn, (child, i, t0) in list(busy.items()):
                        if now - t0 >= timeout_s:
                            del busy[conn]
                            self._discard(child)
                            results[i] = {"error_kind": "compile_timeout",
                                          "error_msg": f"the compile took over {timeout_s:g} s "
                                                       "and was stopped",
                                          "seconds": timeout_s, "per_kernel": {}}
                with self._cond:
                    if self._closed:
                        raise PoolClosed
        finally:
            # cut by the deadline, or interrupted: what is still compiling is not wanted
            for child, _, _ in busy.values():
                self._discard(child)
        return [r if r is not None else {"error_kind": CUT, "error_msg": "the time limit came "
                                         "first", "seconds": 0.0, "per_kernel": {}}
                for r in results]

    def close(self) -> None:
        with self._cond:
            self._closed = True
            idle, self._idle = self._idle, []
            self._live -= len(idle)
            self._cond.notify_all()
        for child in idle:
            child.close()

