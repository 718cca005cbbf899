"""Every configuration of a space renders a different kernel. Two configurations that differ
only in a slot without effect there are one kernel measured twice: the search spends its budget
on it and the agents learn a slot that does nothing. Found and folded by `canonical` (an audit
of 2026-11-30): the row and channel templates' unrolling where the loop is unrolled whole (20 %
of a layer norm's row configurations), fast math where no operation has a fast form (x ** 2,
erff), a persistent grid that one wave holds (map, pool), 16-byte copies asked of a cp.async
operand copied element by element (SIMT GEMM). Recorded twins fold onto one configuration."""

from __future__ import annotations

import collections
import random

import pytest
import torch
import torch.nn.functional as F

from helpers import Fn
from cuda_agent.ir.capture import capture
from cuda_agent.ir.planning import make_plan
from cuda_agent.space.slots import Target
from cuda_agent.space.space import Space

CASES = {
    "layer_norm (row)": (lambda x: F.layer_norm(x, x.shape[-1:]), [(16, 512)]),
    "relu (map, one wave)": (lambda x: torch.relu(x) * 2.0, [(64, 1000)]),
    "max pool (pool, one wave)": (lambda x: F.max_pool2d(x, 2), [(2, 4, 32, 32)]),
    "mse (row, split: x ** 2 has no fast form)": (
        lambda a, b: ((a - b) ** 2).mean(), [(256, 1000), (256, 1000)]),
    "batch norm (chan)": (lambda x: F.batch_norm(x, None, None, training=True),
                          [(16, 32, 8, 8)]),
    "matmul (gemm, gemm_tc)": (lambda a, b: a @ b, [(96, 64), (64, 80)]),
}
MAX_RENDERED = 3000  # a sample of larger spaces: twins come in families, a sample finds them


def _space(f, shapes):
    return Space.for_plan(make_plan(capture(Fn, [f], lambda: [torch.randn(*s) for s in shapes])),
                          Target())


@pytest.mark.parametrize("name", list(CASES))
def test_configurations_render_distinct_kernels(name):
    sp = _space(*CASES[name])
    configs = sp.configs
    if len(configs) > MAX_RENDERED:
        configs = random.Random(0).sample(configs, MAX_RENDERED)
    by_kernel = collections.defaultdict(list)
    for c in configs:
        r = sp.render(c)
        by_kernel[(r.source, repr(r.launches))].append(c.short())
    twins = [v for v in by_kernel.values() if len(v) > 1]
    assert not twins, (len(twins), twins[:2])


def test_a_recorded_twin_folds_onto_its_canonical_configuration():
    sp = _space(lambda x: F.layer_norm(x, x.shape[-1:]), [(16, 512)])
    cfg = next(c for c in sp.iter_configs() if sp.template_of(c).name == "row" and
               c["memory.cache"] == "reload" and c["config.tpr"] * c["memory.vec"] >= 128)
    assert cfg["compute.unroll"] == 1
    recorded = {**cfg.as_dict(), "compute.unroll": 4}  # a sweep of before the fold
    assert sp.upgrade(recorded) == cfg
