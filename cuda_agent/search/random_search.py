"""Random search without replacement: the baseline every smarter strategy must beat."""

from __future__ import annotations

import random

from ..space.slots import Config
from .base import Strategy, register


@register("random")
class RandomSearch(Strategy):
    def __init__(self, space, seed: int = 0, **options) -> None:  # noqa: ANN001
        super().__init__(space, seed, **options)
        self.order = list(space.configs)
        random.Random(seed).shuffle(self.order)
        self.pos = 0

    def ask(self, n: int) -> list[Config]:
        out = self.order[self.pos:self.pos + n]
        self.pos += len(out)
        self.proposed.update(out)
        return out
