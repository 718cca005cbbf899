"""cuDNN's two modes on a GPU. Eager with the benchmark mode as a baseline
(`runner/devices.CUDNN_BENCHMARK`): timed in a worker of its own, so the mode meets the
convolution's shape first, while eager and torch.compile are timed on the heuristics (the
default a user's process runs). Candidates' library convolutions run in the benchmark mode
(`CudaDevice(library_cudnn_benchmark=True)`, the default), or on the heuristics when asked. The
times are printed (the bench's figure is the one that counts): on conv_transpose2d_odd the H200
probe measured 0.41 ms with the heuristics and 0.12 ms in benchmark mode."""

from __future__ import annotations

from pathlib import Path

import pytest

from cuda_agent.ir.planning import make_plan
from cuda_agent.problem import load_problem
from cuda_agent.build.builder import Builder, BuildInput
from cuda_agent.runner.devices import CUDNN_BENCHMARK, Candidate, CudaDevice, cudnn_baselines
from cuda_agent.runner.timing import TimingSettings
from cuda_agent.space.space import Space

pytestmark = pytest.mark.gpu

PROBLEM = Path(__file__).resolve().parents[2] / "benchmarks/problems/conv_transpose2d_odd.py"


def test_benchmark_mode_baseline_runs_apart_from_the_default():
    prob = load_problem(PROBLEM)
    plan = make_plan(prob.graph())
    assert cudnn_baselines(plan) == (CUDNN_BENCHMARK,)
    # candidates on the heuristics, as eager's default: the baseline alone needs the other mode
    dev = CudaDevice(timing=TimingSettings(reps=10, warmup=3), library_cudnn_benchmark=False)
    try:
        dev.setup(prob, plan)
        assert dev.facts()["cudnn_benchmark"] is False
        before = dev.baselines(("eager",))
        restarts = dev.restarts
        bench = dev.baselines((CUDNN_BENCHMARK,))
        assert dev.restarts == restarts + 2, "a fresh worker for it, and one after it"
        after = dev.baselines(("eager",))
    finally:
        dev.close()
    mode_ms = bench.extra_ms.get(CUDNN_BENCHMARK)
    print(f"conv_transpose2d_odd: eager {before.eager_ms:.4f} ms, benchmark mode "
          f"{mode_ms:.4f} ms, eager again {after.eager_ms:.4f} ms")
    assert mode_ms and mode_ms > 0, bench.notes
    # that the mode took effect shows only in the time: cuDNN's heuristics pick a slow
    # algorithm for this shape (3.5x in the fresh-process probe, 2026-12-03)
    assert mode_ms < 0.8 * before.eager_ms, "the benchmark mode did not take effect"
    # the worker after it picks algorithms as the default eager does, not in benchmark mode
    assert abs(after.eager_ms - before.eager_ms) < 0.25 * before.eager_ms


def _library_candidate(space: Space, tmp: Path) -> Candidate:
    """The library template's configuration in the layout given (a cuDNN call, then a copy)."""
    cfg = next(c for c in space.configs if c.get("memory.layout") == "as_given")
    rendered = space.render(cfg)
    with Builder(workers=1, cache_dir=tmp) as b:
        built = b.build([BuildInput(rendered.source, "sm_90")])[0]
    assert built.ok, built.error_msg
    return Candidate(f"lib-{cfg.short()}", cfg, rendered, built.cubin_path)


def test_library_candidates_run_on_the_algorithm_the_benchmark_mode_finds(tmp_path):
    prob = load_problem(PROBLEM)
    plan = make_plan(prob.graph())
    times = {}
    for find in (False, True):
        dev = CudaDevice(timing=TimingSettings(reps=10, warmup=3), library_cudnn_benchmark=find)
        try:
            dev.setup(prob, plan)
            assert dev.facts()["cudnn_benchmark"] is find
            assert ("cudnn-find" in dev.measure_protocol) is find  # a store keeps them apart
            cand = _library_candidate(Space.for_plan(plan, dev.target()), tmp_path)
            base = dev.baselines(("eager",) + cudnn_baselines(plan))
            # eager on the heuristics, the baseline in benchmark mode, each in a worker set up
            # so, and the candidates' mode back after them: two fresh workers either way
            assert dev.restarts == 2
            m = dev.evaluate(cand)
        finally:
            dev.close()
        assert m.ok and m.verified, (m.error_kind, m.error_msg)
        times[find] = (m.time_ms, base.eager_ms, base.extra_ms.get(CUDNN_BENCHMARK))
    print("conv_transpose2d_odd library candidate (ms, eager, eager in benchmark mode): "
          f"heuristics {times[False]}, benchmark mode {times[True]}")
    # eager is eager's default in both devices; the library call follows the device's mode
    assert abs(times[True][1] - times[False][1]) < 0.25 * times[False][1]
    assert times[True][0] < 0.8 * times[False][0], "the candidates' mode did not take effect"
