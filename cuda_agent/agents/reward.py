"""Rewards: rank within the batch (noise and scale cancel between operators), a small auxiliary
term from each agent's own metrics, and a fixed penalty per failure kind.

The auxiliary term can be gamed (full shared memory looks "busy"; occupancy alone rewards
launching many idle threads), so it is small, bounded to [-1, 1] before weighting, paid only
for candidates that succeeded, and each agent's term is built so that its obvious exploit costs
it: memory's DRAM-throughput credit is reduced by bank conflicts, compute's issue credit by
spills.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from collections.abc import Sequence
from typing import Any

FAILURE_PENALTY = {
    "compile": -1.0, "compile_timeout": -1.0, "compile_crash": -1.0, "resources": -0.5,
    "launch": -0.75, "illegal_address": -1.5,
    "misaligned": -1.5, "timeout": -1.5, "crash": -1.5, "slow": -1.0, "unwritten": -1.0,
    "wrong": -1.0, "nan": -1.0, "mutated_input": -1.5, "degenerate": -0.5,
    "timing_floor": -1.0, "not_recorded": -0.25, "recorded_failure": -1.0, "cuda": -1.0,
}


@dataclass
class RewardSettings:
    """How candidates are scored against each other."""

    mode: str = "rank"
    """rank: within-batch rank (scale-free); time: minus the raw time in ms (the ablation
    that shows why ranking matters: operators of different sizes get incomparable rewards)"""
    top: float = 0.25
    """share of a batch's successful candidates rewarded +1"""
    bottom: float = 0.25
    """share rewarded -1 (the middle gets a linear ramp between)"""
    aux_weight: float = 0.05
    """weight of each agent's own-metric term"""
    improvement_bonus: float = 0.5
    """extra reward for beating the best time found so far on this operator"""
    rank_over: str = "batch"
    """batch: a candidate is ranked among the batch it was measured in; run: among every
    candidate measured on this operator so far in the run, the batch included (a batch that is
    uniformly worse than what the run already has is then punished, where within the batch
    its least bad member would still get +1)"""
    penalties: dict[str, float] = field(default_factory=lambda: dict(FAILURE_PENALTY))


def rank_rewards(times: Sequence[float | None], settings: RewardSettings) -> list[float | None]:
    """+1 for the top share, -1 for the bottom share, linear in between; None for failures."""
    ok = sorted((t, k) for k, t in enumerate(times) if t is not None and math.isfinite(t))
    out: dict[int, float] = {}  # by position in `times`; the failures are missing
    n = len(ok)
    if n == 1:
        out[ok[0][1]] = 0.0
        return [out.get(k) for k in range(len(times))]
    for rank, (t, k) in enumerate(ok):
        p = rank / (n - 1)  # 0 = fastest
        if p <= settings.top:
            r = 1.0
        elif p >= 1.0 - settings.bottom:
            r = -1.0
        else:
            mid = (p - settings.top) / max(1e-9, 1.0 - settings.top - settings.bottom)
            r = 1.0 - 2.0 * mid
        out[k] = r
    # equal times share the same reward (ties are noise, not information)
    by_time: dict[float, list[int]] = {}
    for t, k in ok:
        by_time.setdefault(t, []).append(k)
    for ks in by_time.values():
        if len(ks) > 1:
            avg = sum(out[k] for k in ks) / len(ks)
            for k in ks:
                out[k] = avg
    return [out.get(k) for k in range(len(times))]


def aux_term(agent: str, counters: dict[str, Any] | None) -> float:
    """The agent's own-metric credit in [-1, 1], from the counters of its own dimension
    (Nsight Compute's on the GPU, `runner/counters.derive`; the model's on the simulator, same
    names); 0 when they are missing.

    * config (how threads are organised): achieved occupancy, and how full the last wave of
      blocks is (`waves` 1.1 leaves most SMs idle for a tenth of the run): a launch of many
      idle threads gets occupancy but pays in its tail;
    * memory (how data moves): DRAM throughput, less bank conflicts per shared-memory
      wavefront and the share of each fetched sector that goes unused (coalescing): staging
      through shared memory with conflicts, or strided loads that fetch sectors they waste,
      look busy on the bus and do not pay;
    * compute (arithmetic and loops): issue-slot utilisation, less a fixed charge for any
      spill (the compiler's report, or local-memory traffic measured): unrolling until the
      registers spill does not pay;
    * reduction (combining partial results): minus the share of the warps' waiting spent at
      barriers, and on the global-memory queue where the kernel issues atomics."""
    c = counters or {}

    def get(*names: str) -> float | None:
        for n in names:
            v = c.get(n)
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
                return float(v)
        return None

    def clip(v: float) -> float:
        return max(-1.0, min(1.0, v))

    if agent == "config":
        occ, waves = get("achieved_occupancy"), get("waves")
        terms = []
        if occ is not None:
            terms.append(2.0 * occ - 1.0)
        if waves is not None and waves > 0:
            terms.append(2.0 * waves / math.ceil(waves) - 1.0)  # 1: whole waves, no tail
        return clip(sum(terms) / len(terms)) if terms else 0.0
    if agent == "memory":
        bw = get("dram_throughput", "achieved_bw_fraction")
        if bw is None:
            return 0.0
        conflicts = get("bank_conflicts") or 0.0
        used = get("global_load_efficiency")
        wasted = 0.0 if used is None else max(0.0, 1.0 - min(used, 1.0))
        return clip(2.0 * bw - 1.0 - 0.5 * min(conflicts, 2.0) - wasted)
    if agent == "compute":
        issue = get("issue_utilization")
        spills = max(get("spills", "compile_spill_stores") or 0.0, get("local_bytes") or 0.0)
        if issue is None and not spills:
            return 0.0
        base = 0.0 if issue is None else 2.0 * issue - 1.0
        return clip(base - (1.0 if spills > 0 else 0.0))
    if agent == "reduction":
        sync = get("sync_stalls")
        atomic = get("atomic_contention")
        if sync is None and atomic is None:
            return 0.0
        return clip(-(sync or 0.0) - (atomic or 0.0))
    return 0.0


def rewards(times: Sequence[float | None], kinds: Sequence[str | None],
            counters: Sequence[dict[str, Any] | None], groups: list[str],
            best_before: float | None, settings: RewardSettings,
            history: list[float] | None = None) -> list[dict[str, float]]:
    """Per candidate, per agent group: team rank reward + own auxiliary term, or the penalty.
    `history`: the times measured on this operator before this batch (ranked against with
    `rank_over="run"`; ignored with "batch")."""
    if settings.rank_over not in ("batch", "run"):
        raise ValueError(f"rank_over must be 'batch' or 'run', got {settings.rank_over!r}")
    if settings.rank_over == "run" and history:
        ranks = rank_rewards([*history, *times], settings)[len(history):]
    else:
        ranks = rank_rewards(times, settings)
    if settings.mode == "time":
        # a rank is None where the time is
        ranks = [None if r is None or t is None else -min(float(t), 100.0)
                 for r, t in zip(ranks, times)]
    out = []
    for rank, t, kind, c in zip(ranks, times, kinds, counters):
        if rank is None:
            pen = settings.penalties.get(kind or "cuda", -1.0)
            out.append({g: pen for g in groups})
            continue
        team = rank
        if best_before is None or (t is not None and t < best_before):
            team += settings.improvement_bonus if best_before is not None else 0.0
        out.append({g: team + settings.aux_weight * aux_term(g, c) for g in groups})
    return out
