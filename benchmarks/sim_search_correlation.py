"""How well the simulator ranks one template's configurations that only searches measured (the
sweeps predate it): Spearman correlation between `sim` and the H200 search trials, per run.

    python -m benchmarks.sim_search_correlation [--template gemm_tc] [SEARCH.json ...]

Every verified trial of the template in the given `gpu_suite.py --parts search` files (default:
every benchmarks/results/*/search.json) is compiled (NVRTC: the compiler's registers and
spills, as the `sim` device sees them), simulated, and ranked against its measured time.
Searches sample near their best, so the spread is narrower than a sweep's and the figure a
harder test. The result goes to benchmarks/results/<date>-sim-search-correlation.json and its
section of BENCHMARKS.md. Say which constants were fitted on these same trials: those figures
are in-sample.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from scipy.stats import spearmanr

from benchmarks.sections import write_section

from cuda_agent.build.builder import Builder, BuildInput
from cuda_agent.ir.planning import make_plan
from cuda_agent.problem import load_problem
from cuda_agent.costmodel.model import simulate
from cuda_agent.space.slots import Target, expand_short
from cuda_agent.space.space import Space

ROOT = Path(__file__).resolve().parents[1]

MARK_BEGIN, MARK_END = "<!-- sim-search-correlation:begin -->", "<!-- sim-search-correlation:end -->"


def correlate_run(run: dict, template: str, builder: Builder) -> dict | None:
    """Spearman of one search run's verified trials of `template` (None below 5 trials)."""
    if not any(f"scope={template}" in short for short, _ in run.get("trials", [])):
        return None
    path = ROOT / "benchmarks/problems" / f"{run['problem']}.py"
    plan = make_plan(load_problem(path).graph())
    target = Target()
    try:
        space = Space.for_plan(plan, target)
    except Exception:  # noqa: BLE001 - a multi-kernel program: its stages are not scored here
        return None
    names = [s.name for s in space.slots]
    configs, real = [], []
    for short, t in run.get("trials", []):  # older runs kept only their best
        if not isinstance(t, float) or f"scope={template}" not in short:
            continue
        cfg = space.upgrade(expand_short(short, names))
        if cfg is not None:
            configs.append(cfg)
            real.append(t)
    if len(configs) < 5:
        return None
    rendered = [space.render(c) for c in configs]
    builds = builder.build([BuildInput(r.source, target.arch) for r in rendered])
    sim = [simulate(plan, r, b.resources, target).time_ms for r, b in zip(rendered, builds)]
    best_real = min(range(len(real)), key=real.__getitem__)
    best_sim = min(range(len(sim)), key=sim.__getitem__)
    return {"problem": run["problem"], "configs": len(sim),
            "spearman": float(spearmanr(sim, real).statistic),
            "sim_pick_vs_best": real[best_sim] / real[best_real],
            "spread": max(real) / min(real)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--template", default="gemm_tc")
    ap.add_argument("searches", type=Path, nargs="*")
    args = ap.parse_args()
    files = args.searches or sorted((ROOT / "benchmarks/results").glob("*/search.json"))
    rows = []
    with Builder() as builder:
        for f in files:
            for run in json.loads(f.read_text()):
                r = correlate_run(run, args.template, builder)
                if r is None:
                    continue
                r["run"] = f.parent.name
                rows.append(r)
                print(f"{r['run']:24s} {r['problem']:36s} rho {r['spearman']:+.2f} (n "
                      f"{r['configs']}, spread {r['spread']:.2f}x)", flush=True)
    if not rows:
        raise SystemExit(f"no search trials of {args.template} with 5 or more configurations")
    median = statistics.median(r["spearman"] for r in rows)
    date = time.strftime("%Y-%m-%d")
    out = {"date": date, "template": args.template, "rows": rows, "median_spearman": median,
           "note": "constants of the gemm_tc model (sim_gemm.py) were fitted on these trials: "
                   "in-sample"}
    (ROOT / "benchmarks/results" / f"{date}-sim-search-correlation.json").write_text(
        json.dumps(out, indent=2) + "\n")
    lines = [MARK_BEGIN, f"## How well the simulator ranks `{args.template}` (search trials)", "",
             f"Run {date} by `benchmarks/sim_search_correlation.py`. The tensor-core template "
             "came after the suite's GEMM sweeps, so its first GPU data were the searches' "
             "trials (each run a genetic search near its best: narrow spreads, a hard ranking "
             "test). The model's first constants for it (`MMA_SYNC_TF32_FLOPS`, "
             "`TC_OVERLAP_SHARPNESS`, `SLICE_SYNC_CLK` in `cuda_agent/costmodel/gemm.py`) were "
             "set from these same trials, so the figures are in-sample; "
             "`TC_TILE_FILL_BW` and `TC_LONE_BLOCK_OVERLAP` were refitted on 2026-12-03 on the "
             "live runs and the convolution sweeps (`benchmarks/sim_tc_fit.py`; the median "
             "here was +0.65 over the 63 runs of 2026-11-30 with the model before). Sweeps of "
             "shapes outside the suite test the model out of sample (`sim_validation.py`, its "
             "section below).", "",
             f"Median Spearman over {len(rows)} runs: **{median:+.2f}**.", "",
             "| run | problem | configs | spread | Spearman | sim's pick |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {r['run']} | {r['problem']} | {r['configs']} | {r['spread']:.2f}x | "
              f"{r['spearman']:+.2f} | {r['sim_pick_vs_best']:.2f}x |" for r in rows]
    lines += ["", MARK_END]
    write_section(ROOT / "BENCHMARKS.md", MARK_BEGIN, MARK_END, lines)
    print(f"median Spearman {median:+.2f} over {len(rows)} runs")


if __name__ == "__main__":
    main()
