"""What a measurement produces. Failures are records with a kind, never exceptions (STYLE 2)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# Every kind a failed candidate can be recorded with, and what it means.
ERROR_KINDS = {
    "compile": "the compiler rejected the source",
    "compile_timeout": "the compile ran past its timeout and was stopped (a source too big or "
                       "too unrolled to compile in time)",
    "compile_crash": "the compiler's process died on this source, twice",
    "resources": "the launch asked for more threads, registers or shared memory than the GPU has",
    "launch": "the driver refused the launch for another reason",
    "illegal_address": "the kernel accessed memory it does not own",
    "misaligned": "the kernel made a misaligned access",
    "timeout": "the kernel did not finish in time (hang or hopelessly slow)",
    "slow": "abandoned before verification: one run took many times the best time so far",
    "crash": "the worker process died",
    "unwritten": "the kernel left output elements unwritten (NaN poison survived)",
    "wrong": "the output differs from the reference",
    "nan": "the output holds NaN or Inf where the reference is finite",
    "mutated_input": "the kernel modified one of its inputs",
    "degenerate": "the checks could not tell the output from a trivial one",
    "timing_floor": "measured faster than the physical floor: a measurement error",
    "not_recorded": "the replayed sweep holds no measurement for this configuration",
    "recorded_failure": "the replayed run recorded a failure without its kind",
    "cuda": "another CUDA error",
    "cache_damaged": "the compiled binary changed on disk between the build cache's check and "
                     "its load (measured again next time)",
}


@dataclass
class Measurement:
    """The outcome of evaluating one candidate on one device."""

    key: str  # candidate content key
    device: str  # "cuda" | "sim" | "replay"
    ok: bool
    time_ms: float | None = None  # median
    spread_ms: float | None = None  # interquartile range
    samples: int = 0
    verified: bool | None = None  # None: not checked (the simulator never claims correctness)
    simulated: bool = False
    error_kind: str | None = None
    error_msg: str | None = None
    counters: dict[str, Any] = field(default_factory=dict)  # hardware or modelled metrics
    max_rel_err: float | None = None
    wall_s: float = 0.0  # seconds spent evaluating (verify + time)
    reused: bool = False  # served from the store instead of measured again

    @staticmethod
    def failure(key: str, device: str, kind: str, msg: str, **extra: Any) -> "Measurement":
        if kind not in ERROR_KINDS:
            raise ValueError(f"unknown error kind {kind}")
        return Measurement(key, device, False, error_kind=kind, error_msg=msg[:500], **extra)
