"""Every configuration of a space renders a different kernel. Two configurations that differ
only in a slot without effect there are one kernel measured twice: the search spends its budget
on it and the agents learn a slot that does nothing. The row template's unrolling had none
where the row loop is always unrolled whole (20 % of a layer norm's row configurations were
such twins); `canonical` now folds them, and recorded twins fold onto one configuration."""

from __future__ import annotations

import collections

import torch
import torch.nn.functional as F

from helpers import Fn
from cuda_agent.ir.capture import capture
from cuda_agent.ir.plan import make_plan
from cuda_agent.space.slots import Target
from cuda_agent.space.space import Space


def _space(f, shape):
    return Space.for_plan(make_plan(capture(Fn, [f], lambda: [torch.randn(*shape)])), Target())


def test_row_configurations_render_distinct_kernels():
    sp = _space(lambda x: F.layer_norm(x, x.shape[-1:]), (16, 512))
    rows = [c for c in sp.configs if sp.template_of(c).name == "row"]
    assert len(rows) > 1000
    by_source = collections.defaultdict(list)
    for c in rows:
        by_source[sp.render(c).source].append(c.short())
    twins = [v for v in by_source.values() if len(v) > 1]
    assert not twins, twins[:3]


def test_a_recorded_twin_folds_onto_its_canonical_configuration():
    sp = _space(lambda x: F.layer_norm(x, x.shape[-1:]), (16, 512))
    cfg = next(c for c in sp.configs if sp.template_of(c).name == "row" and
               c["memory.cache"] == "reload" and c["config.tpr"] * c["memory.vec"] >= 128)
    assert cfg["compute.unroll"] == 1
    recorded = {**cfg.as_dict(), "compute.unroll": 4}  # a sweep of before the fold
    assert sp.upgrade(recorded) == cfg
