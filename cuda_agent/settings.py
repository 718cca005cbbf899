"""The run's settings: one frozen object, built once from the CLI's flags or the Python API's
arguments, and passed everywhere a run goes (tune, bench and its live runs, train).

A part of a run that needs other values derives them with `dataclasses.replace` (bench's
per-strategy runs: `bench.strategy_settings`), never by copying fields one by one, so nothing
the user set is dropped on the way; reports record the object whole (`RunSettings.record`).
Light to import (no torch): the CLI builds it before anything heavy is loaded.
"""

from __future__ import annotations

import json
import dataclasses
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Callable, TypeVar, cast

from .limits import (BASELINE_TIMEOUT_S, COMPILE_TIMEOUT_S, IMPORT_TIMEOUT_S, STAGE_PATIENCE,
                     TIME_LIMIT_S)
from .verify.settings import STRICT


@dataclass(frozen=True)
class RunSettings:
    """Everything a run takes besides the problem: built once (by the CLI's command or the
    Python API) and passed down whole; a part of the run that needs other values (a bench's
    strategy run, a training operator's measurer) takes a `dataclasses.replace` of it."""

    device: str | None = None
    """cuda, sim or replay; None picks cuda when a GPU is present, else sim"""
    strategy: str = "default"
    """search strategy name (`cuda_agent.search.strategy_names()`); "default", as
    `cuda-agent tune`: the best on the measured evidence, with its shipped policy
    (`search/default.py`)"""
    budget: int = 64
    """configurations to evaluate (failures count: each costs a measurement)"""
    batch: int = 16
    """configurations asked for and built together"""
    seed: int = 0
    store: str | None = None
    """SQLite file; None keeps records in memory only"""
    compiler: str = "nvrtc"
    workers: int | None = None
    """compile processes (default: one per CPU core)"""
    baselines: bool = True
    """time torch eager and torch.compile in the same run (cuda and replay only)"""
    include_default: bool = True
    """always measure the untuned default configuration first (then each other template's
    default)"""
    replay_root: str | None = None
    profile_every: int = 0
    """on cuda, profile every n-th verified candidate with Nsight Compute (0: never)"""
    time_limit_s: float | None = TIME_LIMIT_S
    """seconds the run may take from its start (`tune()`'s call, the CLI's command, else the
    `Tuner`'s creation: loading the problem and the set-up count; None: no limit): then
    compiles in flight are stopped, the strategy is no longer waited for, nothing more is
    measured, and the run returns the best found so far (`TuneResult.stopped` is
    "time_limit"); the budget still caps. The baselines after the search are bounded apart
    (`baseline_timeout_s`)"""
    compile_timeout_s: float | None = COMPILE_TIMEOUT_S
    """seconds one candidate's compile may take before it is stopped and the candidate recorded
    as a `compile_timeout` (None: no limit)"""
    baseline_timeout_s: float = BASELINE_TIMEOUT_S
    """on cuda, seconds each baseline (torch eager, torch.compile) may take; one that runs over
    is stopped and reported as not measured, with the reason"""
    strategy_options: dict[str, Any] = field(default_factory=dict)
    stage_patience: int | None = STAGE_PATIENCE
    """a multi-kernel program: measurements a stage may go without progress before it hands
    the rest of its share to the next (`space/program.StagePlateau`); None: never (an even
    split, as sweeps sample each stage)"""
    precision: str = "auto"
    """auto: each product at the precision the user's torch gives it (`precision.py`: by
    default convolutions on TF32, as cudnn.allow_tf32 lets them, matrix products strict fp32,
    as float32_matmul_precision "highest" keeps them), verified against torch's own answer
    under those flags; resolved to a contract when the run starts (`precision_asked` keeps
    "auto"); fp32: every kernel held to strict fp32 accuracy (tensor cores only
    error-compensated); tf32: the user opts into TF32 tensor-core products (convolutions and
    matrix products, the library's cuDNN and cuBLAS steps included), verified against torch's
    own TF32 answer;
    fp16, bf16: products on operands rounded to that type with fp32 accumulation, verified
    against torch under autocast in that dtype. Eager and torch.compile are timed twice: at
    PyTorch's defaults (the headline: a user's process) and matched to this contract (TF32 on,
    or under autocast, like for like)"""
    precision_asked: str | None = None
    """the precision the user asked for where `precision` holds what it resolved to ("auto");
    None: `precision` is what was asked"""
    tolerance: str = STRICT
    """strict: the strict protocol (float64 reference, relative bounds); kernelbench or
    atol=A,rtol=R: conformance mode, a candidate passes where torch.allclose(out, ref, atol,
    rtol) holds against the module in fp32 at PyTorch's default settings, as the field's
    common harness (KernelBench, atol=rtol=1e-2) checks (`verify/cases.py`)"""
    import_timeout_s: float | None = IMPORT_TIMEOUT_S
    """seconds the problem file's import and capture may take, in a child process (None: no
    limit; a shorter `time_limit_s` bounds it too): past it, a `ProblemError`"""
    import_memory_bytes: int | None = None
    """host memory the problem file's import and capture may take (None: half of what is
    available when it starts; 0: no limit): past it, a `ProblemError`"""

    def record(self) -> dict[str, Any]:
        """The settings whole, as JSON can hold them (a report's "settings"): a strategy
        option that is an object (a policy passed in memory) is written as its repr."""
        out = asdict(self)
        out["strategy_options"] = {k: v if _jsonable(v) else repr(v)
                                   for k, v in self.strategy_options.items()}
        return out


def _jsonable(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


Holder = TypeVar("Holder")


def with_run_fields(cls: Callable[..., Holder], base: RunSettings, fields: dict[str, Any]
                    ) -> Holder:
    """`cls(**fields)` where the names that are `RunSettings`' (and not `cls`'s own) go into
    its `run`, `base` with them replaced: the Python API's shorthand of the settings that hold
    a run's (``BenchSettings.of(suite="p.py", budget=12, device="sim")``)."""
    own = {f.name for f in dataclasses.fields(cast(Any, cls))}  # a dataclass of `run`
    run_names = {f.name for f in dataclasses.fields(RunSettings)} - own
    run = {k: fields.pop(k) for k in list(fields) if k in run_names}
    return cls(**fields, run=replace(base, **run))
