"""Four agents against one on every recorded problem, cross-fitted (issue 3).

    P=benchmarks/policies
    python -m benchmarks.fold_policies --agents single      # the single-agent fold policies
    cuda-agent bench --suite benchmarks/problems --device replay --budget 40 --seeds 2 \
        --strategies marl --policy $P/h200-replay-single-fold0.pt,$P/h200-replay-single-fold1.pt \
        --out benchmarks/results/2026-11-30-bench-replay-single-folds
    python -m benchmarks.agents_folds benchmarks/results/2026-11-30-bench-replay-folds \
        benchmarks/results/2026-11-30-bench-replay-single-folds

`agents_seeds.py` compares the two on the 12 operators one policy held out, so its sign test
has few pairs. Here both variants are trained per fold with the same settings and folds
(`fold_policies.py`), and each recorded problem is tuned by the variant's policy that never
trained on it, in the same replay bench settings (budget, seeds, online fine-tuning): every
problem is a pair. Reported: each variant's median measurements to 95 % of the sweep's best,
how often each needs fewer, and a two-sided sign test on the untied pairs. Writes
benchmarks/results/<date>-agents-folds.json and its section of BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from scipy.stats import binomtest

from benchmarks.sections import write_section
from cuda_agent.bench import BenchResult, evals_by_problem

ROOT = Path(__file__).resolve().parents[1]


def load(run_dir: Path) -> BenchResult:
    return BenchResult.from_json(json.loads((run_dir / "bench.json").read_text()))


def evals_to(result: BenchResult, strategy: str, fraction: float) -> dict[str, float]:
    """Per problem: median over seeds of `strategy`'s measurements to `fraction` of the best
    recorded (censored at budget + 1), as the bench counts them at 95 %."""
    return evals_by_problem(result, [r for r in result.runs if r.strategy == strategy],
                            fraction)


def compare(multi: dict[str, float], single: dict[str, float]) -> dict:
    """Pairs over the problems both variants were run on."""
    common = sorted(set(multi) & set(single))
    fewer_multi = [p for p in common if multi[p] < single[p]]
    fewer_single = [p for p in common if single[p] < multi[p]]
    untied = len(fewer_multi) + len(fewer_single)
    return {
        "problems": len(common),
        "median_multi": statistics.median(multi[p] for p in common) if common else None,
        "median_single": statistics.median(single[p] for p in common) if common else None,
        "mean_multi": statistics.mean(multi[p] for p in common) if common else None,
        "mean_single": statistics.mean(single[p] for p in common) if common else None,
        "multi_fewer": len(fewer_multi), "single_fewer": len(fewer_single),
        "tied": len(common) - untied,
        "sign_test_p": binomtest(len(fewer_multi), untied).pvalue if untied else None,
        "per_problem": {p: [multi[p], single[p]] for p in common},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("multi_run", type=Path, help="replay bench with the multi-agent folds")
    ap.add_argument("single_run", type=Path, help="replay bench with the single-agent folds")
    ap.add_argument("--md", type=Path, default=ROOT / "BENCHMARKS.md")
    args = ap.parse_args()
    multi, single = load(args.multi_run), load(args.single_run)
    for r, name in ((multi, "multi"), (single, "single")):
        if r.trained_on:
            raise SystemExit(f"{name} run: problems every policy trained on "
                             f"({', '.join(r.trained_on)}); expected cross-fitted folds")
    for k in ("budget", "seeds"):
        if getattr(multi.settings, k) != getattr(single.settings, k):
            raise SystemExit(f"the runs differ in {k}")
    multi_e95, single_e95 = evals_to(multi, "marl", 0.95), evals_to(single, "marl", 0.95)
    overall = compare(multi_e95, single_e95)
    family = {p: f["family"] for p, f in multi.problems.items()}  # the plan's family
    by_family = {f: compare({p: v for p, v in multi_e95.items() if family[p] == f},
                            {p: v for p, v in single_e95.items() if family[p] == f})
                 for f in sorted({family[p] for p in overall["per_problem"]})}
    strict = compare(evals_to(multi, "marl", 0.99), evals_to(single, "marl", 0.99))
    random_e95 = evals_to(multi, "random", 0.95)
    out = {"date": time.strftime("%Y-%m-%d"), "multi_run": str(args.multi_run),
           "single_run": str(args.single_run), "budget": multi.settings.run.budget,
           "seeds": multi.settings.seeds, "overall": overall,
           "to_99_percent": {k: v for k, v in strict.items() if k != "per_problem"},
           "random_median": statistics.median(random_e95[p] for p in overall["per_problem"])
           if random_e95 else None,
           "by_family": {f: {k: v for k, v in c.items() if k != "per_problem"}
                         for f, c in by_family.items()}}
    dest = ROOT / "benchmarks/results" / f"{out['date']}-agents-folds.json"
    dest.write_text(json.dumps(out, indent=1) + "\n")

    o = overall
    p_text = f"{o['sign_test_p']:.2g}" if o["sign_test_p"] is not None else "-"
    verdict = ("significant at the 5 % level" if o["sign_test_p"] is not None
               and o["sign_test_p"] < 0.05 else "not significant")
    lines = [
        "<!-- agents-folds:begin -->",
        "## Four agents against one on every recorded problem, cross-fitted (issue 3)",
        "",
        f"Run {out['date']} on a CPU by `benchmarks/agents_folds.py` (replay of the H200 "
        "sweeps): the multi-agent and the single-agent policies trained per fold with the same "
        "settings and folds (`benchmarks/fold_policies.py [--agents single]`), each problem "
        "tuned by the variant's policy that never trained on it, in the same replay bench "
        f"(`{args.multi_run.as_posix()}`, `{args.single_run.as_posix()}`: budget "
        f"{out['budget']}, {out['seeds']} seeds, online fine-tuning, the first 3 proposals "
        "ranked); median over seeds of the measurements to 95 % of the sweep's best, a search "
        f"that never got there counted as {out['budget'] + 1}.",
        "",
        f"Over **{o['problems']} problems**: median {o['median_multi']:g} measurements for the "
        f"four agents, {o['median_single']:g} for one agent (means {o['mean_multi']:.1f} and "
        f"{o['mean_single']:.1f}; random search's median "
        f"{out['random_median'] if out['random_median'] is not None else '-'}). The four agents "
        f"need fewer on {o['multi_fewer']}, one agent on {o['single_fewer']}, tied "
        f"{o['tied']}: sign test on the untied pairs p = {p_text} ({verdict}). Most ties are "
        "problems both find on their first proposals; to 99 % of the best (a stricter cutoff, "
        f"the same runs): medians {strict['median_multi']:g} and {strict['median_single']:g}, "
        f"four agents fewer on {strict['multi_fewer']}, one agent on {strict['single_fewer']}, "
        f"tied {strict['tied']}, p = "
        + (f"{strict['sign_test_p']:.2g}" if strict["sign_test_p"] is not None else "-") + ".",
        "",
        "| family | problems | median, four agents | median, one agent | four fewer | one fewer "
        "| tied | sign test p |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for f, c in by_family.items():
        lines.append(f"| {f} | {c['problems']} | {c['median_multi']:g} | {c['median_single']:g} "
                     f"| {c['multi_fewer']} | {c['single_fewer']} | {c['tied']} | "
                     + (f"{c['sign_test_p']:.2g}" if c["sign_test_p"] is not None else "-")
                     + " |")
    lines.append("<!-- agents-folds:end -->")
    write_section(args.md, "<!-- agents-folds:begin -->", "<!-- agents-folds:end -->", lines)
    print(f"{dest.relative_to(ROOT)}; {args.md}: {o['problems']} problems, multi fewer on "
          f"{o['multi_fewer']}, single on {o['single_fewer']}, p = {p_text}")


if __name__ == "__main__":
    main()
