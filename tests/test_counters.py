"""Nsight Compute output parsing (the profiling itself runs in tests/gpu/test_gpu_counters.py)."""

import json
from pathlib import Path

import pytest

from cuda_agent.agents.reward import aux_term
from cuda_agent.runner.counters import METRICS, derive, parse_csv, unknown_metrics

HEADER = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream",'
          '"Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit",'
          '"Metric Value"')


def row(kid: int, kernel: str, metric: str, value: str) -> str:
    return (f'"{kid}","4242","python3","127.0.0.1","{kernel}","1","7","(256, 1, 1)",'
            f'"(1024, 1, 1)","0","9.0","Command line profiler metrics","{metric}","","{value}"')


def test_parse_and_derive_counters():
    m = {k: v[0] for k, v in METRICS.items()}
    text = "\n".join([
        "==PROF== Connected to process 4242",
        HEADER,
        row(0, "ca_split_l1", m["achieved_occupancy"], "80.5"),
        row(0, "ca_split_l1", m["dram_throughput"], "91.2"),
        row(0, "ca_split_l1", m["ld_sectors"], "1,000,000"),
        row(0, "ca_split_l1", m["ld_requests"], "250,000"),
        row(1, "ca_split_out", m["achieved_occupancy"], "60"),
        row(1, "ca_split_out", m["dram_throughput"], "70"),
        row(1, "ca_split_out", m["ld_sectors"], "n/a"),
        "==PROF== Disconnected from process 4242",
    ])
    per = parse_csv(text)
    assert set(per) == {"ca_split_l1", "ca_split_out"}
    assert per["ca_split_l1"][m["ld_sectors"]] == 1_000_000
    c = derive(per)
    assert c["achieved_occupancy"] == 0.6  # the worst kernel limits the candidate
    assert abs(c["dram_throughput"] - 0.912) < 1e-9
    assert c["sectors_per_request"] == 4.0
    assert "bank_conflicts" not in c and "sync_stalls" not in c  # missing stays missing


def _rows(kid: int, kernel: str, values: dict[str, float]) -> list[str]:
    return [row(kid, kernel, METRICS[k][0], f"{v}") for k, v in values.items()]


# a two-kernel candidate (a split reduction: the partial sums, then the fold) in ncu's CSV as
# `profile` asks for it; the values are of the kind the H200 reports (constructed, not recorded)
SPLIT = "\n".join([HEADER] + _rows(0, "ca_split_l1", {
    "duration_ns": 30000, "achieved_occupancy": 80, "theoretical_occupancy": 100, "waves": 3.9,
    "registers": 32, "dram_throughput": 90, "l2_throughput": 60, "issue_utilization": 20,
    "ld_sectors": 4e6, "ld_requests": 1e6, "global_load_efficiency": 100,
    "bank_conflicts_ld": 0, "bank_conflicts_st": 0, "shared_requests": 1000,
    "local_ld_bytes": 0, "local_st_bytes": 0, "atomic_sectors": 0, "reduction_sectors": 0,
    "stall_long_scoreboard": 6.0, "stall_barrier": 0.5, "stall_membar": 0.0,
    "stall_not_selected": 1.0,
    "stall_lg_throttle": 0.5}) + _rows(1, "ca_split_out", {
    "duration_ns": 10000, "achieved_occupancy": 20, "theoretical_occupancy": 50, "waves": 0.1,
    "registers": 40, "dram_throughput": 10, "l2_throughput": 30, "issue_utilization": 60,
    "ld_sectors": 1e3, "ld_requests": 1e3, "global_load_efficiency": 25,
    "bank_conflicts_ld": 300, "bank_conflicts_st": 100, "shared_requests": 1000,
    "local_ld_bytes": 64, "local_st_bytes": 64, "atomic_sectors": 128, "reduction_sectors": 0,
    "stall_long_scoreboard": 1.0, "stall_barrier": 4.0, "stall_membar": 1.0,
    "stall_lg_throttle": 2.0, "stall_not_selected": 0.0}))


def test_derive_weights_kernels_by_duration_and_sums_counts():
    c = derive(parse_csv(SPLIT))
    assert c["duration_ns"] == 40000
    assert c["achieved_occupancy"] == pytest.approx((0.8 * 3 + 0.2 * 1) / 4)
    assert c["dram_throughput"] == pytest.approx((0.9 * 3 + 0.1) / 4)
    assert c["l2_throughput"] == pytest.approx((0.6 * 3 + 0.3) / 4)
    assert c["global_load_efficiency"] == pytest.approx((1.0 * 3 + 0.25) / 4)
    assert c["waves"] == 3.9 and c["registers"] == 40  # the worst kernel's
    assert c["sectors_per_request"] == pytest.approx((4e6 + 1e3) / (1e6 + 1e3))
    assert c["bank_conflicts"] == pytest.approx(400 / 2000)
    assert c["local_bytes"] == 128 and c["atomic_sectors"] == 128
    # stall shares of the waiting (not_selected is issue, not waiting), duration-weighted
    w = {r: (a * 3 + b) / 4 for r, a, b in (("long_scoreboard", 6.0, 1.0),
                                           ("barrier", 0.5, 4.0), ("lg_throttle", 0.5, 2.0))}
    membar = 1.0 / 4  # the second kernel's only
    waiting = sum(w.values()) + membar
    assert c["sync_stalls"] == pytest.approx((w["barrier"] + membar) / waiting)
    assert c["atomic_contention"] == pytest.approx(w["lg_throttle"] / waiting)


def test_without_atomics_the_memory_queue_is_not_contention():
    text = "\n".join([HEADER] + _rows(0, "ca_row", {
        "stall_lg_throttle": 3.0, "stall_long_scoreboard": 1.0, "atomic_sectors": 0,
        "reduction_sectors": 0}))
    c = derive(parse_csv(text))
    assert c["atomic_contention"] == 0.0 and c["sync_stalls"] == 0.0


def test_unknown_metrics_are_named_from_ncus_error():
    asked = [METRICS["waves"][0], METRICS["stall_misc"][0], METRICS["registers"][0]]
    err = f"==ERROR== Failed to find metric {METRICS['stall_misc'][0]}\n"
    assert unknown_metrics(err, asked) == [METRICS["stall_misc"][0]]
    assert unknown_metrics("==ERROR== the application returned an error code (1)", asked) == []


def test_each_agent_is_credited_from_its_own_counters():
    good = derive(parse_csv(SPLIT))
    for agent in ("config", "memory", "compute", "reduction"):
        assert -1.0 <= aux_term(agent, good) <= 1.0
    base = {"achieved_occupancy": 0.8, "waves": 4.0, "dram_throughput": 0.9,
            "bank_conflicts": 0.0, "global_load_efficiency": 1.0, "issue_utilization": 0.6,
            "local_bytes": 0.0, "sync_stalls": 0.1, "atomic_contention": 0.0}
    # config: a tail wave (4.1 waves: the last one nearly empty) costs the same occupancy
    assert aux_term("config", {**base, "waves": 4.1}) < aux_term("config", base)
    # memory: conflicts, or sectors fetched and not used, take the bandwidth's credit back
    assert aux_term("memory", {**base, "bank_conflicts": 1.0}) < aux_term("memory", base)
    assert aux_term("memory", {**base, "global_load_efficiency": 0.25}) < aux_term("memory",
                                                                                  base)
    # compute: spilling (local-memory traffic measured) costs more than the issue use earns
    assert aux_term("compute", {**base, "local_bytes": 1e6}) < aux_term("compute", base) - 0.9
    # reduction: waiting at barriers and on atomics
    assert aux_term("reduction", {**base, "sync_stalls": 0.6}) < aux_term("reduction", base)
    assert aux_term("reduction", {**base, "atomic_contention": 0.5}) < aux_term("reduction",
                                                                                base)
    # another agent's counters move nothing of this one's
    assert aux_term("config", {**base, "bank_conflicts": 2.0, "sync_stalls": 1.0,
                               "local_bytes": 1e6}) == aux_term("config", base)


RECORDED = sorted((Path(__file__).resolve().parents[1] / "benchmarks/results").glob(
    "*-counters/counters.json"))


@pytest.mark.skipif(not RECORDED, reason="no hardware counters recorded on the GPU yet "
                    "(benchmarks/counters_gpu.py)")
def test_recorded_gpu_counters_give_bounded_per_agent_terms():
    """Counters Nsight Compute recorded on a GPU during a short training run: every
    profiled candidate has each agent's metrics, and each agent's term is bounded."""
    data = json.loads(RECORDED[-1].read_text())
    profiled = [r for r in data["records"] if r["counters"].get("profiled")]
    assert profiled, "no candidate was profiled"
    for r in profiled:
        c = r["counters"]
        for key in ("achieved_occupancy", "waves", "dram_throughput", "issue_utilization",
                    "sync_stalls"):
            assert key in c, (r["problem"], key)
        assert 0 < c["achieved_occupancy"] <= 1.0 and 0 <= c["dram_throughput"] <= 1.2
        for agent in ("config", "memory", "compute", "reduction"):
            assert -1.0 <= aux_term(agent, c) <= 1.0
            assert r["aux"][agent] == pytest.approx(aux_term(agent, c))
