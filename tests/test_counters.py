"""Nsight Compute output parsing (the profiling itself runs in tests/gpu/test_gpu_counters.py)."""

from cuda_agent.run.counters import METRICS, derive, parse_csv

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
