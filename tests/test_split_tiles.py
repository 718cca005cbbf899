"""The split template's output pass (few long rows normalized by their own reductions: a
Frobenius normalization, an L1 normalization of a handful of rows): the block-walks-its-chunk
layout and the grid of small tiles must write the same, on the CPU emulator."""

from __future__ import annotations

import random

import pytest
import torch

import cpu_exec
from helpers import Fn, fast_first
from cuda_agent.errors import UnsupportedError
from cuda_agent.ir.capture import capture
from cuda_agent.ir.planning import make_plan
from cuda_agent.space.slots import Target
from cuda_agent.space.space import Space

CASES = {
    "frobenius": (lambda x: x / torch.norm(x, p="fro"), (37, 1001)),
    "l1_few_rows": (lambda x: x / x.abs().sum(1, keepdim=True), (3, 50000)),
}


def _space(f, shape):
    plan = make_plan(capture(Fn, [f], lambda: [torch.randn(*shape)]))
    return plan, Space.for_plan(plan, Target())


def test_tiles_are_offered_only_where_an_output_pass_writes_the_tensor():
    _, sp = _space(*CASES["frobenius"])
    assert {c["config.out_grid"] for c in sp.configs if c["reduction.scope"] == "split"} == \
        {"chunks", "tiles"}
    _, rows = _space(lambda x: x.sum(-1), (3, 50000))
    assert {c["config.out_grid"] for c in rows.configs if c.get("reduction.scope", "split")
            == "split"} == {"chunks"}


@pytest.mark.skipif(not cpu_exec.available(), reason="needs g++")
@pytest.mark.parametrize("name", fast_first(sorted(CASES), ["frobenius"]))
def test_both_output_layouts_match_torch(name):
    f, shape = CASES[name]
    plan, sp = _space(f, shape)
    x = torch.randn(*shape)
    want = f(x.double()).float().numpy().reshape(plan.out_shape)
    split = [c for c in sp.configs if c.get("reduction.scope", "split") == "split"]
    rng = random.Random(name)
    for layout in ("chunks", "tiles"):
        for cfg in rng.sample([c for c in split if c["config.out_grid"] == layout], 3):
            r = sp.render(cfg)
            out_launch = next(L for L in r.launches if L.kernel == "ca_split_out")
            if layout == "tiles":  # a block per unroll x block x vec elements of a row
                per = cfg["config.block"] * cfg["memory.vec"] * cfg["compute.unroll"]
                assert out_launch.grid[0] == -(-plan.R // per)
            err = cpu_exec.max_rel_error(r, [x.numpy()], want)
            assert err < 1e-5, (cfg.short(), err)


def test_a_sum_over_more_than_2_31_elements_is_split_with_64_bit_positions():
    """A loss over two 12 GiB tensors (3.2e9 elements: realistic `loss_mse_large`) had no valid
    configuration ("row too long for int indices"); positions along the row are 64-bit at that
    length. An argmax there stays refused: the index it carries is an int."""
    big = (24576, 131072)  # captured on meta tensors: nothing is allocated
    plan = make_plan(capture(Fn, [lambda x, y: torch.nn.functional.mse_loss(x, y)],
                             lambda: [torch.randn(*big), torch.randn(*big)]))
    sp = Space.for_plan(plan, Target())
    split = [c for c in sp.configs if c.get("reduction.scope", "split") == "split"]
    assert plan.R > 2**31 and split
    src = sp.render(split[0]).source
    assert "typedef long long idx_t;" in src and "typedef int idx_t;" not in src
    arg = make_plan(capture(Fn, [lambda x: x.flatten().argmax()], lambda: [torch.randn(*big)]))
    with pytest.raises(UnsupportedError, match="no valid configuration"):
        Space.for_plan(arg, Target()).configs
