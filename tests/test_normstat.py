"""Norms with statistics (instance, group and batch norm): the lowering matches torch (checked
with the IR interpreter of test_capture), each plans onto the template family it should, and
sampled configurations of every normstat benchmark problem compile with NVRTC.

Modules are captured in the mode Model(*get_init_inputs()) leaves them in: an nn.BatchNorm
module in training mode (the default) normalises by the batch's statistics and updates its
running statistics (a program whose statistics stay in buffers, test_train_mode.py), one whose
constructor calls .eval() by its running statistics (an elementwise map).
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from cuda_agent.build.builder import Builder, BuildInput
from cuda_agent.errors import UnsupportedError
from cuda_agent.ir.capture import capture
from cuda_agent.ir.plan import CHAN_REDUCE
from cuda_agent.ir.planning import make_plan
from cuda_agent.problem import load_problem
from cuda_agent.space import codegen as cg
from cuda_agent.space.slots import Target
from cuda_agent.space.space import Space
from cuda_agent.space.templates.chan import channel_runs
from helpers import Fn, covered_values, covering_sample, nvrtc_available
from test_capture import graph_tensors, interpret

ROOT = Path(__file__).resolve().parents[1]
BENCH = sorted((ROOT / "benchmarks" / "problems").glob("normstat_*.py"))
TARGET = Target()


class Wrap(nn.Module):
    """A norm module built from (class name, args, kwargs), with non-trivial parameters."""

    def __init__(self, name: str, args: tuple, kwargs: dict, mode: str = "train") -> None:
        super().__init__()
        self.norm = getattr(nn, name)(*args, **kwargs)
        with torch.no_grad():
            for p in self.norm.parameters():
                p.copy_(torch.randn_like(p))
            for b in self.norm.buffers():
                if b.is_floating_point():  # running statistics: a positive variance
                    b.copy_(torch.rand_like(b) + 0.5)
        if mode == "eval":
            self.eval()  # held in eval mode by its own constructor: captured so

    def forward(self, x):
        return self.norm(x)


class BatchStats(nn.Module):
    """F.batch_norm with batch statistics and an optional per-channel affine."""

    def __init__(self, c: int, affine: bool, eps: float = 1e-5) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(c)) if affine else None
        self.b = nn.Parameter(torch.randn(c)) if affine else None
        self.eps = eps

    def forward(self, x):
        return F.batch_norm(x, None, None, self.w, self.b, training=True, eps=self.eps)


class FunctionalNorms(nn.Module):
    """F.group_norm (groups > 0) or F.instance_norm (groups == 0) with parameters, then
    elementwise ops with scalars (computed before group norm's final reshape)."""

    def __init__(self, c: int, groups: int) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(c))
        self.b = nn.Parameter(torch.randn(c))
        self.groups = groups

    def forward(self, x):
        if self.groups == 0:
            return torch.relu(F.instance_norm(x, weight=self.w, bias=self.b, eps=1e-3))
        return 1.0 - F.silu(F.group_norm(x, self.groups, self.w, self.b, eps=1e-3) * 2.0)


# name -> (module class, init args, input shape, expected plan kind)
CASES = {
    "instance1d": (Wrap, ("InstanceNorm1d", (6,), {}), (3, 6, 17), "reduce"),
    "instance1d_affine": (Wrap, ("InstanceNorm1d", (6,), {"affine": True}), (3, 6, 17), "reduce"),
    "instance2d": (Wrap, ("InstanceNorm2d", (5,), {}), (2, 5, 7, 9), "reduce"),
    "instance2d_affine": (Wrap, ("InstanceNorm2d", (5,), {"affine": True, "eps": 1e-3}),
                          (2, 5, 7, 9), "reduce"),
    # C equals the last dim: the (C,) weight must still run along dim 1, not the last dim
    "instance2d_affine_c_eq_w": (Wrap, ("InstanceNorm2d", (8,), {"affine": True}),
                                 (2, 8, 3, 8), "reduce"),
    "instance3d_affine": (Wrap, ("InstanceNorm3d", (4,), {"affine": True}), (2, 4, 3, 5, 6),
                          "reduce"),
    "instance2d_running": (Wrap, ("InstanceNorm2d", (5,), {"track_running_stats": True},
                                  "eval"), (2, 5, 7, 9), "map"),
    "group": (Wrap, ("GroupNorm", (3, 12), {}), (2, 12, 5, 7), "reduce"),
    "group_no_affine": (Wrap, ("GroupNorm", (4, 8), {"affine": False}), (3, 8, 9), "reduce"),
    "group_per_channel": (Wrap, ("GroupNorm", (6, 6), {}), (2, 6, 5, 5), "reduce"),
    "group_one": (Wrap, ("GroupNorm", (1, 6), {"eps": 1e-2}), (2, 6, 5, 6), "reduce"),
    "group_2d_input": (Wrap, ("GroupNorm", (2, 8), {}), (5, 8), "reduce"),
    "group_functional": (FunctionalNorms, (12, 4), (2, 12, 3, 5), "reduce"),
    "instance_functional": (FunctionalNorms, (12, 0), (2, 12, 3, 5), "reduce"),
    "batch2d": (BatchStats, (6, True), (4, 6, 5, 7), CHAN_REDUCE),
    "batch2d_no_affine": (BatchStats, (6, False), (4, 6, 5, 7), CHAN_REDUCE),
    "batch1d_3d_input": (BatchStats, (7, True), (5, 7, 11), CHAN_REDUCE),
    "batch1d_2d_input": (BatchStats, (7, True), (9, 7), "reduce"),  # col: dim 0 only
    "batch2d_n1": (BatchStats, (6, True), (1, 6, 5, 7), "reduce"),  # row: S only
    "batch3d": (BatchStats, (3, True, 1e-3), (2, 3, 4, 5, 6), CHAN_REDUCE),
    "batchnorm2d_module_eval": (Wrap, ("BatchNorm2d", (6,), {}, "eval"), (4, 6, 5, 7), "map"),
    # training mode: batch statistics, kept in buffers for the running-statistics update
    "batchnorm2d_module_train": (Wrap, ("BatchNorm2d", (6,), {}), (4, 6, 5, 7), "program"),
    "batchnorm1d_module_train": (Wrap, ("BatchNorm1d", (7,), {}), (9, 7), "program"),
}


def _build(case: str) -> tuple[type, tuple, tuple]:
    cls, init, shape, _ = CASES[case]
    return cls, init, shape


def _kind(case: str) -> str:
    return CASES[case][-1]


@pytest.mark.parametrize("case", sorted(CASES))
def test_lowering_matches_torch_and_plans(case):
    cls, init, shape = _build(case)
    torch.manual_seed(0)
    model = cls(*init).double()  # in the mode its constructor leaves it in, as captured
    g = capture(cls, list(init), lambda: [torch.randn(*shape)])
    for _ in range(3):
        x = torch.randn(*shape, dtype=torch.float64) * 3 + 1
        with torch.no_grad():
            want = model(x)
            got = interpret(g, graph_tensors(g, model, [x]))
        torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-9)
    plan = make_plan(g)
    assert plan.kind == _kind(case)
    if plan.kind == "program":
        if plan.program.stages[0].graph.sides:  # one stage: the norm, statistics on the side
            assert plan.family == "norm" and len(plan.program.stages[0].graph.sides) == 2
        else:  # (N, C) statistics are columns, no chan plan: the mean, the variance, the rest
            assert plan.family == "reduction+reduction+elementwise" and len(shape) == 2
        return
    want_family = "elementwise" if plan.kind == "map" else "norm"
    assert plan.family == want_family
    if plan.kind != "map":
        assert plan.O * plan.R * plan.I == plan.numel


def test_batch_stats_plan_is_channels_around_the_batch():
    cls, init, shape = _build("batch2d")
    plan = make_plan(capture(cls, list(init), lambda: [torch.randn(*shape)]))
    assert plan.reduce_dims == (0, 2, 3) and (plan.O, plan.R, plan.I) == (6, 4 * 35, 1)
    sp = Space.for_plan(plan, TARGET)
    assert {t.name for t in sp.templates} == {"chan"}
    # the per-channel weight is read once per channel, as a (C, 1, 1) view
    w = [k for k in plan.operands if plan.graph.inputs[k].role == "parameter"]
    assert [plan.operand_shapes[k] for k in w] == [(6, 1, 1), (6, 1, 1)]


def test_weight_view_runs_along_channels_when_c_equals_w():
    cls, init, shape = _build("instance2d_affine_c_eq_w")
    plan = make_plan(capture(cls, list(init), lambda: [torch.randn(*shape)]))
    for k in plan.operands:
        if plan.graph.inputs[k].role == "parameter":
            nid = cg.operand_node(plan, k)
            assert plan.fmaps[nid] == (1, None, None)
            assert cg.offset_expr(plan, nid, [cg.Group("o", (0, 1))]) == "(o % 8)"


def test_reduction_over_batch_and_positions_is_a_chan_reduction():
    plan = make_plan(capture(Fn, [lambda x: x.sum(dim=(0, 2)) * 0.5],
                             lambda: [torch.randn(4, 5, 8)]))
    assert plan.kind == CHAN_REDUCE and plan.family == "reduction" and plan.O == 5


@pytest.mark.parametrize("f", [
    lambda x: x.sum(dim=(1, 3)),  # kept dims 0 and 2: no single kept run
    # statistics over (N, S) mixed with one over C: two kernels
    lambda x: x.sum(dim=(0, 2, 3), keepdim=True) * x.sum(dim=1, keepdim=True),
])
def test_other_non_adjacent_reductions_stay_unsupported(f):
    g = capture(Fn, [f], lambda: [torch.randn(4, 5, 6, 8)])
    with pytest.raises(UnsupportedError):
        make_plan(g)


def test_group_norm_then_a_tensor_operand_is_reported():
    """Group norm computes in (N, G, C/G, S); adding an (N, C, H, W) tensor after it needs the
    result reshaped in the middle of the kernel, which is reported, not faked."""
    class Residual(nn.Module):
        def forward(self, x, r):
            return F.group_norm(x, 2) + r
    g = capture(Residual, [], lambda: [torch.randn(2, 4, 3, 5), torch.randn(2, 4, 3, 5)])
    with pytest.raises(UnsupportedError, match="reshape"):
        make_plan(g)


def test_group_norm_with_indivisible_groups_is_reported():
    # torch itself rejects this at construction; the lowering's check is for traced graphs
    class Bad(nn.Module):
        def forward(self, x):
            return torch.ops.aten.group_norm(x, 5, None, None, 1e-5, False)
    with pytest.raises(Exception):
        make_plan(capture(Bad, [], lambda: [torch.randn(2, 12, 3)]))


# -- benchmark problems: plan and compile ----------------------------------------------------------

@pytest.mark.parametrize("path", BENCH, ids=lambda p: p.stem)
def test_benchmark_problem_plans_as_norm(path):
    plan = make_plan(load_problem(path).graph())
    assert plan.family == "norm"
    sp = Space.for_plan(plan, TARGET)
    assert len(sp) >= 50
    assert sp.check(sp.default()) is None
    if "batchnorm" in path.stem:
        # a block per channel (the untuned baseline), or several blocks sharing one
        assert [t.name for t in sp.templates] == ["chan", "split"]
        assert sp.template_of(sp.default()).name == "chan"


SMALL_CHAN = {  # extra chan shapes: two kept dims, a reduction output, a broadcast operand
    "kept_two_dims": (lambda x: F.batch_norm(x.reshape(3, 12, 10), None, None, training=True)
                      .reshape(3, 4, 3, 10), (3, 4, 3, 10)),
    "sum_outer_inner": (lambda x: x.sum(dim=(0, 2)), (6, 9, 33)),
    "mean_keepdim_scale": (lambda x, s: (x * s).mean(dim=(0, 2, 3), keepdim=True),
                           (5, 3, 4, 8), (5, 1, 1, 8)),
}


def _spaces() -> list[tuple[str, Space]]:
    out = [(p.stem, Space.for_plan(make_plan(load_problem(p).graph()), TARGET)) for p in BENCH]
    for name, (f, *shapes) in SMALL_CHAN.items():
        g = capture(Fn, [f], lambda shapes=shapes: [torch.randn(*s) for s in shapes])
        out.append((name, Space.for_plan(make_plan(g), TARGET)))
    return out


@pytest.mark.skipif(not nvrtc_available(), reason="NVRTC is not available")
def test_sampled_configs_compile(tmp_path):
    items = []
    for name, sp in _spaces():
        by_template: dict[str, list] = {}
        for cfg in sp.configs:
            by_template.setdefault(sp.template_of(cfg).name, []).append(cfg)
        for tname, cfgs in by_template.items():
            # every value each slot takes in the template's configurations, at least once
            # (the default first), not a random twelve
            picked = covering_sample(cfgs, sp.default(), f"{name}/{tname}")
            assert not covered_values(picked, cfgs), (name, tname)
            items += [(f"{name}/{tname}: {c.short()}", sp.render(c)) for c in picked]
    with Builder("nvrtc", workers=2, cache_dir=tmp_path) as b:
        results = b.build([BuildInput(r.source, TARGET.arch) for _, r in items])
    failures = [f"{what}: {res.error_kind}: {res.error_msg}"
                for (what, _), res in zip(items, results) if not res.ok]
    assert not failures, "\n".join(failures[:5])
    chan = [r for what, r in items if "/chan:" in what]
    assert chan and all(L.threads <= 1024 and L.grid[0] >= 1 for r in chan for L in r.launches)


@pytest.mark.parametrize("f,shapes", [
    (lambda x: x.sum(dim=(0, 3)), [(3, 4, 5, 6)]),  # two kept dims
    (lambda x, s: (x * s).mean(dim=(0, 2, 3), keepdim=True), [(5, 3, 4, 8), (5, 1, 1, 8)]),
    (lambda x, w: F.batch_norm(x, None, None, w, None, training=True), [(2, 6, 3, 6), (6,)]),
], ids=["two_kept", "broadcast_operand", "weight_c_eq_w"])
def test_chan_offsets_address_the_element_of_f(f, shapes):
    """The chan template reads operand k at offset_expr(groups a, o, b) with a, o, b the flat
    indices of the leading, kept and trailing runs of F: that must be the operand's element
    at that point of F, for every point (the C divisions and remainders evaluated here)."""
    plan = make_plan(capture(Fn, [f], lambda: [torch.randn(*s) for s in shapes]))
    assert plan.kind == CHAN_REDUCE
    lead, kept, trail = channel_runs(plan)
    F_ = plan.full_shape
    groups = [cg.Group("a", lead), cg.Group("o", kept), cg.Group("b", trail)]
    for k in plan.operands:
        nid = cg.operand_node(plan, k)
        shape, fmap = plan.graph[nid].shape, plan.fmaps[nid]
        strides = [math.prod(shape[j + 1:]) for j in range(len(shape))]
        expr = cg.offset_expr(plan, nid, groups).replace("/", "//")
        for point in itertools.product(*(range(s) for s in F_)):
            a = 0
            for d in lead:
                a = a * F_[d] + point[d]
            o = 0
            for d in kept:
                o = o * F_[d] + point[d]
            b = 0
            for d in trail:
                b = b * F_[d] + point[d]
            want = sum(point[fd] * st for fd, st in zip(fmap, strides) if fd is not None)
            assert eval(expr, {}, {"a": a, "o": o, "b": b}) == want, (k, expr, point)
