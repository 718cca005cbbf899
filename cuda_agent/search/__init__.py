"""Search strategies behind one ask/tell interface; the learning agents are one more of them.

The one list of strategy names: `tune --help`, the error for an unknown name, the README (a test
compares them) and `bench` all read it from here, so a strategy added to the registry shows up
everywhere at once. Importing this package does not import torch (the agents register lazily),
so the CLI checks a name before any work.
"""

from .base import (DEFAULT, STRATEGIES, Strategy, make_strategy, register, register_lazy,
                   resolve_strategy, strategy_names)
from . import (exhaustive, genetic, optuna_tpe, prior_rank,  # noqa: F401  (registration)
               random_search)
from .kernel_tuner_sim import STRATEGIES as _KT

# the learning agents and their ablations (`agents/strategy.py`; imported on first use)
register_lazy("cuda_agent.agents.strategy", "marl", "marl_noprior", "marl_untrained",
              "marl_single")

KERNEL_TUNER = tuple(f"kt:{s}" for s in _KT)
"""Kernel Tuner's own strategies through its real API, started cold (`bench` only: they search
a recorded sweep or ask cuda-agent's runner, outside the ask/tell loop)"""
KERNEL_TUNER_WARM = tuple(f"kt_warm:{s}" for s in _KT)
"""the same, their first measurements the analytic model's top picks"""
BENCH_DEFAULT = ("random", "genetic", "optuna", "marl", "prior") + KERNEL_TUNER + (
    "optuna_warm",) + KERNEL_TUNER_WARM
"""what `bench` compares when no --strategies are named: ours, the model's ranking alone, the
classic peers cold and warm"""
BENCH_ABLATIONS = ("marl_noprior", "marl_untrained", "marl_single")
"""the agents' ablations, run by `bench` only when named"""


def bench_strategy_names() -> list[str]:
    """Every name `bench --strategies` accepts: the ask/tell strategies but "default" (bench
    names what it compares) and "exhaustive" (a sweep, not a search), and Kernel Tuner's."""
    ask_tell = [n for n in strategy_names() if n not in (DEFAULT, "exhaustive")]
    return ask_tell + list(KERNEL_TUNER) + list(KERNEL_TUNER_WARM)


__all__ = ["BENCH_ABLATIONS", "BENCH_DEFAULT", "DEFAULT", "KERNEL_TUNER", "KERNEL_TUNER_WARM",
           "STRATEGIES", "Strategy", "bench_strategy_names", "make_strategy", "register",
           "resolve_strategy", "strategy_names"]
