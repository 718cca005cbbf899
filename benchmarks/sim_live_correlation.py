"""How well the simulator ranks the configurations the live bench measured: Spearman between
`sim` and the H200's times on the configurations every strategy of a live run tried.

    python -m benchmarks.sim_live_correlation [--sample 80]

The recorded sweeps (`sim_correlation.py`) of the single GEMMs predate the tensor-core
template and hold 10 to 48 configurations; the live bench runs since commit 3dbe27b keep each
measurement's configuration (`Run.configs`), drawn by eight strategies from the problem's whole
current template space. Per problem (its latest live run that has them): every configuration
measured as verified, its median time where measured more than once, a deterministic sample of
`--sample` of them (seeded shuffle), each rendered, compiled for its register report and
simulated with the shipped constants (what the `sim` device uses). A configuration whose short
form names more than one configuration of the space is left out (its template is not in the
short form). Writes benchmarks/results/<date>-sim-live-correlation.json and its section of
BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from pathlib import Path

from scipy.stats import spearmanr

from benchmarks.live_sweeps import configs_by_short, live_measurements, live_runs
from benchmarks.sections import write_section
from cuda_agent.build.builder import Builder, BuildInput
from cuda_agent.ir.partition import ProgramPlan
from cuda_agent.ir.planning import make_plan
from cuda_agent.problem import load_problem
from cuda_agent.costmodel.model import SimConstants, simulate
from cuda_agent.space.slots import Target
from cuda_agent.space.space import Space

ROOT = Path(__file__).resolve().parents[1]

MARK_BEGIN, MARK_END = "<!-- sim-live-correlation:begin -->", "<!-- sim-live-correlation:end -->"
RESULTS = ROOT / "benchmarks" / "results"


def measured_configs() -> dict[str, tuple[str, dict[str, float]]]:
    """Per problem, from its latest live run that kept configurations: (run folder, {short
    form: median verified ms})."""
    out = {}
    for problem, (where, _, times) in live_measurements().items():
        ok = {s: statistics.median(v) for s, ts in times.items()
              if (v := [t for t in ts if t is not None])}
        if ok:
            out[problem] = (where, ok)
    return out


def sampled_case(problem: str, times: dict[str, float], sample: int, builder: Builder,
                 target: Target) -> tuple | None:
    """(plan, [(rendered, compile report, measured ms)]) of a seeded sample of `sample` of a
    single-kernel problem's live-measured configurations, each compiled for its register
    report; None for a program (measured stage by stage) or fewer than 3 configurations."""
    plan = make_plan(load_problem(ROOT / "benchmarks/problems" / f"{problem}.py").graph())
    if isinstance(plan, ProgramPlan):
        return None  # measured stage by stage, each stage's times with the others' choices
    space = Space.for_plan(plan, target)
    by_short = configs_by_short(space)
    pairs = [(by_short[s][0], t) for s, t in sorted(times.items())
             if len(by_short.get(s, ())) == 1]
    random.Random(0).shuffle(pairs)
    pairs = pairs[:sample]
    if len(pairs) < 3:
        return None
    rendered = [space.render(c) for c, _ in pairs]
    builds = builder.build([BuildInput(rd.source, target.arch) for rd in rendered])
    return plan, [(rd, {**b.resources, "per_kernel": b.per_kernel}, t)
                  for (_, t), rd, b in zip(pairs, rendered, builds)]


def correlate(problem: str, times: dict[str, float], sample: int, builder: Builder,
              constants: SimConstants) -> dict | None:
    target = Target()
    found = sampled_case(problem, times, sample, builder, target)
    if found is None:
        return None
    plan, items = found
    sim, real = [], []
    for rd, resources, t in items:
        res = simulate(plan, rd, resources, target, constants)
        if res.error_kind is None:
            sim.append(res.time_ms)
            real.append(t)
    if len(sim) < 3:
        return None
    best_real = min(range(len(real)), key=real.__getitem__)
    best_sim = min(range(len(sim)), key=sim.__getitem__)
    return {"problem": problem, "family": plan.family, "measured": len(times),
            "configs": len(sim), "spearman": spearmanr(sim, real).statistic,
            "sim_pick_vs_best": real[best_sim] / real[best_real]}


def live_runs_by_problem() -> dict[str, dict[str, dict[str, float]]]:
    """Per problem, every live run that kept configurations: {run folder: {short form: median
    verified ms}}."""
    return {problem: {where: {s: statistics.median(v) for s, ts in times.items()
                              if (v := [t for t in ts if t is not None])}
                      for where, (_, _, times) in runs.items()}
            for problem, runs in live_runs().items()}


def repeatability(runs: dict[str, dict[str, float]], run: str) -> tuple[float, int] | None:
    """How well the GPU ranks the same configurations twice: Spearman between `run` and the
    problem's other live run with the most configurations in common (at least 10), and how
    many; None where no other run measured enough of the same. The ceiling a model of the
    times can reach on the problem."""
    if run not in runs:
        return None
    best = max(((set(runs[run]) & set(times), other) for other, times in runs.items()
                if other != run), key=lambda x: len(x[0]), default=(set(), ""))
    common, other = sorted(best[0]), best[1]
    if len(common) < 10:
        return None
    rho = spearmanr([runs[run][c] for c in common], [runs[other][c] for c in common]).statistic
    return float(rho), len(common)


def repeat_summary(reps: dict[str, tuple[float, int] | None]) -> str:
    """The repeatability column in words: the problems below 0.9, the lowest of the rest."""
    known = {p: r[0] for p, r in reps.items() if r is not None}
    low = sorted(p for p, rho in known.items() if rho < 0.9)
    rest = [rho for p, rho in known.items() if p not in low]
    text = (f"{', '.join(f'{p} repeats at {known[p]:+.2f}' for p in low)}; the other "
            f"{len(rest)} problems with a repeat at {min(rest):.2f} or better" if low else
            f"every problem with a repeat at {min(rest):.2f} or better")
    return text


def markdown(out: dict) -> list[str]:
    """BENCHMARKS.md's section from a result file's content."""
    rows, by_family = out["rows"], out["median_spearman_by_family"]
    runs = live_runs_by_problem()
    reps = {r["problem"]: repeatability(runs.get(r["problem"], {}), r["run"]) for r in rows}
    lines = [MARK_BEGIN, "## How well the simulator ranks the live runs' configurations", "",
             f"Run {out['date']} on a CPU by `benchmarks/sim_live_correlation.py --problems "
             f"{out['problems_given']} --sample {out['sample']}`: the configurations the live "
             "bench's strategies measured on the H200 (each problem's latest live run that kept "
             "them, drawn by eight strategies from the whole current template space, "
             f"tensor-core templates included), {out['sample']} per problem (a seeded sample), "
             "simulated with the shipped constants and ranked against their measured times. "
             "The recorded sweeps of the section above are older for the single GEMMs (SIMT "
             "templates only, 10 to 48 configurations each). Three simulator constants were "
             "set from these runs, so the figures are in-sample: `sim_gemm.SPLIT_PARTIAL_COST` "
             "(split-K's workspace traffic, from gemm_odd), `SIMT_TIME_SCALE` (1.25: the "
             "SIMT template's time against the tensor-core template's; 1.15 to 1.4 all raised "
             "the GEMM median, 1.25 on either half of the problems alone, 0.76 -> 0.85 and "
             "0.775 -> 0.84; the median over all 28 went from 0.77 to 0.85, the convolutions' "
             "from 0.73 to 0.81) and `TRANSPOSED_GATHER_INSTR` (the tensor-core template's "
             "gather in a transposed convolution, from the five of them); two more on "
             "2026-12-03, `TC_LONE_BLOCK_OVERLAP` and `TC_TILE_FILL_BW` of the tensor-core "
             "template, on 80 of each problem's configurations with the convolution sweeps "
             "(`benchmarks/sim_tc_fit.py`: cross-validated by problem, held-out halves +0.01 "
             "to +0.04); the others predate these runs. A problem's "
             "family is its plan's: gemm_diag_scale is an elementwise kernel, gemm_vecmat and gemm_matvec "
             "reductions. *GPU repeat*: the GPU against itself, Spearman between this run and "
             "another live run of the problem over the configurations both measured (how many "
             "in brackets; `-`: fewer than 10 in common), the ceiling for any model of the "
             f"times: {repeat_summary(reps)} (runs before commit 6ed05e0 timed 10 us kernels "
             "with the host's launch path inside the events, as conv2d_odd's were; its "
             "lead-in keeps it out, not yet run on the GPU).", "",
             "| family | problems | median Spearman |", "|---|---|---|"]
    lines += [f"| {f} | {sum(r['family'] == f for r in rows)} | {v:+.2f} |"
              for f, v in sorted(by_family.items())]

    def repeat(r: dict) -> str:
        rep = reps[r["problem"]]
        return "-" if rep is None else f"{rep[0]:+.2f} ({rep[1]})"

    lines += ["", "| problem | family | measured | simulated | Spearman | GPU repeat | "
              "sim's pick | run |", "|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['problem']} | {r['family']} | {r['measured']} | {r['configs']} | "
              f"{r['spearman']:+.2f} | {repeat(r)} | {r['sim_pick_vs_best']:.2f}x | "
              f"`{r['run']}` |" for r in rows]
    return lines + ["", MARK_END]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sample", type=int, default=80)
    ap.add_argument("--problems", default="", help="comma-separated name prefixes (default: all)")
    ap.add_argument("--markdown-only", type=Path, default=None, metavar="RESULT_JSON",
                    help="rewrite BENCHMARKS.md's section from a result file only")
    args = ap.parse_args()
    if args.markdown_only:
        write_section(ROOT / "BENCHMARKS.md", MARK_BEGIN, MARK_END,
                      markdown(json.loads(args.markdown_only.read_text())))
        return
    found = measured_configs()
    names = sorted(p for p in found if not args.problems
                   or p.startswith(tuple(args.problems.split(","))))
    constants = SimConstants.shipped()
    rows = []
    with Builder() as builder:
        for name in names:
            r = correlate(name, found[name][1], args.sample, builder, constants)
            if r is None:
                print(f"{name}: fewer than 3 usable configurations, skipped", flush=True)
                continue
            r["run"] = found[name][0]
            rows.append(r)
            print(f"{name:34s} {r['family']:8s} {r['configs']:4d} rho {r['spearman']:+.2f} "
                  f"sim's pick {r['sim_pick_vs_best']:.2f}x", flush=True)
    fams = sorted({r["family"] for r in rows})
    by_family = {f: statistics.median(r["spearman"] for r in rows if r["family"] == f)
                 for f in fams}
    date = time.strftime("%Y-%m-%d")
    out = {"date": date, "sample": args.sample, "constants": "shipped (the sim device's)",
           "problems_given": args.problems or "all", "rows": rows,
           "median_spearman_by_family": by_family}
    (RESULTS / f"{date}-sim-live-correlation.json").write_text(json.dumps(out, indent=2) + "\n")
    write_section(ROOT / "BENCHMARKS.md", MARK_BEGIN, MARK_END, markdown(out))
    print(by_family)


if __name__ == "__main__":
    main()
