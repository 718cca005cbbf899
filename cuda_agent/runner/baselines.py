"""The torch baselines (eager, torch.compile and its modes, eager in cuDNN's benchmark mode) under
two settings, and how result records name them.

* PyTorch's defaults: as a user's own process runs the reference, with the TF32 flags torch has in
  a fresh process (read there at run time; torch 2.x allows TF32 in cuDNN convolutions and keeps
  matrix products strict) and no autocast. The headline: `eager_ms`, `compile_ms`, ...
* accuracy-matched: under the kernels' contract, strict fp32 (TF32 off everywhere), or what the
  user opted into with `--precision` (TF32 on; fp16/bf16 under autocast). `eager_matched_ms`,
  `compile_matched_ms`, ...

A record says which is which in `baseline_settings`. One without it was measured before the two
settings existed, under the contract alone: its `eager_ms` and `compile_ms` are matched figures,
and it has no defaults figure (`read_record`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..precision import tf32_ops

CUDNN_BENCHMARK = "eager:cudnn-benchmark"
"""the eager baseline with torch.backends.cudnn.benchmark on: each convolution shape gets the
algorithm cuDNN finds fastest by timing them all, not its heuristics' pick (the default). torch
keeps the algorithm found per shape for the life of the process, so it runs in a worker of its
own (`CudaDevice.baselines`)"""

DEFAULTS, MATCHED = "defaults", "matched"
"""the two settings a baseline is timed under (module docstring)"""

FIELDS = {"eager": "eager_ms", "compile": "compile_ms", "compile:max-autotune": "compile_max_ms",
          "compile:max-autotune-no-cudagraphs": "compile_max_nocg_ms",
          CUDNN_BENCHMARK: "eager_cudnn_benchmark_ms"}
"""each baseline's field in result records (its figure at PyTorch's defaults)"""


def matched(name: str) -> str:
    """The name of baseline `name` timed under the accuracy-matched setting."""
    return f"{name}@{MATCHED}"


def split_setting(name: str) -> tuple[str, str]:
    """("compile", "matched") for "compile@matched"; ("compile", "defaults") for "compile"."""
    base, _, setting = name.partition("@")
    return base, setting or DEFAULTS


def with_matched(names: tuple[str, ...]) -> tuple[str, ...]:
    """Each baseline at the defaults, its matched twin right after it (the same worker serves
    both: cuDNN keeps its algorithm per shape and TF32 setting, so neither decides the other's)."""
    return tuple(n for name in names for n in (name, matched(name)))


def matched_field(key: str) -> str:
    """"compile_matched_ms" for "compile_ms": the record field of the matched figure."""
    return key[:-len("_ms")] + "_matched_ms"


@dataclass
class Baselines:
    """The baselines of one problem. `eager_ms` and `compile_ms` are at PyTorch's defaults (the
    headline); every other figure is in `extra_ms` by name (`matched(name)` for the matched
    ones)."""

    eager_ms: float | None = None
    compile_ms: float | None = None
    eager_spread_ms: float | None = None
    compile_spread_ms: float | None = None
    notes: dict[str, str] = field(default_factory=dict)
    extra_ms: dict[str, float] = field(default_factory=dict)
    """other baselines by name, e.g. "compile:max-autotune" (torch.compile's mode), and the
    matched figures, e.g. "compile@matched\""""
    settings: dict[str, Any] | None = None
    """the `baseline_settings` record (`settings_record`); None where nothing says what the
    figures were measured under: a record from before the two settings, all matched"""

    def ms(self, name: str) -> float | None:
        """Baseline `name`'s figure ("eager", "compile@matched", ...), or None."""
        if name == "eager":
            return self.eager_ms
        if name == "compile":
            return self.compile_ms
        return self.extra_ms.get(name)

    @property
    def eager_matched_ms(self) -> float | None:
        return self.ms(matched("eager"))

    @property
    def compile_matched_ms(self) -> float | None:
        return self.ms(matched("compile"))

    def set(self, name: str, ms: float, spread_ms: float | None = None) -> None:
        if name == "eager":
            self.eager_ms, self.eager_spread_ms = ms, spread_ms
        elif name == "compile":
            self.compile_ms, self.compile_spread_ms = ms, spread_ms
        else:
            self.extra_ms[name] = ms

    def fields(self) -> dict[str, Any]:
        """The record fields: each baseline at the defaults and matched, and what each setting
        was (`baseline_settings`, written always, so a reader never takes these for an old
        record's figures)."""
        out: dict[str, Any] = {key: self.ms(name) for name, key in FIELDS.items()}
        out.update({matched_field(key): self.ms(matched(name)) for name, key in FIELDS.items()})
        out["baseline_settings"] = self.settings or UNKNOWN_SETTINGS
        return out


UNKNOWN_SETTINGS = {"headline": DEFAULTS, DEFAULTS: None, MATCHED: None, "same": None}
"""`baseline_settings` where none was measured at the defaults (a simulated device; figures
replayed from a record older than the two settings: those are matched)"""


def read_record(rec: dict[str, Any]) -> Baselines:
    """The baselines of a record (report.json, a sweep's "baselines", a bench problem, a
    result row). One without `baseline_settings` predates the two settings: its figures were
    timed under the kernels' contract, so they are the matched ones and the defaults are
    unknown."""
    rec = rec or {}
    out = Baselines(notes=dict(rec.get("baseline_notes") or rec.get("notes") or {}),
                    settings=rec.get("baseline_settings"))
    for name, key in FIELDS.items():
        if out.settings is None:
            if rec.get(key) is not None:
                out.set(matched(name), rec[key])
            continue
        if rec.get(key) is not None:
            out.set(name, rec[key])
        if rec.get(matched_field(key)) is not None:
            out.set(matched(name), rec[matched_field(key)])
    return out


def headline_ms(rec: dict[str, Any], key: str = "compile_ms") -> float | None:
    """A record's figure for the headline (`key` at PyTorch's defaults), None where the record
    predates them (its `key` is a matched figure: `matched_ms`)."""
    return rec.get(key) if rec and "baseline_settings" in rec else None


def matched_ms(rec: dict[str, Any], key: str = "compile_ms") -> float | None:
    """A record's accuracy-matched figure for `key`, an old record's `key` itself."""
    if not rec:
        return None
    return rec.get(matched_field(key)) if "baseline_settings" in rec else rec.get(key)


# -- what the two settings are -------------------------------------------------------------------

def contract_tf32(precision: str) -> dict[str, bool]:
    """Which products the kernels' contract lets use TF32, {"conv": bool, "matmul": bool}:
    both under `--precision tf32`, one under "tf32:conv" or "tf32:matmul" (`--precision auto`
    as torch's flags read); fp16/bf16 products run under autocast in that type, everything
    else stays strict."""
    return tf32_ops(precision)


def autocast_dtype(precision: str) -> str | None:
    return {"fp16": "float16", "bf16": "bfloat16"}.get(precision)


def tf32_reads(ops: set[str]) -> set[str]:
    """Which TF32 flags a graph of `ops` can read: cuDNN's ("conv") for a convolution, cuBLAS's
    ("matmul") for a matrix product or attention (torch's math path multiplies matrices).
    Elementwise ops, reductions, norms, pooling and scans never run on tensor cores."""
    out = set()
    if "conv" in ops:
        out.add("conv")
    if ops & {"matmul", "attention"}:
        out.add("matmul")
    return out


def settings_record(defaults: dict[str, bool], precision: str, reads: set[str]) -> dict[str, Any]:
    """The `baseline_settings` of a run: each setting's TF32 flags (defaults: {"conv": bool,
    "matmul": bool} as torch had them in a fresh process) and whether the two coincide on every
    flag the problem's ops read (then one measurement serves both)."""
    contract = contract_tf32(precision)
    same = autocast_dtype(precision) is None and all(defaults[k] == contract[k] for k in reads)
    return {"headline": DEFAULTS,
            DEFAULTS: {"conv_tf32": defaults["conv"], "matmul_tf32": defaults["matmul"],
                       "autocast": None,
                       "what": "PyTorch's defaults, as read in a fresh process"},
            MATCHED: {"conv_tf32": contract["conv"], "matmul_tf32": contract["matmul"],
                      "autocast": autocast_dtype(precision), "precision": precision,
                      "what": "the kernels' contract (--precision)"},
            "tf32_flags_read": sorted(reads), "same": same}
