"""Four agents against one, over several training runs: does the split into agents help?

    python -m benchmarks.agents_seeds [--train-seeds 0,1,2] [--iterations 100] [--seeds 5]

`agents_replay.py` trains each variant once, so its multi-against-single comparison is one
training run of each. Here the multi-agent and the single-agent policies are trained with the
same settings on the same replayed H200 sweeps for each training seed, then compared frozen
(first 3 proposals ranked, then sampled) on the same held-out operators, 5 evaluation seeds
each. What is reported: per training seed, each policy's median over the held-out operators of
the measurements to 95 % of the best recorded kernel; and, over all (training seed, operator)
pairs, how often each side needs fewer. CPU only (replay serves real GPU measurements).
Writes benchmarks/results/<date>-agents-seeds.json and its section of BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

from scipy.stats import binomtest

from benchmarks.agents_replay import DATA, HOLDOUT
from benchmarks.sections import write_section
from cuda_agent.agents.evaluate import Contender, compare
from cuda_agent.agents.train import TrainSettings, Trainer
from cuda_agent.runner.replay import ReplayDevice

ROOT = Path(__file__).resolve().parents[1]

MARK_BEGIN, MARK_END = "<!-- agents-seeds:begin -->", "<!-- agents-seeds:end -->"
RANKED = 3


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--train-seeds", default="0,1,2")
    ap.add_argument("--iterations", type=int, default=100)
    ap.add_argument("--seeds", type=int, default=5, help="evaluation seeds per operator")
    ap.add_argument("--work", type=Path, default=Path("/tmp/agents-seeds"))
    args = ap.parse_args()
    train_seeds = [int(x) for x in args.train_seeds.split(",") if x.strip()]
    device = ReplayDevice(root=DATA)
    contenders, train_rows = [], []
    for seed in train_seeds:
        for agents in ("multi", "single"):
            s = TrainSettings.of(suite=str(ROOT / "benchmarks/problems"), holdout=HOLDOUT,
                              device="replay", replay_root=str(DATA),
                              iterations=args.iterations, episodes=4, steps=4, batch=8,
                              seed=seed, agents=agents)
            out = args.work / f"{agents}-{seed}"
            t0 = time.time()
            tr = Trainer(replace(s, out=str(out)), device=device)
            try:
                curves = tr.train()
            finally:
                tr.close()
            train_rows.append({"agents": agents, "train_seed": seed,
                               "measurements": curves[-1]["measurements"],
                               "seconds": time.time() - t0})
            print(f"trained {agents} seed {seed} in {time.time() - t0:.0f} s", flush=True)
            contenders.append(Contender(f"{agents} {seed}", "marl", str(out / "policy.pt"),
                                        online=False, ranked=RANKED))
    contenders.append(Contender("random", "random"))
    res = compare([ROOT / "benchmarks/problems" / f"{h}.py" for h in HOLDOUT], contenders,
                  device, seeds=args.seeds)
    cell = {(r["problem"], r["contender"]): r["median_evals_to_95"] for r in res.rows}
    problems = list(dict.fromkeys(r["problem"] for r in res.rows))
    per_seed = {s: {a: res.median(f"{a} {s}") for a in ("multi", "single")}
                for s in train_seeds}
    multi_fewer = sum(cell[(p, f"multi {s}")] < cell[(p, f"single {s}")]
                      for s in train_seeds for p in problems)
    single_fewer = sum(cell[(p, f"single {s}")] < cell[(p, f"multi {s}")]
                       for s in train_seeds for p in problems)
    from cuda_agent.emit import git_commit

    out = {"date": time.strftime("%Y-%m-%d"), "commit": git_commit(), "holdout": HOLDOUT,
           "iterations": args.iterations,
           "train_seeds": train_seeds, "seeds": args.seeds, "ranked": RANKED,
           "train": train_rows, "rows": res.rows, "per_seed_median": per_seed,
           "random_median": res.median("random"),
           "pairs": {"multi_fewer": multi_fewer, "single_fewer": single_fewer,
                     "ties": len(train_seeds) * len(problems) - multi_fewer - single_fewer}}
    path = ROOT / "benchmarks" / "results" / f"{out['date']}-agents-seeds.json"
    path.write_text(json.dumps(out, indent=2) + "\n")
    write_markdown(out, problems, cell)
    print(json.dumps({"per_seed_median": per_seed, "pairs": out["pairs"]}, indent=1))
    print(f"wrote {path}")


def write_markdown(res: dict, problems: list[str], cell: dict) -> None:
    seeds = res["train_seeds"]
    lines = [MARK_BEGIN, "## Four agents against one, over training runs (issue 3)", "",
             f"Run {res['date']} on a CPU by `benchmarks/agents_seeds.py` (commit "
             f"{res.get('commit', '?')}), replaying the H200 "
             "sweeps: the multi-agent and the single-agent policy trained with the same settings "
             f"({res['iterations']} iterations, the same {len(problems)} operators held out as "
             "above) for each training seed, compared frozen (first "
             f"{res['ranked']} proposals ranked, then sampled), median over {res['seeds']} "
             "evaluation seeds of the measurements to 95 % of the best recorded kernel.", "",
             "| policy | " + " | ".join(problems) + " | median |",
             "|---|" + "---|" * (len(problems) + 1)]
    for s in seeds:
        for a in ("multi", "single"):
            name = f"{a} {s}"
            lines.append(f"| {a}, training seed {s} | " +
                         " | ".join(f"{cell[(p, name)]:g}" for p in problems) +
                         f" | **{res['per_seed_median'][s][a]:g}** |")
    lines.append("| random | " + " | ".join(f"{cell[(p, 'random')]:g}" for p in problems) +
                 f" | **{res['random_median']:g}** |")
    multi = [res["per_seed_median"][s]["multi"] for s in seeds]
    single = [res["per_seed_median"][s]["single"] for s in seeds]
    pr = res["pairs"]
    m, s1 = statistics.median(multi), statistics.median(single)
    if m < s1 and pr["multi_fewer"] > pr["single_fewer"]:
        verdict = "the four agents need fewer measurements"
    elif m > s1 and pr["single_fewer"] > pr["multi_fewer"]:
        verdict = "the four agents need more measurements"
    else:  # the two summaries disagree: no direction is shown
        verdict = "neither needs consistently fewer measurements"
    # how firm the per-pair count is: a two-sided sign test on the untied pairs
    untied = pr["multi_fewer"] + pr["single_fewer"]
    p_sign = binomtest(pr["multi_fewer"], untied).pvalue if untied else 1.0
    lines += ["", f"Median over the training seeds of the per-seed medians: multi "
              f"{statistics.median(multi):g} (runs: {', '.join(f'{v:g}' for v in multi)}), "
              f"single {statistics.median(single):g} (runs: "
              f"{', '.join(f'{v:g}' for v in single)}); random search "
              f"{res['random_median']:g}. Over the {len(seeds) * len(problems)} (training seed, "
              f"operator) pairs the multi-agent policy needs fewer measurements in "
              f"{pr['multi_fewer']}, the single agent in {pr['single_fewer']}, tied in "
              f"{pr['ties']}: on this evidence {verdict}"
              + (" than one agent over the same slots" if "agents" in verdict else "")
              + f" (sign test on the {untied} untied pairs: p = {p_sign:.2f}"
              + ("; not significant: a tendency, not a demonstration)." if p_sign >= 0.05
                 else ")."),
              MARK_END]
    write_section(ROOT / "BENCHMARKS.md", MARK_BEGIN, MARK_END, lines)


def rewrite(path: Path) -> None:
    """The section again from a run's JSON (no training)."""
    res = json.loads(path.read_text())
    res["per_seed_median"] = {int(k): v for k, v in res["per_seed_median"].items()}
    cell = {(r["problem"], r["contender"]): r["median_evals_to_95"] for r in res["rows"]}
    write_markdown(res, list(dict.fromkeys(r["problem"] for r in res["rows"])), cell)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--rewrite":
        rewrite(Path(sys.argv[2]))
    else:
        main()
