"""How well the simulator ranks configurations: Spearman correlation between `sim` and the
recorded GPU sweeps, per problem and per family.

    python -m benchmarks.sim_correlation [--data benchmarks/data/nvidia-h200]
    python -m benchmarks.sim_correlation --problems gemm_,fused_linear --update RESULT_JSON

`--problems` scores only the sweeps whose names start so (a whole run compiles every recorded
configuration: hours on two cores); with `--update` their rows replace those of an earlier
result, which is written again under today's date with the rows' dates kept.

Every recorded configuration is compiled (NVRTC, for the compiler's register and spill report),
simulated with the default constants, and ranked against its measured time; multi-kernel
programs too (`sim_cases.py` replays their stage-by-stage sweeps). The result goes to
benchmarks/results/<date>-sim-correlation.json and its section of BENCHMARKS.md. The simulator
is not fitted here: this is the model's skill with its default constants. When
`sim_calibrate.py` shipped fitted constants, their figures are added (in-sample for the half
they were fitted on: the calibration's held-out figures are the ones to judge them by).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from scipy.stats import spearmanr

from benchmarks.sections import write_section
from benchmarks.sim_cases import load_case, simulated
from cuda_agent.build.builder import Builder
from cuda_agent.costmodel.model import SimConstants
from cuda_agent.space.slots import Target

ROOT = Path(__file__).resolve().parents[1]

MARK_BEGIN, MARK_END = "<!-- sim-correlation:begin -->", "<!-- sim-correlation:end -->"
TARGET = 0.8  # issue 5: the median Spearman of every family
#: what is known of why a problem of a family below the target ranks as it does (analyses
#: made by hand on its sweep; `benchmarks/results/2026-12-03-h200-cudnn-probe/`)
SHORTFALLS = {
    "fused_conv2d_relu_maxpool": (
        "swept again on 2026-12-03 with the library's convolutions in cuDNN's benchmark mode "
        "(0.49 -> 0.60). The rest of its gap was the tensor-core template's model pricing "
        "larger tiles of one block per SM (128x128, 64x256 of 256 threads, 0.53-0.71 ms "
        "measured) below the 128x64 tiles of two blocks per SM that won (0.47): with the "
        "lone block's lost overlap and the refitted fill rate (`benchmarks/sim_tc_fit.py`, "
        "this problem held out of the pick) it ranked at 0.80; the pooling model then priced "
        "a pooling thread's 8 outputs 0.14 ms above its 1 to 2 where the GPU takes 0.017 "
        "more, and with L1 serving most of the sector rest a thread's row loads re-touch "
        "(`l1_inflight_merge`, chosen on the pooling sweeps with this one) it ranks at 0.86. "
        "A held-out conv+pool shape ranks lower (benchmarks/validation: 0.68)"),
}


def correlate(path: Path, builder: Builder, constants: SimConstants | None = None
              ) -> dict | None:
    case = load_case(path, builder)
    if case is None:  # no ranking to judge (records the current templates no longer read)
        return None
    sim, real, stages = simulated(case, Target(), constants)
    if len(sim) < 3:
        return None
    rho = spearmanr(sim, real).statistic
    best_real = min(range(len(real)), key=real.__getitem__)
    best_sim = min(range(len(sim)), key=sim.__getitem__)
    row = {"problem": case["name"], "family": case["family"], "configs": len(sim),
           "spearman": rho, "sim_pick_vs_best": real[best_sim] / real[best_real],
           "sim_best_ms": sim[best_sim], "real_best_ms": real[best_real]}
    if max(stages) > 0:
        # a program's search compares candidates of one stage with one another (the other
        # stages fixed): the model's ranking within each stage, beside the one across all
        row["stage_spearman"] = [stage_rho(sim, real, stages, i) for i in range(max(stages) + 1)]
    return row


def stage_rho(sim: list[float], real: list[float], stages: list[int], stage: int
              ) -> float | None:
    """Spearman over one stage's records (None with fewer than 3)."""
    pairs = [(s, r) for s, r, i in zip(sim, real, stages) if i == stage]
    if len(pairs) < 3:
        return None
    return float(spearmanr([s for s, _ in pairs], [r for _, r in pairs]).statistic)


def _stages_note(row: dict) -> str:
    rhos = row.get("stage_spearman")
    if not rhos:
        return ""
    return " (stages " + " / ".join("n/a" if r is None else f"{r:+.2f}" for r in rhos) + ")"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", type=Path, default=ROOT / "benchmarks/data/nvidia-h200")
    ap.add_argument("--problems", default="", help="comma-separated name prefixes (default: all)")
    ap.add_argument("--update", type=Path, default=None, metavar="RESULT_JSON",
                    help="with --problems: replace these problems' rows of an earlier result")
    args = ap.parse_args()
    prefixes = tuple(p for p in args.problems.split(",") if p)
    today = time.strftime("%Y-%m-%d")
    shipped = SimConstants.shipped()
    calibrated = shipped != SimConstants()
    rows = []
    with Builder() as builder:
        for path in sorted(args.data.glob("*.json.gz")):
            if prefixes and not path.name.startswith(prefixes):
                continue
            r = correlate(path, builder, SimConstants())
            if r is None:
                print(f"{path.name}: fewer than 3 usable records, skipped", flush=True)
                continue
            if calibrated:
                r["spearman_shipped"] = correlate(path, builder, shipped)["spearman"]
            r["date"] = today
            rows.append(r)
            print(f"{r['problem']:32s} {r['family']:12s} rho {r['spearman']:+.2f}  sim's pick "
                  f"{r['sim_pick_vs_best']:.2f}x the best", flush=True)
    if args.update:  # the rows not scored again stay as they were, with their date
        redone = {r["problem"] for r in rows}
        old = json.loads(args.update.read_text())
        rows = sorted([{**r, "date": r.get("date", old["date"])} for r in old["rows"]
                       if r["problem"] not in redone] + rows, key=lambda r: r["problem"])
    fams = sorted({r["family"] for r in rows})

    def medians(key: str) -> dict[str, float]:
        return {f: statistics.median([r[key] for r in rows if r["family"] == f
                                      and r.get(key) is not None]) for f in fams}

    by_family = medians("spearman")
    date = today
    out = {"date": date, "data": str(args.data.relative_to(ROOT)), "rows": rows,
           "constants": "defaults (SimConstants(), no fit)",
           "median_spearman_by_family": by_family}
    if calibrated:
        out["median_spearman_by_family_shipped"] = medians("spearman_shipped")
    (ROOT / "benchmarks/results" / f"{date}-sim-correlation.json").write_text(
        json.dumps(out, indent=2) + "\n")
    lines = [MARK_BEGIN, "## How well the simulator ranks configurations", "",
             f"Run {date} on a CPU by `benchmarks/sim_correlation.py`" + (
                 f" (rows of {', '.join(sorted({r['date'] for r in rows}))}, each scored "
                 f"with the model of its date; this run scored the problems named "
                 f"{args.problems})" if args.update else "") + ": every configuration the "
             "H200 sweeps recorded as verified is simulated (the model's default constants, "
             "no fit, with the compiler's real register and spill counts) and ranked against "
             "its measured time. *sim's pick*: the measured time of the configuration the "
             "simulator ranks first, over the measured best. Multi-kernel programs are "
             "scored too: their sweeps searched one stage at a time, which is replayed to "
             "render each record as the whole program (`benchmarks/sim_cases.py`).", "",
             "Families whose sweeps mix the library-product template (`lib`) with generated "
             "kernels (the fused linear/matmul problems, convolutions) are ranked across both. "
             "The library's rate per kind of call (dense, grouped, depthwise and transposed "
             "convolution, matmul) and its call overhead were set on 2026-12-01 from these "
             "sweeps' library records, the best one per problem (`costmodel/gemm.py`): on the "
             "convolutions and fused chains those terms are in-sample. The SIMT template's cost "
             "of a convolution's gathered loads (`GATHER_INSTR`) is the tensor-core template's "
             "estimate, not fitted. `SIMT_TIME_SCALE` and `TRANSPOSED_GATHER_INSTR` were "
             "set on 2026-12-02 from the live bench's configurations (the section on them "
             "below), not from these sweeps. Three constants of the SIMT template's model were "
             "fitted on 2026-12-03 to these sweeps of the gemm family, so its figures are "
             "in-sample: `SMEM_CLK_PER_WAVEFRONT` (1.5 clocks per shared-memory wavefront, the "
             "wavefronts counted bank by bank from the template's addresses), "
             "`OVERLAP_SHARPNESS` (3 -> 2) and `CONTIG_STORE_COST` (2, half-written sectors of "
             "contiguous 8-wide thread tiles' stores). Held out: fitted on every other problem "
             "of the 29 by name, the other half's median Spearman went 0.58 -> 0.82 and "
             "0.91 -> 0.92 (means 0.67 -> 0.79 and 0.76 -> 0.85); the 13 SIMT-only sweeps "
             "(gemm_*) alone went 0.53 -> 0.74, the family's median is lifted by the 16 fused "
             "products whose sweeps also hold the library's records. Two constants of the "
             "tensor-core template's model were fitted on 2026-12-03 on these convolution "
             "sweeps together with the live runs' GEMM and convolution configurations "
             "(`benchmarks/sim_tc_fit.py`, 61 problems, 2,923 records of the template): the "
             "overlap left to a lone block per SM (`TC_LONE_BLOCK_OVERLAP`) and the tile fill "
             "rate; the waits on spilled values were added with them (not fitted). The "
             "convolutions' figures are in-sample for those two constants, except "
             "fused_conv2d_relu_maxpool's: the pick left it out (0.61 -> 0.80 with them), "
             "though its records are where the lone-block effect was first seen; on the "
             "other problems each of six cross-validation halves gained on the half it did "
             "not see (+0.01 to +0.04 median). The pooling model's `l1_inflight_merge` (L1 "
             "serves most of the rest of a sector a thread's row loads re-touch; 0.8) was "
             "chosen the same day on the 13 pooling sweeps and this conv+pool one (the best "
             "mean Spearman of the 14): their figures are in-sample for it. Shapes outside the "
             "suite, swept after the tensor-core change: the section on them (*The simulator "
             "on held-out shapes*) below."]
    if calibrated:
        lines += ["", "*shipped*: the same with the calibrated constants the `sim` device "
                  "loads (`cuda_agent/costmodel/sim_constants_h200.json`); they were fitted on half "
                  "of these sweeps, so judge them by the calibration section's held-out "
                  "figures, not by this column."]
    head = "| family | problems | median Spearman |" + (" shipped |" if calibrated else "")
    lines += ["", head, "|---|---|---|" + ("---|" if calibrated else "")]
    shipped_by = out.get("median_spearman_by_family_shipped", {})
    lines += [f"| {f} | {sum(r['family'] == f for r in rows)} | {by_family[f]:+.2f} |"
              + (f" {shipped_by[f]:+.2f} |" if calibrated else "") for f in fams]
    short = [f for f in fams if by_family[f] < TARGET]
    if short:
        lines += ["", f"Below {TARGET} (issue 5's target for every family): " + "; ".join(
            f"{f} at {by_family[f]:+.2f}" for f in short) + "."]
        lines += [f"{r['problem']} ({r['family']}, {r['spearman']:+.2f}): "
                  f"{SHORTFALLS[r['problem']]}"
                  for r in rows if r["family"] in short and r["problem"] in SHORTFALLS]
    lines += ["", "| problem | family | configs | Spearman | sim's pick |", "|---|---|---|---|---|"]
    lines += [f"| {r['problem']} | {r['family']} | {r['configs']} | {r['spearman']:+.2f}"
              f"{_stages_note(r)} | {r['sim_pick_vs_best']:.2f}x |" for r in rows]
    if any(r.get("stage_spearman") for r in rows):
        lines += ["", "A program's Spearman is over all its records; in brackets, within each "
                  "stage's records (the comparisons its stage-by-stage search makes). The "
                  "family's figure above is the one across all."]
    lines += ["", MARK_END]
    write_section(ROOT / "BENCHMARKS.md", MARK_BEGIN, MARK_END, lines)
    print(by_family)
    if calibrated:
        print("shipped:", shipped_by)


if __name__ == "__main__":
    main()
