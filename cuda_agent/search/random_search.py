"""Random search without replacement: the baseline every smarter strategy must beat."""

from __future__ import annotations

import random

from ..space.slots import Config
from .base import Strategy, register


@register("random")
class RandomSearch(Strategy):
    """Uniform over the configurations; with `stratified=True`, over the templates first (each
    template's configurations shuffled, then taken in turn), so a sample of a space where one
    template has thousands of configurations and another a dozen still covers both (sweeps)."""

    def __init__(self, space, seed: int = 0, stratified: bool = False,  # noqa: ANN001
                 **options) -> None:
        super().__init__(space, seed, **options)
        rng = random.Random(seed)
        if stratified:
            by_template: dict[str, list[Config]] = {}
            for c in space.configs:
                by_template.setdefault(space.template_of(c).name, []).append(c)
            queues = [by_template[t] for t in sorted(by_template)]
            for q in queues:
                rng.shuffle(q)
            self.order = [q[i] for i in range(max(map(len, queues), default=0))
                          for q in queues if i < len(q)]
        else:
            self.order = list(space.configs)
            rng.shuffle(self.order)
        self.pos = 0

    def ask(self, n: int) -> list[Config]:
        out = self.order[self.pos:self.pos + n]
        self.pos += len(out)
        self.proposed.update(out)
        return out
