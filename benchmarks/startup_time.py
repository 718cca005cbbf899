"""Time from `cuda-agent tune` starting to its first measurement, on the simulated device.

Each run is a fresh interpreter running the real command line (`cuda-agent tune PROBLEM --device
sim --budget 8`), timed from just before the process starts to the moment the sim device returns
its first measurement; the process is then stopped. `cold`: private, empty compile cache and
store (a first run on a machine); `warm`: the same command again with what the cold run left
(the compile cache already holds the first batch). `total_s` times the whole command to its
report, cold. Figures are wall-clock seconds on this machine's CPU (no GPU is involved), the
median of `--repeats` runs, with the load average beside them: the machine may be shared.

    python -m benchmarks.startup_time [--root CHECKOUT] [--baseline CHECKOUT]
                                      [--out benchmarks/results/...json]

`--root` times another checkout of cuda-agent with this interpreter; `--baseline` times a second
one (e.g. the commit before a change) in the same run, in turn with the first, for a
before/after comparison under the same load.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import date
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PROBLEMS = ["softmax_short_rows", "norm_layernorm", "gemm_square", "conv2d_standard",
            "pool_max2d"]  # a softmax, a norm, a GEMM, a convolution, a pooling
MARK = "FIRST_MEASUREMENT"

# Runs the command line in the child; the sim device's first evaluate() prints the elapsed time
# since the parent's timestamp and ends the process (its compile processes are ended with it).
CHILD = r"""
import os, sys, time

if __name__ == "__main__":  # (compile processes re-import this file: they do nothing here)
    T0 = float(os.environ["STARTUP_T0"])
    from cuda_agent.runner.sim import SimDevice
    _evaluate = SimDevice.evaluate

    def first(self, *a, **k):
        out = _evaluate(self, *a, **k)
        print(f"{MARK} {time.time() - T0:.3f}", flush=True)
        os._exit(0)

    SimDevice.evaluate = first
    sys.argv = ["cuda-agent", "tune", sys.argv[1], "--device", "sim", "--budget", "8"]
    from cuda_agent.cli import main
    main()
""".replace("MARK", repr(MARK))


def _env(root: Path, home: Path, store: str) -> dict[str, str]:
    # a store of its own for every run: a measurement the store already holds is not taken
    # again (the run would have no first measurement to time); the compile cache is shared
    return dict(os.environ, PYTHONPATH=str(root), CUDA_AGENT_HOME=str(home / store),
                CUDA_AGENT_CACHE=str(home / "cache"), STARTUP_T0=str(time.time()))


def first_measurement(root: Path, problem: Path, home: Path, store: str) -> float:
    """Seconds from starting the command to its first measurement."""
    script, errors = home / "first_measurement.py", home / f"stderr-{store}.txt"
    script.write_text(CHILD)
    with open(errors, "w") as err:
        proc = subprocess.Popen([sys.executable, str(script), str(problem)], cwd=root,
                                env=_env(root, home, store), stdout=subprocess.PIPE, stderr=err,
                                text=True, start_new_session=True)
    # its compile processes hold the pipe open after it exits: read up to the mark, then end
    # the whole session (every process of it was started here); a hang is ended the same way
    timer = threading.Timer(600, os.killpg, (proc.pid, signal.SIGKILL))
    timer.start()
    seconds = None
    try:
        for line in proc.stdout:
            if line.startswith(MARK):
                seconds = float(line.split()[1])
                break
    finally:
        timer.cancel()
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
    if seconds is None:
        tail = errors.read_text().strip().splitlines()[-1:]
        raise RuntimeError(f"{problem.name}: no measurement (exit {proc.returncode}): {tail}")
    return seconds


def whole_run(root: Path, problem: Path, home: Path) -> float:
    """Seconds for the whole command, report written."""
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "cuda_agent.cli", "tune", str(problem), "--device",
                    "sim", "--budget", "8", "--out", str(home / "out")], cwd=root,
                   env=_env(root, home, "store"), check=True, capture_output=True, timeout=900)
    return time.perf_counter() - t0


def commit(root: Path) -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, text=True,
                              capture_output=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def time_once(root: Path, problem: Path, with_total: bool) -> dict[str, float | None]:
    """One cold and one warm first measurement (and, with `with_total`, one whole command)."""
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        out: dict[str, float | None] = {"cold": first_measurement(root, problem, home, "cold"),
                                        "warm": first_measurement(root, problem, home, "warm")}
    out["total"] = None
    if with_total:
        with tempfile.TemporaryDirectory() as tmp:
            out["total"] = whole_run(root, problem, Path(tmp))
    return out


def summary(runs: dict[str, list]) -> dict[str, Any]:
    return {"cold_first_s": statistics.median(runs["cold"]),
            "warm_first_s": statistics.median(runs["warm"]),
            "total_s": statistics.median(runs["total"]) if runs["total"] else None, "runs": runs}


def describe(row: dict[str, Any]) -> str:
    return (f"first measurement cold {row['cold_first_s']:.2f} s, warm {row['warm_first_s']:.2f} s"
            + (f", whole command {row['total_s']:.1f} s" if row["total_s"] else ""))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", type=Path, default=ROOT, help="the cuda-agent checkout to time")
    ap.add_argument("--baseline", type=Path, default=None,
                    help="another checkout, timed in turn with --root (each repeat of each "
                         "problem runs both), so that both see the same load")
    ap.add_argument("--problems", default=",".join(PROBLEMS))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-total", action="store_true", help="skip timing the whole command")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    roots = {"root": args.root.resolve()}
    if args.baseline:
        roots["baseline"] = args.baseline.resolve()
    rows = []
    for name in args.problems.split(","):
        problem = ROOT / "benchmarks" / "problems" / f"{name}.py"
        runs = {key: {"cold": [], "warm": [], "total": []} for key in roots}
        for _ in range(args.repeats):
            for key, root in roots.items():
                for what, seconds in time_once(root, problem, not args.no_total).items():
                    if seconds is not None:
                        runs[key][what].append(seconds)
        row = {"problem": name, **summary(runs["root"]), "load_average": os.getloadavg()[0]}
        if args.baseline:
            row["baseline"] = summary(runs["baseline"])
        rows.append(row)
        print(f"{name:22s} {describe(row)}  (load {row['load_average']:.1f})"
              + (f"\n{'':22s} baseline: {describe(row['baseline'])}" if args.baseline else ""),
              flush=True)
    result = {
        "what": "seconds from starting `cuda-agent tune PROBLEM --device sim --budget 8` to its "
                "first measurement (median of repeats); cold: empty compile cache",
        "device": "sim (simulated H200), CPU only: this development machine, no GPU",
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                    "python": platform.python_version()},
        "date": date.today().isoformat(), "root": str(roots["root"]),
        "commit": commit(roots["root"]), "repeats": args.repeats, "rows": rows}
    if args.baseline:
        result["baseline"] = {"root": str(roots["baseline"]), "commit": commit(roots["baseline"])}
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
