"""Capture: lowering of each op family to the IR, and a numerical check of the lowering.

The package has no IR interpreter, so this file carries a small one (`interpret`): it evaluates
the graph's nodes with torch ops, following the semantics of `cuda_agent/ir/ops.py` by op name,
and the result must match the torch program on random inputs. That guards the expansions
(softmax = exp(x - max) / sum, layer norm, var/std, vector norms, ...), which every template
and the verifier's reference trust.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from helpers import Fn
from cuda_agent.errors import ProblemError, UnsupportedError
from cuda_agent.ir.capture import capture
from cuda_agent.ir.graph import Graph
from cuda_agent.ir.ops import BINARY, TERNARY, UNARY


def cap(f, *shapes, dtype=torch.float32) -> Graph:
    return capture(Fn, [f], lambda: [torch.randn(*s, dtype=dtype) for s in shapes])


def live_ops(g: Graph) -> list[str]:
    return [n.op for n in g.live()]


def reduces(g: Graph):
    return [n for n in g.live() if n.op == "reduce"]


def out(g: Graph):
    return g[g.output]


# -- a tiny IR interpreter -------------------------------------------------------------------------

def _unary(op: str, x: torch.Tensor, a: dict) -> torch.Tensor:
    if op == "relu":
        return torch.where(x < 0, torch.zeros_like(x), x)
    if op == "gelu":
        return 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))
    if op == "gelu_tanh":
        return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    if op == "silu":
        return x / (1 + torch.exp(-x))
    if op == "sigmoid":
        return 1 / (1 + torch.exp(-x))
    if op == "tanh":
        return torch.tanh(x)
    if op == "softplus":
        beta, thr = a.get("beta", 1.0), a.get("threshold", 20.0)
        return torch.where(x * beta > thr, x, torch.log1p(torch.exp(x * beta)) / beta)
    if op == "elu":
        alpha, scale, ins = a.get("alpha", 1.0), a.get("scale", 1.0), a.get("input_scale", 1.0)
        return torch.where(x > 0, x * scale, alpha * scale * torch.expm1(x * ins))
    if op == "hardtanh":
        return torch.clamp(x, a.get("min_val", -1.0), a.get("max_val", 1.0))
    if op == "leaky_relu":
        return torch.where(x > 0, x, x * a.get("negative_slope", 0.01))
    if op == "hardsigmoid":
        return torch.clamp(x / 6 + 0.5, 0, 1)
    if op == "hardswish":
        return x * torch.clamp(x + 3, 0, 6) / 6
    if op == "mish":
        return x * torch.tanh(torch.where(x > 20, x, torch.log1p(torch.exp(x))))
    if op == "pow_scalar":
        return x ** a["exponent"]
    if op == "clamp":
        return torch.clamp(x, a.get("min"), a.get("max"))
    if op == "to_float":
        return x.to(torch.float64)
    if op in ("round_f16", "round_bf16"):  # a cast to half precision: the value rounded
        return x.to(torch.float16 if op == "round_f16" else torch.bfloat16).to(x.dtype)
    if op == "logical_not":
        return ~x.bool()
    if op == "identity":
        return x
    if op == "sign":
        return torch.sign(x)
    if op == "reciprocal":
        return 1 / x
    if op == "neg":
        return -x
    return getattr(torch, op)(x)  # abs exp log log2 log1p expm1 sqrt rsqrt sin cos erf ...


_BINARY = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div,
    "maximum": torch.maximum, "minimum": torch.minimum, "pow": torch.pow,
    "gt": torch.gt, "lt": torch.lt, "ge": torch.ge, "le": torch.le, "eq": torch.eq, "ne": torch.ne,
    "logical_and": torch.logical_and, "logical_or": torch.logical_or,
}


def _reduce(kind: str, x: torch.Tensor, dims: tuple, keepdim: bool) -> torch.Tensor:
    if kind in ("sum", "prod", "max", "min"):
        if kind == "sum":
            return x.sum(dim=dims, keepdim=keepdim)
        if kind == "max":
            return x.amax(dim=dims, keepdim=keepdim)
        if kind == "min":
            return x.amin(dim=dims, keepdim=keepdim)
        y = x
        for d in sorted(dims, reverse=True):
            y = y.prod(dim=d, keepdim=True)
        return y if keepdim else y.reshape([s for k, s in enumerate(x.shape) if k not in dims])
    # arg-reductions over a run of adjacent dims: flatten the run, index into it
    assert list(dims) == list(range(dims[0], dims[-1] + 1)), dims
    lead, run = x.shape[:dims[0]], x.shape[dims[0]:dims[-1] + 1]
    flat = x.reshape(*lead, math.prod(run), *x.shape[dims[-1] + 1:])
    idx = (flat.argmax if kind == "argmax" else flat.argmin)(dim=dims[0], keepdim=True)
    shape = [1 if k in dims else s for k, s in enumerate(x.shape)] if keepdim else \
        [s for k, s in enumerate(x.shape) if k not in dims]
    return idx.reshape(shape)


def interpret(g: Graph, tensors: list[torch.Tensor]) -> torch.Tensor:
    """Evaluate `g` on `tensors` (graph inputs in graph order), in float64."""
    env: dict[int, torch.Tensor] = {}
    for n in g.nodes:
        a = dict(n.attrs)
        args = [env[i] for i in n.args]
        if n.op == "input":
            v = tensors[a["index"]].to(torch.float64)
        elif n.op == "const":
            v = torch.tensor(a["value"], dtype=torch.float64)
        elif n.op == "reduce":
            v = _reduce(a["kind"], args[0], a["dims"], a["keepdim"])
        elif n.op == "view":
            v = args[0].reshape(n.shape)
        elif n.op == "iota":
            v = torch.arange(n.shape[a["dim"]]).reshape(n.shape)
        elif n.op in UNARY:
            v = _unary(n.op, args[0], a)
        elif n.op in BINARY:
            v = _BINARY[n.op](args[0], args[1])
        elif n.op in TERNARY:
            v = torch.where(args[0].bool(), args[1], args[2])
        else:
            raise AssertionError(f"interpreter: unknown op {n.op}")
        if n.op not in ("input", "const") and v.dtype.is_floating_point:
            v = v.to(torch.float64)
        v = v.expand(n.shape) if tuple(v.shape) != n.shape else v
        assert tuple(v.shape) == n.shape, (n, tuple(v.shape))
        env[n.id] = v
    return env[g.output]


def graph_tensors(g: Graph, model: nn.Module, args: list[torch.Tensor]) -> list[torch.Tensor]:
    out = []
    for gin in g.inputs:
        if gin.role == "input":
            out.append(args[gin.arg_index])
        elif gin.role == "parameter":
            out.append(model.get_parameter(gin.target))
        else:
            out.append(model.get_buffer(gin.target))
    return out


class LayerNormModel(nn.Module):
    def __init__(self, n: int) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(n)

    def forward(self, x):
        return self.ln(x)


class RMSNormModel(nn.Module):
    def __init__(self, n: int) -> None:
        super().__init__()
        self.norm = nn.RMSNorm(n, eps=1e-6)

    def forward(self, x):
        return self.norm(x) * 2.0


def _fn(f):
    return (Fn, [f])


# name -> ((module class, init args), input shapes, positive inputs?)
NUMERIC = {
    # numbers forward() makes tensors of (KernelBench level 2 #93), and min/max of two tensors
    "min_with_tensor_of_number": (_fn(lambda x: F.gelu(torch.min(x - 0.1, torch.tensor(
        0.0, device=x.device))) * torch.tensor(2)), [(4, 3, 5)], False),
    "max_of_two_tensors": (_fn(lambda x, y: torch.max(x, y) + torch.max(x, torch.tensor(
        0.25, dtype=torch.float32))), [(3, 8), (3, 8)], False),
    "act_chain": (_fn(lambda x: F.gelu(F.softplus(x, beta=2.0, threshold=3.0)) + F.elu(x, 0.7)),
                  [(7, 33)], False),
    "gelu_tanh_leaky": (_fn(lambda x: F.leaky_relu(F.gelu(x, approximate="tanh"), 0.2)),
                        [(5, 19)], False),
    "hardtanh_selu_silu": (_fn(lambda x: F.hardtanh(F.selu(x), -0.5, 0.8) + F.silu(x)),
                           [(3, 4, 5)], False),
    "broadcast_scalars": (_fn(lambda x, b: (x + b) * 2.0 - 1.0 / (b.abs() + 1) + 3),
                          [(6, 10), (10,)], False),
    "column_bias_where": (_fn(lambda x, c: torch.where(x > c, x - c, 0.1 * (x - c))),
                          [(6, 10), (6, 1)], False),
    "softmax": (_fn(lambda x: torch.softmax(x, dim=-1)), [(9, 31)], False),
    "log_softmax_mid": (_fn(lambda x: F.log_softmax(x, dim=1)), [(3, 17, 5)], False),
    "layer_norm_params": ((LayerNormModel, [24]), [(6, 24)], False),
    "rms_norm": ((RMSNormModel, [16]), [(5, 16)], False),
    "var_std": (_fn(lambda x: x.var(dim=1) + torch.std(x, dim=1, correction=0)), [(8, 13)], False),
    "std_unbiased_false": (_fn(lambda x: x.std(dim=-1, unbiased=False, keepdim=True) + x),
                           [(8, 13)], False),
    "mish_hardswish_sigmoid": (_fn(lambda x: F.mish(x) + F.hardswish(x) * torch.sigmoid(x)),
                               [(6, 11)], False),
    "frobenius": (_fn(lambda x: x / torch.norm(x, p="fro")), [(11, 7)], False),
    "norm_inf": (_fn(lambda x: torch.norm(x, p=float("inf"), dim=1)), [(4, 9)], False),
    "norm_1": (_fn(lambda x: torch.norm(x, p=1, dim=-1, keepdim=True)), [(4, 9)], False),
    "prod_amin": (_fn(lambda x: x.prod(dim=0) + x.amin(dim=0)), [(5, 8)], False),
    "mean_middle": (_fn(lambda x: x.mean(dim=1)), [(4, 6, 5)], False),
    "max_values": (_fn(lambda x: x.max(dim=-1).values - x.min(dim=-1)[0]), [(6, 12)], False),
    "log_sqrt_pos": (_fn(lambda x: torch.log(x) + torch.sqrt(x) * torch.rsqrt(x + 1)),
                     [(4, 8)], True),
    "pow_clamp": (_fn(lambda x: torch.clamp(x, -0.5, 0.5) ** 2 + x.abs() ** 1.5), [(4, 8)],
                  False),
    "logsumexp": (_fn(lambda x: torch.logsumexp(x, dim=1)), [(4, 8)], False),
    "size1_dim_sum": (_fn(lambda x: x.sum(dim=(1, 2))), [(4, 1, 8)], False),
}

INDEX_NUMERIC = {
    "argmax_last": (_fn(lambda x: x.argmax(dim=-1)), [(6, 13)]),
    "argmin_mid": (_fn(lambda x: torch.argmin(x, dim=1, keepdim=True)), [(3, 7, 4)]),
    "max_indices": (_fn(lambda x: x.max(dim=1)[1]), [(5, 9)]),
    "argmax_all": (_fn(lambda x: x.argmax()), [(5, 9)]),
}


@pytest.mark.parametrize("name", sorted(NUMERIC))
def test_lowering_matches_torch(name):
    (cls, init), shapes, positive = NUMERIC[name]
    torch.manual_seed(0)
    model = cls(*init).double().eval()
    for p in model.parameters():  # non-trivial parameters: a lowering that drops one fails
        with torch.no_grad():
            p.copy_(torch.randn_like(p))
    g = capture(cls, init, lambda: [torch.randn(*s) for s in shapes])
    for trial in range(3):
        args = [torch.randn(*s, dtype=torch.float64) for s in shapes]
        if positive:
            args = [a.abs() + 0.1 for a in args]
        with torch.no_grad():
            want = model(*args)
            got = interpret(g, graph_tensors(g, model, args))
        assert got.shape == want.shape, name
        torch.testing.assert_close(got, want.to(torch.float64), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("name", sorted(INDEX_NUMERIC))
def test_index_lowering_matches_torch(name):
    (cls, init), shapes = INDEX_NUMERIC[name]
    model = cls(*init)
    g = capture(cls, init, lambda: [torch.randn(*s) for s in shapes])
    assert out(g).dtype == "int64"
    for _ in range(3):
        args = [torch.randn(*s, dtype=torch.float64) for s in shapes]
        want = model(*args)
        got = interpret(g, args)
        assert got.dtype == torch.int64 and torch.equal(got, want), name


def test_interpreter_catches_a_wrong_lowering():
    """The numerical check can fail: a softmax graph with the max subtraction dropped differs
    from torch on inputs large enough to overflow exp, and a swapped reduction kind differs."""
    g = cap(lambda x: torch.softmax(x, dim=-1), (4, 8))
    x = torch.randn(4, 8, dtype=torch.float64)
    ok = interpret(g, [x])
    torch.testing.assert_close(ok, torch.softmax(x, -1))
    # the same graph with its sum turned into a max must not match
    bad = Graph(list(g.nodes), list(g.inputs), g.output)
    s = [n for n in bad.nodes if n.op == "reduce" and n.attr("kind") == "sum"][0]
    bad.nodes[s.id] = type(s)(s.id, s.op, s.args, s.shape, s.dtype,
                              tuple((k, "max" if k == "kind" else v) for k, v in s.attrs))
    assert not torch.allclose(interpret(bad, [x]), torch.softmax(x, -1))


# -- structure of the lowering, op family by op family ------------------------------------------

@pytest.mark.parametrize("f,op,attrs", [
    (lambda x: torch.relu(x), "relu", {}),
    (lambda x: F.gelu(x), "gelu", {}),
    (lambda x: F.gelu(x, approximate="tanh"), "gelu_tanh", {}),
    (lambda x: F.softplus(x, beta=2.0, threshold=5.0), "softplus",
     {"beta": 2.0, "threshold": 5.0}),
    (lambda x: F.elu(x, alpha=0.5), "elu", {"alpha": 0.5}),
    (lambda x: F.hardtanh(x, -0.5, 0.7), "hardtanh", {"min_val": -0.5, "max_val": 0.7}),
    (lambda x: F.relu6(x), "hardtanh", {"min_val": 0.0, "max_val": 6.0}),
    (lambda x: F.leaky_relu(x, 0.2), "leaky_relu", {"negative_slope": 0.2}),
    (lambda x: torch.sigmoid(x), "sigmoid", {}),
    (lambda x: torch.tanh(x), "tanh", {}),
    (lambda x: F.silu(x), "silu", {}),
    (lambda x: F.mish(x), "mish", {}),
    (lambda x: F.hardswish(x), "hardswish", {}),
])
def test_activation_lowers_to_one_unary(f, op, attrs):
    g = cap(f, (4, 8))
    n = out(g)
    assert n.op == op and n.shape == (4, 8) and n.dtype == "float32"
    assert g[n.args[0]].op == "input"
    for k, v in attrs.items():
        assert n.attr(k) == pytest.approx(v), k


def test_binary_broadcast_and_scalars():
    g = cap(lambda x, b: (x + b) * 2.5 - 1.0, (4, 8), (8,))
    ops = live_ops(g)
    assert ops.count("input") == 2 and {"add", "mul", "sub"} <= set(ops)
    add = [n for n in g.live() if n.op == "add"][0]
    assert add.shape == (4, 8) and [g[a].shape for a in add.args] == [(4, 8), (8,)]
    consts = sorted(n.attr("value") for n in g.live() if n.op == "const")
    assert consts == [1.0, 2.5]
    assert out(g).shape == (4, 8)


def test_rsub_and_alpha():
    g = cap(lambda x, y: torch.sub(x, y, alpha=3.0), (4, 8), (4, 8))
    x, y = torch.randn(4, 8, dtype=torch.float64), torch.randn(4, 8, dtype=torch.float64)
    torch.testing.assert_close(interpret(g, [x, y]), x - 3 * y)
    g = cap(lambda x: 1 - x, (4, 8))
    torch.testing.assert_close(interpret(g, [x]), 1 - x)


def test_comparison_where_is_bool_then_float():
    g = cap(lambda x: torch.where(x > 0, x, 0.1 * x), (4, 8))
    gt = [n for n in g.live() if n.op == "gt"][0]
    assert gt.dtype == "bool" and out(g).op == "where" and out(g).dtype == "float32"


@pytest.mark.parametrize("f,kind,dims,keep,shape", [
    (lambda x: x.sum(dim=1), "sum", (1,), False, (4,)),
    (lambda x: x.sum(dim=-1, keepdim=True), "sum", (1,), True, (4, 1)),
    (lambda x: x.prod(dim=0), "prod", (0,), False, (8,)),
    (lambda x: x.amax(dim=1), "max", (1,), False, (4,)),
    (lambda x: x.amin(dim=1, keepdim=True), "min", (1,), True, (4, 1)),
    (lambda x: x.max(dim=1).values, "max", (1,), False, (4,)),
    (lambda x: torch.min(x, dim=1)[0], "min", (1,), False, (4,)),
    (lambda x: x.argmax(dim=1), "argmax", (1,), False, (4,)),
    (lambda x: x.argmin(dim=-1, keepdim=True), "argmin", (1,), True, (4, 1)),
    (lambda x: x.max(dim=1)[1], "argmax", (1,), False, (4,)),
    (lambda x: x.min(dim=0).indices, "argmin", (0,), False, (8,)),
    (lambda x: x.max(), "max", (0, 1), False, ()),
    (lambda x: x.sum(), "sum", (0, 1), False, ()),
])
def test_single_reduction(f, kind, dims, keep, shape):
    g = cap(f, (4, 8))
    [r] = reduces(g)
    assert (r.attr("kind"), r.attr("dims"), r.attr("keepdim"), r.shape) == (kind, dims, keep, shape)
    assert r.dtype == ("int64" if kind.startswith("arg") else "float32")
    assert out(g).shape == shape


def test_mean_is_sum_times_reciprocal_count():
    g = cap(lambda x: x.mean(dim=(1, 2)), (3, 4, 5))
    [r] = reduces(g)
    assert r.attr("kind") == "sum" and r.attr("dims") == (1, 2)
    assert out(g).op == "mul"
    c = [g[a] for a in out(g).args if g[a].op == "const"][0]
    assert c.attr("value") == pytest.approx(1 / 20)


@pytest.mark.parametrize("correction,std", [(1, False), (0, False), (1, True), (2, True)])
def test_var_std_two_level(correction, std):
    f = (lambda x: torch.std(x, dim=1, correction=correction)) if std else \
        (lambda x: torch.var(x, dim=1, correction=correction))
    g = cap(f, (4, 8))
    rs = reduces(g)
    assert [r.attr("kind") for r in rs] == ["sum", "sum"]
    assert (out(g).op == "sqrt") == std
    scale = [n.attr("value") for n in g.live() if n.op == "const"]
    assert pytest.approx(1 / (8 - correction)) in scale
    x = torch.randn(4, 8, dtype=torch.float64)
    want = (torch.std if std else torch.var)(x, dim=1, correction=correction)
    torch.testing.assert_close(interpret(g, [x]), want)


@pytest.mark.parametrize("std", [False, True])
def test_var_std_unbiased_false_positional(std):
    """Regression: aten.var.dim passes `unbiased` positionally."""
    f = (lambda x: x.std(dim=1, unbiased=False)) if std else \
        (lambda x: x.var(dim=1, unbiased=False))
    g = cap(f, (4, 8))
    x = torch.randn(4, 8, dtype=torch.float64)
    torch.testing.assert_close(interpret(g, [x]), f(x))


# regression: aten.var.dim(x, dim, unbiased, keepdim) passes these positionally
def test_var_keepdim_positional():
    g = cap(lambda x: x.var(1, keepdim=True), (4, 8))
    assert out(g).shape == (4, 1)
    x = torch.randn(4, 8, dtype=torch.float64)
    torch.testing.assert_close(interpret(g, [x]), x.var(1, keepdim=True))


@pytest.mark.parametrize("log", [False, True])
def test_softmax_expansion(log):
    g = cap((lambda x: F.log_softmax(x, dim=1)) if log else (lambda x: torch.softmax(x, -1)),
            (4, 8))
    ops = live_ops(g)
    m, s = reduces(g)
    assert m.attr("kind") == "max" and s.attr("kind") == "sum"
    assert m.attr("keepdim") and s.attr("keepdim")
    sub = g[g[s.args[0]].args[0]]
    assert g[s.args[0]].op == "exp" and sub.op == "sub" and sub.args == (m.args[0], m.id)
    if log:
        assert out(g).op == "sub" and "log" in ops
    else:
        assert out(g).op == "div" and out(g).args == (s.args[0], s.id)


def test_layer_norm_parameters_are_graph_inputs():
    g = capture(LayerNormModel, [24], lambda: [torch.randn(6, 24)])
    roles = {gin.target or gin.name: (gin.role, gin.shape) for gin in g.inputs}
    assert roles["ln.weight"] == ("parameter", (24,))
    assert roles["ln.bias"] == ("parameter", (24,))
    xs = [gin for gin in g.inputs if gin.role == "input"]
    assert len(xs) == 1 and xs[0].arg_index == 0 and xs[0].shape == (6, 24)
    # both parameters are read by the output computation
    used = {g[n.id].attr("index") for n in g.live() if n.op == "input"}
    assert used == set(range(len(g.inputs)))
    eps = [n.attr("value") for n in g.live() if n.op == "const"]
    assert pytest.approx(1e-5) in eps
    assert [r.attr("kind") for r in reduces(g)] == ["sum", "sum"]


def test_layer_norm_without_affine_has_no_parameters():
    g = cap(lambda x: F.layer_norm(x, (8,)), (4, 8))
    assert [gin.role for gin in g.inputs] == ["input"]


def test_rms_norm():
    g = capture(RMSNormModel, [16], lambda: [torch.randn(5, 16)])
    assert [gin.role for gin in g.inputs].count("parameter") == 1
    assert "rsqrt" in live_ops(g)
    [r] = reduces(g)
    assert r.attr("kind") == "sum" and r.attr("dims") == (1,)


@pytest.mark.parametrize("p,kinds,top", [
    (1, ["sum"], "reduce"), (2, ["sum"], "sqrt"), ("fro", ["sum"], "sqrt"),
    (float("inf"), ["max"], "reduce"), (3, ["sum"], "pow_scalar"),
])
def test_vector_norms(p, kinds, top):
    g = cap(lambda x: torch.norm(x, p=p), (4, 8))
    assert [r.attr("kind") for r in reduces(g)] == kinds
    assert reduces(g)[0].attr("dims") == (0, 1)
    assert out(g).op == top and out(g).shape == ()
    x = torch.randn(4, 8, dtype=torch.float64)
    torch.testing.assert_close(interpret(g, [x]), torch.norm(x, p=p))


def test_reduction_over_size1_dim_only_is_a_view():
    g = cap(lambda x: x.sum(dim=1) * 2, (4, 1, 8))
    assert not reduces(g)
    assert "view" in live_ops(g) and out(g).shape == (4, 8)


def test_reduction_over_size1_and_real_dims_keeps_only_real_ones():
    g = cap(lambda x: x.sum(dim=(1, 2)), (4, 1, 8))
    [r] = reduces(g)
    assert r.attr("dims") == (2,) and out(g).shape == (4,)


def test_reduction_over_size1_and_real_dims_keepdim():
    g = cap(lambda x: x.sum(dim=(1, 2), keepdim=True), (4, 1, 8))
    assert out(g).shape == (4, 1, 1)
    x = torch.randn(4, 1, 8, dtype=torch.float64)
    torch.testing.assert_close(interpret(g, [x]), x.sum(dim=(1, 2), keepdim=True))


def test_argmax_over_size1_dim_is_unsupported():
    with pytest.raises(UnsupportedError, match="argmax"):
        cap(lambda x: x.argmax(dim=1), (4, 1))


@pytest.mark.parametrize("keep", [False, True])
def test_keepdim_shapes(keep):
    g = cap(lambda x: x.amax(dim=1, keepdim=keep), (3, 5, 7))
    assert out(g).shape == ((3, 1, 7) if keep else (3, 7))


# -- what capture refuses --------------------------------------------------------------------------

@pytest.mark.parametrize("f,shapes,op", [
    (lambda x: torch.roll(x, 1, dims=1), [(4, 8)], "roll"),
    (lambda x: torch.linalg.inv(x), [(4, 4)], "inv"),
    (lambda x: torch.sort(x, dim=1).values, [(4, 8)], "sort"),
])
def test_unsupported_op_names_the_op(f, shapes, op):
    with pytest.raises(UnsupportedError) as info:
        cap(f, *shapes)
    msg = str(info.value)
    assert op in msg and "\n" not in msg


@pytest.mark.parametrize("dtype,name", [(torch.float64, "float64")])
def test_non_fp32_input_names_the_dtype(dtype, name):
    """float64 is refused; float16 and bfloat16 are taken (tests/test_half_precision.py)."""
    with pytest.raises(UnsupportedError, match=name):
        cap(torch.relu, (4, 8), dtype=dtype)


CAST_BUG = (
    "BUG: cuda_agent/ir/capture.py:371 _HANDLERS has no entry for aten._assert_tensor_metadata, "
    "which torch.export (torch 2.13) emits before every aten.to.dtype: x.float(), "
    "x.to(torch.float32) and (x > 0).float() are all rejected as 'unsupported op "
    "_assert_tensor_metadata'. Fix: lower it as a no-op (return None)")


@pytest.mark.parametrize("f", [
    lambda x: torch.relu(x).float(),
    lambda x: torch.relu(x.to(torch.float32)),
    lambda x: (x > 0).float() * x,
], ids=["float", "to_float32", "bool_to_float"])
def test_fp32_casts_are_supported(f):
    g = cap(f, (4, 8))
    x = torch.randn(4, 8, dtype=torch.float64)
    torch.testing.assert_close(interpret(g, [x]), f(x.float()).double())


@pytest.mark.parametrize("f,name", [(lambda x: torch.relu(x).to(torch.float64), "float64")])
def test_non_fp32_cast_names_the_dtype(f, name):
    with pytest.raises(UnsupportedError, match=name):
        cap(f, (4, 8))


def test_integer_input_is_unsupported():
    with pytest.raises(UnsupportedError, match="int64"):
        capture(Fn, [lambda x: x * 2], lambda: [torch.ones(4, 8, dtype=torch.int64)])


def test_two_outputs_unsupported():
    with pytest.raises(UnsupportedError, match="2 values"):
        cap(lambda x: (x.relu(), x.sigmoid()), (4, 8))


def test_non_tensor_argument_unsupported():
    with pytest.raises(UnsupportedError, match="argument 1"):
        capture(Fn, [lambda x, k: x * k], lambda: [torch.randn(4, 8), 3])


def test_returning_the_input_unsupported():
    with pytest.raises(UnsupportedError):
        cap(lambda x: x, (4, 8))


def test_get_inputs_raising_is_a_problem_error():
    def boom():
        raise RuntimeError("nope")
    with pytest.raises(ProblemError, match="get_inputs"):
        capture(Fn, [torch.relu], boom)


def test_capture_runs_on_meta_tensors():
    """Capture never allocates the inputs: a shape far too large for this machine traces."""
    g = capture(Fn, [lambda x: torch.softmax(x, -1)], lambda: [torch.randn(1 << 20, 1 << 20)])
    assert g.inputs[0].shape == (1 << 20, 1 << 20)


def test_fingerprint_depends_on_shape_and_op():
    a = cap(torch.relu, (4, 8)).fingerprint()
    assert a == cap(torch.relu, (4, 8)).fingerprint()
    assert a != cap(torch.relu, (4, 9)).fingerprint()
    assert a != cap(torch.sigmoid, (4, 8)).fingerprint()


def test_a_constant_tensor_of_more_than_one_number_is_refused_in_one_line():
    from cuda_agent.errors import UnsupportedError

    cls, init = _fn(lambda x: x * torch.tensor([1.0, 2.0, 3.0], device=x.device))
    with pytest.raises(UnsupportedError, match=r"constant tensor of shape \(3,\) made in "
                                               r"forward\(\)"):
        capture(cls, init, lambda: [torch.randn(2, 3)])
