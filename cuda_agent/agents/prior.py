"""A shape-aware prior for the agents' proposals: the analytic model's estimate of each
configuration's time on this operator.

Why: the trained policy's first guesses follow the operator's family more than its shape. It
learned from sweeps holding 48 to 200 configurations of each training problem, so for a new
operator it tends to propose what won on the training problem of the same family
(docs/journal.md: agents/prior.py). The simulator (`run/sim_model.py`) reads the
shape directly (rows, row length, strides, tiles against the matrix sizes) and ranks a space's
configurations with a median Spearman correlation of 0.8 to 0.9 against the H200 on most
families (BENCHMARKS.md). Adding its estimate to the policy's log-probabilities

    score(row) = logp_policy(row) + weight * -ln(t_sim(row) / t_sim_best)

makes a configuration `r` times slower in the model `r**weight` times less likely, whatever the
policy's confidence. The policy's own log-probabilities (those PPO's ratios use) are unchanged:
the prior is a per-configuration constant of the operator, so it cancels between the behaviour
and the updated policy like the normaliser does (`decode.py`).

No kernel runs and nothing compiles: each configuration is rendered and modelled (about half a
millisecond each on one core). A space larger than `pool` is modelled on a pool: the policy's
most probable half of it and a seeded random sample for the rest; configurations outside the
pool get the pool's median, so the prior neither favours nor rules them out.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..space.program import StageSpace
from ..space.space import Space

if TYPE_CHECKING:
    from ..run.sim_folds import ModelConstants

POOL = 4096
"""configurations modelled at most per operator (about 2 s)"""

FLOOR = -6.0
"""the prior's lowest value (a configuration the model rates 400x slower than its best, or one
it rejects, e.g. too much shared memory): bounded so that a wrong model cannot rule a
configuration out for good"""


def simulated_times(space: Space, rows: np.ndarray, configs: list,
                    constants: "ModelConstants | str | None" = None) -> np.ndarray:
    """The model's time (ms) of each configuration in `rows`; NaN where it rejects one.
    `constants`: a fold's fitted constants (`run/sim_folds.py`; None: the shipped model)."""
    from ..run.sim_folds import applied, resolve

    out = np.full(len(rows), np.nan)
    with applied(resolve(constants)) as sim_constants:
        own, others_ms = space, 0.0
        if isinstance(space, StageSpace):
            # a program's time is the sum of its stages' (`sim_model.simulate`), and only this
            # stage's configuration varies: the others are modelled once, not rendered and
            # composed again for each configuration (the whole program's source, for a
            # convolution chain's 6588 configurations 16 s of a 20 s search on the H100's host)
            own = space.spaces[space.stage]
            others_ms = _fixed_stages_ms(space, sim_constants)
            if others_ms is None:
                return out
        known = _modelled(own, constants)
        for i, r in enumerate(rows):
            cfg = configs[int(r)]
            if cfg not in known:
                known[cfg] = _model_ms(own, cfg, sim_constants)
            out[i] = known[cfg] + others_ms
    return out


def _model_ms(space: Space, cfg: object, sim_constants: object) -> float:
    """The model's time of one configuration of a single-kernel space; NaN where it rejects
    it or cannot read its template."""
    from ..run.sim_model import simulate

    try:
        res = simulate(space.plan, space.render(cfg), None, space.target, sim_constants)
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


def _fixed_stages_ms(space: StageSpace, sim_constants: object) -> float | None:
    """The modelled time of a program's stages other than `space.stage`, at their fixed
    configurations; None where the model rejects one (every candidate of the program fails)."""
    from ..run.sim_model import simulate

    total = 0.0
    for j, (sp, cfg) in enumerate(zip(space.spaces, space.fixed)):
        if j == space.stage:
            continue
        try:
            res = simulate(sp.plan, sp.render(cfg), None, sp.target, sim_constants)
        except Exception:  # noqa: BLE001 - as `simulated_times`: no opinion
            return None
        if res.error_kind or not np.isfinite(res.time_ms):
            return None
        total += res.time_ms
    return total


def sim_prior(space: Space, configs: list, policy_logp: np.ndarray | None = None,
              pool: int | None = None, seed: int = 0,
              constants: "ModelConstants | str | None" = None) -> np.ndarray:
    """Per configuration (in the order of `configs`), -ln(t_sim / t_sim_best), at least
    `FLOOR`; 0 for the model's fastest. A space larger than `pool` (default `POOL`) is modelled
    on a pool, half of it picked by `policy_logp` (same order). All zeros when the model has
    no estimate for any of them. `constants`: as `simulated_times`."""
    pool = POOL if pool is None else pool
    n = len(configs)
    prior = np.zeros(n)
    if n == 0:
        return prior
    if n <= pool:
        rows = np.arange(n)
    else:
        rng = np.random.default_rng(seed)
        top = (np.argsort(-policy_logp, kind="stable")[:pool // 2] if policy_logp is not None
               else np.zeros(0, dtype=np.int64))
        rest = np.setdiff1d(np.arange(n), top)
        rows = np.concatenate([top, rng.choice(rest, size=pool - len(top), replace=False)])
    times = simulated_times(space, rows, configs, constants)
    ok = np.isfinite(times)
    if not ok.any():
        return prior
    value = np.full(len(rows), FLOOR)
    value[ok] = np.maximum(FLOOR, -np.log(times[ok] / times[ok].min()))
    if len(rows) < n:
        prior[:] = float(np.median(value))
    prior[rows] = value
    return prior
