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
"""the default strategy (see `default_strategy`)"""

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
