"""Depthwise convolutions on the direct template (`dwconv`): which convolutions it covers, and
its kernels' results against torch, run on the CPU (`cpu_exec`)."""

from __future__ import annotations

import dataclasses
import random

import pytest
import torch
import torch.nn.functional as F

import cpu_exec
from helpers import Fn
from cuda_agent.ir.capture import capture
from cuda_agent.ir.conv import depthwise_window
from cuda_agent.ir.planning import make_plan
from cuda_agent.space.slots import Target
from cuda_agent.space.space import Space

# one worker runs the module's tests (`--dist loadgroup`, pyproject), so its module fixtures
# (`emulated`) are built once, not once per worker
pytestmark = pytest.mark.xdist_group("test_dwconv")

TARGET = Target()


def space_of(f, *shapes) -> Space:
    return Space.for_plan(make_plan(capture(Fn, [f], lambda: [torch.randn(*s) for s in shapes])),
                          TARGET)


def dw_configs(sp: Space) -> list:
    return sp.configs_of("dwconv")


@pytest.mark.parametrize("f,shapes,covered", [
    (lambda x, w: F.conv2d(x, w, padding=1, groups=8), [(2, 8, 9, 9), (8, 1, 3, 3)], True),
    (lambda x, w: F.conv2d(x, w, groups=4), [(2, 4, 9, 9), (8, 1, 3, 3)], True),  # multiplier 2
    (lambda x, w: F.conv2d(x, w, groups=4), [(2, 8, 9, 9), (8, 2, 3, 3)], False),  # 2 per group
    (lambda x, w: F.conv2d(x, w), [(2, 8, 9, 9), (8, 8, 3, 3)], False),
    (lambda x, w: F.conv_transpose2d(x, w, groups=8), [(2, 8, 9, 9), (8, 1, 3, 3)], False),
])
def test_the_template_covers_depthwise_convolutions_only(f, shapes, covered):
    sp = space_of(f, *shapes)
    assert (depthwise_window(sp.plan) is not None) == covered
    assert ("dwconv" in [t.name for t in sp.templates]) == covered


def test_large_windows_are_left_to_the_implicit_gemm():
    sp = space_of(lambda x, w: F.conv2d(x, w, groups=4), (1, 4, 12, 12), (4, 1, 9, 9))
    assert not dw_configs(sp) and "gemm" in [t.name for t in sp.templates]


CASES = {
    "3x3_pad": (lambda x, w, b: F.conv2d(x, w, b, padding=1, groups=5),
                [(2, 5, 13, 11), (5, 1, 3, 3), (5,)]),
    "strided_dilated_asym": (lambda x, w: F.conv2d(x, w, stride=(2, 1), padding=(2, 1),
                                                  dilation=(2, 1), groups=3),
                             [(2, 3, 15, 14), (3, 1, 3, 2)]),
    "multiplier_epilogue": (lambda x, w: torch.relu(F.conv2d(x, w, padding=2, groups=3)) * 0.5,
                            [(1, 3, 10, 9), (6, 1, 5, 5)]),
    "conv1d": (lambda x, w: F.conv1d(x, w, stride=2, padding=3, groups=4),
               [(2, 4, 37), (4, 1, 7)]),
    "conv3d": (lambda x, w: F.conv3d(x, w, padding=1, groups=2), [(1, 2, 6, 7, 9), (2, 1, 3, 3, 3)]),
    # rows of a multiple of 4: float4 window loads and output stores
    "3x3_vec": (lambda x, w, b: F.conv2d(x, w, b, padding=1, groups=4),
                [(2, 4, 9, 24), (4, 1, 3, 3), (4,)]),
}
SAMPLE = 12


@pytest.fixture(scope="module")
def emulated(tmp_path_factory):
    if not cpu_exec.available():
        pytest.skip("g++ is not available")
    meta, jobs = [], []
    for name, (f, shapes) in CASES.items():
        sp = space_of(f, *shapes)
        torch.manual_seed(0)
        xs = [torch.randn(*s) for s in shapes]
        want = f(*[x.double() for x in xs]).float()
        rng = random.Random(name)
        vec = [c for c in dw_configs(sp) if c["memory.vec"] == 4]
        assert vec or "vec" not in name  # the vector cases have vector configurations
        for cfg in rng.sample(dw_configs(sp), SAMPLE - min(4, len(vec))) + \
                rng.sample(vec, min(4, len(vec))):
            meta.append((name, cfg, want))
            jobs.append((sp.render(cfg), [xs[k] for k in sp.plan.operands], sp.plan.out_shape))
    outs = cpu_exec.run_threadless(jobs, tmp_path_factory.mktemp("dwconv"))
    return [(name, cfg, got, want) for (name, cfg, want), got in zip(meta, outs)]


@pytest.mark.parametrize("name", sorted(CASES))
def test_generated_kernels_compute_what_torch_computes(name, emulated):
    runs = [(cfg, got, want) for case, cfg, got, want in emulated if case == name]
    assert len(runs) == SAMPLE
    for cfg, got, want in runs:
        assert torch.allclose(got, want, rtol=1e-5, atol=1e-5), \
            f"{cfg.short()}: max error {(got - want).abs().nan_to_num(1e30).max()}"


def test_the_emulator_catches_a_wrong_tap(tmp_path):
    """A kernel that pairs window elements with the wrong weights fails the comparison."""
    if not cpu_exec.available():
        pytest.skip("g++ is not available")
    f, shapes = CASES["strided_dilated_asym"]
    sp = space_of(f, *shapes)
    r = sp.render(dw_configs(sp)[0])
    wrong = dataclasses.replace(r, source=r.source.replace("wk[k0 * 2 + k]", "wk[k0 + k]"))
    assert wrong.source != r.source
    xs = [torch.randn(*s) for s in shapes]
    want = f(*[x.double() for x in xs]).float()
    good, bad = cpu_exec.run_threadless(
        [(r, [xs[k] for k in sp.plan.operands], sp.plan.out_shape),
         (wrong, [xs[k] for k in sp.plan.operands], sp.plan.out_shape)], tmp_path)
    assert torch.allclose(good, want, rtol=1e-5, atol=1e-5)
    assert not torch.allclose(bad, want, rtol=1e-5, atol=1e-5)
