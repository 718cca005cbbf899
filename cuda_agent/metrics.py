"""The comparison metrics of the field, as small pure functions (unit-tested by hand).

* fast_p: the share of problems whose kernel is correct and faster than the baseline by more
  than a factor p (KernelBench's metric; p = 0 is plain correctness);
* geometric-mean speedup over a baseline;
* measurements until the best so far is within a fraction (95 %) of the best known;
* fraction of the bandwidth roofline.
"""

from __future__ import annotations

import math
import statistics
from typing import Sequence, overload

P = (0.0, 1.0, 1.5, 2.0)


def fast_p(times: Sequence[float | None], baselines: Sequence[float | None], p: float) -> float:
    """Share of problems with a correct kernel (a finite time) faster than baseline / p.

    A problem without a baseline time cannot count as faster (it counts in the denominator)."""
    if not times:
        return 0.0
    hits = 0
    for t, b in zip(times, baselines):
        if t is None or not math.isfinite(t):
            continue
        if p == 0.0 or (b is not None and b / t > p):
            hits += 1
    return hits / len(times)


def geomean_speedup(times: Sequence[float | None], baselines: Sequence[float | None]
                    ) -> float | None:
    """Geometric mean of baseline / time over problems where both exist."""
    ratios = [b / t for t, b in zip(times, baselines)
              if t and b and math.isfinite(t) and math.isfinite(b)]
    if not ratios:
        return None
    return math.exp(sum(math.log(r) for r in ratios) / len(ratios))


def best_time(times: Sequence[float | None]) -> float | None:
    ok = [t for t in times if t is not None and math.isfinite(t)]
    return min(ok) if ok else None


@overload
def evals_to_fraction(times: Sequence[float | None], best_known: float, fraction: float = 0.95,
                      *, censor: int) -> int: ...
@overload
def evals_to_fraction(times: Sequence[float | None], best_known: float, fraction: float = 0.95,
                      censor: None = None) -> int | None: ...
def evals_to_fraction(times: Sequence[float | None], best_known: float, fraction: float = 0.95,
                      censor: int | None = None) -> int | None:
    """Measurements (1-based) until the best so far is within `fraction` of `best_known`:
    time <= best_known / fraction. Never reached: `censor` (or None)."""
    running = math.inf
    for k, t in enumerate(times, 1):
        if t is not None and t < running:
            running = t
        if running <= best_known / fraction:
            return k
    return censor


def median_roofline(times: Sequence[float | None], bytes_moved: Sequence[int],
                    bandwidth: Sequence[float | None]) -> float | None:
    """Median of achieved bandwidth over the measured copy bandwidth."""
    fr = [b / (t * 1e-3) / bw for t, b, bw in zip(times, bytes_moved, bandwidth)
          if t and bw and math.isfinite(t)]
    return statistics.median(fr) if fr else None
