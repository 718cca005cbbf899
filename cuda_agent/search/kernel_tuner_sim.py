"""Kernel Tuner's own strategies on a recorded sweep, through its real API in simulation mode.

The sweep becomes a Kernel Tuner cache file; the tunable parameters are the slots that vary among
the recorded configurations, and a restriction admits exactly the recorded combinations, so
Kernel Tuner searches the same configurations as every other strategy. `tune_kernel` runs with
`simulation_mode=True` (nothing is compiled) and `max_fevals` as the budget; the order in which
it evaluated configurations is what the comparison counts.
"""

from __future__ import annotations

import json
import os
import random
import tempfile
import warnings
from typing import Any

import numpy as np

from ..errors import SettingsError
from ..space.slots import Config

STRATEGIES = ("genetic_algorithm", "bayes_opt", "simulated_annealing", "random_sample")


def _key(values: list[Any]) -> str:
    return ",".join(str(v) for v in values)


def run(records: list[dict[str, Any]], strategy: str, budget: int, seed: int
        ) -> list[tuple[Config, dict[str, Any]]]:
    """Configurations in the order Kernel Tuner evaluated them, with their recorded results."""
    try:
        import kernel_tuner
    except ImportError:
        raise SettingsError("Kernel Tuner strategies need kernel_tuner: "
                            "pip install cuda-agent[tuners]") from None
    configs = [r["config"] for r in records]
    slots = sorted({k for c in configs for k in c})
    varying = [s for s in slots if len({json.dumps(c[s]) for c in configs}) > 1]
    fixed = {s: configs[0][s] for s in slots if s not in varying}
    tune_params: dict[str, list] = {}
    for s in varying:
        vals = []
        for c in configs:
            if c[s] not in vals:
                vals.append(c[s])
        tune_params[s.replace(".", "__")] = vals
    names = list(tune_params)
    by_key: dict[str, dict[str, Any]] = {}
    cache: dict[str, Any] = {}
    for r in records:
        vals = [r["config"][n.replace("__", ".")] for n in names]
        k = _key(vals)
        by_key[k] = r
        entry: dict[str, Any] = dict(zip(names, vals))
        entry.update(compile_time=0.0, verification_time=0.0, benchmark_time=0.0,
                     strategy_time=0.0, framework_time=0.0, timestamp="")
        if r.get("ok") and r.get("time_ms") is not None:
            entry.update(time=float(r["time_ms"]), times=[float(r["time_ms"])])
        else:
            entry["time"] = "RuntimeFailedConfig"
            entry["__error__"] = "RuntimeFailedConfig"
        cache[k] = entry
    recorded = set(by_key)

    def restriction(p: dict[str, Any]) -> bool:
        return _key([p[n] for n in names]) in recorded

    fd, path = tempfile.mkstemp(prefix="cuda-agent-kt-", suffix=".json")
    os.close(fd)
    try:
        with open(path, "w") as f:
            json.dump({"device_name": "replay", "kernel_name": "ca", "problem_size": [1, 1, 1],
                       "tune_params_keys": names, "tune_params": tune_params,
                       "objective": "time", "cache": cache}, f)
        random.seed(seed)
        np.random.seed(seed)
        # Kernel Tuner warns about missing block-size parameters and its strategies' numerics;
        # neither concerns a replayed search, and the warnings would bury the progress output
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            results, _ = kernel_tuner.tune_kernel(
                "ca", "__global__ void ca() {}", (1, 1, 1), [], tune_params, cache=path,
                simulation_mode=True, restrictions=[restriction], strategy=strategy,
                strategy_options={"max_fevals": budget}, quiet=True, verbose=False)
    finally:
        os.unlink(path)
    order: list[tuple[Config, dict[str, Any]]] = []
    seen = set()
    for res in results:
        if res is None:
            continue
        k = _key([res[n] for n in names])
        if k in seen or k not in by_key:
            continue
        seen.add(k)
        cfg = dict(fixed)
        cfg.update({n.replace("__", "."): res[n] for n in names})
        order.append((Config.of(cfg), by_key[k]))
    return order[:budget]
