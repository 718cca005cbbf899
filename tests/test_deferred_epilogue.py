"""A convolution's or matrix product's epilogue deferred to the stages that read it (`partition.defer_epilogues`).

Where a program cuts a convolution's elementwise epilogue (its bias, an activation) before a
reduction, the cut moves to the product itself: the library stage is cuDNN's call alone (no
epilogue pass reading and writing the whole activation), its result is the buffer, and the
reducing stage applies the epilogue as it loads, as torch.compile fuses it. Checked here: where
the cut moves and where it must not (a reader that is a structured op), the bare library
stage's space and launches, the readers pointed at the library's result, the launcher's
product arguments, the model's price, and the programs' values on the CPU emulator against
torch in float64 (bare library stage in each layout, and an own convolution template writing
the bare product into the workspace buffer)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn as nn

import cpu_exec
from helpers import seeded_reference
from cuda_agent.costmodel.model import simulate
from cuda_agent.ir.capture import capture
from cuda_agent.ir.partition import ProgramPlan, partition
from cuda_agent.ir.planning import make_plan, make_program_plan
from cuda_agent.ir.sink import sink_epilogue_views
from cuda_agent.runner.launcher import LoadedKernels
from cuda_agent.space.program import StageSpace, buffer_offsets, stage_spaces, state_updates
from cuda_agent.space.slots import Target
from cuda_agent.space.templates.library import KEPT, KEPT_MO


class TConvBiasMin(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.ConvTranspose2d(3, 6, 3, stride=2, padding=1, output_padding=1)

    def forward(self, x):
        y = torch.min(torch.relu(self.conv(x) + 0.25), dim=1, keepdim=True)[0]
        return torch.nn.functional.gelu(y.sum(dim=2, keepdim=True))


class ConvBNTanh(nn.Module):  # training mode: BatchNorm's batch statistics are side outputs
    def __init__(self) -> None:
        super().__init__()
        self.conv, self.bn = nn.Conv2d(3, 5, 3), nn.BatchNorm2d(5)

    def forward(self, x):
        return torch.tanh(self.bn(self.conv(x)))


class ConvHardswishPoolMish(nn.Module):  # the pool applies bias and activation as it loads
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 5, 3)

    def forward(self, x):
        y = nn.functional.max_pool2d(nn.functional.hardswish(self.conv(x) - 0.5), 2)
        return nn.functional.mish(y)


class TConvPoolMeanTanh(nn.Module):  # overlapping windows, then a mean over the channels
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.ConvTranspose2d(3, 6, 3, stride=2, padding=1)

    def forward(self, x):
        y = nn.functional.hardtanh(nn.functional.max_pool2d(self.conv(x), 3, 2, 1), -0.2, 0.3)
        return torch.tanh(y.mean(dim=1, keepdim=True))


class TConvBNTanhPool(nn.Module):  # training BatchNorm: its statistics in buffers, the pool
    # normalises and applies tanh as it loads
    def __init__(self) -> None:
        super().__init__()
        self.conv, self.bn = nn.ConvTranspose2d(3, 6, 3, stride=2, padding=1), nn.BatchNorm2d(6)

    def forward(self, x):
        return nn.functional.max_pool2d(torch.tanh(self.bn(self.conv(x))), 2)


class ConvBNSubtractMean(nn.Module):  # the reducing stage normalises as it loads
    def __init__(self) -> None:
        super().__init__()
        self.conv, self.bn = nn.Conv2d(3, 6, 3), nn.BatchNorm2d(6)

    def forward(self, x):
        y = self.bn(self.conv(x) * 0.5)
        return y - y.mean(dim=(2, 3), keepdim=True)


class ConvMaskPool(nn.Module):  # a parameter that varies within the window: not deferred
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 5, 3)
        self.mask = nn.Parameter(torch.rand(5, 9, 7))

    def forward(self, x):
        return nn.functional.max_pool2d(self.conv(x) * self.mask, 2)


class ConvReluConv(nn.Module):  # a convolution reads it: not deferred
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Conv2d(3, 4, 3), nn.Conv2d(4, 5, 3)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


class LinearReluLayerNorm(nn.Module):  # cuBLAS's product bare, bias and ReLU in the norm
    def __init__(self) -> None:
        super().__init__()
        self.fc, self.norm = nn.Linear(24, 40), nn.LayerNorm(40)

    def forward(self, x):
        return self.norm(torch.relu(self.fc(x)))


class ConvGeluGroupNorm(nn.Module):  # GroupNorm views the activation: the view moves first
    def __init__(self) -> None:
        super().__init__()
        self.conv, self.norm = nn.Conv2d(3, 6, 3), nn.GroupNorm(3, 6)

    def forward(self, x):
        return self.norm(torch.nn.functional.gelu(self.conv(x)))


CHAINS = {"tconv_bias_min": (TConvBiasMin, (2, 3, 5, 7)), "conv_bn_tanh": (ConvBNTanh, (2, 3, 9, 11)),
          "linear_relu_layernorm": (LinearReluLayerNorm, (6, 24)),
          "conv_gelu_groupnorm": (ConvGeluGroupNorm, (2, 3, 7, 9)),
          "conv_hardswish_pool_mish": (ConvHardswishPoolMish, (2, 3, 9, 11)),
          "tconv_pool_mean_tanh": (TConvPoolMeanTanh, (2, 3, 5, 6)),
          "tconv_bn_tanh_pool": (TConvBNTanhPool, (2, 3, 5, 6)),
          "conv_bn_subtract_mean": (ConvBNSubtractMean, (2, 3, 9, 8))}


def _plan(cls: type, shape: tuple[int, ...]) -> ProgramPlan:
    plan = make_plan(capture(cls, [], lambda: [torch.randn(*shape)]))
    assert isinstance(plan, ProgramPlan)
    return plan


def _ops(graph) -> list[str]:  # noqa: ANN001
    return [n.op for n in graph.nodes if n.op not in ("input", "view")]


@pytest.mark.parametrize("name", sorted(CHAINS))
def test_the_cut_moves_to_the_product_and_the_reader_applies_the_epilogue(name):
    cls, shape = CHAINS[name]
    plan = _plan(cls, shape)
    conv, reader = plan.program.stages[:2]
    # the bare product: no bias add in its stage (a linear layer's weight read transposed)
    assert _ops(conv.graph) in (["conv"], ["permute", "matmul"])
    assert "add" in _ops(reader.graph) and {"reduce", "pool"} & set(_ops(reader.graph))
    assert conv.plan.feeds_stage and not reader.plan.feeds_stage or reader.writes is not None
    # the cut as it was (no deferral) kept the bias in the convolution's stage
    plain = partition(plan.graph)
    assert "add" in _ops(plain.stages[0].graph)
    assert plan.program.values != plain.values


def test_no_deferral_where_a_structured_op_reads_the_epilogue():
    """(a pooling window reads it through a prologue only where each parameter is one value per
    plane: a mask that varies within the window is not one)"""
    for cls in (ConvMaskPool, ConvReluConv):
        plan = _plan(cls, (2, 3, 11, 9))
        assert {"relu", "mul"} & set(_ops(plan.program.stages[0].graph)), cls.__name__


def test_the_bare_library_stage_is_one_call_its_reader_points_at_its_result():
    plan = _plan(*CHAINS["tconv_bias_min"])
    spaces = stage_spaces(plan, Target())
    libs = spaces[0].configs_of("lib")
    # no epilogue kernel: only cuDNN's layout is left to choose
    assert sorted(c["memory.layout"] for c in libs) == sorted(
        ("as_given", "channels_last", KEPT, KEPT_MO))
    assert all(c.get("memory.vec") in (None, "-") for c in libs)
    for lib in libs:
        fixed = [lib] + [sp.default() for sp in spaces[1:]]
        r = StageSpace.of(plan, 0, spaces, fixed).render(lib)
        first, *kernels = r.launches
        assert first.library is not None and first.library["op"] == "conv_transpose"
        assert not any(L.library for L in kernels) and all(
            not L.kernel.startswith("s0_") for L in kernels)  # stage 0 launches no kernel
        reader = kernels[0]
        assert ["product", 0] in [list(a) for a in reader.args], reader.args
        assert dict(r.facts)["s0.bare"] is True


def test_a_bare_product_takes_no_workspace_and_the_statistics_stay_where_the_update_reads():
    """The library's result is what the readers read: the product's workspace buffer (the
    activation's size) is left out of a bare candidate's workspace; an own convolution template
    writes it. The batch statistics lie where `state_updates` (once per plan) says, either way."""
    plan = _plan(*CHAINS["tconv_bn_tanh_pool"])
    spaces = stage_spaces(plan, Target())
    product = plan.program.stages[0].writes
    product_bytes = plan.buffer_bytes()[product]
    lib = spaces[0].configs_of("lib")[0]
    own = next(c for c in spaces[0].configs if spaces[0].template_of(c).name != "lib")
    rest = [sp.default() for sp in spaces[1:]]
    bare = StageSpace.of(plan, 0, spaces, [lib] + rest).render(lib)
    full = StageSpace.of(plan, 0, spaces, [own] + rest).render(own)
    assert full.workspace_bytes - bare.workspace_bytes >= product_bytes
    offsets, _ = buffer_offsets(plan)
    pointed = {a[1] for L in bare.launches for a in (L.args or ()) if list(a)[0] == "buf"}
    assert offsets[product] not in pointed or offsets[product] >= bare.workspace_bytes
    [update] = [u for u in state_updates(plan) if u["op"] == "running_stats"]
    for r in (bare, full):
        # the stage writing the variance and the mean points where the update reads them
        written = {a[1] for L in r.launches for a in (L.args or ()) if list(a)[0] == "buf"}
        assert {update["mean"][0], update["var"][0]} <= written
        assert max(update["mean"][0], update["var"][0]) < r.workspace_bytes


def test_an_own_convolution_template_writes_the_buffer_its_readers_read():
    plan = _plan(*CHAINS["tconv_bias_min"])
    spaces = stage_spaces(plan, Target())
    own = next(c for c in spaces[0].configs if spaces[0].template_of(c).name != "lib")
    fixed = [own] + [sp.default() for sp in spaces[1:]]
    r = StageSpace.of(plan, 0, spaces, fixed).render(own)
    assert not any(L.library for L in r.launches)
    assert not any(list(a)[0] == "product" for L in r.launches for a in (L.args or ()))


class _Fake:
    def __init__(self, ptr: int) -> None:
        self.ptr = ptr

    def data_ptr(self) -> int:
        return self.ptr


def test_the_launcher_points_at_each_library_step_s_result():
    products = [_Fake(1000), _Fake(2000)]
    point = LoadedKernels._pointer
    assert point(["product"], [], _Fake(0), products, _Fake(0)) == 2000  # the latest
    assert point(["product", 0], [], _Fake(0), products, _Fake(0)) == 1000
    assert point(["product", 1], [], _Fake(0), products, _Fake(0)) == 2000
    with pytest.raises(ValueError):
        point(["product", 0], [], _Fake(0), [], _Fake(0))
    t = torch.zeros(2, 3)
    assert LoadedKernels._tensor(["product", 0], [], torch.zeros(16), [t]) is t


def test_the_model_prices_the_epilogue_pass_saved():
    plan = _plan(TConvBiasMin, (16, 3, 128, 128))  # large enough that launches do not dominate
    plain = make_program_plan(plan.graph, partition(plan.graph))

    def best_lib_ms(p: ProgramPlan) -> float:
        spaces = stage_spaces(p, Target())
        times = []
        for lib in spaces[0].configs_of("lib"):
            if lib["memory.layout"] != "as_given":
                continue
            fixed = [lib] + [sp.default() for sp in spaces[1:]]
            r = StageSpace.of(p, 0, spaces, fixed).render(lib)
            times.append(simulate(p.program.stages[0].plan, r.parts[0][1], None,
                                  Target()).time_ms)
        return min(times)

    bare, with_epilogue = best_lib_ms(plan), best_lib_ms(plain)
    # the epilogue pass reads and writes the 16x6x256x256 product: priced, and saved
    assert bare < 0.8 * with_epilogue, (bare, with_epilogue)


def _inputs(plan: ProgramPlan, model: nn.Module, x: torch.Tensor) -> list:
    params = dict(model.named_parameters())
    return [(x if plan.graph.inputs[k].role == "input" else params[plan.graph.inputs[k].target]
             ).detach().float().numpy() for k in plan.operands]


@pytest.mark.skipif(not cpu_exec.available(), reason="needs g++ for the CPU emulator")
@pytest.mark.parametrize("name", sorted(CHAINS))
def test_deferred_programs_match_torch(name):
    cls, shape = CHAINS[name]
    plan = _plan(cls, shape)
    model, x, want = seeded_reference(cls, shape)
    spaces = stage_spaces(plan, Target())
    runs = []
    # the readers at configurations of 1-D blocks (the emulator's)
    rest = [next(c for c in sp.configs if all(L.block[1] == 1 for L in sp.render(c).launches))
            for sp in spaces[1:]]
    for lib in spaces[0].configs_of("lib"):
        # the reader in the space the layout gives it (its channels-last or memory-order
        # variant), at a configuration of 1-D blocks there
        s1 = StageSpace.of(plan, 1, spaces, [lib] + rest)
        c1 = next(c for c in s1.configs if all(L.block[1] == 1 for L in s1.render(c).launches))
        runs.append((f"{lib.short()} + {c1.short()}", s1.render(c1)))
    own = next(c for c in spaces[0].configs if spaces[0].template_of(c).name == "gemm"
               and all(L.block[1] == 1 for L in spaces[0].render(c).launches))
    runs.append((own.short(), StageSpace.of(plan, 0, spaces, [own] + rest).render(own)))
    inputs = _inputs(plan, model, x)
    cpu_exec.prebuild([(r, len(inputs)) for _, r in runs])
    for label, r in runs:
        err = cpu_exec.max_rel_error(r, inputs, want)
        assert err < 1e-4, (label, err)


def test_a_view_below_the_epilogue_moves_onto_the_product():
    """GroupNorm's grouping view: the sunk graph views the product, computes the bias and GELU
    in (N, groups, C / groups, H * W) with the bias viewed (groups, C / groups, 1)."""
    g = capture(ConvGeluGroupNorm, [], lambda: [torch.randn(2, 3, 7, 9)])
    sunk = sink_epilogue_views(g)
    assert sunk is not None
    conv = next(n for n in sunk.nodes if n.op == "conv")
    view = next(n for n in sunk.nodes if n.op == "view" and n.args == (conv.id,))
    assert view.shape == (2, 3, 2, 35)
    add = next(n for n in sunk.live() if n.op == "add" and view.id in n.args)
    bias = sunk[next(a for a in add.args if a != view.id)]
    assert bias.op == "view" and bias.shape == (3, 2, 1) and sunk[bias.args[0]].op == "input"
    assert sink_epilogue_views(capture(ConvHardswishPoolMish, [], lambda: [torch.randn(2, 3, 11, 9)])) \
        is None  # no view to move


def test_a_parameter_over_part_of_a_merged_dim_is_not_moved():
    class RowScale(nn.Module):  # a scale per row (H), the view merges (C, H): it straddles the
        # merged dim (a per-channel one would too)
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3)
            self.s = nn.Parameter(torch.randn(5, 1))

        def forward(self, x):
            y = (self.conv(x) * self.s).view(2, 20, 7)
            return y.sum(dim=1)

    g = capture(RowScale, [], lambda: [torch.randn(2, 3, 7, 9)])
    assert sink_epilogue_views(g) is None

    class ChannelScale(RowScale):  # a scale per channel, the view splitting the channels and
        def __init__(self) -> None:  # merging (H, W) as GroupNorm's does: it moves
            super().__init__()
            self.s = nn.Parameter(torch.randn(4, 1, 1))

        def forward(self, x):
            return (self.conv(x) * self.s).view(2, 2, 2, 35).sum(dim=(2, 3))

    assert sink_epilogue_views(capture(ChannelScale, [], lambda: [torch.randn(2, 3, 7, 9)]))


def test_a_batch_norm_before_a_pool_leaves_its_statistics_in_buffers_the_pool_reads():
    """Training BatchNorm, tanh, max pool: the statistics stage writes the batch variance (the
    mean a side output: one pass over the product) and nothing of the activation's size; the
    pool normalises each element it loads, the per-channel scale computed once per plane."""
    plan = _plan(*CHAINS["tconv_bn_tanh_pool"])
    conv, stats, pool = plan.program.stages
    assert _ops(conv.graph) == ["conv"]
    assert stats.plan.kind == "chanreduce" and len(stats.sides) == 1
    written = {stats.writes, *stats.sides}
    assert all(math.prod(plan.program.buffers[b][0]) == 6 for b in written)
    assert pool.plan.kind == "pool"
    pro = pool.plan.info.prologue
    assert pro is not None and pro.ops >= 4  # sub, mul, mul, add, tanh per element
    read = {s.index for s in pool.sources if s.kind == "buffer"}
    assert written < read and conv.writes in read
    # rsqrt(var + eps) once per plane, not per element
    assert len(pro.plane_values) == 1
    src = StageSpace.of(plan, 2, stage_spaces(plan, Target()),
                        [sp.default() for sp in stage_spaces(plan, Target())]).render(
        stage_spaces(plan, Target())[2].default()).source
    body = src[src.index("auto ca_pre"):]
    assert "rsqrtf" not in body.split("};")[0]
