"""The timing half of the evaluation protocol, used alike for candidates and baselines.

CUDA events on the current stream around each run; warm-up first; L2 flushed (a buffer larger
than L2 rewritten) before every timed run, outside the timed region; inputs rotated among several
sets so no run finds the previous run's data in cache; median with interquartile spread.
A time below the physical floor (bytes over bandwidth, FLOPs over peak) is a measurement error.

The events time the GPU's work, not the host's: before each start event the GPU is given a
short spin (`lead_us`), during which the host enqueues the start event, every launch of the run
and the end event, so the GPU never waits between them for the host. A run whose start event
had already been reached when its end event was enqueued may hold such a wait (the host was
slower than the spin: a busy machine, a preempted thread) and is timed again. Without this, a
kernel of microseconds reads the host's launch latency, and its configurations rank differently
from one run to the next (docs/journal.md: runner/timing.py).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Callable

import torch

from ..space.slots import Target


TIMING_PROTOCOL = "t2"
"""Changed whenever the protocol changes what a time means, so that a store does not serve a
time taken the older way (t2: the host's launch path kept out of the events)."""


@dataclass
class TimingSettings:
    """How candidates and baselines are timed (one protocol for both: STYLE lesson 7)."""

    warmup: int = 3
    """untimed runs first (module load, caches, clocks)"""
    reps: int = 15
    """timed runs"""
    min_reps: int = 5
    """runs before an early stop may be decided"""
    stop_factor: float = 3.0
    """stop timing once the median so far exceeds this multiple of the best time seen"""
    max_seconds: float = 2.0
    """stop adding repetitions once this much GPU time was spent on one candidate"""
    flush_l2: bool = True
    """rewrite a buffer larger than L2 before every timed run"""
    rotate: int = 3
    """input sets to rotate among"""
    lead_us: float = 200.0
    """GPU spin before each start event, microseconds at the boost clock (0: none): longer than
    the host needs to enqueue a run, so its launches queue behind the spin"""
    retries: int = 2
    """per timed run, how many times a run the host may have delayed is timed again"""


@dataclass
class Timing:
    median_ms: float
    q1_ms: float
    q3_ms: float
    samples: int
    early_stopped: bool = False
    host_bound: int = 0
    """timed runs kept although the host may have delayed them (retries spent)"""

    @property
    def spread_ms(self) -> float:
        return self.q3_ms - self.q1_ms


class L2Flusher:
    """Owns a device buffer twice the size of L2; `flush()` rewrites it."""

    def __init__(self, device: torch.device, l2_bytes: int) -> None:
        self.buf = torch.empty(max(2 * l2_bytes, 1 << 20) // 4, dtype=torch.float32, device=device)

    def flush(self) -> None:
        self.buf.fill_(1.0)


class CudaClock:
    """What `time_runs` needs of the GPU: a spin before the start event, timing events, a
    synchronize (a test substitutes a scripted clock)."""

    def lead(self, us: float) -> None:
        if us > 0:  # spin cycles at the target's boost clock
            torch.cuda._sleep(int(us * 1e-6 * Target().clock_hz))

    def event(self) -> "torch.cuda.Event":
        return torch.cuda.Event(enable_timing=True)

    def synchronize(self) -> None:
        torch.cuda.synchronize()


def time_runs(run: Callable[[int], object], n_sets: int, settings: TimingSettings,
              flusher: L2Flusher | None, best_ms: float | None = None,
              clock: CudaClock | None = None) -> Timing:
    """Time `run(set_index)`; the caller has already checked it works."""
    clock = clock or CudaClock()
    for k in range(settings.warmup):
        run(k % n_sets)
    clock.synchronize()
    times: list[float] = []
    early = False
    spent = 0.0
    batch = settings.min_reps
    k = 0
    host_bound = 0
    while len(times) < settings.reps:
        events = []
        for _ in range(min(batch, settings.reps - len(times))):
            for attempt in range(settings.retries + 1):
                if flusher is not None and settings.flush_l2:
                    flusher.flush()
                clock.lead(settings.lead_us)
                start, end = clock.event(), clock.event()
                start.record()
                run(k % n_sets)
                end.record()
                # the start not yet reached: every launch of the run was queued before the GPU
                # got to it, so no wait for the host is inside the events
                if settings.lead_us <= 0 or not start.query():
                    break
                if attempt == settings.retries:
                    host_bound += 1  # kept: counted, so a host-bound figure is visible
            events.append((start, end))
            k += 1
        clock.synchronize()
        times.extend(s.elapsed_time(e) for s, e in events)
        spent += sum(times[-len(events):]) / 1000.0
        med = statistics.median(times)
        if best_ms is not None and med > settings.stop_factor * best_ms:
            early = True
            break
        if spent > settings.max_seconds:
            break
        batch = 5
    times.sort()
    n = len(times)
    return Timing(statistics.median(times), times[n // 4], times[(3 * n) // 4], n, early,
                  host_bound)


#: the H200's dense peak arithmetic per numeric contract (datasheet, flop/s): what no correct
#: kernel can beat. Strict fp32 counts 3xTF32 on tensor cores (a third of the TF32 rate, above
#: the 67e12 of fp32 FMA); the opt-in contracts their tensor-core rates. A floor from the fp32
#: FMA rate alone would reject a correct fp16 GEMM as "faster than physics" (docs/journal.md:
#: runner/timing.py).
#: A contract with TF32 for one kind of product takes the TF32 rate: the floor must hold for both.
PEAK_FLOPS = {"fp32": 495e12 / 3, "tf32": 495e12, "tf32:conv": 495e12, "tf32:matmul": 495e12,
              "fp16": 990e12, "bf16": 990e12}


def physical_floor_ms(bytes_moved: int, flops: int, dram_bw: float, l2_bytes: int,
                      peak_flops: float = PEAK_FLOPS["fp32"]) -> float:
    """The least time a correct kernel can take; anything faster is a measurement error.

    Data larger than L2 must cross DRAM (a 25 % margin over the measured copy bandwidth: a
    read-only stream runs a little faster than a copy, and the copy is measured once); smaller
    data may partly stay in L2, which is several times faster, so the bound is loosened.
    """
    bw = dram_bw * (1.25 if bytes_moved > l2_bytes else 4.0)
    return max(bytes_moved / bw, flops / peak_flops) * 1000.0
