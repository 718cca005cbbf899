"""A genetic algorithm over configurations: tournament selection, uniform crossover by slot,
per-slot mutation, and repair onto the space (the child is mapped to the valid configuration
sharing the most slot values with it, so every proposal is measurable).

`initial` (configurations as dicts, e.g. a recorded sweep's best) warm-starts it: they are the
first generation, measured again in this run, before any random member."""

from __future__ import annotations

import random

from ..runner.records import Measurement
from ..space.slots import Config
from .base import Strategy, nearest, register, warm_configs


@register("genetic")
class Genetic(Strategy):
    adaptive = True

    def __init__(self, space, seed: int = 0, population: int = 16, mutation: float = 0.15,
                 initial: list[dict] | None = None, **options) -> None:  # noqa: ANN001
        super().__init__(space, seed, **options)
        self.rng = random.Random(seed)
        self.initial = warm_configs(space, initial or [], self.rng)
        self.population = population
        self.mutation = mutation
        self.scored: dict[Config, float] = {}  # measured configs and their fitness (time)
        self.slots = [s for s in space.slots if len(s.choices) > 1]

    def _tournament(self, k: int = 3) -> Config:
        pool = self.rng.sample(list(self.scored), min(k, len(self.scored)))
        return min(pool, key=self.scored.__getitem__)

    def ask(self, n: int) -> list[Config]:
        out: list[Config] = []
        fresh = [c for c in self.space.configs if c not in self.proposed]
        while len(out) < n and fresh:
            ok = [c for c, t in self.scored.items() if t != float("inf")]
            seeds = [c for c in self.initial if c not in self.proposed]
            if seeds:
                cfg = seeds[0]
            elif len(ok) < 2 or len(self.scored) < self.population:
                cfg = self.rng.choice(fresh)  # the first generation is random
            else:
                a, b = self._tournament().as_dict(), self._tournament().as_dict()
                child = {k: (a[k] if self.rng.random() < 0.5 else b[k]) for k in a}
                for s in self.slots:
                    if self.rng.random() < self.mutation:
                        child[s.name] = self.rng.choice(s.choices)
                near = nearest(self.space, child, self.proposed, self.rng)
                if near is None:
                    break
                cfg = near
            self.proposed.add(cfg)
            fresh = [c for c in fresh if c != cfg]
            out.append(cfg)
        return out

    def tell(self, results: list[tuple[Config, Measurement]]) -> None:
        for cfg, m in results:
            self.proposed.add(cfg)
            self.scored[cfg] = m.time_ms if m.ok and m.time_ms is not None else float("inf")
