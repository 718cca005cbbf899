"""Samples per second of training's local pool against the Ray fleet, on the simulated device.

The same short training run (`cuda-agent train`'s Trainer, sim device, a few small problems of
the example suite) under each fleet: the local pool (sampler threads and this process's compile
pool), Ray on one host (`ray.init`, a local instance), and a local multi-node cluster
(`ray.cluster_utils.Cluster`) of 1, 2 and 3 nodes with one sampler per node, as a cluster would
run one per GPU. Each run is a fresh interpreter with an empty compile cache. `steady_samples_per_s`
counts the candidates the episodes measured or were served (the samples the learner gets) from
the end of the first update to the end of the last, so the fleet's start (actors importing torch,
loading their problems) is left out; it is reported apart (`first_update_s`), as is the whole
run's rate, and the rate over the second half of the updates (`second_half_samples_per_s`: by
then the samplers have loaded their problems, which the local pool does before it starts).

All of it is CPU work on one machine, with the simulator standing in for the GPU: the figures are
simulated and say nothing of a GPU cluster; the "nodes" of the local cluster share this machine's
cores (2 on the development machine, shared with other work: the load average is recorded), so
more nodes cannot add compute here; what they show is the fleet's overhead and that it runs.

    python benchmarks/ray_fleet.py [--iterations N] [--out benchmarks/results/...json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PROBLEMS = ["relu_small", "sum_small", "softmax_small"]  # tests/data/good: quick to load
FLEETS = ["local", "ray-host", "cluster-1", "cluster-2", "cluster-3"]


def run_one(fleet: str, iterations: int, episodes: int, samplers: int) -> dict[str, Any]:
    """One training run under `fleet`, in this process (a fresh interpreter per fleet)."""
    os.environ["CUDA_AGENT_CACHE"] = tempfile.mkdtemp(prefix="ray-fleet-cache-")
    cluster = None
    ray_mode = None
    if fleet.startswith("cluster-"):
        import ray
        from ray.cluster_utils import Cluster

        nodes = int(fleet.split("-")[1])
        cluster = Cluster(initialize_head=True,
                          head_node_args={"num_cpus": 2, "include_dashboard": False})
        for _ in range(nodes - 1):
            cluster.add_node(num_cpus=2)
        ray.init(address=cluster.address, logging_level="WARNING")
        samplers, ray_mode = nodes, "auto"
    elif fleet == "ray-host":
        ray_mode = "local"
    from cuda_agent.agents.train import TrainSettings, Trainer

    suite = ",".join(str(ROOT / "tests" / "data" / "good" / f"{p}.py") for p in PROBLEMS)
    out = tempfile.mkdtemp(prefix="ray-fleet-run-")
    s = TrainSettings.of(suite=suite, device="sim", iterations=iterations, episodes=episodes,
                         steps=2, batch=4, hidden=16, out=out, samplers=samplers, ray=ray_mode)
    t0 = time.perf_counter()
    tr = Trainer(s)
    loaded = time.perf_counter() - t0
    stamps: list[float] = []
    t1 = time.perf_counter()
    try:
        tr.train(lambda row: stamps.append(time.perf_counter()))
    finally:
        tr.close()
        if cluster is not None:
            import ray

            ray.shutdown()
            cluster.shutdown()
    total = time.perf_counter() - t1
    rows = tr.curves
    samples = [r["measurements"] for r in rows]
    steady = (samples[-1] - samples[0]) / (stamps[-1] - stamps[0]) if len(rows) > 1 else None
    h = len(rows) // 2  # the second half: every sampler has loaded its problems by then
    late = (samples[-1] - samples[h - 1]) / (stamps[-1] - stamps[h - 1]) if h >= 1 else None
    return {"fleet": fleet, "samplers": samplers, "updates": len(rows),
            "samples": samples[-1], "suite_load_s": round(loaded, 2),
            "first_update_s": round(stamps[0] - t1, 2), "train_s": round(total, 2),
            "steady_samples_per_s": round(steady, 3) if steady else None,
            "second_half_samples_per_s": round(late, 3) if late else None,
            "samples_per_s_whole_run": round(samples[-1] / total, 3),
            "fleet_report": tr.fleet_report}


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iterations", type=int, default=8)
    ap.add_argument("--episodes", type=int, default=4)
    ap.add_argument("--samplers", type=int, default=2,
                    help="sampler threads (local) and actors (ray-host)")
    ap.add_argument("--fleets", default=",".join(FLEETS))
    ap.add_argument("--one", help=argparse.SUPPRESS)  # the child: one fleet, JSON on stdout
    ap.add_argument("--out", type=Path)
    ap.add_argument("--append", action="store_true",
                    help="add this pass's rows to --out's (the load changes: passes at other "
                         "times say how much the figures move)")
    a = ap.parse_args()
    if a.one:
        print("RESULT " + json.dumps(run_one(a.one, a.iterations, a.episodes, a.samplers)))
        return
    rows = []
    earlier = json.loads(a.out.read_text()) if a.append and a.out and a.out.exists() else None
    this_pass = 1 + max((r.get("pass", 1) for r in earlier["rows"]), default=0) if earlier \
        else 1
    for fleet in a.fleets.split(","):
        before = loadavg()
        p = subprocess.run([sys.executable, __file__, "--one", fleet, "--iterations",
                            str(a.iterations), "--episodes", str(a.episodes), "--samplers",
                            str(a.samplers)], capture_output=True, text=True, cwd=ROOT)
        line = next((x for x in p.stdout.splitlines() if x.startswith("RESULT ")), None)
        if line is None:
            raise SystemExit(f"{fleet}: failed\n{p.stderr[-3000:]}")
        row = json.loads(line[len("RESULT "):])
        row["loadavg_before"], row["loadavg_after"] = before, loadavg()
        row["pass"] = this_pass
        print(json.dumps({k: v for k, v in row.items() if k != "fleet_report"}), flush=True)
        rows.append(row)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, cwd=ROOT).stdout.strip()
    import ray

    result = {"what": "training samples per second (candidates measured or served to the "
                      "learner), sim device, local pool against Ray fleets",
              "device": "sim (simulated H200): no GPU; every figure is CPU work on one "
                        "machine, simulated, and says nothing of a GPU cluster",
              "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                          "python": platform.python_version(), "ray": ray.__version__,
                          "shared": "the development machine, shared with other work: see "
                                    "each row's load average"},
              "date": date.today().isoformat(), "commit": commit,
              "workload": {"problems": PROBLEMS, "iterations": a.iterations,
                           "episodes": a.episodes, "steps": 2, "batch": 4,
                           "local_samplers": a.samplers, "ray_host_samplers": a.samplers,
                           "cluster_samplers": "one per node; each node 2 logical CPUs"},
              "rows": (earlier["rows"] if earlier else []) + rows}
    if earlier:  # the first pass's context stays; this pass's commit is beside its rows
        result = {**earlier, "rows": result["rows"]}
        for r in rows:
            r["commit"] = commit
    if a.out:
        a.out.write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
