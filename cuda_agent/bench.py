"""`cuda-agent bench`: cuda-agent against the alternatives, same problems, same spaces, same budget.

Live on the GPU (or the simulator), the run is `bench_live.py`'s. On `replay` every strategy
searches the configurations a GPU sweep recorded, and is served their recorded times: ours
(random, genetic, the agents), Optuna's TPE, and Kernel Tuner's own strategies through its real
API in simulation mode. For each problem and seed we keep the order in which a strategy
measured configurations; every metric is computed from those orders (`metrics.py`), and the
baselines (torch eager, torch.compile) are the ones timed in the sweep's own GPU run.

The agents propose under the analytic cost model's prior (`agents/prior.py`); so that learning is
compared with what the model alone gives (issue 34), the model's ranking is a peer of its own
("prior"), and the classic peers run twice: cold, as their authors ship them ("optuna",
"kt:<strategy>"), and warm, their first measurements the model's top picks ("optuna_warm",
"kt_warm:<strategy>"; `search/prior_rank.WARM_PICKS`). `START` names each column's start.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from . import metrics
from .errors import SettingsError
from .example_data import example_suite
from .flags import check_bench
from .problem import Problem, load_problem
from .problem_child import LoadLimits, load_problem_bounded
from .runner.baselines import headline_ms, matched_ms, read_record
from .runner.devices import Device
from .runner.replay import ReplayDevice, find_sweep, read_sweep
from .costmodel.folds import FoldConstants
from .search import BENCH_ABLATIONS, BENCH_DEFAULT, KERNEL_TUNER, KERNEL_TUNER_WARM
from .search.base import is_agents
from .store import Store
from .settings import RunSettings, with_run_fields
from .tuner import Tuner, search_space

# the names are the search registry's (`search/__init__.py`: the one list)
WARM = ("optuna_warm",) + KERNEL_TUNER_WARM
"""the classic peers warm-started with the analytic model's top picks (the second column)"""
DEFAULT_STRATEGIES = BENCH_DEFAULT


def is_kernel_tuner(strategy: str) -> bool:
    """Kernel Tuner's own strategies, cold ("kt:") or warm-started ("kt_warm:")."""
    return strategy.startswith(("kt:", "kt_warm:"))


def uses_model(strategy: str) -> bool:
    """Strategies that consult the analytic model (its constants can be a fold's)."""
    return (is_agents(strategy) and strategy != "marl_noprior") or strategy in (
        "prior", "optuna_warm") or strategy.startswith("kt_warm:")


def start_of(strategy: str) -> str:
    """How a column starts: what a reader must know to weigh it (issue 34: headline numbers
    name which)."""
    if strategy == "prior":
        return "the model's ranking alone"
    if strategy == "marl_noprior":
        return "policy alone"
    if strategy == "marl_untrained":
        return "untrained policy + model prior"
    if is_agents(strategy):
        return "policy + model prior"
    if strategy in WARM:
        return "warm: the model's top picks first"
    return "cold"
ABLATIONS = BENCH_ABLATIONS
"""strategies run only when named: the agents without the analytic model's prior, with a
fresh policy, and the single-agent ablation (its checkpoints: `BenchSettings.single_policy`)"""


BENCH_RUN = RunSettings(budget=100, batch=4, compile_timeout_s=None)
"""a comparison's run settings unless told otherwise: 100 measurements per strategy, problem
and seed; each strategy asks for 4 configurations at a time; a live bench's compiles are not
cut (a kernel that compiles slowly is a cost of the strategy that chose it)"""

RUN_FIELDS = ("budget", "precision", "stage_patience", "tolerance", "baselines", "replay_root")
"""the run settings that bench.json files written before `BenchSettings.run` kept beside the
bench's own (read back into `run` by `settings_from_json`)"""


@dataclass(frozen=True)
class BenchSettings:
    """What `bench` compares, and how much it may spend: the bench's own choices (which
    problems, strategies, seeds, policies) and the run settings every strategy run derives
    its own from (`strategy_settings`)."""

    suite: str = field(default_factory=example_suite)
    strategies: tuple[str, ...] = DEFAULT_STRATEGIES
    seeds: int = 5
    policy: str | None = None
    """agents checkpoint for `marl`, or several comma-separated (cross-fitted folds: each problem
    is tuned by the first that never trained on it); problems every one was trained on are
    reported apart"""
    single_policy: str | None = None
    """single-agent checkpoint(s) for `marl_single`, as `policy` (the same folds: each problem
    tuned by one that never trained on it)"""
    sim_constants: str | None = None
    """the analytic model's constants for the strategies that consult it (`uses_model`):
    fold files, comma-separated (`costmodel/folds.py`: each problem ranked with one fitted
    without it); None: the shipped model"""
    out: str = "runs/bench"
    problem_seconds: float | None = None
    """live runs: a problem still running after this many seconds is given up at the next
    strategy run and listed among the problems not compared (one slow problem cannot take a
    whole suite's time)"""
    parallel: int = 1
    """live runs: strategy runs of a problem searching at once. Their measurements still take
    the GPU one at a time (a lock; timings never overlap); what overlaps is compiling and the
    strategies' own work, which dominate a problem whose kernels take seconds to compile. A
    run's wall time then includes waiting for the others' measurements."""
    run: RunSettings = BENCH_RUN
    """the run settings (`settings.RunSettings`), of which the bench reads: `device` (replay,
    or cuda/sim for a live run), `budget` (measurements per strategy, problem and seed),
    `replay_root` (recorded sweeps), `precision` (live runs: the kernels' numeric contract,
    "auto" each product as the process's torch flags run it, replay strict fp32 as the sweeps
    were recorded; the matched eager and torch.compile timed under it too), `tolerance` (live
    runs: "strict", "kernelbench" or "atol=A,rtol=R"; replay is strict only),
    `stage_patience` (multi-kernel programs: measurements a stage may go without progress
    before every strategy hands the rest of its share to the next stage; None: an even split),
    `baselines` (live runs: time torch eager and torch.compile per problem as well; a
    comparison of the strategies alone leaves them out: max-autotune compiles took minutes of
    each GEMM problem's time), `time_limit_s` (each strategy run's), `batch`, and the
    compiler's; every strategy run takes these whole, with its own strategy and seed"""

    @staticmethod
    def of(**fields: Any) -> "BenchSettings":
        """The settings from the bench's fields and the run's by name (the Python API's
        shorthand): ``BenchSettings.of(suite="p.py", budget=12, device="sim")``."""
        return with_run_fields(BenchSettings, BENCH_RUN, fields)

    def on(self, device: str) -> "BenchSettings":
        """These settings with their runs on `device`."""
        return replace(self, run=replace(self.run, device=device))


@dataclass
class Run:
    problem: str
    strategy: str
    seed: int
    times: list[float | None]  # in measurement order; None for a failed candidate
    seconds: float
    measured_s: float | None = None
    """live runs: evaluation seconds of its measurements as first made (None on replay)"""
    strategy_s: float | None = None
    """live ask/tell runs: seconds inside the strategy itself (proposing; the agents also
    learning online), apart from measuring and compiling"""
    build_wait_s: float | None = None
    """live ask/tell runs: seconds spent waiting for its candidates to compile"""
    error: str | None = None
    """the strategy stopped with this error (a peer's own failure; `times` holds what it
    measured before, and a run that never reached 95 % counts as not reaching it)"""
    configs: list[str] | None = None
    """live runs: each measured configuration (`Config.short()`), in the order of `times`: what
    a strategy chose can be read afterwards (which template, which tile) without a GPU"""


@dataclass
class BenchResult:
    settings: BenchSettings
    runs: list[Run] = field(default_factory=list)
    problems: dict[str, dict[str, Any]] = field(default_factory=dict)  # sweep facts
    trained_on: list[str] = field(default_factory=list)
    date: str = ""
    skipped: dict[str, str] = field(default_factory=dict)  # problem -> why it is not compared
    live: str | None = None
    """the device every strategy was measured on in this run (cuda, sim); None on replay"""
    provenance: dict[str, Any] = field(default_factory=dict)  # commit, torch, python

    def to_json(self) -> dict[str, Any]:
        settings = asdict(self.settings)
        settings["run"] = self.settings.run.record()  # whole, as JSON holds it
        return {"settings": settings, "runs": [asdict(r) for r in self.runs],
                "problems": self.problems, "trained_on": self.trained_on, "date": self.date,
                "skipped": self.skipped, "live": self.live, "provenance": self.provenance}

    @staticmethod
    def from_json(d: dict[str, Any]) -> "BenchResult":
        return BenchResult(settings_from_json(d["settings"]), [Run(**r) for r in d["runs"]],
                           d["problems"], d.get("trained_on", []), d.get("date", ""),
                           d.get("skipped", {}), d.get("live"), d.get("provenance", {}))


def settings_from_json(s: dict[str, Any]) -> BenchSettings:
    """A bench.json's settings, those written before `BenchSettings.run` (the run settings
    beside the bench's own: `RUN_FIELDS`) included."""
    s = dict(s)
    run = dict(s.pop("run", None) or {k: s.pop(k) for k in RUN_FIELDS if k in s})
    # runs written before stages could hand over (commit 3becbaa) split programs evenly
    run.setdefault("stage_patience", None)
    return BenchSettings(**{**s, "strategies": tuple(s["strategies"]),
                            "run": replace(BENCH_RUN, **run)})


def merge(results: list[BenchResult]) -> BenchResult:
    """One comparison from several runs of the same settings on different problems (a GPU
    reached through short calls benches a suite a few problems per call)."""
    if not results:
        raise SettingsError("nothing to merge")
    first = results[0]
    same = ("strategies", "seeds", "policy", "single_policy", "sim_constants")
    same_run = ("budget", "precision", "stage_patience")
    for r in results[1:]:
        differ = [(k, getattr(first.settings, k), getattr(r.settings, k)) for k in same] + [
            (k, getattr(first.settings.run, k), getattr(r.settings.run, k)) for k in same_run]
        for k, a, b in differ:
            if a != b:
                raise SettingsError(f"cannot merge bench runs with different {k}: {a} and {b}")
        if r.live != first.live:
            raise SettingsError("cannot merge a live bench run with a replayed one")
        clash = set(r.problems) & set(first.problems)
        if clash:
            raise SettingsError(f"problems benched twice: {', '.join(sorted(clash))}")
    # wall times of runs side by side include waiting for each other: the report says so
    settings = replace(first.settings, parallel=max(r.settings.parallel for r in results))
    out = BenchResult(settings, date=", ".join(sorted({r.date for r in results})),
                      trained_on=first.trained_on, live=first.live)
    for r in results:
        out.runs += r.runs
        out.problems.update(r.problems)
        out.skipped.update(r.skipped)
    # a problem one call stopped before and a later call benched is compared, not skipped
    out.skipped = {p: why for p, why in out.skipped.items() if p not in out.problems}
    keys = dict.fromkeys(k for r in results for k in r.provenance)
    out.provenance = {k: ", ".join(dict.fromkeys(str(r.provenance[k]) for r in results
                                                 if k in r.provenance)) for k in keys}
    return out


def provenance() -> dict[str, Any]:
    """What code ran: the commit, torch and Python versions."""
    import platform

    import torch

    from .emit import git_commit

    return {"commit": git_commit(), "torch": torch.__version__,
            "python": platform.python_version()}


def check_settings(settings: BenchSettings, device: str | None = None) -> None:
    """A one-line `SettingsError` for the first setting out of range (`flags.check_bench`)."""
    s, run = settings, settings.run
    check_bench(suite=s.suite, device=device, strategies=s.strategies, budget=run.budget,
                seeds=s.seeds, parallel=s.parallel, policy=s.policy,
                single_policy=s.single_policy, sim_constants=s.sim_constants,
                precision=run.precision, tolerance=run.tolerance,
                problem_seconds=s.problem_seconds, stage_patience=run.stage_patience,
                replay_root=run.replay_root)


def problem_files(suite: str) -> list[Path]:
    """A directory's problem files by name, or the comma-separated files in the order given
    (a live bench cut short by a deadline has then run the problems chosen first)."""
    if "," in suite:
        files = [Path(p) for p in suite.split(",") if p]
        for f in files:
            if not f.is_file():
                raise SettingsError(f"--suite: {f}: no such file")
        return files
    path = Path(suite)
    if not path.exists():
        raise SettingsError(f"--suite {suite}: no such file or directory")
    return sorted(path.glob("*.py")) if path.is_dir() else [path]


class Policies:
    """The trained policies of a comparison. With several (cross-fitted: each trained without
    some of the suite), a problem is tuned by the first one that never trained on it, so the
    agents are compared on every problem some policy never saw, not only on the few one policy
    trained on most of the suite left out."""

    def __init__(self, spec: str | None) -> None:
        from .agents import checkpoint

        self.paths = [p for p in (spec or "").split(",") if p]
        self.trained = {p: set(checkpoint.load(p)["meta"]["trained_on"]) for p in self.paths}

    def __bool__(self) -> bool:
        return bool(self.paths)

    def pick(self, problem: str) -> str | None:
        """The policy that tunes `problem`: the first that never trained on it, else the
        first."""
        unseen = [p for p in self.paths if problem not in self.trained[p]]
        return (unseen or self.paths)[0] if self.paths else None

    def for_strategy(self, strategy: str, problem: str, single: "Policies") -> str | None:
        """The checkpoint `strategy` tunes `problem` with: the single-agent ablation's own
        (`single`), every other strategy this set's."""
        return (single if strategy == "marl_single" else self).pick(problem)

    def trained_on(self) -> list[str]:
        """Problems every policy trained on: the agents' results on them are reported apart."""
        if not self.paths:
            return []
        return sorted(set.intersection(*self.trained.values()))


def strategy_settings(settings: BenchSettings, device: Device, strategy: str, seed: int,
                      policy: str | None, sim_constants: str | None = None) -> RunSettings:
    """One ask/tell strategy's run in a comparison: the bench's run settings whole (budget,
    precision, tolerance, time limit, stage patience, ...), with this run's device, strategy
    and seed; no baselines, no default measured first (every strategy starts from what it
    asks for), batches of `settings.run.batch` (4 unless told), the agents without early
    stopping (a program's stages hand over alike for every strategy: `stage_patience`) and
    with `policy`; the strategies that consult the model with `sim_constants` (None: the
    shipped model)."""
    opts: dict[str, Any] = {}
    if is_agents(strategy):
        opts = {"policy": policy, "patience": 10**6}
    if sim_constants and uses_model(strategy):
        opts["sim_constants"] = sim_constants
    return replace(settings.run, device=device.kind, strategy=strategy, seed=seed,
                   baselines=False, include_default=False,
                   strategy_options=opts)


def _loaded(problem: Problem | Path) -> Problem:
    """A problem already loaded (the bench's own loop), or a file loaded here (scripts)."""
    return problem if isinstance(problem, Problem) else load_problem(problem)


def _order_ask_tell(path: Problem | Path, settings: BenchSettings, strategy: str,
                    device: Device, seed: int, policy: str | None,
                    sim_constants: str | None = None) -> list[float | None]:
    tuner = Tuner(_loaded(path), strategy_settings(settings, device, strategy, seed, policy,
                                                   sim_constants),
                  device=device, store=Store(":memory:"))
    try:
        res = tuner.run()
    finally:
        tuner.close()
    if res.interrupted:  # the tuner keeps a search Ctrl-C ended; a comparison stops there
        raise KeyboardInterrupt
    return [t.measurement.time_ms if t.measurement.ok else None for t in res.trials]


def warm_records(path: Problem | Path, device: Device, records: list[dict[str, Any]],
                 sim_constants: str | None = None) -> list[dict[str, Any]]:
    """The model's top picks among a sweep's configurations, as recorded (`records`' own
    config dicts, which Kernel Tuner's view is built from; a record of an older template
    version is matched through its upgrade)."""
    from .search.prior_rank import WARM_PICKS, top_picks

    space = search_space(_loaded(path), device, RunSettings(device=device.kind,
                                                             baselines=False))
    as_recorded: dict[Any, dict[str, Any]] = {}
    for r in records:
        cfg = space.upgrade(r["config"])
        if cfg is not None:
            as_recorded.setdefault(cfg, r["config"])
    return [as_recorded[c] for c in top_picks(space, WARM_PICKS, sim_constants)
            if c in as_recorded]


def _order_kernel_tuner(records: list[dict[str, Any]], strategy: str, budget: int,
                        seed: int, warm: list[dict[str, Any]] | None = None
                        ) -> tuple[list[float | None], str | None]:
    """Kernel Tuner's times in its order, and its error if it stopped with one."""
    from .search import kernel_tuner_sim

    error = None
    try:
        order = kernel_tuner_sim.run(records, strategy.split(":", 1)[1], budget, seed, warm)
    except kernel_tuner_sim.StrategyFailed as exc:
        order, error = exc.order, str(exc)
    return [r["time_ms"] if r.get("ok") else None for _, r in order], error


def jobs_of(settings: BenchSettings) -> list[tuple[str, int]]:
    """Each problem's strategy runs, (strategy, seed), in order: the agents only with a trained
    policy (without one they are not cuda-agent's offer). A progress bar's total is this many
    per problem."""
    return [(st, k) for st in settings.strategies for k in range(settings.seeds)
            if not is_agents(st) or settings.policy]


def run_bench(settings: BenchSettings,
              progress: Callable[[str, str, int], None] | None = None,
              skipped: Callable[[str, int], None] | None = None,
              on_problem: Callable[[BenchResult], None] | None = None) -> BenchResult:
    """Every strategy of `settings` on every problem of the suite with a recorded sweep, on
    replay. `progress(problem, strategy, seed)` follows each run, `skipped(problem, runs)`
    the runs of a problem not compared; `on_problem` sees the result after each problem (the
    CLI keeps it on disk, so Ctrl-C keeps what is finished)."""
    check_settings(settings, "replay")
    root = Path(settings.run.replay_root) if settings.run.replay_root else None
    device = ReplayDevice(root)
    result = BenchResult(settings, date=time.strftime("%Y-%m-%d"), provenance=provenance())
    policies, single = Policies(settings.policy), Policies(settings.single_policy)
    folds = FoldConstants(settings.sim_constants)
    result.trained_on = policies.trained_on()
    jobs = jobs_of(settings)

    def skip(name: str, why: str | None) -> None:
        if why:
            result.skipped[name] = why
        if skipped:
            skipped(name, len(jobs))

    for path in problem_files(settings.suite):
        # user code: in a child, within the run's import limits (the time limit is a
        # strategy run's, not the load's)
        problem = load_problem_bounded(path, LoadLimits.of(
            settings.run.import_timeout_s, None, settings.run.import_memory_bytes))
        try:
            sweep = read_sweep(find_sweep(problem, root))
        except Exception:  # noqa: BLE001 - a problem without a recorded sweep is skipped
            skip(problem.name, "no recorded sweep")
            continue
        ok = [r["time_ms"] for r in sweep["records"] if r.get("ok") and r.get("time_ms")]
        if not ok:
            skip(problem.name, None)
            continue
        from .ir.partition import ProgramPlan
        from .ir.planning import make_plan

        plan = make_plan(problem.graph())
        if isinstance(plan, ProgramPlan):
            # a multi-kernel program's sweep is stage by stage: not replayable
            skip(problem.name, "a multi-kernel program (sweeps are stage by stage)")
            continue
        facts: dict[str, Any] = {
            "family": plan.family, "best_ms": min(ok), "recorded": len(sweep["records"]),
            # at PyTorch's defaults and matched (a sweep recorded before the defaults were
            # timed has matched figures only: `read_record`)
            **read_record(sweep.get("baselines") or {}).fields(),
            "bytes": plan.bytes_moved(), "copy_bw": sweep.get("copy_bw"),
            "gpu": sweep.get("gpu"), "simulated": bool(sweep.get("simulated"))}
        picked = policies.pick(problem.name)
        if picked is not None:  # which checkpoint the agents used (several: cross-fitted)
            facts["policy"] = Path(picked).name
        constants = folds.pick(problem.name)
        if folds:  # the model's constants: a fold's fitted without this problem, or shipped
            facts["sim_constants"] = (
                Path(constants).name if constants else "shipped (no fold left it out)")
        warm: list[dict[str, Any]] | None = None
        runs: list[Run] = []  # kept once all are done: a whole problem or none of it
        for strategy, seed in jobs:
            t0, error = time.perf_counter(), None
            if is_kernel_tuner(strategy):
                if strategy.startswith("kt_warm:") and warm is None:
                    warm = warm_records(problem, device, sweep["records"], constants)
                times, error = _order_kernel_tuner(
                    sweep["records"], strategy, settings.run.budget, seed,
                    warm if strategy.startswith("kt_warm:") else None)
            else:
                times = _order_ask_tell(problem, settings, strategy, device, seed,
                                        policies.for_strategy(strategy, problem.name,
                                                              single), constants)
            runs.append(Run(problem.name, strategy, seed, times, time.perf_counter() - t0,
                            error=error))
            if progress:
                progress(problem.name, strategy, seed)
        result.problems[problem.name] = facts
        result.runs += runs
        if on_problem:
            on_problem(result)
    if not result.problems:
        raise SettingsError(f"no recorded sweeps for the problems of {settings.suite}")
    return result


PEERS = ("optuna",) + KERNEL_TUNER
"""the classic autotuners cuda-agent is measured against (issue 5's target), cold"""
WARM_PEERS = WARM
"""the same autotuners warm-started with the model's top picks (issue 34)"""


def versus_peers(summary: dict[str, Any], ours: str = "marl",
                 peers_of: tuple[str, ...] = PEERS) -> dict[str, Any] | None:
    """cuda-agent's median measurements to 95 % against the best of `peers_of` (default:
    Optuna's and Kernel Tuner's strategies, cold) by the same median, on the problems the
    policy never trained on. "start" says whether those peers started cold or warm."""
    key = "median_evals_to_95_unseen"
    peers = {s: summary[s][key] for s in peers_of if s in summary and summary[s][key] is not None}
    if ours not in summary or summary[ours][key] is None or not peers:
        return None
    best = min(peers, key=peers.__getitem__)
    return {"ours": ours, "ours_median": summary[ours][key], "best_peer": best,
            "best_peer_median": peers[best], "start": start_of(best),
            "ratio": peers[best] / summary[ours][key] if summary[ours][key] else None}


def _fast_p(found: list[float], base: list[float | None]) -> dict[str, float] | None:
    """fast_p at every p of `metrics.P`; None where no problem has the baseline (a run that
    predates it: the problems would count as not faster)."""
    if not any(base):
        return None
    return {str(p): metrics.fast_p(found, base, p) for p in metrics.P}


def baseline_column(result: BenchResult, probs: list[str], key: str,
                    setting: str = "defaults") -> list[float | None]:
    """Per problem, baseline `key` ("compile_ms", ...) at PyTorch's defaults (the headline) or
    matched; a run recorded before the defaults were timed has only matched figures."""
    read = headline_ms if setting == "defaults" else matched_ms
    return [read(result.problems[p], key) for p in probs]


def versus_all(summary: dict[str, Any], ours: str = "marl") -> dict[str, Any]:
    """The headline comparisons, each naming its column's start: against the cold peers,
    against the warm peers, and against the model's ranking alone ("prior")."""
    return {"cold": versus_peers(summary, ours, PEERS),
            "warm": versus_peers(summary, ours, WARM_PEERS),
            "prior": versus_peers(summary, ours, ("prior",))}


def best_of_run(result: BenchResult) -> dict[str, Any]:
    """The fastest verified kernel measured per problem in the run (by any strategy, or the
    sweep's recorded best measured again), against the baselines: what a user tuning the
    problem gets back, whichever search found it. The headline is torch.compile at PyTorch's
    defaults (as a user's process runs it); the same against the accuracy-matched baselines
    beside it."""
    probs = [p for p, f in result.problems.items() if f.get("best_ms")]
    found = [result.problems[p]["best_ms"] for p in probs]
    out: dict[str, Any] = {"problems": len(probs)}
    for setting, sfx in (("defaults", ""), ("matched", "_matched")):
        comp = baseline_column(result, probs, "compile_ms", setting)
        eager = baseline_column(result, probs, "eager_ms", setting)
        out.update({
            f"fast_p_vs_compile{sfx}": _fast_p(found, comp),
            f"fast_p_vs_eager{sfx}": _fast_p(found, eager),
            f"geomean_speedup_vs_compile{sfx}": metrics.geomean_speedup(found, comp),
            f"geomean_speedup_vs_eager{sfx}": metrics.geomean_speedup(found, eager),
            # a problem without the figure (its compile failed, or its run predates the
            # setting) is not counted faster; which ones those are is said apart
            f"not_faster_than_compile{sfx}": sorted(
                p for p, t, c in zip(probs, found, comp) if c is None or not t < c)
            if any(comp) else None,
            f"without_compile{sfx}": sorted(p for p, c in zip(probs, comp) if c is None),
        })
    return out


def evals_by_problem(result: BenchResult, runs: list[Run], fraction: float
                     ) -> dict[str, float]:
    """Per problem of `runs`: median over its runs of the measurements to `fraction` of the
    problem's best (a run that never got there counts as the budget + 1)."""
    per: dict[str, list[int]] = {}
    for r in runs:
        per.setdefault(r.problem, []).append(metrics.evals_to_fraction(
            r.times, result.problems[r.problem]["best_ms"], fraction,
            censor=result.settings.run.budget + 1))
    return {p: statistics.median(v) for p, v in per.items()}


def summarize(result: BenchResult) -> dict[str, Any]:
    """Per strategy: median measurements to 95 %, fast_p against eager and torch.compile,
    geometric-mean speedups, fraction of the copy-bandwidth roofline."""
    out: dict[str, Any] = {}
    strategies = list(dict.fromkeys(r.strategy for r in result.runs))
    for s in strategies:
        runs = [r for r in result.runs if r.strategy == s and not (
            is_agents(s) and r.problem in result.trained_on)]
        per_problem: dict[str, list[Run]] = {}
        for r in runs:
            per_problem.setdefault(r.problem, []).append(r)
        e95 = evals_by_problem(result, runs, 0.95)
        best_ms = {p: statistics.median(metrics.best_time(r.times) or float("inf") for r in rs)
                   for p, rs in per_problem.items()}
        probs = list(per_problem)
        # the same problems for every strategy: those the agents' policy never trained on
        unseen = [e95[p] for p in probs if p not in result.trained_on]
        # at PyTorch's defaults (the headline), and the same under the kernels' contract
        eager, comp, comp_max, comp_nocg = (
            baseline_column(result, probs, k) for k in
            ("eager_ms", "compile_ms", "compile_max_ms", "compile_max_nocg_ms"))
        eager_m, comp_m, comp_max_m = (
            baseline_column(result, probs, k, "matched") for k in
            ("eager_ms", "compile_ms", "compile_max_ms"))
        found = [best_ms[p] for p in probs]
        cost = [r.measured_s for r in runs if r.measured_s is not None]
        out[s] = {
            "problems": len(probs),
            "median_evals_to_95": statistics.median(e95.values()) if e95 else None,
            "evals_to_95": e95,
            "median_evals_to_95_unseen": statistics.median(unseen) if unseen else None,
            "fast_p_vs_eager": _fast_p(found, eager),
            "fast_p_vs_compile": _fast_p(found, comp),
            "geomean_speedup_vs_eager": metrics.geomean_speedup(found, eager),
            "geomean_speedup_vs_compile": metrics.geomean_speedup(found, comp),
            "fast_p_vs_compile_max_autotune": _fast_p(found, comp_max),
            "geomean_speedup_vs_compile_max_autotune": metrics.geomean_speedup(found, comp_max),
            "geomean_speedup_vs_compile_max_autotune_no_cudagraphs": metrics.geomean_speedup(
                found, comp_nocg),
            "fast_p_vs_eager_matched": _fast_p(found, eager_m),
            "fast_p_vs_compile_matched": _fast_p(found, comp_m),
            "geomean_speedup_vs_eager_matched": metrics.geomean_speedup(found, eager_m),
            "geomean_speedup_vs_compile_matched": metrics.geomean_speedup(found, comp_m),
            "geomean_speedup_vs_compile_max_autotune_matched": metrics.geomean_speedup(
                found, comp_max_m),
            # live runs: evaluation seconds of a whole search (first measurements' cost);
            # replay: the search's own seconds (no GPU time is spent)
            "median_search_seconds": statistics.median(
                cost if cost else [r.seconds for r in runs]) if runs else None,
            # wall time of a whole search (measuring, compiling, the strategy's own work), and
            # live ask/tell runs' seconds inside the strategy (proposing and learning)
            "median_wall_seconds": statistics.median(r.seconds for r in runs) if runs else None,
            "median_strategy_seconds": statistics.median(own) if (own := [
                r.strategy_s for r in runs if r.strategy_s is not None]) else None,
            "median_fraction_of_copy_bw": metrics.median_roofline(
                found, [result.problems[p]["bytes"] for p in probs],
                [result.problems[p]["copy_bw"] for p in probs]),
        }
    return out
