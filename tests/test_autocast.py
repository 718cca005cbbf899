"""CUDA autocast in forward() (issue 50 item 1): captured with the casts torch's CUDA autocast
policy applies (ir/autocast.py), on this CPU-only machine, so that the model is tuned in the half
type as the user runs it on the GPU.

What would fail without the cast insertion: the captured graphs' casts are compared with torch's
own policy (asked directly on fake CUDA tensors here, independently of capture), and the
captured programs' answers with references written out from what CUDA autocast computes (the
product's operands rounded to the half type, accumulated in fp32, its result stored in the half
type; fp32-policy ops on the values upcast), at tolerances the fp32 forward misses."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode

import cpu_exec
from cuda_agent.errors import UnsupportedError
from cuda_agent.ir import autocast, capture, pretrace
from cuda_agent.ir.planning import make_plan
from cuda_agent.regions.split import KERNEL, TORCH, split_model
from cuda_agent.space.slots import Target
from cuda_agent.space.space import Space
from cuda_agent.verify.cases import verify
from test_capture import interpret as _interpret

HALF = {"fp16": torch.float16, "bf16": torch.bfloat16}
ROUND = {torch.float16: "round_f16", torch.bfloat16: "round_bf16"}
needs_gxx = pytest.mark.skipif(not cpu_exec.available(), reason="needs g++")


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "CUDA is not available ... Disabling autocast"
        yield


class LinearRelu(nn.Module):
    def __init__(self, dtype: torch.dtype = torch.float16) -> None:
        super().__init__()
        self.fc = nn.Linear(64, 32)
        self.dtype = dtype

    def forward(self, x):
        with torch.autocast("cuda", dtype=self.dtype):
            return F.relu(self.fc(x))


def _policy_casts(op, *args):
    """Torch's CUDA autocast policy asked directly: the positions of `op`'s arguments autocast
    casts (fp16), seen as `_to_copy`s of them below the Autocast key."""
    from torch.utils._python_dispatch import TorchDispatchMode

    seen = []

    class Spy(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, a=(), k=None):
            k = k or {}
            if func is torch.ops.aten._to_copy.default:
                seen.extend(i for i, t in enumerate(args) if t is a[0])
            return func(*a, **k)

    with FakeTensorMode(allow_non_fake_inputs=True):
        fakes = [torch.empty(t.shape, dtype=t.dtype, device="cuda") for t in args]
        args = fakes
        # torch.autocast("cuda") switches itself off on a machine without CUDA: the state
        # it would set, set directly
        torch.set_autocast_dtype("cuda", torch.float16)
        torch.set_autocast_enabled("cuda", True)
        try:
            with Spy():
                out = op(*fakes)
        finally:
            torch.set_autocast_enabled("cuda", False)
    return sorted(set(seen)), out.dtype


def interpret(g, tensors):
    """`test_capture.interpret` (float64, the rounding nodes rounding), with the matrix
    products and permutes of a linear layer too."""
    from test_capture import _BINARY, _unary

    if not any(n.op in ("permute", "matmul") for n in g.nodes):
        return _interpret(g, tensors)
    env: dict[int, torch.Tensor] = {}
    for n in g.nodes:
        a = dict(n.attrs)
        args = [env[i] for i in n.args]
        if n.op == "input":
            env[n.id] = tensors[a["index"]].double()
        elif n.op == "const":
            env[n.id] = torch.tensor(a["value"], dtype=torch.float64)
        elif n.op == "permute":
            env[n.id] = args[0].permute(*a["perm"])
        elif n.op == "matmul":
            env[n.id] = args[0] @ args[1]
        elif n.op == "view":
            env[n.id] = args[0].reshape(n.shape)
        elif n.op in _BINARY:
            env[n.id] = _BINARY[n.op](args[0], args[1])
        else:
            env[n.id] = _unary(n.op, args[0], a)
    return env[g.output]


def _graph(model_cls, init, make, tracer=True):
    return capture.capture(model_cls, init, make, tracer=tracer)


@pytest.mark.parametrize("name", sorted(HALF))
def test_linear_relu_captures_the_casts_of_torchs_policy(name):
    dt = HALF[name]
    casts, out_dtype = _policy_casts(F.linear, torch.empty(8, 64), torch.empty(32, 64),
                                     torch.empty(32))
    assert casts == [0, 1, 2] and out_dtype == torch.float16  # what torch's policy says
    for tracer in (True, False):  # pretrace and torch.export (inlined) agree
        g = _graph(LinearRelu, [dt], lambda: [torch.randn(8, 64)], tracer=tracer)
        ops = [n.op for n in g.live()]
        mm = next(n for n in g.live() if n.op == "matmul")
        # both product operands read rounded to the half type (through the weight's
        # transpose), the bias too; the output stored in it, as autocast's linear returns it
        assert ops.count(ROUND[dt]) == 3 and g.out_dtype == str(dt).split(".")[1]
        a = g[mm.args[0]]
        assert a.op == ROUND[dt] and g[g[mm.args[1]].args[0]].op == ROUND[dt]
    with torch.device("meta"):
        traced = pretrace.trace(LinearRelu(dt), [torch.empty(8, 64)])
    copies = [n for n in traced.graph.nodes if n.target is torch.ops.aten._to_copy.default]
    assert {n.kwargs["dtype"] for n in copies} == {dt} and len(copies) == 3
    linear = next(n for n in traced.graph.nodes if n.target is torch.ops.aten.linear.default)
    assert all(a in copies for a in linear.args) and linear.meta["val"].dtype == dt


@pytest.mark.parametrize("name", sorted(HALF))
def test_linear_relu_computes_autocasts_answer(name):
    """The captured graph's answer is autocast's (operands rounded, fp32 accumulation, stored
    in the half type), closer to it than the fp32 forward by far."""
    dt = HALF[name]
    g = _graph(LinearRelu, [dt], lambda: [torch.randn(8, 64)])
    torch.manual_seed(0)
    model = LinearRelu(dt)
    x = torch.randn(8, 64) * 3
    tensors = {"x": x, "p_fc_weight": model.fc.weight.detach(), "p_fc_bias": model.fc.bias.detach()}
    got = interpret(g, [tensors[gi.name] for gi in g.inputs]).to(dt).double()
    h = [t.to(dt).double() for t in (x, model.fc.weight.detach(), model.fc.bias.detach())]
    want = F.relu(F.linear(*h)).to(dt).double()  # autocast's linear on the GPU
    fp32 = F.relu(F.linear(x.double(), model.fc.weight.double(), model.fc.bias.double())
                  ).to(dt).double()  # no casts: what a miss computes
    err = (got - want).norm() / want.norm()
    miss = (fp32 - want).norm() / want.norm()
    assert err < 1e-6 and miss > 1e-4, (err, miss)  # (fp16: the output rounding is most of it)


class PartlyCast(nn.Module):
    """autocast around part of forward(), with autocast switched off inside it."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(64, 64)
        self.ln = nn.LayerNorm(64)

    def forward(self, x):
        h = torch.tanh(x)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            h = self.fc(h)
            with torch.autocast("cuda", enabled=False):
                h = self.ln(h.float())
        return torch.softmax(h, -1)


def test_autocast_around_part_of_forward():
    graphs = [_graph(PartlyCast, [], lambda: [torch.randn(8, 64)], tracer=t) for t in (True, False)]
    assert graphs[0].to_json() == graphs[1].to_json()  # pretrace equals export, inlined
    g = graphs[0]
    ops = [n.op for n in g.live()]
    # tanh before the region reads x as it is; the product's operands rounded to bf16; the
    # layer norm (autocast off) and softmax (outside) in fp32 on the product's bf16 values
    assert ops.index("tanh") < ops.index("round_bf16") and ops.count("round_bf16") == 3
    assert "round_f16" not in ops and g.out_dtype == "float32"
    with torch.device("meta"):
        split = split_model(PartlyCast(), [torch.empty(8, 64)])
    lines = split.lines()
    assert "autocast" not in lines[0] and split.regions[0].ops == ["tanh"]
    assert any("under autocast bfloat16" in line for line in lines)
    product = next(r for r in split.kernels() if "linear" in r.ops)
    assert product.autocast == "bfloat16" and "bfloat16" in product.dtype


class ConvRelu(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)

    def forward(self, x):
        with torch.cuda.amp.autocast():  # the deprecated alias: CUDA, fp16
            return F.relu(self.conv(x))


def test_conv_under_autocast():
    casts, out_dtype = _policy_casts(F.conv2d, torch.empty(2, 3, 8, 8), torch.empty(8, 3, 3, 3))
    assert casts == [0, 1] and out_dtype == torch.float16
    g = _graph(ConvRelu, [], lambda: [torch.randn(2, 3, 8, 8)])
    conv = next(n for n in g.live() if n.op == "conv")
    assert all(g[a].op == "round_f16" for a in conv.args[:2]) and g.out_dtype == "float16"
    with pytest.raises(UnsupportedError, match="cast to float16 .torch.autocast."):
        make_plan(g)  # one kernel cannot read them so: the region split takes it
    with torch.device("meta"):
        split = split_model(ConvRelu(), [torch.empty(2, 3, 8, 8)])
    assert [(r.kind, r.ops) for r in split.regions] == [(TORCH, ["_to_copy"] * 3),
                                                        (KERNEL, ["conv2d", "relu"])]
    conv_region = split.regions[1]
    assert conv_region.family == "conv" and conv_region.dtype.startswith("float16")
    assert "under autocast float16" in conv_region.reason
    assert [o.dtype for o in conv_region.reads] == ["float16"] * 3  # torch's casts before it


class Upcast(nn.Module):
    """fp32-policy ops on a half input: softmax (through its half_to_float) and layer norm."""

    def forward(self, x):
        with torch.autocast("cuda", dtype=torch.float16):
            return torch.softmax(x, -1) + F.layer_norm(x, (64,))


def _upcast_want(x):
    xd = x.double()
    return torch.softmax(xd, -1) + F.layer_norm(xd, (64,))


def test_softmax_and_layer_norm_read_half_values_upcast():
    _, soft = _policy_casts(lambda t: torch.softmax(t, -1), torch.empty(8, 64).half())
    _, norm = _policy_casts(lambda t: F.layer_norm(t, (64,)), torch.empty(8, 64).half())
    assert soft == norm == torch.float32  # torch's policy: fp32 out of half in
    with torch.device("meta"):
        traced = pretrace.trace(Upcast(), [torch.empty(8, 64, dtype=torch.float16)])
    nodes = {n.target: n for n in traced.graph.nodes if n.op == "call_function"}
    for op in (torch.ops.aten.softmax.int, torch.ops.aten.layer_norm.default):
        assert nodes[op].args[0].target is torch.ops.aten._to_copy.default
        assert nodes[op].args[0].kwargs["dtype"] == torch.float32
        assert nodes[op].meta["val"].dtype == torch.float32
    g = _graph(Upcast, [], lambda: [torch.randn(8, 64, dtype=torch.float16)])
    assert g.inputs[0].dtype == "float16" and g.out_dtype == "float32"
    x = torch.randn(8, 64).half()
    torch.testing.assert_close(interpret(g, [x]), _upcast_want(x), rtol=1e-12, atol=1e-12)


@pytest.mark.skipif(not cpu_exec.available(), reason="needs g++")
def test_upcast_kernel_on_the_emulator_verifies_against_autocasts_answer():
    """The generated kernel of an autocast problem, run on the CPU emulator: verified at the
    half tolerance against the float64 reference of autocast's answer (the witness torch's
    own, run as autocast computes it), and equal to that answer to fp32's last bits, where the
    uncast forward (softmax and layer norm stored in fp16) is not."""
    g = _graph(Upcast, [], lambda: [torch.randn(8, 64, dtype=torch.float16)])
    plan = make_plan(g)
    assert plan.out_dtype == "float32"
    space = Space.for_plan(plan, Target())
    rendered = space.render(space.default())
    torch.manual_seed(1)
    x = (torch.randn(8, 64) * 2).half()

    def run(ins, out):
        ops = [ins[k].reshape(plan.operand_shapes[k]) for k in plan.operands]
        out.copy_(cpu_exec.run_torch(rendered, ops, tuple(plan.out_shape), torch.float32)
                  .reshape(out.shape))

    res = verify(run, lambda ins: _upcast_want(ins[0]), [x], (8, 64), torch.float32,
                 witness=lambda ins: _upcast_want(ins[0]).float())
    assert res.ok, res.msg
    got = torch.empty(8, 64)
    run([x], got)
    want = _upcast_want(x)
    uncast = (torch.softmax(x.double(), -1).half() + F.layer_norm(x.double(), (64,)).half()
              ).double()
    err = ((got.double() - want).abs().max()).item()
    assert err < 1e-5 < (uncast - want).abs().max().item() / 10


class CpuAutocast(nn.Module):
    def forward(self, x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return torch.relu(x) * 2


def test_cpu_autocast_is_refused_with_its_reason():
    with pytest.raises(UnsupportedError, match=r"autocast\('cpu'\)"):
        _graph(CpuAutocast, [], lambda: [torch.randn(4, 8)])
    with torch.device("meta"):
        split = split_model(CpuAutocast(), [torch.empty(4, 8)])
    assert split.opaque and "autocast('cpu')" in split.regions[0].reason


def test_models_without_autocast_are_untouched():
    class Plain(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(64, 32)

        def forward(self, x):
            return F.relu(self.fc(x))

    with torch.device("meta"):
        traced = pretrace.trace(Plain(), [torch.empty(8, 64)])
    assert not autocast.tagged(traced.graph)
    assert not any(n.target is torch.ops.aten._to_copy.default for n in traced.graph.nodes)
    assert not torch.is_autocast_enabled("cuda")  # capture left torch's state as it was


AUTOCAST_BLOCK = '''import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm(64)
        self.fc1 = nn.Linear(64, 256)
        self.fc2 = nn.Linear(256, 64)

    def forward(self, x):
        with torch.autocast("cuda", dtype=torch.float16):
            h = self.fc2(F.gelu(self.fc1(self.ln(x))))
            return torch.softmax(x + h, -1)


def get_inputs():
    return [torch.randn(8, 16, 64)]


def get_init_inputs():
    return []
'''


def test_autocast_model_tunes_on_the_simulator_region_by_region(tmp_path):
    """tune_model end to end (the sim device): the products in fp16 with torch's casts before
    them, every region listed under autocast in the report, and the emitted module computes
    CUDA autocast's answer (here on the CPU, where the original forward()'s autocast does
    nothing: its kernel regions run their torch references, the casts explicit)."""
    import importlib.util
    import json

    from cuda_agent.regions.tune import tune_model

    src = tmp_path / "autocast_block.py"
    src.write_text(AUTOCAST_BLOCK)
    result = tune_model(src, tmp_path / "out", device="sim", budget=6, store=":memory:",
                        time_limit_s=None)
    regions = result.split.regions
    assert [(r.kind, r.ops) for r in regions] == [
        (KERNEL, ["layer_norm"]), (TORCH, ["_to_copy"] * 3), (KERNEL, ["linear", "gelu"]),
        (TORCH, ["_to_copy"] * 2), (KERNEL, ["linear", "add", "softmax"])]
    assert sorted(result.generated()) == [1, 3, 5]
    assert regions[2].family == "gemm" and regions[2].dtype == "float16"
    assert "autocast float16's casts" in regions[1].reason
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert [r["autocast"] for r in report["regions"]] == ["float16"] * 5
    spec = importlib.util.spec_from_file_location("autocast_block", tmp_path / "out" /
                                                  "model_new.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    torch.manual_seed(0)
    ref, new = mod.Model(), mod.ModelNew()
    new.load_state_dict(ref.state_dict())
    x = mod.get_inputs()[0]
    with torch.no_grad():
        got = new(x).double()
        plain = ref(x).double()  # on the CPU its autocast("cuda") is off: no casts

        def lin(a, layer):  # autocast's linear: fp16 operands, fp32 sums, an fp16 result
            return F.linear(a.half().double(), layer.weight.half().double(),
                            layer.bias.half().double()).half().double()

        xd = x.double()
        h = F.layer_norm(xd, (64,), ref.ln.weight.double(), ref.ln.bias.double())
        h = F.gelu(lin(h, ref.fc1)).half().double()
        want = torch.softmax(xd + lin(h, ref.fc2), -1)

    def rel(t):
        return float((t - want).norm() / want.norm())

    assert rel(got) < 1e-5 and rel(plain) > max(3e-5, 4 * rel(got)), (rel(got), rel(plain))


class Nested(nn.Module):
    """autocast fp16 around an autocast bf16 region and a region with autocast off."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(32, 32), nn.Linear(32, 32), nn.Linear(32, 32)

    def forward(self, x):
        with torch.autocast("cuda", dtype=torch.float16):
            a = self.fc1(x)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                b = self.fc2(a)
            with torch.autocast("cuda", enabled=False):
                c = self.fc3(x)
        return a.float() + b.float() + c


def test_nested_autocast_regions_cast_as_torch_does():
    graphs = [_graph(Nested, [], lambda: [torch.randn(4, 32)], tracer=t) for t in (True, False)]
    assert graphs[0].to_json() == graphs[1].to_json()
    g = graphs[0]
    mms = [n for n in g.live() if n.op == "matmul"]
    assert len(mms) == 3

    def operand_ops(mm):
        a, b = g[mm.args[0]], g[mm.args[1]]
        return a.op, (g[b.args[0]].op if b.op == "permute" else b.op)

    # fc1 in fp16; fc2 in bf16 (its fp16 input cast again, to bf16); fc3 uncast (autocast off)
    assert [operand_ops(mm) for mm in mms] == [("round_f16", "round_f16"),
                                               ("round_bf16", "round_bf16"), ("input", "input")]
    assert g.out_dtype == "float32"
