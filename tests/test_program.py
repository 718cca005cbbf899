"""Multi-kernel programs: partition, composition of stage kernels, and the stage-wise search."""

from __future__ import annotations

import random

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import cpu_exec
from cuda_agent.errors import UnsupportedError
from cuda_agent.ir.capture import capture
from cuda_agent.ir.partition import ProgramPlan, cut_values
from cuda_agent.ir.planning import make_plan
from cuda_agent.space.program import StageSpace, stage_spaces
from cuda_agent.space.slots import Target


class ConvPool(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        return F.max_pool2d(torch.relu(self.conv(x)), 2)


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(24, 20), nn.Linear(20, 12)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


class LinearSoftmax(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(24, 40)

    def forward(self, x):
        return torch.softmax(self.a(x) * 2.0, dim=-1)


class SumThenSoftmaxOtherDim(nn.Module):
    """Two reductions over different iteration spaces: no single row pattern covers both."""

    def forward(self, x):
        return torch.softmax(x.sum(dim=1) * 0.1, dim=0)


CASES = {"conv_pool": (ConvPool, (2, 3, 10, 10), ["conv", "pool"]),
         "mlp": (MLP, (9, 24), ["gemm", "gemm"]),
         "linear_softmax": (LinearSoftmax, (7, 24), ["gemm", "softmax"]),
         "two_reductions": (SumThenSoftmaxOtherDim, (12, 33), ["reduction", "softmax"])}


def plan_of(name: str) -> tuple[ProgramPlan, nn.Module, torch.Tensor]:
    cls, shape, _ = CASES[name]
    graph = capture(cls, [], lambda: [torch.randn(*shape)])
    torch.manual_seed(0)
    model = cls()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape))
    return make_plan(graph), model, torch.randn(*shape, generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("name", sorted(CASES))
def test_partition_cuts_where_data_flow_needs_memory(name):
    plan, _, _ = plan_of(name)
    assert isinstance(plan, ProgramPlan) and plan.kind == "program"
    stages = plan.program.stages
    assert [s.plan.family for s in stages] == CASES[name][2]
    # every stage but the last writes one buffer that a later stage reads
    assert [s.writes for s in stages] == list(range(len(stages) - 1)) + [None]
    for k, st in enumerate(stages[1:], 1):
        assert any(src.kind == "buffer" and src.index == k - 1 for src in st.sources)
    assert plan.family == "+".join(CASES[name][2])
    assert plan.flops() == sum(s.plan.flops() for s in stages)


def test_single_kernel_graphs_are_not_cut():
    fused = capture(nn.Linear, [16, 8], lambda: [torch.randn(4, 16)])
    assert cut_values(fused) == [] and not isinstance(make_plan(fused), ProgramPlan)
    norm = capture(nn.LayerNorm, [32], lambda: [torch.randn(4, 32)])
    assert cut_values(norm) == []


def _inputs_for(plan: ProgramPlan, model: nn.Module, x: torch.Tensor) -> list:
    params = dict(model.named_parameters())
    out = []
    for k in plan.operands:
        gin = plan.graph.inputs[k]
        out.append((x if gin.role == "input" else params[gin.target]).detach().float().numpy())
    return out


@pytest.mark.skipif(not cpu_exec.available(), reason="needs g++ for the CPU emulator")
@pytest.mark.parametrize("name", sorted(CASES))
def test_composed_program_matches_torch(name):
    """The stages' kernels, renamed into namespaces and wired through the workspace, run as
    one candidate; sampled configurations of each stage (generated templates) agree."""
    plan, model, x = plan_of(name)
    with torch.no_grad():
        want = model.double()(x.double()).numpy()
    spaces = stage_spaces(plan, Target())
    rng = random.Random(name)

    def small_generated(space):
        # the emulator runs no library step inside a program, and only 1-D blocks (not col's)
        return [c for c in space.configs if space.template_of(c).name not in ("lib", "col") and (
            c.as_dict().get("config.bm") in (None, "-") or c["config.bm"] * c["config.bn"]
            <= 64 * 64)]

    fixed = [small_generated(sp)[0] for sp in spaces]
    runs = []
    for stage in range(len(spaces)):
        space = StageSpace.of(plan, stage, spaces, fixed)
        small = small_generated(space)
        runs += [(stage, cfg, space.render(cfg))
                 for cfg in [fixed[stage]] + rng.sample(small, min(2, len(small)))]
    inputs = _inputs_for(plan, model, x)
    cpu_exec.prebuild([(r, len(inputs)) for _, _, r in runs])
    for stage, cfg, r in runs:
        assert all(L.args is not None for L in r.launches)
        err = cpu_exec.max_rel_error(r, _inputs_for(plan, model, x), want)
        assert err < 1e-4, (stage, cfg.short(), err)


def test_stage_candidates_differ_by_key_and_keep_the_library_step():
    plan, _, _ = plan_of("conv_pool")
    spaces = stage_spaces(plan, Target())
    fixed = [sp.default() for sp in spaces]
    s0 = StageSpace.of(plan, 0, spaces, fixed)
    s1 = StageSpace.of(plan, 1, spaces, fixed)
    a, b = s1.configs[:2]
    assert s1.key(a, "t") != s1.key(b, "t")
    lib = s0.configs_of("lib")
    assert lib, "the library template applies to the convolution's stage"
    r = s0.render(lib[0])
    steps = [L for L in r.launches if L.library]
    assert len(steps) == 1 and steps[0].args  # the library reads the program's operands
    # the bare product (the pool applies the bias and ReLU as it loads: no epilogue kernel
    # after cuDNN's call; `test_deferred_epilogue.py`): the next launch is the pool's, reading
    # the library's result
    after = r.launches[r.launches.index(steps[0]) + 1]
    assert after.kernel.endswith("ca_pool") and ["product", 0] in after.args


CONV_POOL_SRC = (
    "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n\n"
    "class Model(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
    "        self.conv = nn.Conv2d(8, 16, 3, padding=1)\n\n"
    "    def forward(self, x):\n        return F.max_pool2d(torch.relu(self.conv(x)), 2)\n\n\n"
    "def get_inputs():\n    return [torch.randn(4, 8, 32, 32)]\n\n\n"
    "def get_init_inputs():\n    return []\n")


def test_tune_on_sim_searches_every_stage_and_emits(tmp_path):
    from cuda_agent.tuner import tune

    path = tmp_path / "conv_pool.py"
    path.write_text(CONV_POOL_SRC)
    res = tune(str(path), device="sim", budget=12, batch=4, out=tmp_path / "out", strategy="random")
    assert len(res.trials) == 12 and res.best is not None
    assert res.plan.family == "conv+pool"
    model_new = (tmp_path / "out" / "model_new.py").read_text()
    assert "cuda_agent_stage1" in model_new and '"args"' in model_new or "'args'" in model_new


@pytest.mark.parametrize("strategy", ["random", "marl"])
def test_a_later_stage_does_not_measure_the_best_program_again(tmp_path, strategy):
    """A later stage starts from the best program, which holds that stage's default: measured
    again, it was the same program, one of the budget's measurements for nothing."""
    from cuda_agent.tuner import tune

    path = tmp_path / "conv_pool.py"
    path.write_text(CONV_POOL_SRC)
    res = tune(str(path), device="sim", budget=12, batch=4, strategy=strategy,
               store=":memory:")
    assert len(res.trials) == 12
    assert not [t.index for t in res.trials if t.measurement.reused]
    assert len({t.measurement.key for t in res.trials}) == 12


def test_replay_refuses_programs(tmp_path):
    from cuda_agent.problem import load_problem
    from cuda_agent.tuner import TuneSettings, Tuner

    path = tmp_path / "mlp.py"
    path.write_text(
        "import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n"
        "        self.a, self.b = nn.Linear(64, 64), nn.Linear(64, 64)\n\n"
        "    def forward(self, x):\n        return self.b(torch.relu(self.a(x)))\n\n\n"
        "def get_inputs():\n    return [torch.randn(32, 64)]\n\n\n"
        "def get_init_inputs():\n    return []\n")
    with pytest.raises(UnsupportedError, match="multi-kernel"):
        Tuner(load_problem(path), TuneSettings(device="replay", replay_root=str(tmp_path)))


def test_stage_plateau_counts_measurements_without_real_progress():
    from cuda_agent.space.program import StagePlateau, stage_budget, stage_share

    p = StagePlateau(None, patience=3, gain=0.01)
    assert not p.update(1.0)  # the first time is progress from nothing
    assert not p.update(0.995)  # within 1 %: noise, not progress (1 of 3)
    assert not p.update(None)  # a failed candidate is no progress either (2 of 3)
    assert not p.update(0.9)  # progress: the count starts again from 0.9
    assert [p.update(t) for t in (0.95, 0.899, 0.5)] == [False, False, False]
    assert [p.update(t) for t in (0.6, 0.7, 0.8)] == [False, False, True]
    # a later stage starts from the program's best so far
    assert StagePlateau(0.5, patience=1).update(0.6) is True
    assert StagePlateau(0.5, patience=1).update(0.4) is False
    # with nothing handed on, the shares are the even split the older sweeps used
    for budget in (1, 6, 7, 40, 41, 200):
        for n in (1, 2, 3):
            left, shares = budget, []
            for i in range(n):
                shares.append(stage_share(left, n - i))
                left -= shares[-1]
            assert shares == [stage_budget(budget, n, i) for i in range(n)], (budget, n)


def test_a_settled_stage_hands_the_rest_of_its_share_to_the_next(tmp_path):
    """With a patience of 2 the conv stage stops where its plateau says, not at half the
    budget, and the pool stage gets the rest; the pool stage settles too, and the stages are
    searched again in rounds while a round brings progress: the search ends with the budget
    spent or after a round without progress, never in the middle of one."""
    from itertools import groupby

    from cuda_agent.space.program import STAGE_GAIN, StagePlateau
    from cuda_agent.tuner import tune

    path = tmp_path / "conv_pool.py"
    path.write_text(CONV_POOL_SRC)
    res = tune(str(path), device="sim", budget=16, batch=4, stage_patience=2, baselines=False,
               store=":memory:", strategy="random")
    stages = [t.stage for t in res.trials]
    runs = [k for k, _ in groupby(stages)]
    assert len(stages) <= 16 and runs[:2] == [0, 1] and runs == [0, 1] * (len(runs) // 2) + \
        [0] * (len(runs) % 2), f"stages not searched in rounds: {stages}"
    first = [t.measurement.time_ms if t.measurement.ok else None
             for t in res.trials if t.stage == 0][:stages.index(1)]
    plateau = StagePlateau(None, 2)
    settled_at = next(k + 1 for k, ms in enumerate(first) if plateau.update(ms))
    assert len(first) == settled_at < 8, "the conv stage ran past its plateau"
    if len(stages) < 16:  # ended early: the last whole round brought no progress
        times = [t.measurement.time_ms if t.measurement.ok else float("inf")
                 for t in res.trials]
        lengths = [len(list(g)) for _, g in groupby(stages)]
        last_round = len(stages) - sum(lengths[-2:])  # where the last round began
        before, after = min(times[:last_round]), min(times)
        assert after >= before * (1 - STAGE_GAIN), "a round with progress ended the search"

    even = tune(str(path), device="sim", budget=16, batch=4, stage_patience=None,
                baselines=False, store=":memory:", strategy="random")
    assert [t.stage for t in even.trials] == [0] * 8 + [1] * 8


def test_the_stage_schedule_searches_rounds_while_they_bring_progress():
    """`StageSchedule.run` with a scripted search: a round that improves the best by more
    than `STAGE_GAIN` earns another; one that does not ends the search; the budget spent ends
    it too; each round's stages get even shares of what is left; without a patience there is
    one round."""
    from cuda_agent.search.stop import StageSchedule

    def scripted(gains: list[float], used: int, budget: int = 64, patience: int | None = 8):
        spent, best, calls = [0], [10.0], []

        def search(i: int, share: int, until: float | None, rounds: int) -> str:
            calls.append((rounds, i, share))
            spent[0] += min(used, share)
            best[0] *= gains.pop(0) if gains else 1.0
            return "plateau"

        StageSchedule(budget, 2, patience).run(lambda: spent[0], search,
                                               best_ms=lambda: best[0])
        return calls

    # round 0 improves, round 1 does not: two rounds, shares even over what is left
    assert scripted([0.5, 1.0, 1.0, 1.0], used=10) == [
        (0, 0, 32), (0, 1, 54), (1, 0, 22), (1, 1, 34)]
    # progress of under 1 % is noise: one round
    assert scripted([0.995, 1.0], used=10) == [(0, 0, 32), (0, 1, 54)]
    # progress every round: rounds until the budget is spent
    calls = scripted([0.5] * 40, used=10)
    assert sum(min(10, share) for *_, share in calls) == 64 and calls[-2:] == [
        (3, 0, 2), (3, 1, 2)]  # 60 spent in three rounds, the last 4 split
    # no patience: one round, every stage its share, the last all that remains
    assert scripted([0.5] * 4, used=10, patience=None) == [(0, 0, 32), (0, 1, 54)]


def test_a_program_sweep_splits_evenly_and_records_each_records_stage(tmp_path):
    import gzip
    import json

    from benchmarks.sim_cases import _program
    from cuda_agent.problem import load_problem
    from cuda_agent.space.slots import Target
    from cuda_agent.sweep import sweep_problem

    path = tmp_path / "conv_pool.py"
    path.write_text(CONV_POOL_SRC)
    _, written = sweep_problem(path, tmp_path / "data", device="sim", sample=10,
                               store=":memory:")
    records = json.loads(gzip.open(written).read())["records"]
    assert [r["stage"] for r in records] == [0] * 5 + [1] * 5
    plan = make_plan(load_problem(path).graph())
    # the replay follows the recorded stages (here the even split too)
    assert [s for _, _, s in _program(plan, records, Target())] == \
        [r["stage"] for r in records if r.get("ok") and r.get("time_ms")]


def test_a_time_limit_is_shared_among_the_stages(tmp_path, monkeypatch):
    """Each stage gets an even share of the seconds left, as of the budget: under a time limit
    the first stage used to take them all, leaving the later stages at their untuned defaults
    (a training-mode BatchNorm chain's statistics at 0.04-0.13x of torch.compile)."""
    import time

    from cuda_agent.runner.sim import SimDevice
    from cuda_agent.tuner import tune

    slow = SimDevice.evaluate

    def evaluate(self, cand, best_ms=None):  # a measurement of a large problem: seconds
        time.sleep(0.4)
        return slow(self, cand, best_ms)

    monkeypatch.setattr(SimDevice, "evaluate", evaluate)
    path = tmp_path / "conv_pool.py"
    path.write_text(CONV_POOL_SRC)
    res = tune(str(path), device="sim", budget=60, batch=2, time_limit_s=8.0, baselines=False,
               store=":memory:", stage_patience=None,
               strategy="random")  # no stage settles: only the seconds
    stages = [t.stage for t in res.trials]
    assert res.stopped == "time_limit" and stages == sorted(stages)
    assert stages.count(0) >= 2 and stages.count(1) >= 2, stages
    assert len(stages) < 30  # neither stage ran through its budget share


def _program_tuner(tmp_path, strategy: str, budget: int = 8):
    from cuda_agent.problem import load_problem
    from cuda_agent.tuner import TuneSettings, Tuner

    path = tmp_path / "conv_pool.py"
    path.write_text(CONV_POOL_SRC)
    return Tuner(load_problem(path), TuneSettings(device="sim", strategy=strategy, budget=budget,
                                                  batch=4, baselines=False, store=":memory:"))


def _program_key(tuner, fixed, cfg=None) -> str:
    """The store key of the program with stage 0 at `cfg` (default: fixed[0]) and the other
    stages at `fixed`."""
    space = StageSpace.of(tuner.plan, 0, tuner.stages, fixed)
    return space.key(fixed[0] if cfg is None else cfg, tuner.toolchain)


def test_a_program_s_first_stage_is_searched_with_the_later_ones_at_the_model_pick(tmp_path):
    """After the untuned baseline, a strategy that holds the GPU model measures every stage at
    that model's fastest, and the first stage's candidates run the later stages at their picks,
    not at the untuned defaults (a 16 GiB BatchNorm, H100: 2 candidates in 20 s, the variance
    and normalisation passes left at defaults the model rates 2.5-9x slower)."""
    from cuda_agent.search import make_strategy
    from cuda_agent.search.prior_rank import model_pick
    from cuda_agent.tuner import library_pick, library_twins

    tuner = _program_tuner(tmp_path, "prior", budget=10)
    try:
        res = tuner.run()
        defaults = [sp.default() for sp in tuner.stages]
        picks = [model_pick(sp) for sp in tuner.stages]
        assert picks != defaults and None not in picks
        # the library floor between them: cuDNN for the convolution, the model's pick after it
        probe = make_strategy("prior", tuner.stages[0])
        floor = [library_pick(probe, sp) or p for sp, p in zip(tuner.stages, picks)]
        assert floor[0] != picks[0] and floor[1:] == picks[1:]
        # and the same floor in cuDNN's other layout (channels-last), which no model ranks
        (twin,) = library_twins(tuner.stages[0], floor[0])
        assert twin["memory.layout"] != floor[0]["memory.layout"]
        keys = [t.measurement.key for t in res.trials]
        assert keys[:4] == [_program_key(tuner, defaults), _program_key(tuner, floor),
                            _program_key(tuner, [twin] + floor[1:]), _program_key(tuner, picks)]
        assert res.trials[1].library and res.trials[2].library and not res.trials[3].library
        assert res.trials[3].measurement.time_ms < res.trials[0].measurement.time_ms
        stage0 = [t for t in res.trials[4:] if t.stage == 0]
        assert stage0 and all(t.measurement.key == _program_key(tuner, picks, t.config)
                              for t in stage0)
        assert len(res.trials) == 10 and len(set(keys)) == 10
    finally:
        tuner.close()


def test_a_cold_strategy_keeps_the_later_stages_at_their_defaults(tmp_path):
    """Random search holds no model of the GPU: nothing of the model's reaches it (the classic
    peers are compared cold and warm, issue 34)."""
    tuner = _program_tuner(tmp_path, "random")
    try:
        res = tuner.run()
        defaults = [sp.default() for sp in tuner.stages]
        assert res.trials[0].measurement.key == _program_key(tuner, defaults)
        stage0 = [t for t in res.trials if t.stage == 0]
        assert all(t.measurement.key == _program_key(tuner, defaults, t.config) for t in stage0)
    finally:
        tuner.close()


def test_a_failing_pick_program_leaves_the_search_at_the_defaults(tmp_path, monkeypatch):
    """Every stage at its pick is measured as one program first: where it fails, that is one
    candidate lost, and the first stage is searched with the later ones at their defaults."""
    from cuda_agent.runner.records import Measurement
    from cuda_agent.runner.sim import SimDevice

    calls: list[str] = []
    real = SimDevice.evaluate

    def evaluate(self, cand, best_ms=None):
        calls.append(cand.key)
        if len(calls) in (2, 3, 4):  # the library floor's programs (two layouts), the picks'
            return Measurement.failure(cand.key, "sim", "wrong", "off by one")
        return real(self, cand, best_ms)

    monkeypatch.setattr(SimDevice, "evaluate", evaluate)
    tuner = _program_tuner(tmp_path, "prior", budget=10)
    try:
        res = tuner.run()
        defaults = [sp.default() for sp in tuner.stages]
        assert not any(t.measurement.ok for t in res.trials[1:4])
        stage0 = [t for t in res.trials[4:] if t.stage == 0]
        assert stage0 and all(t.measurement.key == _program_key(tuner, defaults, t.config)
                              for t in stage0)
        assert res.best is not None and res.best.measurement.ok
    finally:
        tuner.close()


def test_a_stage_modelled_ahead_is_not_modelled_again(monkeypatch):
    """The model's times are kept on the stage's space: its strategy's ranking, when its turn
    comes, reuses what the pick ahead modelled."""
    from cuda_agent.costmodel import model as sim_model
    from cuda_agent.search.prior_rank import model_order, model_pick

    plan, _, _ = plan_of("conv_pool")
    spaces = stage_spaces(plan, Target())
    real, count = sim_model.simulate, [0]

    def counted(*args, **kwargs):
        count[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(sim_model, "simulate", counted)
    pick = model_pick(spaces[1], limit=len(spaces[1].configs))  # every configuration
    modelled = count[0]
    assert modelled >= len(spaces[1].configs)
    staged = StageSpace.of(plan, 1, spaces, [sp.default() for sp in spaces])
    assert model_order(staged)[0] == pick
    assert count[0] - modelled <= len(spaces)  # the fixed stages only
