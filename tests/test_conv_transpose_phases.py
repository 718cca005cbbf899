"""Strided transposed convolutions as one sub-convolution per output phase (slot
`memory.tconv` = "phase", `space/templates/tconv_phases.py`): the phases' geometry against a
brute-force scatter, the slot (offered only where the stride exceeds one, old records read as
"gather"), the generated kernels of both GEMM templates executed on the CPU emulator against
torch (strict and TF32, split-K, fused epilogues, phases with no taps), compiled for sm_90, and
the analytic model's preference for the phased form on the realistic suite's big ones."""

from __future__ import annotations

import itertools
import math
import random
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import cpu_exec
from helpers import fast_first, nvcc_available
from cuda_agent.ir.capture import capture
from cuda_agent.ir.conv import ConvGather, transposed_phases
from cuda_agent.ir.planning import make_plan
from cuda_agent.problem import load_problem
from cuda_agent.space.slots import ABSENT, Config, Target
from cuda_agent.space.space import Space

ROOT = Path(__file__).resolve().parents[1]
TF32_CONV = Target(precision="tf32:conv")  # what --precision auto resolves to by default


# -- the geometry -------------------------------------------------------------------------------

def _gather(in_shape, kernel, stride, padding, dilation, output_padding) -> ConvGather:
    out = tuple((i - 1) * s - 2 * p + d * (k - 1) + op + 1 for i, k, s, p, d, op in
                zip(in_shape, kernel, stride, padding, dilation, output_padding))
    return ConvGather(1, in_shape, kernel, out, stride, padding, dilation, 1, 0, True)


GEOMETRIES = [  # (in, kernel, stride, padding, dilation, output_padding)
    ((5,), (3,), (2,), (1,), (1,), (1,)),
    ((4,), (5,), (3,), (2,), (1,), (2,)),
    ((6,), (3,), (2,), (1,), (2,), (0,)),  # dilation 2, stride 2: one residue gets every tap
    ((4, 3), (2, 2), (3, 3), (0, 0), (1, 1), (0, 0)),  # kernel below the stride
    ((5, 4), (3, 2), (2, 3), (1, 0), (1, 2), (1, 2)),
    ((3, 4, 3), (3, 3, 3), (2, 2, 2), (1, 1, 1), (1, 1, 1), (1, 1, 1)),
    ((2, 3, 4), (2, 3, 2), (1, 2, 3), (0, 1, 1), (1, 1, 1), (0, 1, 0)),
]


@pytest.mark.parametrize("geo", GEOMETRIES, ids=str)
def test_phases_hold_exactly_the_scatter_of_a_transposed_conv(geo):
    """Every (input pixel, tap) pair that a transposed convolution scatters onto the output
    is one (phase column, tap) pair of the phase of its output pixel, and no other pair is."""
    g = _gather(*geo)
    scatter = set()
    for i in itertools.product(*(range(n) for n in g.in_shape)):
        for k in itertools.product(*(range(n) for n in g.kernel)):
            o = tuple(ii * s - p + kk * d for ii, kk, s, p, d in
                      zip(i, k, g.stride, g.padding, g.dilation))
            if all(0 <= oo < n for oo, n in zip(o, g.out_shape)):
                scatter.add((o, k, i))
    phased = set()
    for ph in transposed_phases(g):
        for q in itertools.product(*(range(n) for n in ph.outputs)):
            o = tuple(qq * s + r for qq, s, r in zip(q, g.stride, ph.residue))
            assert all(oo < n for oo, n in zip(o, g.out_shape))
            for k, shift in ph.kernel_positions():
                i = tuple(qq + sh for qq, sh in zip(q, shift))
                if all(0 <= ii < n for ii, n in zip(i, g.in_shape)):
                    phased.add((o, k, i))
    assert phased == scatter
    # the phases cover the output once, and their taps partition the kernel
    assert sum(ph.pixels for ph in transposed_phases(g)) == math.prod(g.out_shape)
    assert sum(ph.tap_count for ph in transposed_phases(g)) == math.prod(g.kernel)


def test_a_kernel_smaller_than_the_stride_leaves_phases_without_taps():
    phases = transposed_phases(_gather((4, 3), (2, 2), (3, 3), (0, 0), (1, 1), (0, 0)))
    assert len(phases) == 9
    assert sorted(ph.tap_count for ph in phases) == [0] * 5 + [1] * 4


# -- the slot -----------------------------------------------------------------------------------

class ConvT(nn.Module):
    """A transposed convolution and an epilogue: "relu", "tanh", "sigmoid", "none", or
    "residual" (gelu of the convolution times a second input of the output's shape)."""

    def __init__(self, rank: int, cin: int, cout: int, k, epilogue: str, **kw) -> None:
        super().__init__()
        cls = {1: nn.ConvTranspose1d, 2: nn.ConvTranspose2d, 3: nn.ConvTranspose3d}[rank]
        self.conv = cls(cin, cout, k, **kw)
        self.epilogue = epilogue

    def forward(self, x, r=None):
        y = self.conv(x)
        if self.epilogue == "residual":
            return F.gelu(y) * r
        return {"relu": torch.relu, "tanh": torch.tanh, "sigmoid": torch.sigmoid,
                "none": lambda v: v}[self.epilogue](y)


# (rank, C_in, C_out, kernel, epilogue), keyword arguments, input shape
CASES = {
    # kernel 3 at stride 2: phases of 2 and 1 taps per dim; output_padding
    "2d_k3_s2_outpad": ((2, 4, 6, 3, "relu"), dict(stride=2, padding=1, output_padding=1),
                        (2, 4, 5, 6)),
    # kernel 2 at stride 3: five of nine phases have no tap (their outputs: sigmoid of the bias)
    "2d_kernel_below_stride": ((2, 3, 4, 2, "sigmoid"), dict(stride=3), (2, 3, 4, 3)),
    "1d_s3_k5": ((1, 3, 4, 5, "tanh"), dict(stride=3, padding=2, output_padding=2), (2, 3, 7)),
    # dilation 2 at stride 2: the odd outputs get every tap, the even ones none
    "1d_dilation_shares_stride": ((1, 3, 4, 3, "none"), dict(stride=2, padding=1, dilation=2),
                                  (2, 3, 6)),
    # 16 channels, kernel 4 at stride 2: 64 per phase, enough K for split-K
    "2d_k4_s2_split": ((2, 16, 8, 4, "relu"), dict(stride=2, padding=1), (1, 16, 5, 4)),
    "2d_dilated_grouped": ((2, 4, 6, (3, 2), "relu"), dict(
        stride=(2, 3), padding=(1, 0), output_padding=(1, 2), dilation=(1, 2), groups=2),
        (1, 4, 5, 4)),
    "2d_residual_gelu": ((2, 4, 4, 3, "residual"), dict(stride=2, padding=1), (2, 4, 4, 5)),
    "3d_k3_s2": ((3, 3, 4, 3, "tanh"), dict(stride=2, padding=1, output_padding=1),
                 (1, 3, 3, 4, 3)),
    "3d_mixed_strides_odd": ((3, 2, 3, (2, 3, 2), "none"), dict(stride=(1, 2, 3),
                                                                padding=(0, 1, 1)),
                             (2, 2, 3, 4, 3)),
}


def _model_inputs(name: str, gen: torch.Generator | None = None) -> tuple[nn.Module, list]:
    (rank, cin, cout, k, epi), kw, shape = CASES[name]
    model = ConvT(rank, cin, cout, k, epi, **kw)
    x = torch.randn(*shape, generator=gen)
    if epi != "residual":
        return model, [x]
    with torch.no_grad():
        out_shape = model.conv(torch.zeros(*shape)).shape
    return model, [x, torch.randn(*out_shape, generator=gen)]


def case_plan(name: str):
    (rank, cin, cout, k, epi), kw, shape = CASES[name]
    model, inputs = _model_inputs(name)
    g = capture(lambda *a: ConvT(*a, **kw), [rank, cin, cout, k, epi], lambda: inputs)
    return make_plan(g)


def case_run(name: str, seed: int, operands: list[np.ndarray] | None = None):
    """The case's plan, its operands in kernel order and torch's float64 answer (on
    `operands` in kernel order where given instead of the seed's draws)."""
    plan = case_plan(name)
    gen = torch.Generator().manual_seed(seed)
    model, inputs = _model_inputs(name, gen)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen))
    params = dict(model.named_parameters())
    by_index = []
    for k in plan.operands:
        gi = plan.graph.inputs[k]
        by_index.append((inputs[gi.arg_index] if gi.role == "input" else
                         params[gi.target].detach()).float().numpy().copy())
    if operands is not None:
        for k, x in zip(plan.operands, operands):
            gi = plan.graph.inputs[k]
            if gi.role == "input":
                inputs[gi.arg_index] = torch.from_numpy(x)
            else:
                with torch.no_grad():
                    params[gi.target].copy_(torch.from_numpy(x))
    with torch.no_grad():
        want = model.double()(*[t.double() for t in inputs]).numpy()
    return plan, by_index, want


def test_the_slot_is_offered_only_for_strided_transposed_convs():
    def slots(f, *shapes):
        g = capture(lambda: f, [], lambda: [torch.randn(*s) for s in shapes])
        sp = Space.for_plan(make_plan(g), Target())
        return {s.name for s in sp.slots}

    strided = slots(nn.ConvTranspose2d(4, 6, 3, stride=2), (2, 4, 5, 5))
    assert "memory.tconv" in strided
    assert "memory.tconv" not in slots(nn.ConvTranspose2d(4, 6, 3, stride=1), (2, 4, 5, 5))
    assert "memory.tconv" not in slots(nn.Conv2d(4, 6, 3, stride=2), (2, 4, 9, 9))
    # both GEMM templates take either form
    for cfg in _first_of_gemms(Space.for_plan(case_plan("2d_k3_s2_outpad"), Target())):
        assert {form for form in ("gather", "phase") if cfg.space.contains(
            _with(cfg.config, form))} == {"gather", "phase"}, cfg.template


def test_tensor_core_row_tiles_of_32_only_for_few_output_channels_of_a_strided_one():
    """OC/G of 16 or 32 (the realistic suite's upsampling layers) left half or more of a
    64-row tile idle; other products keep their tiles (and their spaces) as they were."""
    def row_tiles(module, shape):
        g = capture(lambda: module, [], lambda: [torch.randn(*shape)])
        plan = make_plan(g)
        t = next(t for t in Space.for_plan(plan, Target()).templates if t.name == "gemm_tc")
        return next(s for s in t.slots(plan, Target()) if s.name == "config.bm").choices

    assert row_tiles(nn.ConvTranspose2d(8, 32, 4, stride=2), (2, 8, 9, 9))[0] == 32
    assert row_tiles(nn.ConvTranspose2d(8, 128, 4, stride=2, groups=4), (2, 8, 9, 9))[0] == 32
    assert row_tiles(nn.ConvTranspose2d(8, 48, 4, stride=2), (2, 8, 9, 9))[0] == 64
    assert row_tiles(nn.ConvTranspose2d(8, 16, 3, stride=1), (2, 8, 9, 9))[0] == 64
    assert row_tiles(nn.Conv2d(8, 16, 3, stride=2), (2, 8, 9, 9))[0] == 64


def test_a_config_recorded_before_the_slot_reads_as_the_gathered_form():
    sp = Space.for_plan(case_plan("2d_k3_s2_outpad"), Target())
    for first in _first_of_gemms(sp):
        new = _with(first.config, "gather")
        old = {k: v for k, v in new.as_dict().items() if k != "memory.tconv"}
        assert sp.contains(new) and sp.upgrade(old) == new, first.template


def test_untuned_defaults_run_the_phases():
    sp = Space.for_plan(make_plan(load_problem(
        ROOT / "benchmarks/problems/conv_transpose2d_standard.py").graph()), Target())
    default = sp.default()  # the SIMT template's
    assert sp.template_of(default).name == "gemm" and default["memory.tconv"] == "phase"


class _First:
    def __init__(self, space: Space, config) -> None:
        self.space, self.config = space, config
        self.template = space.template_of(config).name


def _first_of_gemms(sp: Space) -> list[_First]:
    """The first configuration of each GEMM template (found without listing the space)."""
    out = [_First(sp, c) for c in sp.template_defaults(fallback=True)]
    out = [f for f in out if f.template in ("gemm", "gemm_tc")]
    assert len(out) == 2
    return out


def _with(cfg, form: str):
    return type(cfg).of({**cfg.as_dict(), "memory.tconv": form})


def test_the_phased_form_does_only_the_useful_multiply_adds():
    """Kernel 4 at stride 2 without output_padding: every phase has 4 of the 16 taps and a
    quarter of the pixels, so the phases' products are exactly the useful arithmetic, a
    quarter of the gathered GEMM's."""
    (_, cin, cout, k, _), _, shape = CASES["2d_k4_s2_split"]
    useful = math.prod(shape) * cout * k * k  # each input element times each tap's weights
    plan = case_plan("2d_k4_s2_split")
    sp = Space.for_plan(plan, Target())
    g = plan.info
    for t in ("gemm", "gemm_tc"):
        cfg = _drawn(sp, t, "phase", 1, random.Random(t))[0]
        r = sp.render(cfg)
        macs = sum(r.fact("phase_k")) * r.fact("N") * g.M * g.batch
        assert macs == useful, t
        assert macs * 4 == g.K * g.N * g.M * g.batch
        assert r.launches[0].grid[0] % r.fact("phases") == 0 and r.fact("phases") == 4


# -- generated code, executed -------------------------------------------------------------------

def _drawn(sp: Space, template: str, form: str, n: int, rng: random.Random,
           keep=lambda c: True, tiles: tuple[int, ...] | None = None,
           tries: int = 100_000) -> list:
    """n distinct configurations of `template` in `form` that `keep` accepts: its own slots
    drawn at random (block tiles among `tiles` where given), kept where the space has them
    (listing a template takes seconds, `Space.draw` mostly lands on other templates)."""
    t = next(t for t in sp.templates if t.name == template)
    own = t.slots(sp.plan, sp.target)
    base = {s.name: ABSENT for s in sp.slots}
    if len(sp.templates) > 1:
        base["reduction.scope"] = template
    out: list = []
    for _ in range(tries):
        if len(out) == n:
            break
        raw = {s.name: rng.choice(tiles if tiles and s.name in ("config.bm", "config.bn")
                                  else s.choices) for s in own}
        raw["memory.tconv"] = form
        cfg = Config.of({**base, **raw})
        if cfg not in out and sp.contains(cfg) and keep(cfg):
            out.append(cfg)
    return out


def _phase_configs(sp: Space, template: str, seed: str, n: int) -> list:
    """n phased configurations of `template` with small tiles, one with split-K where the
    space has it."""
    rng = random.Random(seed)
    small = (32, 64)
    picked = _drawn(sp, template, "phase", 1, rng, lambda c: c["reduction.split"] > 1,
                    small, tries=5000)
    more = _drawn(sp, template, "phase", n - len(picked), rng, lambda c: c not in picked,
                  small)
    assert len(picked) + len(more) == n, (template, seed)
    return picked + more


@pytest.mark.skipif(not cpu_exec.available(), reason="needs g++ for the CPU emulator")
@pytest.mark.parametrize("name", fast_first(sorted(CASES), ["2d_k3_s2_outpad",
                                                            "2d_kernel_below_stride"]))
def test_phased_kernels_match_torch(name):
    plan, by_index, want = case_run(name, 5)
    sp = Space.for_plan(plan, Target())
    picked = _phase_configs(sp, "gemm_tc", name, 2) + _phase_configs(sp, "gemm", name, 1)
    cpu_exec.prebuild([(sp.render(c), len(by_index)) for c in picked])
    for cfg in picked:
        r = sp.render(cfg)
        assert r.fact("tconv") == "phase" and "% " + str(plan.info.b_gather.stride[-1]) + \
            " == 0" not in r.source
        err = cpu_exec.max_rel_error(r, by_index, want)
        assert err < 1e-5, (cfg.short(), err)


@pytest.mark.skipif(not cpu_exec.available(), reason="needs g++ for the CPU emulator")
def test_split_k_over_phases_of_unequal_k_matches_torch():
    """Kernel 3 at stride 2 over 16 channels: phases of K 64, 32, 32 and 16, the parts sized
    for the largest (two of 32 on the tensor cores, four of 16 on the SIMT template: a smaller
    phase's later parts add zeros to the workspace)."""
    CASES["2d_k3_s2_split"] = ((2, 16, 4, 3, "relu"), dict(stride=2, padding=1),
                               (1, 16, 4, 5))
    try:
        plan, by_index, want = case_run("2d_k3_s2_split", 9)
    finally:
        del CASES["2d_k3_s2_split"]
    sp = Space.for_plan(plan, Target())
    tc = _drawn(sp, "gemm_tc", "phase", 1, random.Random(0),
                lambda c: c["reduction.split"] == 2 and c["memory.bk"] == 16)
    simt = _drawn(sp, "gemm", "phase", 1, random.Random(1),
                  lambda c: c["reduction.split"] == 4 and c["memory.bk"] == 8, (32,))
    for cfg in tc + simt:
        r = sp.render(cfg)
        assert sorted(r.fact("phase_k")) == [16, 32, 32, 64] and r.workspace_bytes > 0
        assert cpu_exec.max_rel_error(r, by_index, want) < 1e-5, cfg.short()


@pytest.mark.skipif(not cpu_exec.available(), reason="needs g++ for the CPU emulator")
@pytest.mark.parametrize("name", fast_first(["2d_dilated_grouped", "3d_k3_s2"],
                                            ["3d_k3_s2"]))
def test_phased_tensor_core_kernels_on_tf32_are_tf32_accurate(name):
    """Under `--precision auto` (TF32 convolutions) one TF32 product per tile: the result is
    the convolution of the operands rounded to TF32 (as `cvt.rna` rounds them), accumulated
    in fp32; the strict form of the same configuration is fp32-accurate."""
    plan, by_index, want = case_run(name, 6)
    strict, tf32 = Space.for_plan(plan, Target()), Space.for_plan(plan, TF32_CONV)
    cfgs = _phase_configs(strict, "gemm_tc", name, 1)
    cfgs += _drawn(strict, "gemm_tc", "phase", 1, random.Random(name),
                   lambda c: c["config.bm"] == 32, (32, 64))  # small output-channel tiles
    # the convolution's operands (its input and weight) rounded, the bias not: it is added
    # in the epilogue, in fp32
    rounded = [_tf32(x) if k in (plan.info.a, plan.info.b) else x
               for k, x in zip(plan.operands, by_index)]
    want_tf32 = case_run(name, 6, rounded)[2]
    for cfg in cfgs:
        r = tf32.render(cfg)
        assert r.fact("mma") == "tf32" and strict.render(cfg).fact("mma") == "tf32x3"
        assert cpu_exec.max_rel_error(strict.render(cfg), by_index, want) < 1e-5
        assert cpu_exec.max_rel_error(r, by_index, want_tf32) < 1e-5, cfg.short()
        assert cpu_exec.max_rel_error(r, by_index, want) > 1e-5, cfg.short()


def _tf32(x: np.ndarray) -> np.ndarray:
    """float32 values rounded to TF32 as `cvt.rna.tf32.f32` does (nearest, ties away)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).copy()
    finite = (u & 0x7F800000) != 0x7F800000
    u[finite] = (u[finite] + 0x1000) & 0xFFFFE000
    return u.view(np.float32)


@pytest.mark.parametrize("backend", ["nvrtc", pytest.param("nvcc", marks=pytest.mark.slow)])
def test_phased_kernels_compile_for_sm90(tmp_path, backend):
    """Strict, TF32 and split-K phased kernels of both templates with NVRTC (as production
    builds them), and 3-D ones too with the real nvcc."""
    from helpers import nvrtc_available
    from cuda_agent.build.builder import Builder, BuildInput

    if backend == "nvcc" and not nvcc_available():
        pytest.skip("nvcc is not on PATH")
    if backend == "nvrtc" and not nvrtc_available():
        pytest.skip("NVRTC is not available")
    rendered = []
    for name in ("2d_k4_s2_split",) + (("3d_k3_s2",) if backend == "nvcc" else ()):
        plan = case_plan(name)
        for target in (Target(), TF32_CONV):
            sp = Space.for_plan(plan, target)
            for t in ("gemm_tc", "gemm"):
                rendered += [sp.render(c) for c in _phase_configs(sp, t, name, 1)]
    assert any(r.workspace_bytes for r in rendered)  # split-K among them
    with Builder(backend, 2, cache_dir=tmp_path) as b:
        builds = b.build([BuildInput(r.source, "sm_90") for r in rendered])
    assert all(x.ok for x in builds), [x.error_msg for x in builds if not x.ok]


# -- the analytic model ---------------------------------------------------------------------------

BIG = ["conv_transpose2d_s2_upsample", "conv_transpose3d_s2_volume",
       "fused_conv_transpose3d_batchnorm_tanh"]


def _conv_space(name: str, target: Target) -> Space:
    from cuda_agent.ir.partition import ProgramPlan
    from cuda_agent.space.program import stage_spaces

    plan = make_plan(load_problem(ROOT / "benchmarks" / "realistic" / f"{name}.py").graph())
    if isinstance(plan, ProgramPlan):  # the BatchNorm chain: the convolution's own stage
        return next(sp for sp in stage_spaces(plan, target) if sp.plan.kind == "conv")
    return Space.for_plan(plan, target)


@pytest.mark.parametrize("name", BIG)
def test_the_model_ranks_the_phases_ahead_on_big_transposed_convs(name):
    """Each template's configurations modelled in both forms: the phased one faster for
    every sampled tiling, and the model's ranking (the agents' prior, the `prior` strategy's
    order and its pick of each template) puts a phased configuration first."""
    from cuda_agent.costmodel.model import simulate
    from cuda_agent.search.prior_rank import first_of_each_template, model_order

    sp = _conv_space(name, TF32_CONV)
    rng = random.Random(name)
    sample = []
    for t in ("gemm_tc", "gemm"):
        for cfg in _drawn(sp, t, "gather", 8, rng):
            phased = type(cfg).of({**cfg.as_dict(), "memory.tconv": "phase"})
            if not sp.contains(phased):
                continue
            ms = [simulate(sp.plan, sp.render(c), None, sp.target).time_ms
                  for c in (cfg, phased)]
            assert ms[1] < ms[0], (t, cfg.short(), ms)
            sample += [cfg, phased]
    assert len(sample) >= 16
    sub = sp.restricted(sample + sp.configs_of("lib"))
    order = model_order(sub)
    assert order[0]["memory.tconv"] == "phase"
    picks = first_of_each_template(sub, order)
    assert all(c["memory.tconv"] == "phase" for c in picks
               if sp.template_of(c).name != "lib")
    assert np.isfinite([simulate(sp.plan, sp.render(c), None, sp.target).time_ms
                        for c in order[:3]]).all()
