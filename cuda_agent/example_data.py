"""Where the example suite and the recorded GPU sweeps are, for a command run without --suite,
--replay-root or --out-root: the environment's CUDA_AGENT_SUITE / CUDA_AGENT_REPLAY_ROOT, else
the repository checkout this package runs from (`bash scripts/setup.sh` installs it editable),
never the current directory. A pip-installed package carries neither (the suite and the
sweeps are the repository's, not the wheel's): then a one-line error says how to name them."""

from __future__ import annotations

import os
from pathlib import Path

from .errors import SettingsError

SUITE_ENV = "CUDA_AGENT_SUITE"
SWEEPS_ENV = "CUDA_AGENT_REPLAY_ROOT"
CHECKOUT = Path(__file__).resolve().parents[1]
"""the repository's root when the package runs from a clone"""


def example_suite() -> str:
    """The problems `train` and `bench` take by default: $CUDA_AGENT_SUITE, else the checkout's
    benchmarks/problems."""
    return str(_located(SUITE_ENV, "benchmarks/problems", "--suite", "problem suite"))


def recorded_sweeps() -> Path:
    """The recorded sweeps the replay device reads (and `sweep` writes) by default:
    $CUDA_AGENT_REPLAY_ROOT, else the checkout's benchmarks/data."""
    return _located(SWEEPS_ENV, "benchmarks/data", "--replay-root", "recorded sweeps")


def _located(env: str, in_checkout: str, flag: str, what: str) -> Path:
    if os.environ.get(env):  # the user's word: whether it exists is checked where it is read
        return Path(os.environ[env])
    path = CHECKOUT / in_checkout
    if path.is_dir():
        return path
    raise SettingsError(f"no {what} given: pass {flag} DIR or set {env} (a clone of the "
                        f"cuda-agent repository has them in {in_checkout})")
