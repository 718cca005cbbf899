"""The search loop (`search.engine.Engine`) on made-up candidates: nothing is compiled, each
configuration's time is a function of it. Shared by test_engine and test_bench_live."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from cuda_agent.runner.devices import Candidate
from cuda_agent.runner.records import Measurement
from cuda_agent.search.engine import Engine
from cuda_agent.search.stop import StopRule
from cuda_agent.space.slots import Config


@dataclass
class Rec:
    config: Config
    measurement: Measurement


def candidates(configs: list[Config], cut: set[Config] = frozenset()) -> list[Candidate]:
    return [Candidate(c.key(), c, None, None,
                      build_error=("cut", "the time limit came") if c in cut else None)
            for c in configs]


def loop(proposer: Any, time_of: Callable[[Config], float | None], budget: int | None = None,
         rule: StopRule | None = None, batch: int = 4, on_measured: list | None = None,
         cut: set[Config] = frozenset()) -> tuple[Engine, str]:
    """(the engine, why it stopped) after running `proposer` to its end."""
    def measure(cand: Candidate) -> Rec:
        t = time_of(cand.config)
        m = (Measurement(cand.key, "sim", True, time_ms=t) if t is not None
             else Measurement.failure(cand.key, "sim", "cuda", "failed"))
        return Rec(cand.config, m)

    engine = Engine(proposer, lambda cs: candidates(cs, cut), measure,
                    rule or StopRule(budget), batch, on_measured or [])
    return engine, engine.run()
