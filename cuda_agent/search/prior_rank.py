"""The analytic cost model's ranking as a strategy ("prior"): no network, no learning.

It proposes the space's configurations in the order of the model's estimated time
(`costmodel/model.py`, through `agents/prior.simulated_times`), fastest first, skipping what has
been measured. The agents add the same estimate to their policy's scores (`agents/prior.py`);
this is that prior alone: the peer the learning has to beat (issue 34). `model_order` is also
the classic peers' warm start (`WARM_PICKS`: Optuna's enqueued first trials, Kernel Tuner's
first measurements).
"""

from __future__ import annotations

from typing import Any, Iterable

import numpy as np

from ..space.slots import Config
from ..space.space import Space
from .base import Strategy, register

MODELLED = 16384
"""configurations modelled at most (about 10 s on one core); a larger space is modelled on a
seeded sample and the rest follows it in random order"""

WARM_PICKS = 4
"""how many of the model's top picks a warm-started peer measures first: the agents' first
batch of 4 in the bench is their 3 most probable configurations under policy and prior
(`strategy.RANKED_FIRST`) and a fourth drawn under the prior at weight 100, in effect the
model's next pick; a warm peer gets the same first batch"""


def _modelled_rows(n: int, limit: int, rng: np.random.Generator) -> np.ndarray:
    """Which of `n` configurations the model rates: all, or a seeded sample of `limit`."""
    return np.arange(n) if n <= limit else np.sort(rng.choice(n, size=limit, replace=False))


def model_order(space: Space, constants: Any = None, limit: int = MODELLED, seed: int = 0
                ) -> list[Config]:
    """Every configuration of `space`, the model's fastest first (ties in the space's order);
    those it rejects or did not model follow in seeded random order. `constants`: a fold's
    fitted constants (`costmodel/folds.py`; None: the shipped model)."""
    from ..costmodel.predict import simulated_times  # not at import: the CLI's start

    configs = list(space.configs)
    n = len(configs)
    rng = np.random.default_rng(seed)
    rows = _modelled_rows(n, limit, rng)
    times = simulated_times(space, rows, configs, constants)
    ok = np.isfinite(times)
    ranked = rows[ok][np.argsort(times[ok], kind="stable")]
    rest = rng.permutation(np.setdiff1d(np.arange(n), ranked))
    return [configs[int(i)] for i in np.concatenate([ranked, rest])]


PICK_MODELLED = 1024
"""configurations modelled at most for `model_pick` (about 0.5 s on one core): a program's
stages are all picked while its untuned baseline is measured, and modelling more holds a
short search for seconds before its second candidate (docs/journal.md: search/prior_rank.py)"""


def model_pick(space: Space, constants: Any = None, limit: int = PICK_MODELLED
               ) -> Config | None:
    """The model's fastest of `space` (of a seeded sample of `limit` configurations where it
    is larger); None where the model has an estimate for none of them."""
    from ..costmodel.predict import simulated_times  # not at import: the CLI's start

    configs = list(space.configs)
    rows = _modelled_rows(len(configs), limit, np.random.default_rng(0))
    times = simulated_times(space, rows, configs, constants)
    if not np.isfinite(times).any():
        return None
    return configs[int(rows[np.nanargmin(times)])]


def top_picks(space: Space, k: int = WARM_PICKS, constants: Any = None) -> list[Config]:
    """The model's k fastest configurations of `space` (a warm start)."""
    return model_order(space, constants)[:k]


def first_of_each_template(space: Space, ordered: Iterable[Config]) -> list[Config]:
    """The first configuration of each of `space`'s templates in `ordered`, in the space's
    template order."""
    first: dict[str, Config] = {}
    for cfg in ordered:
        first.setdefault(space.template_of(cfg).name, cfg)
        if len(first) == len(space.templates):
            break
    return [first[t.name] for t in space.templates if t.name in first]


@register("prior")
class PriorRanked(Strategy):
    """The model's ranking, best first; deterministic (the seed only orders configurations
    the model has no estimate for)."""

    def __init__(self, space: Space, seed: int = 0, sim_constants: Any = None,
                 **options: Any) -> None:
        super().__init__(space, seed, **options)
        self.constants = sim_constants
        self.order: list[Config] | None = None
        self.pos = 0

    def _ordered(self) -> list[Config]:
        if self.order is None:  # modelled at the first ask: counted as the strategy's time
            self.order = model_order(self.space, self.constants, seed=self.seed)
        return self.order

    def template_picks(self) -> list[Config]:
        return first_of_each_template(self.space, self._ordered())

    def stage_pick(self, space: Space) -> Config | None:
        return model_pick(space, self.constants)

    def ask(self, n: int) -> list[Config]:
        order = self._ordered()
        out: list[Config] = []
        while len(out) < n and self.pos < len(order):
            cfg = order[self.pos]
            self.pos += 1
            if cfg not in self.proposed:
                out.append(cfg)
        self.proposed.update(out)
        return out

    def tell(self, results: list[tuple[Config, Any]]) -> None:
        self.proposed.update(c for c, _ in results)  # the tuner may measure others (defaults)
