"""Strided transposed convolutions as sub-convolutions per output phase (`memory.tconv` =
"phase") on the real GPU: both GEMM templates against torch in float64, strict fp32 and (the
tensor-core template) TF32 as `--precision auto` runs convolutions; the phased and gathered
forms' times printed side by side for reading (the searches' figures are the ones that
count)."""

from __future__ import annotations

import random

import pytest
import torch
import torch.nn as nn

from cuda_agent.ir.capture import capture
from cuda_agent.ir.planning import make_plan
from cuda_agent.space.slots import Target
from cuda_agent.space.space import Space
from kernel_checks import check_all

# (module, input shape): the realistic suite's patterns at a few hundred MB at most
CASES = {
    "2d_k4_s2": (lambda: nn.Sequential(nn.ConvTranspose2d(64, 32, 4, stride=2, padding=1),
                                       nn.ReLU()), (8, 64, 64, 64)),
    "2d_k3_s2_outpad": (lambda: nn.Sequential(nn.ConvTranspose2d(48, 36, 3, stride=2,
                                                                 padding=1, output_padding=1),
                                              nn.Tanh()), (8, 48, 63, 47)),
    "3d_k3_s2": (lambda: nn.ConvTranspose3d(32, 16, 3, stride=2, padding=1, output_padding=1),
                 (4, 32, 16, 32, 32)),
    "1d_k5_s3_grouped": (lambda: nn.ConvTranspose1d(64, 32, 5, stride=3, padding=2, groups=4),
                         (16, 64, 1000)),
}


def _case(name: str):
    make, shape = CASES[name]
    torch.manual_seed(0)
    model = make()
    g = capture(lambda: model, [], lambda: [torch.randn(*shape)])
    plan = make_plan(g)
    x = torch.randn(*shape, device="cuda")
    model = model.cuda()
    with torch.no_grad():
        want = model.double()(x.double()).float()
        params = dict(model.float().named_parameters())
    inputs = [x if plan.graph.inputs[k].role == "input" else
              params[plan.graph.inputs[k].target].detach().contiguous()
              for k in plan.operands]
    return plan, inputs, want


def _drawn(sp: Space, template: str, form: str, n: int, seed: str) -> list:
    rng, out = random.Random(seed), []
    for _ in range(20000):
        c = sp.draw(rng, exclude=set(out))
        if c is not None and sp.template_of(c).name == template and \
                c["memory.tconv"] == form:
            out.append(c)
            if len(out) == n:
                break
    return out


@pytest.mark.parametrize("name", sorted(CASES))
def test_phased_kernels_match_torch_on_the_gpu(name):
    plan, inputs, want = _case(name)
    strict, tf32 = Space.for_plan(plan, Target()), Space.for_plan(plan, Target(
        precision="tf32:conv"))
    times = {}
    for form in ("phase", "gather"):
        for t in ("gemm_tc", "gemm"):
            cfgs = _drawn(strict, t, form, 3 if form == "phase" else 1, name + t)
            times.update({f"{form} {k}": v for k, v in check_all(
                strict, cfgs, inputs, want, rel_tol=1e-5, timed=True).items()})
    # TF32 operands (11 bits): a sanity bound here, the exact TF32 answer is checked on the
    # CPU emulator (tests/test_conv_transpose_phases.py)
    tc = _drawn(tf32, "gemm_tc", "phase", 2, name)
    times.update({f"tf32 phase {k}": v for k, v in check_all(
        tf32, tc, inputs, want, rel_tol=1e-2, timed=True).items()})
    for k, v in sorted(times.items(), key=lambda kv: kv[1]):
        print(f"{name}: {v:.3f} ms  {k}")
