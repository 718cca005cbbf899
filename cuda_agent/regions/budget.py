"""Splitting one search's budget and time limit across a model's kernel regions by expected
gain, as a task scheduler splits one budget across tasks (TVM's task scheduler): a region's
weight is its share of the model's expected time, estimated from its plan's arithmetic and
least bytes moved at an H200's fp32 rate and bandwidth (DESIGN.md's measured facts). Regions
are tuned largest first, so a time limit that ends early cuts the smallest."""

from __future__ import annotations

from typing import Sequence

from .split import Region

FP32_FLOPS = 50.5e12  # plain fp32 FMA (the SIMT templates' ceiling)
BYTES_PER_S = 4.3e12  # device-to-device copy, read + write counted
LAUNCH_S = 3e-6  # a kernel launch's floor: a tiny region is still worth a few measurements


def expected_s(r: Region) -> float:
    """The region's expected time (its roofline), seconds."""
    return max(r.flops / FP32_FLOPS, r.bytes / BYTES_PER_S) + LAUNCH_S


def shares(budget: int, regions: Sequence[Region]) -> list[int]:
    """Measurements per region: at least one each, the rest by weight (largest remainders)."""
    if not regions:
        return []
    weights = [expected_s(r) for r in regions]
    total = sum(weights)
    n = len(regions)
    extra = max(0, budget - n)
    raw = [extra * w / total for w in weights]
    out = [1 + int(x) for x in raw]
    left = budget - sum(out)
    for k in sorted(range(n), key=lambda k: raw[k] - int(raw[k]), reverse=True)[:max(0, left)]:
        out[k] += 1
    return out


def time_share(left_s: float, region: Region, later: Sequence[Region]) -> float:
    """The seconds `region` may take of `left_s`, shared by weight with the regions `later`
    still to be tuned after it (what an earlier region leaves goes to the later ones)."""
    w = expected_s(region)
    return left_s * w / (w + sum(expected_s(r) for r in later))
