"""What `tune` runs when no strategy is named (issue 34, item 5): the strategy the measured
evidence says is best, with its policy shipped inside the package (`cuda_agent/policies/`,
found through importlib.resources, so an installed wheel has it too).

The evidence and the choice are in `DEFAULT`'s comment; BENCHMARKS.md has the figures.
"""

from __future__ import annotations

from importlib.resources import as_file, files
from pathlib import Path
from typing import Any

DEFAULT = "marl"
"""the default strategy: the four agents with the shipped policy and the analytic model's prior.
Why (BENCHMARKS.md, "Does learning beat the cost model alone?", 2026-12-04; REPLAY of the 132
recorded H200 sweeps on a CPU, out of sample: fold policies that never trained on the problem,
the model's constants fitted without it; budget 40, 3 seeds, measurements to 95 % of the
sweep's best): trained policy + prior needed fewer than the prior's ranking alone on 47 problems
and more on 22 (sign test p = 0.0035; mean 4.17 against 4.66), fewer than the same agents
untrained under the prior on 46 and more on 23 (p = 0.0076), and fewer than every warm-started
Optuna and Kernel Tuner strategy. One agent over every slot did as well as four (24/20,
p = 0.65): the split into four agents is kept, not because it measured better. LIVE on an H100
(BENCHMARKS.md, "Learning against the model, live on the GPU", 2026-12-06; 24 held-out problems,
fold policies and constants as above, budget 24, 1 seed): fewer measurements to 95 % of the
run's best than the prior alone on 13 problems, more on 3 (p = 0.021), than the untrained
agents on 11 and more on 2 (p = 0.022); one agent 6/2 (p = 0.29, no significant difference).
Without the shipped policy (an install that lacks it) the default is the prior's ranking
alone."""

POLICY = "h200-replay-prior.pt"
"""the shipped policy (package data): four agents trained on every recorded H200 sweep with
the analytic model's prior in their episodes (`benchmarks/fold_policies.py --all`)"""


def shipped_policy() -> Path | None:
    """The policy that ships with the package, or None when the install lacks it."""
    res = files("cuda_agent") / "policies" / POLICY
    if not res.is_file():
        return None
    with as_file(res) as path:  # a zipped install is extracted; a plain one is the file itself
        return Path(path)


def default_strategy(budget: int, patience: int = 3) -> tuple[str, dict[str, Any]]:
    """(strategy name, its options) for a `tune` that names none."""
    if DEFAULT == "marl":
        policy = shipped_policy()
        if policy is not None:
            return "marl", {"policy": str(policy), "budget": budget, "patience": patience}
        return "prior", {}  # no policy in this install: the model's ranking, which it adds to
    return DEFAULT, {}
