"""`cuda-agent bench --device cuda` (or `sim`): every strategy measured live, in one run.

Per problem, on one device and one compile cache:

* torch eager, torch.compile and torch.compile(mode="max-autotune"), with and without CUDA
  graphs, timed by the same worker with the same protocol as the kernels;
* each strategy (ours through the ask/tell loop, Optuna's TPE, Kernel Tuner's own strategies
  through its real API) searching the problem's full template space at the same measurement
  budget; Kernel Tuner asks for a configuration and cuda-agent's runner measures it then
  (`search/kernel_tuner_sim.run_live`);
* where a sweep of the space was recorded, its best configurations measured again in this run,
  so "the optimum" the metrics count against is a time of this run.

A multi-kernel program (`space/program.py`) is searched one stage at a time by every strategy:
the ask/tell ones through the tuner's own coordinate search, Kernel Tuner (which tunes one
kernel's parameters) given each stage's space in turn with the same budget shares and the same
hand-over of a settled stage (`_ProblemBench._kernel_tuner_stages`, `space/program.StagePlateau`);
every candidate is the whole program, timed end to end.

Every strategy of a problem shares one measurement store: a configuration two strategies ask
for is measured once and both are served that measurement (common random numbers: the
comparison is not decided by which strategy drew the noisier timing of the same kernel). Each
strategy's count is the number of configurations it asked for, as on `replay`; its cost is the
evaluation time those measurements took when first made (`Run.measured_s`), so that sharing
does not make a later strategy look faster.

With `--parallel N` a problem's strategy runs search N at once: the compiling and the
strategies' own work overlap, the measurements do not (one lock per problem around the device
and the store: a configuration two runs ask for is still measured once, by whichever asks
first). Kernel Tuner's searches then run in processes of their own
(`kernel_tuner_ask.KernelTunerProposer(isolated=True)`): its strategies draw from process-wide
generators.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

from .bench import (KERNEL_TUNER, BenchResult, BenchSettings, Policies, Run, check_settings,
                    is_kernel_tuner, jobs_of, problem_files, provenance, strategy_settings)
from .build.builder import Builder
from .errors import (CudaAgentError, DeviceError, ProblemError, SettingsError,
                     UnsupportedError, first_line)
from .ir.partition import ProgramPlan, as_program
from .ir.plan import KernelPlan
from .ir.planning import make_plan
from .problem import Problem
from .problem_child import LoadLimits, load_problem_bounded
from .runner.baselines import Baselines, with_matched
from .runner.devices import Device, cudnn_baselines
from .runner.replay import find_sweep, read_sweep
from .costmodel.folds import FoldConstants
from .search.kernel_tuner_ask import KernelTunerProposer
from .search.stop import StageSchedule, StopRule
from .space.program import StagePlateau, StageSpace
from .space.slots import Config
from .store import TRANSIENT_KINDS, Store
from .tuner import Tuner, Trial, open_device

BASELINES = ("eager", "compile", "compile:max-autotune", "compile:max-autotune-no-cudagraphs")
"""max-autotune turns on CUDA graphs, whose replay copies each new input into the graph's static
buffers; the protocol feeds fresh inputs every call, so the same mode without graphs is timed
too: it measures the kernels max-autotune picks"""
SWEEP_TOP = 3
"""recorded configurations re-measured per swept problem (the recorded best and runners-up:
timing noise between runs can reorder them)"""


def _times(trials: list[Trial]) -> list[float | None]:
    return [t.measurement.time_ms if t.measurement.ok else None for t in trials]


def _timed(phases: dict[str, float], phase: str, fn: Callable[[], Any]) -> Any:
    """fn(), its wall seconds recorded under `phase`."""
    t0 = time.perf_counter()
    try:
        return fn()
    finally:
        phases[phase] = time.perf_counter() - t0


def _measured_s(trials: list[Trial], first_cost: dict[str, float]) -> float:
    """Evaluation seconds of these trials: a measurement made for them costs its own time, a
    reused one what it cost the strategy that made it."""
    return sum(first_cost.get(t.measurement.key, t.measurement.wall_s) if t.measurement.reused
               else t.measurement.wall_s for t in trials)


class _ProblemBench:
    """One problem on the shared device: its store, its measurer, its strategies' runs."""

    def __init__(self, problem: Problem, plan: KernelPlan | ProgramPlan, settings: BenchSettings,
                 device: Device, builder: Builder, policy: str | None = None,
                 single_policy: str | None = None, sim_constants: str | None = None) -> None:
        self.problem = problem
        self.sim_constants = sim_constants  # the model's constants (`BenchSettings`)
        self.policy = policy  # the agents' checkpoint for this problem (`Policies.pick`)
        self.single_policy = single_policy  # marl_single's (`BenchSettings.single_policy`)
        self.plan = plan
        self.settings = settings
        self.device = device
        self.builder = builder
        self.store = Store(":memory:")
        self.device_lock = threading.RLock()  # every tuner of the problem measures through it
        self.first_cost: dict[str, float] = {}
        self.ok_times: list[float] = []
        self.measurer = self._tuner("random", 0)

    def _tuner(self, strategy: str, seed: int) -> Tuner:
        policy = self.single_policy if strategy == "marl_single" else self.policy
        s = strategy_settings(self.settings, self.device, strategy, seed, policy,
                              self.sim_constants)
        return Tuner(self.problem, s, device=self.device, builder=self.builder, store=self.store,
                     device_lock=self.device_lock, on_measured=[self._note])

    def _note(self, t: Trial) -> None:
        """Every tuner's callback on a measurement of this problem: what it cost when first
        made (what the store will serve to the strategies that ask for it later), and its
        time where it verified (the problem's best)."""
        m = t.measurement
        if not m.reused and m.error_kind not in TRANSIENT_KINDS:
            self.first_cost.setdefault(m.key, m.wall_s)
        if m.ok and m.time_ms is not None:
            self.ok_times.append(m.time_ms)

    def measure(self, configs: list[Config]) -> list[Trial]:
        return self.measurer.measure(configs)

    def run_strategy(self, strategy: str, seed: int) -> tuple[Run, list[Trial]]:
        """One strategy run and its trials; its `measured_s` is filled by `finish` once every
        run of the problem is done (with runs side by side, the run that first made a
        measurement another reuses may end later)."""
        t0, error = time.perf_counter(), None
        timing: dict[str, float] = {}  # ask/tell strategies: where the time went
        if is_kernel_tuner(strategy):
            if isinstance(self.plan, ProgramPlan):
                trials, error = self._kernel_tuner_stages(strategy, seed)
            else:
                trials, error = self._kernel_tuner(self.measurer, strategy,
                                                   self.settings.run.budget, seed)
        else:
            tuner = self._tuner(strategy, seed)
            try:
                res = tuner.run()
                if res.interrupted:  # the tuner keeps a search Ctrl-C ended; a bench stops
                    raise KeyboardInterrupt
                trials, timing = res.trials, res.timing
            except DeviceError:
                raise  # the device is gone: no strategy can go on
            except Exception as exc:  # noqa: BLE001 - one strategy's failure is data, as a
                # peer's is: its run keeps what it measured, the bench goes on with the rest
                trials, timing = list(tuner.trials), dict(tuner.timing)
                error = first_line(exc)
            finally:
                tuner.close()
        return Run(self.problem.name, strategy, seed, _times(trials), time.perf_counter() - t0,
                   None, timing.get("strategy_s"), timing.get("build_wait_s"), error,
                   [t.config.short() if t.stage is None else f"s{t.stage}:{t.config.short()}"
                    for t in trials]), trials

    def _kernel_tuner(self, measurer: Tuner, strategy: str, budget: int, seed: int,
                      plateau: StagePlateau | None = None) -> tuple[list[Trial], str | None]:
        """Kernel Tuner's strategy over `measurer`'s space through its real API, as the search
        loop's proposer (`kernel_tuner_ask`): each batch Kernel Tuner asks for is measured by
        `measurer`'s loop; the trials in Kernel Tuner's order, and its own error if it stopped
        with one. With `plateau` (a program's stage), the loop ends once that says the stage
        has settled, as cuda-agent's own search does (the trials then in measurement order)."""
        warm = None
        if strategy.startswith("kt_warm:"):  # the model's top picks measured first
            from .search.prior_rank import WARM_PICKS, top_picks

            warm = top_picks(measurer.space, WARM_PICKS, self.sim_constants)
        # with runs side by side, in a process of its own: its strategies draw from
        # process-wide generators
        proposer = KernelTunerProposer(measurer.space.configs, strategy.split(":", 1)[1],
                                       budget, seed, warm, isolated=self.settings.parallel > 1)
        engine = measurer.engine(proposer, StopRule(budget, plateau=plateau), batch=budget)
        try:
            engine.run()
        finally:
            ended = proposer.close()
        trials: list[Trial] = engine.measured
        if ended is None:  # the stage settled: what it asked for so far
            return trials, None
        order, error = ended
        by_config = {t.config: t for t in trials}
        return [by_config[c] for c, _ in order], error

    def _kernel_tuner_stages(self, strategy: str, seed: int) -> tuple[list[Trial], str | None]:
        """Kernel Tuner on a multi-kernel program: it tunes one kernel's parameters, so it is
        given the program one stage at a time, as cuda-agent's own search does
        (`Tuner._search_stages`): each stage an even share of what is left, handed on when it
        settles, each stage's space searched with the other stages at their best so far (at
        first their defaults; warm, the model's picks where that program verifies), every
        candidate timed end to end. A stage where its strategy
        stops with an error keeps what it measured, and the next stage is still searched (the
        error is reported)."""
        measurer = self._tuner("random", seed)  # its own: its space moves from stage to stage
        stages, budget = measurer.stages, self.settings.run.budget
        n = len(stages)
        fixed = [sp.default() for sp in stages]
        trials: list[Trial] = []
        errors: list[str] = []
        best_ms = float("inf")
        try:
            if strategy.startswith("kt_warm:"):
                # warm like cuda-agent's own strategies (`Tuner._start_program`): every stage
                # at the model's pick, measured as one program, and where it verifies the
                # stages are searched from it
                from .search.prior_rank import model_pick

                picks = [model_pick(sp, self.sim_constants) or d for sp, d in zip(stages, fixed)]
                if picks != fixed:
                    measurer.space = StageSpace.of(as_program(self.plan), 0, stages, picks)
                    got = measurer.measure([picks[0]])
                    for t in got:
                        t.stage = 0
                    trials += got
                    m = got[0].measurement if got else None
                    if m is not None and m.ok and m.time_ms is not None:
                        best_ms, fixed = m.time_ms, picks
            schedule = StageSchedule(budget, n, measurer.settings.stage_patience)

            def stage(i: int, share: int, until: float | None, rounds: int) -> str:
                nonlocal best_ms, fixed
                measurer.space = StageSpace.of(as_program(self.plan), i, stages, fixed)
                plateau = schedule.plateau(i, best_ms if best_ms < float("inf") else None)
                got, error = self._kernel_tuner(measurer, strategy, share,
                                                seed + i + rounds * n, plateau)
                if error:
                    errors.append(f"stage {i}: {error}")
                for t in got:
                    t.stage = i
                trials.extend(got)
                ok = [(t, t.measurement.time_ms) for t in got
                      if t.measurement.ok and t.measurement.time_ms is not None]
                if ok:
                    top, top_ms = min(ok, key=lambda t_ms: t_ms[1])
                    if top_ms < best_ms:
                        best_ms = top_ms
                        fixed = measurer.space.with_choice(top.config)
                return ""

            # (the warm program measured first counts before stage 0's share, where the
            # tuner's own search counts its first programs in it: `Tuner._search_stages`)
            schedule.run(lambda: len(trials), stage,
                         best_ms=lambda: best_ms if best_ms < float("inf") else None)
        finally:
            measurer.close()
        return trials, "; ".join(errors) or None

    def finish(self, done: list[tuple[Run, list[Trial]]]) -> list[Run]:
        for run, trials in done:
            run.measured_s = _measured_s(trials, self.first_cost)
        return [run for run, _ in done]

    def sweep_reference(self) -> float | None:
        """Measure the recorded sweep's best configurations again; the recorded best time.
        None for a multi-kernel program: its sweep is stage by stage, each stage's records
        timed with the other stages where that sweep had them, not where this run has them."""
        if isinstance(self.plan, ProgramPlan):
            return None
        try:
            root = self.settings.run.replay_root
            sweep = read_sweep(find_sweep(self.problem, Path(root) if root else None))
        except CudaAgentError:
            return None
        ok = sorted((r for r in sweep["records"] if r.get("ok") and r.get("time_ms")),
                    key=lambda r: r["time_ms"])
        configs = []
        for r in ok:
            cfg = self.measurer.space.upgrade(r["config"])
            if cfg is not None and cfg not in configs:
                configs.append(cfg)
            if len(configs) == SWEEP_TOP:
                break
        if configs:
            self.measure(configs)
        return ok[0]["time_ms"] if ok else None

    def space_size(self) -> int:
        """Configurations a search of the problem can draw from (a program: every stage's)."""
        stages = self.measurer.stages
        return sum(len(sp.configs) for sp in stages) if stages else len(
            self.measurer.space.configs)

    def close(self) -> None:
        self.measurer.close()
        self.store.close()


def _run_strategies(bench: _ProblemBench, jobs: list[tuple[str, int]], started: float,
                    notify: Callable[[str], None],
                    progress: Callable[[str, str, int], None] | None
                    ) -> tuple[list[tuple[Run, list[Trial]]], str | None]:
    """The problem's strategy runs, `parallel` at once, in `jobs`' order; and why the problem
    was given up, if it was (no run is started after its time limit)."""
    limit = bench.settings.problem_seconds
    late: list[float] = []  # when the first run was refused its start

    def one(job: tuple[str, int]) -> tuple[Run, list[Trial]] | None:
        spent = time.perf_counter() - started
        if late or (limit is not None and spent > limit):
            late.append(spent)
            return None
        strategy, seed = job
        run, trials = bench.run_strategy(strategy, seed)
        notify(f"{bench.problem.name} {strategy} seed {seed}: {len(run.times)} "
               f"measurements in {run.seconds:.1f} s")
        if progress:
            progress(bench.problem.name, strategy, seed)
        return run, trials

    if bench.settings.parallel > 1:
        with ThreadPoolExecutor(bench.settings.parallel) as pool:
            outs = list(pool.map(one, jobs))
    else:
        outs = []
        for job in jobs:
            outs.append(one(job))
            if late:
                break
    done = [o for o in outs if o is not None]
    return done, (f"given up after {late[0]:.0f} s (limit {limit:g} s), {len(done)} strategy "
                  "runs done: the strategies are compared on the same problems only"
                  if late else None)


def run_live_bench(settings: BenchSettings,
                   progress: Callable[[str, str, int], None] | None = None,
                   notify: Callable[[str], None] = lambda s: None,
                   on_problem: Callable[[BenchResult], None] | None = None,
                   skipped: Callable[[str, int], None] | None = None) -> BenchResult:
    """Every strategy of `settings` on every problem of the suite, measured on its run's
    device (`settings.run.device`: cuda or sim) in this run. `progress(problem, strategy,
    seed)` follows each strategy run, `skipped(problem, runs)` the runs of a problem that will
    not be made;
    `on_problem` sees the result after each problem (the CLI keeps it on disk, so a run
    stopped from outside, or by Ctrl-C, keeps what it finished)."""
    device_name = settings.run.device
    if device_name not in ("cuda", "sim"):
        raise SettingsError(f"live bench runs on cuda or sim, not {device_name!r}")
    check_settings(settings, device_name)
    files = problem_files(settings.suite)
    if any(is_kernel_tuner(s) for s in settings.strategies):
        try:
            import kernel_tuner  # noqa: F401 - before any GPU time is spent
        except ImportError:
            raise SettingsError("Kernel Tuner strategies need kernel_tuner: "
                                "pip install cuda-agent[tuners]") from None
    result = BenchResult(settings, date=time.strftime("%Y-%m-%d"), provenance=provenance(),
                         live=device_name)
    policies, single = Policies(settings.policy), Policies(settings.single_policy)
    folds = FoldConstants(settings.sim_constants)
    result.trained_on = policies.trained_on()
    run = settings.run
    device = open_device(device_name, run, notify)
    builder = Builder(run.compiler, run.workers, timeout_s=run.compile_timeout_s)
    jobs = jobs_of(settings)
    try:
        for path in files:
            try:
                problem = load_problem_bounded(path, LoadLimits.of(  # user code: bounded
                    run.import_timeout_s, None, run.import_memory_bytes))
                plan = make_plan(problem.graph())
            except (ProblemError, UnsupportedError) as exc:
                # one bad file in a suite is reported, not the end of an hours-long run
                result.skipped[path.stem] = first_line(exc)
                notify(f"{path.name}: not compared ({first_line(exc)})")
                if skipped:
                    skipped(path.stem, len(jobs))
                continue
            # where a problem's wall time goes (a live bench of a whole suite takes hours);
            # the device is set up for the problem as its first tuner is made
            phase_s: dict[str, float] = {}
            try:
                bench = _timed(phase_s, "setup", lambda: _ProblemBench(
                    problem, plan, settings, device, builder, policies.pick(problem.name),
                    single.pick(problem.name), folds.pick(problem.name)))
            except DeviceError as exc:
                # a problem the worker cannot set up (refused, or its reference failed) is
                # reported and the suite goes on (the device restarts its worker), rather than
                # ending the bench (docs/journal.md: bench_live.py)
                result.skipped[problem.name] = first_line(exc)
                notify(f"{problem.name}: not compared ({first_line(exc)})")
                if skipped:
                    skipped(problem.name, len(jobs))
                if on_problem:
                    on_problem(result)
                continue
            started = time.perf_counter()
            try:
                # each at PyTorch's defaults (the headline) and under the kernels' contract
                base = _timed(phase_s, "baselines", lambda: device.baselines(
                    with_matched(BASELINES + cudnn_baselines(plan))) if run.baselines
                    else Baselines(notes={b: "not measured: --no-baselines"
                                          for b in with_matched(BASELINES)}))
                sweep_best = _timed(phase_s, "recorded_best", bench.sweep_reference)
                notify(f"{problem.name}: " + ", ".join(f"{k} {v:.1f} s"
                                                        for k, v in phase_s.items()))
                done, late = _run_strategies(bench, jobs, started, notify, progress)
                if skipped and len(done) < len(jobs):  # given up: the rest are not made
                    skipped(problem.name, len(jobs) - len(done))
                runs = bench.finish(done)
                if late or not bench.ok_times:
                    result.skipped[bench.problem.name] = late or "no configuration verified"
                    notify(f"{problem.name}: not compared ({result.skipped[problem.name]})")
                    continue
                result.runs += runs
                result.problems[bench.problem.name] = {
                    "family": bench.plan.family, "best_ms": min(bench.ok_times),
                    "optimum": "this run" + (f" (with the recorded sweep's best {SWEEP_TOP} "
                                             "measured again)" if sweep_best else ""),
                    "recorded": bench.space_size(),
                    # eager_ms, compile_ms, ... at the defaults; *_matched_ms; baseline_settings
                    **base.fields(),
                    "baseline_notes": base.notes, "sweep_best_recorded_ms": sweep_best,
                    "bytes": bench.plan.bytes_moved(), "copy_bw": device.copy_bandwidth(),
                    "gpu": device.gpu_name(), "simulated": device.simulated,
                    "device": device.kind, "phase_s": phase_s}
                if bench.policy:  # which checkpoint the agents used (several: cross-fitted)
                    result.problems[bench.problem.name]["policy"] = Path(bench.policy).name
                if bench.single_policy:
                    result.problems[bench.problem.name]["single_policy"] = Path(
                        bench.single_policy).name
            finally:
                bench.close()
                if on_problem:
                    on_problem(result)
    finally:
        builder.close()
        device.close()
    if not result.problems:
        raise SettingsError(f"no problem of {settings.suite} could be measured")
    return result


__all__ = ["run_live_bench", "BASELINES", "KERNEL_TUNER"]
