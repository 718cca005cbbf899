"""A row group spanning several warps combines the warps' parts as a shuffle tree in every warp
(`block_combine` and `combine_state`: log2 W steps instead of W serial ones). Every kind of
part goes through it: sums, maxima, arg-maxima (lowest index among ties), Welford states and
online softmax states; groups of 2 to 32 warps; several groups a block. Run on the CPU
emulator against torch."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import cpu_exec
from cuda_agent.ir.capture import lower
from cuda_agent.ir.planning import make_plan
from cuda_agent.space.slots import Target
from cuda_agent.space.space import Space
from helpers import Fn, fast_first

needs_gxx = pytest.mark.skipif(not cpu_exec.available(), reason="needs g++")

CASES = {
    "sum": lambda x: x.sum(-1),
    "max": lambda x: x.amax(-1),
    "argmax": lambda x: torch.argmax(x, -1).float(),
    "layer_norm_online": lambda x: F.layer_norm(x, x.shape[-1:]),
    "softmax_online": lambda x: torch.softmax(x, -1),
}


def _space(f, shape):
    with torch.device("meta"):
        g = lower(torch.export.export(Fn(f), (torch.randn(*shape),)))
    plan = make_plan(g)
    return plan, Space.for_plan(plan, Target())


def _pick(space, name: str, tpr: int, block: int):
    algo = "online" if name.endswith("online") else "passes"
    for c in space.iter_configs():  # the first such configuration, the space not listed
        d = c.as_dict()
        if (d.get("config.tpr") == tpr and d.get("config.block") == block and
                d.get("reduction.combine") == "shfl" and d.get("config.cluster", 1) in (1, "-")
                and d.get("compute.algo", "passes") == algo and d.get("memory.vec") == 1):
            return c
    return None


@needs_gxx
@pytest.mark.parametrize("name", fast_first(sorted(CASES), ["argmax", "softmax_online"]))
@pytest.mark.parametrize("tpr,block", [(64, 128), (512, 512), (1024, 1024)],
                         ids=["2warps_2rows", "16warps", "32warps"])
def test_multiwarp_groups_match_torch(name, tpr, block):
    f = CASES[name]
    shape = (3, 1100)
    plan, space = _space(f, shape)
    cfg = _pick(space, name, tpr, block)
    assert cfg is not None, (name, tpr, block)
    source = space.render(cfg).source
    assert "w_ < " not in source  # no serial fold over the warps' parts
    x = torch.randn(*shape)
    x[0, 1012] = 25.0  # an extreme in the last warp's share (16 and 32 warps)
    # a tie between two warps, the lower index in the later warp (16 and 32 warps): it wins
    x[1, 480] = x[1, 812] = 30.0
    x[2] += 200.0  # a mean far above the spread
    want = f(x.double()).float().numpy().reshape(plan.out_shape)
    got = cpu_exec.run(space.render(cfg), [x.numpy()], tuple(plan.out_shape))
    err = abs(got - want).max() / (abs(want).max() + 1e-30)
    assert err < 1e-5, (cfg.short(), err)
