"""Best time after 4, 8, 16 and 32 measurements against the pooled best (issue 51, item 3).

    python -m benchmarks.learning_metric [--seeds 3] [--budget 32] [--share 0/4] [--jobs 2]
    python -m benchmarks.learning_metric --from benchmarks/results/2026-12-04-learning-replay.json

REPLAY: recorded H200 sweeps (benchmarks/data/nvidia-h200) served on a CPU; nothing is measured
live. The searches are `learning_replay.py`'s (`run_problem`: the same arms, fold policies and
fold constants, so every problem is tuned by a policy and a model that never saw it); only the
arms of `cuda_agent.experiments.learning_metric.ARMS` run, on the recorded single-kernel
problems of share i of n (`fold_policies.folds`: alternating within each family), budget 32.
Each finished problem is appended to <out>.partial.jsonl, so a stopped run resumes; the metric
itself is `cuda_agent.experiments.learning_metric`'s. `--from` computes it instead from the
runs an earlier learning-replay result recorded (no search is run).

Transfer (an H200-trained policy fine-tuned on 8 H100 measurements per problem) needs H100
sweeps to replay; benchmarks/data holds H200 sweeps only, so the result says it was not measured.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

from benchmarks import learning_replay as lr
from benchmarks.fold_policies import folds
from cuda_agent.emit import git_commit
from cuda_agent.experiments import learning_metric as lm

ROOT = Path(__file__).resolve().parents[1]
DATE = "2026-12-07"
"""the result's date (issue 51's run): a rerun names its own with --out"""
TRANSFER = {
    "measured": False,
    "why": "no H100 sweeps are committed (benchmarks/data holds nvidia-h200 only; the H100 "
           "results under benchmarks/results are live bench and realistic runs of the "
           "configurations their searches chose, not sweeps), so a policy fine-tuned on 8 H100 "
           "measurements could not be served the H100 times of what it then proposes: the "
           "transfer comparison needs H100 sweeps (`cuda-agent sweep` on an H100) or a live run"}


def selected(share: str) -> list[str]:
    """The recorded problems of share 'i/n' (every problem: '0/1')."""
    try:
        i, n = (int(x) for x in share.split("/"))
    except ValueError:
        raise SystemExit(f"--share {share!r}: expected i/n, e.g. 0/4") from None
    if not 0 <= i < n:
        raise SystemExit(f"--share {share!r}: i must be in 0..n-1")
    return sorted(folds(lr.problem_names(""), n)[i])


def sweep_extremes(name: str) -> dict:
    """The sweep's best and slowest valid time and its size: the metric's pooled best starts
    from the best, and a search with no valid time yet counts as the slowest."""
    from cuda_agent.problem import load_problem
    from cuda_agent.runner.replay import find_sweep, read_sweep

    sweep = read_sweep(find_sweep(load_problem(ROOT / "benchmarks/problems" / f"{name}.py")))
    ok = [r["time_ms"] for r in sweep["records"] if r.get("ok") and r.get("time_ms")]
    return {"best_ms": min(ok), "worst_ms": max(ok), "recorded": len(sweep["records"])}


def from_replay(path: Path) -> tuple[list[dict], dict]:
    """The rows of an earlier learning-replay result: its runs, with each problem's sweep facts
    read again from the sweep (the result keeps only the runs)."""
    doc = json.loads(path.read_text())
    rows = [{"problem": name, **sweep_extremes(name), "runs": runs,
             "in_sample": ["dropped"] if name in doc.get("dropped", {}) else []}
            for name, runs in doc["runs"].items()]
    meta = {k: doc[k] for k in ("date", "commit", "budget", "seeds", "policy", "single_policy",
                                "sim_constants")}
    return rows, meta


def run(names: list[str], seeds: int, budget: int, jobs: int, partial: Path,
        finished_only: bool = False) -> list[dict]:
    arm_list = [a for a in lr.arms(POLICY, SINGLE, NOPRIOR, SIM) if a.name in lm.ARMS]
    rows = [json.loads(x) for x in partial.read_text().splitlines()] if partial.exists() else []
    done = {r["problem"] for r in rows}
    todo = [] if finished_only else [n for n in names if n not in done]
    print(f"{lr.LABEL}\n{len(names)} problems ({len(done)} done), {len(arm_list)} arms, "
          f"{seeds} seeds, budget {budget}, {jobs} processes", flush=True)
    t0 = time.time()
    with ProcessPoolExecutor(jobs) as pool, partial.open("a") as log:
        futures = {pool.submit(lr.run_problem, n, arm_list, seeds, budget, SIM): n
                   for n in todo}
        for k, fut in enumerate(as_completed(futures), 1):
            row = fut.result()
            rows.append(row)
            log.write(json.dumps(row) + "\n")
            log.flush()
            spent = time.time() - t0
            print(f"[{k}/{len(todo)}] {row['problem']}: "
                  f"{row.get('skipped') or row.get('in_sample') or 'done'} ({spent:.0f} s, "
                  f"about {spent / k * (len(todo) - k):.0f} s left)", flush=True)
    order = {n: i for i, n in enumerate(names)}
    return sorted((r for r in rows if r["problem"] in order), key=lambda r: order[r["problem"]])


POLICY = lr.fold_files("h200-replay-1204f-fold{k}.pt")
SINGLE = lr.fold_files("h200-replay-1204f-single-fold{k}.pt")
NOPRIOR = lr.fold_files("h200-replay-1202-fold{k}.pt")
SIM = ",".join(f"benchmarks/sim_folds/h200-fold{k}.json" for k in range(lr.FOLDS))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--budget", type=int, default=max(lm.KS))
    ap.add_argument("--share", default="0/4", help="which share i/n of the recorded problems")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--from", dest="source", type=Path, default=None,
                    help="an earlier learning-replay result: the metric from its runs")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--finished-only", action="store_true",
                    help="the metric over the problems the partial file holds, running no more "
                         "(the result names the problems not run)")
    args = ap.parse_args()
    os.chdir(ROOT)  # the checkpoints and fold files are named relative to the repository
    if args.budget < max(lm.KS):
        raise SystemExit(f"--budget {args.budget}: the metric reads the best after "
                         f"{max(lm.KS)} measurements")
    if args.source:
        if not args.source.is_file():
            raise SystemExit(f"{args.source}: no such file")
        dest = args.out or ROOT / "benchmarks/results" / f"{DATE}-learning-metric-from-replay.json"
        rows, meta = from_replay(args.source)
        source = {"kind": "runs recorded by an earlier learning-replay result",
                  "file": str(args.source), **meta}
    else:
        dest = args.out or ROOT / "benchmarks/results" / f"{DATE}-learning-metric.json"
        names = selected(args.share)
        rows = [r | sweep_extremes(r["problem"]) if "runs" in r else r
                for r in run(names, args.seeds, args.budget, args.jobs,
                             dest.with_suffix(".partial.jsonl"), args.finished_only)]
        source = {"kind": "searches run for this result", "date": DATE, "commit": git_commit(),
                  "budget": args.budget, "seeds": args.seeds, "share": args.share,
                  "policy": POLICY, "single_policy": SINGLE, "sim_constants": SIM,
                  "not_run": sorted(set(names) - {r["problem"] for r in rows})}
    try:
        metric = lm.summarize(rows)
    except ValueError as exc:
        raise SystemExit(f"{dest}: {exc}") from None
    res = {"label": lr.LABEL, "device": "replay", "gpu_of_the_measurements": "H200",
           "date": DATE, "commit": git_commit(), "source": source, "metric": metric,
           "dropped": {r["problem"]: r.get("skipped") or "; ".join(r["in_sample"])
                       for r in rows if r.get("skipped") or r.get("in_sample")},
           "transfer": TRANSFER}
    dest.write_text(json.dumps(res, indent=1) + "\n")
    from rich.console import Console

    con = Console()
    for t in lm.rich_tables(metric, "REPLAY of H200 sweeps"):
        con.print(t)
    print(f"{metric['problems']} problems, seeds {metric['seeds']}; wrote {dest}")


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
