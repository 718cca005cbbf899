"""Hardware counters from Nsight Compute during a short training run on the GPU (issue 34, item 1).

    python -m benchmarks.counters_gpu --out $OUT/counters [--problems a,b,c]
        [--profile-every 4] [--time-limit 150]

Per problem, a short training run (one PPO update over 2 episodes of 2 steps of 4
configurations, under the analytic model's prior as tuning runs) on the cuda device, which
profiles every n-th verified candidate with Nsight Compute after timing it (`runner/counters.py`)
and stores the counters with the measurement (SQLite, `<out>/store.sqlite`). Then every
measurement of the run is written to `<out>/counters.json` with its counters and each agent's
auxiliary reward term computed from them (`agents/reward.aux_term`), and a summary is printed:
how many candidates were profiled, which counters came back, the metrics ncu lacked. A problem
is not started past `--time-limit` seconds. Needs a GPU and `ncu`. Commit `counters.json` as
benchmarks/results/<date>-<gpu>-counters/counters.json: `tests/test_counters.py` then checks
every profiled record's agents' terms on the CPU, and

    python -m benchmarks.counters_gpu --markdown benchmarks/results/<date>-<gpu>-counters/counters.json

writes its section of BENCHMARKS.md (on the CPU).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

MARK_BEGIN, MARK_END = "<!-- counters:begin -->", "<!-- counters:end -->"
SHOWN = ("achieved_occupancy", "waves", "dram_throughput", "l2_throughput", "issue_utilization",
         "global_load_efficiency", "bank_conflicts", "sync_stalls", "atomic_contention")

# a row reduction (shuffles, shared memory), a whole-tensor reduction (the split template:
# two passes, last block, or atomics), a matrix product (shared-memory tiles, registers)
PROBLEMS = ("softmax_short_rows", "norm_frobenius", "gemm_odd")


def markdown(path: Path) -> None:
    """BENCHMARKS.md's section from a committed counters.json: per profiled candidate, the
    counters each agent reads and its auxiliary term (measured on the GPU)."""
    from benchmarks.sections import write_section

    d = json.loads(path.read_text())
    rel = path.resolve().relative_to(ROOT)
    lines = [MARK_BEGIN, "## Hardware counters during training (issue 34)", "",
             f"Measured on {d['gpu']} by `benchmarks/counters_gpu.py` ({d['date']}, commit "
             f"{d['commit']}, {d['ncu']}): a short training run per problem "
             f"({', '.join(d['problems'])}), every {d['profile_every']}th verified candidate "
             f"profiled with Nsight Compute after its timing; {d['profiled']} of "
             f"{d['measurements']} measurements profiled (`{rel}`). Each agent's auxiliary "
             "reward term (`agents/reward.aux_term`, weight 0.05) comes from its own "
             "dimension's counters."
             + (f" Metrics this ncu lacked: {', '.join(d['dropped_metrics'])}."
                if d["dropped_metrics"] else "")
             + (f" Profile errors: {'; '.join(d['profile_errors'])}."
                if d["profile_errors"] else ""), "",
             "| problem | template | ms | " + " | ".join(SHOWN) + " | aux config | aux memory "
             "| aux compute | aux reduction |", "|---|---|---|" + "---|" * (len(SHOWN) + 4)]
    for r in d["records"]:
        c = r["counters"]
        if not c.get("profiled"):
            continue
        cells = [f"{c[k]:.2f}" if isinstance(c.get(k), (int, float)) else "-" for k in SHOWN]
        lines.append(f"| {r['problem']} | {r['template']} | {r['time_ms']:.4f} | "
                     + " | ".join(cells) + " | "
                     + " | ".join(f"{r['aux'][a]:+.2f}" for a in ("config", "memory",
                                                                   "compute", "reduction"))
                     + " |")
    write_section(ROOT / "BENCHMARKS.md", MARK_BEGIN, MARK_END, lines + ["", MARK_END])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--markdown", type=Path, default=None,
                    help="write BENCHMARKS.md's section from this committed counters.json")
    ap.add_argument("--problems", default=",".join(PROBLEMS))
    ap.add_argument("--profile-every", type=int, default=4)
    ap.add_argument("--time-limit", type=float, default=150.0)
    args = ap.parse_args()
    if args.markdown is not None:
        markdown(args.markdown)
        return
    if args.out is None:
        raise SystemExit("--out is needed (where the counters go)")
    from cuda_agent.agents.reward import aux_term
    from cuda_agent.agents.train import TrainSettings, Trainer
    from cuda_agent.emit import git_commit
    from cuda_agent.runner.counters import ncu_path
    from cuda_agent.runner.devices import CudaDevice
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
            s = TrainSettings.of(suite=str(ROOT / "benchmarks/problems" / f"{n}.py"),
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
    names_by_id = {r["id"]: r["name"] for r in store.problems()}
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
    shown = SHOWN[:5] + ("sync_stalls",)
    for r in profiled:
        c = r["counters"]
        print(f"  {r['problem']:22s} {r['template']:6s} {r['time_ms']:.4f} ms  " +
              " ".join(f"{k[:8]} {c.get(k, float('nan')):.2f}" for k in shown) + "  aux " +
              " ".join(f"{a[:4]} {v:+.2f}" for a, v in r["aux"].items()))
    print(f"wrote {args.out / 'counters.json'}")


if __name__ == "__main__":
    main()
