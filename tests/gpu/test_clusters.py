"""Rows split over thread-block clusters on the real GPU: every cluster size, both on-chip caches
and both softmax algorithms must match torch, on long rows and on rows no cluster size divides.
Each configuration's time is printed next to the best configuration without a cluster (the
figure that matters is the search's, in benchmarks/results)."""

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
    "softmax": lambda x: torch.softmax(x, -1),
    "layer_norm": lambda x: F.layer_norm(x, x.shape[-1:]),
    "argmax_centered": lambda x: torch.argmax(x - x.mean(-1, keepdim=True), -1).float(),
}
SHAPES = [(5, 3001), (256, 65536)]
CHAN = {"batch_norm": lambda x: F.batch_norm(x, None, None, training=True)}
CHAN_SHAPES = [(3, 5, 1001), (32, 64, 8192)]


@pytest.mark.parametrize("name,shape",
                         [(n, s) for n in sorted(CASES) for s in SHAPES] +
                         [(n, s) for n in sorted(CHAN) for s in CHAN_SHAPES],
                         ids=lambda v: v if isinstance(v, str) else "x".join(map(str, v)))
def test_cluster_rows_match_torch_on_the_gpu(name, shape):
    f = CASES.get(name) or CHAN[name]
    g = capture(Fn, [f], lambda: [torch.randn(*shape)])
    plan = make_plan(g)
    sp = Space.for_plan(plan, Target())
    torch.manual_seed(0)
    x = torch.randn(*shape, device="cuda")
    x.view(-1)[-1] = 40.0  # an extreme in the last block's segment
    want = f(x.double()).float().reshape(plan.out_shape)
    rows = sorted((c for c in sp.configs if c.get("config.cluster") not in (None, "-")),
                  key=lambda c: (-c["memory.vec"], -c["config.block"], c.short()))
    picked, seen = [], set()
    for c in rows:  # one of each (cluster, cache, algo): the widest loads, the largest block
        key = (c["config.cluster"], c["memory.cache"], c.get("compute.algo"))
        if key not in seen:
            seen.add(key)
            picked.append(c)
    assert any(c["config.cluster"] > 1 for c in picked)
    times = check_all(sp, picked, [x], want, timed=True)
    for k, t in sorted(times.items(), key=lambda kv: kv[1]):
        print(f"{name} {shape}: {t:.4f} ms  {k}")
