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
from cuda_agent.ir.plan import make_plan
from cuda_agent.run import launcher
from cuda_agent.space.slots import Target
from cuda_agent.space.space import Space
from helpers import Fn

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


def _load(sp: Space, cfg, device):
    r = sp.render(cfg)
    image = launcher.compile_for_device(r.source, device)
    return launcher.LoadedKernels(image, [l.__dict__ for l in r.launches], r.workspace_bytes,
                                  r.zero_workspace)


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
    for cfg in cfgs:
        kernels = _load(sp, cfg, x.device)
        out = torch.full(plan.out_shape, float("nan"), device="cuda")
        kernels([x], out)
        torch.cuda.synchronize()
        err = float((out.double() - want.double()).abs().max() / want.abs().max())
        kernels.close()
        assert err < 1e-5, (cfg.short(), err)


def test_layer_norm_multiwarp_times():
    f = lambda x: F.layer_norm(x, x.shape[-1:])  # noqa: E731
    shape = (65536, 4096)
    plan = make_plan(capture(Fn, [f], lambda: [torch.randn(*shape)]))
    sp = Space.for_plan(plan, Target())
    x = torch.randn(*shape, device="cuda")
    want = f(x)
    times = {}
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
    for cfg in picked:
        kernels = _load(sp, cfg, x.device)
        out = torch.empty(plan.out_shape, device="cuda")
        kernels([x], out)
        torch.cuda.synchronize()
        assert float((out - want).abs().max()) < 1e-3, cfg.short()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(20):
            kernels([x], out)
        end.record()
        torch.cuda.synchronize()
        times[cfg.short()] = start.elapsed_time(end) / 20
        kernels.close()
    for k, t in sorted(times.items(), key=lambda kv: kv[1]):
        print(f"layer_norm {shape}: {t:.4f} ms  {k}")
