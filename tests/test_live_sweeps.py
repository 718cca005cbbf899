"""The live runs' measurements as replayable sweeps (benchmarks/live_sweeps.py): what replay
serves is what the live run measured, configuration by configuration."""

from __future__ import annotations

import statistics
from pathlib import Path

from benchmarks.live_sweeps import live_measurements, write_live_sweeps
from cuda_agent.ir.planning import make_plan
from cuda_agent.problem import load_problem
from cuda_agent.runner.devices import Candidate
from cuda_agent.runner.replay import ReplayDevice
from cuda_agent.space.slots import Target
from cuda_agent.space.space import Space

ROOT = Path(__file__).resolve().parents[1]

PROBLEM = "gemm_odd"  # small: its space is quick to build


def test_replay_serves_the_live_runs_medians(tmp_path):
    where, _, times = live_measurements()[PROBLEM]
    assert "bench-live" in where and len(times) > 100
    written = write_live_sweeps(tmp_path, [PROBLEM])
    assert set(written) == {PROBLEM} and 100 < written[PROBLEM] <= len(times)
    prob = load_problem(ROOT / "benchmarks/problems" / f"{PROBLEM}.py")
    plan = make_plan(prob.graph())
    dev = ReplayDevice(tmp_path)
    dev.setup(prob, plan)
    space = Space.for_plan(plan, Target())
    recorded = dev.recorded_configs(space)
    assert len(recorded) == written[PROBLEM]
    checked = 0
    for cfg in recorded:
        m = dev.evaluate(Candidate("k", cfg, None, None))
        ts = [t for t in times[cfg.short()] if t is not None]
        if ts:
            assert m.ok and m.time_ms == statistics.median(ts)
            checked += 1
        else:
            assert not m.ok and m.error_kind == "recorded_failure"
    assert checked > 100
