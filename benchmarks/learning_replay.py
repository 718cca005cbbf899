"""Does learning beat the cost model alone? An out-of-sample replay evaluation (issue 34, item 3).

    python -m benchmarks.learning_replay [--seeds 3] [--budget 40] [--jobs 2] [--problems a,b]
    python -m benchmarks.learning_replay --markdown-only   # BENCHMARKS.md from the result

REPLAY: every figure here comes from sweeps recorded on the H200 (benchmarks/data/nvidia-h200),
replayed on a CPU: a strategy's proposals are served the times the GPU measured. Nothing is
measured live; these are not live GPU figures.

Every recorded single-kernel sweep is searched by each arm below, `--seeds` seeds, budget
`--budget`, batch 4 (the bench's `strategy_settings`). Out of sample: each problem is tuned by
the fold policy that never trained on it (`benchmarks/fold_policies.py`), and every strategy
that consults the analytic model uses the fold's constants fitted without it
(`benchmarks/sim_fold_fit.py`); a problem some arm would see in-sample is dropped and listed.
Reported per arm: the median (over problems) of the median over seeds of the measurements to
95 % of the sweep's best (a search that never got there: budget + 1), the mean, and how often
it got there; two-sided sign tests between the pairs in `PAIRS`. Progress goes to stdout and
each finished problem to a JSON-lines file beside the result, so a stopped run resumes.

Writes benchmarks/results/<date>-learning-replay.json and the section of BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.sections import write_section

ROOT = Path(__file__).resolve().parents[1]

POL = "benchmarks/policies"
FOLDS = 2
MARK_BEGIN, MARK_END = "<!-- learning-replay:begin -->", "<!-- learning-replay:end -->"
LABEL = ("replay: recorded H200 measurements (benchmarks/data/nvidia-h200) replayed on a CPU; "
         "no kernel was run for this evaluation and no figure here is a live GPU measurement")


def fold_files(pattern: str) -> str:
    return ",".join(f"{POL}/{pattern.format(k=k)}" for k in range(FOLDS))


@dataclass(frozen=True)
class Arm:
    """One column: a bench strategy with its checkpoints and model constants."""

    name: str
    strategy: str
    what: str
    policy: str | None = None
    constants: str | None = "folds"
    """"folds": each problem's fold constants (fitted without it); None: the shipped model"""


def arms(policy: str, single: str, noprior: str, sim_folds: str) -> list[Arm]:
    return [
        Arm("trained+prior", "marl", "trained fold policy + the model's prior (cuda-agent's "
            "agents as tuned: 4 agents, online fine-tuning)", policy),
        Arm("untrained+prior", "marl_untrained", "the same agents with fresh weights, same "
            "prior and online learning"),
        Arm("prior", "prior", "the model's ranking alone, no network"),
        Arm("trained, no prior", "marl_noprior", "a fold policy trained without the model, "
            "tuning without it", noprior, None),
        Arm("single+prior", "marl_single", "one agent over every slot, trained per fold with "
            "the same settings, + the prior", single),
        Arm("random", "random", "random search", None, None),
        Arm("optuna cold", "optuna", "Optuna TPE, cold", None, None),
        Arm("optuna warm", "optuna_warm", "Optuna TPE, its first 4 trials the model's top "
            "picks"),
        Arm("kt GA cold", "kt:genetic_algorithm", "Kernel Tuner genetic_algorithm, cold", None,
            None),
        Arm("kt GA warm", "kt_warm:genetic_algorithm", "Kernel Tuner genetic_algorithm: the "
            "model's top 4 first, then x0 = the fastest of them"),
        Arm("kt SA cold", "kt:simulated_annealing", "Kernel Tuner simulated_annealing, cold",
            None, None),
        Arm("kt SA warm", "kt_warm:simulated_annealing", "Kernel Tuner simulated_annealing "
            "from the model's top 4 (x0)"),
        Arm("kt random cold", "kt:random_sample", "Kernel Tuner random_sample, cold", None,
            None),
        Arm("kt random warm", "kt_warm:random_sample", "Kernel Tuner random_sample after the "
            "model's top 4 (it takes no start point)"),
        Arm("prior, in-sample model", "prior", "the model's ranking with the shipped constants "
            "(fitted with every sweep, this one included): the in-sample figure", None, None),
    ]


PAIRS = [("trained+prior", "prior"), ("trained+prior", "untrained+prior"),
         ("untrained+prior", "prior"), ("trained+prior", "single+prior"),
         ("trained+prior", "trained, no prior"), ("trained+prior", "optuna warm"),
         ("trained+prior", "kt GA warm"), ("prior", "optuna warm"), ("prior", "kt GA warm"),
         ("optuna warm", "optuna cold"), ("kt GA warm", "kt GA cold"),
         ("prior", "prior, in-sample model"), ("prior", "random")]
"""(a, b): on how many problems a needs fewer measurements than b, more, the same"""


def problem_names(only: str) -> list[str]:
    from benchmarks.fold_policies import recorded_problems

    names = recorded_problems()
    if only:  # exact names; a name ending in '*' is a prefix (norm_rms is not norm_rms_odd)
        want = [w for w in only.split(",") if w]
        names = [n for n in names if n in want or any(
            w.endswith("*") and n.startswith(w[:-1]) for w in want)]
    return names


def run_problem(name: str, arm_list: list[Arm], seeds: int, budget: int, sim_folds: str
                ) -> dict[str, Any]:
    """Every arm and seed on one problem (one process: the space is built once)."""
    import torch

    torch.set_num_threads(1)
    from cuda_agent import bench
    from cuda_agent.bench import Policies, is_kernel_tuner
    from cuda_agent.errors import CudaAgentError
    from cuda_agent.ir.partition import ProgramPlan
    from cuda_agent.ir.planning import make_plan
    from cuda_agent.problem import load_problem
    from cuda_agent.runner.replay import ReplayDevice, find_sweep, read_sweep
    from cuda_agent.costmodel.folds import FoldConstants

    path = ROOT / "benchmarks/problems" / f"{name}.py"
    problem = load_problem(path)
    plan = make_plan(problem.graph())
    if isinstance(plan, ProgramPlan):
        return {"problem": name, "skipped": "a multi-kernel program (sweeps are stage by stage)"}
    try:
        sweep = read_sweep(find_sweep(problem))
    except CudaAgentError as exc:
        return {"problem": name, "skipped": str(exc)}
    ok = [r["time_ms"] for r in sweep["records"] if r.get("ok") and r.get("time_ms")]
    if not ok:
        return {"problem": name, "skipped": "no configuration ran"}
    device = ReplayDevice()
    folds = FoldConstants(sim_folds)
    constants = folds.pick(name)
    out: dict[str, Any] = {"problem": name, "family": plan.family, "best_ms": min(ok),
                           "recorded": len(sweep["records"]), "runs": {}, "seconds": {},
                           "constants": constants, "policies": {}, "in_sample": []}
    if constants is None:
        out["in_sample"].append("model constants: no fold left it out")
    warm: dict[str | None, list] = {}
    for arm in arm_list:
        c = constants if arm.constants == "folds" else None
        pol = Policies(arm.policy) if arm.policy else None
        chosen = pol.pick(name) if pol else None
        if pol and name in pol.trained[chosen]:
            out["in_sample"].append(f"{arm.name}: every policy trained on it")
        out["policies"][arm.name] = Path(chosen).name if chosen else None
        t0 = time.perf_counter()
        runs = []
        for seed in range(seeds):
            if is_kernel_tuner(arm.strategy):
                w = None
                if arm.strategy.startswith("kt_warm:"):
                    if c not in warm:
                        warm[c] = bench.warm_records(path, device, sweep["records"], c)
                    w = warm[c]
                times, _ = bench._order_kernel_tuner(sweep["records"], arm.strategy, budget,
                                                     seed, w)
            else:
                times = bench._order_ask_tell(path, bench.BenchSettings.of(budget=budget),
                                              arm.strategy, device, seed, chosen, c)
            runs.append(times)
        out["runs"][arm.name] = runs
        out["seconds"][arm.name] = round(time.perf_counter() - t0, 2)
    return out


def evals(times: list[float | None], best: float, budget: int) -> int:
    from cuda_agent.metrics import evals_to_fraction

    return evals_to_fraction(times, best, 0.95, censor=budget + 1)


def sign(per: dict[str, dict[str, float]], a: str, b: str) -> dict[str, Any]:
    from scipy.stats import binomtest

    fewer = sum(p[a] < p[b] for p in per.values())
    more = sum(p[a] > p[b] for p in per.values())
    return {"a": a, "b": b, "a_fewer": fewer, "a_more": more,
            "tied": len(per) - fewer - more,
            "sign_test_p": binomtest(fewer, fewer + more).pvalue if fewer + more else None}


def summarize(rows: list[dict], arm_list: list[Arm], budget: int) -> dict[str, Any]:
    used = [r for r in rows if "runs" in r and not r["in_sample"]]
    per = {r["problem"]: {a: statistics.median(evals(t, r["best_ms"], budget)
                                               for t in r["runs"][a]) for a in r["runs"]}
           for r in used}
    names = [a.name for a in arm_list]
    out: dict[str, Any] = {"problems": len(per), "arms": {}, "pairs": [],
                           "by_family": {}, "per_problem": per}
    for a in names:
        v = [p[a] for p in per.values()]
        out["arms"][a] = {
            "median_evals_to_95": statistics.median(v), "mean_evals_to_95": statistics.mean(v),
            "reached_within_budget": sum(x <= budget for x in v),
            "median_seconds_per_problem": statistics.median(
                r["seconds"][a] for r in used)}
    out["pairs"] = [sign(per, a, b) for a, b in PAIRS if a in names and b in names]
    fams: dict[str, list[str]] = {}
    for r in used:
        fams.setdefault(r["family"], []).append(r["problem"])
    for f, probs in sorted(fams.items()):
        sub = {p: per[p] for p in probs}
        out["by_family"][f] = {
            "problems": len(probs),
            **{a: statistics.median(sub[p][a] for p in probs)
               for a in ("trained+prior", "untrained+prior", "prior", "optuna warm",
                         "kt GA warm", "random") if a in names},
            "trained_vs_prior": sign(sub, "trained+prior", "prior")
            if {"trained+prior", "prior"} <= set(names) else None}
    return out


def _pair(s: dict, a: str, b: str) -> dict | None:
    return next((p for p in s["pairs"] if (p["a"], p["b"]) == (a, b)), None)


def _plain(s: dict, a: str, b: str, says: str, not_says: str) -> str:
    """`says` when a needs fewer than b significantly, else `not_says`; with the figures."""
    p = _pair(s, a, b)
    if p is None:
        return ""
    pv = "-" if p["sign_test_p"] is None else f"{p['sign_test_p']:.2g}"
    won = p["sign_test_p"] is not None and p["sign_test_p"] < 0.05 and p["a_fewer"] > p["a_more"]
    return (f" {says if won else not_says}: fewer measurements on {p['a_fewer']} problems, "
            f"more on {p['a_more']}, tied on {p['tied']} (p = {pv}; means "
            f"{s['arms'][a]['mean_evals_to_95']:.2f} and {s['arms'][b]['mean_evals_to_95']:.2f}).")


def verdict(s: dict) -> str:
    """Plain sentences: learning against the model alone, trained against untrained under the
    same prior, four agents against one."""
    tp = next((p for p in s["pairs"] if (p["a"], p["b"]) == ("trained+prior", "prior")), None)
    if tp is None:
        return ""
    a, b = s["arms"]["trained+prior"], s["arms"]["prior"]
    sig = tp["sign_test_p"] is not None and tp["sign_test_p"] < 0.05
    if sig and tp["a_fewer"] > tp["a_more"]:
        return (f"**Learning beats the cost model alone on replay**: the trained agents with the "
                f"prior need fewer measurements than the prior's ranking alone on "
                f"{tp['a_fewer']} problems and more on {tp['a_more']} (sign test p = "
                f"{tp['sign_test_p']:.2g}; medians {a['median_evals_to_95']:g} and "
                f"{b['median_evals_to_95']:g}, means {a['mean_evals_to_95']:.2f} and "
                f"{b['mean_evals_to_95']:.2f}).")
    if sig:
        return (f"**The cost model alone beats the trained agents on replay**: the prior's "
                f"ranking needs fewer measurements on {tp['a_more']} problems, the trained "
                f"agents with the prior on {tp['a_fewer']} (sign test p = "
                f"{tp['sign_test_p']:.2g}; medians {a['median_evals_to_95']:g} and "
                f"{b['median_evals_to_95']:g}, means {a['mean_evals_to_95']:.2f} and "
                f"{b['mean_evals_to_95']:.2f}).")
    p = "-" if tp["sign_test_p"] is None else f"{tp['sign_test_p']:.2g}"
    return (f"**Learning does not beat the cost model alone on replay**: the trained agents with "
            f"the prior need fewer measurements than the prior's ranking alone on "
            f"{tp['a_fewer']} problems, more on {tp['a_more']}, the same on {tp['tied']} "
            f"(sign test p = {p}, not significant; medians {a['median_evals_to_95']:g} and "
            f"{b['median_evals_to_95']:g}, means {a['mean_evals_to_95']:.2f} and "
            f"{b['mean_evals_to_95']:.2f}).")


def verdicts(s: dict) -> str:
    return verdict(s) + _plain(
        s, "trained+prior", "untrained+prior",
        "Training beats the same agents untrained under the same prior",
        "Training does not beat the same agents untrained under the same prior") + _plain(
        s, "trained+prior", "single+prior", "**Four agents beat one agent**",
        "**Four agents do not beat one agent** over the same slots, trained alike")


def markdown(res: dict) -> list[str]:
    s = res["summary"]
    lines = [MARK_BEGIN, "## Does learning beat the cost model alone? (replay, issue 34)", "",
             f"**REPLAY, not live**: {LABEL.removeprefix('replay: ')}. Run {res['date']} by "
             f"`benchmarks/learning_replay.py` (commit {res.get('commit') or '?'}), "
             f"{s['problems']} recorded single-kernel sweeps, budget {res['budget']}, batch 4, "
             f"{res['seeds']} seeds; measurements to 95 % of the sweep's best, median over "
             f"seeds, then over problems ({res['budget'] + 1}: not within the budget). Out of "
             "sample: each problem tuned by the fold policy that never trained on it "
             f"(`{res['policy']}`), and ranked by the analytic model with constants fitted "
             f"without it (`{res['sim_constants']}`, `benchmarks/sim_fold_fit.py`), except the "
             "last row (the shipped constants, fitted with every sweep). Warm peers measure "
             "the model's top 4 picks first (`search/prior_rank.WARM_PICKS`).", "",
             verdicts(s), "",
             "| arm | start | median to 95 % | mean | reached within budget | median seconds "
             "per problem (CPU) |", "|---|---|---|---|---|---|"]
    for a in res["arms"]:
        m = s["arms"][a["name"]]
        lines.append(f"| {a['name']} | {a['what']} | {m['median_evals_to_95']:g} | "
                     f"{m['mean_evals_to_95']:.2f} | {m['reached_within_budget']}/"
                     f"{s['problems']} | {m['median_seconds_per_problem']:.1f} |")
    lines += ["", "Sign tests (two-sided, over the problems where the two differ):", "",
              "| a | b | a fewer | a more | tied | p |", "|---|---|---|---|---|---|"]
    for p in s["pairs"]:
        pv = "-" if p["sign_test_p"] is None else f"{p['sign_test_p']:.2g}"
        lines.append(f"| {p['a']} | {p['b']} | {p['a_fewer']} | {p['a_more']} | {p['tied']} | "
                     f"{pv} |")
    fam_cols = [c for c in ("trained+prior", "untrained+prior", "prior", "optuna warm",
                            "kt GA warm", "random") if c in s["arms"]]
    lines += ["", "By family (medians; trained+prior against prior: fewer/more, p):", "",
              "| family | problems | " + " | ".join(fam_cols) + " | trained vs prior |",
              "|---|---|" + "---|" * (len(fam_cols) + 1)]
    for f, d in s["by_family"].items():
        t = d.get("trained_vs_prior")
        tv = (f"{t['a_fewer']}/{t['a_more']}, p "
              + ("-" if t["sign_test_p"] is None else f"{t['sign_test_p']:.2g}")) if t else "-"
        lines.append(f"| {f} | {d['problems']} | " + " | ".join(f"{d[c]:g}" for c in fam_cols)
                     + f" | {tv} |")
    if res.get("dropped"):
        lines += ["", "Not compared: " + "; ".join(f"{k} ({v})" for k, v in
                                                  sorted(res["dropped"].items())) + "."]
    lines += ["", warm_note(s) + "*prior, in-sample model* against *prior*: what fitting the "
              "model's constants on the problem itself was worth. The live GPU check (issue 34, "
              "item 4) is the next section (`benchmarks/learning_live.py`).", "", MARK_END]
    return lines


def _won(s: dict, a: str, b: str) -> bool:
    p = _pair(s, a, b)
    return bool(p and p["sign_test_p"] is not None and p["sign_test_p"] < 0.05
                and p["a_fewer"] > p["a_more"])


def warm_note(s: dict) -> str:
    """What the warm starts show, said only where the sign tests say it."""
    out = ""
    if _won(s, "optuna warm", "optuna cold") and _won(s, "kt GA warm", "kt GA cold"):
        out += ("Warm-started, Optuna and Kernel Tuner's GA need fewer measurements than cold "
                "(sign tests above): a comparison of the agents with cold peers measures the "
                "model's head start as much as the learning. ")
    if _won(s, "prior", "optuna warm") and _won(s, "prior", "kt GA warm"):
        out += ("The model's ranking alone needs fewer than either warm peer: after the same "
                "first picks, following the model beats their searches. ")
    return out


def dumps(res: dict) -> str:
    """The result as JSON: the summary indented, every run's times on one line each problem
    (a fifth of the size)."""
    head = json.dumps({k: v for k, v in res.items() if k != "runs"}, indent=1)
    runs = ",\n".join(f"  {json.dumps(p)}: {json.dumps(r, separators=(',', ':'))}"
                       for p, r in res["runs"].items())
    return head[:-2] + ',\n "runs": {\n' + runs + "\n }\n}\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--budget", type=int, default=40)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--problems", default="",
                    help="comma-separated names, or prefixes ending in '*' (gemm_*)")
    ap.add_argument("--policy", default=fold_files("h200-replay-1204f-fold{k}.pt"))
    ap.add_argument("--single-policy", default=fold_files("h200-replay-1204f-single-fold{k}.pt"))
    ap.add_argument("--noprior-policy", default=fold_files("h200-replay-1202-fold{k}.pt"),
                    help="policies trained without the model (the 'trained, no prior' arm)")
    ap.add_argument("--sim-constants", default=",".join(
        f"benchmarks/sim_folds/h200-fold{k}.json" for k in range(FOLDS)))
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--markdown-only", action="store_true")
    args = ap.parse_args()
    os.chdir(ROOT)  # the checkpoints and fold files are named relative to the repository
    date = time.strftime("%Y-%m-%d")
    dest = args.out or ROOT / "benchmarks/results" / f"{date}-learning-replay.json"
    if args.markdown_only:
        latest = args.out or sorted((ROOT / "benchmarks/results").glob(
            "*-learning-replay.json"))[-1]
        write_section(ROOT / "BENCHMARKS.md", MARK_BEGIN, MARK_END,
                      markdown(json.loads(latest.read_text())))
        return
    for spec in (args.policy, args.single_policy, args.noprior_policy, args.sim_constants):
        for f in spec.split(","):
            if not (ROOT / f).exists():
                raise SystemExit(f"{f}: no such file")
    arm_list = arms(args.policy, args.single_policy, args.noprior_policy, args.sim_constants)
    names = problem_names(args.problems)
    partial = dest.with_suffix(".partial.jsonl")
    rows = [json.loads(l) for l in partial.read_text().splitlines()] if partial.exists() else []
    done = {r["problem"] for r in rows}
    todo = [n for n in names if n not in done]
    print(f"{LABEL}\n{len(names)} problems ({len(done)} already done), {len(arm_list)} arms, "
          f"{args.seeds} seeds, budget {args.budget}, {args.jobs} processes", flush=True)
    t0 = time.time()
    with ProcessPoolExecutor(args.jobs) as pool, partial.open("a") as log:
        futures = {pool.submit(run_problem, n, arm_list, args.seeds, args.budget,
                               args.sim_constants): n for n in todo}
        for k, fut in enumerate(as_completed(futures), 1):
            row = fut.result()
            rows.append(row)
            log.write(json.dumps(row) + "\n")
            log.flush()
            spent = time.time() - t0
            eta = spent / k * (len(todo) - k)
            note = row.get("skipped") or ", ".join(
                f"{a} {statistics.median(evals(t, row['best_ms'], args.budget) for t in ts):g}"
                for a, ts in list(row["runs"].items())[:3])
            print(f"[{k}/{len(todo)}] {row['problem']}: {note} ({spent:.0f} s, about "
                  f"{eta:.0f} s left)", flush=True)
    order = {n: i for i, n in enumerate(names)}
    rows.sort(key=lambda r: order.get(r["problem"], 0))
    from cuda_agent.emit import git_commit

    res = {"label": LABEL, "device": "replay", "date": date, "commit": git_commit(),
           "budget": args.budget, "seeds": args.seeds, "batch": 4,
           "policy": args.policy, "single_policy": args.single_policy,
           "noprior_policy": args.noprior_policy, "sim_constants": args.sim_constants,
           "arms": [a.__dict__ for a in arm_list],
           "dropped": {r["problem"]: r.get("skipped") or "; ".join(r["in_sample"])
                       for r in rows if r.get("skipped") or r.get("in_sample")},
           "summary": summarize(rows, arm_list, args.budget),
           "seconds": round(time.time() - t0),
           "runs": {r["problem"]: r["runs"] for r in rows if "runs" in r}}
    dest.write_text(dumps(res))
    if args.out is None:
        write_section(ROOT / "BENCHMARKS.md", MARK_BEGIN, MARK_END, markdown(res))
    # the rows stay beside the result (not committed): a later run with more problems or
    # another --markdown-only reads them again
    print(verdicts(res["summary"]))
    print(f"wrote {dest}")


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
