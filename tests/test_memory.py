"""The memory plan of a tuning run (issue 33): the bound, what the plan may hold under it, the
timing rotation, chunk sizes from measured costs, and refusals in one line before any search."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn as nn

from cuda_agent.errors import CudaAgentError, DeviceError, first_line
from cuda_agent.ir.planning import make_plan
from cuda_agent.problem import load_problem
from cuda_agent.runner import memory
from cuda_agent.runner.memory import (GiB, MemoryPlan, MemoryRefusal, Sizes, chunk_rows,
                                      refuse_unless_inputs_fit, timing_sets)

ROOT = Path(__file__).parents[1]
MiB = 1 << 20


def elementwise(gib_in: float, eager_extra: int = 0, capacity: int = 139 * GiB) -> MemoryPlan:
    """An elementwise op on `gib_in` GiB: eager holds the input and the output."""
    n = int(gib_in * GiB)
    sizes = Sizes(forward_bytes=n, state_bytes=0, output_bytes=n, model_bytes=0)
    return MemoryPlan(sizes, 2 * n + eager_extra, capacity, 120 * MiB, timing_sets(n, 60 * MiB, 3))


def test_the_bound_is_eager_peak_plus_twice_the_output_plus_a_fixed_allowance():
    plan = elementwise(6)
    allowance = plan.flusher_bytes + memory.SCRATCH_BYTES + memory.HOLD_BYTES
    assert plan.bound_bytes == plan.eager_peak_bytes + 2 * 6 * GiB + allowance
    assert allowance < 1.5 * GiB  # small and fixed, whatever the problem
    assert plan.as_dict()["allowance_bytes"] == allowance


def test_the_bound_does_not_grow_with_the_verification_cases():
    """Nothing in the plan counts cases: the pool regenerates them (verify.PoolBudget)."""
    plan = elementwise(6)
    assert plan.hold_room() == plan.sizes.output_bytes + memory.HOLD_BYTES
    assert plan.lean_bytes + plan.hold_room() <= plan.bound_bytes


def test_drawn_parameters_count_in_the_bound():
    sizes = Sizes(forward_bytes=GiB, state_bytes=GiB // 2, output_bytes=GiB, model_bytes=GiB // 2)
    plan = MemoryPlan(sizes, 3 * GiB, 139 * GiB, 0, 1)
    assert plan.bound_bytes - plan.eager_peak_bytes - 2 * GiB - memory.SCRATCH_BYTES \
        - memory.HOLD_BYTES == GiB // 2


def test_a_problem_eager_runs_in_half_the_gpu_has_a_plan():
    """35 GiB in, 35 GiB out: eager peaks at 70 GiB, half the H200; the bound (140 GiB and
    more) exceeds the GPU, so the plan holds less, and still fits."""
    plan = elementwise(35, capacity=137 * GiB)
    plan.refuse_unless_fits("big")  # no refusal
    assert plan.bound_bytes > plan.capacity_bytes
    assert plan.limit_bytes == plan.capacity_bytes
    assert plan.hold_room() < plan.sizes.output_bytes  # no reference held on the GPU
    assert plan.chunk_budget() >= plan.sizes.output_bytes // 2
    assert plan.lean_bytes + plan.hold_room() <= plan.capacity_bytes


def test_a_problem_that_cannot_fit_is_refused_in_one_line():
    plan = elementwise(60, capacity=137 * GiB)
    with pytest.raises(MemoryRefusal) as exc:
        plan.refuse_unless_fits("huge_relu")
    msg = str(exc.value)
    assert "\n" not in msg and "huge_relu" in msg and "GiB" in msg
    assert isinstance(exc.value, DeviceError) and isinstance(exc.value, CudaAgentError)
    assert first_line(exc.value).startswith("MemoryRefusal: huge_relu does not fit")


def test_inputs_larger_than_the_free_memory_are_refused_from_their_shapes():
    sizes = Sizes(forward_bytes=200 * GiB, state_bytes=0, output_bytes=GiB, model_bytes=0)
    with pytest.raises(MemoryRefusal, match="200.00 GiB"):
        refuse_unless_inputs_fit("p", sizes, 130 * GiB)
    refuse_unless_inputs_fit("p", Sizes(GiB, 0, GiB, 0), 130 * GiB)


def test_sizes_come_from_the_graph_without_allocating():
    prob = load_problem(ROOT / "benchmarks" / "problems" / "fused_layernorm_gelu.py")
    graph = prob.graph()
    sizes = Sizes.of(graph, make_plan(graph))
    assert sizes.forward_bytes == 16384 * 4096 * 4
    assert sizes.output_bytes == 16384 * 4096 * 4
    assert sizes.state_bytes == 2 * 4096 * 4 and sizes.model_bytes == 0


@pytest.mark.parametrize("input_bytes,sets", [(MiB, 3), (100 * MiB, 3), (150 * MiB, 2),
                                              (GiB, 1), (6 * GiB, 1)])
def test_timing_rotation_stops_where_the_inputs_span_several_l2s(input_bytes, sets):
    assert timing_sets(input_bytes, 60 * MiB, 3) == sets
    assert timing_sets(input_bytes, 60 * MiB, 1) == 1


def test_chunk_rows_fit_the_budget_with_the_measured_cost():
    calls = []

    def cost(k):  # 10 MiB per row plus 50 MiB whatever the rows (a library's workspace)
        calls.append(k)
        return 50 * MiB + 10 * MiB * k

    rows = chunk_rows(cost, 10_000, 2 * GiB)
    assert rows is not None and cost(rows) * memory.CHUNK_MARGIN <= 2 * GiB
    assert cost(rows + 10) * memory.CHUNK_MARGIN > 2 * GiB * 0.9
    assert chunk_rows(cost, 5, 2 * GiB) == 5
    assert chunk_rows(cost, 10_000, 40 * MiB) is None


def test_chunk_rows_shrink_where_the_cost_grows_faster_than_linear():
    def cost(k):  # quadratic beyond the two measured sizes
        return 10 * MiB * k + MiB * k * k
    rows = chunk_rows(cost, 100_000, 4 * GiB)
    assert rows is not None and cost(rows) * memory.CHUNK_MARGIN <= 4 * GiB


def test_peak_tracker_is_silent_on_the_cpu():
    t = memory.PeakTracker(torch.device("cpu"))
    t.start()
    assert t.section(lambda: 7) == (7, 0) and t.overall() == 0


def test_reference_copy_holds_no_copy_of_supplied_parameters():
    from cuda_agent.runner.worker import reference_copy

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(64, 32)
            self.unused = nn.Parameter(torch.ones(3))
            self.register_buffer("scale", torch.full((32,), 2.0))

        def forward(self, x):
            return self.lin(x) * self.scale

    class G:  # what reference_copy reads of a graph
        class I:
            def __init__(self, role, target):
                self.role, self.target = role, target
        inputs = [I("input", None), I("parameter", "lin.weight"), I("parameter", "lin.bias"),
                  I("buffer", "scale")]

    model = M()
    ref = reference_copy(model, G)
    assert ref.lin.weight.numel() == 0 and ref.scale.numel() == 0
    assert ref.unused.dtype == torch.float64 and ref.unused.numel() == 3  # not supplied: kept
    assert model.lin.weight.numel() == 64 * 32  # the model itself untouched
    x = torch.randn(5, 64)
    state = {k: v.double() for k, v in [("lin.weight", model.lin.weight),
                                        ("lin.bias", model.lin.bias), ("scale", model.scale)]}
    with torch.no_grad():
        got = torch.func.functional_call(ref, state, (x.double(),))
        want = model(x).double()
    assert torch.allclose(got, want, atol=1e-5)


def test_the_report_carries_the_footprint():
    """A CUDA device's set-up reply carries the plan (`facts["memory"]`); report.json shows it
    at the top, not among the facts; a device without one reports null."""
    import cuda_agent
    from cuda_agent.emit import report_dict

    r = cuda_agent.tune(ROOT / "tests" / "data" / "good" / "relu_small.py", device="sim",
                        budget=1, store=":memory:", baselines=False, strategy="random")
    assert report_dict(r)["memory"] is None
    plan = elementwise(6)
    plan.peak_bytes = plan.bound_bytes - GiB
    r.facts["memory"] = plan.as_dict()
    report = report_dict(r)
    assert report["memory"]["within_bound"] is True and "memory" not in report["facts"]
    assert report["memory"]["eager_peak_bytes"] == 12 * GiB
    assert report["memory"]["verification"] == "full"


def test_the_footprint_is_described_in_one_line():
    plan = elementwise(6)
    plan.peak_bytes = 20 * GiB
    plan.verification, plan.chunk = "chunked", "250 of 24576 along output dim 0"
    line = memory.describe(plan.as_dict())
    assert line.startswith("GPU memory: peak 20.00 GiB, eager's peak 12.00 GiB, bound 25.")
    assert "chunked (250 of 24576 along output dim 0)" in line and "\n" not in line
    assert memory.describe(None) is None


def test_the_report_says_where_each_candidate_s_seconds_went():
    """A CUDA evaluation's reply splits its seconds (load and probe run, checks, timing: about
    10 s a candidate on 16 GiB problems); the device keeps them among the counters and
    report.json gives them per candidate beside the candidate's wall time."""
    import cuda_agent
    from cuda_agent.emit import report_dict

    r = cuda_agent.tune(ROOT / "tests" / "data" / "good" / "relu_small.py", device="sim",
                        budget=1, store=":memory:", baselines=False, strategy="random")
    m = r.best.measurement
    m.wall_s = 9.5
    m.counters.update({"eval_load_and_probe_s": 0.5, "eval_checks_s": 8.0,
                       "eval_timing_s": 1.0})
    best = report_dict(r)["best"]
    assert best["wall_s"] == 9.5
    assert best["eval_seconds"] == {"load_and_probe": 0.5, "checks": 8.0, "timing": 1.0}
