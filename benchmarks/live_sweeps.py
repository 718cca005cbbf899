"""The live bench runs' measurements as replayable sweeps: every configuration the eight
strategies measured on the H200 in a problem's latest live run (about 280 per problem, drawn
from the problem's whole current template space, tensor-core templates included), written in
the sweep format so that `replay` serves them.

Why: the recorded sweeps (`benchmarks/data/`) hold 8 to 200 configurations per problem, several
recorded with older templates, and on them most searches reach 95 % within two or three
measurements; the live runs' configurations are the spaces the agents really search today.
They are not a uniform sample (the strategies drew them, the fast ones more often) and the best
a replayed search can find is the best of that run: a harder, still real, test bed for A/Bs of
the agents' settings (`benchmarks/agents_ab.py --replay-root DIR`).

    python -m benchmarks.live_sweeps --out /tmp/live-sweeps     # then
    python -m benchmarks.agents_ab --replay-root /tmp/live-sweeps --variants online_ppo,noprior

A configuration measured more than once (two strategies asked for it) keeps the median of its
verified times; one that failed every time is a failure record (the kind is not kept in
bench.json: `error_kind` "recorded_failure").
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

RESULTS = ROOT / "benchmarks" / "results"


def live_runs() -> dict[str, dict[str, tuple[str, dict, dict[str, list[float | None]]]]]:
    """Per problem, every live run that kept configurations: {run folder: (its date, the
    problem's entry in bench.json, {short form: every time measured, None for a failure})}."""
    out: dict[str, dict[str, tuple[str, dict, dict[str, list[float | None]]]]] = {}
    for f in RESULTS.glob("*-bench-live*/**/bench.json"):
        if "merged" in str(f):
            continue
        run = json.loads(f.read_text())
        per: dict[str, dict[str, list[float | None]]] = {}
        for r in run["runs"]:
            configs, times = r.get("configs"), r.get("times")
            if not configs or not times:
                continue
            for short, t in zip(configs, times):
                per.setdefault(r["problem"], {}).setdefault(short, []).append(
                    None if t is None else float(t))
        for problem, d in per.items():
            out.setdefault(problem, {})[str(f.parent.relative_to(ROOT))] = (
                run["date"], run["problems"].get(problem, {}), d)
    return out


def live_measurements() -> dict[str, tuple[str, dict, dict[str, list[float | None]]]]:
    """Per problem, from its latest live run that kept configurations: (run folder, the
    problem's entry in bench.json, {short form: every time measured, None for a failure})."""
    out = {}
    for problem, runs in live_runs().items():
        where = max(runs, key=lambda w: f"{runs[w][0]} {w}")
        out[problem] = (where, runs[where][1], runs[where][2])
    return out


def configs_by_short(space) -> dict[str, list]:
    """The space's configurations by the short form bench.json records (`Config.short`); a
    form two configurations share names neither."""
    by_short: dict[str, list] = {}
    for c in space.configs:
        by_short.setdefault(c.short(), []).append(c)
    return by_short


def write_live_sweeps(out: Path, names: list[str] | None = None) -> dict[str, int]:
    """One sweep file per problem under `out/<gpu>/`; returns the records written per problem
    (a configuration today's space no longer holds, or holds twice, is left out)."""
    from cuda_agent.ir.partition import ProgramPlan
    from cuda_agent.ir.planning import make_plan
    from cuda_agent.problem import load_problem
    from cuda_agent.runner.baselines import read_record
    from cuda_agent.runner.replay import sweep_path, write_sweep
    from cuda_agent.space.slots import Target
    from cuda_agent.space.space import Space

    written: dict[str, int] = {}
    for problem, (where, entry, times) in sorted(live_measurements().items()):
        if names and problem not in names:
            continue
        prob = load_problem(ROOT / "benchmarks/problems" / f"{problem}.py")
        plan = make_plan(prob.graph())
        if isinstance(plan, ProgramPlan):
            continue  # its live configurations are stage by stage (s0:, s1:): no one space
        target = Target()
        space = Space.for_plan(plan, target)
        by_short = configs_by_short(space)
        records = []
        for short, ts in sorted(times.items()):
            if len(by_short.get(short, ())) != 1:
                continue
            ok = [t for t in ts if t is not None]
            rec = {"config": by_short[short][0].as_dict(), "ok": bool(ok),
                   "time_ms": statistics.median(ok) if ok else None, "spread_ms": None,
                   "samples": len(ok), "verified": True if ok else None,
                   "error_kind": None if ok else "recorded_failure",
                   "error_msg": None if ok else "failed in the live run", "counters": {}}
            records.append(rec)
        if not records:
            continue
        gpu = entry.get("gpu") or "NVIDIA H200"
        write_sweep(sweep_path(problem, gpu, out), {
            "problem": problem, "source_hash": prob.source_hash,
            "fingerprint": prob.graph().fingerprint(), "space_version": None, "gpu": gpu,
            "toolchain": "live bench", "target": None, "copy_bw": entry.get("copy_bw"),
            # both settings as the bench recorded them (an old entry: matched figures only)
            "baselines": read_record(entry).fields(),
            "date": where, "commit": None, "sampled": True, "space_size": len(space.configs),
            "records": records, "source": f"the live bench run {where}"})
        written[problem] = len(records)
    return written


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="the sweep root to write (<out>/<gpu>/...)")
    ap.add_argument("--problems", default="", help="comma-separated names (default: all)")
    args = ap.parse_args()
    written = write_live_sweeps(Path(args.out), [p for p in args.problems.split(",") if p])
    print(f"{len(written)} problems, {sum(written.values())} configurations "
          f"(median {statistics.median(written.values()) if written else 0:g} per problem) "
          f"under {args.out}")


if __name__ == "__main__":
    main()
