"""The analytic model's time of a space's configurations: what the agents' prior
(`agents/prior.py`) and the model's ranking (`search/prior_rank.py`) both read.

No kernel runs and nothing compiles: each configuration is rendered and modelled (about half a
millisecond each on one core); the times are kept on the space, per set of constants.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..space.program import StageSpace
from ..space.space import Space
from . import model
from .folds import ModelConstants, applied, resolve
from .model import SimConstants

if TYPE_CHECKING:
    from ..space.slots import Config


def simulated_times(space: Space, rows: np.ndarray, configs: list,
                    constants: ModelConstants | str | None = None) -> np.ndarray:
    """The model's time (ms) of each configuration in `rows`; NaN where it rejects one.
    `constants`: a fold's fitted constants (`costmodel/folds.py`; None: the shipped model)."""
    out = np.full(len(rows), np.nan)
    with applied(resolve(constants)) as sim_constants:
        own, others_ms = space, 0.0
        if isinstance(space, StageSpace):
            # a program's time is the sum of its stages' (`model.simulate`), and only this
            # stage's configuration varies: the others are modelled once, not rendered and
            # composed again for each configuration (the whole program's source, for a
            # convolution chain's 6588 configurations 16 s of a 20 s search on the H100's host)
            own = space.spaces[space.stage]
            fixed_ms = _fixed_stages_ms(space, sim_constants)
            if fixed_ms is None:
                return out
            others_ms = fixed_ms
        known = _modelled(own, constants)
        for i, r in enumerate(rows):
            cfg = configs[int(r)]
            if own is not space and "kept" in str(dict(cfg.items).get("memory.layout", "")):
                # a kept channels-last product changes how the other stages read it
                # (`ir/layout.py`): this configuration's program is modelled whole
                out[i] = _model_ms(space, cfg, sim_constants)
                continue
            if cfg not in known:
                known[cfg] = _model_ms(own, cfg, sim_constants)
            out[i] = known[cfg] + others_ms
    return out


def _model_ms(space: Space, cfg: Config, sim_constants: SimConstants | None) -> float:
    """The model's time of one configuration of a single-kernel space; NaN where it rejects
    it or cannot read its template."""
    try:
        res = model.simulate(space.plan, space.render(cfg), None, space.target, sim_constants)
    except Exception:  # noqa: BLE001 - a template the model cannot read: no opinion
        return np.nan
    if res.error_kind or not res.time_ms or not np.isfinite(res.time_ms) or res.time_ms <= 0:
        return np.nan
    return float(res.time_ms)


def _modelled(space: Space, constants: object) -> dict:
    """The model's times already computed for `space`'s configurations under `constants`,
    kept on the space: a program's later stage is ranked once before its turn (its model pick
    runs while the first stage is searched, `Tuner._search_stages`) and again by its own
    strategy, and the model (seconds for a large stage) runs once."""
    key = constants if constants is None or isinstance(constants, str) else (
        str(constants) if not hasattr(constants, "values") else
        tuple(sorted(constants.values.items())))
    cache = space.__dict__.setdefault("_model_ms", {})
    return cache.setdefault(key, {})


def _fixed_stages_ms(space: StageSpace, sim_constants: SimConstants | None) -> float | None:
    """The modelled time of a program's stages other than `space.stage`, at their fixed
    configurations; None where the model rejects one (every candidate of the program fails)."""
    total = 0.0
    for j, (sp, cfg) in enumerate(zip(space.spaces, space.fixed)):
        if j == space.stage:
            continue
        try:
            res = model.simulate(sp.plan, sp.render(cfg), None, sp.target, sim_constants)
        except Exception:  # noqa: BLE001 - as `simulated_times`: no opinion
            return None
        if res.error_kind or not np.isfinite(res.time_ms):
            return None
        total += res.time_ms
    return total
