"""Tuning a whole model: split it into regions (in a child process, as any problem file is
loaded), tune each kernel region as a problem of its own (`source.py`, `tuner.tune`), and emit
one module (`emit.py`) with a report listing every region, what was generated and what was left
to torch and why.

A region the tuner refuses after all (a template space that does not take it) or where no
candidate passes runs in torch: the model is never refused for one region.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from ..errors import CudaAgentError
from ..ir.planning import make_plan
from ..outputs import write_files
from ..problem import Problem
from ..problem_child import LoadLimits, load_problem_bounded, shared_loader
from ..settings import RunSettings
from ..store import default_store
from .. import tuner  # through its module: tests count the devices it opens
from . import budget as budgets
from .emit import header, model_new_source
from .source import problem_source
from .split import KERNEL, TORCH, Split


@dataclass
class RegionOutcome:
    index: int
    problem_file: str
    budget: int
    time_limit_s: float | None
    result: Any = None  # the region's TuneResult
    error: str = ""

    def summary(self) -> dict[str, Any]:
        r = self.result
        best = r.best if r is not None else None
        return {"problem_file": self.problem_file, "budget": self.budget,
                "time_limit_s": self.time_limit_s, "error": self.error or None,
                "evals": len(r.trials) if r is not None else 0,
                "stopped": r.stopped if r is not None else None,
                "template": best.template if best else None,
                "config": best.config.short() if best else None,
                "best_ms": best.measurement.time_ms if best else None,
                "simulated": r.simulated if r is not None else None,
                "eager_ms": r.baselines.eager_ms if r is not None else None,
                "compile_ms": r.baselines.compile_ms if r is not None else None}


@dataclass
class ModelResult:
    path: Path
    split: Split
    outcomes: dict[int, RegionOutcome] = field(default_factory=dict)
    wall_s: float = 0.0
    device: str = ""
    simulated: bool = False
    gains: dict[int, budgets.Gain] = field(default_factory=dict)
    eager_measure_s: float = 0.0  # the seconds spent measuring the regions' eager times

    def lines(self) -> list[str]:
        """One line per region: what it is, what was generated or why torch runs it."""
        out = []
        for r in self.split.regions:
            o = self.outcomes.get(r.index)
            line = f"{r.label()} -> "
            if r.kind == TORCH:
                line += f"torch ({r.reason})"
            elif o is None or o.result is None or o.result.best is None:
                why = o.error if o is not None and o.error else "no candidate passed"
                line += f"torch ({why})"
            else:
                s = o.summary()
                sim = " simulated" if s["simulated"] else ""
                line += (f"generated, {r.reason.removeprefix('generated: ')}: {s['template']} "
                         f"{s['best_ms']:.4f} ms{sim}, {s['evals']} measured")
            out.append(line)
        return out

    def generated(self) -> list[int]:
        return [k for k, o in self.outcomes.items()
                if o.result is not None and o.result.best is not None]

    def report(self) -> dict[str, Any]:
        regions = []
        for r in self.split.regions:
            o = self.outcomes.get(r.index)
            regions.append({"index": r.index, "kind": r.kind, "ops": r.ops,
                            "reason": r.reason, "family": r.family or None,
                            "dtype": r.dtype or None, "autocast": r.autocast or None,
                            "reads": [o_.name for o_ in r.reads], "writes": r.writes,
                            "expected_s": budgets.floor_s(r) if r.kind == KERNEL else None,
                            **({"gain": self.gains[r.index].record()}
                               if r.index in self.gains else {}),
                            "generated": r.index in self.generated(),
                            **({"tune": o.summary()} if o is not None else {})})
        return {"problem": self.path.stem, "path": str(self.path), "whole_model": True,
                "device": self.device, "simulated": self.simulated,
                "shapes_tuned": [list(s) for s in self.split.input_shapes],
                "dtypes_tuned": self.split.input_dtypes,
                "in_place_taken_out_of_place": self.split.inplace,
                "budget_split": self.budget_line(),
                "eager_measure_s": self.eager_measure_s,
                "lines": self.lines(), "regions": regions, "wall_s": self.wall_s}

    def budget_line(self) -> str:
        """How the budget and the seconds were split across the kernel regions."""
        froms = [g.source for g in self.gains.values()]
        n, measured = len(froms), froms.count("measured eager")
        if not n:
            return "no kernel region"
        if not measured:
            return (f"budget across {n} kernel regions by their roofline (eager times are not "
                    "measured on this device)")
        return (f"budget across {n} kernel regions by expected gain: eager time x headroom, "
                f"{measured} of {n} eager times measured in {self.eager_measure_s:.1f} s"
                + ("" if measured == n else ", the rest estimated from them"))


def tune_model(path: str | Path, out: str | Path, split: Split | None = None,
               notify: Callable[[str], None] = lambda s: None, started: float | None = None,
               settings: RunSettings | None = None, **options: Any) -> ModelResult:
    """Split the model in `path`, tune each kernel region (`settings`, or `options` as
    `tuner.tune`'s; the budget and the time limit are split across regions by expected gain,
    `budget.py`: each region's run takes the settings whole with its shares), and write `out`:
    model_new.py, report.json, and regions/ (each region's problem file and its own tuning
    outputs)."""
    started = time.monotonic() if started is None else started
    said: set[str] = set()
    tell = notify

    def notify_once(line: str) -> None:  # each region's tune says the same notices: once each
        if line not in said:
            said.add(line)
            tell(line)
    notify = notify_once

    path, out = Path(path), Path(out)
    if settings is None:
        options.setdefault("store", default_store())  # as `tune()`'s: the CLI's store
        settings = RunSettings(**options)
    elif options:
        settings = replace(settings, **options)
    if split is None:
        split = shared_loader().split(path, LoadLimits.of_run(settings))
    result = ModelResult(path, split)
    kernels = sorted(split.kernels(), key=budgets.floor_s, reverse=True)
    deadline = None if not settings.time_limit_s else started + settings.time_limit_s
    region_dir = out / "regions"
    files = {f"r{r.index}.py": problem_source(r, path.stem) for r in kernels}
    write_files(region_dir, files)
    # one device for every region: a GPU worker each (CUDA context, torch, the compile pool)
    # cost seconds per region of a time limit the regions share
    try:
        device = tuner.open_device(settings.device, settings, notify) if kernels else None
    except CudaAgentError:  # each region's tune says why, and its region runs in torch
        device = None
    try:
        t0 = time.monotonic()
        eager, problems = measure_eager(kernels, device, region_dir, settings,
                                        settings.time_limit_s)
        result.eager_measure_s = time.monotonic() - t0
        result.gains = budgets.gains(kernels, eager)
        kernels.sort(key=lambda r: result.gains[r.index].weight_s, reverse=True)
        shares = dict(zip((r.index for r in kernels), budgets.shares(
            settings.budget, [result.gains[r.index].weight_s for r in kernels])))
        if kernels:
            notify(result.budget_line())
        _tune_regions(result, kernels, shares, deadline, region_dir, settings, notify,
                      tuner.tune, device, problems)
    finally:
        if device is not None:
            device.close()
    for r in split.regions:  # the torch regions' lines too, so the user sees every region
        if r.kind == TORCH:
            notify(result.lines()[split.regions.index(r)])
    result.wall_s = time.monotonic() - started
    emit_model(result, out)
    return result


def measure_eager(kernels: list, device: Any, region_dir: Path, settings: RunSettings,
                  time_limit_s: float | None) -> tuple[dict[int, float], dict[int, Problem]]:
    """Each kernel region's eager time (its torch reference, in the user's settings) on a
    GPU, in seconds by region index, largest floor first, the first always, the others within
    `budgets.EAGER_SHARE` of the time limit; and the regions' problems loaded for it (their tunes reuse them). Nothing on
    a device that does not measure torch (the simulated and replay devices) or where a
    region's set-up fails (its tune will say why)."""
    eager: dict[int, float] = {}
    problems: dict[int, Problem] = {}
    if device is None or device.simulated or device.kind != "cuda":
        return eager, problems
    allowed = None if not time_limit_s else budgets.EAGER_SHARE * time_limit_s
    t0 = time.monotonic()
    for r in kernels:  # the first always (its ratio to its floor estimates the rest)
        if eager and allowed is not None and time.monotonic() - t0 >= allowed:
            break
        try:
            prob = load_problem_bounded(region_dir / f"r{r.index}.py",
                                        LoadLimits.of_run(settings))
            problems[r.index] = prob
            device.ensure(prob, make_plan(prob.graph()))
            ms = device.baselines(("eager",)).ms("eager")
        except CudaAgentError:
            continue
        if ms is not None and ms > 0:
            eager[r.index] = ms / 1e3
    return eager, problems


def _tune_regions(result: ModelResult, kernels: list, shares: dict[int, int],
                  deadline: float | None, region_dir: Path, settings: RunSettings,
                  notify: Callable[[str], None], tune: Callable[..., Any], device: Any,
                  problems: dict[int, Problem] | None = None) -> None:
    """Each kernel region tuned in turn, largest expected gain first, on `device`, each with
    its share of the budget and of the seconds left (`problems`: regions already loaded)."""
    split = result.split
    problems = problems or {}
    weights = [result.gains[r.index].weight_s if r.index in result.gains
               else budgets.floor_s(r) for r in kernels]
    for pos, r in enumerate(kernels):
        limit = None
        if deadline is not None:
            left = deadline - time.monotonic() - 1.0  # the module's emission after
            # a tune holds its own limit within 5 %: its share less that, so the sum holds
            limit = budgets.time_share(max(0.0, left), weights[pos], weights[pos + 1:]) / 1.05
            if limit < 1.0:
                result.outcomes[r.index] = RegionOutcome(
                    r.index, str(region_dir / f"r{r.index}.py"), shares[r.index], limit,
                    error="the time limit came first")
                continue
        o = RegionOutcome(r.index, str(region_dir / f"r{r.index}.py"), shares[r.index], limit)
        result.outcomes[r.index] = o
        run = replace(settings, budget=shares[r.index], time_limit_s=limit)
        try:
            o.result = tune(problems.get(r.index, o.problem_file), out=region_dir / f"r{r.index}",
                            notify=notify, settings=run, shared_device=device)
            result.device = o.result.device.kind
            result.simulated = o.result.simulated
        except CudaAgentError as exc:
            o.error = str(exc).split(": ", 1)[-1] if str(exc).startswith(str(region_dir)) \
                else str(exc)
        notify(result.lines()[split.regions.index(r)])


def emit_model(result: ModelResult, out: Path) -> None:
    sources = {}
    for k in result.generated():
        made = Path(out) / "regions" / f"r{k}" / "model_new.py"
        if made.exists():
            sources[k] = made.read_text()
    device = ("the simulated device (analytic model; kernels NOT VERIFIED: tune on a GPU)"
              if result.simulated else result.device or "no device (no region tuned)")
    text = model_new_source(result.split, result.path.stem, result.path.read_text(), sources,
                            header(result.path.stem, result.split, device, result.lines()))
    write_files(out, {"model_new.py": text,
                      "report.json": json.dumps(result.report(), indent=2, default=str) + "\n"})
