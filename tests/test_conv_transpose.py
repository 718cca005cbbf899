"""Transposed convolutions as implicit GEMMs: capture of conv_transpose1d/2d/3d, the plan's
facts (shape of the GEMM, the weight read with K split in two runs, the FLOP count), the
generated gathers executed on the CPU emulator against torch, and a tune on `sim`."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import cpu_exec
from helpers import Fn, fast_first
from cuda_agent.errors import UnsupportedError
from cuda_agent.ir.capture import capture
from cuda_agent.ir.planning import make_plan
from cuda_agent.space.slots import Target
from cuda_agent.space.space import Space

ROOT = Path(__file__).resolve().parents[1]


class ConvT(nn.Module):
    def __init__(self, rank: int, cin: int, cout: int, k, **kw) -> None:
        super().__init__()
        cls = {1: nn.ConvTranspose1d, 2: nn.ConvTranspose2d, 3: nn.ConvTranspose3d}[rank]
        self.conv = cls(cin, cout, k, **kw)

    def forward(self, x):
        return torch.relu(self.conv(x))


# (rank, C_in, C_out, kernel), keyword arguments, input shape
CASES = {
    "1d_stride_pad": ((1, 3, 5, 4), dict(stride=3, padding=2), (2, 3, 7)),
    "2d_stride2_pad_outpad": ((2, 4, 6, 3), dict(stride=2, padding=1, output_padding=1),
                              (2, 4, 5, 6)),
    # kernel 4x4: K runs of 16, so A's loads may be 4-wide
    "2d_k4_stride2": ((2, 3, 4, 4), dict(stride=2, padding=1), (2, 3, 5, 4)),
    "2d_dilated_grouped": ((2, 4, 6, (3, 2)), dict(stride=(2, 3), padding=(1, 0),
                                                   output_padding=(1, 2), dilation=(1, 2),
                                                   groups=2), (1, 4, 5, 4)),
    "2d_depthwise": ((2, 6, 6, 3), dict(groups=6, stride=2, bias=False), (2, 6, 4, 4)),
    "2d_pointwise": ((2, 6, 12, 1), dict(stride=2), (2, 6, 4, 4)),
    "3d": ((3, 2, 4, (2, 3, 2)), dict(stride=(1, 2, 2), padding=(0, 1, 1)), (2, 2, 3, 4, 3)),
}


def case_plan(name: str):
    (rank, cin, cout, k), kw, shape = CASES[name]
    g = capture(lambda *a: ConvT(*a, **kw), [rank, cin, cout, k], lambda: [torch.randn(*shape)])
    return make_plan(g)


# -- capture and planning -----------------------------------------------------------------------

def test_capture_marks_the_conv_transposed_and_adds_the_bias_after_it():
    g = case_plan("2d_stride2_pad_outpad").graph
    conv = next(n for n in g.live() if n.op == "conv")
    assert conv.attr("transposed") and conv.attr("stride") == (2, 2)
    assert conv.attr("padding") == (1, 1) and conv.shape == (2, 6, 10, 12)
    assert {"add", "relu"} <= {n.op for n in g.live()}


@pytest.mark.parametrize("name", sorted(CASES))
def test_plan_is_one_gemm_per_image_and_group_with_the_useful_flops(name):
    (rank, cin, cout, k), kw, shape = CASES[name]
    G = kw.get("groups", 1)
    ks = math.prod(k) if isinstance(k, tuple) else k ** rank
    f = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}[rank]
    args = {a: kw[a] for a in ("stride", "padding", "output_padding", "groups", "dilation")
            if a in kw}
    wshape = (cin, cout // G) + ((k,) * rank if isinstance(k, int) else k)
    # no bias, no epilogue: the plan's FLOPs are the transposed convolution's alone
    g = capture(Fn, [lambda x, w: f(x, w, **args)],
                lambda: [torch.randn(*shape), torch.randn(*wshape)])
    plan = make_plan(g)
    out = f(torch.randn(*shape, device="meta"), torch.randn(*wshape, device="meta"), **args)
    info = plan.info
    assert plan.family == "conv" and info.b_gather.transposed
    assert (info.batch, info.M, info.N, info.K) == (shape[0] * G, cout // G,
                                                   math.prod(out.shape[2:]), cin // G * ks)
    assert plan.flops() == 2 * shape[0] * cin * math.prod(shape[2:]) * (cout // G) * ks


def test_weight_k_is_split_only_where_one_stride_cannot_describe_it():
    # (C_in, C_out/G, 3, 3): a channel's 9 kernel offsets, then the next channel 6 * 9 on
    info = case_plan("2d_stride2_pad_outpad").info
    assert info.a_strides == (0, 9, 1) and info.a_k_split == (9, 54)
    assert case_plan("2d_depthwise").info.a_k_split is None  # C_out/G = 1: contiguous
    info = case_plan("2d_pointwise").info  # 1x1 kernel: K is the channel, stride C_out
    assert info.a_k_split is None and info.a_strides == (0, 1, 12)


def gemm_configs(name: str) -> list:
    sp = Space.for_plan(case_plan(name), Target())
    return sp.configs_of("gemm")


def test_vector_loads_of_the_weight_need_whole_runs_of_four():
    assert all(c["memory.vec_a"] == 1 for c in gemm_configs("2d_stride2_pad_outpad"))  # 9
    k4 = gemm_configs("2d_k4_stride2")  # runs of 16
    assert any(c["memory.vec_a"] == 4 for c in k4)
    assert all(c["memory.vec_b"] == 1 for c in k4)  # B is gathered


def test_an_unbatched_transposed_conv_is_refused_by_name():
    with pytest.raises(UnsupportedError, match="conv_transpose2d of an unbatched input"):
        capture(Fn, [lambda x, w: F.conv_transpose2d(x, w)],
                lambda: [torch.randn(3, 5, 5), torch.randn(3, 2, 3, 3)])


def test_benchmark_problems_plan_as_transposed_convs():
    from cuda_agent.problem import load_problem

    paths = sorted((ROOT / "benchmarks" / "problems").glob("*conv_transpose*.py"))
    assert len(paths) == 5
    for p in paths:
        plan = make_plan(load_problem(p).graph())
        assert plan.family == "conv" and plan.info.b_gather.transposed, p.stem


# -- generated code, executed -------------------------------------------------------------------

def case_run(name: str, seed: int):
    """The case's plan, its operands in kernel order and torch's float64 answer."""
    (rank, cin, cout, k), kw, shape = CASES[name]
    plan = case_plan(name)
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=gen)
    model = ConvT(rank, cin, cout, k, **kw)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen))
        want = model.double()(x.double()).numpy()
    params = dict(model.named_parameters())
    by_index = []
    for k_ in plan.operands:
        gi = plan.graph.inputs[k_]
        by_index.append(x.numpy() if gi.role == "input" else
                        params[gi.target].detach().float().numpy())
    return plan, by_index, want


@pytest.mark.skipif(not cpu_exec.available(), reason="needs g++ for the CPU emulator")
@pytest.mark.parametrize("name", fast_first(sorted(CASES), ["1d_stride_pad", "2d_dilated_grouped"]))
def test_generated_conv_transpose_matches_torch(name):
    plan, by_index, want = case_run(name, 7)
    sp = Space.for_plan(plan, Target())
    rng = random.Random(name)
    small = [c for c in sp.configs_of("gemm") if
             c["config.bm"] * c["config.bn"] <= 64 * 64]
    picked = [sp.default()] + rng.sample(small, 2)
    for pred in (lambda c: c["reduction.split"] > 1, lambda c: c["memory.vec_a"] == 4,
                 lambda c: c["memory.stages"] == 2):
        some = [c for c in small if pred(c)]
        picked += rng.sample(some, 1) if some else []
    cpu_exec.prebuild([(sp.render(c), len(by_index)) for c in picked])
    for cfg in picked:
        err = cpu_exec.max_rel_error(sp.render(cfg), by_index, want)
        assert err < 1e-5, (cfg.short(), err)


@pytest.mark.skipif(not cpu_exec.available(), reason="needs g++ for the CPU emulator")
@pytest.mark.parametrize("name", fast_first(sorted(CASES), ["1d_stride_pad", "2d_k4_stride2"]))
def test_tensor_core_conv_transpose_matches_torch(name):
    """The 3xTF32 template on transposed convolutions: B gathered where the stride lands an
    input pixel, the weight's K in two runs where one stride cannot describe it."""
    plan, by_index, want = case_run(name, 8)
    sp = Space.for_plan(plan, Target())
    tc = [c for c in sp.configs_of("gemm_tc") if
          c["config.bm"] * c["config.bn"] <= 128 * 128]
    assert tc
    for cfg in random.Random(name).sample(tc, min(2, len(tc))):
        err = cpu_exec.max_rel_error(sp.render(cfg), by_index, want)
        assert err < 1e-5, (cfg.short(), err)


@pytest.mark.skipif(not cpu_exec.available(), reason="needs g++ for the CPU emulator")
def test_library_transposed_conv_with_generated_epilogue_matches_torch():
    plan, by_index, want = case_run("2d_dilated_grouped", 11)  # output_padding (1, 2)
    sp = Space.for_plan(plan, Target())
    lib = sp.configs_of("lib")
    r = sp.render(lib[0])
    assert r.launches[0].library["op"] == "conv_transpose"
    assert r.launches[0].library["output_padding"] == [1, 2]
    assert cpu_exec.max_rel_error(r, by_index, want) < 1e-5


# -- end to end -----------------------------------------------------------------------------------

def test_tune_a_fused_transposed_conv_on_sim(tmp_path):
    import cuda_agent
    from cuda_agent.problem import load_problem
    from cuda_agent.tuner import library_twins

    r = cuda_agent.tune(ROOT / "benchmarks/problems/fused_conv_transpose2d_relu_bias.py",
                        out=tmp_path / "o", device="sim", budget=8, store=":memory:",
                        strategy="random")
    assert r.simulated and r.best is not None
    # every template's default is measured first (a generated GEMM and the library product,
    # the library's in each of cuDNN's layouts: `library_twins`)
    sp = Space.for_plan(make_plan(load_problem(
        ROOT / "benchmarks/problems/fused_conv_transpose2d_relu_bias.py").graph()), Target())
    lib = next(c for c in sp.template_defaults(fallback=True) if sp.template_of(c).name == "lib")
    twins = library_twins(sp, lib)
    assert twins, "the library product has a channels-last twin"
    first = r.trials[:len(sp.templates) + len(twins)]
    assert {t.template for t in first} == {t.name for t in sp.templates} >= {"gemm", "lib"}
    src = (tmp_path / "o" / "kernel.cu").read_text()
    assert ("ca_lib_epilogue" if r.best.template == "lib" else "ca_gemm") in src
    # the generated kernels run the stride-2 convolution as four phases of their own taps
    # (`tconv_phases.py`): tap tables, no divisibility test on gathered zeros
    for t in first:
        if t.template != "lib":
            src = sp.render(t.config).source
            assert t.config["memory.tconv"] == "phase" and "ca_ptap" in src, t.template
            assert "% 2 == 0" not in src
