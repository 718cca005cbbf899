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
Why: out of sample (fold policies that never trained on the problem, the model's constants
fitted without it), the trained policy under the prior needs fewer measurements to 95 % of the
best than the prior's ranking alone, than the same agents untrained and than the warm-started
Optuna and Kernel Tuner, on replay of the recorded H200 sweeps and live on an H100; one agent
over every slot does as well as four, so the split into four agents is kept for its design, not
for a measured gain (BENCHMARKS.md's learning section; the runs: docs/journal.md,
search/default.py). Without the shipped policy (an install that lacks it) the default is the
prior's ranking alone."""

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
