"""Kernel plans: how a captured graph maps onto one kernel pattern (the (O, R, I) view)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from helpers import GOOD, Fn
from cuda_agent.errors import UnsupportedError
from cuda_agent.ir.capture import capture
from cuda_agent.ir.plan import KernelPlan
from cuda_agent.ir.planning import make_plan
from cuda_agent.problem import load_problem
from cuda_agent.space.templates.rowcommon import make_passes, online_softmax_pair

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "problems"


def plan_of(f, *shapes) -> KernelPlan:
    return make_plan(capture(Fn, [f], lambda: [torch.randn(*s) for s in shapes]))


class LayerNormModel(nn.Module):
    def __init__(self, n: int) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(n)

    def forward(self, x):
        return self.ln(x)


def kinds(plan: KernelPlan) -> list[list[str]]:
    return [[plan.graph[n].attr("kind") for n in lv] for lv in plan.levels]


def test_map_with_broadcast_bias():
    p = plan_of(lambda x, b: torch.relu(x + b) * 2, (37, 1003), (1003,))
    assert (p.kind, p.family) == ("map", "elementwise")
    assert p.full_shape == (37, 1003) and p.reduce_dims == ()
    assert (p.O, p.R, p.I) == (1, 1, 1) and p.numel == 37 * 1003
    assert p.levels == [] and not p.output_is_row
    assert p.operands == [0, 1] and p.operand_shapes == {0: (37, 1003), 1: (1003,)}
    classes = {p.graph[n].op: c for n, c in p.classes.items()}
    assert classes["const"] == "const" and classes["relu"] == "full" and classes["add"] == "full"
    assert p.out_shape == (37, 1003) and p.out_dtype == "float32"


def test_map_bytes_moved_is_hand_count():
    p = plan_of(lambda x, b: torch.relu(x + b) * 2, (37, 1003), (1003,))
    assert p.bytes_moved() == (37 * 1003 + 1003) * 4 + 37 * 1003 * 4


def test_last_dim_reduction():
    p = plan_of(lambda x: x.sum(dim=1), (16, 300))
    assert (p.kind, p.family) == ("reduce", "reduction")
    assert p.full_shape == (16, 300) and p.reduce_dims == (1,)
    assert (p.O, p.R, p.I) == (16, 300, 1)
    assert kinds(p) == [["sum"]] and p.output_is_row
    assert p.out_shape == (16,)
    assert p.bytes_moved() == 16 * 300 * 4 + 16 * 4


def test_middle_dim_reduction():
    p = plan_of(lambda x: x.mean(dim=1), (4, 100, 64))
    assert p.reduce_dims == (1,) and (p.O, p.R, p.I) == (4, 100, 64)
    assert p.output_is_row and p.family == "reduction" and p.out_shape == (4, 64)


def test_dim0_reduction():
    p = plan_of(lambda x: x.amax(dim=0), (300, 37))
    assert p.reduce_dims == (0,) and (p.O, p.R, p.I) == (1, 300, 37)
    assert kinds(p) == [["max"]]


def test_reduction_over_adjacent_dims_merges_them():
    p = plan_of(lambda x: x.sum(dim=(1, 2)), (4, 5, 8))
    assert p.reduce_dims == (1, 2) and (p.O, p.R, p.I) == (4, 40, 1)


def test_softmax_two_levels():
    p = plan_of(lambda x: torch.softmax(x, dim=-1), (33, 257))
    assert (p.kind, p.family) == ("reduce", "softmax")
    assert kinds(p) == [["max"], ["sum"]]
    assert not p.output_is_row and p.out_shape == (33, 257)
    assert (p.O, p.R, p.I) == (33, 257, 1)
    m, s = p.levels[0][0], p.levels[1][0]
    assert p.classes[m] == "row" and p.classes[s] == "row"
    assert p.classes[p.output] == "full"
    # exp(x - max) is a full value: computed per element of a row
    e = p.graph[s].args[0]
    assert p.graph[e].op == "exp" and p.classes[e] == "full"


def test_softmax_middle_dim():
    p = plan_of(lambda x: torch.softmax(x, dim=1), (4, 5, 8))
    assert (p.O, p.R, p.I) == (4, 5, 8) and p.family == "softmax"


def test_layernorm_two_levels_with_parameters():
    g = capture(LayerNormModel, [1004], lambda: [torch.randn(16, 1004)])
    p = make_plan(g)
    assert (p.kind, p.family) == ("reduce", "norm")
    assert kinds(p) == [["sum"], ["sum"]] and not p.output_is_row
    assert (p.O, p.R, p.I) == (16, 1004, 1)
    roles = [g.inputs[k].role for k in p.operands]
    assert sorted(roles) == ["input", "parameter", "parameter"]
    # parameters are read once each: bytes = x + weight + bias + out
    assert p.bytes_moved() == (16 * 1004 * 2 + 2 * 1004) * 4


def test_frobenius_reduces_all_dims():
    p = plan_of(lambda x: x / torch.norm(x, p="fro"), (33, 65))
    assert p.reduce_dims == (0, 1) and (p.O, p.R, p.I) == (1, 33 * 65, 1)
    assert p.family == "norm" and not p.output_is_row and kinds(p) == [["sum"]]
    assert p.out_shape == (33, 65)


def test_argmax_index_output():
    p = plan_of(lambda x: x.argmax(dim=-1), (8, 77))
    assert p.family == "reduction" and p.output_is_row
    assert p.out_dtype == "int64" and p.is_index_output()
    assert kinds(p) == [["argmax"]]
    assert p.bytes_moved() == 8 * 77 * 4 + 8 * 8


def test_full_reduction_to_scalar():
    p = plan_of(lambda x: x.mean(), (4, 5, 8))
    assert p.reduce_dims == (0, 1, 2) and (p.O, p.R, p.I) == (1, 160, 1)
    assert p.out_shape == () and p.output_is_row
    assert p.bytes_moved() == 160 * 4 + 4


def test_two_reductions_one_level():
    p = plan_of(lambda x, y: x.sum(1) + y.amax(1), (8, 77), (8, 77))
    assert len(p.levels) == 1 and sorted(kinds(p)[0]) == ["max", "sum"]


def test_flops_counts_per_element():
    p = plan_of(lambda x: torch.relu(x) * 2, (10, 10))
    assert p.flops() == 2 * 100  # relu and mul, each once per element


# -- online softmax detection -----------------------------------------------------------------------

def test_online_pair_softmax():
    p = plan_of(lambda x: torch.softmax(x, dim=-1), (33, 257))
    m, s = p.levels[0][0], p.levels[1][0]
    assert online_softmax_pair(p) == (m, s, p.graph[m].args[0])
    online = make_passes(p, True)
    assert online[0].online == (m, s) and online[-1].writes_output
    assert len(make_passes(p, False)) == 3  # max pass, sum pass, output pass


@pytest.mark.parametrize("f", [
    lambda x: F.log_softmax(x * 2, dim=1),
    lambda x: torch.logsumexp(x, dim=1),
])
def test_online_pair_detected_through_composites(f):
    p = plan_of(f, (8, 77))
    pair = online_softmax_pair(p)
    assert pair is not None
    m, s, body = pair
    assert p.graph[m].attr("kind") == "max" and p.graph[s].attr("kind") == "sum"
    assert p.graph[m].args[0] == body


@pytest.mark.parametrize("f", [
    lambda x: torch.exp((x - x.amax(1, keepdim=True)) * 2).sum(1),  # scaled before exp
    lambda x: F.layer_norm(x, (77,)),  # sum, sum
    lambda x: x.sum(1),  # one level
    lambda x: torch.exp(x - x.amin(1, keepdim=True)).sum(1),  # min, not max
])
def test_online_pair_not_detected(f):
    assert online_softmax_pair(plan_of(f, (8, 77))) is None


# -- unsupported patterns ---------------------------------------------------------------------------

@pytest.mark.parametrize("f,shapes,words", [
    (lambda x: x - x.mean(0, keepdim=True) + x.mean(1, keepdim=True), [(8, 77)],
     "different"),
    (lambda x, y: x.sum(1) + y.sum(1), [(8, 77), (8, 76)], "different"),
    # (0, 2) of (4, 5, 8) is a chanreduce (batch statistics); (1, 3) keeps no single run
    (lambda x: x.sum(dim=(1, 3)), [(4, 5, 6, 8)], "non-adjacent"),
    # a total over rows (the mean of the row means) broadcast back over the rows
    (lambda x: x - x.mean(1, keepdim=True).mean(0, keepdim=True), [(8, 77)], "cross-row"),
])
def test_unsupported_patterns(f, shapes, words):
    with pytest.raises(UnsupportedError, match=words):
        plan_of(f, *shapes)


def test_output_that_is_only_a_view_of_the_input_is_unsupported():
    with pytest.raises(UnsupportedError):
        plan_of(lambda x: x.sum(dim=1), (4, 1, 8))


def test_broadcast_row_output_is_rejected_or_covered():
    try:
        p = plan_of(lambda x: x.sum(1, keepdim=True).expand(8, 77) * 1.0, (8, 77))
    except UnsupportedError:
        return
    assert not p.output_is_row or math.prod(p.out_shape) == p.O * p.I


# -- real problem files -----------------------------------------------------------------------------

@pytest.mark.parametrize("name,family", [("relu_small", "elementwise"),
                                         ("softmax_small", "softmax"),
                                         ("sum_small", "reduction")])
def test_good_problems_plan(name, family):
    prob = load_problem(GOOD / f"{name}.py")
    assert make_plan(prob.graph()).family == family


EXPECTED_FAMILY = {"elementwise": "elementwise", "norm": "norm", "reduce": "reduction",
                   "loss": "reduction",  # losses are reductions in the kernel's structure
                   "softmax": "softmax", "normstat": "norm",
                   "pool": "pool", "scan": "scan", "gemm": "gemm", "attention": "attention",
                   "conv1d": "conv", "conv2d": "conv", "conv3d": "conv",
                   "conv": "conv",  # conv_transpose*
                   "fused": None}  # fused chains span every family
# products with a vector side are row/column reductions, a diagonal matrix is a scaling
EXPECTED_BY_NAME = {"gemm_matvec": "reduction", "gemm_vecmat": "reduction",
                    "gemm_diag_scale": "elementwise"}


@pytest.mark.parametrize("path", sorted(BENCH.glob("*.py")), ids=lambda p: p.stem)
def test_benchmark_problems_plan_on_meta(path):
    """Benchmark problems are GBs on a GPU; capture runs on meta tensors so planning is cheap."""
    prob = load_problem(path)
    p = make_plan(prob.graph())
    expected = EXPECTED_BY_NAME.get(path.stem, EXPECTED_FAMILY[path.stem.split("_")[0]])
    assert expected is None or p.family == expected
    assert p.numel >= 1 and p.bytes_moved() > 0


@pytest.mark.parametrize("f, matters", [
    (lambda x: (x - 1.0) ** 2, False),  # x * x either way
    (lambda x: torch.erf(x) + 1.0, False),  # erff has no fast form
    (lambda x: torch.relu(x) * 2.0, False),
    (lambda x: torch.exp(x), True),  # __expf
    (lambda x: x / (x.abs() + 1.0), True),  # __fdividef
    (lambda x: torch.softmax(x, -1), True),
])
def test_fast_math_matters_only_where_an_operation_has_a_fast_form(f, matters):
    assert plan_of(f, (8, 32)).fast_math_matters() is matters
