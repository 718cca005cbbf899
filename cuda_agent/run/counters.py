"""Hardware counters from Nsight Compute, for the agents' local metrics.

A sampled share of verified candidates is profiled in a separate process (`ncu` launching
`python -m cuda_agent.run.profile_one`), after the candidate's timing has finished, so that
profiling never overlaps timing. `ncu` gets `--clock-control none`: the GPU's clocks are left as
they are. Metrics the run did not produce stay missing (absent keys), never zero.

Status: the CSV parsing is tested on the CPU; the end-to-end path runs in
`tests/gpu/test_gpu_counters.py` on the GPU machine and has not been run there yet.
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
from typing import Any

# our counter name -> (ncu metric, scale to our units)
METRICS: dict[str, tuple[str, float]] = {
    "achieved_occupancy": ("sm__warps_active.avg.pct_of_peak_sustained_active", 0.01),
    "theoretical_occupancy": ("sm__maximum_warps_per_active_cycle_pct", 0.01),
    "dram_throughput": ("dram__throughput.avg.pct_of_peak_sustained_elapsed", 0.01),
    "issue_utilization": ("sm__inst_issued.avg.pct_of_peak_sustained_active", 0.01),
    "ld_sectors": ("l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum", 1.0),
    "ld_requests": ("l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum", 1.0),
    "bank_conflicts_raw": ("l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum", 1.0),
    "shared_requests": ("l1tex__data_pipe_lsu_wavefronts_mem_shared.sum", 1.0),
    "sync_stalls": ("smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio", 1.0),
    "atomic_contention": ("smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio",
                          1.0),
}


def ncu_path() -> str | None:
    found = shutil.which("ncu")
    if found:
        return found
    for root in ("/opt/nvidia", "/usr/local/cuda/bin"):
        for dirpath, _, files in os.walk(root) if os.path.isdir(root) else ():
            if "ncu" in files:
                return os.path.join(dirpath, "ncu")
    return None


def _number(text: str) -> float | None:
    text = text.strip().replace(",", "")
    if text in ("", "n/a", "N/A"):
        return None
    try:
        return float(text)
    except ValueError:
        return None


def parse_csv(text: str) -> dict[str, dict[str, float]]:
    """ncu `--csv` output -> {kernel name: {ncu metric: value}} (values summed over the launches
    of one kernel would double count ratios, so the last launch of each kernel is kept)."""
    lines = [l for l in text.splitlines() if l.startswith('"')]
    out: dict[str, dict[str, float]] = {}
    for row in csv.DictReader(io.StringIO("\n".join(lines))):
        kernel = row.get("Kernel Name") or row.get("Function Name") or "?"
        name, value = row.get("Metric Name"), _number(row.get("Metric Value", ""))
        if name and value is not None:
            out.setdefault(kernel.split("(")[0], {})[name] = value
    return out


def derive(per_kernel: dict[str, dict[str, float]]) -> dict[str, float]:
    """Our counters for a candidate: the worst kernel for rates, sums for counts."""
    raw: dict[str, list[float]] = {}
    for metrics in per_kernel.values():
        for ours, (theirs, scale) in METRICS.items():
            if theirs in metrics:
                raw.setdefault(ours, []).append(metrics[theirs] * scale)
    out: dict[str, float] = {}
    for key in ("achieved_occupancy", "theoretical_occupancy", "dram_throughput",
                "issue_utilization"):
        if key in raw:
            out[key] = max(raw[key]) if key == "dram_throughput" else min(raw[key])
    for key in ("sync_stalls", "atomic_contention"):
        if key in raw:
            out[key] = max(raw[key])
    if "ld_sectors" in raw and "ld_requests" in raw and sum(raw["ld_requests"]) > 0:
        out["sectors_per_request"] = sum(raw["ld_sectors"]) / sum(raw["ld_requests"])
    if "bank_conflicts_raw" in raw and "shared_requests" in raw and sum(raw["shared_requests"]):
        out["bank_conflicts"] = sum(raw["bank_conflicts_raw"]) / sum(raw["shared_requests"])
    return out


def profile(problem_path: str, cubin_path: str, launches: list[dict], workspace_bytes: int,
            zero_workspace: bool, timeout_s: float = 120.0) -> dict[str, Any]:
    """Run one candidate under ncu in its own process; returns counters, or {} and a reason."""
    ncu = ncu_path()
    if ncu is None:
        return {"counters": {}, "error": "ncu not found"}
    with tempfile.TemporaryDirectory(prefix="cuda-agent-ncu-") as tmp:
        spec = os.path.join(tmp, "candidate.json")
        with open(spec, "w") as f:
            json.dump({"problem": problem_path, "cubin": cubin_path, "launches": launches,
                       "workspace_bytes": workspace_bytes, "zero_workspace": zero_workspace}, f)
        # only the generated kernels (ca_*, s<i>_ca_* in programs): not cuBLAS/cuDNN ones
        cmd = [ncu, "--clock-control", "none", "--csv", "--print-units", "base",
               "--kernel-name", "regex:^(s[0-9]+_)?ca_",
               "--metrics", ",".join(m for m, _ in METRICS.values()),
               sys.executable, "-m", "cuda_agent.run.profile_one", spec]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return {"counters": {}, "error": f"ncu did not finish in {timeout_s:.0f} s"}
    if proc.returncode != 0:
        return {"counters": {}, "error": (proc.stderr or proc.stdout)[-300:]}
    return {"counters": derive(parse_csv(proc.stdout)), "error": None}
