"""Search strategies behind one ask/tell interface; the learning agents are one more of them."""

from .base import STRATEGIES, Strategy, make_strategy, register, register_lazy, strategy_names
from . import (exhaustive, genetic, optuna_tpe, prior_rank,  # noqa: F401  (registration)
               random_search)

# the learning agents and their ablations (`agents/strategy.py`; imported on first use)
register_lazy("cuda_agent.agents.strategy", "marl", "marl_noprior", "marl_untrained",
              "marl_single")

__all__ = ["STRATEGIES", "Strategy", "make_strategy", "register", "strategy_names"]
