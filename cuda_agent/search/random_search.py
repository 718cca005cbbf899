"""Random search without replacement: the baseline every smarter strategy must beat."""

from __future__ import annotations

import random

from ..space.slots import Config
from .base import Strategy, register


@register("random")
class RandomSearch(Strategy):
    """Uniform over the configurations; with `stratified=True`, over the templates first (each
    template's configurations shuffled, then taken in turn), so a sample of a space where one
    template has thousands of configurations and another a dozen still covers both (sweeps).

    The uniform search draws each configuration as it is asked for (`Space.draw`), without
    listing the space: enumerating a row space walks a million raw combinations (seconds)
    before the first measurement. Once draws stop finding new members (the space nearly
    exhausted), the rest of the space is listed and shuffled. The sequence depends only on the
    space and the seed."""

    def __init__(self, space, seed: int = 0, stratified: bool = False,  # noqa: ANN001
                 **options) -> None:
        super().__init__(space, seed, **options)
        self.rng = random.Random(seed)
        self.order: list[Config] | None = None
        """what is left, shuffled, once drawing has given way to the list (None: drawing)"""
        if stratified:
            by_template: dict[str, list[Config]] = {}
            for c in space.configs:
                by_template.setdefault(space.template_of(c).name, []).append(c)
            queues = [by_template[t] for t in sorted(by_template)]
            for q in queues:
                self.rng.shuffle(q)
            self.order = [q[i] for i in range(max(map(len, queues), default=0))
                          for q in queues if i < len(q)]
        elif space.subset:  # a recorded subset (replay) is a list already
            self.order = list(space.configs)
            self.rng.shuffle(self.order)
        self.pos = 0

    def ask(self, n: int) -> list[Config]:
        if self.order is not None:
            out = self.order[self.pos:self.pos + n]
            self.pos += len(out)
            self.proposed.update(out)
            return out
        out = []
        while len(out) < n:
            cfg = self.space.draw(self.rng, self.proposed)
            if cfg is None:
                self.order = [c for c in self.space.configs if c not in self.proposed]
                self.rng.shuffle(self.order)
                return out + self.ask(n - len(out))
            self.proposed.add(cfg)
            out.append(cfg)
        return out
