"""Matrix products: capture of every form, the strided-operand planner, the template's
constraints, the generated code executed on the CPU emulator, and a tune on `sim`."""

from __future__ import annotations

import random

import pytest
import torch
import torch.nn as nn

import cpu_exec
from helpers import Fn, fast_first
from cuda_agent.errors import UnsupportedError
from cuda_agent.ir.capture import capture
from cuda_agent.ir.gemm import _kept_in_triangle
from cuda_agent.ir.planning import make_plan
from cuda_agent.space.slots import Rendered, Target
from cuda_agent.space.space import Space


def plan_of(f, *shapes):
    g = capture(Fn, [f], lambda: [torch.randn(*s) for s in shapes])
    return make_plan(g)


class Linear(nn.Module):
    def __init__(self, k: int, n: int, bias: bool = True) -> None:
        super().__init__()
        self.fc = nn.Linear(k, n, bias=bias)

    def forward(self, x):
        return torch.relu(self.fc(x))


# -- capture and planning --------------------------------------------------------------------------

def test_mm_is_one_gemm_with_row_major_strides():
    p = plan_of(lambda a, b: a @ b, (5, 7), (7, 3))
    g = p.info
    assert p.family == "gemm" and (g.M, g.N, g.K, g.batch) == (5, 3, 7, 1)
    assert g.a_strides == (0, 7, 1) and g.b_strides == (0, 3, 1)
    assert p.flops() == 2 * 5 * 3 * 7


def test_transposes_are_read_in_place():
    p = plan_of(lambda a, b: a.T @ b.transpose(0, 1), (7, 5), (3, 7))
    g = p.info
    assert (g.M, g.N, g.K) == (5, 3, 7)
    assert g.a_strides[1:] == (1, 5) and g.b_strides[1:] == (1, 7)


def test_linear_reads_the_weight_transposed_and_fuses_bias_and_relu():
    g = capture(Linear, [6, 4], lambda: [torch.randn(2, 3, 6)])
    p = make_plan(g)
    info = p.info
    # the (2, 3) batch of rows over one weight is a single GEMM of 6 rows
    assert (info.M, info.N, info.K, info.batch, info.rows_per_matrix) == (6, 4, 6, 1, 3)
    assert info.b_strides == (0, 1, 6)
    ops = {n.op for n in p.live_nodes()}
    assert {"matmul", "add", "relu"} <= ops
    assert len(p.operands) == 3  # x, weight, bias


def test_bmm_keeps_the_batch_and_broadcast_b_has_stride_zero():
    p = plan_of(lambda a, b: torch.bmm(a, b), (4, 5, 6), (4, 6, 3))
    assert p.info.batch == 4 and p.info.a_strides[0] == 30 and p.info.b_strides[0] == 18
    p = plan_of(lambda a, b: torch.matmul(a.transpose(1, 2), b), (4, 6, 5), (6, 3))
    assert p.info.batch == 4 and p.info.b_strides[0] == 0 and p.info.a_strides[1:] == (1, 5)


def test_vector_sides_become_reductions_and_diag_a_scaling():
    assert plan_of(lambda a, x: a @ x, (64, 48), (48,)).family == "reduction"
    assert plan_of(lambda a, x: a @ x, (64, 48), (48, 1)).family == "reduction"
    assert plan_of(lambda x, a: x @ a, (1, 48), (48, 64)).family == "reduction"
    assert plan_of(lambda v, b: torch.diag(v) @ b, (16,), (16, 8)).family == "elementwise"


def test_addmm_scales_and_triangular_masks_are_recognised():
    p = plan_of(lambda c, a, b: torch.addmm(c, a, b, beta=0.5, alpha=2.0), (3,), (4, 5), (5, 3))
    assert p.family == "gemm" and len(p.operands) == 3
    p = plan_of(lambda a, b: torch.triu(a @ b, diagonal=1), (8, 8), (8, 8))
    assert p.info.zero_outside == ("upper", 1)
    # the arithmetic floor counts only the kept triangle
    assert p.flops() < 2 * 8 * 8 * 8 * 0.6
    p = plan_of(lambda a, b: torch.tril(a @ b) * 2, (8, 8), (8, 8))
    assert p.info.zero_outside is None  # something after the mask: tiles are computed


def test_kept_in_triangle_counts():
    assert _kept_in_triangle(4, 4, "upper", 0) == 10
    assert _kept_in_triangle(4, 4, "lower", 0) == 10
    assert _kept_in_triangle(4, 4, "upper", 1) == 6
    assert _kept_in_triangle(3, 5, "upper", 0) == 12
    assert _kept_in_triangle(3, 5, "lower", -5) == 0


@pytest.mark.parametrize("f,shapes,words", [
    (lambda a, b: torch.relu(a) @ b, [(4, 5), (5, 3)], ["relu", "operand"]),
])
def test_unsupported_gemm_patterns_say_why(f, shapes, words):
    with pytest.raises(UnsupportedError) as info:
        plan_of(f, *shapes)
    msg = str(info.value)
    assert all(w in msg for w in words) and "\n" not in msg


@pytest.mark.parametrize("f,shapes,families", [
    (lambda a, b: (a @ b).sum(dim=1), [(4, 5), (5, 3)], "gemm+reduction"),
    (lambda a, b, c: (a @ b) @ c, [(4, 5), (5, 3), (3, 2)], "gemm+gemm"),
])
def test_products_feeding_reductions_or_products_become_programs(f, shapes, families):
    p = plan_of(f, *shapes)
    assert p.kind == "program" and p.family == families


# -- the space ---------------------------------------------------------------------------------------

def gemm_configs(sp: Space) -> list:
    """The generated-GEMM configurations (a space with an epilogue also has library ones)."""
    return sp.configs_of("gemm")


def test_odd_k_forbids_vector_loads_along_k_and_default_is_valid():
    sp = Space.for_plan(plan_of(lambda a, b: a @ b, (37, 67), (67, 45)), Target())
    simt = gemm_configs(sp)
    assert all(c["memory.vec_a"] == 1 for c in simt)  # A runs along K = 67
    assert any(c["memory.vec_b"] == 4 for c in simt) is False  # N = 45 as well
    # the tensor-core template copies such operands element by element
    tc = sp.render(sp.configs_of("gemm_tc")[0])
    assert tc.fact("vec_a") == 1 and tc.fact("vec_b") == 1
    assert sp.default() in sp.index and len(sp) > 500


def test_aligned_sizes_open_the_whole_space():
    sp = Space.for_plan(plan_of(lambda a, b: a @ b, (256, 256), (256, 256)), Target())
    assert any(c["memory.vec_a"] == 4 and c["memory.vec_b"] == 4 for c in sp.configs)
    assert {c["reduction.split"] for c in sp.configs} >= {1, 2}
    for c in random.Random(0).sample(sp.configs, 50):
        r = sp.render(c)
        assert r.launches[0].threads <= 512 and r.launches[0].smem <= Target().max_smem_per_block


# -- generated code, executed -------------------------------------------------------------------------

EXEC_CASES = {
    "odd_linear_bias_relu": (lambda x, w, b: torch.relu(x @ w.T + b), [(19, 13), (11, 13), (11,)]),
    "aligned_vectors": (lambda a, b: a @ b * 0.5, [(64, 32), (32, 64)]),
    "batched_transposed_a": (lambda a, b: torch.bmm(a.transpose(1, 2), b), [(2, 24, 20),
                                                                            (2, 24, 36)]),
    "triu_skips_tiles": (lambda a, b: torch.triu(a @ b), [(80, 16), (16, 80)]),
    "split_k_residual": (lambda a, b, c: a @ b + c, [(8, 256), (256, 12), (8, 12)]),
}


def emulation_case(f, shapes, seed: int):
    """Plan and space of `f` on `shapes`, random float32 inputs, and torch's float64 answer."""
    plan = plan_of(f, *shapes)
    gen = torch.Generator().manual_seed(seed)
    xs = [torch.randn(*s, generator=gen) for s in shapes]
    return plan, Space.for_plan(plan, Target()), xs, f(*[x.double() for x in xs]).numpy()


@pytest.mark.skipif(not cpu_exec.available(), reason="needs g++ for the CPU emulator")
@pytest.mark.parametrize("name", fast_first(sorted(EXEC_CASES),
                                             ["odd_linear_bias_relu", "split_k_residual"]))
def test_generated_gemm_matches_torch(name):
    plan, sp, xs, want = emulation_case(*EXEC_CASES[name], seed=3)
    rng = random.Random(name)
    small = [c for c in gemm_configs(sp) if c["config.bm"] * c["config.bn"] <= 64 * 64]
    picked = [sp.default()] + rng.sample(small, 2)
    for pred in (lambda c: c["reduction.split"] > 1, lambda c: c["memory.stages"] == 2 and
                 c["memory.frag"] == "split", lambda c: c["config.warp"] == "4x8",
                 lambda c: c["memory.vec_a"] == 4 or c["memory.vec_b"] == 4,
                 # the cp.async pipeline: 3 and 4 slices in flight, 16-byte and element copies
                 lambda c: c["memory.stages"] == 3 and c["reduction.split"] > 1,
                 lambda c: c["memory.stages"] == 4 and c["memory.vec_b"] == 4,
                 lambda c: c["memory.stages"] == 4 and c["memory.vec_a"] == 1):
        some = [c for c in small if pred(c)]
        picked += rng.sample(some, 1) if some else []
    cpu_exec.prebuild([(sp.render(c), len(plan.operands)) for c in picked])
    for cfg in picked:
        err = cpu_exec.max_rel_error(sp.render(cfg), [xs[k].numpy() for k in plan.operands],
                                     want)
        assert err < 1e-5, (cfg.short(), err)


# -- end to end -----------------------------------------------------------------------------------------

def test_tune_on_sim_tries_every_template_then_picks_one(tmp_path):
    """The untuned default first, then each other template's default (the tensor-core GEMM,
    a few hundred of the space's tens of thousands, is measured whatever the strategy
    samples), then the strategy; the best is emitted."""
    from cuda_agent.tuner import tune

    path = tmp_path / "p.py"
    path.write_text(
        "import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n"
        "    def forward(self, a, b):\n        return torch.relu(a @ b)\n\n\n"
        "def get_inputs():\n    return [torch.randn(512, 256), torch.randn(256, 384)]\n\n\n"
        "def get_init_inputs():\n    return []\n")
    r = tune(path, out=tmp_path / "o", device="sim", budget=12, batch=12,
             store=str(tmp_path / "s.sqlite"), strategy="random")
    assert [t.config["reduction.scope"] for t in r.trials[:3]] == ["gemm", "lib", "gemm_tc"]
    assert len({t.config for t in r.trials}) == len(r.trials) == 12
    assert r.best is not None and r.best.template in ("gemm", "gemm_tc", "lib")
    kernel = (tmp_path / "o" / "kernel.cu").read_text()
    assert ("ca_lib_epilogue" if r.best.template == "lib" else "ca_gemm") in kernel


# -- convolutions as implicit GEMMs ------------------------------------------------------------------

class Conv(nn.Module):
    def __init__(self, rank: int, cin: int, cout: int, k, **kw) -> None:
        super().__init__()
        self.conv = {1: nn.Conv1d, 2: nn.Conv2d, 3: nn.Conv3d}[rank](cin, cout, k, **kw)

    def forward(self, x):
        return torch.relu(self.conv(x))


CONV_CASES = {
    "conv2d_stride_pad_bias": ((2, 3, 8, (3, 3)), dict(stride=2, padding=1), (2, 3, 13, 11)),
    "conv2d_dilated_same": ((2, 4, 6, (3, 2)), dict(padding="same", dilation=2, bias=False),
                            (1, 4, 9, 10)),
    "conv1d": ((1, 5, 7, 4), dict(stride=3), (3, 5, 29)),
    "conv2d_pointwise": ((2, 16, 12, 1), dict(), (2, 16, 6, 7)),
    "conv2d_grouped": ((2, 6, 9, 3), dict(groups=3, padding=1), (2, 6, 7, 8)),
    "conv2d_depthwise": ((2, 5, 10, 3), dict(groups=5, stride=2), (2, 5, 9, 9)),
    "conv3d": ((3, 2, 4, (2, 3, 2)), dict(padding=(1, 0, 1)), (2, 2, 5, 6, 4)),
}


def conv_plan(name):
    (rank, cin, cout, k), kw, shape = CONV_CASES[name]
    torch.manual_seed(0)
    g = capture(lambda *a: Conv(*a, **kw), [rank, cin, cout, k], lambda: [torch.randn(*shape)])
    return make_plan(g), shape, kw


def test_conv_plans_as_an_implicit_gemm_with_the_bias_fused():
    plan, shape, _ = conv_plan("conv2d_stride_pad_bias")
    g = plan.info
    assert plan.family == "conv" and g.b_gather is not None
    assert (g.batch, g.M, g.N, g.K) == (2, 8, 7 * 6, 3 * 9)
    assert len(plan.operands) == 3  # weight, input, bias (viewed as (C, 1, 1))
    sp = Space.for_plan(plan, Target())
    assert all(c["memory.vec_b"] == 1 for c in gemm_configs(sp)) and len(sp) > 100


def test_grouped_convolution_is_a_batch_of_per_group_gemms():
    plan, _, _ = conv_plan("conv2d_grouped")
    g = plan.info
    assert (g.batch, g.M, g.K) == (2 * 3, 3, 2 * 9) and g.b_gather.groups == 3


def test_a_computed_convolution_input_is_refused_by_name():
    with pytest.raises(UnsupportedError, match="computed convolution input"):
        make_plan(capture(lambda: _ReluConv(), [], lambda: [torch.randn(1, 4, 8, 8)]))


class _ReluConv(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 3)

    def forward(self, x):
        return self.conv(torch.relu(x))


def conv_emulation_case(name: str, seed: int):
    """Plan and space of conv case `name`, its operands in kernel order (random input and
    parameters), and torch's float64 answer."""
    plan, shape, kw = conv_plan(name)
    (rank, cin, cout, k), _, _ = CONV_CASES[name]
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=gen)
    conv = Conv(rank, cin, cout, k, **kw)
    with torch.no_grad():
        for p in conv.parameters():
            p.copy_(torch.randn(p.shape, generator=gen))
        want = conv.double()(x.double()).numpy()
    params = dict(conv.named_parameters())
    by_index = [x.numpy() if plan.graph.inputs[k_].role == "input" else
                params[plan.graph.inputs[k_].target].detach().float().numpy()
                for k_ in plan.operands]
    return plan, Space.for_plan(plan, Target()), by_index, want


@pytest.mark.skipif(not cpu_exec.available(), reason="needs g++ for the CPU emulator")
@pytest.mark.parametrize("name", fast_first(sorted(CONV_CASES),
                                             ["conv2d_stride_pad_bias", "conv3d"]))
def test_generated_conv_matches_torch(name):
    plan, sp, by_index, want = conv_emulation_case(name, seed=5)
    rng = random.Random(name)
    small = [c for c in gemm_configs(sp) if c["config.bm"] * c["config.bn"] <= 64 * 64]
    picked = [sp.default()] + rng.sample(small, 2)
    split = [c for c in small if c["reduction.split"] > 1]
    picked += rng.sample(split, 1) if split else []
    cpu_exec.prebuild([(sp.render(c), len(by_index)) for c in picked])
    for cfg in picked:
        err = cpu_exec.max_rel_error(sp.render(cfg), by_index, want)
        assert err < 1e-5, (cfg.short(), err)


# -- the library product with a generated epilogue ------------------------------------------------------

LIB_CASES = {  # (function, shapes): products with something after them to generate
    "linear_bias_relu": (lambda x, w, b: torch.relu(x @ w.T + b), [(19, 13), (11, 13), (11,)]),
    "batched_transposed_scaled": (lambda a, b: torch.bmm(a.transpose(1, 2), b) * 0.5 - 1.0,
                                  [(2, 24, 20), (2, 24, 36)]),
    "triu_residual": (lambda a, b, c: torch.triu(a @ b) + c, [(40, 16), (16, 40), (40, 40)]),
}


def test_library_template_only_where_there_is_an_epilogue():
    bare = Space.for_plan(plan_of(lambda a, b: a @ b, (64, 64), (64, 64)), Target())
    assert {bare.template_of(c).name for c in bare.configs} == {"gemm", "gemm_tc"}
    f, shapes = LIB_CASES["linear_bias_relu"]
    sp = Space.for_plan(plan_of(f, *shapes), Target())
    lib = sp.configs_of("lib")
    assert lib and all(c["memory.vec"] == 1 for c in lib)  # 19 x 11 outputs: no 16-byte access
    r = sp.render(lib[0])
    assert r.launches[0].library["op"] == "matmul" and r.fact("library").startswith("cuBLAS")
    assert r.launches[1].library is None and "ca_lib_epilogue" in r.source


@pytest.mark.skipif(not cpu_exec.available(), reason="needs g++ for the CPU emulator")
@pytest.mark.parametrize("name", sorted(LIB_CASES))
def test_library_product_with_generated_epilogue_matches_torch(name):
    plan, sp, xs, want = emulation_case(*LIB_CASES[name], seed=7)
    lib = sp.configs_of("lib")
    assert len(lib) >= 3
    for cfg in random.Random(name).sample(lib, 3):
        err = cpu_exec.max_rel_error(sp.render(cfg), [xs[k].numpy() for k in plan.operands],
                                     want)
        assert err < 1e-5, (cfg.short(), err)


@pytest.mark.skipif(not cpu_exec.available(), reason="needs g++ for the CPU emulator")
def test_library_convolution_with_generated_bias_matches_torch():
    plan, sp, by_index, want = conv_emulation_case("conv2d_stride_pad_bias", seed=9)
    lib = sp.configs_of("lib")
    r = sp.render(lib[0])
    assert r.launches[0].library["op"] == "conv"
    assert cpu_exec.max_rel_error(r, by_index, want) < 1e-5


def _lib(sp):
    return sp.configs_of("lib")


def test_library_convolution_layout_is_a_slot():
    """cuDNN's layout (memory agent) is searched for a 2-D/3-D convolution's library call; a
    matrix product's call has no such slot, nor a 1-D convolution (torch has no channels-last
    for 3-D tensors). cuDNN's algorithm choice is no slot (the library template's docstring:
    torch keeps one algorithm per shape for the process, so it could not be measured fairly)."""
    sp2 = Space.for_plan(conv_plan("conv2d_stride_pad_bias")[0], Target())
    assert {c["memory.layout"] for c in _lib(sp2)} == {"as_given", "channels_last"}
    sp1 = Space.for_plan(conv_plan("conv1d")[0], Target())
    assert {c.get("memory.layout", "-") for c in _lib(sp1)} == {"-"}
    f, shapes = LIB_CASES["linear_bias_relu"]
    mm = Space.for_plan(plan_of(f, *shapes), Target())
    assert {c.get("memory.layout", "-") for c in _lib(mm)} == {"-"}
    assert not any("compute.cudnn" in c.as_dict() for sp in (sp1, sp2, mm) for c in _lib(sp))
    # a configuration recorded before the slot: torch's layout, and a render identical to the
    # one it was measured with
    old = next(c for c in _lib(sp2) if c["memory.layout"] == "as_given")
    recorded = {k: v for k, v in old.as_dict().items() if k != "memory.layout"}
    assert sp2.upgrade(recorded) == old
    call = sp2.render(old).launches[0].library
    assert "layout" not in call
    new = sp2.render(next(c for c in _lib(sp2) if c["memory.layout"] == "channels_last"))
    assert new.launches[0].library["layout"] == "channels_last"


@pytest.mark.skipif(not cpu_exec.available(), reason="needs g++ for the CPU emulator")
@pytest.mark.parametrize("name", ["conv2d_stride_pad_bias", "conv3d", "conv2d_grouped"])
def test_library_convolution_in_every_layout_matches_torch(name):
    plan, sp, by_index, want = conv_emulation_case(name, seed=5)
    seen = set()
    for cfg in _lib(sp):
        variant = cfg["memory.layout"]
        if variant in seen:
            continue
        seen.add(variant)
        assert cpu_exec.max_rel_error(sp.render(cfg), by_index, want) < 1e-5, variant
    assert len(seen) == 2


def test_sim_prices_the_channels_last_conversion():
    from cuda_agent.costmodel.model import simulate

    plan = conv_plan("conv2d_stride_pad_bias")[0]
    sp = Space.for_plan(plan, Target())
    base = {"config.block": 256, "config.items": 1, "memory.vec": 1}
    times = {}
    for layout in ("as_given", "channels_last"):
        cfg = next(c for c in _lib(sp) if all(c[k] == v for k, v in base.items())
                   and c["memory.layout"] == layout)
        times[layout] = simulate(plan, sp.render(cfg), {}, Target()).time_ms
    assert times["channels_last"] > times["as_given"]


def test_sim_library_rates_by_kind_of_convolution():
    """cuDNN's rate per flop, as the H200 sweeps measured it: a dense convolution fastest,
    grouped slower, depthwise bound by memory at a fifth of the bandwidth; every call pays the
    library's overhead."""
    from cuda_agent.costmodel import gemm as sim_gemm
    from cuda_agent.costmodel.model import simulate

    def lib_time(name):
        plan = conv_plan(name)[0]
        sp = Space.for_plan(plan, Target())
        r = sp.render(next(c for c in _lib(sp) if c["memory.layout"] == "as_given"))
        return plan, r, simulate(plan, r, {}, Target()).time_ms

    per_flop = {}
    for name in ("conv2d_pointwise", "conv2d_grouped", "conv2d_depthwise"):
        plan, r, ms = lib_time(name)
        assert ms * 1e3 > sim_gemm.LIBRARY_CALL_US  # tiny shapes: the call's overhead shows
        f = dict(r.facts)
        product_ms = ms - (2 * sim_gemm.LAUNCH_US + sim_gemm.LIBRARY_CALL_US) * 1e-3
        per_flop[name] = product_ms / f["library_flops"]
        if name == "conv2d_depthwise":
            t = Target()
            floor = (f["product_bytes"] + f["library_in_bytes"]) / (
                sim_gemm.DEPTHWISE_BW_SHARE * t.dram_bw) * 1e3
            assert product_ms >= floor
    assert per_flop["conv2d_pointwise"] < per_flop["conv2d_grouped"] < per_flop["conv2d_depthwise"]


def test_sim_charges_a_convolutions_gathered_loads():
    """The SIMT template gathers a convolution's B element by element: the same tiles cost
    more issue than a plain product of the same M, N, K would."""
    from cuda_agent.costmodel import gemm as sim_gemm

    plan = conv_plan("conv2d_stride_pad_bias")[0]
    sp = Space.for_plan(plan, Target())
    r = sp.render(gemm_configs(sp)[0])
    assert r.fact("gather_dims") == 2
    plain = Rendered(r.source, r.launches, facts=tuple(
        (k, 0 if k == "gather_dims" else v) for k, v in r.facts))
    gathered_ms = sim_gemm.simulate_gemm(r, {}, Target())[0]
    plain_ms = sim_gemm.simulate_gemm(plain, {}, Target())[0]
    assert gathered_ms > plain_ms


# -- the 3xTF32 tensor-core template ---------------------------------------------------------------

def tc_configs(sp):
    return sp.configs_of("gemm_tc")


def test_tensor_core_template_covers_plain_products_in_their_layout():
    sp = Space.for_plan(plan_of(lambda x, w: x @ w.T, (256, 128), (192, 128)), Target())
    tc = tc_configs(sp)
    assert tc and {c["config.warp"] for c in tc} >= {"32x32", "64x64"}
    r = sp.render(next(c for c in tc if c["reduction.split"] == 1))
    # nn.Linear's weight runs along K: kept [n][k] in shared memory, 16-byte copies
    assert r.fact("b_along") == "k" and r.fact("vec_b") == 4 and r.fact("mma") == "tf32x3"
    assert "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32" in r.source
    # implicit-GEMM convolutions too: B gathered element by element, through per-k tables
    conv, _, _ = conv_plan("conv2d_stride_pad_bias")
    sp = Space.for_plan(conv, Target())
    r = sp.render(tc_configs(sp)[0])
    assert r.fact("vec_b") == 1 and r.fact("gather") == "table" and "ca_koff[t_]" in r.source


@pytest.mark.skipif(not cpu_exec.available(), reason="needs g++ for the CPU emulator")
@pytest.mark.parametrize("name", fast_first(sorted(EXEC_CASES),
                                             ["odd_linear_bias_relu", "batched_transposed_a"]))
def test_generated_tensor_core_gemm_matches_torch(name):
    plan, sp, xs, want = emulation_case(*EXEC_CASES[name], seed=5)
    tc = tc_configs(sp)
    rng = random.Random(name)
    picked = [sp.default()] if sp.template_of(sp.default()).name == "gemm_tc" else []
    for pred in (lambda c: c["reduction.split"] > 1, lambda c: c["compute.unroll"] == "full",
                 lambda c: c["memory.stages"] == 2, lambda c: c["memory.stages"] == 4,
                 lambda c: c["config.warp"] == "64x64", lambda c: c["config.raster"] == 8,
                 lambda c: c["compute.fresh"] == 16,
                 lambda c: c["compute.fresh"] == 16 and c["memory.bk"] == 16):
        some = [c for c in tc if pred(c) and c["config.bm"] * c["config.bn"] <= 128 * 128]
        picked += rng.sample(some, 1) if some else []
    assert len(picked) >= 3
    cpu_exec.prebuild([(sp.render(c), len(plan.operands)) for c in picked])
    for cfg in picked:
        err = cpu_exec.max_rel_error(sp.render(cfg), [xs[k].numpy() for k in plan.operands],
                                     want)
        assert err < 1e-5, (cfg.short(), err)


def test_fresh_16_sums_two_steps_per_partial():
    """compute.fresh 16: six mma (two 8-deep steps) per fresh partial, then one rounded add."""
    sp = Space.for_plan(plan_of(lambda a, b: a @ b, (256, 128), (128, 192)), Target())
    for fresh, mmas in ((8, 3), (16, 6)):
        cfg = next(c for c in tc_configs(sp) if c["compute.fresh"] == fresh)
        src = sp.render(cfg).source
        body = src[src.index("float p_[4]"):src.index("acc[i][j][0] += p_[0]")]
        assert body.count("ca_mma_tf32(p_,") == mmas, (fresh, body)
        assert f"kk += {fresh})" in src


@pytest.mark.skipif(not cpu_exec.available(), reason="needs g++ for the CPU emulator")
def test_uncompensated_tf32_would_fail_the_fp32_check():
    """Plain TF32 (the big parts only) is ~1e-3 off: the compensation terms are what make the
    tensor-core path pass the fp32 tolerance, so dropping them must be caught."""
    plan, sp, xs, want = emulation_case(lambda a, b: a @ b, [(64, 256), (256, 64)], seed=2)
    r = sp.render(next(c for c in tc_configs(sp) if c["reduction.split"] == 1))
    args = [xs[k].numpy() for k in plan.operands]
    assert cpu_exec.max_rel_error(r, args, want) < 1e-5
    plain = r.source.replace("ca_mma_tf32(p_, as_[i], bb_);", "").replace(
        "ca_mma_tf32(p_, ab_[i], bs_);", "")
    assert plain != r.source
    import dataclasses
    assert cpu_exec.max_rel_error(dataclasses.replace(r, source=plain), args, want) > 1e-4


@pytest.mark.skipif(not cpu_exec.available(), reason="needs g++ for the CPU emulator")
def test_tensor_core_element_copies_of_rows_longer_than_a_round():
    """N = 130 forbids 16-byte copies of B; a 128-wide B tile then has more elements per row
    than a 64-thread block has copies per round (a thread steps along the row first)."""
    plan, sp, xs, want = emulation_case(lambda a, b: a @ b * 2.0, [(40, 48), (48, 130)], seed=4)
    long_rows = [c for c in tc_configs(sp) if sp.render(c).fact("vec_b") == 1 and
                 c["config.bn"] > sp.render(c).fact("threads")]
    assert long_rows
    for cfg in random.Random(0).sample(long_rows, 2):
        err = cpu_exec.max_rel_error(sp.render(cfg), [xs[k].numpy() for k in plan.operands],
                                     want)
        assert err < 1e-5, (cfg.short(), err)


@pytest.mark.skipif(not cpu_exec.available(), reason="needs g++ for the CPU emulator")
@pytest.mark.parametrize("name", fast_first(sorted(CONV_CASES),
                                             ["conv2d_stride_pad_bias", "conv3d"]))
def test_tensor_core_conv_matches_torch(name):
    plan, sp, by_index, want = conv_emulation_case(name, seed=6)
    tc = [c for c in tc_configs(sp) if c["config.bm"] * c["config.bn"] <= 128 * 128]
    rng = random.Random(name)
    picked = rng.sample(tc, min(2, len(tc)))
    split = [c for c in tc if c["reduction.split"] > 1]
    picked += rng.sample(split, 1) if split else []
    assert picked
    cpu_exec.prebuild([(sp.render(c), len(by_index)) for c in picked])
    for cfg in picked:
        err = cpu_exec.max_rel_error(sp.render(cfg), by_index, want)
        assert err < 1e-5, (cfg.short(), err)


@pytest.mark.skipif(not cpu_exec.available(), reason="needs g++ for the CPU emulator")
@pytest.mark.parametrize("name,order", [("conv2d_dilated_same", "wide"),
                                        ("conv2d_dilated_same", "deep"),
                                        ("conv2d_stride_pad_bias", "deep"), ("conv3d", "deep")])
def test_tensor_core_conv_tables_cover_both_copy_orders(name, order):
    """The gather through per-k constant tables: a thread's copies at one output pixel down K
    (`deep`: a round of threads wider than the tile) and at several pixels (`wide`: a tile
    wider than a round), on windows that cross the padding."""
    plan, sp, by_index, want = conv_emulation_case(name, seed=7)
    wide = order == "wide"
    picked = [c for c in tc_configs(sp) if (c["config.bn"] > sp.render(c).fact("threads")) == wide
              and c["config.bm"] * c["config.bn"] <= 128 * 128]
    assert picked
    for cfg in random.Random(name).sample(picked, 1):
        r = sp.render(cfg)
        assert "ca_koff" in r.source  # the tabled gather, not the per-element division chain
        err = cpu_exec.max_rel_error(r, by_index, want)
        assert err < 1e-5, (cfg.short(), err)
