"""Nsight Compute counters for sampled candidates, in a separate process after timing."""

from pathlib import Path

import pytest

from cuda_agent.tuner import tune

pytestmark = pytest.mark.gpu
GOOD = Path(__file__).parents[1] / "data" / "good"


def test_profiled_candidates_carry_hardware_counters(tmp_path):
    r = tune(GOOD / "softmax_small.py", device="cuda", budget=4, batch=4, baselines=False,
             store=str(tmp_path / "s.sqlite"), profile_every=1)
    ok = [t.measurement for t in r.trials if t.measurement.ok]
    assert ok
    for m in ok:
        assert "profile_error" not in m.counters, m.counters.get("profile_error")
        assert 0 < m.counters["achieved_occupancy"] <= 1.0
        assert 0 < m.counters["dram_throughput"] <= 1.2
