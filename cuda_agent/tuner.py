"""A tune: problem -> plan -> space -> the search loop (`search/engine.py`: strategy.ask -> build ->
device -> store -> strategy.tell) -> baselines.

UI-free: progress goes through a callback, so the CLI draws rich progress bars and tests run
silently. Candidates that fail are recorded and the loop goes on; only a user error (bad problem
file, unknown strategy, missing device) stops it.
"""

from __future__ import annotations

import functools
import itertools
import random
import threading
import time
import warnings
from concurrent.futures import Future
from concurrent.futures import wait as futures_wait
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterable

from . import metrics
from .background import in_background
from .build.builder import Builder, BuildInput
from .errors import DeviceError, UnsupportedError
# the flags' checks (re-exported: bench and the tests read them from here)
from .flags import (DEVICES, check_device, check_precision,  # noqa: F401
                    check_tolerance, check_tune)
from .ir.partition import ProgramPlan, as_program
from .ir.plan import KernelPlan
from .ir.planning import make_plan
from .problem import Problem, naming_file
from .problem_child import LoadLimits, load_problem_bounded
from .runner.baselines import with_matched
from .runner.devices import (Baselines, Candidate, CudaDevice, Device, cuda_available,
                             cudnn_baselines)
from .runner.records import Measurement
from .runner.replay import ReplayDevice
from .runner.sim import SimDevice
from .verify.settings import VerifySettings, parse_tolerance
from .search import make_strategy, resolve_strategy
from .search.base import is_agents
from .search.engine import Engine, Listed, Proposer
from .search.stop import StageSchedule, StopRule
from .search.verdicts import TemplateKey, TemplateVerdicts
from .space.program import StagePlateau, StageSpace, stage_spaces
from .precision import resolve as resolve_precision
from .space.slots import Config
from .space.space import Space
from .settings import RunSettings
from .stopwatch import Phases
from .store import Store, default_store

COUNT_GRACE_S = 0.5
"""seconds past the time limit the report may spend counting the space
(`TuneResult.space_size`)"""


class SimulatedDeviceWarning(UserWarning):
    """`tune()` found no GPU and runs on the simulated device: times are model estimates."""


TuneSettings = RunSettings
"""a tune's settings are the run's (`settings.py`): the name the Python API has always had"""


@dataclass
class Trial:
    """One evaluated configuration, in evaluation order."""

    index: int
    config: Config
    template: str
    measurement: Measurement
    resources: dict[str, Any] = field(default_factory=dict)
    stage: int | None = None
    """a multi-kernel program's stage whose space `config` belongs to (None: one kernel)"""
    library: bool = False
    """whether the candidate ran a vendor-library step (cuBLAS/cuDNN through torch) for a
    product: the library route, against which the own templates' kernels are counted apart"""


@dataclass
class TuneResult:
    problem: Problem
    plan: KernelPlan
    space: Space
    device: Device
    settings: RunSettings
    trials: list[Trial]
    baselines: Baselines
    default: Trial | None
    best: Trial | None
    toolchain: str
    wall_s: float
    facts: dict[str, Any]
    build_stats: dict[str, Any]
    timing: dict[str, float] = field(default_factory=dict)
    """where the search's wall time went besides measuring: `strategy_s` inside the strategy's
    ask and tell (proposing, and for the agents learning online), `build_wait_s` waiting for
    candidates to compile; `strategy_ahead_s`, the strategy's time spent while the untuned
    default was measured (the model's picks and the second batch), not wall time of its own"""
    stopped: str = "budget"
    """why the search ended (one of `STOPPED`)"""
    count_until: float | None = None
    """(time.monotonic()) until when `space_size` may count the space: the time limit (or the
    run's end, where later) plus `COUNT_GRACE_S`; None: no limit"""
    strategy_resolved: str = ""
    """the strategy the search ran as: `settings.strategy` keeps the name asked for, and
    "default" runs as the best one on the evidence (`search.resolve_strategy`)"""
    phases: dict[str, float] = field(default_factory=dict)
    """wall seconds of the run's phases (`stopwatch.Phases`): the tuner's set-up (opening the
    device, the GPU worker's set-up for the problem, the space, the strategy), the search and
    the baselines; the worker's own set-up phases are in `facts["setup_phases"]`"""
    store: dict[str, Any] = field(default_factory=dict)
    """the store's `Store.report()`: whether it holds all of the run's measurements, and if
    not (a full disk, a corrupt file: the run kept them in memory), why"""

    _counting: Future | None = field(default=None, repr=False, compare=False)

    @property
    def interrupted(self) -> bool:
        return self.stopped == "interrupted"

    @property
    def space_size(self) -> int | None:
        """How many configurations `space` holds (a program: the best's stage), for the
        report: known where the space was listed or counted (the agents list it), else
        counted, under a time limit on a daemon thread waited for until `count_until`
        (counting a large space takes seconds: a three-stage MLP's report counted 600k raw
        combinations after its limit had passed); None where that was not enough. Counted
        only when asked for: a run whose report is not written spends nothing on it."""
        known = self.space.known_len()
        if known is not None or self.count_until is None:
            return known if known is not None else len(self.space)
        if self._counting is None:
            self._counting = in_background(len, self.space, name="cuda-agent-count")
        futures_wait([self._counting], timeout=max(0.0, self.count_until - time.monotonic()))
        return self._counting.result() if self._counting.done() else None

    @property
    def simulated(self) -> bool:
        return self.device.simulated

    def evals_to_fraction(self, fraction: float = 0.95, best_ms: float | None = None) -> int | None:
        """Measurements until the best-so-far is within `fraction` of `best_ms` (default: this
        run's best), counting from 1."""
        target = best_ms if best_ms is not None else (
            self.best.measurement.time_ms if self.best else None)
        if not target:
            return None
        return metrics.evals_to_fraction(
            [t.measurement.time_ms if t.measurement.ok else None for t in self.trials],
            target, fraction)


def resolve_settings_precision(settings: RunSettings, device_kind: str | None,
                               flags: dict[str, Any] | None = None) -> RunSettings:
    """`settings` with its precision resolved to a contract (`precision.resolve`: "auto" as
    `flags` say, by default this process's torch flags), the precision asked for kept in
    `precision_asked`."""
    contract = resolve_precision(settings.precision, device_kind, flags)
    if contract == settings.precision:
        return settings
    return replace(settings, precision=contract, precision_asked=settings.precision)


def verify_settings(settings: RunSettings) -> VerifySettings:
    """The verifier's settings for a run: the precision contract and the tolerance."""
    return VerifySettings(precision=settings.precision,
                          tolerance=parse_tolerance(settings.tolerance))


def check_settings(settings: RunSettings) -> None:
    """A one-line `SettingsError` for the first setting out of range (`flags.check_tune`)."""
    check_tune(device=settings.device, strategy=settings.strategy, budget=settings.budget,
               batch=settings.batch, precision=settings.precision,
               tolerance=settings.tolerance, time_limit_s=settings.time_limit_s,
               compile_timeout_s=settings.compile_timeout_s,
               baseline_timeout_s=settings.baseline_timeout_s)


def open_device(name: str | None, settings: RunSettings, notify: Callable[[str], None]) -> Device:
    if name is None:
        if cuda_available():
            name = "cuda"
        else:
            name = "sim"
            notify("No CUDA GPU found: running on the simulated device (an analytic H200 model). "
                   "Times are simulated, correctness is not checked.")
    check_device(name)
    check_precision(settings.precision, name)
    check_tolerance(settings.tolerance, name)
    settings = resolve_settings_precision(settings, name)
    if name == "cuda":
        if not cuda_available():
            raise DeviceError("--device cuda: no CUDA GPU is available on this machine")
        return CudaDevice(profile_every=settings.profile_every,
                          verify_settings=verify_settings(settings),
                          baseline_timeout_s=settings.baseline_timeout_s)
    if name == "sim":
        return SimDevice()
    return ReplayDevice(Path(settings.replay_root) if settings.replay_root else None)


def setup_notice(name: str, seconds: float | None, memory: dict[str, Any] | None) -> str:
    """One line once the GPU worker has set a problem up (inputs, eager's peak, the float64
    references): a large problem's set-up takes a minute or more, and a log cut by a time
    limit during it would be empty (docs/journal.md: tuner.py)."""
    from .runner.memory import describe

    took = f" in {seconds:.1f} s" if seconds is not None else ""
    footprint = describe(memory)
    return f"{name}: set up on the GPU{took}" + (f"; {footprint}" if footprint else "") + \
        "; searching"


LIBRARY = "lib"
"""the library template's name: cuBLAS/cuDNN through torch for the product, one generated
kernel for the epilogue (`space/templates/library.py`)"""


def library_pick(strategy: Any, space: Space) -> Config | None:
    """The library route's configuration of `space` (a stage's own space, or a kernel's): the
    strategy's model's fastest of the library template's few configurations where it holds a
    model, else the template's default; None where the library template does not apply."""
    configs = space.configs_of(LIBRARY)
    if not configs:
        return None
    pick = strategy.stage_pick(space.restricted(configs))
    if pick is not None:
        return pick
    default = next((c for c in space.template_defaults(fallback=True)
                    if space.template_of(c).name == LIBRARY), None)
    return default if default is not None else configs[0]


LAYOUT_SLOT = "memory.layout"


def library_twins(space: Space, config: Config | None) -> list[Config]:
    """The library configuration `config` in cuDNN's other layouts (`memory.layout`), where
    `space` holds them: which layout is faster depends on the convolution's shape and the
    library's kernels, which no model here knows (torch.compile computes convolutions in
    channels-last itself), so the floor measures each. On an H100 a transposed convolution's
    floor was measured in the given layout only and its search never met the other
    (benchmarks/results/2026-12-07-h100-conv-chains/NOTE.md). [] for any other config."""
    if config is None or space.template_of(config).name != LIBRARY:
        return []
    try:
        layout = config[LAYOUT_SLOT]
    except KeyError:
        return []
    rest = {k: v for k, v in config.items if k != LAYOUT_SLOT}
    return [c for c in space.configs_of(LIBRARY) if c[LAYOUT_SLOT] != layout
            and {k: v for k, v in c.items if k != LAYOUT_SLOT} == rest]


def plan_space(plan: KernelPlan | ProgramPlan, device: Device, precision: str
               ) -> tuple[Space, list[Space]]:
    """The space a search of `plan` on `device` (set up for its problem) draws from, built for
    the numeric contract `precision`, and a program's stages' own spaces (a program: its first
    stage's, every stage at its default; [] for one kernel). On replay, only what the sweep
    recorded, as Kernel Tuner's simulation mode does."""
    target = replace(device.target(), precision=precision)
    stages: list[Space] = []
    if isinstance(plan, ProgramPlan):
        stages = stage_spaces(plan, target)
        space: Space = StageSpace.of(plan, 0, stages, [sp.default() for sp in stages])
    else:
        space = Space.for_plan(plan, target)
    if isinstance(device, ReplayDevice):
        space = space.restricted(device.recorded_configs(space))
    return space, stages


def search_space(problem: Problem, device: Device, settings: RunSettings) -> Space:
    """The space a `Tuner` of `problem` on `device` with `settings` searches, for reading
    (its size, the model's picks); nothing is built or measured. Sets `device` up for the
    problem (on replay: its recorded sweep)."""
    settings = resolve_settings_precision(settings, device.kind, problem.torch_flags)
    plan = make_plan(problem.graph())
    device.ensure(problem, plan)
    return plan_space(plan, device, settings.precision)[0]


class StrategyProposer:
    """A strategy as the search loop's proposer (`search.engine.Proposer`): `pending` first
    (the untuned default), then, where `picks_due`, one configuration of each template (the
    strategy's model's picks, else each template's default; the library route first: its
    floor, cuBLAS/cuDNN and a fused epilogue, so that a time-limited search never ends
    without it), then the strategy's proposals; never a configuration in `seen` or
    `measured_before`. The defaults are a batch of their own, measured while the next batch
    (the model's picks, then the strategy's proposals) is asked for and compiled in the
    background: the model's ranking of a large stage takes seconds (docs/journal.md:
    tuner.py); a seeded search measures the same batches every time."""

    def __init__(self, strategy: Any, space: Space, pending: list[Config], picks_due: bool,
                 seen: set[Config], measured_before: Callable[[Config], bool],
                 timing: dict[str, float], verdicts: TemplateVerdicts | None = None,
                 seed: int = 0) -> None:
        self.strategy = strategy
        self.space = space
        self.pending = pending
        self.picks_due = picks_due
        self.seen = seen
        self.measured_before = measured_before
        self.timing = timing
        # templates whose candidates were all wrong: not proposed again (`search/verdicts.py`)
        self.verdicts = verdicts if verdicts is not None else TemplateVerdicts()
        self.stage = space.stage if isinstance(space, StageSpace) else None
        self._beside = tuple(f for j, f in enumerate(space.fixed) if j != space.stage) \
            if isinstance(space, StageSpace) else ()
        self._names = [t.name for t in space.templates]
        self.seed = seed
        self.adaptive: bool = strategy.adaptive
        self._ahead_ok = picks_due and not self.adaptive

    @property
    def done(self) -> bool:
        return bool(self.strategy.done)

    @property
    def ask_in_background(self) -> bool:
        return self._ahead_ok and self.picks_due

    def _template(self, c: Config) -> TemplateKey:
        return self._key(self.space.template_of(c).name)

    def _key(self, name: str) -> TemplateKey:
        return self.stage, name, self._beside

    def given_up(self, name: str) -> bool:
        """Whether template `name` is given up on (`search/verdicts.py`): all wrong so far, and
        not the last template of the space that is not."""
        return self.verdicts.abandoned(self._key(name)) and any(
            not self.verdicts.abandoned(self._key(n)) for n in self._names if n != name)

    def _abandoned(self, c: Config) -> bool:
        return self.given_up(self.space.template_of(c).name)

    def _fresh(self, c: Config) -> bool:
        return c not in self.seen and not self.measured_before(c) and not self._abandoned(c)

    def ask(self, n: int, clock: str = "strategy_s") -> list[Config]:
        out: list[Config] = []
        while len(out) < n:
            if self.pending:  # the defaults first, as many as this batch takes
                c = self.pending.pop(0)
                if c not in out and self._fresh(c):
                    out.append(c)
                continue
            if out and (self.picks_due or not self.strategy.ready):
                break  # the defaults are measured while the strategy gets ready
            if self.picks_due:
                self.picks_due = False
                t = time.perf_counter()
                picks = (self.strategy.template_picks()
                         or self.space.template_defaults(fallback=True))
                picks = sorted(picks, key=lambda c: self.space.template_of(c).name != LIBRARY)
                # and the library pick in cuDNN's other layouts right after it
                self.pending.extend(picks[:1] + library_twins(self.space, picks[0] if picks
                                                              else None) + picks[1:])
                self.timing[clock] += time.perf_counter() - t
                continue
            t = time.perf_counter()
            asked = self.strategy.ask(n - len(out))
            more = [c for c in asked if c not in out and self._fresh(c)]
            if not more and any(self._abandoned(c) for c in asked):
                # a strategy that keeps to an abandoned template (a policy's strong prior):
                # the rest of the batch drawn from the templates still in the search
                more = self._drawn(n - len(out), out)
            self.timing[clock] += time.perf_counter() - t
            if not more:
                break
            out.extend(more)
        out = out[:n]
        self.seen.update(out)  # taken: a batch asked for is measured next
        return out

    def _drawn(self, n: int, taken: list[Config]) -> list[Config]:
        """Up to `n` fresh configurations of templates not abandoned, drawn uniformly."""
        rng = random.Random(f"{self.seed}:{len(self.seen)}")
        out: list[Config] = []
        exclude = set(self.seen) | set(taken)
        for _ in range(64 * n):
            if len(out) == n:
                break
            c = self.space.draw(rng, exclude, tries=2000)
            if c is None:
                break
            exclude.add(c)
            if self._fresh(c):
                out.append(c)
        return out

    def note(self, trial: Trial) -> str | None:
        """Each measurement as it comes (an engine callback): a template's verdict takes effect
        within the batch, not a batch or two later (batches are asked ahead). The template's
        name where this measurement gives it up."""
        name = self.space.template_of(trial.config).name
        return name if self.verdicts.note(self._key(name), trial.measurement) \
            and self.given_up(name) else None

    def wanted(self, c: Config) -> bool:
        return not self._abandoned(c)

    def tell(self, results: list[tuple[Config, Measurement]]) -> None:
        self.strategy.tell(results)


class Tuner:
    """One problem, one device, one strategy."""

    def __init__(self, problem: Problem, settings: RunSettings, device: Device | None = None,
                 builder: Builder | None = None, store: Store | None = None,
                 notify: Callable[[str], None] = lambda s: None,
                 device_lock: Any = None,
                 on_setup: Callable[[str], None] | None = None,
                 started: float | None = None,
                 on_measured: Iterable[Callable[[Trial], None]] = ()) -> None:
        """`notify` receives notices a user must see (the simulator's fallback); `on_setup`,
        where given, a line once the GPU has set the problem up (`setup_notice`); `started`,
        the `time.monotonic()` instant the run began (the problem's loading included), from
        which the time limit counts (default: now): the set-up below (the device, the GPU's
        set-up for the problem, the strategy) is spent from the same seconds as the search;
        `on_measured`, callbacks on every measurement (after the store's: `measure_callbacks`)."""
        self._started: float | None = time.monotonic() if started is None else started
        check_settings(settings)
        # "default" runs as the best strategy on the measured evidence (`search/default.py`);
        # the settings keep the name asked for, the report both
        self.strategy_name, self.strategy_options = resolve_strategy(
            settings.strategy, settings.budget, settings.strategy_options)
        if is_agents(self.strategy_name):
            # the agents plan their episode over the run's budget: read from the settings
            # here, not copied into the options by each caller
            self.strategy_options.setdefault("budget", settings.budget)
        # "auto": as the user's torch runs each product once the problem file is imported
        # (the flags the loader's child saw, or this process's where the file was imported here)
        settings = resolve_settings_precision(
            settings, device.kind if device is not None else settings.device,
            problem.torch_flags)
        self.problem = problem
        self.settings = settings
        self.notify = notify
        # tuners sharing a device from several threads share this lock: one measurement (and
        # its store lookup and record) at a time, so timings never overlap on the GPU
        self.device_lock = device_lock or threading.RLock()
        self.phases = phases = Phases()
        with phases("plan"):
            self.plan = make_plan(problem.graph())
        if device is not None:  # (a device opened here is checked by open_device)
            check_precision(settings.precision, device.kind)
            check_tolerance(settings.tolerance, device.kind)
        with phases("open_device"):
            self.device = device or open_device(settings.device, settings, notify)
        self._own_device = device is None
        if isinstance(self.plan, ProgramPlan) and isinstance(self.device, ReplayDevice):
            if self._own_device:
                self.device.close()
            raise UnsupportedError("unsupported: replay of a multi-kernel program (sweeps "
                                   "record single-kernel spaces); use cuda or sim")
        try:
            with self.device_lock, phases("device_setup"):
                self.device.ensure(problem, self.plan)
        except Exception:  # a problem refused at set-up (too large, say): the worker goes too
            if self._own_device:
                self.device.close()
            raise
        if on_setup is not None and self.device.kind == "cuda":
            on_setup(setup_notice(problem.name, self.phases.as_dict().get("device_setup"),
                                     self.device.facts().get("memory")))
        # a multi-kernel program is searched one stage at a time (`space/program.py`)
        with phases("space"):
            self.space, self.stages = plan_space(self.plan, self.device, settings.precision)
        self.builder = builder or (None if isinstance(self.device, ReplayDevice) else
                                   Builder(settings.compiler, settings.workers,
                                           timeout_s=settings.compile_timeout_s))
        self._own_builder = builder is None
        # see TuneResult.timing
        self.timing = {"strategy_s": 0.0, "build_wait_s": 0.0, "strategy_ahead_s": 0.0}
        self.trials: list[Trial] = []  # the current run's, as measured (`run`)
        # the best so far, the space it was measured in, and the default's trial: kept on the
        # tuner as the search goes, so that an interrupted search still has them (`run`)
        self._best: Trial | None = None
        self._best_space: Space | None = None
        self._default: Trial | None = None
        self._deadline: float | None = None  # a time.monotonic() instant (`time_limit_s`)
        self._limit = StopRule()  # the run's time limit (`run`): bounds the strategy's work
        # the candidates measured so far: a program's stage search skips a configuration whose
        # whole program was measured already (by the programs measured first, say)
        self._measured_keys: set[str] = set()
        self.verdicts = TemplateVerdicts()  # templates given up on (`search/verdicts.py`)
        if isinstance(self.device, ReplayDevice):
            self.toolchain = self.device.toolchain()
        else:
            assert self.builder is not None  # made above for a device that compiles
            self.toolchain = self.builder.toolchain
        self.store = store or Store(settings.store or ":memory:")
        self._own_store = store is None
        self.problem_id = self.store.problem_id(problem.name, problem.source_hash,
                                                problem.graph().fingerprint(), self.plan.family)
        self.measure_callbacks: list[Callable[[Trial], None]] = [self._add_to_store,
                                                                 *on_measured]
        """what happens after each measurement, in order, under the device lock (one
        measurement at a time): the store keeps it first (a later lookup serves it), then the
        caller's (`on_measured`: a bench's notes of what each measurement cost)"""
        with phases("strategy"):
            self.strategy = make_strategy(self.strategy_name, self.space, seed=settings.seed,
                                          **self.strategy_options)

    # -- one batch --------------------------------------------------------------------------------
    def _build(self, configs: list[Config], deadline: float | None = None) -> list[Candidate]:
        """Render and compile; a candidate the deadline cut comes back with build error CUT
        (the search stops there: it is not measured and not recorded)."""
        rendered = [self.space.render(c) for c in configs]
        keys = [self.space.key(c, self.toolchain) for c in configs]
        if self.builder is None:
            return [Candidate(k, c, r, None) for k, c, r in zip(keys, configs, rendered)]
        target = self.device.target()
        builds = self.builder.build([BuildInput(r.source, target.arch) for r in rendered],
                                    deadline=deadline)
        return [Candidate(k, c, r, b.cubin_path, b.resources,
                          None if b.ok else (b.error_kind, b.error_msg), b.cubin_sha256)
                for k, c, r, b in zip(keys, configs, rendered, builds)]

    def _measured_with(self) -> str:
        """The store's toolchain field for measurements: the compiler's, and the device's
        timing protocol where it has one (a time taken another way is not served again)."""
        protocol = self.device.measure_protocol
        with_protocol = f"{self.toolchain}+{protocol}" if protocol else self.toolchain
        # a candidate accepted at a conformance tolerance is no verified result of the strict
        # protocol, nor of another tolerance: its records are kept apart
        tolerance = getattr(self.device, "verify_settings", None)
        tolerance = tolerance.tolerance if tolerance is not None else \
            parse_tolerance(self.settings.tolerance)
        return f"{with_protocol}+{tolerance.describe()}" if tolerance else with_protocol

    def _evaluate(self, cand: Candidate, best_ms: float | None) -> Measurement:
        self.device.ensure(self.problem, self.plan)  # a shared device may have moved on
        gpu = self.device.gpu_name()
        if self.device.kind != "replay":
            hit = self.store.lookup(cand.key, self.device.kind, gpu, self._measured_with())
            if hit is not None:
                return hit
        err = cand.build_error
        if err:
            return Measurement.failure(cand.key, self.device.kind, err[0] or "compile",
                                       err[1] or "", simulated=self.device.simulated)
        if self.device.kind == "replay" or cand.cubin_path:
            return self.device.evaluate(cand, best_ms)
        return Measurement.failure(cand.key, self.device.kind, "compile", "no binary")

    def _measurement(self, cand: Candidate, best_ms: float | None, index: int) -> Trial:
        """Measure `cand` (the engine calls this, under the device lock, then the callbacks on
        the measurement: `measure_callbacks` first)."""
        self._measured_keys.add(cand.key)
        m = self._evaluate(cand, best_ms)
        m.simulated = self.device.simulated
        return Trial(index, cand.config, self.space.template_of(cand.config).name, m,
                     cand.resources,
                     library=any(la.library for la in cand.rendered.launches))

    def _add_to_store(self, trial: Trial) -> None:
        """The store's callback: the measurement, its candidate (`Measurement.key`, the
        candidate's content key), and which agent chose what (a failure can be traced to the
        agents' choices)."""
        agents: dict[str, dict[str, Any]] = {}
        for slot, value in trial.config.present().items():
            agents.setdefault(slot.split(".", 1)[0], {})[slot] = value
        self.store.record(self.problem_id, trial.measurement.key, trial.template,
                          trial.config.as_dict(), trial.measurement, self.device.gpu_name(),
                          self._measured_with(), self.strategy_name, trial.resources, agents)

    def engine(self, proposer: Proposer, rule: StopRule, batch: int | None = None,
               on_measured: Iterable[Callable[[Trial], None]] = (),
               best_ms: Callable[[], float | None] = lambda: None,
               index: Callable[[], int] | None = None,
               timing: dict[str, float] | None = None) -> Engine:
        """The search loop over this tuner's space, builder, device and store: `proposer`
        asked for batches of `batch` (default: the settings'), each configuration built
        (cut at `rule`'s time limit), measured on the device with `best_ms()` the time to
        beat, and kept by the store then by `on_measured`; `rule` says when it ends. Every
        search of a tuner runs through this (its own, training's episodes, Kernel Tuner's in
        the live bench)."""
        counted = itertools.count(1)
        return Engine(proposer, lambda configs: self._build(configs, rule.deadline),
                      lambda cand: self._measurement(
                          cand, best_ms(), index() if index is not None else next(counted)),
                      rule, batch or self.settings.batch,
                      [*self.measure_callbacks, *on_measured], self.device_lock, timing)

    def measure(self, configs: list[Config], rule: StopRule | None = None) -> list[Trial]:
        """Build and measure `configs` as one batch (through the engine: `Listed`), in order
        under `rule` (by default only Ctrl-C stops it), up to and including the measurement
        after which it says stop."""
        if not configs:
            return []
        engine = self.engine(Listed(configs), rule or StopRule(), batch=len(configs))
        engine.run()
        return engine.measured


    # -- the loop ---------------------------------------------------------------------------------
    def run(self, progress: Callable[[Trial, "Trial | None"], None] | None = None) -> TuneResult:
        """Search, then time the baselines. Ctrl-C (KeyboardInterrupt) during the search ends
        it: the result holds what was measured, with `stopped` "interrupted" (no baselines)."""
        t0 = time.perf_counter()
        s = self.settings
        # kept on the tuner: a caller whose run raised can still read what was measured
        trials = self.trials = []
        self._measured_keys = set()
        self._best = self._default = None
        self._best_space = None
        self.verdicts = TemplateVerdicts()
        # counted from the run's start (the first run: the Tuner's creation or `started`)
        begun, self._started = self._started or time.monotonic(), None
        self._deadline = begun + s.time_limit_s if s.time_limit_s is not None else None
        self._limit = StopRule(deadline=self._deadline)
        try:
            with self.phases("search"):
                if not self.stages:
                    stopped = self._search(s.budget, s.include_default, trials, None, progress)
                else:
                    stopped = self._search_stages(trials, progress)
        except KeyboardInterrupt:
            stopped = "interrupted"
        # the space the best was measured in renders it exactly (emit, reports)
        if self._best_space is not None:
            self.space = self._best_space
        baselines = Baselines()
        if s.baselines and stopped != "interrupted":
            try:
                # each at PyTorch's defaults (the headline) and under the kernels' contract
                with self.phases("baselines"):
                    baselines = self.device.baselines(with_matched(("eager", "compile")
                                                                   + cudnn_baselines(self.plan)))
            except KeyboardInterrupt:  # the search's result is kept, without baselines
                stopped = "interrupted"
        facts = self.device.facts()
        return TuneResult(self.problem, self.plan, self.space, self.device, s, trials, baselines,
                          self._default, self._best, self.toolchain, time.perf_counter() - t0,
                          facts, dict(self.builder.stats) if self.builder else {},
                          dict(self.timing), stopped,
                          None if self._deadline is None else
                          max(self._deadline, time.monotonic()) + COUNT_GRACE_S,
                          self.strategy_name, self.phases.as_dict(), self.store.report())

    def _search_stages(self, trials: list[Trial],
                       progress: Callable[[Trial, "Trial | None"], None] | None) -> str:
        """Coordinate search over a program's stages: each stage's space in turn, the others
        fixed at their best so far. Each stage gets an even share of what is left, of the
        budget and of the time limit's seconds; one that has settled (`StagePlateau`), run out
        of configurations or of its seconds hands the rest on, and while a round of the stages
        brought progress and measurements are left, another round searches them again
        (`StageSchedule`). (Without the split of the seconds the first stages of a time-limited search
        take it all and the later ones keep their untuned defaults: docs/journal.md,
        tuner.py.) The search starts from
        `_start_program`'s programs (the untuned baseline, every stage at its model pick);
        each later stage starts from the best. Returns why the search ended."""
        s = self.settings
        schedule = StageSchedule(s.budget, len(self.stages), s.stage_patience, self._deadline)
        start, started = len(trials), time.monotonic()
        fixed, stopped = self._start_program(trials, progress)
        best = self._best
        if stopped == "time_limit":
            return stopped

        def stage(i: int, budget: int, until: float | None, rounds: int) -> str:
            nonlocal best, fixed
            self.space = StageSpace.of(self._program(), i, self.stages, fixed)
            # a later round's strategy is seeded apart: its proposals are not the first
            # round's again (those are measured: `_search` skips them)
            made, strategy = self._limit.bounded(functools.partial(
                make_strategy, self.strategy_name, self.space,
                seed=s.seed + i + rounds * len(self.stages), **self.strategy_options))
            if not made:
                return "time_limit"
            self.strategy = strategy
            first = len(trials)
            try:
                stopped = self._search(budget, s.include_default, trials, best, progress,
                                       schedule.plateau(i, best.measurement.time_ms
                                                        if best else None), until)
            finally:
                for t in trials[first:]:
                    t.stage = i
            if self._best is not None and self._best is not best:
                best = self._best
                fixed = self.space.with_choice(best.config)
            return stopped

        # the first stage's shares count from the start: the programs measured first are its
        # candidates too
        return schedule.run(lambda: len(trials), stage, base=start, first=(start, started),
                            best_ms=lambda: best.measurement.time_ms if best else None) \
            or stopped

    def _start_program(self, trials: list[Trial],
                       progress: Callable[[Trial, "Trial | None"], None] | None
                       ) -> tuple[list[Config], str]:
        """A program's first measurements, before its stages are searched: the untuned
        baseline (every stage's default, where the settings include it), then every stage at
        the library floor (every heavy stage on cuDNN/cuBLAS, `library_pick`, the others at
        their picks where modelled by then), then every stage at the strategy's model pick
        (`Strategy.stage_pick`, modelled while the baseline runs), where the strategy has a
        model. Returns the stages' configurations the search starts from (the fastest program
        that verified; the defaults where none did) and "time_limit" where the time ran out,
        else "".

        Why the picks: every candidate of a stage is timed as the whole program, so while the
        first stage is searched the later ones run their untuned defaults, and a time-limited
        search may never reach them (docs/journal.md: tuner.py). Measured as one program
        first, a pick that fails costs one candidate, not every candidate of the first stage."""
        s = self.settings
        first = len(trials)
        defaults = [sp.default() for sp in self.stages]
        floors_ready: Future = Future()

        def model_picks() -> list[Config | None]:
            try:
                probe = make_strategy(self.strategy_name,
                                      StageSpace.of(self._program(), 0, self.stages, defaults),
                                      seed=s.seed, **self.strategy_options)
                # the library's configurations are few: modelled first, and handed over at
                # once, so that the floor waits for no whole stage's modelling
                floors_ready.set_result([library_pick(probe, sp) for sp in self.stages])
            except BaseException as exc:
                if not floors_ready.done():
                    floors_ready.set_exception(exc)
                raise
            return [probe.stage_pick(sp) for sp in self.stages]

        # modelled while the baseline is measured; on a daemon thread, so that a run the time
        # limit ends is not held until the modelling ends
        ahead = in_background(model_picks, name="cuda-agent-picks")
        if s.include_default and self._measure_program(defaults, trials, progress) is None:
            return defaults, "time_limit"
        measured = [defaults]

        def measure(program: list[Config]) -> bool:
            """Measure `program` unless measured already or the budget is spent; False where
            the time limit came first."""
            if program in measured or len(trials) - first >= s.budget:
                return True
            measured.append(program)
            return self._measure_program(program, trials, progress) is not None

        # the library floor next: cuBLAS/cuDNN for every heavy stage, the model's picks around
        # it, so that no search ends slower than "library + fused epilogue" for want of time.
        # The picks are waited for up to half the time left (all of it without a limit: a
        # seeded search measures the same programs every time); past that, the floor runs the
        # other stages at their defaults rather than not at all
        t = time.perf_counter()
        left = self._limit.left()
        futures_wait([ahead], timeout=None if left is None else left / 2)
        futures_wait([floors_ready], timeout=self._limit.left())
        self.timing["strategy_s"] += time.perf_counter() - t
        if not floors_ready.done():
            return defaults, "time_limit"
        floors = floors_ready.result()
        picks = ahead.result() if ahead.done() else [None] * len(defaults)
        floor = [lib if lib is not None else p if p is not None else d
                 for lib, p, d in zip(floors, picks, defaults)]
        if not measure(floor):
            return defaults, "time_limit"
        # the same floor in cuDNN's other layouts (`library_twins`), every library stage at
        # once: one program per layout
        twins = [library_twins(sp, lib) for sp, lib in zip(self.stages, floors)]
        for k in range(max((len(t) for t in twins), default=0)):
            program = [t[k] if k < len(t) else f for t, f in zip(twins, floor)]
            if not measure(program):
                return defaults, "time_limit"
        t = time.perf_counter()
        futures_wait([ahead], timeout=self._limit.left())
        self.timing["strategy_s"] += time.perf_counter() - t
        if not ahead.done():
            return self._started_from(defaults), "time_limit"
        picks = ahead.result()
        if not measure([p if p is not None else d for p, d in zip(picks, defaults)]):
            return self._started_from(defaults), "time_limit"
        return self._started_from(defaults), ""

    def _started_from(self, defaults: list[Config]) -> list[Config]:
        """The program the stages' search starts from: the best measured so far, else the
        defaults."""
        if self._best is None or self._best_space is None:
            return defaults
        assert isinstance(self._best_space, StageSpace)  # a program's stages are searched
        return self._best_space.with_choice(self._best.config)

    def _program(self) -> ProgramPlan:
        return as_program(self.plan)

    def _measure_program(self, fixed: list[Config], trials: list[Trial],
                         progress: Callable[[Trial, "Trial | None"], None] | None
                         ) -> Trial | None:
        """Build and measure one whole program (stage 0's space with `fixed` for every stage)
        and keep it as `_search` keeps a candidate: the best so far, and the untuned default
        where it is the first measured with the default included. None where the time limit
        came first."""
        self.space = StageSpace.of(self._program(), 0, self.stages, fixed)
        first = len(trials)
        engine = self._engine(Listed([fixed[0]]), StopRule(deadline=self._deadline), trials,
                              progress, lambda: self.settings.include_default)
        engine.run()
        if len(trials) == first:  # the time limit came first
            return None
        trial = trials[-1]
        trial.stage = 0
        return trial

    def _keep(self, trials: list[Trial], as_default: Callable[[], bool]
              ) -> Callable[[Trial], None]:
        """The callback that keeps each measurement of the tuner's own search: the next trial,
        the untuned default where `as_default()` says so and none is kept yet, the best (in
        `self.space`) where faster."""
        def keep(trial: Trial) -> None:
            default = as_default()
            trials.append(trial)
            if default and self._default is None:
                self._default = trial
            best_ms = self._best.measurement.time_ms if self._best else None
            m = trial.measurement
            if m.ok and m.time_ms is not None and (best_ms is None or m.time_ms < best_ms):
                self._best, self._best_space = trial, self.space
        return keep

    def _engine(self, proposer: Proposer, rule: StopRule, trials: list[Trial],
                progress: Callable[[Trial, "Trial | None"], None] | None,
                as_default: Callable[[], bool]) -> Engine:
        """The tuner's own search loop: measured against the best so far, each measurement
        kept (`_keep`), then shown (`progress`)."""
        shown = [] if progress is None else [lambda t: progress(t, self._best)]
        # a template's verdict as each measurement comes (`StrategyProposer.note`)
        noted = [self._noting(proposer)] if isinstance(proposer, StrategyProposer) else []
        return self.engine(
            proposer, rule, on_measured=[self._keep(trials, as_default), *noted, *shown],
            best_ms=lambda: self._best.measurement.time_ms if self._best else None,
            index=lambda: len(trials) + 1, timing=self.timing)

    def _noting(self, proposer: StrategyProposer) -> Callable[[Trial], None]:
        """`proposer.note`, saying once which template it gives up on and why."""
        def note(trial: Trial) -> None:
            name = proposer.note(trial)
            if name is not None:  # (the last template left is still searched: not given up)
                stage = proposer.stage
                where = "" if stage is None else f" (stage {stage})"
                self.notify(f"template {name}{where}: {self.verdicts.limit} candidates failed "
                            f"verification and none passed ({trial.measurement.error_msg}); "
                            "not proposed again")
        return note

    def _search(self, budget: int, include_default: bool, trials: list[Trial],
                best: Trial | None,
                progress: Callable[[Trial, "Trial | None"], None] | None,
                plateau: StagePlateau | None = None, until: float | None = None) -> str:
        """The ask/tell loop (`search.engine`) over `self.space` with `self.strategy`: appends
        to `trials`, keeps the best (starting from `best`) and the default's trial on the
        tuner (`_best`, `_best_space`, `_default`: an interrupted search still has them), and
        returns why it ended (`STOPPED`). With `plateau` (a program's stage), it stops once
        that says the stage has settled; with `until` (a stage's share of the time limit,
        monotonic seconds), once that has passed and the stage measured something ("plateau":
        the rest goes to the next stage). The time limit is checked before every measurement,
        and compiles still running when it comes are stopped."""
        first = len(trials)
        # the untuned baseline first, then one configuration of every template: a template
        # that is a small share of the space (the tensor-core GEMM's hundreds among tens of
        # thousands) is measured at least once, whatever the strategy samples. Which one:
        # the strategy's model's fastest of each where it has a model, else each template's
        # default (a time-limited search measures little beyond these: docs/journal.md,
        # tuner.py)
        pending: list[Config] = [self.space.default()] if (
            include_default and best is None and self._default is None) else []
        seen: set[Config] = set()
        if best is not None and isinstance(self.space, StageSpace):
            # a program's later stage starts from the best program, which holds this stage's
            # configuration so far (its default): measured again it would be the same
            # program, a slot of the budget for nothing
            seen.add(self.space.fixed[self.space.stage])
        space = self.space

        def measured_before(c: Config) -> bool:
            """In a program's stage, a whole program measured before (the first programs, an
            earlier stage)."""
            return isinstance(space, StageSpace) and \
                space.key(c, self.toolchain) in self._measured_keys

        proposer = StrategyProposer(self.strategy, self.space, pending, include_default, seen,
                                    measured_before, self.timing, self.verdicts,
                                    self.settings.seed)
        engine = self._engine(proposer, StopRule(budget, self._deadline, plateau, until),
                              trials, progress,
                              lambda: include_default and len(trials) == first)
        return engine.run()


    def close(self) -> None:
        if self._own_builder and self.builder is not None:
            self.builder.close()
        if self._own_device:
            self.device.close()
        if self._own_store:
            self.store.close()


def _warn(message: str) -> None:
    """`tune()`'s default notice: a warning, so that a script's user sees it (the CLI prints
    its notices itself)."""
    warnings.warn(message, SimulatedDeviceWarning if "simulated" in message else UserWarning,
                  stacklevel=2)


def tune(problem: str | Path | Problem, out: str | Path | None = None,
         progress: Callable[[Trial, Trial | None], None] | None = None,
         notify: Callable[[str], None] | None = None, settings: RunSettings | None = None,
         shared_device: Device | None = None, **options: Any) -> TuneResult:
    """Python API: tune one problem file; with `out`, write model_new.py, kernel.cu, report.json.

    Options are `RunSettings` fields, e.g. ``tune("softmax.py", device="sim", budget=32)``;
    or pass `settings` whole (options then replace its fields). As the CLI's `tune`:

    * the store is the CLI's (`store.default_store()`: $CUDA_AGENT_HOME/store.sqlite, else
      ~/.cache/cuda-agent/store.sqlite), so measurements are shared with `cuda-agent`;
      ``store=":memory:"`` keeps nothing;
    * `out` is checked before the search (`OutputError` if it cannot be written);
    * the search stops after `time_limit_s` (default 1800; None: no limit) with the best
      found so far (`result.stopped == "time_limit"`);
    * without a GPU it runs on the simulated device and says so: a `SimulatedDeviceWarning`
      (pass `notify` to receive such notices yourself);
    * Ctrl-C ends the search, writes the best so far to `out` (the report marked
      interrupted), then raises KeyboardInterrupt as usual.

    No `if __name__ == "__main__":` guard is needed in the calling script: the worker processes
    do not re-import it (`procs.py`).

    `shared_device` (an `open_device`, left open): measure on it rather than open a device of
    its own, as a whole model's regions do (one GPU worker for all of them).
    """
    started = time.monotonic()  # the time limit counts from here: loading the problem too
    if settings is None:
        options.setdefault("store", default_store())
        settings = RunSettings(**options)
    elif options:
        settings = replace(settings, **options)
    check_settings(settings)  # before the problem is loaded: a bad setting costs nothing
    if out is not None:
        from .outputs import check_out_dir

        check_out_dir(out)
    prob = problem if isinstance(problem, Problem) else load_problem_bounded(
        problem, LoadLimits.of_run(settings))
    with naming_file(prob.path):  # the planner's and the spaces' refusals name the file
        tuner = Tuner(prob, settings, notify=notify or _warn, started=started,
                      device=shared_device)
    try:
        result = tuner.run(progress)
        if out is not None:
            from .emit import emit

            emit(result, Path(out))
    finally:
        tuner.close()
    if result.interrupted:
        raise KeyboardInterrupt
    return result
