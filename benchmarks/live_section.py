"""BENCHMARKS.md's live-bench section (issue 5): the merged report of every live bench run on
the H200, with the method stated once above it. Rebuilds the merge from the run directories
first (`cuda-agent report RUN... --out MERGED`), so the section is never pasted by hand.

    python benchmarks/live_section.py            # the committed runs, into BENCHMARKS.md
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from sections import bench_section  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
# each live bench set: a folder of runs (one per problem, or one per device-tool call)
SETS = ("2026-11-30-h200-bench-live", "2026-11-30-h200-bench-live-s10",
        "2026-11-30-h200-bench-live-s11")
MERGED = RESULTS / "2026-11-30-h200-bench-live-merged"

INTRO = """\
## cuda-agent against the peers, live on the H200 (issue 5)

`cuda-agent bench --suite <problems> --device cuda --budget 40 --seeds 1 --policy
benchmarks/policies/h200-replay-multi.pt` through the device tool (`benchmarks/gpu_suite.py
--parts bench`; calls of 10 minutes, so the suite is benched a few problems per call, then merged
by `benchmarks/live_section.py` with `cuda-agent report <runs> --out {merged}`). Runs: {sets}.
Every strategy searches the problem's whole template space on the GPU at 40 measurements: Optuna's
TPE and Kernel Tuner's strategies through their own APIs (Kernel Tuner asks, cuda-agent's runner
measures and verifies, `search/kernel_tuner_sim.run_live`); torch eager, torch.compile (default,
max-autotune, and max-autotune without CUDA graphs) timed by the same worker in the same run; the
optimum is the best time of the run, the sweep's recorded best configurations measured again
among them. One seed per problem (device time): the per-problem counts are single searches. The
agents' policy trained on the replayed sweeps of most of these operators: its rows count only
the ones it never saw, and the column 'never trained on' gives every strategy on those same
problems. Benched so far: {done} of the suite's {total} problems. Not yet: the rest, mostly GEMM,
attention and convolution (their searches compile for longer than a call leaves a problem;
problems given up are listed at the end) and the fused chains (the multi-kernel programs among
them are not compared: Kernel Tuner tunes one kernel's parameters).

max-autotune (which turns on CUDA graphs) is slower than torch.compile's default mode on most
operators here ({max_ratio}); without CUDA graphs it is as fast as the default mode in the median
({nocg_ratio}; timed since commit 7942060). So the loss is CUDA graphs': their replay copies each
fresh input the protocol feeds into the graph's static buffers, which a memory-bound operator pays
in full (the likely mechanism; not profiled).
"""


def ratio_range(problems: dict, key: str) -> str:
    r = sorted(f[key] / f["compile_ms"] for f in problems.values()
               if f.get(key) and f.get("compile_ms"))
    if not r:
        return "not measured"
    return f"median {r[len(r) // 2]:.2f}x the default's time over {len(r)} problems, " \
           f"{r[0]:.2f}x to {r[-1]:.2f}x"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--md", type=Path, default=ROOT / "BENCHMARKS.md")
    args = ap.parse_args()
    runs = []
    for name in SETS:
        d = RESULTS / name
        # a set is either one run per problem folder or one run per call (runN/)
        runs += sorted(p.parent for p in d.glob("*/bench.json"))
    cli = [sys.executable, "-c", "from cuda_agent.cli import main; main()"]
    subprocess.run(cli + ["report", *map(str, runs), "--out", str(MERGED)], check=True,
                   stdout=subprocess.DEVNULL)
    merged = json.loads((MERGED / "bench.json").read_text())
    problems = merged["problems"]
    suite = list((ROOT / "benchmarks" / "problems").glob("*.py"))
    rel = MERGED.relative_to(ROOT)
    intro = INTRO.format(merged=rel, sets=", ".join(f"`benchmarks/results/{s}/`" for s in SETS),
                         done=sum(1 for p in suite if p.stem in problems), total=len(suite),
                         max_ratio=ratio_range(problems, "compile_max_ms"),
                         nocg_ratio=ratio_range(problems, "compile_max_nocg_ms"))
    bench_section(args.md, "bench-live", intro, MERGED, ROOT)
    print(f"{args.md}: live bench section, {len(problems)} problems from {len(runs)} runs")


if __name__ == "__main__":
    main()
