"""An A/B of the agents' search settings (issue 3): the same policies, problems and seeds, one
setting changed, measurements to 95 % of the best compared problem by problem.

    python -m benchmarks.agents_ab --variants before,online_ppo \
        --policies benchmarks/policies/h200-replay-fold0.pt,benchmarks/policies/h200-replay-fold1.pt
        # 2026-12-01's A/B (benchmarks/results/2026-12-01-online-lr.json; it ran without
        # measuring the defaults first)
    python -m benchmarks.agents_ab --variants online_ppo,run_rank --device sim \\
        --problems scan_,softmax_ --seeds 2

Each problem is tuned by the agents with the cross-fitted fold policies (each problem by the
policy that never trained on it), batch 4, no early stop, the untuned default and each
template's default measured first as `tune` does. `--device replay`: every recorded H200 sweep
(the configurations the sweep measured; the optimum is the sweep's best). `--device sim`: the
problem's whole template space on the simulated device, as a live run searches it; the optimum
is the best time any variant reached on the problem (simulated times: a proxy for the GPU,
whose rank correlation with it BENCHMARKS.md reports per family, never a GPU result).
Reported per variant: median and mean measurements to 95 %, on how many problems each variant
needs fewer than the first, a two-sided sign test on the untied ones, and the geometric mean
of the best time reached (first over variant). Writes
benchmarks/results/<date>-agents-ab-<device>-<variants>.json.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from benchmarks.sections import write_section

ROOT = Path(__file__).resolve().parents[1]

MARK_BEGIN, MARK_END = "<!-- agents-ab:begin -->", "<!-- agents-ab:end -->"

# the fold policies trained with the prior in the episodes' proposals (`fold_policies.py
# --prior-weight 100 --name h200-replay-1202p`): the best of the 2026-12-02 A/Bs; the result
# files name the checkpoints each ran with (before that day's last files: h200-replay-1201)
PRIOR_TRAINED = ",".join(f"benchmarks/policies/h200-replay-1202p-fold{k}.pt" for k in (0, 1))
POLICIES = PRIOR_TRAINED


def variant_options(name: str) -> dict[str, Any]:
    """The marl strategy options of a named variant (the rest at their defaults)."""
    from cuda_agent.agents.ppo import PPOSettings
    from cuda_agent.agents.reward import RewardSettings

    table: dict[str, dict[str, Any]] = {
        # online fine-tuning before 2026-12-01 against ONLINE_PPO (its A/B: strategy.py)
        "before": {"ppo": PPOSettings(epochs=2, lr=9e-4)},
        "online_ppo": {},
        # rank each candidate against the run's history instead of its batch
        "run_rank": {"reward": RewardSettings(rank_over="run")},
        # only the policy's single most probable configuration first, then sampling
        "ranked1": {"ranked": 1},
        "run_rank_ranked1": {"reward": RewardSettings(rank_over="run"), "ranked": 1},
        # after a batch without improvement one agent (in turn) samples at 2x or 3x its
        # temperature (`AgentsStrategy.temperatures`)
        "explore2": {"explore_temperature": 2.0},
        "explore3": {"explore_temperature": 3.0},
        # the first 8 sampled proposals at 3x every agent's temperature (a flatter first look)
        "spread8": {"spread": 8},
        "run_rank_explore3": {"reward": RewardSettings(rank_over="run"),
                              "explore_temperature": 3.0},
        # the analytic model's estimate added to the proposals' scores at weight N
        # (`agents/prior.py`): a configuration r times slower in the model r**N times rarer
        # (online_ppo: the defaults of the day, `strategy.PRIOR_WEIGHT`)
        "noprior": {"prior_weight": 0.0},
        "prior1": {"prior_weight": 1.0},
        "prior3": {"prior_weight": 3.0},
        "prior10": {"prior_weight": 10.0},
        "prior30": {"prior_weight": 30.0},
        "prior100": {"prior_weight": 100.0},
        # the model alone: an untrained policy (near-uniform scores) under the prior, its
        # three most probable first as a trained one does: what the trained policy adds
        "prior30_untrained": {"prior_weight": 30.0, "policy": None, "ranked": 3},
        "prior100_untrained": {"prior_weight": 100.0, "policy": None, "ranked": 3},
        # policies trained with the prior in their episodes, tuning under it: what training
        # for the model's misses adds (`TrainSettings.prior_weight`)
        "prior100_priortrained": {"prior_weight": 100.0, "policies": PRIOR_TRAINED},
        # issue 3's ablations: the same folds trained with the prior, each without one part
        # of the method (`fold_policies.py --ablation`), tuning as prior100_priortrained does
        **{f"ablate_{a}": {"prior_weight": 100.0, "policies": ",".join(
            f"benchmarks/policies/h200-replay-1202p-{a}-fold{k}.pt" for k in (0, 1))}
           for a in ("noaux", "noexplore", "timereward")},
    }
    if name not in table:
        raise SystemExit(f"unknown variant {name!r}; known: {', '.join(table)}")
    return table[name]


def _run(job: tuple[str, int, str, int, str, str, str | None]) -> tuple[str, int, str,
                                                            list[float | None] | None]:
    """One agents' search; None when the problem has no usable sweep (replay)."""
    path, seed, variant, budget, device, policies, replay_root = job
    import torch

    torch.set_num_threads(1)
    from cuda_agent.bench import Policies
    from cuda_agent.errors import CudaAgentError
    from cuda_agent.problem import load_problem
    from cuda_agent.store import Store
    from cuda_agent.tuner import Tuner, TuneSettings

    chosen = variant_options(variant)
    policies = chosen.pop("policies", policies)  # a variant may bring its own checkpoints
    checkpoints = ",".join(str(ROOT / p) for p in policies.split(","))
    opts = {"policy": Policies(checkpoints).pick(Path(path).stem), "patience": 10**6,
            **chosen}
    settings = TuneSettings(device=device, strategy="marl", budget=budget, batch=4, seed=seed,
                            baselines=False, strategy_options=opts, replay_root=replay_root)
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


def sweep_best(name: str, root: str | None = None) -> float | None:
    from cuda_agent.errors import CudaAgentError
    from cuda_agent.problem import load_problem
    from cuda_agent.runner.replay import find_sweep, read_sweep

    try:
        recs = read_sweep(find_sweep(load_problem(ROOT / "benchmarks/problems" / f"{name}.py"),
                                     Path(root) if root else None))["records"]
    except CudaAgentError:
        return None
    times = [r["time_ms"] for r in recs if r.get("ok") and r.get("time_ms")]
    return min(times) if times else None


def served(root: str) -> str:
    """What a sweep root holds, for the reader: the live runs' measurements when
    `benchmarks/live_sweeps.py` wrote it, else the path."""
    from cuda_agent.runner.replay import read_sweep

    first = next(Path(root).glob("*/*.json.gz"), None)
    if first is not None and str(read_sweep(first).get("source", "")).startswith("the live bench"):
        return ("the configurations the live bench runs measured on the H200, as sweeps "
                "(`benchmarks/live_sweeps.py`; the optimum: each run's best of them)")
    return root


def gpu_name() -> str:
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"


def sign_test(per: dict[str, dict[str, float]], v: str, base: str) -> dict[str, Any]:
    """On how many problems `v` needed fewer measurements than `base`, more, the same, and the
    two-sided sign test over the untied ones (None when all tie)."""
    from scipy.stats import binomtest

    fewer = sum(p[v] < p[base] for p in per.values())
    more = sum(p[v] > p[base] for p in per.values())
    return {"fewer": fewer, "more": more, "tied": len(per) - fewer - more,
            "sign_test_p": binomtest(fewer, fewer + more).pvalue if fewer + more else None}


def summarize(runs: list[tuple[str, int, str, list[float | None] | None]], budget: int,
              variants: list[str], device: str, replay_root: str | None = None) -> dict:
    """Per problem, each variant's median measurements to 95 % of the optimum; the
    comparison of every variant with the first."""
    from cuda_agent import metrics

    by: dict[str, dict[str, list[list[float | None]]]] = {}
    for path, _, variant, times in runs:
        if times is not None:
            by.setdefault(Path(path).stem, {}).setdefault(variant, []).append(times)
    per: dict[str, dict[str, float]] = {}
    reached: dict[str, dict[str, float]] = {}
    for name, d in sorted(by.items()):
        if set(d) != set(variants):
            continue
        everything = [t for rs in d.values() for r in rs for t in r if t]
        best = (sweep_best(name, replay_root) if device == "replay"
                else min(everything, default=None))
        if best is None:
            continue
        per[name] = {v: statistics.median(metrics.evals_to_fraction(r, best, 0.95,
                                                                    censor=budget + 1)
                                          for r in rs) for v, rs in d.items()}
        reached[name] = {v: statistics.median(min((t for t in r if t), default=math.inf)
                                              for r in rs) for v, rs in d.items()}
    base = variants[0]
    against: dict[str, dict[str, Any]] = {}
    for v in variants[1:]:
        ratios = [r[base] / r[v] for r in reached.values()
                  if math.isfinite(r[base]) and math.isfinite(r[v])]
        against[v] = {**sign_test(per, v, base),
                      f"geomean_best_ratio_{base}_over_{v}":
                      math.exp(statistics.mean(map(math.log, ratios))) if ratios else None}
    return {
        "problems": len(per),
        "median_evals_to_95": {v: statistics.median(p[v] for p in per.values()) for v in variants}
        if per else {},
        "mean_evals_to_95": {v: statistics.mean(p[v] for p in per.values()) for v in variants}
        if per else {},
        "against_" + base: against,
        "per_problem": per}


def markdown() -> list[str]:
    """BENCHMARKS.md's section: every committed A/B, one table each."""
    lines = [MARK_BEGIN, "## The agents' search settings, A/B (issue 3)", "",
             "`benchmarks/agents_ab.py`: the agents tune each problem with the cross-fitted "
             "fold policies (the one that never trained on it), batch 4, budget 40, no early "
             "stop, once per named setting with the same seeds; measurements to 95 % of the "
             "optimum (41: not within 40), median over seeds, then over problems. On `replay` "
             "the space is a recorded H200 sweep and the optimum its best; on `sim` the space "
             "is the problem's whole template space on the simulated device and the optimum the "
             "best time any setting reached there: **simulated times**, a proxy for a live "
             "search (the live runs search whole spaces; the sweeps hold 8 to 200 "
             "configurations of them), never a GPU result; there the optimum depends on the "
             "settings run together, so a setting's figures differ between files. On `cuda` "
             "the same as `sim` but live on the H200: every candidate compiled, verified and "
             "timed, one search at a time, the optimum the best time any setting reached in "
             "the run. `online_ppo` is the defaults of the file's day: without the analytic "
             "model's prior (`agents/prior.py`) up to the first of the prior's files "
             "(`...-online_ppo-prior1-prior3-prior10.json`), at weight 10 in the other "
             "2026-12-02 files with `prior*` or `noprior` (after these A/Bs the default is "
             "100); `noprior` is without it, `priorN` at weight N, `priorN_untrained` an "
             "untrained policy under it, `prior100_priortrained` the fold policies trained "
             "with the prior in their episodes' proposals (`fold_policies.py --prior-weight "
             "100`), tuning under it; `ablate_noaux`, `ablate_noexplore`, `ablate_timereward` "
             "the same folds trained (with the prior) without the auxiliary reward, without "
             "the targeted exploration, and with the raw time as reward instead of the rank "
             "within the batch (`fold_policies.py --ablation`): issue 3's ablations. Sign "
             "test: two-sided, over the problems where the two settings differ.", ""]
    for path in sorted((ROOT / "benchmarks/results").glob("*-agents-ab-*.json")):
        res = json.loads(path.read_text())
        base = res["variants"][0]
        served = (f" serving {res['data'].removesuffix(' (replay)')}"
                  if res["device"] == "replay" and not res["data"].startswith("benchmarks/data")
                  else "")
        lines += [f"{res['date']}, `{res['device']}`{served}, problems {res['problems_given']} "
                  f"({res['problems']} compared), {res['seeds']} seeds, budget {res['budget']}, "
                  f"policies `{res['policies']}`"
                  + "".join(f", {v} `{pol}`" for v, pol in res.get("variant_policies",
                                                                    {}).items())
                  + f" (`{path.relative_to(ROOT)}`):", "",
                  f"| setting | median to 95 % | mean | fewer than {base} | more | tied | "
                  f"sign test p | best reached, {base} over it |",
                  "|---|---|---|---|---|---|---|---|"]
        for v in res["variants"]:
            a = res["against_" + base].get(v)
            cells = ["-"] * 5 if a is None else [
                str(a["fewer"]), str(a["more"]), str(a["tied"]),
                "-" if a["sign_test_p"] is None else f"{a['sign_test_p']:.2g}",
                f"{a[f'geomean_best_ratio_{base}_over_{v}']:.3f}"
                if a[f"geomean_best_ratio_{base}_over_{v}"] else "-"]
            lines.append(f"| {v} | {res['median_evals_to_95'][v]:g} | "
                         f"{res['mean_evals_to_95'][v]:.1f} | " + " | ".join(cells) + " |")
        lines += untrained_rows(res)
        lines.append("")
        if res["device"] == "cuda":  # a live run is small: each problem shown
            lines += live_rows(res)
    return lines + [MARK_END]


def untrained_rows(res: dict) -> list[str]:
    """Each trained variant against an untrained one of the same file, where the file has
    both and the table above (every variant against the first) does not show it: what
    training adds beside the prior."""
    lines = []
    for u in (v for v in res["variants"] if v.endswith("_untrained")):
        for v in res["variants"][1:]:
            if v == u or v.endswith("_untrained"):
                continue
            t = sign_test(res["per_problem"], v, u)
            p = "-" if t["sign_test_p"] is None else f"{t['sign_test_p']:.2g}"
            lines.append(f"\n{v} against {u}: fewer on {t['fewer']} problems, more on "
                         f"{t['more']}, tied on {t['tied']} (sign test p {p}).")
    return lines


def live_rows(res: dict) -> list[str]:
    """A live A/B's problems: measurements to 95 % and the best time each setting reached."""
    variants = res["variants"]
    best: dict[str, dict[str, float]] = {}
    for name, _, v, times in res["trajectories"]:
        ok = [t for t in times or [] if t]
        if ok:
            best.setdefault(name, {})[v] = min(min(ok), best.get(name, {}).get(v, math.inf))
    lines = [f"Live on the GPU in {res['seconds']:.0f} s (commit {res.get('commit') or '?'}); "
             "per problem, measurements to 95 % of the best either reached (and each "
             "one's best, ms); a problem the run's deadline left out is not listed:", "",
             "| problem | " + " | ".join(variants) + " | " +
             " | ".join(f"best ms, {v}" for v in variants) + " |",
             "|---|" + "---|" * (2 * len(variants))]
    for name, per in res["per_problem"].items():
        lines.append(f"| {name} | " + " | ".join(f"{per[v]:g}" for v in variants) + " | " +
                     " | ".join(f"{best[name][v]:.4f}" for v in variants) + " |")
    return lines + [""]


def main() -> None:
    from rich.progress import track

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variants", default="online_ppo,run_rank",
                    help="comma-separated; the first is the baseline the others are compared to")
    ap.add_argument("--device", choices=("replay", "sim", "cuda"), default="replay",
                    help="cuda: live on the GPU, one search at a time (no two time at once); "
                         "the optimum is the best time any variant reached")
    ap.add_argument("--problems", default="",
                    help="comma-separated name prefixes (default: every problem of the suite)")
    ap.add_argument("--policies", default=POLICIES, help="the fold checkpoints, comma-separated")
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--budget", type=int, default=40)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--deadline", type=float, default=0.0,
                    help="seconds: start no problem after this (0: none); a problem's runs are "
                         "kept together so each one compares every variant")
    ap.add_argument("--out", default="", help="the result file (default: benchmarks/results/)")
    ap.add_argument("--replay-root", default="",
                    help="replay: the sweeps to serve (default benchmarks/data; "
                         "`benchmarks/live_sweeps.py` writes the live runs' measurements)")
    ap.add_argument("--markdown-only", action="store_true",
                    help="rewrite BENCHMARKS.md's section from the committed results only")
    args = ap.parse_args()
    if args.markdown_only:
        write_section(ROOT / "BENCHMARKS.md", MARK_BEGIN, MARK_END, markdown())
        return
    variants = args.variants.split(",")
    for v in variants:
        variant_options(v)  # an unknown name fails before any work
    files = sorted((ROOT / "benchmarks/problems").glob("*.py"))
    if args.problems:
        files = [f for f in files if f.stem.startswith(tuple(args.problems.split(",")))]
    if not files:
        raise SystemExit(f"no problem matches {args.problems!r}")
    jobs = [(str(f), s, v, args.budget, args.device, args.policies, args.replay_root or None)
            for f in files
            for s in range(args.seeds) for v in variants]
    started = time.time()
    if args.device == "cuda":  # one search at a time on the GPU, problem by problem
        runs = []
        for job in track(jobs, description=f"agents on cuda: {', '.join(variants)}"):
            first_of_problem = not runs or runs[-1][0] != job[0]
            if first_of_problem and args.deadline and time.time() - started > args.deadline:
                break
            runs.append(_run(job))
    else:
        with ProcessPoolExecutor(args.jobs) as pool:
            runs = list(track(pool.map(_run, jobs), total=len(jobs),
                              description=f"agents on {args.device}: {', '.join(variants)}"))
    out = summarize(runs, args.budget, variants, args.device, args.replay_root or None)
    out.update(date=time.strftime("%Y-%m-%d"), seeds=args.seeds, budget=args.budget,
               device=args.device, variants=variants, problems_given=args.problems or "all",
               optimum={"replay": "the sweep's best",
                        "sim": "the best time any variant reached (simulated)",
                        "cuda": "the best time any variant reached"}[args.device],
               data={"replay": (f"{served(args.replay_root)} (replay)" if args.replay_root else
                                "benchmarks/data/nvidia-h200 (replay)"),
                     "sim": "simulated device",
                     "cuda": f"measured live on the GPU ({gpu_name()})"}[args.device],
               policies=args.policies, seconds=round(time.time() - started, 1),
               # variants that tune with other checkpoints than --policies
               variant_policies={v: o["policies"] for v in variants
                                 if "policies" in (o := variant_options(v))})
    if args.device == "cuda":  # every measurement, for a later look (None: failed)
        out["trajectories"] = [[Path(p).stem, s, v, t] for p, s, v, t in runs]
        out["commit"] = os.environ.get("CUDA_AGENT_COMMIT", "")
    path = Path(args.out) if args.out else (
        ROOT / "benchmarks/results" /
        f"{out['date']}-agents-ab-{args.device}"
        f"{'-' + Path(args.replay_root).name if args.replay_root else ''}"
        f"-{'-'.join(variants)}.json")
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(f"{out['problems']} problems: median measurements to 95 % "
          f"{out['median_evals_to_95']}, mean {out['mean_evals_to_95']}; against "
          f"{variants[0]}: {out['against_' + variants[0]]}; wrote {path}")
    if not args.out:
        write_section(ROOT / "BENCHMARKS.md", MARK_BEGIN, MARK_END, markdown())


if __name__ == "__main__":
    main()
