"""A shape-aware prior for the agents' proposals: the analytic model's estimate of each
configuration's time on this operator.

Why: the trained policy's first guesses follow the operator's family more than its shape. It
learned from sweeps holding 48 to 200 configurations of each training problem, so for a new
operator it tends to propose what won on the training problem of the same family
(docs/journal.md: agents/prior.py). The simulator (`costmodel/model.py`) reads the
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

import numpy as np

from ..costmodel.folds import ModelConstants
from ..costmodel.predict import simulated_times
from ..space.space import Space

POOL = 4096
"""configurations modelled at most per operator (about 2 s)"""

FLOOR = -6.0
"""the prior's lowest value (a configuration the model rates 400x slower than its best, or one
it rejects, e.g. too much shared memory): bounded so that a wrong model cannot rule a
configuration out for good"""


def sim_prior(space: Space, configs: list, policy_logp: np.ndarray | None = None,
              pool: int | None = None, seed: int = 0,
              constants: ModelConstants | str | None = None) -> np.ndarray:
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
