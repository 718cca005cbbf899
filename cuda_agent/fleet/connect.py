"""Joining a Ray cluster for a run, or starting a local one, and leaving it as found."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from ..errors import HostError, SettingsError

MODES = ("auto", "local")
"""besides a cluster's address: `auto` joins a running cluster (RAY_ADDRESS, or one `ray start`
left on this machine) and starts a local one where there is none; `local` always starts one"""


def require_ray() -> Any:
    """The `ray` module, or a one-line error saying how to install it."""
    try:
        import ray
    except ImportError:
        raise SettingsError("--ray needs Ray: pip install 'cuda-agent[cluster]'") from None
    return ray


@dataclass
class Connection:
    ray: Any
    started: bool
    """this run started Ray (a local instance): it stops it when it leaves"""
    joined: bool
    """this run connected (Ray was not initialised in this process before): it disconnects"""

    def close(self) -> None:
        if self.joined:
            self.ray.shutdown()


def connect(address: str, local_cpus: int) -> Connection:
    """Join the cluster `address` names (see `MODES`). A process already connected (a test's
    cluster, a notebook) is used as it is and left connected. `local_cpus`: the logical CPUs of
    a local instance started here (samplers and compile tasks are scheduled on them)."""
    ray = require_ray()
    if ray.is_initialized():
        return Connection(ray, started=False, joined=False)
    quiet = {"logging_level": "WARNING", "log_to_driver": True}
    if address not in MODES:
        try:
            ray.init(address=address, **quiet)
        except (ConnectionError, ValueError, RuntimeError) as exc:
            raise HostError(f"--ray {address}: cannot join the cluster "
                            f"({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})"
                            ) from None
        return Connection(ray, started=False, joined=True)
    if address == "auto":
        try:
            ray.init(address="auto", **quiet)
            return Connection(ray, started=False, joined=True)
        except ConnectionError:
            pass  # none running: a local one
    ray.init(address="local", num_cpus=max(local_cpus, os.cpu_count() or 1),
             include_dashboard=False, **quiet)
    return Connection(ray, started=True, joined=True)
