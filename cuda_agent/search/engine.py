"""The one ask/tell search loop: ask -> build -> measure -> callbacks -> tell, until `StopRule`
says stop.

Every search runs through `Engine.run`: the tuner's (each stage of a program too, and the
programs it measures first), the replay and the live bench's strategies (Kernel Tuner's through
the ask/tell adapter `kernel_tuner_ask`), and training's episodes. What differs between them is
only what they plug in:

* a `Proposer` (what to measure next, and what it learns from each batch);
* `build` (render and compile a batch: the tuner's builder, or nothing on replay) and `measure`
  (one candidate on the device);
* `on_measured`, callbacks on every measurement, in order, under the device's lock: the store's
  record, a bench's bookkeeping, the tuner's best so far, progress;
* the `StopRule` (budget, time limit, a stage's plateau and seconds, Ctrl-C): the loop ends
  only where it says so, or where the proposer has nothing left ("space").

The pipelining is the loop's own: while a batch is measured the next one is asked for and
compiled (an adaptive proposer, which must hear a batch's results first, is asked after), the
first batch's first candidate is compiled alone so the first measurement waits for no whole
batch, and a proposer whose next answer waits on a model (the tuner's template picks) is asked
on a daemon thread that the time limit does not wait for.
"""

from __future__ import annotations

import itertools
import time
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as futures_wait
from contextlib import nullcontext
from typing import Any, Callable, ContextManager, Iterable, Iterator, Protocol, Sequence

from ..background import in_background
from ..build.pool import CUT
from ..runner.devices import Candidate
from ..runner.records import Measurement
from ..space.slots import Config
from .stop import StopRule


class Proposer(Protocol):
    """What the loop asks: configurations to measure, and what was measured.

    `ask(n, clock)` returns at most `n` configurations not proposed before (fewer, or none
    once it has nothing left), adding the seconds it spent to `timing[clock]` where it keeps
    timing; `tell` hears a batch's results (a batch cut short by the stop rule: those measured).
    `adaptive`: its next answer depends on the last batch's results (asked after the tell, not
    while the batch is measured); `ask_in_background`: its next answer may wait on a model and is
    asked on a daemon thread; `done`: it has plateaued (the search ends after this batch).
    Optionally `wanted(config)`: whether a configuration asked for earlier is still worth its
    measurement when its turn comes (the tuner's proposer gives up on a template whose
    candidates were all wrong, `search/verdicts.py`); one that is not is skipped, its budget
    given back, and not told."""

    adaptive: bool

    @property
    def done(self) -> bool: ...

    @property
    def ask_in_background(self) -> bool: ...

    def ask(self, n: int, clock: str = "strategy_s") -> list[Config]: ...

    def tell(self, results: list[tuple[Config, Measurement]]) -> None: ...


class Listed:
    """A proposer of a fixed list of configurations, in order (a program measured whole, the
    recorded sweep's best measured again)."""

    adaptive = False
    done = False
    ask_in_background = False

    def __init__(self, configs: list[Config]) -> None:
        self.left = list(configs)

    def ask(self, n: int, clock: str = "strategy_s") -> list[Config]:
        out, self.left = self.left[:n], self.left[n:]
        return out

    def tell(self, results: list[tuple[Config, Measurement]]) -> None:
        pass


Measured = Callable[[Any], None]
"""a callback on one measurement (the caller's record of it: a tuner's `Trial`)"""


def _later(build: Future) -> Iterator[Candidate]:
    yield from build.result()


class Engine:
    """One search: `proposer` asked for batches of at most `batch` configurations, each built
    by `build`, measured one by one by `measure` (which returns the caller's record of the
    measurement, with a `measurement` attribute) under `lock` with `on_measured` called on
    each in order, then told to the proposer; `rule` decides when it ends. `timing` (optional)
    gathers where the wall time went: `strategy_s` (asking, telling), `build_wait_s`
    (waiting for compiles), `strategy_ahead_s` (asked in the background)."""

    def __init__(self, proposer: Proposer, build: Callable[[list[Config]], list[Candidate]],
                 measure: Callable[[Candidate], Any], rule: StopRule, batch: int,
                 on_measured: Sequence[Measured] = (), lock: ContextManager[Any] | None = None,
                 timing: dict[str, float] | None = None) -> None:
        self.proposer = proposer
        self.build = build
        self.measure = measure
        self.rule = rule
        self.batch = batch
        self.on_measured = list(on_measured)
        self.lock = lock if lock is not None else nullcontext()
        self.timing = timing if timing is not None else {}
        for clock in ("strategy_s", "build_wait_s", "strategy_ahead_s"):
            self.timing.setdefault(clock, 0.0)
        self.measured: list[Any] = []
        """the records `measure` returned, in order"""

    def _measure(self, cand: Candidate) -> Any:
        with self.lock:  # one measurement at a time on a shared device, its callbacks with it
            record = self.measure(cand)
            for callback in self.on_measured:
                callback(record)
        self.measured.append(record)
        return record

    def run(self) -> str:
        """Search until the rule (or the proposer) says stop; why it ended (`stop.STOPPED`).
        Ctrl-C raises KeyboardInterrupt (from the main thread) as it comes; what was measured
        is in `measured` and the callbacks' records."""
        p, rule, timing = self.proposer, self.rule, self.timing
        wanted: Callable[[Config], bool] = getattr(p, "wanted", lambda c: True)
        pool = ThreadPoolExecutor(1)
        adaptive = p.adaptive
        next_build: Future | None = None
        asked_ahead: Future | None = None

        def build_ahead(configs: list[Config]) -> Future | None:
            return pool.submit(self.build, configs) if configs else None

        def ask_ahead(n: int) -> tuple[Future, Future]:
            """(the next batch's build, the next batch): asked for in the background (a daemon
            thread: the time limit does not wait for it), then built; the proposer is told
            nothing until it has answered (`wait_asked`)."""
            configs = in_background(p.ask, n, "strategy_ahead_s", name="cuda-agent-ask")
            return pool.submit(lambda: self.build(c) if (c := configs.result())
                               else []), configs

        def wait_asked() -> bool:
            """Whether the background ask has answered, waited for until the time limit."""
            if asked_ahead is None or asked_ahead.done():
                return True
            t = time.perf_counter()
            futures_wait([asked_ahead], timeout=rule.left())
            timing["strategy_s"] += time.perf_counter() - t
            return asked_ahead.done()

        stopped = "space"
        try:
            asked, batch = rule.bounded(p.ask, min(self.batch, rule.remaining))
            if not asked:
                stopped, batch = "time_limit", []
            while batch and rule.remaining > 0:
                t = time.perf_counter()
                if next_build is not None:
                    cands: Iterable[Candidate] = next_build.result()
                else:
                    # the first batch: its first candidate is built alone and measured while
                    # the rest compile, so the first measurement does not wait for a whole
                    # batch of compiles (seconds on a small machine)
                    head = self.build(batch[:1])
                    rest = build_ahead(batch[1:])
                    cands = itertools.chain(head, _later(rest) if rest is not None else [])
                timing["build_wait_s"] += time.perf_counter() - t
                rule.take(len(batch))
                following: list[Config] | None
                if p.ask_in_background and not adaptive and rule.remaining > 0:
                    following = None  # asked in the background: `asked_ahead`
                    next_build, asked_ahead = ask_ahead(min(self.batch, rule.remaining))
                else:
                    following = []
                    if not adaptive and rule.remaining > 0:
                        asked, following = rule.bounded(p.ask, min(self.batch, rule.remaining))
                        if not asked:
                            stopped, following = "time_limit", []
                    next_build = build_ahead(following)
                results: list[tuple[Config, Measurement]] = []
                settled = False
                for cand in cands:
                    why = "time_limit" if cand.build_error and cand.build_error[0] == CUT \
                        else rule.before_measure()
                    if why == "time_limit":
                        stopped = why
                        break
                    if why == "plateau":
                        settled = True  # this stage's seconds: the next stage's turn
                        break
                    if not wanted(cand.config):
                        rule.give_back(1)
                        continue
                    m = self._measure(cand).measurement
                    results.append((cand.config, m))
                    settled = rule.after_measure(m) == "plateau"
                    if settled:
                        break  # the rest of this stage's share goes to the next stage
                # the proposer is told nothing while it is asked elsewhere; a search whose
                # time is up does not wait for that to end
                if not wait_asked():
                    stopped = "time_limit"
                    break
                t = time.perf_counter()
                if results and stopped != "time_limit" and not rule.bounded(p.tell, results)[0]:
                    stopped = "time_limit"
                timing["strategy_s"] += time.perf_counter() - t
                if stopped == "time_limit":
                    break
                # "plateau": the proposer says the search has, or the stage has
                why = rule.after_batch(p.done or settled)
                if why is not None:
                    stopped = why
                    break
                if following is None:
                    assert asked_ahead is not None
                    following = asked_ahead.result()
                elif adaptive:
                    asked, following = rule.bounded(p.ask, min(self.batch, rule.remaining))
                    if not asked:
                        stopped = "time_limit"
                        break
                    next_build = build_ahead(following)
                batch = following
        finally:
            # a build ahead that is not wanted any more (the limit, Ctrl-C) is not waited for
            if next_build is not None:
                next_build.cancel()
            pool.shutdown(wait=False, cancel_futures=True)
        return stopped
