"""The split template over channels (a "chanreduce" plan: batch norm's statistics over (N, S)
for each channel): several blocks share a channel, so that few long channels fill the GPU (the
chan template's block per channel ran a 16 GiB training-mode BatchNorm at 0.04x of
torch.compile on the H100, 32 blocks on 132 SMs). Executed on the CPU emulator against torch."""

from __future__ import annotations

import random

import pytest
import torch
import torch.nn.functional as F

import cpu_exec
from helpers import ConvBatchNormRelu, Fn, fast_first
from cuda_agent.ir.capture import capture
from cuda_agent.ir.partition import ProgramPlan
from cuda_agent.ir.plan import CHAN_REDUCE
from cuda_agent.ir.planning import make_plan
from cuda_agent.problem import load_problem
from cuda_agent.space.program import stage_spaces
from cuda_agent.space.slots import Target
from cuda_agent.space.space import Space

CASES = {  # name: (f, shape): channels few and long, the trailing run odd or a multiple of 4
    "channel_mean": (lambda x: x.mean(dim=(0, 2, 3)), (3, 4, 8, 64)),
    "batch_norm_train": (lambda x: F.batch_norm(x, None, None, training=True, eps=1e-5),
                         (4, 3, 8, 64)),
    "channel_sumsq_odd": (lambda x: (x * x).sum(dim=(0, 2)), (9, 2, 33)),
}


def _space(f, shape):
    plan = make_plan(capture(Fn, [f], lambda: [torch.randn(*shape)]))
    assert plan.kind == CHAN_REDUCE
    return plan, Space.for_plan(plan, Target())


def test_channel_reductions_are_offered_split_as_well_as_a_block_per_channel():
    for name, (f, shape) in CASES.items():
        _, sp = _space(f, shape)
        assert {t.name for t in sp.templates} == {"chan", "split"}, name
        split = sp.configs_of("split")
        assert {c["reduction.cross"] for c in split} == {"two_pass", "last_block", "atomic"}
    # vectors along the trailing run only where it divides it
    _, odd = _space(*CASES["channel_sumsq_odd"])
    assert {c["memory.vec"] for c in odd.configs_of("split")} == {1}
    _, even = _space(*CASES["channel_mean"])
    assert {c["memory.vec"] for c in even.configs_of("split")} == {1, 2, 4}


def test_a_training_mode_batch_norm_s_statistics_stages_can_fill_the_gpu():
    """The realistic suite's 16 GiB BatchNorm: 32 channels; the chan template gives 32 blocks,
    the split template a few waves of them. Its statistics and normalisation are one stage
    that writes the batch mean and variance as side outputs (a stage per statistic read the
    activations three times)."""
    plan = make_plan(load_problem("benchmarks/realistic/norm_batchnorm2d_train_large.py").graph())
    assert isinstance(plan, ProgramPlan)
    target = Target()
    stats = [sp for st, sp in zip(plan.program.stages, stage_spaces(plan, target))
             if st.plan.kind == CHAN_REDUCE]
    assert len(stats) == len(plan.program.stages) == 1
    assert len(plan.program.stages[0].graph.sides) == 2
    for sp in stats:
        assert "split" in {t.name for t in sp.templates}
        launch = sp.render(next(iter(sp.configs_of("split")))).launches[0]
        assert launch.grid[0] * launch.grid[1] >= target.sm_count
        # the untuned baseline is split too: a block per channel left most SMs idle (the
        # second statistics stage kept it under a 20 s search: 248 ms against 16.6 ms)
        assert sp.template_of(sp.default()).name == "split"
        launch = sp.render(sp.default()).launches[0]
        assert launch.grid[0] * launch.grid[1] >= target.sm_count


@pytest.mark.parametrize("shape, baseline", [
    ((128, 32, 1024, 32), "split"),  # 32 long channels: a block each idles 100 SMs
    ((4, 256, 64, 64), "chan"),  # more channels than SMs: a block each fills the GPU
    ((13, 37, 7, 7), "chan"),  # few short channels: a block each is done at once
])
def test_the_untuned_baseline_is_a_block_per_channel_unless_that_idles_the_gpu(shape,
                                                                               baseline):
    _, sp = _space(CASES["batch_norm_train"][0], shape)
    assert sp.template_of(sp.default()).name == baseline


@pytest.mark.skipif(not cpu_exec.available(), reason="needs g++")
@pytest.mark.parametrize("name", fast_first(sorted(CASES), ["channel_sumsq_odd"]))
def test_split_channels_match_torch(name):
    f, shape = CASES[name]
    plan, sp = _space(f, shape)
    x = torch.randn(*shape)
    want = f(x.double()).float().numpy().reshape(plan.out_shape)
    split = sp.configs_of("split")
    rng = random.Random(name)
    # one of each way the blocks of a channel meet, vector width and output layout
    kinds = sorted({(c["reduction.cross"], c["memory.vec"], c["config.out_grid"])
                    for c in split})
    chosen = [rng.choice([c for c in split if (c["reduction.cross"], c["memory.vec"],
                                               c["config.out_grid"]) == kind])
              for kind in kinds]
    assert len(chosen) >= 3
    cpu_exec.prebuild([(sp.render(c), 1) for c in chosen])
    for cfg in chosen:
        r = sp.render(cfg)
        assert r.launches[0].grid[0] >= 2  # a channel shared by blocks
        err = cpu_exec.max_rel_error(r, [x.numpy()], want)
        assert err < 1e-5, (cfg.short(), err)


@pytest.mark.skipif(not cpu_exec.available(), reason="needs g++")
@pytest.mark.parametrize("cross", fast_first(["two_pass", "last_block", "atomic"], ["two_pass"]))
def test_a_training_mode_chain_with_split_statistics_matches_torch_and_its_statistics(cross):
    """Convolution, BatchNorm with batch statistics, ReLU, its statistics stages split: the
    output and the batch mean and variance the kernels leave for the running statistics
    (`state_updates`) are torch's."""
    from cuda_agent.space.program import StageSpace, state_updates

    shape = (4, 3, 16, 32)
    torch.manual_seed(0)
    model = ConvBatchNormRelu()
    plan = make_plan(capture(ConvBatchNormRelu, [], lambda: [torch.randn(*shape)]))
    assert isinstance(plan, ProgramPlan)
    x = torch.randn(*shape)
    with torch.no_grad():
        conv = model.conv.double()(x.double())
        want = torch.relu(F.batch_norm(conv, None, None, model.bn.weight.double(),
                                       model.bn.bias.double(), training=True))
    params = dict(model.named_parameters())
    inputs = [(x if plan.graph.inputs[k].role == "input"
               else params[plan.graph.inputs[k].target]).detach().float().numpy()
              for k in plan.operands]
    spaces = stage_spaces(plan, Target())
    stats = [i for i, st in enumerate(plan.program.stages) if st.plan.kind == CHAN_REDUCE]
    assert stats and all("split" in {t.name for t in spaces[i].templates} for i in stats)
    # generated stages only (the emulator runs no library step inside a program)
    fixed = [next(c for c in sp.configs if sp.template_of(c).name not in ("lib", "gemm_tc")
                  and c.as_dict().get("config.bm") in (None, "-", 16, 32))
             for sp in spaces]
    rng = random.Random(cross)
    for i in stats:
        fixed[i] = rng.choice([c for c in spaces[i].configs_of("split")
                               if c["reduction.cross"] == cross])
    space = StageSpace.of(plan, stats[0], spaces, fixed)
    r = space.render(fixed[stats[0]])
    ws: list = []
    got = cpu_exec.run(r, inputs, tuple(want.shape), workspace=ws)
    err = float(abs(torch.from_numpy(got).double() - want).max() / want.abs().max())
    assert err < 1e-4, err
    update = next(u for u in state_updates(plan) if u["op"] == "running_stats")
    words = torch.from_numpy(ws[0])
    for stat, expect in (("mean", conv.mean(dim=(0, 2, 3))),
                         ("var", conv.var(dim=(0, 2, 3), unbiased=False))):
        start, n = update[stat]
        torch.testing.assert_close(words[start // 4:start // 4 + n].double(), expect,
                                   rtol=1e-4, atol=1e-5)


WELFORD = {  # batch norm's mean and variance, far from zero: where a naive sum of squares
    # cancels (a mean of 300 against a spread of 1: 1e5 against 1 in float32)
    "batch_norm_offset": (lambda x: F.batch_norm(x, None, None, training=True, eps=1e-5),
                          (4, 3, 8, 36)),
    "batch_norm_odd_relu": (lambda x: torch.relu(F.batch_norm(x, None, None, training=True)),
                            (3, 2, 101)),
    # a few long rows (a reduce plan): the split template's blocks share each row
    "layer_norm_long_rows": (lambda x: F.layer_norm(x, x.shape[-1:]), (3, 1100)),
}


def _welford_space(f, shape):
    plan = make_plan(capture(Fn, [f], lambda: [torch.randn(*shape)]))
    return plan, Space.for_plan(plan, Target())


def test_one_welford_pass_is_offered_only_where_a_mean_and_its_deviations_are_the_levels():
    _, sp = _space(*WELFORD["batch_norm_offset"])
    for name in ("chan", "split"):
        assert {c["compute.algo"] for c in sp.configs_of(name)} == {"passes", "online"}, name
    online = [c for c in sp.configs_of("split") if c["compute.algo"] == "online"]
    assert "atomic" not in {c["reduction.cross"] for c in online}  # no atomic Welford merge
    # one reduction level, or two that are not a mean and its deviations: passes only
    for f, shape in (CASES["channel_mean"], CASES["channel_sumsq_odd"]):
        _, sp = _space(f, shape)
        assert {c["compute.algo"] for c in sp.configs} == {"passes"}
    # a pass fewer: the channel is read twice (statistics, output), not three times
    for name in ("chan", "split"):
        cfg = next(c for c in sp_configs(name) if c["compute.algo"] == "online"
                   and c.get("memory.cache") in (None, "-", "reload"))
        assert dict(_space(*WELFORD["batch_norm_offset"])[1].render(cfg).facts)[
            "reads_per_elem"] == 2.0, name


def sp_configs(name):
    return _space(*WELFORD["batch_norm_offset"])[1].configs_of(name)


@pytest.mark.skipif(not cpu_exec.available(), reason="needs g++")
@pytest.mark.parametrize("name", sorted(WELFORD))
def test_welford_channels_match_torch_far_from_zero(name):
    f, shape = WELFORD[name]
    plan, sp = _welford_space(f, shape)
    torch.manual_seed(3)
    x = torch.randn(*shape) + 300.0
    want = f(x.double()).float().numpy().reshape(plan.out_shape)
    rng = random.Random(name)
    chosen = []
    templates = {t.name for t in sp.templates} & {"chan", "split"}
    for tname, keys in (("chan", ("memory.cache", "config.cluster", "config.block")),
                        ("split", ("reduction.cross", "memory.vec", "config.out_grid"))):
        if tname not in templates:
            continue
        online = [c for c in sp.configs_of(tname) if c["compute.algo"] == "online"
                  and c.get("config.block") <= 256]
        kinds = sorted({tuple(c[k] for k in keys) for c in online}, key=str)
        chosen += [rng.choice([c for c in online if tuple(c[k] for k in keys) == kind])
                   for kind in rng.sample(kinds, min(6, len(kinds)))]
    assert {sp.template_of(c).name for c in chosen} == templates and "split" in templates
    cpu_exec.prebuild([(sp.render(c), 1) for c in chosen])
    for cfg in chosen:
        err = cpu_exec.max_rel_error(sp.render(cfg), [x.numpy()], want)
        assert err < 2e-4, (cfg.short(), err)


@pytest.mark.skipif(not cpu_exec.available(), reason="needs g++")
def test_a_thread_s_long_share_of_a_channel_keeps_its_precision():
    """32 threads sharing a channel of 16.8 M elements, 524288 each, quantized values (exact
    ties, rounding that does not average out), every thread's first element 3 standard
    deviations out: summed about that one shift, a thread's squared deviations lost 1.5e-2
    of the output here (2e-4 on the H100's 8 M-element channels, 2026-12-06); summed in chunks
    folded into a Welford state they keep it (9e-8)."""
    f = lambda x: F.batch_norm(x, None, None, training=True)  # noqa: E731
    shape = (2, 2, 8_388_608)
    plan, sp = _welford_space(f, shape)
    g = torch.Generator().manual_seed(4)
    x = (torch.randn(*shape, generator=g) * 4).round() / 4
    x[:, :, :64] = 3.0  # the first element each thread of a 32-thread block reads
    want = f(x.double()).float().numpy()
    cfg = next(c for c in sp.configs_of("chan") if c["compute.algo"] == "online"
               and c["config.block"] == 32 and c["memory.vec"] == 1
               and c["config.cluster"] == 1 and c["memory.cache"] == "reload")
    err = cpu_exec.max_rel_error(sp.render(cfg), [x.numpy()], want)
    assert err < 2e-5, err
