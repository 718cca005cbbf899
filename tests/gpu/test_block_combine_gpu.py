"""Row groups of 2 to 32 warps fold their warps' parts as a shuffle tree (`block_combine`,
`combine_state`) on the real GPU: sums, maxima, arg-maxima with ties across warps, Welford and
online softmax states must match torch. The layer norm's multi-warp configurations are timed
on (65536, 4096) and printed (the figure that matters is the search's, in
benchmarks/results)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from cuda_agent.ir.capture import capture
from cuda_agent.ir.planning import make_plan
from cuda_agent.space.slots import Target
from cuda_agent.space.space import Space
from helpers import Fn
from kernel_checks import check_all

pytestmark = pytest.mark.gpu

CASES = {
    "sum": lambda x: x.sum(-1),
    "max": lambda x: x.amax(-1),
    "argmax": lambda x: torch.argmax(x, -1).float(),
    "layer_norm_online": lambda x: F.layer_norm(x, x.shape[-1:]),
    "softmax_online": lambda x: torch.softmax(x, -1),
}


def _configs(sp: Space, name: str, vec: int) -> list:
    algo = "online" if name.endswith("online") else "passes"
    out, seen = [], set()
    for c in sp.configs:
        d = c.as_dict()
        key = (d.get("config.tpr"), d.get("config.block"))
        if (isinstance(d.get("config.tpr"), int) and d["config.tpr"] >= 64 and d.get("reduction.combine") == "shfl" and
                d.get("config.cluster", 1) in (1, "-") and d.get("memory.vec") == vec and
                d.get("compute.algo", "passes") == algo and d.get("config.grid") == "exact"
                and key not in seen):
            seen.add(key)
            out.append(c)
    return out


@pytest.mark.parametrize("name", sorted(CASES))
def test_multiwarp_groups_match_torch_on_the_gpu(name):
    f = CASES[name]
    shape = (7, 1100)
    plan = make_plan(capture(Fn, [f], lambda: [torch.randn(*shape)]))
    sp = Space.for_plan(plan, Target())
    torch.manual_seed(0)
    x = torch.randn(*shape, device="cuda")
    x[0, 1012] = 25.0
    x[1, 480] = x[1, 812] = 30.0  # a tie across warps, the lower index in the later warp
    x[2] += 200.0
    want = f(x.double()).float().reshape(plan.out_shape)
    cfgs = _configs(sp, name, 1)
    assert {c["config.tpr"] for c in cfgs} >= {64, 512, 1024}
    check_all(sp, cfgs, [x], want)


def test_layer_norm_multiwarp_times():
    f = lambda x: F.layer_norm(x, x.shape[-1:])  # noqa: E731
    shape = (65536, 4096)
    plan = make_plan(capture(Fn, [f], lambda: [torch.randn(*shape)]))
    sp = Space.for_plan(plan, Target())
    x = torch.randn(*shape, device="cuda")
    want = f(x)
    picked, seen = [], set()
    for c in sp.configs:  # both algorithms, rows in registers or re-read (plain or kept in L2)
        d = c.as_dict()
        key = tuple(d[k] for k in ("config.tpr", "config.block", "memory.cache", "memory.load",
                                   "compute.algo"))
        if (d["config.tpr"] >= 128 and d["memory.vec"] == 4 and d["config.cluster"] == 1 and
                d["config.grid"] == "exact" and d["reduction.combine"] == "shfl" and
                d["memory.store"] == "default" and d["compute.unroll"] == 1 and
                d["memory.cache"] != "smem" and d["memory.load"] in ("default", "keep") and
                key not in seen):
            seen.add(key)
            picked.append(c)
    times = check_all(sp, picked, [x], want, rel_tol=2e-4, timed=True)
    for k, t in sorted(times.items(), key=lambda kv: kv[1]):
        print(f"layer_norm {shape}: {t:.4f} ms  {k}")
