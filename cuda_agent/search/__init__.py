"""Search strategies behind one ask/tell interface; the learning agents are one more of them."""

from .base import STRATEGIES, Strategy, make_strategy, register
from . import (exhaustive, genetic, optuna_tpe, prior_rank,  # noqa: F401  (registration)
               random_search)

__all__ = ["STRATEGIES", "Strategy", "make_strategy", "register"]
