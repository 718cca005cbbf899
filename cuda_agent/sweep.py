"""Sweep: measure a whole space, or a stated random sample of it, and record it for replay."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

from .emit import git_commit
from .errors import SettingsError
from .runner.replay import measurement_record, sweep_path, write_sweep
from .settings import RunSettings
from .tuner import Trial, TuneResult, Tuner
from .problem_child import LoadLimits, load_problem_bounded
from .runner.devices import Device


def sweep_data(r: TuneResult, sampled: bool) -> dict[str, Any]:
    """The sweep file's content for a finished run (see runner/replay.py for the format)."""
    return {"problem": r.problem.name, "source_hash": r.problem.source_hash,
            "fingerprint": r.problem.graph().fingerprint(), "space_version": r.space.version,
            "gpu": r.device.gpu_name(), "device": r.device.kind, "simulated": r.simulated,
            "toolchain": r.toolchain, "target": r.device.target().__dict__,
            "copy_bw": r.device.copy_bandwidth(), "facts": r.facts,
            "baselines": {**r.baselines.fields(), "notes": r.baselines.notes},
            "date": time.strftime("%Y-%m-%d"), "commit": git_commit(), "sampled": sampled,
            "space_size": len(r.space), "wall_s": r.wall_s, "build_stats": r.build_stats,
            # a program's records say which stage's space each belongs to (its search hands
            # a settled stage's share on, so the split is not known beforehand)
            "records": [{**measurement_record(t.config, t.measurement),
                         **({"stage": t.stage} if t.stage is not None else {})}
                        for t in r.trials]}


def sweep_settings(device: str | None = None, sample: int | None = None, seed: int = 0,
                   store: str | None = None, time_limit_s: float | None = None) -> RunSettings:
    """A sweep's run settings: every configuration (exhaustive), or a random sample of
    `sample` that takes the templates in turn (a small one, the library epilogue, is not
    starved); batches of 32; a program's stages split evenly, as replay expects; strict fp32,
    the precision replay serves every sweep at (a sweep file records configurations only)."""
    if sample is not None and sample < 1:
        raise SettingsError("--sample must be at least 1")
    return RunSettings(device=device, strategy="random" if sample else "exhaustive",
                       strategy_options={"stratified": True} if sample else {},
                       budget=sample or 10**9, seed=seed, store=store, batch=32,
                       time_limit_s=time_limit_s, stage_patience=None, precision="fp32")


def sweep_problem(path: str | Path, out_root: Path, device: str | None = None,
                  sample: int | None = None, seed: int = 0, store: str | None = None,
                  notify: Callable[[str], None] = lambda s: None,
                  progress_for: Callable[[Tuner], Callable[[Trial, Trial | None], None]]
                  | None = None,
                  shared_device: Device | None = None,
                  time_limit_s: float | None = None,
                  settings: RunSettings | None = None) -> tuple[TuneResult, Path]:
    """Measure `sample` random configurations (all, when None) of one problem; write the file.

    `settings` (`sweep_settings`, built once by a caller that sweeps several problems) stands
    for `device`, `sample`, `seed`, `store` and `time_limit_s`; `shared_device` lets a
    multi-problem sweep keep one GPU worker instead of one per problem; `progress_for(tuner)`
    makes the per-trial progress callback.
    """
    if settings is None:
        settings = sweep_settings(device, sample, seed, store, time_limit_s)
    tuner = Tuner(load_problem_bounded(path, LoadLimits.of_run(settings)), settings,
                  device=shared_device, notify=notify)
    try:
        if tuner.device.kind == "replay":
            raise SettingsError("sweep needs a measuring device (cuda or sim), not replay")
        # the progress callback is made once the space (and so the total) is known
        result = tuner.run(progress_for(tuner) if progress_for else None)
    finally:
        tuner.close()
    out = sweep_path(result.problem.name, result.device.gpu_name(), out_root)
    write_sweep(out, sweep_data(result, settings.strategy != "exhaustive"))
    return result, out
