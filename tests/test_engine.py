"""The one search loop (`cuda_agent/search/engine.py`): why it stops (only through `StopRule`,
or a proposer with nothing left), the order of its callbacks, Ctrl-C; and that every search of
the package goes through it."""

from __future__ import annotations

import ast
import functools
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from cuda_agent import interrupt
from cuda_agent.search.engine import Listed
from cuda_agent.search.stop import StopRule
from cuda_agent.space.program import StagePlateau
from cuda_agent.space.slots import Config
from engine_loop import loop

PACKAGE = Path(__file__).resolve().parents[1] / "cuda_agent"


def cfg(i: int) -> Config:
    return Config.of({"config.block": i})


class Counting:
    """Proposes 0, 1, 2, ... (`limit` of them), records what it was told; `done_after`
    tells: it says it has plateaued."""

    adaptive = False
    ask_in_background = False

    def __init__(self, limit: int = 100, done_after: int | None = None,
                 adaptive: bool = False) -> None:
        self.next, self.limit, self.done_after = 0, limit, done_after
        self.adaptive = adaptive
        self.told: list[list[tuple[Config, object]]] = []
        self.events: list[str] = []

    @property
    def done(self) -> bool:
        return self.done_after is not None and len(self.told) >= self.done_after

    def ask(self, n: int, clock: str = "strategy_s") -> list[Config]:
        out = [cfg(i) for i in range(self.next, min(self.next + n, self.limit))]
        self.next += len(out)
        self.events.append(f"ask {len(out)}")
        return out

    def tell(self, results: list) -> None:
        self.told.append(results)
        self.events.append(f"tell {len(results)}")


def speed(c: Config) -> float:
    return 10.0 - c["config.block"] * 0.1


def test_the_budget_stops_it_at_exactly_the_budget():
    p = Counting()
    engine, why = loop(p, speed, budget=10, batch=4)
    assert why == "budget" and len(engine.measured) == 10
    assert [len(b) for b in p.told] == [4, 4, 2]


def test_a_proposer_with_nothing_left_ends_it_as_space():
    p = Counting(limit=6)
    engine, why = loop(p, speed, budget=10, batch=4)
    assert why == "space" and len(engine.measured) == 6


def test_a_proposer_that_plateaus_ends_it_after_that_batch():
    p = Counting(done_after=2)
    engine, why = loop(p, speed, budget=100, batch=3)
    assert why == "plateau" and len(engine.measured) == 6


def test_a_settled_stage_ends_it_at_the_measurement_that_settles_it():
    # every time the same: no progress on the best so far (1.0) after 3 measurements
    plateau = StagePlateau(1.0, 3)
    p = Counting()
    engine, why = loop(p, lambda c: 5.0, rule=StopRule(100, plateau=plateau), batch=4)
    assert why == "plateau" and len(engine.measured) == 3
    assert [len(b) for b in p.told] == [3]  # the cut batch's measurements are told


def test_the_time_limit_stops_it_before_the_next_measurement(monkeypatch):
    from cuda_agent.search import stop

    clock = [1000.0]  # each measurement takes one second of the rule's clock
    monkeypatch.setattr(stop, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    rule = StopRule(100, deadline=1000.0 + 2.5)

    def slow(c: Config) -> float:
        clock[0] += 1.0
        return 1.0

    engine, why = loop(Counting(), slow, rule=rule, batch=4)
    assert why == "time_limit" and len(engine.measured) == 3


def test_a_past_time_limit_measures_nothing():
    engine, why = loop(Counting(), speed, rule=StopRule(100, deadline=time.monotonic() - 1))
    assert why == "time_limit" and engine.measured == []


def test_a_candidate_the_time_limit_cut_is_not_measured():
    engine, why = loop(Counting(), speed, budget=10, batch=4, cut={cfg(2)})
    assert why == "time_limit" and [r.config for r in engine.measured] == [cfg(0), cfg(1)]


def test_ctrl_c_raises_at_the_next_measurement(monkeypatch):
    seen: list[Config] = []

    def stop_after_two(rec) -> None:
        seen.append(rec.config)
        if len(seen) == 2:
            interrupt.STOP.set()

    try:
        with pytest.raises(KeyboardInterrupt):
            loop(Counting(), speed, budget=10, on_measured=[stop_after_two])
    finally:
        interrupt.STOP.clear()
    assert seen == [cfg(0), cfg(1)]


@pytest.mark.parametrize("adaptive", [False, True])
def test_callbacks_run_in_order_on_each_measurement_before_the_tell(adaptive):
    p = Counting(adaptive=adaptive)
    events = p.events
    loop(p, speed, budget=5, batch=2, on_measured=[
        lambda r: events.append(f"first {r.config['config.block']}"),
        lambda r: events.append(f"second {r.config['config.block']}")])
    measured = [e for e in events if e.startswith(("first", "second"))]
    assert measured == [f"{w} {i}" for i in range(5) for w in ("first", "second")]
    # each batch's callbacks come before its tell; a non-adaptive proposer is asked for the
    # next batch while this one is measured, an adaptive one after the tell
    first_tell = events.index("tell 2")
    assert events[first_tell - 2:first_tell] == ["first 1", "second 1"]
    if adaptive:
        assert events[:2] == ["ask 2", "first 0"] and events[first_tell + 1] == "ask 2"
    else:
        assert events[:3] == ["ask 2", "ask 2", "first 0"]
        assert events[first_tell + 1] == "ask 1"  # the third batch, while the second runs


def test_a_listed_batch_is_measured_in_order():
    engine, why = loop(Listed([cfg(3), cfg(1), cfg(2)]), speed, batch=3)
    assert [r.config for r in engine.measured] == [cfg(3), cfg(1), cfg(2)] and why == "space"


# -- every search goes through the loop -------------------------------------------------------

@functools.lru_cache(maxsize=None)
def _package_calls() -> tuple[tuple[str, str | None, str | None], ...]:
    """Every call in the package: (module, the attribute called or None, the bare name called
    or None), parsed once (parsing the package for each `_calls` was 30 CPU-s)."""
    out = []
    for path in PACKAGE.rglob("*.py"):
        key = str(path.relative_to(PACKAGE))
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                f = node.func
                out.append((key, f.attr, None) if isinstance(f, ast.Attribute) else
                           (key, None, getattr(f, "id", None)))
    return tuple(out)


def _calls(attr: str, bare: bool = True) -> dict[str, int]:
    """Modules of the package calling `<something>.<attr>(...)` (or, with `bare`,
    `<attr>(...)`), and how often."""
    found: dict[str, int] = {}
    for key, called_attr, called_name in _package_calls():
        name = called_attr if called_attr is not None else called_name if bare else None
        if name == attr:
            found[key] = found.get(key, 0) + 1
    return found


def test_only_the_loop_measures_and_only_proposers_ask_and_tell():
    """A search loop written anew elsewhere would call the measurer, or a strategy's or an
    episode's ask/tell, itself: the tuner measures only inside `Tuner.engine`'s loop, a
    strategy is asked and told only by the proposers the loop drives, an episode proposes and
    observes only in training's proposer, Kernel Tuner's live search runs only under the
    adapter, and the loop is built only by the tuner."""
    assert _calls("Engine") == {"tuner.py": 1}
    assert _calls("_measurement") == {"tuner.py": 1}  # in `Tuner.engine`
    assert _calls("_evaluate") == {"tuner.py": 1}  # in `Tuner._measurement`
    # the strategies' own asks (the agents' proposer asks its episode; Optuna its study) are
    # inside search/ and agents/strategy.py; outside, only the proposers
    asks = {k: v for k, v in _calls("ask", bare=False).items()
            if not k.startswith(("search/", "agents/strategy.py"))}
    assert asks == {"tuner.py": 1}, asks  # `StrategyProposer.ask`
    assert {k: v for k, v in _calls("tell", bare=False).items()
            if not k.startswith(("search/", "agents/strategy.py"))} == {"tuner.py": 1}
    assert _calls("propose").get("agents/train.py") == 1  # `EpisodeProposer.ask`
    assert _calls("observe").get("agents/train.py") == 1  # `EpisodeProposer.tell`
    assert _calls("run_live") == {"search/kernel_tuner_ask.py": 1,
                                  "search/kernel_tuner_sim.py": 1}  # the two drivers
