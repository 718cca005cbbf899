"""The direct depthwise convolution, float4 pooling windows, the L2 keep hint, the online
pass with extra sums and the Welford pass, on the real GPU: each configuration kind must match torch (float64
reference) on sizes that exercise the vector paths, the edges and the multipliers."""

from __future__ import annotations

import random

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
    # (function, input shapes, which configurations: a slot and its value)
    "dwconv_3x3": (lambda x, w, b: F.conv2d(x, w, b, padding=1, groups=64),
                   [(4, 64, 66, 128), (64, 1, 3, 3), (64,)], ("reduction.scope", "dwconv")),
    "dwconv_mult2_dilated": (lambda x, w: F.conv2d(x, w, padding=2, dilation=2, groups=16),
                             [(2, 16, 37, 53), (32, 1, 3, 3)], ("reduction.scope", "dwconv")),
    "dwconv_1d_strided": (lambda x, w: F.conv1d(x, w, stride=2, padding=3, groups=8),
                          [(4, 8, 4099), (8, 1, 7)], ("reduction.scope", "dwconv")),
    "avg_pool1d_vec": (lambda x: F.avg_pool1d(x, 5, 1, 2), [(8, 16, 8192)], ("memory.vec", 4)),
    "max_pool2d_vec": (lambda x: F.max_pool2d(x, 3, 2, 1), [(4, 16, 64, 128)], ("memory.vec", 4)),
    "layer_norm_keep": (lambda x: F.layer_norm(x, x.shape[-1:]), [(512, 16384)],
                        ("memory.load", "keep")),
    "softmax_keep": (lambda x: torch.softmax(x, -1), [(128, 4097)], ("memory.load", "keep")),
    "ce_probs_online": (lambda x, p: F.cross_entropy(x, p), [(256, 8192), (256, 8192)],
                        ("compute.algo", "online")),
    # Welford: the mean and the squared deviations in one sweep (not yet run on the GPU when
    # written: 2026-11-30's device time was spent)
    "layer_norm_welford": (lambda x: F.layer_norm(x, x.shape[-1:]), [(512, 16384)],
                           ("compute.algo", "online")),
    "layer_norm_welford_cluster": (lambda x: F.layer_norm(x, x.shape[-1:]), [(256, 65536)],
                                   ("config.cluster", 4)),  # both algorithms among them
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_new_configurations_match_torch_on_the_gpu(name):
    f, shapes, (slot, value) = CASES[name]
    plan = make_plan(capture(Fn, [f], lambda: [torch.randn(*s) for s in shapes]))
    sp = Space.for_plan(plan, Target())
    torch.manual_seed(0)
    xs = [torch.randn(*s, device="cuda") for s in shapes]
    if name.startswith("ce_"):
        xs[1] = xs[1].softmax(1)
    xs[0].view(-1)[-1] = 30.0  # an extreme at the very end (edges, the last segment)
    want = f(*[x.double() for x in xs]).float().reshape(plan.out_shape)
    pool = [c for c in sp.configs if c.get(slot) == value]
    assert pool, f"no {slot}={value} configuration"
    picked = random.Random(name).sample(pool, min(8, len(pool)))
    ops = [xs[k].reshape(plan.operand_shapes[k]).contiguous() for k in plan.operands]
    check_all(sp, picked, ops, want)
