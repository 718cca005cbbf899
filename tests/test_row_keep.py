"""The row template's `keep` load hint: a row re-read by a later pass is read first with an L2
evict-last policy and last with evict-first (what torch.compile's looped reductions do), so
the re-read finds it in L2. Which passes get which hint, where it is offered, and results on
the CPU emulator."""

from __future__ import annotations

import random
import re

import pytest
import torch
import torch.nn.functional as F

import cpu_exec
from helpers import Fn
from cuda_agent.ir.capture import capture
from cuda_agent.ir.planning import make_plan
from cuda_agent.space.slots import Target
from cuda_agent.space.space import Space

CASES = {
    "layer_norm": lambda x: F.layer_norm(x, x.shape[-1:]),  # 3 passes over x
    "softmax": lambda x: torch.softmax(x, -1),
    "l1_normalize": lambda x: x / x.abs().sum(1, keepdim=True),
}


def _space(f):
    plan = make_plan(capture(Fn, [f], lambda: [torch.randn(5, 300)]))
    return plan, Space.for_plan(plan, Target())


@pytest.mark.parametrize("name", sorted(CASES))
def test_keep_hints_every_read_but_the_last(name):
    plan, space = _space(CASES[name])
    keep = [c for c in space.configs if c["memory.load"] == "keep"]
    assert keep and all(c["memory.cache"] == "reload" for c in keep)
    src = space.render(keep[0]).source
    hints = [int(h) for h in re.findall(r"ca_ld\d?<(\d)>\(in0", src)]
    assert hints[-1] == 2 and set(hints[:-1]) == {3}, hints  # evict-last, then evict-first


def test_keep_holds_operands_every_row_reads_in_l2():
    """An affine layer norm's weight and bias are read by every row: streaming them out in the
    output pass (as the row itself is) would make each row fetch them from DRAM again."""
    plan = make_plan(capture(Fn, [lambda x, w, b: F.layer_norm(x, (300,), w, b)],
                             lambda: [torch.randn(5, 300), torch.randn(300), torch.randn(300)]))
    space = Space.for_plan(plan, Target())
    keep = [c for c in space.configs if c["memory.load"] == "keep"]
    src = space.render(keep[0]).source
    reads = re.findall(r"ca_ld\d?<(\d)>\(in(\d+) \+ \(([^)]*)\)", src)
    row = [h for h, _, off in reads if "o * 300" in off]
    shared = [h for h, _, off in reads if "o * 300" not in off]
    assert row[-1] == "2" and set(row[:-1]) == {"3"}, reads
    assert len(shared) >= 2 and set(shared) == {"3"}, reads  # evict-last wherever read


def test_keep_is_not_offered_where_nothing_is_read_twice():
    _, space = _space(lambda x: x.sum(-1))
    assert not [c for c in space.configs if c["memory.load"] == "keep"]


@pytest.mark.skipif(not cpu_exec.available(), reason="needs g++")
@pytest.mark.parametrize("name", sorted(CASES))
def test_keep_kernels_match_torch(name):
    f = CASES[name]
    plan, space = _space(f)
    keep = [c for c in space.configs if c["memory.load"] == "keep"]
    x = torch.randn(5, 300)
    want = f(x.double()).float().numpy()
    picked = random.Random(name).sample(keep, 3)
    cpu_exec.prebuild([(space.render(c), 1) for c in picked])
    for cfg in picked:
        err = cpu_exec.max_rel_error(space.render(cfg), [x.numpy()], want)
        assert err < 1e-5, (cfg.short(), err)
