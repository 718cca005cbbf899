"""BENCHMARKS.md's section on the cross-fitted replay bench (issues 3 and 5): every recorded
single-kernel problem of the suite, each tuned by the fold policy that never trained on it.

    P=benchmarks/policies; cuda-agent bench --suite benchmarks/problems --device replay \
        --budget 40 --seeds 2 --policy $P/h200-replay-fold0.pt,$P/h200-replay-fold1.pt \
        --out benchmarks/results/2026-11-30-bench-replay-folds
    python -m benchmarks.folds_section benchmarks/results/2026-11-30-bench-replay-folds
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from benchmarks.sections import bench_section

ROOT = Path(__file__).resolve().parents[1]

INTRO = """\
## The agents on every recorded problem, cross-fitted (replay of the H200 sweeps)

A single policy trained on most of the suite leaves few problems it never saw to compare it on
(12 in the held-out replay section, 17 of the 62 benched live). Here the recorded problems are
split in two folds (alternating by name within each family, `benchmarks/fold_policies.py`), one
multi-agent policy is trained on each fold's complement with the settings of
`h200-replay-multi.pt` (100 iterations, training seed 0, 68 problems each), and `cuda-agent bench
--policy fold0.pt,fold1.pt` tunes every problem with the policy that never trained on it (each
problem's `policy` in bench.json). Every strategy searches the same recorded configurations of
each problem ({lo} to {hi} per problem, measured on the H200); Optuna and Kernel Tuner through their
own APIs, Kernel Tuner in its simulation mode. Budget {budget} measurements, {seeds} seeds per
problem and strategy; the optimum is the sweep's best. Kernel Tuner's bayes_opt will not start
on a space smaller than its initial sample (20 configurations): such runs are listed at the end
with its message and count as never reaching 95 %. The times against torch.compile here are the
sweeps' (a sample of each space, recorded with the templates of their day, torch timed under strict
fp32 only: the report's matched columns); the live sections
above measure the current templates against the baselines in the same run. Full page:
`{rel}/report.html`.
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--md", type=Path, default=ROOT / "BENCHMARKS.md")
    args = ap.parse_args()
    data = json.loads((args.run_dir / "bench.json").read_text())
    recorded = [f["recorded"] for f in data["problems"].values()]
    # the run's settings, or beside the bench's own in a bench.json written before them
    run = data["settings"].get("run") or data["settings"]
    intro = INTRO.format(budget=run["budget"], seeds=data["settings"]["seeds"],
                         lo=min(recorded), hi=max(recorded),
                         rel=args.run_dir.resolve().relative_to(ROOT))
    bench_section(args.md, "bench-replay-folds", intro, args.run_dir, ROOT)
    print(f"{args.md}: cross-fitted replay section, {len(data['problems'])} problems")


if __name__ == "__main__":
    main()
