"""The row template's `memory.cache=async`: a row group's cached operands are copied into shared
memory by cp.async while the block works on its previous row group (two buffers), and every
pass reads them there. Run on the CPU emulator, whose cp.async lands a copy only at the wait
that covers it (a kernel reading before its wait, or from the wrong buffer, reads stale data),
on a small GPU (`Target(sm_count=2)`) so a persistent grid's blocks loop over many rows and
really prefetch."""

from __future__ import annotations

import dataclasses

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

SMALL_GPU = Target(sm_count=2)

CASES = {
    "softmax": lambda x: torch.softmax(x, -1),
    "layer_norm": lambda x: F.layer_norm(x, x.shape[-1:]),
    "rms_norm": lambda x: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6),
    "argmax_centered": lambda x: torch.argmax(x - x.mean(-1, keepdim=True), -1).float(),
}


def _space(f, shape, target=SMALL_GPU):
    with torch.device("meta"):
        g = lower(torch.export.export(Fn(f), (torch.randn(*shape),)))
    plan = make_plan(g)
    return plan, Space.for_plan(plan, target)


def _async_configs(space) -> list:
    """One async configuration per (vector width, grid, algorithm, rows per block)."""
    picked, seen = [], set()
    for c in space.configs:
        d = c.as_dict()
        if d.get("memory.cache") != "async" or d["config.block"] > 128:
            continue
        key = (d["memory.vec"], d["config.grid"], d["compute.algo"],
               d["config.block"] // d["config.tpr"] > 1)
        if key not in seen:
            seen.add(key)
            picked.append(c)
    return picked


@needs_gxx
@pytest.mark.parametrize("name", fast_first(sorted(CASES), ["softmax", "rms_norm"]))
def test_async_rows_match_torch(name):
    f = CASES[name]
    shape = (37, 300)  # rows no block count divides; a row of 300: vectors of 2 and 4
    plan, space = _space(f, shape)
    cfgs = _async_configs(space)
    assert {c["config.grid"] for c in cfgs} == {"exact", "persistent"}
    assert {c["memory.vec"] for c in cfgs} == {1, 2, 4}
    x = torch.randn(*shape) + torch.arange(shape[0])[:, None] * 0.5  # every row its own
    want = f(x.double()).float().numpy().reshape(plan.out_shape)
    cpu_exec.prebuild([(space.render(c), 1) for c in cfgs])
    for cfg in cfgs:
        rendered = space.render(cfg)
        if cfg["config.grid"] == "persistent":  # the blocks loop: copies are prefetched
            assert rendered.launches[0].grid[0] * cfg["config.block"] // cfg["config.tpr"] < 37
        got = cpu_exec.run(rendered, [x.numpy()], tuple(plan.out_shape))
        err = abs(got - want).max() / (abs(want).max() + 1e-30)
        assert err < 1e-5, (cfg.short(), err)


@needs_gxx
def test_reading_before_the_wait_or_from_the_other_buffer_is_caught():
    """The emulator must be able to fail these kernels: without the wait, or reading the
    buffer being filled, they compute on stale rows."""
    f = CASES["layer_norm"]
    plan, space = _space(f, (37, 300))
    cfg = next(c for c in _async_configs(space) if c["config.grid"] == "persistent")
    good = space.render(cfg)
    x = torch.randn(37, 300) + torch.arange(37)[:, None] * 0.5
    want = f(x.double()).float().numpy().reshape(plan.out_shape)
    assert cpu_exec.max_rel_error(good, [x.numpy()], want) < 1e-5
    for old, new in [("ca_cp_wait<1>();", ""),
                     ("(((ca_buf * ", "((((ca_buf ^ 1) * ")]:
        assert old in good.source
        bad = dataclasses.replace(good, source=good.source.replace(old, new))
        assert cpu_exec.max_rel_error(bad, [x.numpy()], want) > 1e-2, old


def test_async_needs_shared_memory_for_two_row_groups():
    plan, space = _space(CASES["layer_norm"], (4, 8192), Target())
    t = space.template_of(space.default())
    base = dict(space.default().as_dict(), **{"config.block": 1024, "config.tpr": 256,
                                              "memory.vec": 4, "compute.unroll": 1})
    # 4 rows of 32 KB, twice: more than a block's shared memory; once, it fits
    assert t.check(plan, {**base, "memory.cache": "async"}, Target()) is not None
    assert t.check(plan, {**base, "memory.cache": "smem"}, Target()) is None
