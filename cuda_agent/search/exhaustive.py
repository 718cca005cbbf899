"""Exhaustive search: every valid configuration in the space's order (the sweep's strategy)."""

from __future__ import annotations

from ..space.slots import Config
from .base import Strategy, register


@register("exhaustive")
class Exhaustive(Strategy):
    def __init__(self, space, seed: int = 0, **options) -> None:  # noqa: ANN001
        super().__init__(space, seed, **options)
        self.pos = 0

    def ask(self, n: int) -> list[Config]:
        out = self.space.configs[self.pos:self.pos + n]
        self.pos += len(out)
        self.proposed.update(out)
        return out
