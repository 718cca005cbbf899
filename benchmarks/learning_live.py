"""Learning against the model, live on the GPU (issue 34, item 4): the sign tests of
`learning_replay.py` on live bench runs.

The runs (each `gpu_suite.py` call benches a share of the drawn problems, 2 per family drawn
with seed 1204, 24 in all; torch is not timed: `--bench-no-baselines`; as run on the H100 on
2026-12-06, `benchmarks/results/2026-12-06-h100-learning-live/`):

    P=benchmarks/policies; F=benchmarks/sim_folds
    python -m benchmarks.gpu_suite --parts bench --bench-problems sample:2:1204:K:2 \\
        --bench-strategies marl,marl_untrained,prior,marl_single \\
        --agent-policy $P/h200-replay-1204f-fold0.pt,$P/h200-replay-1204f-fold1.pt \\
        --agent-single-policy \\
            $P/h200-replay-1204f-single-fold0.pt,$P/h200-replay-1204f-single-fold1.pt \\
        --bench-sim-constants $F/h200-fold0.json,$F/h200-fold1.json --bench-budget 24 \\
        --bench-per-problem 50 --bench-no-baselines  # K = 0, 1

Then, on the runs' folders (bench.json each):

    python -m benchmarks.learning_live RUN [RUN ...]

Each problem is tuned by the fold policy that never trained on it and ranked with the model's
constants fitted without it (every problem is held out for one fold). The optimum is the best
time any strategy reached on the problem in the run. Sign tests (two-sided, untied problems):
trained+prior against prior alone, against untrained+prior, and four agents against one.
Writes benchmarks/results/<date>-learning-live.json and the section of BENCHMARKS.md, labelled
live; with fewer than 20 problems compared it says the target (issue 34: at least 20) was not
reached.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from benchmarks.learning_replay import sign
from benchmarks.sections import write_section

ROOT = Path(__file__).resolve().parents[1]

MARK_BEGIN, MARK_END = "<!-- learning-live:begin -->", "<!-- learning-live:end -->"
PAIRS = [("marl", "prior"), ("marl", "marl_untrained"), ("marl", "marl_single"),
         ("marl_untrained", "prior")]
MIN_PROBLEMS = 20


def verdict(pair: dict, enough: bool) -> str:
    """What a pair's sign test says, in words: a beats b only where it needed fewer
    measurements on more problems at p < 0.05, over at least MIN_PROBLEMS problems."""
    p = pair["sign_test_p"]
    if p is None or p >= 0.05:
        return "no significant difference"
    better = pair["a"] if pair["a_fewer"] > pair["a_more"] else pair["b"]
    worse = pair["b"] if better == pair["a"] else pair["a"]
    return (f"{better} needs fewer than {worse} (p < 0.05)"
            + ("" if enough else f"; fewer than {MIN_PROBLEMS} problems: not conclusive"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path)
    args = ap.parse_args()
    from cuda_agent.bench import summarize
    from cuda_agent.report.bench_report import load_run

    per: dict[str, dict[str, float]] = {}
    gpus, policies, budgets, seeds, commits = set(), set(), set(), set(), set()
    skipped: dict[str, str] = {}
    for run in args.runs:
        result = load_run(run)
        if not result.live or result.live != "cuda":
            raise SystemExit(f"{run}: not a live GPU run (device {result.live or 'replay'})")
        budgets.add(result.settings.run.budget)
        seeds.add(result.settings.seeds)
        commits.add(str(result.provenance.get("commit", "unknown")))
        skipped.update(result.skipped)
        s = summarize(result)
        for p, facts in result.problems.items():
            gpus.add(facts.get("gpu"))
            policies.add(facts.get("policy"))
            row = {st: s[st]["evals_to_95"].get(p) for st in s}
            if all(v is not None for v in row.values()):
                per[p] = row
    arms = sorted({a for r in per.values() for a in r})
    pairs = [sign(per, a, b) for a, b in PAIRS if a in arms and b in arms]
    res = {"device": "cuda (live)", "gpu": sorted(g for g in gpus if g),
           "date": time.strftime("%Y-%m-%d"), "runs": [str(r) for r in args.runs],
           "budget": sorted(budgets), "seeds": sorted(seeds), "commits": sorted(commits),
           "not_compared": skipped,
           "problems": len(per), "enough": len(per) >= MIN_PROBLEMS,
           "median_evals_to_95": {a: statistics.median(r[a] for r in per.values())
                                  for a in arms} if per else {},
           "pairs": pairs, "per_problem": per}
    dest = ROOT / "benchmarks/results" / f"{res['date']}-learning-live.json"
    dest.write_text(json.dumps(res, indent=1) + "\n")
    lines = [MARK_BEGIN, "## Learning against the model, live on the GPU (issue 34)", "",
             f"**LIVE** on {', '.join(res['gpu']) or 'the GPU'}: every candidate compiled, "
             f"verified and timed in the runs `{'`, `'.join(res['runs'])}` (budget "
             f"{'/'.join(map(str, res['budget']))}, seeds {'/'.join(map(str, res['seeds']))}, "
             f"commit {'/'.join(res['commits'])}); "
             "optimum: the best time any strategy reached; a strategy that never came within "
             "5 % of it counts budget + 1. "
             f"{res['problems']} problems compared"
             + ("" if res["enough"] else f" (fewer than the {MIN_PROBLEMS} issue 34 asks "
                                         "for: not conclusive)") + ".", "",
             "| strategy | median measurements to 95 % |", "|---|---|"]
    lines += [f"| {a} | {m:g} |" for a, m in res["median_evals_to_95"].items()]
    lines += ["", "| a | b | a fewer | a more | tied | sign test p | verdict |",
              "|---|---|---|---|---|---|---|"]
    for p in pairs:
        pv = "-" if p["sign_test_p"] is None else f"{p['sign_test_p']:.2g}"
        lines.append(f"| {p['a']} | {p['b']} | {p['a_fewer']} | {p['a_more']} | {p['tied']} | "
                     f"{pv} | {verdict(p, res['enough'])} |")
    if skipped:
        lines += ["", "Not compared: " + "; ".join(f"{k} ({v})" for k, v in
                                                  sorted(skipped.items())) + "."]
    lines += ["", "<details><summary>Measurements to 95 %, per problem</summary>", "",
              "| problem | " + " | ".join(arms) + " |", "|---|" + "---|" * len(arms)]
    lines += [f"| {p} | " + " | ".join(f"{r[a]:g}" for a in arms) + " |"
              for p, r in sorted(per.items())]
    lines += ["", "</details>", "", MARK_END]
    write_section(ROOT / "BENCHMARKS.md", MARK_BEGIN, MARK_END, lines)
    print(json.dumps({k: v for k, v in res.items() if k != "per_problem"}, indent=1))


if __name__ == "__main__":
    main()
