"""The simulator on problems it was never fitted on: Spearman between `sim` and H200 sweeps of
the held-out shapes in benchmarks/validation/problems, with the model as shipped and as it was
before the changes of 2026-12-03 (tensor-core refit, pooling rows' shared sectors).

    python -m benchmarks.sim_validation

The shapes (two conv+pool programs, convolutions, GEMMs, poolings) are not in the suite, so
no constant of the model was set on their records. Their sweeps are
measured by `gpu_suite.py --parts sweeps --problems benchmarks/validation/problems` and kept
apart from the suite's (benchmarks/validation/data/). *before*: `TC_LONE_BLOCK_OVERLAP` 1.0,
`TC_TILE_FILL_BW` 2.5e12, no waits on spilled values (`sim_gemm.spill_stall_s`) and no
sharing of sectors among a pooling row's loads (`l1_inflight_merge` 0). Writes
benchmarks/results/<date>-sim-validation.json and its section of BENCHMARKS.md.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import time
from pathlib import Path
from unittest import mock

from scipy.stats import spearmanr

from benchmarks.sections import write_section
from benchmarks.sim_cases import load_case, simulated
from cuda_agent.build.builder import Builder
from cuda_agent.costmodel import gemm as sim_gemm
from cuda_agent.costmodel.model import SimConstants
from cuda_agent.space.slots import Target

ROOT = Path(__file__).resolve().parents[1]

MARK_BEGIN, MARK_END = "<!-- sim-validation:begin -->", "<!-- sim-validation:end -->"
VALIDATION = ROOT / "benchmarks" / "validation"
BEFORE = {"TC_LONE_BLOCK_OVERLAP": 1.0, "TC_TILE_FILL_BW": 2.5e12}
BEFORE_CONSTANTS = {"l1_inflight_merge": 0.0}


def _rank(case: dict, target: Target, constants: SimConstants | None = None
          ) -> tuple[float, float]:
    """(Spearman, the measured time of the model's pick over the measured best)."""
    sim, real, _ = simulated(case, target, constants)
    pick = min(range(len(sim)), key=sim.__getitem__)
    return float(spearmanr(sim, real).statistic), real[pick] / min(real)


def score(case: dict, target: Target) -> dict:
    now, now_pick = _rank(case, target)
    with mock.patch.multiple(sim_gemm, **BEFORE), \
            mock.patch.object(sim_gemm, "spill_stall_s", lambda *a, **k: 0.0):
        before, before_pick = _rank(case, target,
                                    dataclasses.replace(SimConstants(), **BEFORE_CONSTANTS))
    tc = sum(1 for rd, _, _ in case["items"]
             if any(dict(p.facts).get("mma") for _, p in rd.parts)
             or dict(rd.facts).get("mma"))
    return {"problem": case["name"], "family": case["family"], "configs": len(case["items"]),
            "tensor_core_configs": tc, "spearman": now, "spearman_before": before,
            "sim_pick_vs_best": now_pick, "sim_pick_vs_best_before": before_pick}


def markdown(out: dict) -> list[str]:
    lines = [MARK_BEGIN, "## The simulator on held-out shapes", "",
             f"Run {out['date']} on a CPU by `benchmarks/sim_validation.py`: H200 sweeps "
             "(up to 150 configurations drawn from each whole space, tensor-core, SIMT and "
             f"library templates alike) of {len(out['rows'])} shapes outside the suite "
             "(`benchmarks/validation/problems`), measured after the simulator's changes of "
             "2026-12-03 were made and never used to set a constant (the first four were "
             "swept before the pooling model's `l1_inflight_merge` was chosen and looked at "
             "while choosing it; the others after). *before*: the model before those "
             "changes (the tensor-core template's lone-block overlap, fill rate and spill "
             "waits; the pooling rows' in-flight sector sharing).", "",
             "| problem | family | configs (tensor-core) | Spearman | before | sim's pick | "
             "before |", "|---|---|---|---|---|---|---|"]
    lines += [f"| {r['problem']} | {r['family']} | {r['configs']} ({r['tensor_core_configs']}) "
              f"| {r['spearman']:+.2f} | {r['spearman_before']:+.2f} | "
              f"{r['sim_pick_vs_best']:.2f}x | {r['sim_pick_vs_best_before']:.2f}x |"
              for r in out["rows"]]
    fams = sorted({r["family"] for r in out["rows"]})
    def family_median(f: str, key: str) -> float:
        return statistics.median(r[key] for r in out["rows"] if r["family"] == f)

    per = "; ".join(f"{f} {family_median(f, 'spearman'):+.2f} (before "
                    f"{family_median(f, 'spearman_before'):+.2f}, "
                    f"{sum(r['family'] == f for r in out['rows'])})" for f in fams)
    lines += ["", f"Median Spearman {out['median']:+.2f} (before {out['median_before']:+.2f}); "
              f"per family: {per}.", "", MARK_END]
    return lines


def main() -> None:
    target = Target()
    rows = []
    with Builder() as builder:
        for path in sorted((VALIDATION / "data" / "nvidia-h200").glob("*.json.gz")):
            case = load_case(path, builder, target, problems=VALIDATION / "problems")
            if case is None:
                continue
            rows.append(score(case, target))
            r = rows[-1]
            print(f"{r['problem']:28s} {r['family']:10s} rho {r['spearman']:+.2f} (before "
                  f"{r['spearman_before']:+.2f})  sim's pick {r['sim_pick_vs_best']:.2f}x "
                  f"(before {r['sim_pick_vs_best_before']:.2f}x)", flush=True)
    out = {"date": time.strftime("%Y-%m-%d"), "rows": rows,
           "median": statistics.median(r["spearman"] for r in rows),
           "median_before": statistics.median(r["spearman_before"] for r in rows)}
    (ROOT / "benchmarks/results" / f"{out['date']}-sim-validation.json").write_text(
        json.dumps(out, indent=2) + "\n")
    write_section(ROOT / "BENCHMARKS.md", MARK_BEGIN, MARK_END, markdown(out))


if __name__ == "__main__":
    main()
