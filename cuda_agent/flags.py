"""Checks of the commands' flags and the settings they fill, made before any work.

A bad flag costs the user nothing: each command checks every flag here before it loads a
problem, opens a device or prints anything, and a bad one is a one-line `SettingsError` naming
the flag and what it accepts (exit 2). A light module: it imports neither torch nor the tuner,
so the answer comes in a fraction of a second (a `--budget 0` was refused after 15-18 s and the
simulated device's banner, issue 47). The tuner and the bench call the same checks, so the
Python API refuses the same values with the same words.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from .errors import DeviceError, SettingsError
from .search import bench_strategy_names, strategy_names
from .search.base import unknown_strategy
from .verify.settings import parse_tolerance
from .precision import CONTRACTS, PRECISIONS

DEVICES = ("cuda", "sim", "replay")
"""the devices a tuning run can measure on (`tuner.open_device`)"""


def one_of(flag: str, value: str, allowed: Sequence[str]) -> None:
    if value not in allowed:
        raise SettingsError(f"{flag} {value!r}: unknown; choose from {', '.join(allowed)}")


def at_least(flag: str, value: float, least: float) -> None:
    if not value >= least:
        raise SettingsError(f"{flag} must be at least {least:g}, not {value:g}")


def positive(flag: str, value: float | None) -> None:
    """A positive number (None: not given)."""
    if value is not None and not value > 0:  # (NaN is not)
        raise SettingsError(f"{flag} must be positive, not {value:g}")


def seconds_or_none(flag: str, value: float) -> float | None:
    """A limit in seconds where 0 means none: the limit, or None."""
    if not value >= 0:
        raise SettingsError(f"{flag} must be 0 (no limit) or a positive number of seconds, "
                            f"not {value:g}")
    return value or None


def gigabytes(flag: str, value: float | None) -> int | None:
    """A size in GB (10^9 bytes) as bytes; None stays None (the default), 0 means no limit."""
    if value is None:
        return None
    if not value >= 0:
        raise SettingsError(f"{flag} must be 0 (no limit) or a positive number of GB, "
                            f"not {value:g}")
    return int(value * 1e9)


def existing_file(flag: str, path: str | Path | None) -> None:
    if path is not None and not Path(path).is_file():
        what = "a directory, not a file" if Path(path).is_dir() else "no such file"
        raise SettingsError(f"{flag} {path}: {what}")


def existing_dir(flag: str, path: str | Path | None) -> None:
    if path is not None and not Path(path).is_dir():
        what = "a file, not a directory" if Path(path).exists() else "no such directory"
        raise SettingsError(f"{flag} {path}: {what}")


def existing_path(flag: str, path: str | Path) -> None:
    """`flag` "": a command's argument (then the path alone names it)."""
    if not Path(path).exists():
        raise SettingsError(f"{flag} {path}: no such file or directory".lstrip())


def check_suite(suite: str) -> None:
    """`--suite`: a directory of problem files, a file, or comma-separated files."""
    parts = [p for p in suite.split(",") if p] if "," in suite else [suite]
    for part in parts:
        existing_path("--suite", part)
    if len(parts) == 1 and Path(parts[0]).is_dir() and not any(Path(parts[0]).glob("*.py")):
        raise SettingsError(f"--suite {suite}: no problem files (*.py) there")


def check_strategy(name: str) -> None:
    """A name `tune` accepts (`search.strategy_names()`: "default" and every registered one)."""
    if name not in strategy_names():
        raise SettingsError(unknown_strategy(name))


def check_bench_strategies(names: Sequence[str]) -> None:
    known = bench_strategy_names()
    unknown = [s for s in names if s not in known]
    if unknown:
        raise SettingsError(f"--strategies {','.join(unknown)}: unknown; choose from "
                            f"{', '.join(known)}")
    if not names:
        raise SettingsError("--strategies: none named; choose from " + ", ".join(known))


NVIDIA_DRIVER = ("/dev/nvidiactl", "/proc/driver/nvidia")
"""what an NVIDIA driver leaves on a Linux machine: with neither, no CUDA GPU can be used"""


def check_device(name: str | None, allowed: Sequence[str] = DEVICES) -> None:
    """None picks a device later (the GPU when there is one, else the simulator). `cuda` on a
    machine with no NVIDIA driver at all is refused here, before the problem is loaded (a
    driver without a usable GPU is found when the device opens)."""
    if name is not None:
        one_of("--device", name, allowed)
    if name == "cuda" and not any(Path(p).exists() for p in NVIDIA_DRIVER):
        raise DeviceError("--device cuda: no CUDA GPU is available on this machine (no NVIDIA "
                          "driver); use --device sim")


def check_precision(precision: str, device: str | None = None) -> None:
    """An unknown precision, or one the device cannot hold kernels to, is a settings error:
    the recorded sweeps `replay` serves are strict fp32 (there "auto" is strict fp32). A
    resolved contract (`precision.CONTRACTS`) passes too: the settings of a run carry it."""
    if precision not in PRECISIONS and precision not in CONTRACTS:
        raise SettingsError(f"--precision: unknown precision {precision!r}; choose from "
                            f"{', '.join(PRECISIONS)}")
    if device == "replay" and precision not in ("auto", "fp32"):
        raise SettingsError(f"--precision {precision}: the recorded sweeps are strict fp32; "
                            "use --device cuda or sim")


def check_tolerance(tolerance: str, device: str | None = None) -> None:
    """A malformed --tolerance is a settings error, and so is conformance mode on replay: the
    recorded sweeps were verified by the strict protocol."""
    if parse_tolerance(tolerance) is not None and device == "replay":
        raise SettingsError(f"--tolerance {tolerance}: the recorded sweeps were verified by the "
                            "strict protocol; use --device cuda or sim")


def check_tune(*, device: str | None, strategy: str, budget: int, batch: int,
               precision: str, tolerance: str, time_limit_s: float | None,
               compile_timeout_s: float | None, baseline_timeout_s: float) -> None:
    """Everything a tuning run's settings can get wrong on their own (`TuneSettings`' fields;
    the CLI's flags of those names), checked by `tune` before its problem is loaded and by
    the `Tuner` before it opens a device."""
    check_device(device)
    check_strategy(strategy)
    at_least("--budget", budget, 1)
    at_least("--batch", batch, 1)
    check_precision(precision, device)
    check_tolerance(tolerance, device)
    for flag, value in (("--time-limit", time_limit_s),
                        ("--compile-timeout", compile_timeout_s),
                        ("--baseline-timeout", baseline_timeout_s)):
        if value is not None and not value > 0:
            raise SettingsError(f"{flag} must be a positive number of seconds, not {value}")


def check_bench(*, suite: str, device: str | None, strategies: Sequence[str], budget: int,
                seeds: int, parallel: int, policy: str | None, single_policy: str | None,
                sim_constants: str | None, precision: str, tolerance: str,
                problem_seconds: float | None, stage_patience: int | None,
                replay_root: str | None) -> None:
    """Everything a comparison's settings can get wrong on their own (`bench.BenchSettings`'
    fields; `bench`'s flags of those names); `device` None: not known yet (the API's check)."""
    check_suite(suite)
    if device is not None:
        one_of("--device", device, ("replay", "cuda", "sim"))
    check_bench_strategies(strategies)
    at_least("--budget", budget, 1)
    at_least("--seeds", seeds, 1)
    at_least("--parallel", parallel, 1)
    for flag, files in (("--policy", policy), ("--single-policy", single_policy),
                        ("--sim-constants", sim_constants)):
        for f in (files or "").split(","):
            if f:
                existing_file(flag, f)
    if "marl_single" in strategies and not single_policy:
        raise SettingsError("--strategies marl_single needs --single-policy (a single-agent "
                            "checkpoint, e.g. from `cuda-agent train --agents single`)")
    check_precision(precision, device)
    check_tolerance(tolerance, device)
    positive("--problem-seconds", problem_seconds)
    if stage_patience is not None:
        at_least("--stage-patience", stage_patience, 0)
    existing_dir("--replay-root", replay_root)
