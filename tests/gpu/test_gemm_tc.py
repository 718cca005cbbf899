"""The 3xTF32 tensor-core GEMM on the real GPU: as accurate as cuBLAS's strict fp32.

The tensor core truncates as it accumulates; the template sums each 8-deep step apart and adds
it with a rounded fp32 add. At a deep K the difference is large enough to measure: the template
must stay within 2x of strict fp32 FMA's error (the SIMT template summing K in the same order)
against a float64 reference, while the same kernel accumulating inside the tensor core must be
over 4x off (if it ever were not, the hardware changed and the partial sums could go).
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn as nn

from cuda_agent.ir.capture import capture
from cuda_agent.ir.planning import make_plan
from cuda_agent.space.slots import Target
from cuda_agent.space.space import Space
from kernel_checks import load_rendered, run_once


class _Fn(nn.Module):
    def __init__(self, f) -> None:
        super().__init__()
        self.f = f

    def forward(self, *args):
        return self.f(*args)


def _run(rendered, inputs, out_shape):
    kernels = load_rendered(rendered, inputs[0].device)
    try:
        return run_once(kernels, inputs, out_shape)
    finally:
        kernels.close()


def _rel(got, ref):
    return float((got.double() - ref).norm() / ref.norm())


CASES = {"deep_k": (lambda a, b: a @ b, [(256, 32768), (32768, 256)]),
         "linear_deep_k": (lambda x, w: x @ w.T, [(256, 16384), (384, 16384)])}


@pytest.mark.parametrize("name", sorted(CASES))
def test_tensor_core_gemm_is_as_accurate_as_cublas_fp32(name):
    f, shapes = CASES[name]
    g = capture(_Fn, [f], lambda: [torch.randn(*s) for s in shapes])
    sp = Space.for_plan(make_plan(g), Target())
    torch.manual_seed(0)
    xs = [torch.randn(*s, device="cuda") for s in shapes]
    ref = f(*[x.double() for x in xs])
    torch.backends.cuda.matmul.allow_tf32 = False
    cublas = _rel(f(*xs), ref)
    # the yardstick: strict fp32 FMA summing K in the same order (the SIMT template);
    # cuBLAS may split K and sum a tree, more accurate at small M x N (reported alongside)
    simt = [c for c in sp.configs if sp.template_of(c).name == "gemm" and
            c["reduction.split"] == 1]
    fp32 = _rel(_run(sp.render(simt[0]), xs, tuple(ref.shape)), ref)
    print(f"{name}: relative error cuBLAS fp32 {cublas:.3g}, SIMT fp32 {fp32:.3g}")
    tc = [c for c in sp.configs if sp.template_of(c).name == "gemm_tc"]
    picked = [next(c for c in tc if c["reduction.split"] == 1 and c["config.warp"] == "64x64"
                   and c["compute.fresh"] == 8),
              next(c for c in tc if c["reduction.split"] > 1),
              # two 8-deep steps per fresh partial: twice the truncating accumulations
              next(c for c in tc if c["reduction.split"] == 1 and c["compute.fresh"] == 16)]
    for cfg in picked:
        r = sp.render(cfg)
        err = _rel(_run(r, xs, tuple(ref.shape)), ref)
        print(f"  {cfg.short()}: {err:.3g}")
        assert err <= 2 * fp32, (cfg.short(), err, fp32, cublas)
    # accumulating inside the tensor core instead: the truncation bias the partial sums remove
    r = sp.render(picked[0])
    direct = r.source.replace("float p_[4] = {0.f, 0.f, 0.f, 0.f};",
                              "float* p_ = acc[i][j];").replace(
        "acc[i][j][0] += p_[0]; acc[i][j][1] += p_[1];", "").replace(
        "acc[i][j][2] += p_[2]; acc[i][j][3] += p_[3];", "")
    assert direct != r.source
    err_direct = _rel(_run(dataclasses.replace(r, source=direct), xs, tuple(ref.shape)), ref)
    print(f"  accumulating in the tensor core: {err_direct:.3g}")
    assert err_direct > 4 * fp32, (err_direct, fp32)


def test_tf32_opt_in_is_as_accurate_as_torchs_own_tf32():
    """`--precision tf32`: one TF32 product per tile. Its error must be of TF32's order (the
    verifier allows 4 times torch's own TF32 answer), and above the strict kernel's (it is
    really the cheaper contract, not the strict kernel renamed)."""
    f, shapes = CASES["linear_deep_k"]
    g = capture(_Fn, [f], lambda: [torch.randn(*s) for s in shapes])
    plan = make_plan(g)
    strict, tf32 = Space.for_plan(plan, Target()), Space.for_plan(plan, Target(precision="tf32"))
    torch.manual_seed(1)
    xs = [torch.randn(*s, device="cuda") for s in shapes]
    ref = f(*[x.double() for x in xs])
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        torch_tf32 = _rel(f(*xs), ref)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = False
    cfg = next(c for c in strict.configs if strict.template_of(c).name == "gemm_tc"
               and c["reduction.split"] == 1 and c["config.warp"] == "64x64")
    err_strict = _rel(_run(strict.render(cfg), xs, tuple(ref.shape)), ref)
    err_tf32 = _rel(_run(tf32.render(cfg), xs, tuple(ref.shape)), ref)
    print(f"torch TF32 {torch_tf32:.3g}, 1xTF32 kernel {err_tf32:.3g}, 3xTF32 {err_strict:.3g}")
    assert err_tf32 <= 4 * torch_tf32 and err_tf32 > 10 * err_strict


def test_tune_with_tf32_verifies_on_the_gpu(tmp_path):
    from pathlib import Path

    from cuda_agent.tuner import tune

    root = Path(__file__).resolve().parents[2]
    r = tune(root / "benchmarks/problems/gemm_odd.py", out=tmp_path / "o", device="cuda",
             precision="tf32", budget=6, batch=6, strategy="random")
    tc = [t for t in r.trials if t.template == "gemm_tc"]
    assert tc and all(t.measurement.ok for t in tc), [t.measurement.error_msg for t in tc]
    assert r.best is not None


@pytest.mark.parametrize("precision, dtype", [("fp16", torch.float16),
                                              ("bf16", torch.bfloat16)])
def test_half_opt_in_is_as_accurate_as_torchs_autocast(precision, dtype):
    """`--precision fp16|bf16`: operands rounded once to the type, fp32 accumulation. The error
    must be within the verifier's 4x of torch's own answer under autocast (which also rounds
    its output to the type) and far above the strict kernel's (really the cheaper contract)."""
    f, shapes = CASES["linear_deep_k"]
    g = capture(_Fn, [f], lambda: [torch.randn(*s) for s in shapes])
    plan = make_plan(g)
    strict, half = Space.for_plan(plan, Target()), Space.for_plan(plan, Target(precision=precision))
    torch.manual_seed(2)
    xs = [torch.randn(*s, device="cuda") for s in shapes]
    ref = f(*[x.double() for x in xs])
    with torch.autocast("cuda", dtype=dtype):
        torch_half = _rel(f(*xs).float(), ref)
    tc = [c for c in strict.configs if strict.template_of(c).name == "gemm_tc"]
    picked = [next(c for c in tc if c["reduction.split"] == 1 and c["config.warp"] == "64x64"),
              next(c for c in tc if c["reduction.split"] > 1 and c["compute.fresh"] == 16)]
    for cfg in picked:
        r = half.render(cfg)
        assert r.fact("mma") == {"fp16": "f16", "bf16": "bf16"}[precision]
        err_strict = _rel(_run(strict.render(cfg), xs, tuple(ref.shape)), ref)
        err_half = _rel(_run(r, xs, tuple(ref.shape)), ref)
        print(f"{precision} {cfg.short()}: torch autocast {torch_half:.3g}, kernel "
              f"{err_half:.3g}, 3xTF32 {err_strict:.3g}")
        assert err_half <= 4 * torch_half and err_half > 10 * err_strict


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_tune_with_half_precision_verifies_on_the_gpu(tmp_path, precision):
    from pathlib import Path

    from cuda_agent.tuner import tune

    root = Path(__file__).resolve().parents[2]
    r = tune(root / "benchmarks/problems/gemm_odd.py", out=tmp_path / "o", device="cuda",
             precision=precision, budget=6, batch=6, strategy="random")
    tc = [t for t in r.trials if t.template == "gemm_tc"]
    assert tc and all(t.measurement.ok for t in tc), [t.measurement.error_msg for t in tc]
    assert r.best is not None and r.baselines.eager_ms
    print(f"gemm_odd {precision}: best {r.best.measurement.time_ms:.4f} ms ({r.best.template}), "
          f"eager under autocast {r.baselines.eager_ms:.4f} ms")
