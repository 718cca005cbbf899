"""How well the simulator ranks configurations: Spearman correlation between `sim` and the
recorded GPU sweeps, per problem and per family.

    python benchmarks/sim_correlation.py [--data benchmarks/data/nvidia-h200]

Every recorded configuration is compiled (NVRTC, for the compiler's register and spill report),
simulated with the default constants, and ranked against its measured time. The result goes to
benchmarks/results/<date>-sim-correlation.json and its section of BENCHMARKS.md. The simulator
is not fitted here (that is calibration, a later step): this is the uncalibrated model's skill.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from scipy.stats import spearmanr

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cuda_agent.build.builder import Builder, BuildInput  # noqa: E402
from cuda_agent.ir.plan import make_plan  # noqa: E402
from cuda_agent.problem import load_problem  # noqa: E402
from cuda_agent.run.replay import read_sweep  # noqa: E402
from cuda_agent.run.sim_model import simulate  # noqa: E402
from cuda_agent.space.slots import Target  # noqa: E402
from cuda_agent.space.space import Space  # noqa: E402

MARK_BEGIN, MARK_END = "<!-- sim-correlation:begin -->", "<!-- sim-correlation:end -->"


def correlate(path: Path, builder: Builder) -> dict | None:
    data = read_sweep(path)
    problem = load_problem(ROOT / "benchmarks" / "problems" / f"{data['problem']}.py")
    plan = make_plan(problem.graph())
    if plan.kind == "program":
        return None  # a multi-kernel program's sweep mixes stage spaces: not ranked here
    target = Target()
    space = Space.for_plan(plan, target)
    # records of older template versions are read as configurations of the current ones
    recs, configs = [], []
    for r in data["records"]:
        cfg = space.upgrade(r["config"]) if r.get("ok") and r.get("time_ms") else None
        if cfg is not None:
            recs.append(r)
            configs.append(cfg)
    rendered = [space.render(c) for c in configs]
    builds = builder.build([BuildInput(r.source, target.arch) for r in rendered])
    sim, real = [], []
    for rec, rend, b in zip(recs, rendered, builds):
        res = simulate(plan, rend, b.resources, target)
        if res.error_kind is None:
            sim.append(res.time_ms)
            real.append(rec["time_ms"])
    if len(sim) < 3:  # no ranking to judge (records the current templates no longer read)
        return None
    rho = spearmanr(sim, real).statistic
    best_real = min(range(len(real)), key=real.__getitem__)
    best_sim = min(range(len(sim)), key=sim.__getitem__)
    return {"problem": data["problem"], "family": plan.family, "configs": len(sim),
            "spearman": rho, "sim_pick_vs_best": real[best_sim] / real[best_real],
            "sim_best_ms": sim[best_sim], "real_best_ms": real[best_real]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", type=Path, default=ROOT / "benchmarks/data/nvidia-h200")
    args = ap.parse_args()
    rows = []
    with Builder() as builder:
        for path in sorted(args.data.glob("*.json.gz")):
            r = correlate(path, builder)
            if r is None:
                print(f"{path.name}: fewer than 3 usable records, skipped", flush=True)
                continue
            rows.append(r)
            print(f"{r['problem']:32s} {r['family']:12s} rho {r['spearman']:+.2f}  sim's pick "
                  f"{r['sim_pick_vs_best']:.2f}x the best", flush=True)
    fams = sorted({r["family"] for r in rows})
    by_family = {f: statistics.median([r["spearman"] for r in rows if r["family"] == f
                                       and r["spearman"] is not None]) for f in fams}
    date = time.strftime("%Y-%m-%d")
    out = {"date": date, "data": str(args.data.relative_to(ROOT)), "rows": rows,
           "median_spearman_by_family": by_family}
    (ROOT / "benchmarks/results" / f"{date}-sim-correlation.json").write_text(
        json.dumps(out, indent=2) + "\n")
    lines = [MARK_BEGIN, "## How well the simulator ranks configurations", "",
             f"Run {date} on a CPU by `benchmarks/sim_correlation.py`: every configuration the "
             "H200 sweeps recorded as verified is simulated (uncalibrated default constants, "
             "with the compiler's real register and spill counts) and ranked against its "
             "measured time. *sim's pick*: the measured time of the configuration the simulator "
             "ranks first, over the measured best.", "",
             "Families whose sweeps mix the library-product template (`lib`) with generated "
             "kernels (the fused linear/matmul problems, convolutions) are ranked across both.",
             "", "| family | problems | median Spearman |", "|---|---|---|"]
    lines += [f"| {f} | {sum(r['family'] == f for r in rows)} | {by_family[f]:+.2f} |"
              for f in fams]
    lines += ["", "| problem | family | configs | Spearman | sim's pick |", "|---|---|---|---|---|"]
    lines += [f"| {r['problem']} | {r['family']} | {r['configs']} | {r['spearman']:+.2f} | "
              f"{r['sim_pick_vs_best']:.2f}x |" for r in rows]
    lines += ["", MARK_END]
    md = ROOT / "BENCHMARKS.md"
    text = md.read_text()
    if MARK_BEGIN in text:
        text = text[:text.index(MARK_BEGIN)] + text[text.index(MARK_END) + len(MARK_END):]
    md.write_text(text.rstrip() + "\n\n" + "\n".join(lines) + "\n")
    print(by_family)


if __name__ == "__main__":
    main()
