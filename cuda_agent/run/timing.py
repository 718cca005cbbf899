"""The timing half of the evaluation protocol, used alike for candidates and baselines.

CUDA events on the current stream around each run; warm-up first; L2 flushed (a buffer larger
than L2 rewritten) before every timed run, outside the timed region; inputs rotated among several
sets so no run finds the previous run's data in cache; median with interquartile spread.
A time below the physical floor (bytes over bandwidth, FLOPs over peak) is a measurement error.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Callable

import torch


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


@dataclass
class Timing:
    median_ms: float
    q1_ms: float
    q3_ms: float
    samples: int
    early_stopped: bool = False

    @property
    def spread_ms(self) -> float:
        return self.q3_ms - self.q1_ms


class L2Flusher:
    """Owns a device buffer twice the size of L2; `flush()` rewrites it."""

    def __init__(self, device: torch.device, l2_bytes: int) -> None:
        self.buf = torch.empty(max(2 * l2_bytes, 1 << 20) // 4, dtype=torch.float32, device=device)

    def flush(self) -> None:
        self.buf.fill_(1.0)


def time_runs(run: Callable[[int], None], n_sets: int, settings: TimingSettings,
              flusher: L2Flusher | None, best_ms: float | None = None) -> Timing:
    """Time `run(set_index)`; the caller has already checked it works."""
    for k in range(settings.warmup):
        run(k % n_sets)
    torch.cuda.synchronize()
    times: list[float] = []
    early = False
    spent = 0.0
    batch = settings.min_reps
    k = 0
    while len(times) < settings.reps:
        events = []
        for _ in range(min(batch, settings.reps - len(times))):
            if flusher is not None and settings.flush_l2:
                flusher.flush()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            run(k % n_sets)
            end.record()
            events.append((start, end))
            k += 1
        torch.cuda.synchronize()
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
    return Timing(statistics.median(times), times[n // 4], times[(3 * n) // 4], n, early)


def physical_floor_ms(bytes_moved: int, flops: int, dram_bw: float, l2_bytes: int,
                      peak_flops: float = 67e12) -> float:
    """The least time a correct kernel can take; anything faster is a measurement error.

    Data larger than L2 must cross DRAM (a 25 % margin over the measured copy bandwidth: a
    read-only stream runs a little faster than a copy, and the copy is measured once); smaller
    data may partly stay in L2, which is several times faster, so the bound is loosened.
    """
    bw = dram_bw * (1.25 if bytes_moved > l2_bytes else 4.0)
    return max(bytes_moved / bw, flops / peak_flops) * 1000.0
