"""Half precision (issue 50 item 1): problems and models in fp16 and bf16 are tuned in those
types, as torch.compile's Inductor runs them: tensors stored in half, loaded into float
registers, computed and accumulated in float32, stored rounded to nearest even.

Checked on the CPU: capture keeps the storage types (and fp32 graphs unchanged), the
generated kernels of the map and row templates run on the emulator and pass the verifier
against a float64 reference within torch's own error in that dtype (the witness), their
rounding is torch's own `.to(dtype)`, they compile with nvcc for sm_90; the verifier catches a
kernel that stores in the wrong type or accumulates in half; a whole model under `.half()`
has its elementwise and normalisation regions tuned (its matrix products left to torch, with
the reason) and the emitted module takes and returns half tensors."""

from __future__ import annotations

import json
import random
import warnings
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import cpu_exec
from cuda_agent.build.compiler import compile_source
from cuda_agent.ir.capture import lower
from cuda_agent.ir.planning import make_plan
from cuda_agent.regions.split import KERNEL, TORCH, split_model
from cuda_agent.space.slots import Target
from cuda_agent.space.space import Space
from cuda_agent.verify.cases import verify
from helpers import Fn, covering_sample, nvcc_available

HALF = (torch.float16, torch.bfloat16)
needs_gxx = pytest.mark.skipif(not cpu_exec.available(), reason="needs g++")


def _graph(f, inputs):
    with torch.device("meta"):
        metas = [torch.empty(t.shape, dtype=t.dtype) for t in inputs]
    return lower(torch.export.export(Fn(f), tuple(metas)))


# problems of the map and row families: (function, inputs maker (dtype) , family)
CASES = {
    "gelu_chain": (lambda x: F.gelu(x) * 2.0 + 1.0,
                   lambda dt: [torch.randn(13, 40).to(dt)], "elementwise"),
    "bias_silu": (lambda x, b: F.silu(x + b),
                  lambda dt: [torch.randn(12, 64).to(dt), torch.randn(64).to(dt)], "elementwise"),
    "softmax": (lambda x: torch.softmax(x, -1), lambda dt: [torch.randn(9, 100).to(dt)],
                "softmax"),
    "layer_norm": (lambda x, w, b: F.layer_norm(x, (96,), w, b),
                   lambda dt: [torch.randn(7, 96).to(dt), torch.randn(96).to(dt),
                               torch.randn(96).to(dt)], "norm"),
    "row_sum": (lambda x: x.sum(-1), lambda dt: [torch.randn(6, 1000).to(dt)], "reduction"),
    "rms_norm": (lambda x: x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6).to(
        x.dtype), lambda dt: [torch.randn(5, 128).to(dt)], "norm"),
}


def _plan(name: str, dt: torch.dtype):
    f, make, _ = CASES[name]
    ins = make(dt)
    return f, ins, make_plan(_graph(f, ins))


# -- capture ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("dt", HALF)
def test_capture_keeps_storage_types_and_computes_in_float32(dt):
    name = {torch.float16: "float16", torch.bfloat16: "bfloat16"}[dt]
    g = _graph(lambda x, b: F.gelu(x + b), [torch.randn(4, 8).to(dt), torch.randn(8).to(dt)])
    assert [gi.dtype for gi in g.inputs] == [name, name]
    assert all(n.dtype == "float32" for n in g.nodes if n.op != "const")  # registers: float
    assert g.out_dtype == name and g.has_half() and g.to_json()["out_dtype"] == name
    plan = make_plan(g)
    assert plan.out_dtype == name
    assert plan.bytes_moved() == 2 * (32 + 8) + 2 * 32  # two bytes an element


def test_float32_graphs_are_unchanged():
    g = _graph(lambda x: F.gelu(x), [torch.randn(4, 8)])
    assert g.out_dtype == "float32" and not g.has_half() and "out_dtype" not in g.to_json()
    r = Space.for_plan(make_plan(g), Target()).render(Space.for_plan(make_plan(g),
                                                                     Target()).default())
    assert "ca_f16" not in r.source  # an fp32 kernel's source carries no half prelude


def test_explicit_casts_round_in_the_graph():
    """x.half() inside forward() is a rounding (a float register holding the fp16 value);
    .float() of a half value is the value itself."""
    g = _graph(lambda x: (x.half() * 3).float() + x.to(torch.bfloat16).float(),
               [torch.randn(4, 8)])
    ops = [n.op for n in g.live()]
    assert "round_f16" in ops and "round_bf16" in ops and g.out_dtype == "float32"


# -- generated kernels on the emulator, through the verifier ---------------------------------------

def _emulated_candidate(rendered, plan, dt):
    """A verifier candidate running the rendered kernels on the CPU emulator."""
    def run(ins, out):
        ops = [ins[k].reshape(plan.operand_shapes[k]) for k in plan.operands]
        out.copy_(cpu_exec.run_torch(rendered, ops, tuple(plan.out_shape), dt)
                  .reshape(out.shape))
    return run


def _reference(f):
    return lambda ins: f(*[t.double() for t in ins])


def _witness(f):  # torch eager in the half dtype, as the user runs it
    return lambda ins: f(*ins).float()


@needs_gxx
@pytest.mark.parametrize("dt", HALF, ids=["fp16", "bf16"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_emulated_kernels_pass_the_verifier_in_half(name, dt):
    """The default and a covering sample of configurations (every slot value once) pass the
    strict verifier: float64 reference, bounds no wider than a small multiple of torch's own
    error in this dtype; and where each element is rounded once, it is torch's rounding of
    the float result (the emulator's conversions are torch's `.to(dtype)`)."""
    f, ins, plan = _plan(name, dt)
    assert plan.family == CASES[name][2] and plan.out_dtype == str(dt).split(".")[1]
    space = Space.for_plan(plan, Target())
    cfgs = covering_sample(space.configs, space.default(), seed=name)[:8]
    rendered = [space.render(c) for c in cfgs]
    cpu_exec.prebuild([(r, len(plan.operands)) for r in rendered])
    out = f(*ins)
    for cfg, r in zip(cfgs, rendered):
        res = verify(_emulated_candidate(r, plan, dt), _reference(f), ins, out.shape, dt,
                     witness=_witness(f))
        assert res.ok, (cfg.short(), res.msg)
        if name in ("gelu_chain", "bias_silu", "softmax"):
            got = cpu_exec.run_torch(r, [ins[k].reshape(plan.operand_shapes[k])
                                         for k in plan.operands], tuple(plan.out_shape), dt)
            want = f(*[t.float() for t in ins]).to(dt)
            # float32 results rounded once: torch's rounding, up to float32's own last bits
            close = (got.float() - want.float()).abs() <= 1e-6 + 1e-2 * want.float().abs()
            assert close.all() and (got == want).float().mean() > 0.97, cfg.short()


def test_shim_rounding_is_torchs():
    """The emulator's fp16/bf16 conversions (the kernels' stores on the CPU) are torch's own
    `.to(dtype)`: ties, subnormals, overflow to infinity, NaN."""
    if not cpu_exec.available():
        pytest.skip("needs g++")
    x = torch.cat([torch.randn(20000) * s for s in (1e-6, 1e-3, 1, 1e3, 7e4)]
                  + [torch.tensor([65504.0, 65520.0, 65519.99, -1e9, float("inf"), 0.0, -0.0,
                                   2.0 ** -25, 3 * 2.0 ** -26, 1.0 + 2.0 ** -11])])
    got = cpu_exec.round_half(x.numpy())
    torch.testing.assert_close(torch.from_numpy(got["fp16"]), x.half().float(), rtol=0, atol=0)
    torch.testing.assert_close(torch.from_numpy(got["bf16"]), x.bfloat16().float(), rtol=0,
                               atol=0)


# -- the verifier catches half-precision mistakes --------------------------------------------------

def _softmax_problem(dt):
    x = torch.randn(64, 512).to(dt)
    return (lambda t: torch.softmax(t, -1)), [x]


@pytest.mark.parametrize("dt", HALF, ids=["fp16", "bf16"])
def test_verifier_accepts_inductor_style_and_eager(dt):
    f, ins = _softmax_problem(dt)
    right = verify(lambda i, o: o.copy_(torch.softmax(i[0].float(), -1).to(dt)),
                   _reference(f), ins, (64, 512), dt, witness=_witness(f))
    assert right.ok, right.msg
    eager = verify(lambda i, o: o.copy_(f(*i)), _reference(f), ins, (64, 512), dt,
                   witness=_witness(f))
    assert eager.ok, eager.msg


def test_verifier_catches_storing_in_the_wrong_type():
    """An fp16 problem whose kernel rounds its result to bf16 (three bits fewer) before the
    fp16 store: within a fixed 1e-2 tolerance, not within torch's own fp16 error."""
    f, ins = _softmax_problem(torch.float16)
    res = verify(lambda i, o: o.copy_(torch.softmax(i[0].float(), -1).bfloat16().half()),
                 _reference(f), ins, (64, 512), torch.float16, witness=_witness(f))
    assert not res.ok and res.kind == "wrong", res.msg


def test_verifier_catches_half_accumulation():
    """A row sum accumulated in fp16 (not float32, as torch and the templates do)."""
    x = torch.randn(32, 4096).half().abs()
    f = (lambda t: t.sum(-1))

    def half_acc(i, o):
        acc = torch.zeros(32, dtype=torch.float16)
        for j in range(i[0].shape[1]):
            acc = acc + i[0][:, j]
        o.copy_(acc)

    res = verify(half_acc, _reference(f), [x], (32,), torch.float16, witness=_witness(f))
    assert not res.ok and res.kind == "wrong", res.msg
    good = verify(lambda i, o: o.copy_(i[0].float().sum(-1).half()), _reference(f), [x], (32,),
                  torch.float16, witness=_witness(f))
    assert good.ok, good.msg


def test_verifier_catches_an_unwritten_half_element():
    f, ins = _softmax_problem(torch.bfloat16)

    def skips_one(i, o):
        full = f(*i)
        o[1:].copy_(full[1:])
        o[0, :511].copy_(full[0, :511])

    res = verify(skips_one, _reference(f), ins, (64, 512), torch.bfloat16, witness=_witness(f))
    assert not res.ok and res.kind == "unwritten", res.msg


# -- nvcc ------------------------------------------------------------------------------------------

@pytest.mark.skipif(not nvcc_available(), reason="needs nvcc")
@pytest.mark.parametrize("dt", HALF, ids=["fp16", "bf16"])
@pytest.mark.parametrize("name", ["gelu_chain", "softmax", "layer_norm", "row_sum"])
def test_half_kernels_compile_with_nvcc_for_sm90(name, dt):
    _, _, plan = _plan(name, dt)
    space = Space.for_plan(plan, Target())
    for cfg in covering_sample(space.configs, space.default(), seed=name)[:4]:
        out = compile_source(space.render(cfg).source, "sm_90", "nvcc")
        assert out.cubin is not None, (cfg.short(), out.log[:2000])


# -- whole models ----------------------------------------------------------------------------------

class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(64)
        self.fc1 = nn.Linear(64, 256)
        self.fc2 = nn.Linear(256, 64)

    def forward(self, x):
        h = self.fc2(F.gelu(self.fc1(self.ln(x))))
        return torch.softmax(x + h, -1)


@pytest.mark.parametrize("dt", HALF, ids=["fp16", "bf16"])
def test_half_model_regions_are_tuned_not_sent_to_torch(dt):
    name = str(dt).split(".")[1]
    with torch.device("meta"):
        split = split_model(Block().to(dt), [torch.empty(8, 16, 64, dtype=dt)])
    kinds = [(r.kind, r.ops) for r in split.regions]
    # the linear layers through cuBLAS in the half type, their bias and what follows fused in
    # a generated epilogue (space/templates/library.py)
    assert kinds == [(KERNEL, ["layer_norm"]), (KERNEL, ["linear", "gelu"]),
                     (KERNEL, ["linear", "add", "softmax"])]
    for r in split.kernels():
        assert r.dtype == name and name in r.reason
    # a bare product (no bias, nothing after it) is the library alone: torch's
    with torch.device("meta"):
        bare = nn.Sequential(nn.LayerNorm(64), nn.Linear(64, 32, bias=False)).to(dt)
        split = split_model(bare, [torch.empty(8, 16, 64, dtype=dt)])
    assert [(r.kind, r.ops) for r in split.regions] == [(KERNEL, ["layer_norm"]),
                                                        (TORCH, ["linear"])]
    assert "half precision" in split.regions[1].reason and name in split.regions[1].reason


HALF_MODEL = '''import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm(64)
        self.fc1 = nn.Linear(64, 256)
        self.fc2 = nn.Linear(256, 64)
        self.to(torch.{dt})

    def forward(self, x):
        h = self.fc2(F.gelu(self.fc1(self.ln(x))))
        return torch.softmax(x + h, -1)


def get_inputs():
    return [torch.randn(8, 16, 64, dtype=torch.{dt})]


def get_init_inputs():
    return []
'''


@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
def test_half_model_tunes_on_the_simulator_and_emits(dt, tmp_path):
    """tune_model end to end (the sim device): every kernel region generated, the report
    lists each region's dtype, and the emitted module takes and returns the half tensors
    (on the CPU its kernel regions run their torch references)."""
    import importlib.util

    from cuda_agent.regions.tune import tune_model

    src = tmp_path / f"block_{dt}.py"
    src.write_text(HALF_MODEL.format(dt=dt))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = tune_model(src, tmp_path / "out", device="sim", budget=6, store=":memory:",
                            time_limit_s=None)
    assert sorted(result.generated()) == [r.index for r in result.split.kernels()] == [1, 2, 3]
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert [r["dtype"] for r in report["regions"]] == [dt] * 3
    region_src = (tmp_path / "out" / "regions" / "r1" / "model_new.py").read_text()
    assert f"OUT_DTYPE = torch.{dt}" in region_src and f"['{dt}'" in region_src
    spec = importlib.util.spec_from_file_location(f"half_{dt}", tmp_path / "out" / "model_new.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    torch.manual_seed(0)
    ref, new = mod.Model(), mod.ModelNew()
    new.load_state_dict(ref.state_dict())
    x = mod.get_inputs()
    with torch.no_grad():
        got = new(*x)
    assert got.dtype == getattr(torch, dt)
    torch.testing.assert_close(got, ref(*x), rtol=0, atol=0)


def test_single_problem_in_half_tunes_on_the_simulator(tmp_path):
    from cuda_agent import tuner

    src = tmp_path / "softmax_bf16.py"
    src.write_text('''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=-1)


def get_inputs():
    return [torch.randn(256, 1024, dtype=torch.bfloat16)]


def get_init_inputs():
    return []
''')
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = tuner.tune(src, out=tmp_path / "out", device="sim", budget=6, store=":memory:")
    assert res.best is not None
    text = (tmp_path / "out" / "model_new.py").read_text()
    assert "OUT_DTYPE = torch.bfloat16" in text and "ca_bf16" in text


def test_explicit_casts_lower_to_torchs_rounding():
    from test_capture import interpret

    f = (lambda x: (x.half() * 3).float() + x.to(torch.bfloat16).float())
    g = _graph(f, [torch.randn(4, 8)])
    x = torch.randn(4, 8) * 100
    # the casts round; the product of the rounded value is kept in float (as Inductor keeps
    # it), where eager would round it to fp16 again
    want = x.half().double() * 3 + x.bfloat16().double()
    torch.testing.assert_close(interpret(g, [x.double()]), want, rtol=1e-12, atol=0)


def test_half_coverage_below_the_space_agrees_with_the_templates():
    """`planning.half_covered` (what the region split reads, below the space) says what the
    templates' `takes_half` says: the map and row families yes, a matrix product no."""
    from cuda_agent.errors import UnsupportedError
    from cuda_agent.ir.planning import half_covered, half_gap
    from cuda_agent.space.templates import TEMPLATES

    for name in CASES:
        _, _, plan = _plan(name, torch.float16)
        assert half_covered(plan) and not half_gap(plan)
        assert Space.for_plan(plan, Target()).templates
    mm = make_plan(_graph(lambda a, b: a @ b, [torch.randn(32, 16).half(),
                                               torch.randn(16, 8).half()]))
    assert not half_covered(mm) and "half precision (float16)" in half_gap(mm)
    with pytest.raises(UnsupportedError, match="half precision"):
        Space.for_plan(mm, Target())
    assert {t.name for t in TEMPLATES if t.takes_half} == {"map", "row", "col", "chan", "split",
                                                           "pool", "lib"}
