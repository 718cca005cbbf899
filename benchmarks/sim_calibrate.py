"""Fit the simulator's constants to recorded GPU sweeps, and check the fit on sweeps it did not see.

    python -m benchmarks.sim_calibrate [--rounds 4]

The objective is rank agreement (mean Spearman between simulated and measured times over the
configurations of each problem), which is what a search needs from a model. Problems are split
in two halves by name: constants are fitted on one and judged on the other. The fitted constants
are written to cuda_agent/costmodel/sim_constants_h200.json, which the `sim` device loads by
default, and the before/after figures to benchmarks/results/<date>-sim-calibration.json and BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import asdict, fields
from pathlib import Path

from scipy.stats import spearmanr

from benchmarks.sections import write_section
from benchmarks.sim_cases import load_case, simulated
from cuda_agent.build.builder import Builder
from cuda_agent.costmodel.model import SHIPPED_CONSTANTS, SimConstants
from cuda_agent.space.slots import Target

ROOT = Path(__file__).resolve().parents[1]

FIT = ("dram_peak_fraction", "dram_latency_ns", "saturation_sharpness", "gather_lines_per_request",
       "issue_rate_scale", "transcendental_instr", "addr_instr", "loop_instr", "barrier_cycles",
       "shfl_cycles", "block_launch_cycles", "launch_overhead_us", "smem_latency_cycles",
       "sync_overlap_exponent", "alu_latency_warps", "l1_usable_bytes", "overlap_sharpness",
       "l2_requests_per_clk_per_sm", "stream_hint_l1_retention", "block_dispatch_ns",
       "overlap_warps", "sm_speed_spread", "l1_sector_reuse")
OUT_CONSTANTS = SHIPPED_CONSTANTS  # where the sim device reads them (next to the model)
MARK_BEGIN, MARK_END = "<!-- sim-calibration:begin -->", "<!-- sim-calibration:end -->"


def load_cases(data: Path) -> list[dict]:
    """Per problem: plan, rendered candidates, compile resources and measured times (the same
    cases as sim_correlation.py, multi-kernel programs included)."""
    with Builder() as builder:
        cases = [load_case(path, builder) for path in sorted(data.glob("*.json.gz"))]
    return [c for c in cases if c is not None]


def score(cases: list[dict], constants: SimConstants) -> dict[str, float]:
    target = Target()
    out = {}
    for c in cases:
        sim, real, _ = simulated(c, target, constants)
        rho = spearmanr(sim, real).statistic if len(sim) > 2 else 0.0
        out[c["name"]] = 0.0 if rho != rho else float(rho)  # NaN (constant input) counts as 0
    return out


def fit(cases: list[dict], rounds: int) -> tuple[SimConstants, float]:
    """Coordinate search with multiplicative steps on the constants in FIT."""
    best = SimConstants()
    best_score = statistics.mean(score(cases, best).values())
    for step in [1.6, 1.3, 1.12, 1.05][:rounds]:
        improved = True
        while improved:
            improved = False
            for name in FIT:
                for factor in (step, 1.0 / step):
                    d = asdict(best)
                    d[name] = d[name] * factor
                    cand = SimConstants.from_dict(d)
                    s = statistics.mean(score(cases, cand).values())
                    if s > best_score + 1e-4:
                        best, best_score, improved = cand, s, True
        print(f"step {step}: mean Spearman on the fitting half {best_score:.3f}", flush=True)
    return best, best_score


def by_family(cases: list[dict], scores: dict[str, float]) -> dict[str, float]:
    fams: dict[str, list[float]] = {}
    for c in cases:
        fams.setdefault(c["family"], []).append(scores[c["name"]])
    return {f: statistics.median(v) for f, v in sorted(fams.items())}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", type=Path, default=ROOT / "benchmarks/data/nvidia-h200")
    ap.add_argument("--rounds", type=int, default=4)
    args = ap.parse_args()
    cases = load_cases(args.data)
    fit_half, test_half = cases[0::2], cases[1::2]
    default = SimConstants()
    fitted, _ = fit(fit_half, args.rounds)
    rows = {}
    for label, consts in (("default", default), ("fitted", fitted)):
        s_fit, s_test = score(fit_half, consts), score(test_half, consts)
        rows[label] = {"fit_mean": statistics.mean(s_fit.values()),
                       "held_out_mean": statistics.mean(s_test.values()),
                       "held_out_by_family": by_family(test_half, s_test),
                       "all_by_family": by_family(cases, {**s_fit, **s_test})}
    changed = {f.name: (getattr(default, f.name), getattr(fitted, f.name)) for f in fields(default)
               if getattr(default, f.name) != getattr(fitted, f.name)}
    date = time.strftime("%Y-%m-%d")
    generalizes = rows["fitted"]["held_out_mean"] > rows["default"]["held_out_mean"]
    if generalizes:
        OUT_CONSTANTS.write_text(json.dumps({"fitted_on": [c["name"] for c in fit_half],
                                             "data": str(args.data.relative_to(ROOT)),
                                             "date": date, "constants": asdict(fitted)},
                                            indent=2) + "\n")
    result = {"date": date, "generalizes": generalizes, "fit_half": [c["name"] for c in fit_half],
              "held_out_half": [c["name"] for c in test_half], "scores": rows,
              "changed": changed}
    (ROOT / "benchmarks/results" / f"{date}-sim-calibration.json").write_text(
        json.dumps(result, indent=2) + "\n")
    fams = sorted(rows["default"]["all_by_family"])
    lines = [MARK_BEGIN, "## Simulator calibration", "",
             f"Run {date} on a CPU by `benchmarks/sim_calibrate.py`: the simulator's constants "
             "fitted (coordinate search, objective: mean Spearman rank correlation with the "
             "measured times) on half of the H200 sweeps, judged on the other half. " +
             ("The fitted constants rank the held-out half better, so they ship as "
              "`cuda_agent/costmodel/sim_constants_h200.json`." if generalizes else
              "The fit improves the half it was fitted on but ranks the held-out half worse "
              "(it does not generalize), so the simulator keeps its default constants; a "
              "better-founded model (or more data per problem) is needed before fitting pays."),
             "",
             "| constants | mean Spearman, fitting half | mean Spearman, held-out half | "
             + " | ".join(f"held-out {f}" for f in fams) + " |",
             "|---|---|---|" + "---|" * len(fams)]
    for label in ("default", "fitted"):
        r = rows[label]
        lines.append(f"| {label} | {r['fit_mean']:+.2f} | {r['held_out_mean']:+.2f} | " +
                     " | ".join(f"{r['held_out_by_family'].get(f, float('nan')):+.2f}"
                                for f in fams) + " |")
    lines += ["", "Constants changed: " + ", ".join(
        f"{k} {a:g} -> {b:g}" for k, (a, b) in changed.items()) + ".", "", MARK_END]
    write_section(ROOT / "BENCHMARKS.md", MARK_BEGIN, MARK_END, lines)
    print(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
