"""Matrix products and convolutions in half precision (issue 50 item 1): the library route,
cuBLAS/cuDNN through torch in the fp16 or bf16 type of the operands (as torch.compile runs
them), and a generated epilogue kernel that reads the half product and its own half operands,
computes in float32 and stores the output rounded (space/templates/library.py).

Checked on the CPU: the epilogue runs on the emulator after torch's own half product and passes
the verifier against a float64 reference within torch's own error in that dtype; the kernels
compile with nvcc for sm_90; a kernel that stores through the wrong type, or a product
accumulated in half, is caught; fp32 library kernels are rendered as before; a half Linear+GELU
problem tunes on the simulator and emits."""

from __future__ import annotations

import dataclasses
import re
import warnings

import pytest
import torch
import torch.nn.functional as F

import cpu_exec
from cuda_agent.build.compiler import compile_source
from cuda_agent.ir.planning import half_covered, library_dtype, make_plan
from cuda_agent.space.slots import Target
from cuda_agent.space.space import Space
from cuda_agent.space.templates.library import LibraryTemplate
from cuda_agent.verify.cases import verify
from helpers import covering_sample, nvcc_available
from test_half_precision import HALF, _emulated_candidate, _graph, _reference, _witness

needs_gxx = pytest.mark.skipif(not cpu_exec.available(), reason="needs g++")

# (function, inputs maker (dtype)): a product with an epilogue, each through the library
CASES = {
    "linear_gelu": (lambda x, w, b: F.gelu(F.linear(x, w, b)),
                    lambda dt: [torch.randn(32, 64).to(dt), torch.randn(48, 64).to(dt) / 8,
                                torch.randn(48).to(dt)]),
    "bmm_scale_residual": (lambda a, b, r: torch.bmm(a, b) * 0.125 + r,
                           lambda dt: [torch.randn(3, 16, 40).to(dt),
                                       torch.randn(3, 40, 24).to(dt),
                                       torch.randn(3, 16, 24).to(dt)]),
    "conv_bn_eval_relu": (lambda x, w, m, v: F.relu(F.batch_norm(F.conv2d(x, w, padding=1), m, v,
                                                                 training=False)),
                          lambda dt: [torch.randn(2, 8, 10, 10).to(dt),
                                      torch.randn(16, 8, 3, 3).to(dt) / 4,
                                      torch.randn(16).to(dt), (torch.rand(16) + 0.5).to(dt)]),
    "conv_transpose_bias_tanh": (lambda x, w, b: torch.tanh(F.conv_transpose2d(x, w, b,
                                                                                stride=2)),
                                 lambda dt: [torch.randn(2, 6, 5, 5).to(dt),
                                             torch.randn(6, 4, 3, 3).to(dt) / 4,
                                             torch.randn(4).to(dt)]),
}


def _plan(name, dt):
    f, make = CASES[name]
    ins = make(dt)
    return f, ins, make_plan(_graph(f, ins))


def _space(plan):
    space = Space.for_plan(plan, Target())
    return space, space.restricted(space.configs_of("lib"))


@pytest.mark.parametrize("dt", HALF, ids=["fp16", "bf16"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_half_products_take_the_library_route_only(name, dt):
    """The library template takes the product in its operands' type; the generated GEMM
    templates (fp32) are not offered; the coverage check below the space agrees."""
    _, _, plan = _plan(name, dt)
    want = str(dt).split(".")[1]
    assert library_dtype(plan) == want and half_covered(plan)
    space = Space.for_plan(plan, Target())
    assert [t.name for t in space.templates] == ["lib"]
    r = space.render(space.default())
    call = next(L.library for L in r.launches if L.library)
    assert "dtype" not in call and "tf32" not in call  # the operands' own type, no casts
    ctype = {"float16": "ca_f16", "bfloat16": "ca_bf16"}[want]
    assert f"const {ctype}* __restrict__ prod" in r.source and f"{ctype}* __restrict__ out" \
        in r.source and dict(r.facts)["library_dtype"] == want


def test_mixed_type_operands_are_not_the_library_route():
    """An fp16 activation times an fp32 weight: torch's call takes no such pair."""
    plan = make_plan(_graph(lambda x, w, b: F.gelu(F.linear(x, w, b)),
                            [torch.randn(8, 16).half(), torch.randn(4, 16), torch.randn(4)]))
    assert library_dtype(plan) is None and not half_covered(plan)
    assert not LibraryTemplate().applies(plan)


def test_fp32_library_kernels_render_as_before():
    """An fp32 product's epilogue reads a float product with __ldg, no half prelude."""
    plan = make_plan(_graph(CASES["linear_gelu"][0], CASES["linear_gelu"][1](torch.float32)))
    assert library_dtype(plan) == "float32"
    _, lib = _space(plan)
    for cfg in lib.configs:
        src = lib.render(cfg).source
        assert "ca_f16" not in src and "library_dtype" not in dict(lib.render(cfg).facts)
        assert "const float* __restrict__ prod = reinterpret_cast<const float*>(ws);" in src
        assert "__ldg(" in src and "ca_ld<1>(in" not in src


@needs_gxx
@pytest.mark.parametrize("dt", HALF, ids=["fp16", "bf16"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_emulated_library_epilogues_pass_the_verifier_in_half(name, dt):
    """torch's half product (on the CPU) and the generated epilogue on the emulator, a covering
    sample of the library's configurations (layouts, vector widths): within torch's own error
    in this dtype against a float64 reference."""
    f, ins, plan = _plan(name, dt)
    _, lib = _space(plan)
    cfgs = covering_sample(lib.configs, lib.default(), seed=name)[:6]
    rendered = [lib.render(c) for c in cfgs]
    cpu_exec.prebuild([(r, len(plan.operands)) for r in rendered])
    out = f(*ins)
    for cfg, r in zip(cfgs, rendered):
        res = verify(_emulated_candidate(r, plan, dt), _reference(f), ins, out.shape, dt,
                     witness=_witness(f))
        assert res.ok, (cfg.short(), res.msg)


@needs_gxx
def test_epilogue_storing_through_the_wrong_type_is_caught():
    """The fp16 epilogue rounding its value to bf16 before the fp16 store (three bits fewer)."""
    f, ins, plan = _plan("linear_gelu", torch.float16)
    _, lib = _space(plan)
    r = lib.render(lib.default())
    bad_src, n = re.subn(r"ca_st<0>\(\(out \+ f0\), ([^;]*)\);",
                         r"ca_st<0>((out + f0), ca_round_bf16(\1));", r.source)
    assert n == 1
    bad = dataclasses.replace(r, source=bad_src)
    good = verify(_emulated_candidate(r, plan, torch.float16), _reference(f), ins, (32, 48),
                  torch.float16, witness=_witness(f))
    res = verify(_emulated_candidate(bad, plan, torch.float16), _reference(f), ins, (32, 48),
                 torch.float16, witness=_witness(f))
    assert good.ok, good.msg
    assert not res.ok and res.kind == "wrong", res.msg


def test_product_accumulated_in_half_is_caught():
    """A linear layer whose product is accumulated in fp16 (not float32, as cuBLAS and torch
    do): outside torch's own fp16 error on a long K."""
    f = (lambda x, w, b: F.gelu(F.linear(x, w, b)))
    x, w, b = torch.randn(16, 2048).half(), (torch.randn(24, 2048) / 8).half(), \
        torch.randn(24).half()

    def half_acc(i, o):
        acc = torch.zeros(16, 24, dtype=torch.float16)
        for k in range(0, 2048, 8):  # fp16 partial sums, as a half accumulator keeps them
            acc = acc + (i[0][:, k:k + 8].float() @ i[1][:, k:k + 8].float().T).half()
        o.copy_(F.gelu((acc.float() + i[2].float())).half())

    res = verify(half_acc, _reference(f), [x, w, b], (16, 24), torch.float16,
                 witness=_witness(f))
    assert not res.ok and res.kind == "wrong", res.msg
    good = verify(lambda i, o: o.copy_(F.gelu(F.linear(i[0].float(), i[1].float(),
                                                       i[2].float()).half().float()).half()),
                  _reference(f), [x, w, b], (16, 24), torch.float16, witness=_witness(f))
    assert good.ok, good.msg


@pytest.mark.skipif(not nvcc_available(), reason="needs nvcc")
@pytest.mark.parametrize("dt", HALF, ids=["fp16", "bf16"])
@pytest.mark.parametrize("name", ["linear_gelu", "conv_bn_eval_relu"])
def test_half_library_epilogues_compile_with_nvcc_for_sm90(name, dt):
    _, _, plan = _plan(name, dt)
    _, lib = _space(plan)
    for cfg in covering_sample(lib.configs, lib.default(), seed=name)[:3]:
        out = compile_source(lib.render(cfg).source, "sm_90", "nvcc")
        assert out.cubin is not None, (cfg.short(), out.log[:2000])


def test_half_linear_gelu_tunes_on_the_simulator(tmp_path):
    from cuda_agent import tuner

    src = tmp_path / "linear_gelu_bf16.py"
    src.write_text('''import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(256, 512).to(torch.bfloat16)

    def forward(self, x):
        return F.gelu(self.fc(x))


def get_inputs():
    return [torch.randn(128, 256, dtype=torch.bfloat16)]


def get_init_inputs():
    return []
''')
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = tuner.tune(src, out=tmp_path / "out", device="sim", budget=4, store=":memory:")
    assert res.best is not None and res.best.library
    text = (tmp_path / "out" / "model_new.py").read_text()
    assert "OUT_DTYPE = torch.bfloat16" in text and "ca_bf16" in text and \
        "ca_lib_epilogue" in text
