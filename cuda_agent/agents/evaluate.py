"""Held-out evaluation: measurements to reach 95 % of the best known kernel, per strategy.

On `replay`, the best known is the best the recorded sweep holds, and every strategy searches
the same recorded configurations, so the comparison is on real GPU measurements with no GPU.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import metrics
from ..problem import load_problem
from ..runner.devices import Device
from ..store import Store
from ..tuner import Tuner, TuneSettings, search_space
from . import checkpoint
from .policy import MultiAgentPolicy
from .strategy import LOCAL_SHARE, PRIOR_WEIGHT, RANKED_FIRST


@dataclass
class Contender:
    """A strategy to compare: `random`, or the agents with a policy (trained or fresh)."""

    name: str
    strategy: str = "random"
    checkpoint: str | None = None
    agents: str = "multi"
    online: bool = True
    temperature: float = 1.0
    ranked: int | None = None
    """the run's first `ranked` proposals are the policy's most probable configurations
    (default: `strategy.RANKED_FIRST` with a checkpoint, none for a fresh policy)"""
    local_share: float = LOCAL_SHARE
    """share of each batch drawn near the best so far (`strategy.LOCAL_SHARE`)"""
    prior_weight: float = PRIOR_WEIGHT
    """the analytic model's prior on the proposals (`strategy.PRIOR_WEIGHT`; 0: the policy
    alone, as a test of what it learned must run)"""


@dataclass
class EvalResult:
    rows: list[dict[str, Any]] = field(default_factory=list)  # one per (problem, contender)

    def median(self, contender: str) -> float | None:
        vals = [r["median_evals_to_95"] for r in self.rows if r["contender"] == contender
                and r["median_evals_to_95"] is not None]
        return statistics.median(vals) if vals else None


class _Reached(Exception):
    """Raised from the tuner's progress callback to end a run whose outcome is known."""


def trajectory(problem_path: Path, contender: Contender, device: Device, budget: int,
               seed: int, stop_at_ms: float | None = None) -> list[float | None]:
    """Each measurement's time in the order the contender asked for them (None: failed).
    With `stop_at_ms`, the run ends at the first measurement at or below it: what follows
    cannot change the measurements needed to get there (only time is saved)."""
    opts: dict[str, Any] = {}
    if contender.strategy == "marl":
        policy = (checkpoint.policy_from(checkpoint.load(contender.checkpoint))
                  if contender.checkpoint else MultiAgentPolicy(contender.agents))
        opts = {"policy": policy, "online": contender.online, "patience": 10**6,
                "temperature": contender.temperature,
                "ranked": contender.ranked if contender.ranked is not None else
                (RANKED_FIRST if contender.checkpoint else 0),
                "local_share": contender.local_share, "prior_weight": contender.prior_weight}
    settings = TuneSettings(device=device.kind, strategy=contender.strategy, budget=budget,
                            batch=4, seed=seed, baselines=False, strategy_options=opts)
    tuner = Tuner(load_problem(problem_path), settings, device=device, store=Store(":memory:"))
    times: list[float | None] = []

    def seen(trial: Any, best: Any) -> None:
        m = trial.measurement
        times.append(m.time_ms if m.ok else None)
        if stop_at_ms is not None and m.ok and m.time_ms is not None and m.time_ms <= stop_at_ms:
            raise _Reached

    try:
        try:
            tuner.run(progress=seen)
        except _Reached:
            pass
        return times
    finally:
        tuner.close()


def evals_to_95(problem_path: Path, contender: Contender, device: Device, best_ms: float,
                budget: int, seed: int) -> int | None:
    return metrics.evals_to_fraction(trajectory(problem_path, contender, device, budget, seed,
                                                stop_at_ms=best_ms / 0.95), best_ms, 0.95)


def compare(problems: list[Path], contenders: list[Contender], device: Device,
            seeds: int = 5, budget: int = 100) -> EvalResult:
    """For each held-out problem and contender: evals to 95 % of the recorded best, per seed."""
    out = EvalResult()
    for path in problems:
        # the space as a tuner reads it (on replay: the recorded sweep's, which also gives
        # the recorded best)
        size = len(search_space(load_problem(path), device,
                                TuneSettings(device=device.kind, baselines=False)))
        best = device.best_recorded_ms() if hasattr(device, "best_recorded_ms") else None
        if best is None:
            continue
        for c in contenders:
            runs = [evals_to_95(path, c, device, best, min(budget, size), s)
                    for s in range(seeds)]
            # a run that never got there counts as the whole budget plus one (censored)
            counted = [r if r is not None else min(budget, size) + 1 for r in runs]
            out.rows.append({"problem": path.stem, "contender": c.name, "runs": runs,
                             "median_evals_to_95": statistics.median(counted),
                             "space": size, "best_ms": best})
    return out
