"""Which configuration of each template a search measures right after the untuned default
(`Strategy.template_picks`): the model's fastest of each for a strategy that holds the model
(the agents under their prior, the model's ranking), each template's own default for the
cold-started peers. A time-limited search measures little beyond these (a 16 GiB BatchNorm's
statistics: 3 candidates in 20 s on the H100)."""

from __future__ import annotations

import numpy as np
import pytest

from cuda_agent.costmodel.predict import simulated_times
from cuda_agent.ir.planning import make_plan
from cuda_agent.problem import load_problem
from cuda_agent.search.prior_rank import first_of_each_template, model_order
from cuda_agent.space.slots import Target
from cuda_agent.space.space import Space
from cuda_agent.tuner import tune
from helpers import write_problem

BATCH_NORM = "F.batch_norm(x, None, None, training=True)"


@pytest.fixture
def few_long_channels(tmp_path):
    return write_problem(tmp_path / "p", "bn", BATCH_NORM, "torch.randn(16, 8, 512, 512)")


def _space(path) -> Space:
    return Space.for_plan(make_plan(load_problem(path).graph()), Target())


def test_a_model_strategy_measures_the_model_s_fastest_of_each_template(few_long_channels,
                                                                       tmp_path):
    space = _space(few_long_channels)
    picks = first_of_each_template(space, model_order(space))
    assert [space.template_of(c).name for c in picks] == ["chan", "split"]
    assert picks != space.template_defaults()  # the model's picks are not the defaults
    r = tune(few_long_channels, device="sim", budget=4, batch=4, strategy="prior",
             store=str(tmp_path / "s.sqlite"))
    assert r.trials[0].config == space.default()
    assert [t.config for t in r.trials[1:3]] == [c for c in picks if c != space.default()][:2]


def test_the_agents_under_their_prior_measure_the_model_s_picks(few_long_channels, tmp_path):
    r = tune(few_long_channels, device="sim", budget=4, batch=4, strategy="marl",
             store=str(tmp_path / "s.sqlite"))
    space = _space(few_long_channels)
    configs = list(space.configs)
    times = simulated_times(space, np.arange(len(configs)), configs)
    fastest = {}
    for c, ms in zip(configs, times):
        name = space.template_of(c).name
        fastest[name] = min(fastest.get(name, np.inf), ms)
    # after the untuned default: each template's configuration the model rates fastest (of
    # equals, any)
    for t in r.trials[1:3]:
        ms = times[configs.index(t.config)]
        assert ms == pytest.approx(fastest[t.template], rel=1e-9), t.template
    assert {t.template for t in r.trials[1:3]} == {"chan", "split"}


def test_a_cold_peer_measures_each_template_s_default(few_long_channels, tmp_path):
    r = tune(few_long_channels, device="sim", budget=4, batch=4, strategy="random",
             store=str(tmp_path / "s.sqlite"))
    space = _space(few_long_channels)
    assert [t.config for t in r.trials[:2]] == [space.default()] + [
        c for c in space.template_defaults() if c != space.default()]


def test_the_picks_are_modelled_while_the_untuned_default_is_measured(few_long_channels,
                                                                       tmp_path, monkeypatch):
    """The model's ranking (seconds on a large stage) runs beside the untuned default's
    measurement, not before it: here the picks wait until the default is measured (before
    the change they were asked for first, and this waited out its timeout). The default is
    a batch of its own and the picks come next, as before."""
    import threading

    from cuda_agent.runner.sim import SimDevice
    from cuda_agent.search.prior_rank import PriorRanked

    measured = threading.Event()
    waited: list[bool] = []
    picks, evaluate = PriorRanked.template_picks, SimDevice.evaluate

    def slow_picks(self):
        waited.append(measured.wait(timeout=10))
        return picks(self)

    def signalling(self, cand, best_ms=None):
        out = evaluate(self, cand, best_ms)
        measured.set()
        return out

    monkeypatch.setattr(PriorRanked, "template_picks", slow_picks)
    monkeypatch.setattr(SimDevice, "evaluate", signalling)
    r = tune(few_long_channels, device="sim", budget=4, batch=4, strategy="prior",
             store=str(tmp_path / "s.sqlite"))
    space = _space(few_long_channels)
    assert waited == [True]
    assert r.trials[0].config == space.default()
    want = [c for c in first_of_each_template(space, model_order(space))
            if c != space.default()][:2]
    assert [t.config for t in r.trials[1:3]] == want
    assert r.timing["strategy_ahead_s"] > 0


def test_a_time_limit_does_not_wait_for_the_model_s_picks(few_long_channels, tmp_path,
                                                          monkeypatch):
    """Picks that take longer than the whole time limit: the search ends at the limit with
    the untuned default measured (the picks were waited for, past the limit, before)."""
    import time

    from cuda_agent.search.prior_rank import PriorRanked

    release = __import__("threading").Event()
    picks = PriorRanked.template_picks

    def stalled_picks(self):
        release.wait(timeout=60)
        return picks(self)

    monkeypatch.setattr(PriorRanked, "template_picks", stalled_picks)
    # loaded first: the limit counts from tune's start, and on a loaded 2-core machine the
    # problem's child process alone once took the 3 s, leaving no time for the default
    from cuda_agent.problem_child import load_problem_bounded

    problem = load_problem_bounded(few_long_channels)
    t0 = time.monotonic()
    try:
        r = tune(problem, device="sim", budget=8, batch=4, strategy="prior",
                 time_limit_s=3.0, store=str(tmp_path / "s.sqlite"))
    finally:
        release.set()
    assert time.monotonic() - t0 < 30
    assert r.stopped == "time_limit" and len(r.trials) == 1
    assert r.best is not None and r.trials[0].config == _space(few_long_channels).default()
