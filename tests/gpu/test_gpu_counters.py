"""Nsight Compute counters for sampled candidates, in a separate process after timing."""

from pathlib import Path

import pytest

from cuda_agent.agents.reward import aux_term
from cuda_agent.tuner import tune

pytestmark = pytest.mark.gpu
GOOD = Path(__file__).parents[1] / "data" / "good"


def test_profiled_candidates_carry_hardware_counters(tmp_path):
    r = tune(GOOD / "softmax_small.py", device="cuda", budget=4, batch=4, baselines=False,
             store=str(tmp_path / "s.sqlite"), profile_every=1, strategy="random")
    ok = [t.measurement for t in r.trials if t.measurement.ok]
    assert ok
    for m in ok:
        c = m.counters
        assert "profile_error" not in c, c.get("profile_error")
        assert c.get("profiled") == 1.0
        assert 0 < c["achieved_occupancy"] <= 1.0
        assert 0 < c["dram_throughput"] <= 1.2 and 0 <= c["l2_throughput"] <= 1.2
        assert 0 < c["issue_utilization"] <= 1.0 and c["waves"] > 0 and c["registers"] > 0
        assert 0 <= c["sync_stalls"] <= 1.0  # a share of the warps' waiting
        assert any(k.startswith("stall_") for k in c)
        for agent in ("config", "memory", "compute", "reduction"):
            assert -1.0 <= aux_term(agent, c) <= 1.0
