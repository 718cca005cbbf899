"""Kernel Tuner's strategies as an ask/tell proposer of the search loop (`engine.Engine`).

Kernel Tuner drives its own loop: `tune_kernel` calls its runner with the configurations it
wants evaluated and waits for their results. Its API has no ask/tell form (its strategies are
functions that run to the end), so the adapter runs `kernel_tuner_sim.run_live` - Kernel
Tuner's own code, its simulation runner swapped for one that asks cuda-agent for what is not in
its cache - on a driver, and turns each request of that runner into the loop's `ask` and each
reply into its `tell`:

* a daemon thread of this process, fed by a queue (one search at a time: Kernel Tuner's
  strategies draw from the process-wide `random` and numpy generators);
* or, with `isolated`, a process of its own over a pipe (`kernel_tuner_sim`'s child), so that
  several searches run beside each other, each seeded and patched alone.

A batch is Kernel Tuner's own (`ask` ignores `n`); its budget is its `max_fevals`, and the loop's
`StopRule` holds the same budget. Ending the loop early (a program's stage that has settled,
Ctrl-C, an error) abandons Kernel Tuner where it waits: `close` says so (None), else it gives
Kernel Tuner's order of evaluation and its error, if its strategy raised.
"""

from __future__ import annotations

import queue
import threading

from .. import procs
from ..errors import CudaAgentError, SettingsError
from ..runner.records import Measurement
from ..space.slots import Config
from . import kernel_tuner_sim
from .kernel_tuner_sim import Abandoned, Record, StrategyFailed

Order = list[tuple[Config, Record]]


def record_of(m: Measurement) -> Record:
    """What Kernel Tuner is told of a measurement (its cache entry is made from it)."""
    return {"ok": m.ok, "time_ms": m.time_ms if m.ok else None, "wall_s": m.wall_s,
            "reused": m.reused}


class _ThreadDriver:
    """`run_live` on a daemon thread; its runner's requests and our replies through queues."""

    def __init__(self, configs: list[Config], strategy: str, budget: int, seed: int,
                 warm: list[Config] | None) -> None:
        self.requests: queue.Queue = queue.Queue()
        self.replies: queue.Queue = queue.Queue()
        self.thread = threading.Thread(target=self._run, args=(configs, strategy, budget, seed,
                                                               warm),
                                       name="cuda-agent-kernel-tuner", daemon=True)
        self.thread.start()

    def _measure(self, cfgs: list[Config]) -> list[Record]:
        self.requests.put(("measure", cfgs))
        recs = self.replies.get()
        if recs is None:
            raise Abandoned()
        return list(recs)

    def _run(self, configs: list[Config], strategy: str, budget: int, seed: int,
             warm: list[Config] | None) -> None:
        try:
            order = kernel_tuner_sim.run_live(configs, strategy, budget, seed, self._measure,
                                              warm)
            self.requests.put(("done", order, None))
        except StrategyFailed as exc:
            self.requests.put(("done", exc.order, str(exc)))
        except Abandoned:
            self.requests.put(("abandoned",))
        except BaseException as exc:  # noqa: BLE001 - raised on the loop's side
            self.requests.put(("error", exc))

    def next(self) -> tuple:
        return self.requests.get()

    def reply(self, recs: list[Record] | None) -> None:
        self.replies.put(recs)

    def close(self) -> None:
        self.thread.join()


class _ProcessDriver:
    """`run_live` in a child process (`kernel_tuner_sim._child_search`) over a pipe."""

    def __init__(self, configs: list[Config], strategy: str, budget: int, seed: int,
                 warm: list[Config] | None) -> None:
        # not multiprocessing's spawn: that re-runs the user's __main__ in the child (`procs`)
        self.child = procs.start("cuda_agent.search.kernel_tuner_sim:_child_search",
                                 ([c.as_dict() for c in configs], strategy, budget, seed,
                                  [c.as_dict() for c in warm or []]), "Kernel Tuner")
        self.conn = self.child.conn
        self.child.wait_ready(procs.START_TIMEOUT_S)
        self.strategy, self.budget = strategy, budget
        self.asked: Order = []  # what it was served, in order
        self.pending: list[Config] = []

    def next(self) -> tuple:
        try:
            kind, *payload = self.conn.recv()
        except EOFError:  # the peer's process died: what it had measured is its result
            self.child.join(timeout=5)
            return ("done", self.asked[:self.budget],
                    f"Kernel Tuner {self.strategy}: its process ended (exit code "
                    f"{self.child.exitcode})")
        if kind == "measure":
            self.pending = [Config.of(c) for c in payload[0]]
            return ("measure", self.pending)
        if kind == "done":
            return ("done", [(Config.of(c), r) for c, r in payload[0]], payload[1])
        # an error of cuda-agent's own side in the child: raised here
        return ("error", (SettingsError if kind == "settings" else CudaAgentError)(payload[0]))

    def reply(self, recs: list[Record] | None) -> None:
        if recs is None:  # abandoned: the child stops listening with the pipe closed
            self.conn.close()
            return
        self.asked.extend(zip(self.pending, recs))
        self.conn.send(recs)

    def close(self) -> None:
        self.conn.close()
        self.child.join(timeout=10)
        self.child.close()  # killed if still running


class KernelTunerProposer:
    """Kernel Tuner's `strategy` over `configs` (at most `budget` measurements, seeded, the
    model's `warm` picks measured first: `kernel_tuner_sim`'s module docstring) as the loop's
    proposer. Call `close` once the loop has ended."""

    adaptive = True
    ask_in_background = False

    def __init__(self, configs: list[Config], strategy: str, budget: int, seed: int,
                 warm: list[Config] | None = None, isolated: bool = False) -> None:
        driver = _ProcessDriver if isolated else _ThreadDriver
        self.driver = driver(configs, strategy, budget, seed, warm)
        self.asked: list[Config] | None = None
        """the batch Kernel Tuner waits for (None: none)"""
        self.ended: tuple[Order, str | None] | None = None
        self.abandoned = False

    @property
    def done(self) -> bool:
        return self.ended is not None

    def _next(self) -> list[Config]:
        msg = self.driver.next()
        if msg[0] == "measure":
            self.asked = list(msg[1])
            return self.asked
        if msg[0] == "done":
            self.ended = (msg[1], msg[2])
        elif msg[0] == "abandoned":
            self.abandoned = True
        else:
            self.abandoned = True
            raise msg[1]
        return []

    def ask(self, n: int, clock: str = "strategy_s") -> list[Config]:
        """The next batch Kernel Tuner asks for (its own size); [] once it has ended."""
        if self.ended is not None or self.abandoned:
            return []
        return self._next()

    def tell(self, results: list[tuple[Config, Measurement]]) -> None:
        """A whole batch's records go back to Kernel Tuner; a batch the loop cut short (a
        stage that settled) does not: the loop ends there, and `close` abandons it."""
        if self.asked is not None and len(results) == len(self.asked):
            self.asked = None
            self.driver.reply([record_of(m) for _, m in results])

    def close(self) -> tuple[Order, str | None] | None:
        """Kernel Tuner's order of evaluation and its error (None: none), once it has ended;
        None where the loop ended first (it is abandoned where it waits)."""
        try:
            while self.ended is None and not self.abandoned:
                if self.asked is not None:
                    self.asked = None
                    self.driver.reply(None)
                    if isinstance(self.driver, _ProcessDriver):
                        self.abandoned = True
                        break
                try:
                    self._next()
                except Exception:  # noqa: BLE001 - the loop has ended; its own error stands
                    break
        finally:
            self.driver.close()
        return None if self.abandoned else self.ended


__all__ = ["KernelTunerProposer", "record_of"]
