"""The row template's Welford pass: a mean and the squared deviations from it in one sweep
(`compute.algo=online` where a plan has sum(x) then sum((x - mean)^2)), per thread as sums
shifted by its first element, merged across lanes, warps and cluster blocks by Chan's formula.
Which plans get it, and results on the CPU emulator, including rows whose mean dwarfs their
spread (where the textbook E[x^2] - E[x]^2 would cancel)."""

from __future__ import annotations

import random

import pytest
import torch
import torch.nn.functional as F

import cpu_exec
from helpers import Fn
from cuda_agent.ir.capture import capture
from cuda_agent.ir.planning import make_plan
from cuda_agent.space.slots import Target
from cuda_agent.space.space import Space
from cuda_agent.space.templates.rowcommon import make_passes, welford_pair


def manual_normalize(x):
    mean = x.mean(-1, keepdim=True)  # computed twice on purpose: the duplicate rides along
    var = ((x - x.mean(-1, keepdim=True)) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + 1e-5)


CASES = {
    "layer_norm": lambda x: F.layer_norm(x, x.shape[-1:]),
    "manual_normalize": manual_normalize,
    "rms_norm": lambda x: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6),  # no pair
}
# a per-row scale: a row operand (named w<k> in the kernels) beside the Welford variables
ROW_SCALED = (lambda x, g: (x - x.mean(-1, keepdim=True)) /
              torch.sqrt(x.var(-1, unbiased=False, keepdim=True) + 1e-5) * g)


def _space(f, shape):
    plan = make_plan(capture(Fn, [f], lambda: [torch.randn(*shape)]))
    return plan, Space.for_plan(plan, Target())


def test_the_pair_is_found_where_the_variance_follows_the_mean():
    plan, _ = _space(CASES["layer_norm"], (5, 300))
    assert welford_pair(plan) is not None
    (p, out) = make_passes(plan, True)
    assert p.welford_shift is not None and len(p.reducers) == 2 and out.writes_output
    plan, _ = _space(CASES["manual_normalize"], (5, 300))
    (p, _) = make_passes(plan, True)
    assert len(p.reducers) == 3  # the second mean is an extra of the same sweep
    plan, sp = _space(CASES["rms_norm"], (5, 300))
    assert welford_pair(plan) is None
    assert not [c for c in sp.configs if c["compute.algo"] == "online"]


@pytest.mark.skipif(not cpu_exec.available(), reason="needs g++")
@pytest.mark.parametrize("name", ["layer_norm", "manual_normalize"])
@pytest.mark.parametrize("shape", [(5, 300), (3, 1100)], ids=["odd_rows", "cluster_rows"])
def test_welford_kernels_match_torch(name, shape):
    f = CASES[name]
    plan, sp = _space(f, shape)
    online = [c for c in sp.configs_of("row") if c["compute.algo"] == "online"]
    rng = random.Random(name + str(shape))
    picked = rng.sample([c for c in online if c.get("config.cluster", 1) == 1], 5)
    clustered = [c for c in online if c.get("config.cluster", 1) > 1 and c["config.block"] <= 64]
    picked += rng.sample(clustered, min(3, len(clustered)))
    # a mean 300 times the spread: a plain fp32 sum of the row (the manual normalize's
    # second mean) is then off by ~1e-5 of the spread; E[x^2] - E[x]^2 would be off entirely
    cpu_exec.prebuild([(sp.render(c), 1) for c in picked])
    for offset in (0.0, 300.0):
        x = torch.randn(*shape) + offset
        want = f(x.double()).float().numpy()
        for cfg in picked:
            err = cpu_exec.max_rel_error(sp.render(cfg), [x.numpy()], want)
            assert err < 1e-4, (cfg.short(), offset, err)  # the verifier's fp32 tolerance


@pytest.mark.skipif(not cpu_exec.available(), reason="needs g++")
def test_a_merge_without_the_between_parts_term_is_caught():
    """Dropping Chan's delta^2 n_a n_b / n term (the spread between the parts' means) must
    fail: the comparison above can fail."""
    import dataclasses

    f = CASES["layer_norm"]
    plan, sp = _space(f, (5, 300))
    cfg = next(c for c in sp.iter_configs()
               if c["compute.algo"] == "online" and c["config.tpr"] >= 64)
    r = sp.render(cfg)
    wrong = dataclasses.replace(r, source=r.source.replace("dl_ * dl_ * wf_n * f_", "0.f"))
    assert wrong.source != r.source
    x = torch.randn(5, 300) + torch.linspace(-3, 3, 300)  # the parts' means differ
    want = f(x.double()).float().numpy()
    assert cpu_exec.max_rel_error(r, [x.numpy()], want) < 1e-4
    assert cpu_exec.max_rel_error(wrong, [x.numpy()], want) > 1e-3


@pytest.mark.skipif(not cpu_exec.available(), reason="needs g++")
def test_row_operands_keep_their_names_beside_the_welford_sums():
    shapes = [(5, 300), (5, 1)]
    plan = make_plan(capture(Fn, [ROW_SCALED], lambda: [torch.randn(*s) for s in shapes]))
    sp = Space.for_plan(plan, Target())
    online = [c for c in sp.configs if c["compute.algo"] == "online"]
    assert welford_pair(plan) is not None and online
    xs = [torch.randn(*s) for s in shapes]
    want = ROW_SCALED(*[x.double() for x in xs]).float().numpy()
    ops = [xs[k].reshape(plan.operand_shapes[k]).numpy() for k in plan.operands]
    picked = random.Random(7).sample(online, 4)
    cpu_exec.prebuild([(sp.render(c), len(ops)) for c in picked])
    for cfg in picked:
        err = cpu_exec.max_rel_error(sp.render(cfg), ops, want)
        assert err < 1e-4, (cfg.short(), err)
