"""Splitting one search's budget and time limit across a model's kernel regions by expected
gain, as a task scheduler splits one budget across tasks (TVM's task scheduler and Ansor's
gradient scheduler weight a task by the time it could still save).

A region's expected gain is its eager time times its headroom: what torch spends on it now,
less the least a kernel could (`floor_s`, its plan's arithmetic and least bytes moved at an
H200's fp32 rate and bandwidth, DESIGN.md's measured facts). On a GPU the eager times are
measured (`tune.measure_eager`: each region's torch reference on the device, in the user's
settings); a region not measured in the seconds allowed takes the measured regions' median
ratio of eager time to floor; where none is measured (the simulated and replay devices) the
floor itself is the weight, the roofline split. Regions are tuned largest gain first, so a
time limit that ends early cuts the least promising."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Mapping, Sequence

from .split import Region

FP32_FLOPS = 50.5e12  # plain fp32 FMA (the SIMT templates' ceiling)
BYTES_PER_S = 4.3e12  # device-to-device copy, read + write counted
LAUNCH_S = 3e-6  # a kernel launch's floor: a tiny region is still worth a few measurements
MIN_HEADROOM = 0.1
"""the least headroom a measured region is given: eager already at the estimated floor (a
cuBLAS product, say) may still lose a launch or a pass to fusion, and the floor is only an
estimate (TF32 tensor cores beat the fp32 rate it assumes)"""
EAGER_SHARE = 0.1
"""the most of a time limit spent measuring the regions' eager times before tuning them"""


def floor_s(r: Region) -> float:
    """The region's least time on the target (its roofline), seconds."""
    return max(r.flops / FP32_FLOPS, r.bytes / BYTES_PER_S) + LAUNCH_S


@dataclass(frozen=True)
class Gain:
    """One kernel region's weight in the split, and what it was made of."""

    region: int
    floor_s: float
    eager_s: float | None  # measured on the device; None where it was not
    estimated_eager_s: float | None  # from the measured regions' ratio, where not measured
    weight_s: float  # the seconds tuning it could save (the roofline where nothing measured)
    source: str  # "measured eager" | "estimated eager" | "roofline"

    def record(self) -> dict[str, object]:
        return {"floor_s": self.floor_s, "eager_s": self.eager_s,
                "estimated_eager_s": self.estimated_eager_s, "weight_s": self.weight_s,
                "weight_from": self.source}


def _headroom_weight(eager: float, floor: float) -> float:
    return eager * min(1.0, max(MIN_HEADROOM, 1.0 - floor / eager))


def gains(regions: Sequence[Region], eager_s: Mapping[int, float] | None = None
          ) -> dict[int, Gain]:
    """Each region's expected gain, by index. `eager_s`: measured eager seconds by region
    index (any subset; non-positive figures are ignored)."""
    measured = {k: v for k, v in (eager_s or {}).items() if v and v > 0}
    ratios = [measured[r.index] / floor_s(r) for r in regions if r.index in measured]
    ratio = statistics.median(ratios) if ratios else None
    out = {}
    for r in regions:
        floor = floor_s(r)
        if r.index in measured:
            eager = measured[r.index]
            out[r.index] = Gain(r.index, floor, eager, None, _headroom_weight(eager, floor),
                                "measured eager")
        elif ratio is not None:
            est = floor * ratio
            out[r.index] = Gain(r.index, floor, None, est, _headroom_weight(est, floor),
                                "estimated eager")
        else:
            out[r.index] = Gain(r.index, floor, None, None, floor, "roofline")
    return out


def shares(budget: int, weights: Sequence[float]) -> list[int]:
    """Measurements per region: at least one each, the rest by weight (largest remainders)."""
    if not weights:
        return []
    total = sum(weights)
    n = len(weights)
    extra = max(0, budget - n)
    raw = [extra * w / total for w in weights] if total > 0 else [extra / n] * n
    out = [1 + int(x) for x in raw]
    left = budget - sum(out)
    for k in sorted(range(n), key=lambda k: raw[k] - int(raw[k]), reverse=True)[:max(0, left)]:
        out[k] += 1
    return out


def time_share(left_s: float, weight: float, later: Sequence[float]) -> float:
    """The seconds a region of `weight` may take of `left_s`, shared by weight with the
    regions (`later`, their weights) still to be tuned after it (what an earlier region
    leaves goes to the later ones)."""
    total = weight + sum(later)
    return left_s * weight / total if total > 0 else left_s / (1 + len(later))
