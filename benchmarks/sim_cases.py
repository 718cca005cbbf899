"""The recorded GPU sweeps as simulator test cases: shared by sim_correlation.py and
sim_calibrate.py, so that both judge the simulator on the same configurations.

A single-kernel problem's records are configurations of its space (records of older template
versions are read through `Space.upgrade`). A multi-kernel program was swept the way the tuner
searches it (`Tuner._search_stages`): one stage's space at a time, the sample budget split
evenly over the stages in order (sweeps do not hand a settled stage's share on; since they
could, each record says its stage), the other stages fixed at the best configuration found so
far (every stage's default at first). Its records are replayed the same way to know what each
measured candidate was, and every candidate is rendered as the whole program.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cuda_agent.build.builder import Builder, BuildInput
from cuda_agent.ir.partition import ProgramPlan
from cuda_agent.ir.planning import make_plan
from cuda_agent.problem import load_problem
from cuda_agent.runner.replay import read_sweep
from cuda_agent.space.program import StageSpace, stage_budget, stage_spaces
from cuda_agent.costmodel.model import SimConstants, simulate
from cuda_agent.space.slots import Rendered, Target
from cuda_agent.space.space import Space

ROOT = Path(__file__).resolve().parents[1]


def _single(plan: Any, records: list[dict], target: Target
            ) -> list[tuple[Rendered, float, int]]:
    space = Space.for_plan(plan, target)
    out = []
    for r in records:
        cfg = space.upgrade(r["config"]) if r.get("ok") and r.get("time_ms") else None
        if cfg is not None:
            out.append((space.render(cfg), float(r["time_ms"]), 0))
    return out


def _program(plan: ProgramPlan, records: list[dict], target: Target
             ) -> list[tuple[Rendered, float, int]]:
    """Replay the tuner's coordinate search over the stages (see the module's docstring):
    (the whole program rendered, measured ms, the stage searched) per record."""
    spaces = stage_spaces(plan, target)
    n, budget = len(spaces), len(records)
    fixed = [sp.default() for sp in spaces]
    best_ms = float("inf")
    out, start = [], 0
    staged = all("stage" in r for r in records)  # recorded since stages could hand over
    for i in range(n):
        if staged:
            share = sum(1 for r in records if r["stage"] == i)
        else:  # older sweeps: the even split they were searched with
            share = stage_budget(budget, n, i)
        stage = StageSpace.of(plan, i, spaces, fixed)
        stage_best = None
        for r in records[start:start + share]:
            cfg = spaces[i].upgrade(r["config"])
            if cfg is None:  # not this stage's space: the replay lost its way, use nothing
                return []
            if r.get("ok") and r.get("time_ms"):
                out.append((stage.render(cfg), float(r["time_ms"]), i))
                if stage_best is None or r["time_ms"] < stage_best[1]:
                    stage_best = (cfg, r["time_ms"])
        start += share
        if stage_best is not None and stage_best[1] < best_ms:
            best_ms = stage_best[1]
            fixed = stage.with_choice(stage_best[0])
    return out


def load_case(path: Path, builder: Builder, target: Target | None = None,
              problems: Path | None = None) -> dict | None:
    """{name, family, plan, items: [(rendered, resources, measured ms)], stages: the stage
    each item's record searched (0 for a single kernel)} of one sweep, or None when fewer
    than 3 records can be read as current configurations. The problem's file is looked up
    in `problems` (default: the suite's benchmarks/problems)."""
    target = target or Target()
    data = read_sweep(path)
    problem = load_problem((problems or ROOT / "benchmarks" / "problems")
                           / f"{data['problem']}.py")
    plan = make_plan(problem.graph())
    if isinstance(plan, ProgramPlan):
        pairs = _program(plan, data["records"], target)
    else:
        pairs = _single(plan, data["records"], target)
    if len(pairs) < 3:
        return None
    builds = builder.build([BuildInput(rd.source, target.arch) for rd, _, _ in pairs])
    # a program's stages are simulated with their own kernels' compile reports
    items = [(rd, {**b.resources, "per_kernel": b.per_kernel}, t)
             for (rd, t, _), b in zip(pairs, builds)]
    return {"name": data["problem"], "family": plan.family, "plan": plan, "items": items,
            "stages": [stage for _, _, stage in pairs]}


def simulated(case: dict, target: Target, constants: SimConstants | None = None
              ) -> tuple[list[float], list[float], list[int]]:
    """(modelled ms, measured ms, stage) of each of a case's records the model accepts (a
    configuration it rejects, e.g. one that does not fit an SM, is left out of both)."""
    sim, real, stages = [], [], []
    for (rendered, resources, t), stage in zip(case["items"], case["stages"]):
        res = simulate(case["plan"], rendered, resources, target, constants)
        if res.error_kind is None:
            sim.append(res.time_ms)
            real.append(t)
            stages.append(stage)
    return sim, real, stages
