"""What each agent sees: a global summary, its own hardware metrics, and the others' choices.

* global: op family, log-scaled (O, R, I) and size, bytes, FLOPs and arithmetic intensity,
  reduction structure, the GPU's properties, which templates exist, and search progress;
* local: the agent's own metrics from the best measurement so far (config: occupancy and waves;
  memory: coalescing, DRAM throughput, bank conflicts; compute: registers, spills, issue use;
  reduction: sync and atomic costs). A metric the device did not report is *missing*: its value
  is 0 and a flag says so, so the agent never mistakes "unknown" for "zero";
* communication: the slot values of the best configuration so far, as normalized positions:
  a short summary of every agent's previous action, not the others' inputs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..ir.plan import KernelPlan
from ..space.slots import Config, Target
from ..space.space import Space
from .vocab import SLOT_ORDER, SpaceIndex, values

FAMILIES = ("elementwise", "reduction", "softmax", "norm", "gemm", "pool", "scan", "attention")
TEMPLATES = ("map", "row", "col", "split", "gemm", "pool", "scan", "chan", "attention")

# agent -> (metric name, scale) read from a measurement's counters; alternatives in order
LOCAL_METRICS: dict[str, tuple[tuple[tuple[str, ...], float], ...]] = {
    "config": ((("achieved_occupancy",), 1.0), (("theoretical_occupancy",), 1.0),
               (("waves",), 8.0)),
    "memory": ((("sectors_per_request",), 8.0),
               (("dram_throughput", "achieved_bw_fraction"), 1.0),
               (("bank_conflicts",), 4.0)),
    "compute": ((("registers", "compile_registers"), 255.0),
                (("spills", "compile_spill_stores"), 256.0),
                (("issue_utilization",), 1.0)),
    "reduction": ((("sync_stalls",), 1.0), (("atomic_contention",), 1.0)),
}
LOCAL_DIM = 2 * max(len(v) for v in LOCAL_METRICS.values())  # values + missing flags, padded
GLOBAL_DIM = len(FAMILIES) + 4 + 4 + 3 + 1 + 3 + len(TEMPLATES) + 3
CONFIG_DIM = len(SLOT_ORDER)
OBS_DIM = GLOBAL_DIM + LOCAL_DIM + CONFIG_DIM


def problem_features(plan: KernelPlan, space: Space, target: Target) -> np.ndarray:
    fam = [1.0 if plan.family == f else 0.0 for f in FAMILIES]
    structure = [1.0 if plan.output_is_row else 0.0, len(plan.levels) / 3.0,
                 1.0 if plan.uses_transcendental() else 0.0,
                 1.0 if plan.is_index_output() else 0.0]
    lg = lambda v: math.log2(max(1, v)) / 32.0  # noqa: E731
    shape = [lg(plan.O), lg(plan.R), lg(plan.I), lg(plan.numel)]
    b, f = plan.bytes_moved(), plan.flops()
    work = [math.log10(max(b, 1)) / 12.0, math.log10(max(f, 1)) / 12.0,
            math.log10(max(f, 1) / max(b, 1) + 1e-3) / 3.0]
    operands = [len(plan.operands) / 4.0]
    gpu = [target.sm_count / 132.0, target.dram_bw / 4.3e12, target.l2_bytes / (60 << 20)]
    names = {t.name for t in space.templates}
    templ = [1.0 if t in names else 0.0 for t in TEMPLATES]
    return np.asarray(fam + structure + shape + work + operands + gpu + templ, dtype=np.float32)


def local_features(agent: str, counters: dict[str, Any] | None) -> np.ndarray:
    vals, flags = [], []
    for names, scale in LOCAL_METRICS.get(agent, ()):
        v = None
        for n in names:
            if counters and counters.get(n) is not None:
                v = counters[n]
                break
        if isinstance(v, (int, float)) and math.isfinite(float(v)):
            vals.append(min(float(v) / scale, 4.0))
            flags.append(0.0)
        else:
            vals.append(0.0)
            flags.append(1.0)
    out = np.zeros(LOCAL_DIM, dtype=np.float32)
    out[:len(vals)] = vals
    out[LOCAL_DIM // 2:LOCAL_DIM // 2 + len(flags)] = flags
    return out


def config_features(index: SpaceIndex | None, cfg: Config | None) -> np.ndarray:
    """Normalized position of each slot's value (-1 where there is no configuration yet)."""
    if cfg is None or index is None:
        return -np.ones(CONFIG_DIM, dtype=np.float32)
    idx = index.indices_of(cfg)
    return np.asarray([idx[s] / max(1, len(values(s)) - 1) for s in SLOT_ORDER],
                      dtype=np.float32)


@dataclass
class SearchState:
    """What the agents know about the search so far, for one operator."""

    problem: np.ndarray
    budget: int
    step: int = 0
    spent: int = 0
    first_ms: float | None = None
    best_ms: float | None = None
    best_config: Config | None = None
    best_counters: dict[str, Any] = field(default_factory=dict)
    since_improvement: int = 0

    def progress(self) -> np.ndarray:
        ratio = (math.log(self.first_ms / self.best_ms) if self.first_ms and self.best_ms
                 else 0.0)
        return np.asarray([self.spent / max(1, self.budget), min(ratio, 3.0) / 3.0,
                           min(self.since_improvement, 10) / 10.0], dtype=np.float32)

    def update(self, cfg: Config, ok: bool, time_ms: float | None,
               counters: dict[str, Any] | None) -> bool:
        """Record one measurement; True when it is the new best."""
        self.spent += 1
        if not ok or time_ms is None:
            return False
        if self.first_ms is None:
            self.first_ms = time_ms
        if self.best_ms is None or time_ms < self.best_ms:
            self.best_ms, self.best_config = time_ms, cfg
            self.best_counters = dict(counters or {})
            self.since_improvement = 0
            return True
        return False


def observe(agent: str, state: SearchState, index: SpaceIndex) -> np.ndarray:
    """The observation vector of one agent (same layout for every agent and problem)."""
    return np.concatenate([state.problem, state.progress(),
                           local_features(agent, state.best_counters),
                           config_features(index, state.best_config)]).astype(np.float32)


def global_state(state: SearchState, index: SpaceIndex) -> np.ndarray:
    """What the centralized critic sees: everything, every agent's metrics included."""
    locals_ = [local_features(a, state.best_counters) for a in LOCAL_METRICS]
    return np.concatenate([state.problem, state.progress(), *locals_,
                           config_features(index, state.best_config)]).astype(np.float32)


GLOBAL_STATE_DIM = GLOBAL_DIM + LOCAL_DIM * len(LOCAL_METRICS) + CONFIG_DIM
