"""Search strategies (ask/tell) and the tuning loop that drives them."""

from __future__ import annotations

import itertools
import random
import zlib
from functools import lru_cache

import pytest

from helpers import GOOD
from cuda_agent.errors import SettingsError
from cuda_agent.ir.planning import make_plan
from cuda_agent.problem import load_problem
from cuda_agent.runner.devices import Candidate, Device
from cuda_agent.runner.records import Measurement
from cuda_agent.search import STRATEGIES, Strategy, make_strategy, register
from cuda_agent.space.slots import Target
from cuda_agent.space.space import Space
from cuda_agent.tuner import TuneSettings, Tuner


@lru_cache(maxsize=None)
def space(name: str = "relu_small") -> Space:
    return Space.for_plan(make_plan(load_problem(GOOD / f"{name}.py").graph()), Target())


def drain(strategy: Strategy, step: int) -> list:
    out = []
    while True:
        got = strategy.ask(step)
        assert len(got) <= step
        if not got:
            return out
        out.extend(got)


def test_registry_has_the_baselines():
    assert {"random", "exhaustive"} <= set(STRATEGIES)


@pytest.mark.parametrize("step", [1, 7, 64])
def test_random_never_repeats_and_covers_the_space(step):
    sp = space()
    s = make_strategy("random", sp, seed=3)
    seen = drain(s, step)
    assert len(seen) == len(set(seen)) == len(sp)
    assert set(seen) == set(sp.configs)
    assert s.ask(5) == []
    assert s.proposed == set(sp.configs)


def test_random_depends_on_seed_only():
    sp = space()
    a = make_strategy("random", sp, seed=1).ask(30)
    b = make_strategy("random", sp, seed=1).ask(30)
    c = make_strategy("random", sp, seed=2).ask(30)
    assert a == b and a != c
    assert a != sp.configs[:30]  # actually shuffled


def _counting_enumeration(monkeypatch) -> list[int]:
    """Counts the configurations `Space` enumerates from now on."""
    listed = [0]
    enumerate_template = Space._template_configs

    def counting(self, t):
        for cfg in enumerate_template(self, t):
            listed[0] += 1
            yield cfg
    monkeypatch.setattr(Space, "_template_configs", counting)
    return listed


def test_random_search_draws_without_listing_the_space(monkeypatch):
    """Listing a row space walks a million raw slot combinations (seconds before the first
    measurement): the random search draws its configurations one by one instead, each a
    member of the space."""
    sp = Space.for_plan(make_plan(load_problem(GOOD / "softmax_small.py").graph()), Target())
    listed = _counting_enumeration(monkeypatch)
    s = make_strategy("random", sp, seed=5)
    got = s.ask(16) + s.ask(16)
    assert listed[0] == 0 and "configs" not in vars(sp)
    assert len(set(got)) == 32 and got == make_strategy("random", sp, seed=5).ask(32)
    assert all(sp.check(c) is None for c in got)  # members (checked without the list)


def test_tuning_measures_without_listing_the_space(monkeypatch):
    """The tuning loop up to its last measurement (defaults first, then the random search)
    lists nothing: at most the first configuration of a template is enumerated, to learn
    that it has one (`Space.for_plan`) and where its default is not valid here."""
    listed = _counting_enumeration(monkeypatch)
    t = Tuner(load_problem(GOOD / "softmax_small.py"), TuneSettings(device="sim", budget=20,
              batch=8, strategy="random"), device=FakeDevice(), builder=FakeBuilder())
    try:
        res = t.run()
    finally:
        t.close()
    assert len(res.trials) == 20 and res.trials[0].config == t.space.default()
    assert listed[0] <= 2 * len(t.space.templates) and "configs" not in vars(t.space)


@pytest.mark.parametrize("name", ["relu_small", "softmax_small"])
def test_membership_without_listing_agrees_with_the_list(name):
    """`Space.contains` (a configuration is a member iff it is valid and its own canonical
    form) holds for every listed configuration, and not for raw combinations that canonical()
    folds onto another one (every template and problem: test_compile_all, slow)."""
    sp = space(name)
    fresh = Space(sp.plan, sp.target, sp.templates)
    assert all(fresh.contains(c) for c in sp.configs) and "configs" not in vars(fresh)
    rng = random.Random(name)
    members, outside = set(sp.configs), 0
    for _ in range(3000):  # raw combinations drawn at random, as Space.draw does
        t = rng.choice(sp.templates)
        raw = {s.name: rng.choice(s.choices) for s in t.slots(sp.plan, sp.target)}
        cfg = fresh._full(t, raw)
        assert fresh.contains(cfg) == (cfg in members), cfg.short()
        outside += cfg not in members
    assert outside > 100


@pytest.mark.parametrize("path", [GOOD / "softmax_small.py",
                                  GOOD.parents[2] / "benchmarks/problems/loss_mse.py",
                                  GOOD.parents[2] / "benchmarks/problems/softmax_long_rows.py",
                                  GOOD.parents[2] / "benchmarks/problems/gemm_matvec.py"],
                         ids=lambda p: p.stem)
def test_prefixes_enumeration_skips_hold_no_valid_configuration(path):
    """`Template.prefix_excluded` only speeds enumeration up: under every head of slot values
    it skips, no completion is valid (sampled), and the heads it keeps are not all invalid
    (the row template on a problem too large for one-row-per-block launches has none)."""
    from cuda_agent.space.templates import TEMPLATES

    plan = make_plan(load_problem(path).graph())
    rng, target = random.Random(path.stem), Target()
    for t in (t for t in TEMPLATES if t.applies(plan) and t.prefix_slots):
        own = t.slots(plan, target)
        heads, tails = own[:t.prefix_slots], own[t.prefix_slots:]
        skipped = 0
        for values in itertools.product(*(s.choices for s in heads)):
            head = {s.name: v for s, v in zip(heads, values)}
            if not t.prefix_excluded(plan, head, target):
                continue
            skipped += 1
            for _ in range(40):
                raw = {**head, **{s.name: rng.choice(s.choices) for s in tails}}
                assert t.excluded(raw) or t.check(plan, t.canonical(plan, raw, target),
                                                  target) is not None, raw
        assert skipped, t.name


def test_exhaustive_follows_space_order():
    sp = space()
    s = make_strategy("exhaustive", sp)
    assert s.ask(10) == sp.configs[:10]
    assert s.ask(5) == sp.configs[10:15]
    rest = drain(s, 333)
    assert rest == sp.configs[15:]
    assert s.ask(1) == []


def test_unknown_strategy_is_a_settings_error():
    with pytest.raises(SettingsError, match="bogus"):
        make_strategy("bogus", space())


def test_unknown_strategy_rejected_by_the_tuner():
    prob = load_problem(GOOD / "relu_small.py")
    with pytest.raises(SettingsError, match="choose from"):
        Tuner(prob, TuneSettings(device="sim", strategy="nope"))


@pytest.mark.parametrize("kw,word", [({"budget": 0}, "budget"), ({"batch": 0}, "batch"),
                                     ({"device": "tpu"}, "device")])
def test_bad_settings_rejected(kw, word):
    prob = load_problem(GOOD / "relu_small.py")
    with pytest.raises(SettingsError, match=word):
        Tuner(prob, TuneSettings(**{"device": "sim", **kw}))


def test_space_sample_excludes():
    sp = space()
    rng = random.Random(0)
    first = sp.sample(100, rng)
    assert len(set(first)) == 100
    more = sp.sample(len(sp), rng, exclude=set(first))
    assert len(more) == len(sp) - 100 and not set(more) & set(first)


# -- the loop, on a fake device (no compiler, no GPU) ---------------------------------------------

class FakeBuilder:
    """Builds nothing: each candidate gets a fake binary path, one in `broken` fails."""

    toolchain = "fake-1"

    def __init__(self, broken=frozenset()):
        self.broken = broken
        self.stats = {"compiled": 0}
        self.sources = []

    def build(self, inputs, deadline=None):
        from cuda_agent.build.builder import BuildResult
        out = []
        for i in inputs:
            self.stats["compiled"] += 1
            self.sources.append(i.source)
            bad = any(b in i.source for b in self.broken)
            out.append(BuildResult("k", None if bad else "/nonexistent.cubin",
                                   "compile" if bad else None, "boom" if bad else None))
        return out

    def close(self):
        pass


class FakeDevice(Device):
    """Deterministic times from the configuration; counts evaluations."""

    kind = "sim"
    simulated = True

    def __init__(self):
        self.evaluated = []

    def target(self):
        return Target()

    def gpu_name(self):
        return "fake"

    def setup(self, problem, plan):
        self.plan = plan

    def evaluate(self, cand: Candidate, best_ms=None) -> Measurement:
        self.evaluated.append(cand.config)
        t = 1.0 + (zlib.crc32(cand.config.key().encode()) % 1000) / 100.0
        return Measurement(cand.key, "sim", True, t, 0.0, 1, None, True)


@pytest.mark.parametrize("strategy", ["random", "exhaustive"])
def test_tuner_respects_budget_and_never_repeats(strategy):
    prob = load_problem(GOOD / "relu_small.py")
    dev = FakeDevice()
    t = Tuner(prob, TuneSettings(device="sim", strategy=strategy, budget=37, batch=8),
              device=dev, builder=FakeBuilder())
    try:
        res = t.run()
    finally:
        t.close()
    assert len(res.trials) == 37 == len(dev.evaluated)
    assert len(set(dev.evaluated)) == 37
    assert res.trials[0].config == t.space.default() and res.default is res.trials[0]
    assert [tr.index for tr in res.trials] == list(range(1, 38))
    best = min(res.trials, key=lambda tr: tr.measurement.time_ms)
    assert res.best.measurement.time_ms == best.measurement.time_ms
    if strategy == "exhaustive":
        # the default comes first, then the space in order (skipping the default)
        rest = [c for c in t.space.configs if c != t.space.default()]
        assert [tr.config for tr in res.trials[1:]] == rest[:36]


def test_the_first_measurement_does_not_wait_for_the_whole_first_batch():
    """The untuned default is built alone and measured while the next batch (the model's
    picks, then the strategy's proposals) is asked for and compiled: the first measurement
    waits for one compile, not for the model nor a batch of compiles."""
    import threading

    measured = threading.Event()
    sizes, overlapped = [], []

    class SlowBuilder(FakeBuilder):
        def build(self, inputs, deadline=None):
            sizes.append(len(inputs))
            if len(sizes) == 2:  # the next batch: is the default measured meanwhile?
                overlapped.append(measured.wait(timeout=5))
            return super().build(inputs, deadline)

    class SignallingDevice(FakeDevice):
        def evaluate(self, cand, best_ms=None):
            measured.set()
            return super().evaluate(cand, best_ms)

    t = Tuner(load_problem(GOOD / "relu_small.py"), TuneSettings(device="sim", budget=20,
              batch=8, strategy="random"), device=SignallingDevice(), builder=SlowBuilder())
    try:
        res = t.run()
    finally:
        t.close()
    assert sizes == [1, 8, 8, 3] and overlapped == [True]
    assert res.trials[0].config == t.space.default() and len(res.trials) == 20


def test_the_agents_list_their_space_while_the_default_is_measured(monkeypatch):
    """The agents' index lists the whole space (seconds for a large one): it is listed in the
    background, and the untuned default is measured meanwhile, not after it."""
    import threading

    from cuda_agent.agents.vocab import SpaceIndex

    measured = threading.Event()
    listing = SpaceIndex.of

    def slow_listing(space):
        assert measured.wait(timeout=30), "the default waited for the space's listing"
        return listing(space)

    class SignallingDevice(FakeDevice):
        def evaluate(self, cand, best_ms=None):
            measured.set()
            return super().evaluate(cand, best_ms)

    monkeypatch.setattr(SpaceIndex, "of", staticmethod(slow_listing))
    t = Tuner(load_problem(GOOD / "relu_small.py"), TuneSettings(
        device="sim", strategy="marl", budget=6, batch=4), device=SignallingDevice(),
        builder=FakeBuilder())
    try:
        res = t.run()
    finally:
        t.close()
    assert res.trials[0].config == t.space.default() and len(res.trials) == 6
    assert len({tr.config for tr in res.trials}) == 6


def test_tuner_budget_larger_than_space_stops_at_the_space():
    prob = load_problem(GOOD / "relu_small.py")
    dev = FakeDevice()
    t = Tuner(prob, TuneSettings(device="sim", strategy="exhaustive", budget=10**6, batch=512),
              device=dev, builder=FakeBuilder())
    try:
        res = t.run()
    finally:
        t.close()
    assert len(res.trials) == len(t.space) == len(set(dev.evaluated))


def test_compile_failures_are_recorded_not_raised():
    prob = load_problem(GOOD / "relu_small.py")
    dev = FakeDevice()
    builder = FakeBuilder(broken={"__launch_bounds__(64)"})  # every block=64 candidate fails
    t = Tuner(prob, TuneSettings(device="sim", strategy="exhaustive", budget=300, batch=50),
              device=dev, builder=builder)
    try:
        res = t.run()
    finally:
        t.close()
    failed = [tr for tr in res.trials if not tr.measurement.ok]
    assert failed and all(tr.measurement.error_kind == "compile" for tr in failed)
    assert all(tr.config["config.block"] == 64 for tr in failed)
    assert len(res.trials) == 300
    assert len(dev.evaluated) == 300 - len(failed)  # failed builds never reach the device
    assert res.best is not None and res.best.measurement.ok


def test_custom_strategy_plugs_in():
    @register("first_two_test")
    class FirstTwo(Strategy):
        def ask(self, n):
            out = [c for c in self.space.configs[:2] if c not in self.proposed][:n]
            self.proposed.update(out)
            return out

    try:
        prob = load_problem(GOOD / "relu_small.py")
        dev = FakeDevice()
        t = Tuner(prob, TuneSettings(device="sim", strategy="first_two_test", budget=10,
                                     include_default=False), device=dev, builder=FakeBuilder())
        try:
            res = t.run()
        finally:
            t.close()
        assert [tr.config for tr in res.trials] == t.space.configs[:2]
    finally:
        STRATEGIES.pop("first_two_test", None)


def test_tell_receives_every_measurement():
    told = []

    @register("recording_test")
    class Recording(Strategy):
        adaptive = True

        def __init__(self, space, seed=0, **kw):
            super().__init__(space, seed, **kw)
            self.pos = 0

        def ask(self, n):
            out = self.space.configs[self.pos:self.pos + n]
            self.pos += len(out)
            return out

        def tell(self, results):
            told.extend(results)

    try:
        prob = load_problem(GOOD / "relu_small.py")
        t = Tuner(prob, TuneSettings(device="sim", strategy="recording_test", budget=20,
                                     batch=6), device=FakeDevice(), builder=FakeBuilder())
        try:
            res = t.run()
        finally:
            t.close()
        assert len(told) == 20
        assert [c for c, _ in told] == [tr.config for tr in res.trials]
        assert all(isinstance(m, Measurement) for _, m in told)
    finally:
        STRATEGIES.pop("recording_test", None)


def test_evals_to_fraction_counts_to_the_first_near_best():
    prob = load_problem(GOOD / "relu_small.py")
    t = Tuner(prob, TuneSettings(device="sim", strategy="random", budget=25, batch=5),
              device=FakeDevice(), builder=FakeBuilder())
    try:
        res = t.run()
    finally:
        t.close()
    times = [tr.measurement.time_ms for tr in res.trials]
    best = min(times)
    want = next(k for k in range(1, 26) if min(times[:k]) <= best / 0.95)
    assert res.evals_to_fraction(0.95) == want
    assert res.evals_to_fraction(1.0) == times.index(best) + 1
    assert res.evals_to_fraction(0.95, best_ms=best / 100) is None  # never reached


def test_stratified_random_sample_covers_every_template():
    """A sweep's sample of a matmul with an epilogue: thousands of SIMT GEMM configurations,
    hundreds of tensor-core ones and a handful of library-epilogue ones; taking templates in
    turn reaches all three in a small sample."""
    import torch

    from helpers import Fn
    from cuda_agent.ir.capture import capture
    from cuda_agent.search.random_search import RandomSearch
    from cuda_agent.space.slots import Target
    from cuda_agent.space.space import Space

    graph = capture(Fn, [lambda x, w: torch.relu(x @ w)],
                    lambda: [torch.randn(64, 128), torch.randn(128, 64)])
    plan = make_plan(graph)
    sp = Space.for_plan(plan, Target())
    names = lambda cs: [sp.template_of(c).name for c in cs]  # noqa: E731
    counts = {t: names(sp.configs).count(t) for t in set(names(sp.configs))}
    assert counts["lib"] < 30 < counts["gemm_tc"] < counts["gemm"]
    picked = RandomSearch(sp, seed=1, stratified=True).ask(21)
    assert all(names(picked).count(t) == 7 for t in counts) and len(set(picked)) == 21
    uniform = RandomSearch(sp, seed=1).ask(20)
    assert names(uniform).count("lib") < 5
    # one small template's configurations, or the first few, without listing the rest
    fresh = Space(sp.plan, sp.target, sp.templates)
    for t in ("lib", "gemm_tc"):
        assert fresh.configs_of(t) == [c for c in sp.configs if sp.template_of(c).name == t]
    assert list(itertools.islice(fresh.iter_configs(), 5)) == sp.configs[:5]
    assert "configs" not in vars(fresh)


def test_genetic_warm_start_measures_the_recorded_best_first():
    sp = space()
    picks = [sp.configs[7], sp.configs[3], sp.configs[7]]  # a duplicate is measured once
    recorded = [c.as_dict() for c in picks]
    stale = dict(recorded[1])
    first_slot = sp.slots[-1].name
    stale.pop(first_slot)  # recorded before this slot existed: mapped to the nearest config
    g = make_strategy("genetic", sp, seed=1, initial=recorded[:2] + [stale] + recorded[2:])
    got = g.ask(4)
    assert got[:2] == [picks[0], picks[1]]
    assert len(set(got)) == len(got) == 4  # then mapped / random members, never repeats
    assert all(c in sp.index for c in got)


def test_genetic_warm_start_ignores_nothing_else():
    sp = space()
    plain = make_strategy("genetic", sp, seed=5)
    warm = make_strategy("genetic", sp, seed=5, initial=[])
    assert plain.ask(6) == warm.ask(6)


def test_a_gpu_set_up_is_announced_before_the_search():
    """A large problem's set-up takes a minute on the GPU: the CLI says when it is done, what it
    took and what it holds, instead of nothing until the search's first result."""
    from cuda_agent.runner.sim import SimDevice
    from cuda_agent.store import Store
    from cuda_agent.tuner import setup_notice

    class GpuLike(SimDevice):  # the simulator, announcing itself as a GPU
        kind = "cuda"

        def facts(self):
            return {"memory": {"peak_bytes": 3 << 30, "eager_peak_bytes": 2 << 30,
                               "bound_bytes": 4 << 30, "verification": "chunked",
                               "chunk": "5 of 32 along output dim 1"}}

    lines: list[str] = []
    Tuner(load_problem(GOOD / "softmax_small.py"), TuneSettings(device="sim", budget=2,
                                                                strategy="random"),
          device=GpuLike(), store=Store(":memory:"), on_setup=lines.append)
    assert len(lines) == 1 and lines[0].startswith("softmax_small: set up on the GPU in ")
    assert "bound 4.00 GiB" in lines[0] and "chunked (5 of 32" in lines[0]
    silent: list[str] = []  # the simulator's own runs say nothing
    Tuner(load_problem(GOOD / "softmax_small.py"), TuneSettings(device="sim", budget=2,
                                                                strategy="random"),
          device=SimDevice(), store=Store(":memory:"), on_setup=silent.append)
    assert silent == []
    assert setup_notice("p", None, None) == "p: set up on the GPU; searching"


def test_a_space_is_true_without_being_counted(monkeypatch):
    """`space or other` used to count every raw combination of the space (its `__len__`):
    seconds for a row space at the end of every tune."""
    from cuda_agent.space.space import Space

    sp = Space.for_plan(make_plan(load_problem(GOOD / "softmax_small.py").graph()), Target())

    def counted(*a, **k):
        raise AssertionError("the space was counted")

    monkeypatch.setattr(Space, "_valid_raw", counted)
    assert sp and (sp or None) is sp
