"""The recorded sweeps as simulator cases: a program's records labelled with the stage its
search was varying, and the Spearman figure within one stage."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.sim_cases import _program
from benchmarks.sim_correlation import _stages_note, stage_rho
from cuda_agent.ir.planning import make_plan
from cuda_agent.problem import load_problem
from cuda_agent.runner.replay import read_sweep
from cuda_agent.space.program import stage_budget
from cuda_agent.space.slots import Target

ROOT = Path(__file__).resolve().parents[1]


def test_a_programs_records_carry_the_stage_their_search_varied():
    data = read_sweep(ROOT / "benchmarks/data/nvidia-h200/fused_conv2d_relu_maxpool.json.gz")
    plan = make_plan(load_problem(ROOT / "benchmarks/problems/fused_conv2d_relu_maxpool.py")
                     .graph())
    items = _program(plan, data["records"], Target())
    first = stage_budget(len(data["records"]), 2, 0)
    ok = [bool(r.get("ok") and r.get("time_ms")) for r in data["records"]]
    stages = [s for _, _, s in items]
    assert stages == [0] * sum(ok[:first]) + [1] * sum(ok[first:])
    # within the second stage the first stage's kernel is the same in every record
    second = [rd for rd, _, s in items if s == 1]
    assert len({dict(rd.facts).get("s0.bm") for rd in second}) == 1


def test_stage_rho_ranks_one_stages_records_only():
    sim = [1.0, 2.0, 3.0, 10.0, 30.0, 20.0]
    real = [1.0, 2.0, 3.0, 5.0, 6.0, 7.0]
    stages = [0, 0, 0, 1, 1, 1]
    assert stage_rho(sim, real, stages, 0) == pytest.approx(1.0)
    assert stage_rho(sim, real, stages, 1) == pytest.approx(0.5)
    assert stage_rho(sim, real, [0, 0, 0, 0, 1, 1], 1) is None  # fewer than 3
    assert _stages_note({"stage_spearman": [0.88, None]}) == " (stages +0.88 / n/a)"
    assert _stages_note({"spearman": 0.5}) == ""
