"""When a search stops, asked in one place (as Kernel Tuner's `check_stop_criterion`), and how a
program's budget is split across its stages (as MetaSchedule's task scheduler splits one
budget across tasks).

`StopRule` holds every reason a search ends: its budget is spent, the time limit has come, the
search (or a program's stage) has plateaued, the user pressed Ctrl-C. The one search loop
(`engine.Engine`) asks it before and after each measurement and after each batch, and bounds
the strategy's own work by its time limit (`bounded`). `StageSchedule` gives each stage of a
program its share of the measurements, of the seconds, and its plateau, and runs the stages in
turn (`run`: the tuner's stage search and the live bench's Kernel Tuner on a program).
"""

from __future__ import annotations

import time
from concurrent.futures import wait as futures_wait
from dataclasses import dataclass
from typing import Any, Callable

from .. import interrupt
from ..background import in_background
from ..runner.records import Measurement
from ..space.program import STAGE_GAIN, StagePlateau, stage_share

STOPPED = ("budget", "space", "plateau", "time_limit", "interrupted")
"""why a search ended: its budget was spent; the space (or the strategy's proposals) ran out;
the strategy said it had plateaued; the time limit came; the user pressed Ctrl-C"""


@dataclass
class StopRule:
    """Whether a search should stop, and why (one of `STOPPED`)."""

    budget: int | None = None
    """configurations the search may take (asked for and built; None: no bound)"""
    deadline: float | None = None
    """the time limit, a `time.monotonic()` instant (None: none)"""
    plateau: StagePlateau | None = None
    """a program's stage: settled once this says so"""
    until: float | None = None
    """a program's stage: its share of the seconds (`time.monotonic()`), after which it hands
    the rest on once it has measured something"""
    taken: int = 0
    """configurations taken so far (a batch counts when its building starts)"""
    measured: int = 0
    """measurements made so far under this rule"""

    @property
    def remaining(self) -> int:
        """Configurations the budget still allows (a large number where it has none)."""
        return 2**62 if self.budget is None else self.budget - self.taken

    def take(self, n: int) -> None:
        """`n` configurations were taken (a batch): they count against the budget."""
        self.taken += n

    def give_back(self, n: int) -> None:
        """`n` configurations taken were not measured after all (given up on): the budget has
        them again."""
        self.taken -= n

    def time_up(self) -> bool:
        return self.deadline is not None and time.monotonic() >= self.deadline

    def left(self) -> float | None:
        """Seconds left before the time limit (None: no limit)."""
        return None if self.deadline is None else max(0.0, self.deadline - time.monotonic())

    def bounded(self, fn: Callable[..., Any], *args: Any) -> tuple[bool, Any]:
        """(True, fn(*args)), or (False, None) where the time limit came first. Without a
        limit fn runs here; with one, on a daemon thread waited for until the limit, and one
        that runs past it goes on unheard while the search ends on time: the strategy's own
        work (the model's picks of a large stage, listing its space, an online update) held a
        time-limited search of a three-layer MLP 1.8-4.4 s past a 15 s limit on the
        simulator. The strategy is not used again after such a call."""
        if self.deadline is None:
            return True, fn(*args)
        if self.time_up():
            return False, None
        job = in_background(fn, *args, name="cuda-agent-strategy")
        futures_wait([job], timeout=self.left())
        if not job.done():
            return False, None
        return True, job.result()

    def before_measure(self) -> str | None:
        """Before a measurement: "time_limit" once the limit has come; "plateau" once the
        stage's share of the seconds has passed and it measured something; Ctrl-C (while the
        search runs off the main thread, where the signal does not reach) raises
        KeyboardInterrupt. None: measure."""
        if self.time_up():
            return "time_limit"
        if self.until is not None and self.measured > 0 and time.monotonic() >= self.until:
            return "plateau"
        if interrupt.requested():
            raise KeyboardInterrupt
        return None

    def after_measure(self, m: Measurement) -> str | None:
        """After a measurement: "plateau" once the stage has settled, else None."""
        self.measured += 1
        if self.plateau is not None and self.plateau.update(m.time_ms if m.ok else None):
            return "plateau"
        return None

    def after_batch(self, plateaued: bool) -> str | None:
        """After a batch was measured and told: "plateau" where the strategy (or the stage)
        says so, "budget" once it is spent, "time_limit" once the limit has come."""
        if plateaued:
            return "plateau"
        if self.remaining <= 0:
            return "budget"
        if self.time_up():
            return "time_limit"
        return None


@dataclass
class StageSchedule:
    """A program's budget across its `stages`, searched one after the other in rounds: in each
    round each stage gets an even share of what is left (of the measurements and of the
    seconds), so what one does not spend goes to the later ones and the last takes all that
    remains. With a `patience` every stage, the last one too, hands over once it settles
    (`StagePlateau`), and while a round brought progress (the program's best fell by
    `STAGE_GAIN`) and measurements are left, another round searches the stages again from the
    best program: what the stages that settled did not spend goes back to the first, where a
    chain's heavy op usually is, not to the last. (One round with the last stage taking it all
    spent 53 of a transposed convolution chain's 64 measurements on its closing reduction,
    whose candidates differed by 0.2 %, after the convolution's stage had measured 11:
    `benchmarks/results/2026-12-07-h100-conv-chains`.) Without a patience (None) there is one
    round and every stage takes its share."""

    budget: int
    stages: int
    patience: int | None = None
    deadline: float | None = None

    def share(self, stage: int, spent: int) -> int:
        """Stage `stage`'s measurements, `spent` having been spent before it."""
        return stage_share(self.budget - spent, self.stages - stage)

    def until(self, stage: int, now: float) -> float | None:
        """Stage `stage`'s share of the seconds left at `now` (a `time.monotonic()` instant
        it may search until; None: no time limit)."""
        if self.deadline is None:
            return None
        return now + max(0.0, self.deadline - now) / (self.stages - stage)

    def run(self, spent: Callable[[], int], search: Callable[[int, int, float | None, int], str],
            base: int = 0, first: tuple[int, float] | None = None,
            best_ms: Callable[[], float | None] = lambda: None) -> str:
        """Search the stages in rounds: `search(stage, share, until, round)` searches one with
        its share of the measurements (`share`) and of the seconds (`until`: `until`'s) and
        says why it ended; a stage whose share is spent already is skipped, and "time_limit"
        ends them all. `spent()`: measurements made so far; `base`: those made before the
        program's search began (not its own); `first`: (measurements, `time.monotonic()`)
        from which the first stage's shares count, where the programs measured before the
        stages are its candidates too (the tuner's first programs); None: from the first
        stage's own start. `best_ms()`: the program's best time so far (None: none), which
        says whether a round brought progress. Why the last stage searched ended ("": none
        was)."""
        stopped = ""
        rounds = 0
        while True:
            before = best_ms()
            for i in range(self.stages):
                begun, now = first if rounds == 0 and i == 0 and first is not None else (
                    spent(), time.monotonic())
                share = self.share(i, begun - base) - (spent() - begun)
                if share < 1:
                    continue
                stopped = search(i, share, self.until(i, now), rounds)
                if stopped == "time_limit":
                    return stopped  # no stage after this one gets any time
            rounds += 1
            if not self.another_round(spent() - base, before, best_ms()):
                return stopped

    def another_round(self, spent: int, before: float | None, after: float | None) -> bool:
        """Whether the stages are searched again: each hands over when it settles (a
        patience), measurements are left, and the round just ended brought progress."""
        if self.patience is None or spent >= self.budget or after is None:
            return False
        return before is None or after < before * (1 - STAGE_GAIN)

    def plateau(self, stage: int, best_ms: float | None) -> StagePlateau | None:
        """Stage `stage`'s plateau, from the program's best time so far (None: no patience,
        every stage takes its share)."""
        if self.patience is None:
            return None
        return StagePlateau(best_ms, self.patience)
