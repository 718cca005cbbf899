"""Rows split over a thread-block cluster (`config.cluster` of the row template): each block of
the cluster keeps its segment of the row on chip and the partial results meet through
distributed shared memory. The generated kernels run on the CPU emulator, whose cluster
blocks run together with their own shared memory, and must match torch on rows whose length
no cluster size or vector width divides (a short last segment)."""

from __future__ import annotations

import random

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
    "softmax": lambda x: torch.softmax(x, -1),
    "log_softmax": lambda x: torch.log_softmax(x, -1),
    "layer_norm": lambda x: F.layer_norm(x, x.shape[-1:]),
    "rms_norm": lambda x: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6),
    # a row output written once per cluster, and an index combined across the blocks
    "argmax_centered": lambda x: torch.argmax(x - x.mean(-1, keepdim=True), -1).float(),
}


def _space(f, shape):
    with torch.device("meta"):
        g = lower(torch.export.export(Fn(f), (torch.randn(*shape),)))
    plan = make_plan(g)
    return plan, Space.for_plan(plan, Target())


def _cluster_configs(space, max_block: int, n: int, seed: int) -> list:
    """Sampled cluster configurations of small blocks, every cluster size and cache kind among
    them where the space has one."""
    pool = [c for c in space.configs
            if c.get("config.cluster") not in (None, "-", 1) and c.get("config.block") <= max_block]
    rng = random.Random(seed)
    rng.shuffle(pool)
    picked, seen = [], set()
    for c in pool:  # one of each (cluster, cache, algo, combine) first
        key = (c.get("config.cluster"), c.get("memory.cache"), c.get("compute.algo"),
               c.get("reduction.combine"))
        if key not in seen:
            seen.add(key)
            picked.append(c)
    return picked[:n]


@needs_gxx
@pytest.mark.parametrize("name", fast_first(sorted(CASES), ["softmax", "layer_norm"]))
@pytest.mark.parametrize("shape", [(3, 300), (2, 1100)], ids=["odd_rows", "vec4_rows"])
def test_cluster_rows_match_torch(name, shape):
    f = CASES[name]
    plan, space = _space(f, shape)
    cfgs = _cluster_configs(space, 64, 6, seed=len(name) + shape[1])
    assert cfgs, "the row template offers clusters for these rows"
    x = torch.randn(*shape)
    x[0, shape[1] - 1] = 40.0  # a row's extreme in the last block's segment
    want = f(x.double()).float().numpy()
    cpu_exec.prebuild([(space.render(c), 1) for c in cfgs])
    for cfg in cfgs:
        rendered = space.render(cfg)
        assert rendered.launches[0].cluster == cfg.get("config.cluster")
        assert rendered.launches[0].grid[0] % cfg.get("config.cluster") == 0
        got = cpu_exec.run(rendered, [x.numpy()], tuple(plan.out_shape))
        err = abs(got - want.reshape(plan.out_shape)).max() / (abs(want).max() + 1e-30)
        assert err < 1e-5, (cfg.short(), err)


CHAN_CASES = {
    "batch_norm": lambda x: F.batch_norm(x, None, None, training=True),
    "batch_norm_scaled_relu": lambda x: torch.relu(
        F.batch_norm(x, None, None, training=True) * 1.5 - 0.25),
}


@needs_gxx
@pytest.mark.parametrize("name", sorted(CHAN_CASES))
@pytest.mark.parametrize("shape", [(3, 4, 101), (2, 3, 8, 36)], ids=["odd", "vec4"])
def test_cluster_channels_match_torch(name, shape):
    """Batch statistics over (N, S) per channel, the channel split over a cluster (or kept on
    chip by one block): the chan template's cached and cluster kernels."""
    f = CHAN_CASES[name]
    plan, space = _space(f, shape)
    assert space.template_of(space.default()).name == "chan"
    pool = [c for c in space.configs if c.get("config.block") <= 64 and
            c.get("memory.cache") != "reload"]
    rng = random.Random(len(name))
    rng.shuffle(pool)
    picked, seen = [], set()
    for c in pool:
        key = (c["config.cluster"], c["memory.cache"], c["memory.vec"])
        if key not in seen:
            seen.add(key)
            picked.append(c)
    assert {c["config.cluster"] for c in picked} >= {1, 2, 8}
    x = torch.randn(*shape)
    x[-1, 0, -1] = 30.0  # an extreme in the last block's share
    want = f(x.double()).float().numpy().reshape(plan.out_shape)
    ops = [x.reshape(plan.operand_shapes[k]).numpy() for k in plan.operands]
    cpu_exec.prebuild([(space.render(c), len(ops)) for c in picked[:8]])
    for cfg in picked[:8]:
        rendered = space.render(cfg)
        got = cpu_exec.run(rendered, ops, tuple(plan.out_shape))
        err = abs(got - want).max() / (abs(want).max() + 1e-30)
        assert err < 1e-5, (cfg.short(), err)


def test_cluster_needs_one_row_per_block_and_an_on_chip_row():
    plan, space = _space(CASES["layer_norm"], (4, 4096))
    t = space.template_of(space.default())
    base = dict(space.default().as_dict(), **{"config.cluster": 4, "config.block": 256,
                                              "config.tpr": 256, "memory.cache": "smem"})
    target = Target()
    assert t.check(plan, base, target) is None
    assert "one row per block" in t.check(plan, dict(base, **{"config.tpr": 128}), target)
    assert "on chip" in t.check(plan, dict(base, **{"memory.cache": "reload"}), target)
    # 4096 / 8 blocks = 512 elements a block: fewer than a 1024-thread block's float4 loads
    assert "shorter" in t.check(plan, dict(base, **{"config.cluster": 8, "config.block": 1024,
                                                    "config.tpr": 1024, "memory.vec": 4}), target)


def test_cluster_kernels_keep_shared_memory_dynamic_and_rows_without_clusters_unchanged():
    """Cluster blocks read each other's slots in dynamic shared memory; without a cluster the
    kernel is the one the template wrote before clusters existed (no cluster prelude)."""
    plan, space = _space(CASES["softmax"], (4, 8192))
    t = space.template_of(space.default())
    cfg = dict(space.default().as_dict(), **{"config.cluster": 2, "config.block": 256,
                                             "config.tpr": 256, "memory.cache": "smem"})
    src = t.render(plan, cfg, Target()).source
    assert "__cluster_dims__(2, 1, 1)" in src and "__shared__ float ca_red" not in src
    plain = t.render(plan, dict(cfg, **{"config.cluster": 1}), Target()).source
    assert "cluster" not in plain
