"""Versioned spaces: sweeps recorded by an older template version stay readable after a
template gains a slot (the new slot takes its legacy value)."""

from pathlib import Path

import pytest

from cuda_agent.ir.planning import make_plan
from cuda_agent.problem import load_problem
from cuda_agent.runner.replay import read_sweep
from cuda_agent.space.slots import Target
from cuda_agent.space.space import Space
from cuda_agent.store import Store
from cuda_agent.tuner import Tuner, TuneSettings

ROOT = Path(__file__).resolve().parents[1]
H200 = ROOT / "benchmarks" / "data" / "nvidia-h200"


def space_of(name: str) -> Space:
    return Space.for_plan(make_plan(load_problem(ROOT / "benchmarks/problems" / f"{name}.py")
                                    .graph()), Target())


def test_an_old_config_gains_the_new_slot_at_its_legacy_value():
    sp = space_of("softmax_short_rows")
    new = next(c for c in sp.iter_configs() if c["memory.store"] == "default")
    old = {k: v for k, v in new.as_dict().items() if k != "memory.store"}  # as v1 recorded it
    assert sp.upgrade(old) == new
    gone = dict(old, **{"config.block": 4096})  # a value the space does not have
    assert sp.upgrade(gone) is None


@pytest.mark.skipif(not H200.exists(), reason="no recorded H200 sweeps")
def test_replay_reads_version_1_sweeps_of_the_row_template():
    sweep = read_sweep(H200 / "softmax_short_rows.json.gz")
    assert sweep["space_version"] == "row1"  # recorded before memory.store existed
    t = Tuner(load_problem(ROOT / "benchmarks/problems/softmax_short_rows.py"),
              TuneSettings(device="replay", replay_root=str(H200.parent), baselines=False,
                           budget=5, batch=5, strategy="random"), store=Store(":memory:"))
    try:
        assert len(t.space) == len(sweep["records"])
        r = t.run()
        assert all(tr.measurement.error_kind != "not_recorded" for tr in r.trials)
        assert all(tr.config["memory.store"] == "default" for tr in r.trials)
    finally:
        t.close()


@pytest.mark.skipif(not H200.exists(), reason="no recorded H200 sweeps")
def test_a_sweep_from_before_the_problem_had_two_templates_still_replays():
    """gemm_tril was swept when only the GEMM template covered it (no `reduction.scope` in
    its records); the library and tensor-core templates have joined since. Its records map to
    the GEMM template's configurations, and replay serves them."""
    sweep = read_sweep(H200 / "gemm_tril.json.gz")
    assert all("reduction.scope" not in r["config"] for r in sweep["records"])
    sp = space_of("gemm_tril")
    assert {t.name for t in sp.templates} == {"gemm", "gemm_tc", "lib"}
    mapped = [c for c in (sp.upgrade(r["config"]) for r in sweep["records"]) if c is not None]
    assert mapped and all(c["reduction.scope"] == "gemm" for c in mapped)
    t = Tuner(load_problem(ROOT / "benchmarks/problems/gemm_tril.py"),
              TuneSettings(device="replay", replay_root=str(H200.parent), baselines=False,
                           budget=4, batch=4, strategy="random"), store=Store(":memory:"))
    try:
        r = t.run()
        assert r.best is not None and all(tr.measurement.ok for tr in r.trials)
    finally:
        t.close()
