"""Hardware counters from Nsight Compute during a short training run on the GPU (issue 34, item 1).

    python benchmarks/counters_gpu.py --out $OUT/h200-counters [--problems a,b,c]
        [--profile-every 4] [--time-limit 150]

Per problem, a short training run (one PPO update over 2 episodes of 2 steps of 4
configurations, under the analytic model's prior as tuning runs) on the cuda device, which
profiles every n-th verified candidate with Nsight Compute after timing it (`run/counters.py`)
and stores the counters with the measurement (SQLite, `<out>/store.sqlite`). Then every
measurement of the run is written to `<out>/counters.json` with its counters and each agent's
auxiliary reward term computed from them (`agents/reward.aux_term`), and a summary is printed:
how many candidates were profiled, which counters came back, the metrics ncu lacked. A problem
is not started past `--time-limit` seconds. Needs a GPU and `ncu`. Commit `counters.json` as
benchmarks/results/<date>-h200-counters/counters.json: `tests/test_counters.py` then checks
every profiled record's agents' terms on the CPU.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# a row reduction (shuffles, shared memory), a whole-tensor reduction (the split template:
# two passes, last block, or atomics), a matrix product (shared-memory tiles, registers)
PROBLEMS = ("softmax_short_rows", "norm_frobenius", "gemm_odd")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--problems", default=",".join(PROBLEMS))
    ap.add_argument("--profile-every", type=int, default=4)
    ap.add_argument("--time-limit", type=float, default=150.0)
    args = ap.parse_args()
    from cuda_agent.agents.reward import aux_term
    from cuda_agent.agents.train import TrainSettings, Trainer
    from cuda_agent.emit import git_commit
    from cuda_agent.run.counters import ncu_path
    from cuda_agent.run.devices import CudaDevice
    from cuda_agent.store import Store

    names = [n for n in args.problems.split(",") if n]
    for n in names:
        if not (ROOT / "benchmarks/problems" / f"{n}.py").exists():
            raise SystemExit(f"{n}: no such problem in benchmarks/problems")
    ncu = ncu_path()
    if ncu is None:
        raise SystemExit("ncu not found: Nsight Compute is needed for hardware counters")
    args.out.mkdir(parents=True, exist_ok=True)
    store_path = args.out / "store.sqlite"
    # the checkpoints stay outside --out: the device tool brings back few files
    work = Path(tempfile.mkdtemp(prefix="counters-train-"))
    started = time.time()
    device = CudaDevice(profile_every=args.profile_every)
    done = []
    try:
        for n in names:
            if time.time() - started > args.time_limit:
                print(f"{n}: not started (past --time-limit)", flush=True)
                continue
            t0 = time.time()
            s = TrainSettings(suite=str(ROOT / "benchmarks/problems" / f"{n}.py"),
                              device="cuda", iterations=1, episodes=2, steps=2, batch=4,
                              prior_weight=100.0, profile_every=args.profile_every,
                              store=str(store_path), out=str(work / n))
            tr = Trainer(s, device=device)
            try:
                tr.train()
            finally:
                tr.close()
            done.append(n)
            print(f"{n}: trained and profiled in {time.time() - t0:.0f} s", flush=True)
    finally:
        device.close()
    store = Store(store_path)
    names_by_id = {r["id"]: r["name"] for r in store._rows("SELECT id, name FROM problems")}
    records = []
    for m in store.measurements(device="cuda"):
        c = m["counters"] or {}
        records.append({"problem": names_by_id.get(m["problem_id"]), "template": m["template"],
                        "config": m["config"], "ok": bool(m["ok"]), "time_ms": m["time_ms"],
                        "error_kind": m["error_kind"], "counters": c,
                        "aux": {a: aux_term(a, c) for a in ("config", "memory", "compute",
                                                            "reduction")}})
    store.close()
    version = subprocess.run([ncu, "--version"], capture_output=True, text=True).stdout.strip()
    profiled = [r for r in records if r["counters"].get("profiled")]
    keys = sorted({k for r in profiled for k in r["counters"]})
    out = {"date": time.strftime("%Y-%m-%d"), "commit": git_commit(), "gpu": device.gpu_name(),
           "ncu": version.splitlines()[-1] if version else None, "problems": done,
           "profile_every": args.profile_every, "seconds": round(time.time() - started),
           "measurements": len(records), "profiled": len(profiled),
           "profile_errors": sorted({r["counters"]["profile_error"][:200] for r in records
                                     if r["counters"].get("profile_error")}),
           "dropped_metrics": sorted({m for r in records
                                      for m in (r["counters"].get("profile_dropped") or "")
                                      .split(",") if m}),
           "counter_keys": keys, "records": records}
    (args.out / "counters.json").write_text(json.dumps(out, indent=1, default=str) + "\n")
    print(f"{len(records)} measurements, {len(profiled)} profiled; counters: {', '.join(keys)}")
    if out["dropped_metrics"]:
        print(f"metrics ncu lacked: {', '.join(out['dropped_metrics'])}")
    if out["profile_errors"]:
        print(f"profile errors: {out['profile_errors']}")
    shown = ("achieved_occupancy", "waves", "dram_throughput", "issue_utilization",
             "bank_conflicts", "sync_stalls")
    for r in profiled:
        c = r["counters"]
        print(f"  {r['problem']:22s} {r['template']:6s} {r['time_ms']:.4f} ms  " +
              " ".join(f"{k[:8]} {c.get(k, float('nan')):.2f}" for k in shown) + "  aux " +
              " ".join(f"{a[:4]} {v:+.2f}" for a, v in r["aux"].items()))
    print(f"wrote {args.out / 'counters.json'}")


if __name__ == "__main__":
    main()
