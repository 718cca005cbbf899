"""The analytic model's constants fitted without some problems: how a problem is ranked by a
model that never saw its measurements (issue 34, item 3).

Most of the model's constants are hand-set estimates (data sheet, microbenchmarks). The ones
below were set from the recorded H200 measurements themselves (each one's comment in
`sim_gemm.py` / `sim_model.py` says on what), so the shipped model has seen the sweeps it is
later judged on. `benchmarks/sim_fold_fit.py` fits exactly these per fold (the folds of
`benchmarks/fold_policies.py`): a coordinate search over each constant's grid, started from a
value chosen without the sweeps (`Fitted.start`), scored on the fold's training problems only.
The result is a JSON file per fold; `applied` puts one in force while a prior is modelled.

`FoldConstants` picks, per problem, the first file that was fitted without it (as
`bench.Policies` picks a policy).
"""

from __future__ import annotations

import json
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from ..errors import SettingsError
from . import gemm as sim_gemm
from .model import SimConstants


@dataclass(frozen=True)
class Fitted:
    """One constant set from recorded measurements."""

    where: str
    """"sim": a `SimConstants` field; "gemm": a module constant of `sim_gemm.py` (a name
    ``NAME[i]`` is element i of a tuple constant)"""
    start: float
    """the value a fold's search starts from, chosen without the sweeps: the data-sheet or
    neutral value (efficiency 1, no extra cost), or the value before the constant was fitted"""
    grid: tuple[float, ...]
    """values tried (the ones the original fit tried, widened to include `start`)"""


FITTED: dict[str, Fitted] = {
    # the library's rates per kind of call: "set from the sweeps' library records"
    "LIBRARY_FP32_EFFICIENCY": Fitted("gemm", 1.0, (0.7, 0.8, 0.9, 0.95, 1.0)),
    "CONV_EFFICIENCY": Fitted("gemm", 1.0, (0.5, 0.6, 0.7, 0.82, 0.9, 1.0)),
    "GROUPED_CONV_FACTOR": Fitted("gemm", 1.0, (0.2, 0.3, 0.45, 0.6, 0.8, 1.0)),
    "DEPTHWISE_BW_SHARE": Fitted("gemm", 1.0, (0.1, 0.15, 0.2, 0.3, 0.5, 1.0)),
    "TRANSPOSED_CONV_EFFICIENCY[0]": Fitted("gemm", 1.0, (0.1, 0.2, 0.3, 0.4, 0.6, 1.0)),
    "TRANSPOSED_CONV_EFFICIENCY[1]": Fitted("gemm", 1.0, (0.1, 0.15, 0.22, 0.3, 0.5, 1.0)),
    "TRANSPOSED_CONV_EFFICIENCY[2]": Fitted("gemm", 1.0, (0.06, 0.12, 0.2, 0.3, 0.5, 1.0)),
    "LIBRARY_CALL_US": Fitted("gemm", 0.0, (0.0, 10.0, 25.0, 40.0)),
    # the SIMT GEMM template: fitted on the gemm family's sweeps
    "SMEM_CLK_PER_WAVEFRONT": Fitted("gemm", 1.0, (1.0, 1.25, 1.5, 2.0)),
    "CONTIG_STORE_COST": Fitted("gemm", 1.0, (1.0, 2.0, 3.0)),
    "OVERLAP_SHARPNESS": Fitted("gemm", 3.0, (1.5, 2.0, 2.5, 3.0)),
    # the tensor-core template: fitted on the convolution sweeps and the live runs
    "TC_TILE_FILL_BW": Fitted("gemm", 2.5e12, (2.5e12, 3e12, 3.5e12, 4e12, 5e12)),
    "TC_LONE_BLOCK_OVERLAP": Fitted("gemm", 1.0, (0.0, 0.25, 0.5, 0.75, 1.0)),
    # set from the live runs' configurations of the same GEMM and convolution problems
    "SIMT_TIME_SCALE": Fitted("gemm", 1.0, (1.0, 1.15, 1.25, 1.4)),
    "TRANSPOSED_GATHER_INSTR": Fitted("gemm", 8.0, (8.0, 16.0, 32.0, 64.0)),
    "SPLIT_PARTIAL_COST": Fitted("gemm", 1.0, (1.0, 2.0, 3.0)),
    # the pooling model: chosen on the pooling sweeps; 0 before it existed
    "l1_inflight_merge": Fitted("sim", 0.0, (0.0, 0.5, 0.7, 0.8, 0.85, 0.9, 0.95)),
}


def _split(name: str) -> tuple[str, int | None]:
    if name.endswith("]"):
        base, idx = name[:-1].split("[")
        return base, int(idx)
    return name, None


def shipped_values() -> dict[str, float]:
    """The values the shipped model uses for the constants in `FITTED`."""
    sim = SimConstants.shipped()
    out = {}
    for name, f in FITTED.items():
        base, idx = _split(name)
        value = getattr(sim, base) if f.where == "sim" else getattr(sim_gemm, base)
        out[name] = float(value[idx] if idx is not None else value)
    return out


@dataclass
class ModelConstants:
    """Values for (some of) the constants in `FITTED`; the others stay as shipped."""

    values: dict[str, float] = field(default_factory=dict)
    fitted_on: tuple[str, ...] = ()
    """the problems whose measurements chose the values"""
    source: str = ""

    def __post_init__(self) -> None:
        unknown = sorted(set(self.values) - set(FITTED))
        if unknown:
            raise SettingsError(f"unknown model constants {', '.join(unknown)} "
                                f"({self.source or 'given'}); known: {', '.join(FITTED)}")

    def sim_constants(self) -> SimConstants:
        d = SimConstants.shipped().to_dict()
        d.update({k: v for k, v in self.values.items() if FITTED[k].where == "sim"})
        return SimConstants.from_dict(d)

    def to_json(self) -> dict[str, Any]:
        return {"values": self.values, "fitted_on": list(self.fitted_on)}


def load(path: str | Path) -> ModelConstants:
    """A fold's constants file (`benchmarks/sim_fold_fit.py`); a bad file is a settings error
    naming it."""
    try:
        d = json.loads(Path(path).read_text())
        return ModelConstants(dict(d["values"]), tuple(d.get("fitted_on", ())), str(path))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SettingsError(f"{path}: not a model-constants file ({exc})") from None


_LOCK = threading.RLock()


@contextmanager
def applied(mc: ModelConstants | None) -> Iterator[SimConstants | None]:
    """Within the block, the GEMM model's module constants take `mc`'s values; yields the
    `SimConstants` to pass to `simulate` (None: the shipped ones, nothing changed). Module
    constants are process-wide: the block holds a lock so two priors modelled with different
    constants never interleave, but anything else simulating in another thread meanwhile sees
    them too (the evaluations that use fold constants run one search per process)."""
    if mc is None or not mc.values:
        yield None
        return
    with _LOCK:
        saved: dict[str, Any] = {}
        try:
            for name, value in mc.values.items():
                if FITTED[name].where != "gemm":
                    continue
                base, idx = _split(name)
                if base not in saved:
                    saved[base] = getattr(sim_gemm, base)
                current = getattr(sim_gemm, base)
                if idx is None:
                    setattr(sim_gemm, base, value)
                else:
                    items = list(current)
                    items[idx] = value
                    setattr(sim_gemm, base, tuple(items))
            yield mc.sim_constants()
        finally:
            for base, value in saved.items():
                setattr(sim_gemm, base, value)


def resolve(spec: "str | Path | ModelConstants | None") -> ModelConstants | None:
    """A strategy option's constants: a file, already loaded, or None (shipped)."""
    if spec is None or isinstance(spec, ModelConstants):
        return spec
    return load(spec)


class FoldConstants:
    """Several fold files (comma-separated): each problem is ranked with the first one fitted
    without it."""

    def __init__(self, spec: str | None) -> None:
        self.paths = [p for p in (spec or "").split(",") if p]
        self.fitted_on = {p: set(load(p).fitted_on) for p in self.paths}

    def __bool__(self) -> bool:
        return bool(self.paths)

    def pick(self, problem: str) -> str | None:
        """The file to rank `problem` with: the first fitted without it, else None (the
        shipped constants: no fold kept it out)."""
        return next((p for p in self.paths if problem not in self.fitted_on[p]), None)
