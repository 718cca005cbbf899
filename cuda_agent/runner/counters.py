"""Hardware counters from Nsight Compute, for the agents' local metrics.

A sampled share of verified candidates is profiled in a separate process (`ncu` launching
`python -m cuda_agent.runner.profile_one`), after the candidate's timing has finished, so that
profiling never overlaps timing. `ncu` gets `--clock-control none`: the GPU's clocks are left as
they are. Metrics the run did not produce stay missing (absent keys), never zero.

What is collected (issue 34): occupancy (achieved, theoretical) and waves per SM; issue-slot
utilisation; DRAM and L2 throughput; global-load coalescing (sectors per request, bytes used
per sector fetched); shared-memory bank conflicts (loads and stores) per wavefront;
registers per thread and local-memory (spill) traffic; atomic and reduction traffic at L2;
and the warp stall reasons (`STALLS`, warps stalled per issued instruction, each reason).
`derive` turns them into the counters the agents read (`agents/observe.py`) and are rewarded
by (`agents/reward.py`), each agent those of its own dimension: config occupancy and waves,
memory DRAM/L2 throughput, coalescing and bank conflicts, compute issue use, registers and
spills, reduction the share of stalls at barriers and, where the kernel issues atomics, on the
global-memory queue. A candidate of several kernels is weighted by each kernel's duration.

Status: the CSV parsing and derivation are tested on the CPU; the end-to-end path runs in
`tests/gpu/test_gpu_counters.py` and `benchmarks/counters_gpu.py` on the GPU machine.
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

STALLS = ("barrier", "membar", "long_scoreboard", "short_scoreboard", "mio_throttle",
          "lg_throttle", "math_pipe_throttle", "wait", "not_selected", "no_instruction",
          "dispatch_stall", "drain", "branch_resolving", "sleeping", "tex_throttle", "misc")
"""warp stall reasons collected (Nsight Compute's warp-state sampling counters)"""

# our counter name -> (ncu metric, scale to our units)
METRICS: dict[str, tuple[str, float]] = {
    "duration_ns": ("gpu__time_duration.sum", 1.0),
    "achieved_occupancy": ("sm__warps_active.avg.pct_of_peak_sustained_active", 0.01),
    "theoretical_occupancy": ("sm__maximum_warps_per_active_cycle_pct", 0.01),
    "waves": ("launch__waves_per_multiprocessor", 1.0),
    "registers": ("launch__registers_per_thread", 1.0),
    "dram_throughput": ("dram__throughput.avg.pct_of_peak_sustained_elapsed", 0.01),
    "l2_throughput": ("lts__throughput.avg.pct_of_peak_sustained_elapsed", 0.01),
    "issue_utilization": ("sm__inst_issued.avg.pct_of_peak_sustained_active", 0.01),
    "ld_sectors": ("l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum", 1.0),
    "ld_requests": ("l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum", 1.0),
    "global_load_efficiency": (
        "smsp__sass_average_data_bytes_per_sector_mem_global_op_ld.pct", 0.01),
    "bank_conflicts_ld": ("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum", 1.0),
    "bank_conflicts_st": ("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum", 1.0),
    "shared_requests": ("l1tex__data_pipe_lsu_wavefronts_mem_shared.sum", 1.0),
    "local_ld_bytes": ("l1tex__t_bytes_pipe_lsu_mem_local_op_ld.sum", 1.0),
    "local_st_bytes": ("l1tex__t_bytes_pipe_lsu_mem_local_op_st.sum", 1.0),
    "atomic_sectors": ("lts__t_sectors_op_atom.sum", 1.0),
    "reduction_sectors": ("lts__t_sectors_op_red.sum", 1.0),
    **{f"stall_{r}": (f"smsp__average_warps_issue_stalled_{r}_per_issue_active.ratio", 1.0)
       for r in STALLS},
}

RATES = ("achieved_occupancy", "theoretical_occupancy", "dram_throughput", "l2_throughput",
         "issue_utilization", "global_load_efficiency",
         *(f"stall_{r}" for r in STALLS))
"""per-kernel rates: a candidate's is the kernels' duration-weighted mean"""
COUNTS = ("ld_sectors", "ld_requests", "bank_conflicts_ld", "bank_conflicts_st",
          "shared_requests", "local_ld_bytes", "local_st_bytes", "atomic_sectors",
          "reduction_sectors")
"""per-kernel counts: summed over a candidate's kernels"""


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
    """Our counters for a candidate (keys named as the simulator's, `sim_model.COUNTER_DOCS`,
    where they mean the same). Rates are the kernels' duration-weighted mean where every
    kernel has its duration, else the worst kernel's (lowest occupancy and issue use, highest
    throughput and stalls); counts are summed. A metric no kernel reported stays missing."""
    raw: dict[str, list[tuple[float, float | None]]] = {}
    for metrics in per_kernel.values():
        dur = metrics.get(METRICS["duration_ns"][0])
        for ours, (theirs, scale) in METRICS.items():
            if theirs in metrics:
                raw.setdefault(ours, []).append((metrics[theirs] * scale, dur))
    out: dict[str, float] = {}
    for key in RATES:
        vals = raw.get(key)
        if not vals:
            continue
        timed = [(v, d) for v, d in vals if d]
        if len(timed) == len(vals):
            out[key] = sum(v * d for v, d in timed) / sum(d for _, d in timed)
        else:
            pick = min if key in ("achieved_occupancy", "theoretical_occupancy",
                                  "issue_utilization", "global_load_efficiency") else max
            out[key] = pick(v for v, _ in vals)
    total = {k: sum(v for v, _ in raw[k]) for k in COUNTS if k in raw}
    if "waves" in raw:
        out["waves"] = max(v for v, _ in raw["waves"])
    if "registers" in raw:
        out["registers"] = max(v for v, _ in raw["registers"])
    if "duration_ns" in raw:
        out["duration_ns"] = sum(v for v, _ in raw["duration_ns"])
    if total.get("ld_requests"):
        out["sectors_per_request"] = total.get("ld_sectors", 0.0) / total["ld_requests"]
    if total.get("shared_requests") and ("bank_conflicts_ld" in total
                                         or "bank_conflicts_st" in total):
        out["bank_conflicts"] = (total.get("bank_conflicts_ld", 0.0)
                                 + total.get("bank_conflicts_st", 0.0)) / total["shared_requests"]
    if "local_ld_bytes" in total or "local_st_bytes" in total:
        out["local_bytes"] = total.get("local_ld_bytes", 0.0) + total.get("local_st_bytes", 0.0)
    if "atomic_sectors" in total or "reduction_sectors" in total:
        out["atomic_sectors"] = total.get("atomic_sectors", 0.0) + total.get(
            "reduction_sectors", 0.0)
    stalls = {r: out[f"stall_{r}"] for r in STALLS if f"stall_{r}" in out}
    # "selected" and "not_selected" are issue, not waiting: the shares are of the waiting
    waiting = sum(v for r, v in stalls.items() if r != "not_selected")
    if waiting > 0:
        # the reduction agent's own costs, as shares of the warps' waiting
        out["sync_stalls"] = (stalls.get("barrier", 0.0) + stalls.get("membar", 0.0)) / waiting
        if "atomic_sectors" in out:
            # atomics and reductions queue in the global-memory path (lg_throttle); without
            # any, that queue's stalls belong to the memory agent's loads, not to contention
            out["atomic_contention"] = (stalls.get("lg_throttle", 0.0) / waiting
                                        if out["atomic_sectors"] > 0 else 0.0)
    return out


def unknown_metrics(output: str, asked: list[str]) -> list[str]:
    """The metrics of `asked` that ncu's error output says this GPU or ncu version lacks."""
    low = output.lower()
    if "metric" not in low or not any(w in low for w in ("not found", "failed to find",
                                                         "invalid", "unknown")):
        return []
    return [m for m in asked if m in output]


def profile(problem_path: str, cubin_path: str, launches: list[dict], workspace_bytes: int,
            zero_workspace: bool, timeout_s: float = 120.0) -> dict[str, Any]:
    """Run one candidate under ncu in its own process; returns counters, or {} and a reason.
    A metric this ncu or GPU does not know is dropped and the candidate profiled again
    without it (named in "dropped"): one missing counter must not cost all the others."""
    ncu = ncu_path()
    if ncu is None:
        return {"counters": {}, "error": "ncu not found"}
    metrics = [m for m, _ in METRICS.values()]
    dropped: list[str] = []
    with tempfile.TemporaryDirectory(prefix="cuda-agent-ncu-") as tmp:
        spec = os.path.join(tmp, "candidate.json")
        with open(spec, "w") as f:
            json.dump({"problem": problem_path, "cubin": cubin_path, "launches": launches,
                       "workspace_bytes": workspace_bytes, "zero_workspace": zero_workspace}, f)
        for _ in range(4):
            # only the generated kernels (ca_*, s<i>_ca_* in programs): not cuBLAS/cuDNN ones
            cmd = [ncu, "--clock-control", "none", "--csv", "--print-units", "base",
                   "--kernel-name", "regex:^(s[0-9]+_)?ca_", "--metrics", ",".join(metrics),
                   sys.executable, "-m", "cuda_agent.runner.profile_one", spec]
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
            except subprocess.TimeoutExpired:
                return {"counters": {}, "error": f"ncu did not finish in {timeout_s:.0f} s",
                        "dropped": dropped}
            if proc.returncode == 0:
                break
            bad = unknown_metrics(proc.stderr + proc.stdout, metrics)
            if not bad:
                break
            dropped += bad
            metrics = [m for m in metrics if m not in bad]
    if proc.returncode != 0:
        return {"counters": {}, "error": (proc.stderr or proc.stdout)[-300:], "dropped": dropped}
    return {"counters": derive(parse_csv(proc.stdout)), "error": None, "dropped": dropped}
