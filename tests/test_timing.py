"""The timing loop's protocol, with a scripted clock in place of the GPU: the L2 flush and the
spin come before each start event, and a run the host may have delayed (its start event already
reached when its end event was enqueued) is timed again, never silently kept."""

from __future__ import annotations

import pytest

from cuda_agent.runner.timing import TimingSettings, physical_floor_ms, time_runs


class ScriptedClock:
    """Events whose times and 'already reached' answers come from scripts, and a log of the
    order in which the loop asked for things."""

    def __init__(self, times: list[float], reached: list[bool]) -> None:
        self.times, self.reached, self.log = list(times), list(reached), []

    def lead(self, us: float) -> None:
        self.log.append(("lead", us))

    def event(self) -> "ScriptedEvent":
        return ScriptedEvent(self)

    def synchronize(self) -> None:
        self.log.append(("sync",))


class ScriptedEvent:
    def __init__(self, clock: ScriptedClock) -> None:
        self.clock = clock
        self.ms = None
        self.reached = None

    def record(self) -> None:
        self.clock.log.append(("record",))
        if self.clock.reached is not None:
            self.reached = self.clock.reached.pop(0) if self.clock.reached else False
            self.ms = self.clock.times.pop(0)

    def query(self) -> bool:
        return bool(self.reached)

    def elapsed_time(self, end: "ScriptedEvent") -> float:
        return self.ms


class Flusher:
    def __init__(self, log: list) -> None:
        self.log = log

    def flush(self) -> None:
        self.log.append(("flush",))


def timed(clock: ScriptedClock, settings: TimingSettings):
    ran: list[int] = []

    def run(k: int) -> None:
        ran.append(k)
        clock.log.append(("run", k))

    return run, ran


def test_each_run_is_flushed_then_led_in_then_timed():
    s = TimingSettings(warmup=1, reps=5, min_reps=5, lead_us=150.0)
    clock = ScriptedClock([1.0, 2.0, 3.0, 4.0, 5.0] * 2, [False] * 10)
    run, _ = timed(clock, s)
    t = time_runs(run, 3, s, Flusher(clock.log), clock=clock)
    assert t.median_ms == 3.0 and t.samples == 5 and t.host_bound == 0
    timed_part = clock.log[clock.log.index(("sync",)) + 1:]
    for i in range(5):  # flush, lead, start, run, end for every timed run
        assert timed_part[5 * i:5 * i + 5] == [("flush",), ("lead", 150.0), ("record",),
                                             ("run", i % 3), ("record",)]


def test_a_run_the_host_may_have_delayed_is_timed_again():
    s = TimingSettings(warmup=0, reps=5, min_reps=5, lead_us=100.0, retries=2)
    # start events in record order (start, end, start, end, ...): the second run's first start
    # was already reached when its end was enqueued (it read 50 ms: host time); its retry was not
    reached = [False, False, True, False, False, False, False, False, False, False, False, False]
    times = [1.0, 1.0, 50.0, 50.0, 1.1, 1.1, 1.2, 1.2, 0.9, 0.9, 1.0, 1.0]
    clock = ScriptedClock(times, reached)
    run, ran = timed(clock, s)
    t = time_runs(run, 2, s, None, clock=clock)
    assert t.samples == 5 and t.host_bound == 0
    assert t.q3_ms < 2.0  # the delayed reading is not among the samples
    assert ran == [0, 1, 1, 0, 1, 0]  # the second run was repeated on the same input set


def test_a_host_that_is_always_late_is_counted_not_hidden():
    s = TimingSettings(warmup=0, reps=5, min_reps=5, lead_us=100.0, retries=1)
    clock = ScriptedClock([2.0] * 40, [True] * 40)
    run, ran = timed(clock, s)
    t = time_runs(run, 1, s, None, clock=clock)
    assert t.samples == 5 and t.host_bound == 5 and len(ran) == 10  # each run tried twice


def test_without_a_lead_in_nothing_is_retried():
    s = TimingSettings(warmup=0, reps=5, min_reps=5, lead_us=0.0)
    clock = ScriptedClock([1.0] * 20, [True] * 20)
    run, ran = timed(clock, s)
    t = time_runs(run, 1, s, None, clock=clock)
    assert len(ran) == 5 and t.host_bound == 0
    assert ("lead", 0.0) in clock.log  # asked for none: the clock spins for 0 us


def test_early_stop_still_applies():
    s = TimingSettings(warmup=0, reps=15, min_reps=5, stop_factor=3.0)
    clock = ScriptedClock([10.0] * 40, [False] * 80)
    run, ran = timed(clock, s)
    t = time_runs(run, 1, s, None, best_ms=1.0, clock=clock)
    assert t.early_stopped and t.samples == 5


@pytest.mark.parametrize("bytes_moved,expect_ms", [(4 * 10**9, 4e9 / (4e12 * 1.25) * 1e3)])
def test_physical_floor_by_hand(bytes_moved, expect_ms):
    assert physical_floor_ms(bytes_moved, 0, 4e12, 60 * 2**20) == pytest.approx(expect_ms)


def test_the_floor_follows_the_numeric_contract():
    """A 4096^3 product (1.37e11 flop) at 0.3 ms runs at 458 TFLOP/s: impossible for strict fp32
    (3xTF32 at most a third of the tensor cores' TF32 rate) and for TF32, within reach of fp16
    and bf16 (a correct fp16 GEMM was once rejected by a floor that knew only fp32 FMA)."""
    from cuda_agent.runner.timing import PEAK_FLOPS

    flops, ms = 2 * 4096**3, 0.3
    floors = {p: physical_floor_ms(3 * 4096 * 4096 * 4, flops, 4e12, 60 * 2**20, peak)
              for p, peak in PEAK_FLOPS.items()}
    assert floors["fp32"] > ms and floors["tf32"] < ms  # 0.83 ms, 0.28 ms
    assert floors["fp16"] < ms and floors["bf16"] < ms
    assert floors["fp32"] > floors["tf32"] > floors["fp16"] == floors["bf16"]
