"""The ask/tell interface and the strategy registry (STYLE lesson 5: plugins in a registry)."""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from typing import Any, Callable

from ..errors import SettingsError
from ..runner.records import Measurement
from ..space.slots import Config
from ..space.space import Space

STRATEGIES: dict[str, type["Strategy"]] = {}

LAZY: dict[str, str] = {}
"""strategies whose module registers them when imported, by name -> module: the agents' import
torch, which `--help` and a run of another strategy should not wait for"""


def register_lazy(module: str, *names: str) -> None:
    for name in names:
        LAZY[name] = module


DEFAULT = "default"
"""the name of what `tune` runs when no strategy is named: the best strategy on the measured
evidence, with its options (`default.py`); `resolve_strategy` says which it is"""


def strategy_names() -> list[str]:
    """Every strategy `make_strategy` accepts: "default" first, then the registered ones and
    those registered on first use, by name."""
    return [DEFAULT] + sorted(set(STRATEGIES) | set(LAZY))


def resolve_strategy(name: str, budget: int, options: dict[str, Any]
                     ) -> tuple[str, dict[str, Any]]:
    """The strategy `name` runs as and its options: "default" is the best on the evidence
    (`default.default_strategy`), its options under the caller's; any other name is itself."""
    if name != DEFAULT:
        return name, dict(options)
    from .default import default_strategy

    resolved, opts = default_strategy(budget)
    return resolved, {**opts, **options}


def register(name: str) -> Callable[[type["Strategy"]], type["Strategy"]]:
    def deco(cls: type["Strategy"]) -> type["Strategy"]:
        cls.name = name
        STRATEGIES[name] = cls
        return cls
    return deco


class Strategy(ABC):
    """Proposes configurations (`ask`) and learns from their measurements (`tell`).

    A strategy never compiles or runs anything. `ask` may return fewer configurations than
    asked for, and an empty list once it has nothing left to propose.
    """

    name = "strategy"
    adaptive = False
    """True when `ask` depends on what `tell` reported (then batches are not built ahead)"""
    done = False
    """set by a strategy that has nothing more worth proposing (a plateau)"""

    @property
    def ready(self) -> bool:
        """Whether `ask` would answer at once: a strategy still preparing (the agents listing
        a large space in the background) says False, and the tuner measures the defaults
        meanwhile rather than wait for it."""
        return True

    def __init__(self, space: Space, seed: int = 0, **options: Any) -> None:
        self.space = space
        self.seed = seed
        self.options = options
        self.proposed: set[Config] = set()

    @abstractmethod
    def ask(self, n: int) -> list[Config]: ...

    def template_picks(self) -> list[Config] | None:
        """One configuration of each template, measured early (after the untuned default)
        so that no template goes unmeasured, whatever the strategy samples; None: each
        template's own default. A strategy that holds a model of the GPU gives that model's
        fastest of each template (cold-started peers keep the defaults)."""
        return None

    def stage_pick(self, space: Space) -> Config | None:
        """What a later stage of a multi-kernel program runs while an earlier one is searched
        (`space`: that stage's own space); None: its untuned default. A strategy that holds a
        model of the GPU gives that model's fastest (cold-started peers keep the defaults):
        every candidate of a stage is timed as the whole program, and an untuned later stage
        (a training-mode BatchNorm's variance pass, about 9x slower than the model's pick)
        hides what the stage searched now gains."""
        return None

    def tell(self, results: list[tuple[Config, Measurement]]) -> None:
        """Default: nothing to learn."""


def is_agents(name: str) -> bool:
    """True for the learning agents' strategies ("marl" and its ablations, "marl_*"): they take
    a policy checkpoint, and their runs on problems that policy trained on are reported apart."""
    return name == "marl" or name.startswith("marl_")


def make_strategy(name: str, space: Space, seed: int = 0, **options: Any) -> Strategy:
    if name == DEFAULT:
        name, options = resolve_strategy(name, options.pop("budget", 64), options)
    if name in LAZY and name not in STRATEGIES:
        importlib.import_module(LAZY[name])  # registers it ("marl", "marl_*")
    if name not in STRATEGIES:
        raise SettingsError(unknown_strategy(name))
    return STRATEGIES[name](space, seed=seed, **options)


def unknown_strategy(name: str) -> str:
    """The one-line error for a strategy name nobody registered, naming every valid one."""
    return f"--strategy {name!r}: unknown; choose from {', '.join(strategy_names())}"


def nearest(space: Space, wish: dict[str, Any], exclude: set[Config], rng: Any
            ) -> Config | None:
    """The configuration outside `exclude` sharing the most slot values with `wish` (ties
    broken at random): how strategies that propose freely are mapped onto the space."""
    best, best_score, ties = None, -1, 0
    for cfg in space.configs:
        if cfg in exclude:
            continue
        score = sum(cfg.get(k) == v for k, v in wish.items())
        if score > best_score:
            best, best_score, ties = cfg, score, 1
        elif score == best_score:
            ties += 1
            if rng.random() < 1.0 / ties:  # uniform among equals (reservoir sampling)
                best = cfg
    return best


def warm_configs(space: Space, recorded: list[dict[str, Any]], rng: Any) -> list[Config]:
    """Recorded configurations (e.g. a sweep's best, best first) as configurations of `space`:
    upgraded where an older template version recorded them, else the valid configuration
    nearest to them; duplicates dropped. What a search warm-started from a sweep measures first."""
    out: list[Config] = []
    for values in recorded:
        cfg = space.upgrade(values)
        if cfg is None:
            cfg = nearest(space, values, set(out), rng)
        if cfg is not None and cfg not in out:
            out.append(cfg)
    return out
