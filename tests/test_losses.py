"""Losses lower to elementwise ops and reductions that match torch (checked with the IR
interpreter of test_capture), and the single-kernel ones plan onto existing templates."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from cuda_agent.errors import UnsupportedError
from cuda_agent.ir.capture import lower
from cuda_agent.ir.plan import make_plan
from helpers import Fn
from test_capture import interpret

CASES = {
    "mse": (lambda a, b: F.mse_loss(a, b), "reduction"),
    "l1_sum": (lambda a, b: F.l1_loss(a, b, reduction="sum"), "reduction"),
    "smooth_l1": (lambda a, b: F.smooth_l1_loss(a, b, beta=0.5), "reduction"),
    "huber": (lambda a, b: F.huber_loss(a, b, delta=2.0), "reduction"),
    "kl_none": (lambda a, b: F.kl_div(a, b.abs(), reduction="none"), "elementwise"),
    "hinge": (lambda a, b: F.hinge_embedding_loss(a, torch.sign(b)), "reduction"),
    "soft_margin": (lambda a, b: F.soft_margin_loss(a, torch.sign(b)), "reduction"),
    "cosine": (lambda a, b: 1 - F.cosine_similarity(a, b, dim=1), "reduction"),
    "bce": (lambda a, b: F.binary_cross_entropy(torch.sigmoid(a), torch.sigmoid(b)), "reduction"),
}


def capture(f, n=2, shape=(8, 16)):
    with torch.device("meta"):
        ins = [torch.randn(*shape) for _ in range(n)]
    return lower(torch.export.export(Fn(f), tuple(ins)))


@pytest.mark.parametrize("name", sorted(CASES))
def test_loss_lowering_matches_torch_and_plans(name):
    f, family = CASES[name]
    g = capture(f)
    x = [torch.randn(8, 16, dtype=torch.float64) for _ in range(2)]
    torch.testing.assert_close(interpret(g, x), f(*x).double(), rtol=1e-12, atol=1e-12)
    assert make_plan(g).family == family


@pytest.mark.parametrize("f", [
    lambda a, b: F.kl_div(torch.log_softmax(a, -1), torch.softmax(b, -1), reduction="batchmean"),
    lambda a, b: F.triplet_margin_loss(a, b, -b),
], ids=["kl_batchmean_of_softmaxes", "triplet"])
def test_losses_needing_two_kernels_are_reported_not_faked(f):
    g = capture(f)
    x = [torch.randn(8, 16, dtype=torch.float64) for _ in range(2)]
    torch.testing.assert_close(interpret(g, x), f(*x).double(), rtol=1e-12, atol=1e-12)
    with pytest.raises(UnsupportedError, match="multi-kernel partitioning"):
        make_plan(g)
