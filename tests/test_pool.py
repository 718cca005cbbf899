"""Pooling: capture of every aten variant, the planner, the template's space, and the generated
kernels' results, checked against torch by running them on the CPU (`cpu_exec`)."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import cuda_agent
import cpu_exec
from helpers import Fn
from cuda_agent.agents.vocab import SpaceIndex
from cuda_agent.errors import UnsupportedError
from cuda_agent.ir.capture import capture
from cuda_agent.ir.planning import make_plan
from cuda_agent.problem import load_problem
from cuda_agent.space.slots import Target
from cuda_agent.space.space import Space

# one worker runs the module's tests (`--dist loadgroup`, pyproject), so its module fixtures
# (`emulated`) are built once, not once per worker
pytestmark = pytest.mark.xdist_group("test_pool")

ROOT = Path(__file__).resolve().parents[1]
POOL_PROBLEMS = sorted((ROOT / "benchmarks" / "problems").glob("pool_*.py"))
TARGET = Target()


def graph_of(f, *shapes):
    return capture(Fn, [f], lambda: [torch.randn(*s) for s in shapes])


def pool_node(g):
    return next(n for n in g.live() if n.op == "pool")


def space_of(f, *shapes) -> Space:
    return Space.for_plan(make_plan(graph_of(f, *shapes)), TARGET)


# -- capture -------------------------------------------------------------------------------------

@pytest.mark.parametrize("f,shape,kind,rank,out", [
    (nn.MaxPool1d(3, 2, 1), (2, 4, 17), "max", 1, (2, 4, 9)),
    (nn.MaxPool1d(3), (4, 17), "max", 1, (4, 5)),  # unbatched (C, L)
    (nn.MaxPool2d(2), (2, 4, 16, 16), "max", 2, (2, 4, 8, 8)),
    (nn.MaxPool3d(3, 2, 1), (2, 4, 9, 9, 9), "max", 3, (2, 4, 5, 5, 5)),
    (nn.AvgPool1d(3, 2, 1), (2, 4, 17), "avg", 1, (2, 4, 9)),
    (nn.AvgPool2d(3, 2, 1, ceil_mode=True), (2, 4, 16, 16), "avg", 2, (2, 4, 9, 9)),
    (nn.AvgPool3d(3, 2, 1), (4, 9, 9, 9), "avg", 3, (4, 5, 5, 5)),  # unbatched (C, D, H, W)
    (lambda x: F.max_pool2d(x, 2, return_indices=True)[0], (2, 4, 16, 16), "max", 2,
     (2, 4, 8, 8)),
    (lambda x: F.max_pool3d(x, 2, return_indices=True)[0], (2, 4, 8, 8, 8), "max", 3,
     (2, 4, 4, 4, 4)),
])
def test_capture_lowers_every_variant_to_one_pool_node(f, shape, kind, rank, out):
    g = graph_of(f, shape)
    node = pool_node(g)
    assert node.attr("kind") == kind and node.attr("rank") == rank and node.shape == out
    assert not node.attr("indices")
    assert [n.op for n in g.live()] == ["input", "pool"]


def test_capture_keeps_every_parameter():
    g = graph_of(lambda x: F.max_pool2d(x, (3, 2), (2, 1), (1, 0), (1, 2), ceil_mode=True),
                 (1, 2, 11, 12))
    n = pool_node(g)
    assert (n.attr("kernel"), n.attr("stride"), n.attr("padding"), n.attr("dilation"),
            n.attr("ceil_mode")) == ((3, 2), (2, 1), (1, 0), (1, 2), True)
    g = graph_of(lambda x: F.avg_pool2d(x, 3, None, 1, False, False, 5), (1, 2, 11, 12))
    n = pool_node(g)
    assert n.attr("stride") == (3, 3)  # torch: no stride means the kernel size
    assert (n.attr("count_include_pad"), n.attr("divisor_override")) == (False, 5)


# -- planning -------------------------------------------------------------------------------------

def test_plan_describes_the_pool_and_fuses_the_epilogue():
    g = graph_of(lambda x, b: torch.relu(F.avg_pool2d(x, 2) + b) * 2.0, (2, 3, 8, 10), (3, 1, 1))
    p = make_plan(g)
    assert p.kind == "pool" and p.family == "pool" and p.full_shape == (2, 3, 4, 5)
    assert p.operands == [0, 1]
    info = p.info
    assert (info.input, info.planes, info.in_spatial, info.out_spatial) == (0, 6, (8, 10), (4, 5))
    assert p.flops() >= 2 * 3 * 4 * 5 * 4


@pytest.mark.parametrize("f,shapes,words", [
    # a prologue reads one operand of the pooled shape; a second would vary within the window
    (lambda x, y: F.max_pool2d(x * y, 2), [(2, 3, 8, 8), (2, 3, 8, 8)], "two operands"),
    (lambda x, y: F.max_pool2d(x + y, 2), [(2, 3, 8, 8), (8, 1)], "varies within a plane"),
    (lambda x: F.max_pool2d(x, 2, return_indices=True)[1].float(), [(2, 3, 8, 8)], "indices"),
])
def test_unsupported_pooling_is_named(f, shapes, words):
    with pytest.raises(UnsupportedError, match=words):
        make_plan(graph_of(f, *shapes))


def test_pooling_of_an_elementwise_value_plans_a_prologue():
    g = graph_of(lambda x, b: F.max_pool2d(torch.relu(x + b.view(1, -1, 1, 1)), 2),
                 (2, 3, 8, 10), (3,))
    p = make_plan(g)
    pro = p.info.prologue
    assert p.kind == "pool" and p.operands == [0, 1] and pro is not None
    assert pro.lead == (2, 3) and pro.ops == 2
    # the bias: one value per channel, none per batch
    assert [(o.input, o.strides) for o in pro.operands] == [(1, (0, 1))]
    assert "ca_pre(" in Space.for_plan(p, TARGET).render(Space.for_plan(p, TARGET).default()
                                                           ).source


def test_a_prologue_s_arithmetic_counts_for_fast_math_and_the_observation():
    p = make_plan(graph_of(lambda x, b: F.max_pool2d(torch.tanh(x + b), 2), (2, 3, 8, 8),
                           (3, 1, 1)))
    assert p.uses_transcendental() and p.fast_math_matters()
    sp = Space.for_plan(p, TARGET)
    assert {c["compute.fastmath"] for c in sp.configs} == {0, 1}


def test_reduction_after_a_pool_is_a_two_kernel_program():
    p = make_plan(graph_of(lambda x: F.avg_pool2d(x, 2).sum(dim=-1), (2, 3, 8, 8)))
    assert p.kind == "program" and p.family == "pool+reduction"


@pytest.mark.parametrize("path", POOL_PROBLEMS, ids=lambda p: p.stem)
def test_pool_problems_plan_and_fit_the_vocabulary(path):
    p = make_plan(load_problem(path).graph())
    assert p.family == "pool"
    # realistic sizes: the suite's pooling problems move 0.5-2 GB (odd ones are smaller)
    if not path.stem.endswith("_odd"):
        assert 0.5e9 <= p.bytes_moved() <= 2e9, p.bytes_moved()
    sp = Space.for_plan(p, TARGET)
    assert 100 <= len(sp) <= 100_000
    assert sp.check(sp.default()) is None
    SpaceIndex.of(sp)


def test_suite_covers_the_pooling_variants():
    infos = [make_plan(load_problem(p).graph()).info for p in POOL_PROBLEMS]
    assert {(i.kind, i.rank) for i in infos} == {(k, r) for k in ("max", "avg") for r in (1, 2, 3)}
    assert any(i.kind == "max" and max(i.dilation) > 1 and max(i.padding) > 0 for i in infos)
    assert any(i.ceil_mode for i in infos)
    assert any(i.divisor_override for i in infos) and any(not i.count_include_pad for i in infos)


# -- the space ---------------------------------------------------------------------------------

def test_space_rejects_what_cannot_work():
    sp = space_of(lambda x: F.max_pool2d(x, 2), (2, 3, 16, 16))  # stride = kernel: no overlap
    cfgs = [c.as_dict() for c in sp.configs]
    assert all(c["memory.cache"] == "reload" or c["config.items"] > 1 for c in cfgs)
    assert any(c["memory.cache"] == "regs" for c in cfgs)  # 2x2/2: span = items * kernel
    sp = space_of(lambda x: F.max_pool1d(x, 2, 3), (2, 3, 64))  # gaps between windows
    assert not any(c["memory.cache"] == "regs" for c in sp.configs)
    sp = space_of(lambda x: F.avg_pool1d(x, 3, 1, 1), (2, 3, 3))  # a row of 3 outputs
    assert max(c["config.items"] for c in sp.configs) == 2


def test_i32_indexing_is_rejected_where_it_overflows():
    sp = space_of(lambda x: F.max_pool2d(x, 2), (64, 64, 1024, 1024))  # 2**32 elements
    assert all(c["compute.index"] == "i64" for c in sp.configs)


# -- results on the CPU --------------------------------------------------------------------------

CASES = {
    "avg2d_ceil_include_pad": (lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True),
                               [(2, 3, 16, 17)]),
    "avg2d_ceil_exclude_pad": (lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True,
                                                      count_include_pad=False), [(2, 3, 17, 18)]),
    "avg3d_divisor": (lambda x: F.avg_pool3d(x, (3, 3, 2), (2, 2, 1), 1, ceil_mode=True,
                                             divisor_override=5), [(1, 2, 7, 9, 11)]),
    "avg1d_overlap": (lambda x: F.avg_pool1d(x, 5, 1, 2), [(2, 3, 37)]),
    "max2d_dilated": (lambda x: F.max_pool2d(x, 3, 1, 1, dilation=3), [(2, 3, 15, 19)]),
    "max2d_ceil_odd": (lambda x: F.max_pool2d(x, (3, 2), (2, 1), (1, 0), (1, 2), ceil_mode=True),
                       [(3, 5, 13, 11)]),
    "max1d_unbatched": (lambda x: F.max_pool1d(x, 4, 3, 2, ceil_mode=True), [(3, 29)]),
    "max3d": (lambda x: F.max_pool3d(x, 3, 2, 1), [(2, 2, 7, 9, 10)]),
    "epilogue": (lambda x, b: torch.relu(F.avg_pool2d(x, 2) + b) * 2.0,
                 [(2, 3, 9, 11), (3, 1, 1)]),
    # rows of a multiple of 4: interior threads load float4s and store float4s
    "avg1d_vec": (lambda x: F.avg_pool1d(x, 5, 1, 2), [(2, 3, 64)]),
    "max2d_vec_strided": (lambda x: F.max_pool2d(x, 3, 2, 1), [(2, 3, 10, 32)]),
    "avg2d_vec_epilogue": (lambda x, b: torch.relu(F.avg_pool2d(x, 2) + b) * 2.0,
                           [(2, 3, 8, 48), (3, 1, 1)]),
    # a prologue (a deferred convolution epilogue): each loaded element through a bias per
    # channel and activations, padded positions left out; with windows overlapping (regs),
    # float4 loads and a bias also read after the pool
    "prologue_max2d": (lambda x, b: F.mish(F.max_pool2d(F.hardswish(x + b - 0.5), 2)),
                       [(2, 3, 9, 11), (3, 1, 1)]),
    "prologue_max2d_overlap": (lambda x, b: F.max_pool2d(torch.tanh(x + b.view(1, -1, 1, 1)),
                                                         3, 1, 1), [(2, 3, 10, 13), (3,)]),
    "prologue_avg2d_vec": (lambda x, b: F.avg_pool2d(torch.sigmoid(x * 0.5 + b), 2) + b,
                           [(2, 3, 8, 48), (3, 1, 1)]),
    "prologue_max3d_batch_bias": (lambda x, b, s: F.max_pool3d((x + b) * s, 2),
                                  [(2, 3, 4, 6, 6), (2, 3, 1, 1, 1), (1,)]),
    # padded positions stay out of the prologue (torch pads its result): each of these would
    # differ were the padding value passed through it (sigmoid(0), 0 * b + 1, exp(inf))
    "prologue_avg2d_pad": (lambda x, b: F.avg_pool2d(torch.sigmoid(x + b), 3, 2, 1),
                           [(2, 3, 9, 10), (3, 1, 1)]),
    "prologue_avg2d_pad_exclude": (lambda x, b: F.avg_pool2d(x * b + 1.0, 3, 1, 1,
                                                             count_include_pad=False),
                                   [(2, 3, 7, 9), (3, 1, 1)]),
    "prologue_max2d_pad_decreasing": (lambda x, b: F.max_pool2d(torch.exp(-x - b), 3, 2, 1),
                                      [(2, 3, 9, 10), (3, 1, 1)]),
    "prologue_max1d_unbatched": (lambda x, b: F.max_pool1d(torch.relu(x * b), 3, 2, 1),
                                 [(4, 21), (4, 1)]),
}


SAMPLE = 10  # configurations per case besides the default


@pytest.fixture(scope="module")
def emulated(tmp_path_factory):
    """Every case's default and a sample of its configurations, run on the CPU."""
    if not cpu_exec.available():
        pytest.skip("g++ is not available")
    meta, jobs = [], []
    for name, (f, shapes) in CASES.items():
        sp = space_of(f, *shapes)
        torch.manual_seed(0)
        xs = [torch.randn(*s) for s in shapes]
        xs[0].view(-1)[3] = float("nan")  # max propagates NaN as torch does; avg sums it
        want = f(*[x.double() for x in xs]).float()
        rng = random.Random(name)
        vec = [c for c in sp.configs if c["memory.vec"] == 4]
        assert vec or "vec" not in name  # the vector cases have vector configurations
        for cfg in [sp.default()] + rng.sample(sp.configs, SAMPLE - min(4, len(vec))) + \
                rng.sample(vec, min(4, len(vec))):
            meta.append((name, cfg, want))
            jobs.append((sp.render(cfg), [xs[k] for k in sp.plan.operands], sp.plan.out_shape))
    outs = cpu_exec.run_threadless(jobs, tmp_path_factory.mktemp("emulated"))
    return [(name, cfg, got, want) for (name, cfg, want), got in zip(meta, outs)]


@pytest.mark.parametrize("name", sorted(CASES))
def test_generated_kernels_compute_what_torch_computes(name, emulated):
    runs = [(cfg, got, want) for case, cfg, got, want in emulated if case == name]
    assert len(runs) == SAMPLE + 1
    for cfg, got, want in runs:
        assert torch.allclose(got, want, rtol=1e-5, atol=1e-6, equal_nan=True), \
            f"{cfg.short()}: max error {(got - want).abs().nan_to_num(1e30).max()}"


def test_the_emulator_catches_a_wrong_kernel(tmp_path):
    if not cpu_exec.available():
        pytest.skip("g++ is not available")
    f, shapes = CASES["avg2d_ceil_include_pad"]
    sp = space_of(f, *shapes)
    r = sp.render(sp.default())
    # clip the last window at the input instead of input + padding: off by one row
    wrong = dataclasses.replace(r, source=r.source.replace("min(wb0 + 3, 17)", "min(wb0 + 3, 16)"))
    assert wrong.source != r.source
    x = torch.randn(*shapes[0])
    want = f(x.double()).float()
    good, bad = cpu_exec.run_threadless([(r, [x], sp.plan.out_shape), (wrong, [x], sp.plan.out_shape)],
                          tmp_path)
    assert torch.allclose(good, want, rtol=1e-5, atol=1e-6)
    assert not torch.allclose(bad, want, rtol=1e-5, atol=1e-6)


# -- end to end on the simulated device ----------------------------------------------------------

def test_tune_a_pool_problem_on_sim(tmp_path):
    path = ROOT / "benchmarks" / "problems" / "pool_avg3d_odd.py"
    r = cuda_agent.tune(path, out=tmp_path / "o", device="sim", budget=6, store=":memory:",
                        strategy="random")
    assert r.simulated and r.best is not None and len(r.trials) == 6
    assert "ca_pool" in (tmp_path / "o" / "kernel.cu").read_text()
    times = [t.measurement.time_ms for t in r.trials if t.measurement.time_ms]
    assert len(times) == 6 and max(times) > min(times)
