"""Recorded sweeps: the file format written by `cuda-agent sweep`, and the replay device that
serves them, so strategies and learning can be compared on real GPU data on any CPU (as Kernel
Tuner's simulation mode does).

A sweep file is gzipped JSON under ``benchmarks/data/<gpu-slug>/<problem>.json.gz``:
``{"format": 1, "problem", "source_hash", "fingerprint", "space_version", "gpu", "toolchain",
"target": {...}, "copy_bw", "baselines": {...}, "date", "commit", "sampled": bool,
"space_size", "records": [{"config": {...}, "ok", "time_ms", "spread_ms", "error_kind",
"verified", "counters"}]}``. The baselines are `runner/baselines.Baselines.fields()`; a sweep
recorded before the baselines at PyTorch's defaults has only "eager_ms" and "compile_ms", which
are matched figures.
"""

from __future__ import annotations

import gzip
import io
import json
import re
from dataclasses import asdict
from pathlib import Path
from typing import Any

from .. import tempfiles
from ..errors import DeviceError
from ..example_data import recorded_sweeps
from ..ir.plan import KernelPlan
from ..problem import Problem
from ..space.slots import Config, Target
from .baselines import Baselines, read_record, with_matched
from .devices import Candidate, Device
from .records import Measurement

FORMAT = 1


def gpu_slug(gpu: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", gpu.lower()).strip("-") or "gpu"


def sweep_path(problem_name: str, gpu: str, root: Path | None = None) -> Path:
    return (root or recorded_sweeps()) / gpu_slug(gpu) / f"{problem_name}.json.gz"


def write_sweep(path: Path, data: dict[str, Any]) -> None:
    """Write atomically: a half-written sweep must never be read as a whole one."""
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0) as f:
        f.write(json.dumps({"format": FORMAT, **data}, sort_keys=True).encode())
    tempfiles.write_atomic(path, buf.getvalue())


def read_sweep(path: Path) -> dict[str, Any]:
    try:
        with gzip.open(path, "rb") as f:
            data = json.loads(f.read())
    except (OSError, json.JSONDecodeError) as exc:
        raise DeviceError(f"{path}: not a readable sweep file ({exc})") from None
    if data.get("format") != FORMAT:
        raise DeviceError(f"{path}: sweep format {data.get('format')} (expected {FORMAT})")
    return data


def find_sweep(problem: Problem, root: Path | None = None, gpu: str | None = None) -> Path:
    """The recorded sweep for `problem` (by name), on `gpu` or the only GPU recorded."""
    base = root or recorded_sweeps()
    candidates = sorted(base.glob(f"*/{problem.name}.json.gz")) if base.exists() else []
    if gpu:
        candidates = [c for c in candidates if c.parent.name == gpu_slug(gpu)]
    if not candidates:
        raise DeviceError(f"no recorded sweep for {problem.name} under {base} "
                          "(record one on a GPU with `cuda-agent sweep`)")
    return candidates[0]


class ReplayDevice(Device):
    """Serves measurements recorded on a real GPU; a configuration not recorded is a failure of
    kind ``not_recorded`` (it costs a measurement like any other)."""

    kind = "replay"

    def __init__(self, root: Path | None = None, gpu: str | None = None,
                 path: Path | None = None) -> None:
        self.root, self.gpu, self.path = root, gpu, path
        self.data: dict[str, Any] = {}
        self.table: dict[str, dict[str, Any]] = {}
        self._cache: dict[Path, dict[str, Any]] = {}
        self._tables: dict[tuple, dict[str, dict[str, Any]]] = {}
        self._key: tuple = ()

    def setup(self, problem: Problem, plan: KernelPlan) -> None:
        path = self.path or find_sweep(problem, self.root, self.gpu)
        if path not in self._cache:
            self._cache[path] = read_sweep(path)
        self.data = self._cache[path]
        if self.data.get("fingerprint") != problem.graph().fingerprint():
            raise DeviceError(f"{path}: recorded for a different computation or shape than "
                              f"{problem.path}")
        self._key = (problem.source_hash, problem.graph().fingerprint())
        # a table already read through the space (upgraded keys) is reused when the device
        # comes back to this problem
        self.table = self._tables.get(self._key) or {
            Config.of(r["config"]).key(): r for r in self.data["records"]}
        # a sweep recorded on the simulator replays as simulated figures, labelled as such
        self.simulated = bool(self.data.get("simulated"))

    def target(self) -> Target:
        t = self.data.get("target")
        return Target(**t) if t else Target()

    def gpu_name(self) -> str:
        return str(self.data.get("gpu", "unknown GPU")) + " (replayed)"

    def toolchain(self) -> str:
        return str(self.data.get("toolchain", "unknown"))

    def facts(self) -> dict[str, Any]:
        return {"gpu": self.gpu_name(), "device": "replay", "recorded_on": self.data.get("gpu"),
                "recorded_date": self.data.get("date"), "copy_bw": self.data.get("copy_bw"),
                # the cuDNN mode the recorded candidates ran in (absent before it was recorded:
                # the heuristics)
                "cudnn_benchmark": bool((self.data.get("facts") or {}).get("cudnn_benchmark"))}

    def copy_bandwidth(self) -> float | None:
        return self.data.get("copy_bw")

    def recorded_configs(self, space: Any = None) -> list[Config]:
        """The recorded configurations, read as configurations of `space` (older template
        versions upgraded: see `Space.upgrade`); the lookup table follows the same keys."""
        if space is None:
            return [Config.of(r["config"]) for r in self.data["records"]]
        table, out = {}, []
        for r in self.data["records"]:
            cfg = space.upgrade(r["config"])
            if cfg is not None and cfg.key() not in table:
                table[cfg.key()] = r
                out.append(cfg)
        self.table = table
        self._tables[self._key] = table
        return out

    def best_recorded_ms(self) -> float | None:
        times = [r["time_ms"] for r in self.table.values() if r.get("ok") and r.get("time_ms")]
        return min(times) if times else None

    def evaluate(self, cand: Candidate, best_ms: float | None = None) -> Measurement:
        rec = self.table.get(cand.config.key())
        if rec is None:
            return Measurement.failure(cand.key, "replay", "not_recorded",
                                       "configuration not in the recorded sweep")
        if not rec.get("ok"):
            m = Measurement.failure(cand.key, "replay", rec.get("error_kind") or "cuda",
                                    rec.get("error_msg") or "recorded failure")
            m.verified = rec.get("verified")
            return m
        return Measurement(cand.key, "replay", True, rec["time_ms"], rec.get("spread_ms"),
                           rec.get("samples", 0), rec.get("verified"), self.simulated,
                           counters=dict(rec.get("counters") or {}))

    def baselines(self, which: tuple[str, ...] = with_matched(("eager", "compile"))
                  ) -> Baselines:
        # a sweep recorded before baselines at PyTorch's defaults has matched figures only
        # (`read_record`): the defaults stay unknown rather than taken from them
        out = read_record(self.data.get("baselines") or {})
        out.notes = {w: "replayed from the sweep's GPU run" for w in which}
        return out


def measurement_record(config: Config, m: Measurement) -> dict[str, Any]:
    d = asdict(m)
    keep = ("ok", "time_ms", "spread_ms", "samples", "verified", "error_kind", "error_msg",
            "counters", "max_rel_err")
    return {"config": config.as_dict(), **{k: d[k] for k in keep}}
