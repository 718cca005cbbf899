"""Channels-last buffers inside a program (`ir/layout.py`): a convolution's library stage may
keep cuDNN's channels-last product (`memory.layout` "channels_last_kept"), its epilogue writes
the stage's buffer so, and the stages after it read that buffer with NHWC (NDHWC) indexing
through their channels-last variants; the program's inputs and output stay NCHW.

Checked on the CPU emulator against torch (float64) for chains of a convolution or transposed
convolution then bias/activation, training-mode BatchNorm, min/sum over the channels, with
channel counts that are not multiples of 4 and odd spatial sizes; the variants' kernels also
compile with nvcc for sm_90 where nvcc is installed. The same with the readers computed in
the buffer's memory order (`channels_last_kept_ordered`, `layout.memory_order_graph`) at
3, 5, 7 and 64 channels, and the model's prices of both reader variants."""

from __future__ import annotations

import inspect

import random
import shutil
import subprocess

import pytest
import torch
import torch.nn as nn

import cpu_exec
from helpers import seeded_reference
from cuda_agent.costmodel.model import simulate
from cuda_agent.ir.capture import capture
from cuda_agent.ir.layout import channels_last_graph, nhwc_shape
from cuda_agent.ir.partition import ProgramPlan
from cuda_agent.ir.planning import make_plan
from cuda_agent.space.program import StageSpace, follow, kept_buffers, stage_spaces
from cuda_agent.space.slots import Target
from cuda_agent.space.templates.library import KEPT, KEPT_MO


class ConvBNTanh(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv, self.bn = nn.Conv2d(3, 5, 3), nn.BatchNorm2d(5)

    def forward(self, x):
        return torch.tanh(self.bn(self.conv(x)))


class TConvBNRelu(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv, self.bn = nn.ConvTranspose2d(3, 6, 3, stride=2), nn.BatchNorm2d(6)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x))) * 0.5


class TConvMin(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.ConvTranspose2d(3, 7, 3, stride=2, padding=1)

    def forward(self, x):
        return torch.min(torch.relu(self.conv(x) + 0.25), dim=1, keepdim=True)[0]


class ConvSum(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 7, 3, padding=1)

    def forward(self, x):
        return torch.sum(torch.sigmoid(self.conv(x)), dim=1)


class Conv3dBN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv, self.bn = nn.Conv3d(2, 3, 3), nn.BatchNorm3d(3)

    def forward(self, x):
        return self.bn(self.conv(x))


CHAINS = {"conv_bn_tanh": (ConvBNTanh, (2, 3, 9, 11)),
          "tconv_bn_relu": (TConvBNRelu, (2, 3, 5, 7)),
          "tconv_min": (TConvMin, (2, 3, 5, 7)),
          "conv_sum": (ConvSum, (2, 3, 9, 7)),
          "conv3d_bn": (Conv3dBN, (2, 2, 5, 7, 5))}


def _setup(name: str, shape: tuple[int, ...] | None = None
           ) -> tuple[ProgramPlan, nn.Module, torch.Tensor]:
    cls, odd = CHAINS[name]
    shape = shape or odd
    plan = make_plan(capture(cls, [], lambda: [torch.randn(*shape)]))
    assert isinstance(plan, ProgramPlan)
    torch.manual_seed(0)
    model = cls().train()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape))
    return plan, model, torch.randn(*shape, generator=torch.Generator().manual_seed(1))


def _inputs(plan: ProgramPlan, model: nn.Module, x: torch.Tensor) -> list:
    params = dict(model.named_parameters())
    return [(x if plan.graph.inputs[k].role == "input" else params[plan.graph.inputs[k].target]
             ).detach().float().numpy() for k in plan.operands]


def _emulated(space) -> list:
    """Configurations the emulator runs: 1-D blocks (col's with one thread along the run)."""
    return [c for c in space.configs if space.template_of(c).name != "col"
            or c["config.by"] == 1]


@pytest.mark.parametrize("name", sorted(CHAINS))
def test_a_convolution_s_buffer_may_stay_channels_last(name):
    plan, _, _ = _setup(name)
    conv, reader = plan.program.stages[:2]
    assert conv.plan.nhwc_out and reader.nhwc_buffer == conv.writes
    # the reader's variant reads the buffer in its memory shape, through a permute
    stored = reader.nhwc_plan.graph.inputs[reader.sources.index(
        next(s for s in reader.sources if s.kind == "buffer"))]
    assert stored.shape == nhwc_shape(plan.program.buffers[conv.writes][0])
    assert reader.nhwc_plan.kind == reader.plan.kind
    spaces = stage_spaces(plan, Target())
    layouts = spaces[0].slot("memory.layout").choices
    assert layouts == ("as_given", "channels_last", KEPT, KEPT_MO)


def test_the_choice_is_not_offered_where_a_reader_cannot_follow():
    """A pooling window reads its input whole (its planner wants torch's layout), and the last
    stage's output is the program's: neither keeps channels-last."""
    class ConvPool(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(3, 5, 3)

        def forward(self, x):
            return nn.functional.max_pool2d(torch.relu(self.conv(x)), 2)

    plan = make_plan(capture(ConvPool, [], lambda: [torch.randn(2, 3, 11, 9)]))
    assert not plan.program.stages[0].plan.nhwc_out
    spaces = stage_spaces(plan, Target())
    assert KEPT not in spaces[0].slot("memory.layout").choices
    single = make_plan(capture(nn.Conv2d, [3, 5, 3], lambda: [torch.randn(2, 3, 9, 9)]))
    assert not single.nhwc_out


def _renders(name: str, seed: int) -> list:
    """(label, rendered) of the program with its library stage in each layout, and with the
    buffer kept channels-last, sampled configurations of the reading stage."""
    plan, _, _ = _setup(name)
    spaces = stage_spaces(plan, Target())
    rng = random.Random(seed)
    reader = _emulated(spaces[1])[0]
    out = []
    for lib in spaces[0].configs_of("lib"):
        # a bare product (its epilogue deferred to the reader) has no epilogue kernel's slots
        if (lib.get("memory.vec", 1) == 1 or lib.get("config.items", 1) == 1) and \
                lib["memory.layout"] != KEPT_MO:  # `_ordered_renders`
            fixed = [lib, reader] + [sp.default() for sp in spaces[2:]]
            out.append((lib.short(), StageSpace.of(plan, 0, spaces, fixed).render(lib)))
    kept = next(c for c in spaces[0].configs_of("lib") if c["memory.layout"] == KEPT)
    fixed = [kept, reader] + [sp.default() for sp in spaces[2:]]
    s1 = StageSpace.of(plan, 1, spaces, fixed)
    assert s1.plan is plan.program.stages[1].nhwc_plan  # the reader searches its variant
    for cfg in rng.sample(_emulated(s1), min(4, len(_emulated(s1)))):
        out.append((f"kept + {cfg.short()}", s1.render(cfg)))
    return out + _ordered_renders(plan, spaces, rng)


def _ordered_renders(plan: ProgramPlan, spaces: list, rng: random.Random, n: int = 4) -> list:
    """(label, rendered) of the program with the buffer kept channels-last and the reader
    computed in its memory order (`KEPT_MO`), sampled configurations of the reader."""
    ordered = next(c for c in spaces[0].configs_of("lib") if c["memory.layout"] == KEPT_MO)
    fixed = [ordered, spaces[1].default()] + [sp.default() for sp in spaces[2:]]
    s1 = StageSpace.of(plan, 1, spaces, fixed)
    assert s1.plan is plan.program.stages[1].nhwc_mo_plan
    cfgs = _emulated(s1)
    return [(f"ordered + {cfg.short()}", s1.render(cfg))
            for cfg in rng.sample(cfgs, min(n, len(cfgs)))]


@pytest.mark.skipif(not cpu_exec.available(), reason="needs g++ for the CPU emulator")
@pytest.mark.parametrize("name", sorted(CHAINS))
def test_channels_last_programs_match_torch(name):
    plan, model, x = _setup(name)
    with torch.no_grad():
        want = model.double()(x.double()).numpy()
    runs = _renders(name, seed=len(name))
    assert any(dict(r.facts).get("s1.reads_channels_last") == 0 for _, r in runs)
    inputs = _inputs(plan, model, x)
    cpu_exec.prebuild([(r, len(inputs)) for _, r in runs])
    for label, r in runs:
        err = cpu_exec.max_rel_error(r, inputs, want)
        assert err < 1e-4, (label, err)


def test_a_reader_s_configuration_follows_the_producer_s_layout():
    """Fixed at a configuration of its own layout's space, a reader renders in the other
    layout's space: vector reads of a strided buffer drop to scalar ones (8 x 8 images: the
    NCHW reader has float4 configurations)."""
    plan, _, _ = _setup("conv_bn_tanh", (2, 3, 10, 10))
    spaces = stage_spaces(plan, Target())
    kept = next(c for c in spaces[0].configs_of("lib") if c["memory.layout"] == KEPT)
    variant = StageSpace.of(plan, 1, spaces, [kept, spaces[1].default()])
    for cfg in spaces[1].configs[::97]:
        assert variant.contains(follow(variant, cfg))
    vec4 = next(c for c in spaces[1].configs if c.get("memory.vec") == 4
                and not variant.contains(c))
    assert follow(variant, vec4)["memory.vec"] == 1
    assert kept_buffers(plan, [kept, spaces[1].default()]) == {0}
    # distinct programs by key: the kept layout is another program than converting back
    s0 = StageSpace.of(plan, 0, spaces, [kept, spaces[1].default()])
    back = next(c for c in spaces[0].configs_of("lib") if c["memory.layout"] == "channels_last"
                and {k: v for k, v in c.items if k != "memory.layout"} ==
                {k: v for k, v in kept.items if k != "memory.layout"})
    assert s0.key(kept, "t") != s0.key(back, "t")


def test_the_model_prices_the_conversion_saved_and_the_strided_reads():
    plan, _, _ = _setup("conv_bn_tanh", (16, 3, 131, 129))  # launches do not dominate
    spaces = stage_spaces(plan, Target())
    lib = {c["memory.layout"]: c for c in spaces[0].configs_of("lib")
           if c.get("memory.vec", 1) == 1 and c.get("config.items", 1) == 1
           and c.get("config.block", 256) == 256}
    # the library stage alone: keeping the product saves its conversion back
    lib_ms = {k: simulate(plan.program.stages[0].plan, spaces[0].render(c), None,
                          Target()).time_ms for k, c in lib.items()}
    assert lib_ms[KEPT] < lib_ms["channels_last"]
    # the whole program: the stages' own times plus the reader's strided reads of the buffer
    s0 = StageSpace.of(plan, 0, spaces, [lib[KEPT], spaces[1].default()])
    r = s0.render(lib[KEPT])
    parts = sum(simulate(p, q, None, Target()).time_ms for p, q in r.parts)
    total = simulate(plan, r, None, Target()).time_ms
    assert total > parts
    back = s0.render(lib["channels_last"])
    assert simulate(plan, back, None, Target()).time_ms == pytest.approx(
        sum(simulate(p, q, None, Target()).time_ms for p, q in back.parts))


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_channels_last_kernels_compile_for_sm90(tmp_path):
    for name in ("conv_bn_tanh", "tconv_min", "conv3d_bn"):
        # the last of the strided reader's renders and the memory-order reader's
        for k, (label, r) in enumerate(_renders(name, seed=3)[-6:]):
            cu = tmp_path / f"{name}{k}.cu"
            cu.write_text(r.source)
            res = subprocess.run(["nvcc", "-arch=sm_90", "-cubin", "-o", str(cu) + ".cubin",
                                  str(cu)], capture_output=True, text=True)
            assert res.returncode == 0, (label, res.stderr[-2000:])


def test_channels_last_graph_keeps_the_computation():
    """The variant computes the same values: the permute puts the stored input back."""
    plan, _, _ = _setup("conv_sum")
    st = plan.program.stages[1]
    k = next(j for j, s in enumerate(st.sources) if s.kind == "buffer")
    g = channels_last_graph(st.graph, {k})
    stored = next(n.id for n in g.nodes if n.op == "input" and n.attr("index") == k)
    assert g[stored + 1].op == "permute" and g[stored + 1].args == (stored,)
    assert g[g.output].shape == st.graph[st.graph.output].shape


# -- readers in the buffer's memory order (memory.layout channels_last_kept_ordered) ---------

def _chain(kind: str, C: int) -> type:
    """A convolution of C output channels then a reader: BatchNorm (training) and an
    activation, or a min/sum over the channels."""
    class Chain(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            if kind.startswith("conv3d"):
                self.conv, self.bn = nn.Conv3d(2, C, 3), nn.BatchNorm3d(C)
            elif kind.startswith("tconv"):
                self.conv = nn.ConvTranspose2d(3, C, 3, stride=2, padding=1)
                self.bn = nn.BatchNorm2d(C)
            else:
                self.conv, self.bn = nn.Conv2d(3, C, 3), nn.BatchNorm2d(C)

        def forward(self, x):
            y = self.conv(x)
            if kind.endswith("_min"):
                return torch.min(torch.relu(y + 0.25), dim=1, keepdim=True)[0]
            if kind.endswith("_sum"):
                return torch.sum(torch.sigmoid(y), dim=1)
            if kind.endswith("_gap"):  # global average pooling: (N, C, 1, 1), as (N, 1, 1, C)
                return torch.mean(torch.nn.functional.gelu(y), dim=(2, 3), keepdim=True)
            return torch.tanh(self.bn(y)) * 0.5
    return Chain


ORDERED = [("conv_bn", 3, (2, 3, 7, 9)), ("conv_bn", 64, (2, 3, 5, 7)),
           ("tconv_bn", 7, (2, 3, 5, 3)), ("tconv_min", 5, (2, 3, 5, 7)),
           ("tconv_min", 64, (1, 3, 3, 5)), ("conv_sum", 7, (2, 3, 9, 7)),
           ("conv_sum", 3, (3, 3, 5, 5)), ("conv3d_bn", 5, (2, 2, 5, 7, 5)),
           ("conv_gap", 7, (2, 3, 9, 7))]


@pytest.mark.skipif(not cpu_exec.available(), reason="needs g++ for the CPU emulator")
@pytest.mark.parametrize("kind,C,shape", ORDERED, ids=[f"{k}{c}" for k, c, _ in ORDERED])
def test_readers_in_memory_order_match_torch(kind, C, shape):
    """The reader computed in the buffer's memory order: BatchNorm's statistics as a column
    reduction over (N, *S) with the channels innermost and its output stored back in torch's
    layout (`out_perm`), a min/sum over the channels as a row reduction over contiguous C."""
    cls = _chain(kind, C)
    plan = make_plan(capture(cls, [], lambda: [torch.randn(*shape)]))
    assert isinstance(plan, ProgramPlan)
    reader = plan.program.stages[1]
    mo = reader.nhwc_mo_plan
    assert mo is not None and mo.kind == "reduce"
    if kind.endswith("_bn"):  # statistics over everything but the innermost channels
        assert mo.reduce_dims == tuple(range(len(shape) - 1)) and mo.out_perm is not None
    elif kind.endswith("_gap"):  # over the spatial dims, the channels innermost
        assert mo.reduce_dims == (1, 2) and mo.out_perm is None
    else:  # over the channels, contiguous; the output needs no permute
        assert mo.reduce_dims == (len(shape) - 1,) and mo.out_perm is None
    model, x, want = seeded_reference(cls, shape)
    spaces = stage_spaces(plan, Target())
    runs = _ordered_renders(plan, spaces, random.Random(C), n=3)
    assert all(dict(r.facts).get("s1.reads_channels_last_ordered") == 0 for _, r in runs)
    inputs = _inputs(plan, model, x)
    cpu_exec.prebuild([(r, len(inputs)) for _, r in runs])
    for label, r in runs:
        err = cpu_exec.max_rel_error(r, inputs, want)
        assert err < 1e-4, (label, err)


def test_the_model_prices_memory_order_reads_as_coalesced():
    """A min over 64 channels of a large kept buffer: read in torch's order its lanes are 64
    elements apart (charged), in memory order each pixel's channels are one contiguous row (not
    charged): the ordered program is the faster, and no slower than converting back."""
    cls = _chain("conv_min", 64)
    plan = make_plan(capture(cls, [], lambda: [torch.randn(16, 3, 131, 129)]))
    spaces = stage_spaces(plan, Target())
    best = {}
    for lay in ("channels_last", KEPT, KEPT_MO):
        lib = next(c for c in spaces[0].configs_of("lib") if c["memory.layout"] == lay)
        s1 = StageSpace.of(plan, 1, spaces, [lib, spaces[1].default()])
        best[lay] = min(simulate(plan, s1.render(c), None, Target()).time_ms
                        for c in s1.configs[::7])
        r = s1.render(s1.default())
        assert (lay == KEPT) == ("s1.reads_channels_last" in dict(r.facts))
    assert best[KEPT_MO] < best[KEPT]
    assert best[KEPT_MO] <= best["channels_last"]


def test_a_permuted_store_is_priced():
    """BatchNorm in memory order stores its output in torch's layout: a permuted store, which
    the model charges beyond the stage's own time (the reads are not)."""
    plan, _, _ = _setup("conv_bn_tanh")
    spaces = stage_spaces(plan, Target())
    kept = next(c for c in spaces[0].configs_of("lib") if c["memory.layout"] == KEPT_MO)
    s1 = StageSpace.of(plan, 1, spaces, [kept, spaces[1].default()])
    r = s1.render(s1.default())
    parts = sum(simulate(p, q, None, Target()).time_ms for p, q in r.parts)
    assert r.parts[1][0].out_perm is not None
    assert simulate(plan, r, None, Target()).time_ms > parts


def test_memory_order_is_withdrawn_where_its_reader_has_no_kernel():
    """BatchNorm over few channels of a large tensor in memory order is one column tile: the
    col template's lone block is masked there, so the producer does not offer the value."""
    cls = _chain("conv_bn", 5)
    plan = make_plan(capture(cls, [], lambda: [torch.randn(16, 3, 131, 129)]))
    spaces = stage_spaces(plan, Target())
    assert spaces[0].slot("memory.layout").choices == ("as_given", "channels_last", KEPT)
    assert plan.program.stages[1].nhwc_mo_plan is None


@pytest.mark.parametrize("name", sorted(CHAINS))
def test_every_stage_space_fits_the_agents_vocabulary(name):
    """The kept layouts are values the agents can see: the default strategy (the shipped
    policy) indexes every stage's space, and a value missing from `agents/vocab.VOCAB` made
    `tune` fail at its start on every convolution chain whose buffer may stay channels-last
    (KeyError: 'channels_last_kept' of memory.layout)."""
    from cuda_agent.agents.vocab import SpaceIndex

    plan, _, _ = _setup(name)
    for sp in stage_spaces(plan, Target()):
        assert len(SpaceIndex.of(sp).configs) == len(sp.configs)


def test_the_default_strategy_tunes_a_chain_that_may_stay_channels_last(tmp_path):
    """`tune` at its defaults (the agents with the shipped policy) on a convolution chain
    whose buffer may stay channels-last, on the simulator: it runs to its budget."""
    from cuda_agent.tuner import tune

    path = tmp_path / "tconv_min.py"
    path.write_text("import torch\nimport torch.nn as nn\n\n\n" + inspect.getsource(
        TConvMin).replace("class TConvMin", "class Model") +
        "\n\ndef get_inputs():\n    return [torch.randn(2, 3, 5, 7)]\n\n\n"
        "def get_init_inputs():\n    return []\n")
    res = tune(str(path), device="sim", budget=6, batch=3, baselines=False, store=":memory:")
    assert res.settings.strategy == "default"
    assert len(res.trials) >= 2 and res.best is not None
