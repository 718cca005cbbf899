"""How hard the agents learn online while they tune: the step of their fine-tuning (issue 3).

    python benchmarks/online_lr.py [--seeds 2] [--budget 40] [--jobs 2]

Every recorded H200 sweep (replay) is tuned by the agents with the cross-fitted fold policies
(each problem by the policy that never trained on it), once with the online fine-tuning of
before 2026-12-01 (Adam at 9e-4, 2 PPO epochs per batch) and once with `ONLINE_PPO` (9e-3, 4
epochs), same seeds, batch 4, no early stop. Reported: measurements to 95 % of the sweep's best
per variant (median, mean), on how many problems each needs fewer, a two-sided sign test on the
untied ones, and the best time each reaches (geometric mean ratio). Writes
benchmarks/results/<date>-online-lr.json.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

POLICIES = ",".join(str(ROOT / f"benchmarks/policies/h200-replay-fold{k}.pt") for k in (0, 1))
VARIANTS = {"before": {"epochs": 2, "lr": 9e-4}, "online_ppo": None}


def _run(job: tuple[str, int, str, int]) -> tuple[str, int, str, list[float | None] | None]:
    """One agents' search on replay; None when the problem has no usable sweep."""
    path, seed, variant, budget = job
    import torch

    torch.set_num_threads(1)
    from cuda_agent.agents.ppo import PPOSettings
    from cuda_agent.bench import Policies
    from cuda_agent.errors import CudaAgentError
    from cuda_agent.problem import load_problem
    from cuda_agent.store import Store
    from cuda_agent.tuner import Tuner, TuneSettings

    opts = {"policy": Policies(POLICIES).pick(Path(path).stem), "budget": budget,
            "patience": 10**6}
    if VARIANTS[variant] is not None:
        opts["ppo"] = PPOSettings(**VARIANTS[variant])
    settings = TuneSettings(device="replay", strategy="marl", budget=budget, batch=4, seed=seed,
                            baselines=False, include_default=False, strategy_options=opts)
    try:
        tuner = Tuner(load_problem(path), settings, store=Store(":memory:"))
    except CudaAgentError:
        return path, seed, variant, None
    try:
        res = tuner.run()
    finally:
        tuner.close()
    return path, seed, variant, [t.measurement.time_ms if t.measurement.ok else None
                                 for t in res.trials]


def sweep_best(name: str) -> float | None:
    from cuda_agent.errors import CudaAgentError
    from cuda_agent.problem import load_problem
    from cuda_agent.run.replay import find_sweep, read_sweep

    try:
        recs = read_sweep(find_sweep(load_problem(ROOT / "benchmarks/problems" / f"{name}.py"),
                                     None))["records"]
    except CudaAgentError:
        return None
    times = [r["time_ms"] for r in recs if r.get("ok") and r.get("time_ms")]
    return min(times) if times else None


def summarize(runs: list[tuple[str, int, str, list[float | None] | None]], budget: int) -> dict:
    from scipy.stats import binomtest

    from cuda_agent import metrics

    by: dict[str, dict[str, list[list[float | None]]]] = {}
    for path, _, variant, times in runs:
        if times is not None:
            by.setdefault(Path(path).stem, {}).setdefault(variant, []).append(times)
    per: dict[str, dict[str, float]] = {}
    ratios = []
    for name, d in sorted(by.items()):
        best = sweep_best(name)
        if best is None or set(d) != set(VARIANTS):
            continue
        per[name] = {v: statistics.median(metrics.evals_to_fraction(r, best, 0.95,
                                                                    censor=budget + 1)
                                          for r in runs_) for v, runs_ in d.items()}
        reached = {v: statistics.median(min((t for t in r if t), default=math.inf) for r in rs)
                   for v, rs in d.items()}
        if all(math.isfinite(x) for x in reached.values()):
            ratios.append(reached["before"] / reached["online_ppo"])
    fewer = sum(p["online_ppo"] < p["before"] for p in per.values())
    more = sum(p["online_ppo"] > p["before"] for p in per.values())
    return {
        "problems": len(per),
        "median_evals_to_95": {v: statistics.median(p[v] for p in per.values()) for v in VARIANTS},
        "mean_evals_to_95": {v: statistics.mean(p[v] for p in per.values()) for v in VARIANTS},
        "online_ppo_fewer": fewer, "online_ppo_more": more, "tied": len(per) - fewer - more,
        "sign_test_p": binomtest(fewer, fewer + more).pvalue if fewer + more else None,
        "geomean_best_ratio_before_over_online_ppo":
            math.exp(statistics.mean(map(math.log, ratios))) if ratios else None,
        "per_problem": per}


def main() -> None:
    from rich.progress import track

    from cuda_agent.agents.strategy import ONLINE_PPO

    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--budget", type=int, default=40)
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    files = sorted((ROOT / "benchmarks/problems").glob("*.py"))
    jobs = [(str(f), s, v, args.budget) for f in files for s in range(args.seeds)
            for v in VARIANTS]
    with ProcessPoolExecutor(args.jobs) as pool:
        runs = list(track(pool.map(_run, jobs), total=len(jobs),
                          description="agents on replay, two online steps"))
    out = summarize(runs, args.budget)
    out.update(date=time.strftime("%Y-%m-%d"), seeds=args.seeds, budget=args.budget,
               variants={"before": VARIANTS["before"],
                         "online_ppo": {"epochs": ONLINE_PPO.epochs, "lr": ONLINE_PPO.lr}},
               data="benchmarks/data/nvidia-h200 (replay)", policies=POLICIES.replace(
                   str(ROOT) + "/", ""))
    path = ROOT / "benchmarks/results" / f"{out['date']}-online-lr.json"
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(f"{out['problems']} problems: median measurements to 95 % "
          f"{out['median_evals_to_95']}, mean {out['mean_evals_to_95']}; ONLINE_PPO fewer on "
          f"{out['online_ppo_fewer']}, more on {out['online_ppo_more']}, tied {out['tied']}, "
          f"sign test p = {out['sign_test_p']}; wrote {path}")


if __name__ == "__main__":
    main()
