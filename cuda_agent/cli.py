"""The `cuda-agent` command: tune, sweep, doctor.

User errors (bad problem file, unsupported op, bad flag) print one line and exit 2; candidate
failures are never errors here, they are rows of the report.
"""

from __future__ import annotations

import importlib.metadata as md
import os
import platform
import shutil
import sys
import time
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterator, Optional

import typer
from rich.console import Console
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                           TimeElapsedColumn, TimeRemainingColumn)
from rich.table import Column, Table

from . import flags, interrupt
from .errors import CudaAgentError, SettingsError, UnsupportedError
from .example_data import example_suite, recorded_sweeps
from .search import BENCH_DEFAULT, bench_strategy_names, strategy_names
from .limits import (BASELINE_TIMEOUT_S, COMPILE_TIMEOUT_S, IMPORT_TIMEOUT_S, STAGE_PATIENCE,
                     TIME_LIMIT_S)
from .outputs import check_out_dir
from .settings import RunSettings
from .store import SCHEMA_VERSION, default_store
from .store import health as store_health
from .version import __version__

# options tune and bench share
STAGE_PATIENCE_HELP = ("multi-kernel programs: measurements a stage may go without progress "
                       "before it hands the rest of its share to the next stage (0: split the "
                       "budget evenly)")
PRECISION_HELP = ("auto: each product at the precision your torch gives it (by default "
                  "convolutions on TF32, as cudnn.allow_tf32 lets them; matrix products strict, "
                  "as float32_matmul_precision 'highest' keeps them), verified against torch's "
                  "own answer under those flags | fp32: strict fp32 accuracy everywhere | tf32, "
                  "fp16, bf16: tensor-core products on operands rounded to that type (verified "
                  "against torch's own answer with TF32 on or under autocast; eager and "
                  "torch.compile timed that way too, as 'matched', beside PyTorch's defaults)")
TOLERANCE_HELP = ("strict: the strict protocol (float64 reference) | kernelbench: conformance "
                  "mode, pass where torch.allclose(out, ref, atol=1e-2, rtol=1e-2) against the "
                  "module in fp32 at PyTorch defaults, as KernelBench checks | atol=A,rtol=R: "
                  "conformance mode at that tolerance")

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="cuda-agent: fast CUDA kernels for PyTorch reference programs, found by "
                       "measuring candidates on the GPU.")
console = Console()
err_console = Console(stderr=True)

AGENTS = ("multi", "single")
"""--agents: the four agents, or one over every slot (the ablation)"""

INTERRUPTED = 130
"""exit status after Ctrl-C (128 + SIGINT), as a shell reports it"""


def _version(value: bool) -> None:
    if value:
        console.print(f"cuda-agent {__version__}", highlight=False)
        raise typer.Exit()


@app.callback()
def _main(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="print the version and exit")) -> None:
    """cuda-agent: fast CUDA kernels for PyTorch reference programs, found by measuring
    candidates on the GPU."""


def fail(msg: str, code: int = 2) -> None:
    err_console.print(f"[bold red]error:[/] {msg}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def _fmt_ms(v: Optional[float], simulated: bool = False) -> str:
    if v is None:
        return "-"
    return f"{v:.4f} ms" + (" (sim)" if simulated else "")


def _fmt_x(v: Optional[float]) -> str:
    return f"{v:.2f}x" if v else "-"


def _progress() -> Progress:
    """A bar with its total, the time spent and the time left (estimated from the pace so
    far: bench's runs and train's iterations are alike enough for it to mean something)."""
    # the status last, cut to what is left of the line: a long one (train's entropies) took
    # the count and the times off an 80-column log
    return Progress(TextColumn("[bold]{task.description}", table_column=Column(no_wrap=True)),
                    MofNCompleteColumn(), BarColumn(bar_width=16), TimeElapsedColumn(),
                    TextColumn("eta"), TimeRemainingColumn(),
                    TextColumn("{task.fields[status]}", table_column=Column(
                        no_wrap=True, overflow="ellipsis", ratio=1)),
                    console=console, transient=False, expand=True)


def run_tune(problem_path: Path, settings: RunSettings, out: Optional[Path],
             started: Optional[float] = None):
    """`tune` on one problem, with a progress bar. Ctrl-C during the search ends it and the
    best so far is written (`TuneResult.stopped` says so); before the search, it propagates.
    `started` (time.monotonic()): when the command began, the time limit's start."""
    from .problem import naming_file
    from .problem_child import LoadLimits, ProblemLoader
    from .tuner import Tuner

    # the file is imported and captured in a child process, within its limits: a fork of this
    # one, which has torch imported and, so far, one thread and no CUDA (`problem_child.py`)
    with ProblemLoader(fork=True) as loader:
        problem = loader.load(problem_path, LoadLimits.of_run(settings))
    with naming_file(problem.path):  # the planner's and the spaces' refusals name the file
        tuner = Tuner(problem, settings,
                      notify=lambda s: console.print(f"[yellow]{s}[/]", soft_wrap=True),
                      on_setup=lambda s: console.print(s, highlight=False), started=started)
    try:
        with _progress() as bar:
            result = tuner.run(_bar_callback(bar, tuner, settings.budget))
        if out is not None:
            from .emit import emit

            emit(result, out)
        return result
    finally:
        tuner.close()


def run_tune_model(problem_path: Path, settings: RunSettings, out: Path, started: float,
                   why: Exception) -> None:
    """`tune` on a model no one capture covers (`why`): its regions (`regions/tune.py`), one
    line per region as each is tuned, then where the module was written."""
    from .regions.tune import tune_model

    console.print(f"{problem_path}: {str(why).split(': ', 1)[-1]}: tuning it as a whole "
                  "model, region by region (the rest left to torch)", highlight=False,
                  soft_wrap=True)
    result = tune_model(problem_path, out, started=started,
                        notify=lambda s: console.print(s, highlight=False, soft_wrap=True),
                        settings=settings)
    sim = " (simulated: kernels not verified, times are model estimates)" \
        if result.simulated else ""
    console.print(f"wrote {out}/model_new.py and report.json: {len(result.generated())} of "
                  f"{len(result.split.regions)} regions generated{sim}", highlight=False,
                  soft_wrap=True)


@contextmanager
def _flag_errors() -> Iterator[None]:
    """A command's flag checks (`flags.py`): the first bad flag is one line and exit 2."""
    try:
        yield
    except CudaAgentError as exc:
        fail(str(exc), exc.exit_code)


COUNTED_FOR_THE_BAR = 1024
"""configurations listed at most to tell whether a space is smaller than the budget (the bar's
total): listing up to a budget of 100000 took seconds of a time-limited run's start"""


def _bar_callback(bar: Progress, tuner, budget: int):  # noqa: ANN001, ANN202
    sim = tuner.device.simulated
    total = budget
    if not tuner.stages:  # (a program's budget goes to several stages' spaces)
        upto = min(budget, COUNTED_FOR_THE_BAR)
        found = tuner.space.at_least(upto)
        total = found if found < upto else budget
    task = bar.add_task(f"{tuner.problem.name} [{tuner.device.kind}]", total=total, status="")

    def on_trial(trial, best):  # noqa: ANN001, ANN202
        status = "best " + (_fmt_ms(best.measurement.time_ms, sim) if best else "-")
        bar.update(task, advance=1, status=status)
    return on_trial


def _row(r) -> dict:  # noqa: ANN001 - a TuneResult
    from .emit import report_dict

    d = report_dict(r)
    sim = r.simulated
    return {
        "problem": d["problem"], "family": d["family"] + (
            f" ({d['dtypes']['output']})" if d["dtypes"]["output"] in ("float16", "bfloat16")
            else ""),
        "device": r.device.gpu_name() + (" (cuda)" if r.device.kind == "cuda" else ""),
        "best": _fmt_ms(d["best_ms"], sim),
        "default config": _fmt_ms(r.default.measurement.time_ms if r.default else None, sim),
        "library route": _fmt_ms(d["library_floor_ms"], sim),
        "won by": d["won_by"] or "-",
        # as a user's process runs them (PyTorch's defaults), then under the kernels' contract
        "torch eager": _fmt_ms(d["eager_ms"]),
        **({"eager, cudnn.benchmark": _fmt_ms(d["eager_cudnn_benchmark_ms"])}
           if d.get("eager_cudnn_benchmark_ms") else {}),
        "torch.compile": _fmt_ms(d["compile_ms"]),
        "vs eager": _fmt_x(d["speedup_vs_eager"]),
        "vs compile": _fmt_x(d["speedup_vs_compile"]),
        "matched settings": _matched_settings(d),
        "torch eager, matched": _fmt_ms(d["eager_matched_ms"]),
        **({"eager, cudnn.benchmark, matched": _fmt_ms(d["eager_cudnn_benchmark_matched_ms"])}
           if d.get("eager_cudnn_benchmark_matched_ms") else {}),
        "torch.compile, matched": _fmt_ms(d["compile_matched_ms"]),
        "vs compile, matched": _fmt_x(d["speedup_vs_compile_matched"]),
        "of copy bw": (f"{100 * d['fraction_of_copy_bw']:.0f}%" + (" (sim)" if sim else ""))
        if d["fraction_of_copy_bw"] else "-",
        "evals": str(d["evals"]),
        "failed": ", ".join(f"{k} {v}" for k, v in d["failures"].items()) or "0",
        "verification": "not run (simulated)" if sim else
        f"{d['verification']['mode']}: {d['verification']['tolerance']}",
    }


def _matched_settings(d: dict) -> str:
    """What the matched baselines ran under: the kernels' contract (--precision)."""
    what = {"fp32": "strict fp32, TF32 off", "tf32": "TF32 on",
            "tf32:conv": "TF32 on in convolutions, off in matrix products",
            "tf32:matmul": "TF32 on in matrix products, off in convolutions",
            "fp16": "autocast fp16", "bf16": "autocast bf16"}.get(d["precision"], d["precision"])
    if d.get("precision_asked") == "auto":
        what = f"{what} (--precision auto)"
    same = (d.get("baseline_settings") or {}).get("same")
    return what + (" (the same as PyTorch's defaults for this problem)" if same else "")


def _tf32_note(r) -> str | None:  # noqa: ANN001 - a TuneResult
    """The report's offer of --precision tf32, where torch beats the kernel through TF32."""
    from .emit import tf32_offer

    advice = tf32_offer(r)
    return advice["text"] if advice else None


def summary_table(results: list, title: str) -> Table:
    """One result: a field/value table; several: one compact row each."""
    rows = [_row(r) for r in results]
    if len(rows) == 1:
        table = Table(title=title, show_header=False)
        table.add_column("field", style="bold")
        table.add_column("value")
        for k, v in rows[0].items():
            table.add_row(k, v)
        return table
    cols = ("problem", "best", "torch eager", "torch.compile", "vs compile",
            "vs compile, matched", "of copy bw", "evals", "failed")
    table = Table(title=title)
    for c in cols:
        table.add_column(c, justify="left" if c in ("problem", "failed") else "right")
    for row in rows:
        table.add_row(*(row[c] for c in cols))
    return table


@app.command()
def tune(
    problem: Path = typer.Argument(..., help="problem file (class Model, get_inputs, "
                                   "get_init_inputs)"),
    device: Optional[str] = typer.Option(None, help="cuda | sim | replay (default: cuda when a "
                                         "GPU is present, else sim)"),
    strategy: Optional[str] = typer.Option(
        None, help="search strategy: " + " | ".join(strategy_names()) + " (default: 'default', "
        "the best on the measured evidence (BENCHMARKS.md): the learning agents with the policy "
        "the package ships; with --policy: marl, your trained agents)"),
    budget: int = typer.Option(64, help="configurations to measure"),
    out: Optional[Path] = typer.Option(None, help="output directory (default runs/<problem>)"),
    batch: int = typer.Option(16, help="configurations built and measured together"),
    seed: int = typer.Option(0),
    store: Optional[str] = typer.Option(None, help="SQLite store (default ~/.cache/cuda-agent)"),
    baselines: bool = typer.Option(True, help="time torch eager and torch.compile too"),
    replay_root: Optional[Path] = typer.Option(None, help="directory of recorded sweeps for "
                                               "--device replay (default $CUDA_AGENT_REPLAY_ROOT, "
                                               "else the checkout's benchmarks/data)"),
    policy: Optional[Path] = typer.Option(None, help="trained agents checkpoint (cuda-agent "
                                          "train): warm start, fine-tuned online on this "
                                          "operator, stops when the search plateaus"),
    agents: str = typer.Option("multi", help="with --strategy marl and no --policy: multi "
                               "(four agents) or single (one agent, the ablation)"),
    patience: int = typer.Option(3, help="with the agents: batches without improvement "
                                 "before stopping"),
    precision: str = typer.Option("auto", help=PRECISION_HELP),
    stage_patience: int = typer.Option(STAGE_PATIENCE, help=STAGE_PATIENCE_HELP),
    tolerance: str = typer.Option("strict", help=TOLERANCE_HELP),
    time_limit: float = typer.Option(
        TIME_LIMIT_S, help="seconds tune may run from its start, loading the problem and the "
        "set-up included (0: no limit); then compiles in flight are stopped and the best "
        "kernel found so far is written, with the report (the baselines are bounded apart, "
        "--baseline-timeout)"),
    compile_timeout: float = typer.Option(
        COMPILE_TIMEOUT_S, help="seconds one candidate may take to compile (0: no limit); "
        "past it the compile is stopped and the candidate recorded as compile_timeout"),
    baseline_timeout: float = typer.Option(
        BASELINE_TIMEOUT_S, help="on a GPU, seconds each baseline (torch eager, "
        "torch.compile) may take; past it, it is reported as not measured"),
    import_timeout: float = typer.Option(
        IMPORT_TIMEOUT_S, help="seconds the problem file's import and capture may take (0: no "
        "limit; a shorter --time-limit bounds it too); past it, exit 2"),
    import_memory: Optional[float] = typer.Option(
        None, help="GB of host memory the problem file's import and capture may take (0: no "
        "limit; default: half of what is available); past it, exit 2"),
) -> None:
    """Find a fast, verified kernel for PROBLEM and write model_new.py, kernel.cu, report.json.

    Ctrl-C stops the search and writes the best kernel verified so far (exit 130)."""
    started = time.monotonic()  # the time limit counts from here: loading the problem too
    from .search.base import is_agents

    strategy = strategy or ("marl" if policy is not None else "default")
    out = out or Path("runs") / problem.stem
    with _flag_errors():  # every flag, before the problem is loaded or anything is printed
        limits: dict[str, Any] = dict(  # of several types: passed on by name
            time_limit_s=flags.seconds_or_none("--time-limit", time_limit),
            compile_timeout_s=flags.seconds_or_none("--compile-timeout", compile_timeout),
            baseline_timeout_s=baseline_timeout)
        flags.check_tune(device=device, strategy=strategy, budget=budget, batch=batch,
                         precision=precision, tolerance=tolerance, **limits)
        limits.update(import_timeout_s=flags.seconds_or_none("--import-timeout", import_timeout),
                      import_memory_bytes=flags.gigabytes("--import-memory", import_memory))
        flags.at_least("--stage-patience", stage_patience, 0)
        flags.at_least("--patience", patience, 1)
        flags.one_of("--agents", agents, AGENTS)
        flags.existing_file("--policy", policy)
        if policy is not None and not is_agents(strategy):
            raise SettingsError(f"--policy is a checkpoint of the agents; --strategy {strategy} "
                                "does not take one")
        flags.existing_dir("--replay-root", replay_root)
        # before the search, not after it: a path that cannot be written fails in a second
        check_out_dir(out)
    # the run's settings, built once here from every flag (`settings.py`)
    settings = RunSettings(
        device=device, strategy=strategy, budget=budget, batch=batch, seed=seed,
        store=store or default_store(), baselines=baselines,
        replay_root=str(replay_root) if replay_root else None,
        strategy_options={"policy": str(policy) if policy else None, "agents": agents,
                          "patience": patience} if is_agents(strategy) else {},
        precision=precision, stage_patience=stage_patience or None, tolerance=tolerance,
        **limits)
    try:
        try:
            result = run_tune(problem, settings, out, started)
        except UnsupportedError as exc:
            if device == "replay":  # recorded sweeps are single problems' spaces
                raise
            # no single capture covers the model: its regions, the rest left to torch
            run_tune_model(problem, settings, out, started, exc)
            return
    except CudaAgentError as exc:
        fail(str(exc), exc.exit_code)
        return
    except KeyboardInterrupt:
        err_console.print("interrupted before anything could be kept; nothing written",
                          highlight=False)
        raise typer.Exit(INTERRUPTED)
    from .emit import report_dict

    console.print(f"[bold]{report_dict(result)['headline']}[/]", highlight=False)
    console.print(summary_table([result], "cuda-agent tune"))
    advice = _tf32_note(result)
    if advice:
        console.print(f"[yellow]{advice}[/]", highlight=False)
    from .runner.memory import describe as describe_memory  # torch is imported by now

    footprint = describe_memory((result.facts or {}).get("memory"))
    if footprint:
        console.print(footprint, highlight=False)
    sim = " [yellow](simulated: not verified, times are model estimates)[/]" \
        if result.simulated else ""
    if result.stopped in ("interrupted", "time_limit"):
        why = "interrupted" if result.interrupted else \
            f"time limit ({result.settings.time_limit_s:g} s) reached"
        # Ctrl-C's one line goes to stderr, as bench's and train's do
        say = err_console if result.interrupted else console
        if result.best is None:
            say.print(f"{why} after {len(result.trials)} measured candidates, none passed yet: "
                      f"wrote {out}/report.json only", highlight=False, soft_wrap=True)
        else:
            say.print(f"{why} after {len(result.trials)} measured candidates: kept the best so "
                      f"far ({_fmt_ms(result.best.measurement.time_ms, result.simulated)}); "
                      f"wrote {out}/model_new.py, kernel.cu, report.json{sim}",
                      highlight=False, soft_wrap=True)
        if result.interrupted:
            raise typer.Exit(INTERRUPTED)
        if result.best is not None:
            return
    if result.best is None:
        fail("no candidate passed verification; see report.json for every failure", 1)
    console.print(f"wrote {out}/model_new.py, kernel.cu, report.json{sim}")


@app.command()
def sweep(
    problems: list[Path] = typer.Argument(..., help="problem files or directories"),
    device: Optional[str] = typer.Option(None, help="cuda (default when a GPU is present) | sim"),
    sample: Optional[int] = typer.Option(None, help="measure a random sample of this many "
                                         "configurations instead of the whole space"),
    out_root: Path = typer.Option(default_factory=recorded_sweeps, help="where sweep files go",
                                  show_default="$CUDA_AGENT_REPLAY_ROOT, else the checkout's "
                                  "benchmarks/data"),
    seed: int = typer.Option(0),
    store: Optional[str] = typer.Option(None),
) -> None:
    """Measure a whole space (or a stated sample) and record it for the replay device."""
    files: list[Path] = []
    with _flag_errors():  # every flag, before a device is opened or anything is printed
        for p in problems:
            flags.existing_path("", p)
            files.extend(sorted(p.glob("*.py")) if p.is_dir() else [p])
        if device == "replay":
            raise SettingsError("--device replay: sweep needs a measuring device; choose from "
                                "cuda, sim")
        flags.check_device(device, ("cuda", "sim"))
        if sample is not None:
            flags.at_least("--sample", sample, 1)
        check_out_dir(out_root)
    from .sweep import sweep_problem, sweep_settings
    from .tuner import open_device

    # the sweep's settings, built once here from every flag (`settings.py`)
    settings = sweep_settings(device=device, sample=sample, seed=seed,
                              store=store or default_store())
    try:
        shared = open_device(device, settings,
                             lambda s: console.print(f"[yellow]{s}[/]", soft_wrap=True))
    except CudaAgentError as exc:
        fail(str(exc))
        return
    results = []
    try:
        with _progress() as bar:
            for f in files:
                try:
                    r, path = sweep_problem(
                        f, out_root, settings=settings, shared_device=shared,
                        progress_for=lambda t: _bar_callback(bar, t, sample or len(t.space)))
                except CudaAgentError as exc:
                    err_console.print(f"[red]skipped {f}: {exc}[/]")
                    continue
                bar.console.print(f"recorded {len(r.trials)} of {len(r.space)} configurations "
                                  f"-> {path}")
                results.append(r)
    finally:
        shared.close()
    if not results:
        fail("nothing was swept")
    console.print(summary_table(results, "cuda-agent sweep"))


@app.command()
def train(
    suite: Path = typer.Option(default_factory=example_suite, help="directory of problem files",
                               show_default="$CUDA_AGENT_SUITE, else the checkout's "
                               "benchmarks/problems"),
    device: Optional[str] = typer.Option(None, help="cuda | sim | replay (default: cuda when "
                                         "a GPU is present, else sim)"),
    replay_root: Optional[Path] = typer.Option(None, help="recorded sweeps for --device replay"),
    agents: str = typer.Option("multi", help="multi (four agents) | single (the ablation)"),
    iterations: int = typer.Option(20, help="PPO updates"),
    episodes: int = typer.Option(4, help="episodes per update"),
    steps: int = typer.Option(4, help="steps per episode"),
    batch: int = typer.Option(8, help="configurations measured per step"),
    holdout: str = typer.Option("", help="comma-separated problem names to keep out"),
    aux_weight: float = typer.Option(0.05, help="weight of each agent's own-metric reward"),
    explore: str = typer.Option("targeted", help="targeted | none"),
    out: Path = typer.Option(Path("runs/train"), help="checkpoint, curves.json, curves.png"),
    resume: bool = typer.Option(False, help="continue from OUT/policy.pt"),
    seed: int = typer.Option(0),
    samplers: int = typer.Option(1, help="episodes sampled concurrently (sim/replay)"),
    operators_per_iteration: int = typer.Option(
        0, help="operators an update's episodes share (0: each episode draws its own); on a "
        "GPU, 1 or 2 saves the set-up of a new problem for most episodes"),
    prior_weight: float = typer.Option(
        0.0, help="the analytic model's prior on the episodes' proposals, as `tune` adds it "
        "(0: off; tune's default is 100): the policy then learns what the model misses"),
    time_limit: Optional[float] = typer.Option(
        None, help="seconds: no update is started that the last one's duration says would end "
        "past it; the checkpoint is saved and --resume continues the run"),
    ray: Optional[str] = typer.Option(
        None, "--ray", help="sample on a Ray fleet: auto (a running cluster, else a local one "
        "started for the run), local, or a cluster's address; sampler actors (one per GPU, or "
        "--samplers on sim/replay), compiles as tasks, the learner here (pip install "
        "'cuda-agent[cluster]')"),
) -> None:
    """Train the agents across a suite of operators (multi-agent PPO).

    Ctrl-C stops the run at once: the checkpoint of the last finished iteration is kept and
    --resume continues from it (exit 130); a second Ctrl-C aborts."""
    with _flag_errors():  # every flag, before the suite is loaded or anything is printed
        flags.check_suite(str(suite))
        flags.check_device(device)
        flags.existing_dir("--replay-root", replay_root)
        flags.one_of("--agents", agents, AGENTS)
        for name, value in (("iterations", iterations), ("episodes", episodes),
                            ("steps", steps), ("batch", batch), ("samplers", samplers)):
            flags.at_least(f"--{name}", value, 1)
        flags.at_least("--operators-per-iteration", operators_per_iteration, 0)
        flags.at_least("--aux-weight", aux_weight, 0)
        flags.one_of("--explore", explore, ("targeted", "none"))
        flags.at_least("--prior-weight", prior_weight, 0)
        flags.positive("--time-limit", time_limit)
        if ray is not None:
            if not ray.strip():
                raise SettingsError("--ray: give auto, local or a cluster's address")
            from .fleet.connect import require_ray

            require_ray()
        check_out_dir(out)
    from .agents.reward import RewardSettings
    from .agents.train import TrainSettings, Trainer, resumable, write_curves

    if resume and (out / "policy.pt").exists():
        with _flag_errors():  # a checkpoint that cannot go on: before the suite is loaded
            resumable(out / "policy.pt", agents)

    # training's settings, built once here from every flag (`settings.py`)
    settings = TrainSettings.of(
        suite=str(suite), device=device, replay_root=str(replay_root) if replay_root else None,
        agents=agents, iterations=iterations, episodes=episodes, steps=steps, batch=batch,
        holdout=tuple(h for h in holdout.split(",") if h), explore=explore, out=str(out),
        resume=resume, seed=seed, samplers=samplers, ray=ray,
        operators_per_iteration=operators_per_iteration, prior_weight=prior_weight,
        reward=RewardSettings(aux_weight=aux_weight), time_limit_s=time_limit)
    limit = settings.run.time_limit_s  # counted from here: loading the suite too
    deadline = time.time() + limit if limit else None
    with interrupt.first_stops_second_aborts():
        try:
            with _progress() as bar:  # capturing and planning every problem of the suite
                load = bar.add_task("loading the suite", total=None, status="")
                trainer = Trainer(settings, notify=lambda m: console.print(f"[yellow]{m}[/]",
                                                                           soft_wrap=True),
                                  loading=lambda i, n, name: bar.update(
                                      load, completed=i, total=n, status=name))
        except (CudaAgentError, ValueError) as exc:
            fail(str(exc))
            return
        except KeyboardInterrupt:
            err_console.print("interrupted while loading the suite: nothing written",
                              highlight=False)
            raise typer.Exit(INTERRUPTED)
        sim = " (simulated)" if trainer.device.simulated else ""
        stopped = False
        try:
            with _progress() as bar:
                task = bar.add_task(f"train ({trainer.device.kind}{sim})", total=iterations,
                                    completed=trainer.iteration, status="")

                def on_iter(row: dict) -> None:
                    ent = " ".join(f"{g[:4]} {v:.2f}" for g, v in row["entropy"].items())
                    bar.update(task, completed=row["iteration"],
                               status=f"reward {row['mean_reward'] or 0:+.3f} entropy {ent}")
                if ray is not None:
                    bar.update(task, status="starting the Ray fleet")
                curves = trainer.train(on_iter, deadline=deadline,
                                       preparing=lambda name: bar.update(
                                           task, status=f"listing the space of {name}"))
        except CudaAgentError as exc:  # the fleet failed as a whole (a lost sampler does not)
            fail(str(exc))  # (the trainer is closed below)
        except KeyboardInterrupt:
            # the checkpoint on disk is the last finished iteration's (each is saved whole
            # as it ends); the iteration cut short is sampled again by --resume
            stopped = True
            curves = [c for c in trainer.curves if c["iteration"] <= trainer.saved_iteration]
        finally:
            trainer.close()
        if stopped:
            if not curves:
                err_console.print("interrupted before the first update finished: nothing "
                                  "written", highlight=False, soft_wrap=True)
                raise typer.Exit(INTERRUPTED)
            png = write_curves(curves, out, f"cuda-agent train ({agents} agents, "
                                            f"{trainer.device.gpu_name()})")
            err_console.print(f"interrupted: kept {out}/policy.pt at iteration "
                              f"{trainer.saved_iteration} of {iterations} (curves.json, "
                              f"{png.name}); --resume continues", highlight=False,
                              soft_wrap=True)
            raise typer.Exit(INTERRUPTED)
    if len(curves) < iterations:
        console.print(f"[yellow]stopped at iteration {len(curves)} of {iterations} by "
                      "--time-limit; --resume continues[/]")
    png = write_curves(curves, out, f"cuda-agent train ({agents} agents, "
                                    f"{trainer.device.gpu_name()})")
    if trainer.fleet_report is not None:
        console.print(fleet_line(trainer.fleet_report))
    console.print(f"wrote {out}/policy.pt, curves.json, {png.name}"
                  f"{', fleet.json' if trainer.fleet_report is not None else ''}{sim}")


def fleet_line(rep: dict) -> str:
    """What a Ray fleet did and lost, in a line."""
    lost = (f"lost {rep['lost_episodes']} episode(s) (at most {rep['lost_samples_at_most']} "
            f"samples) to failed samplers or nodes" if rep["lost_episodes"] else "lost nothing")
    return (f"Ray fleet: {rep['samplers']} samplers on {rep['nodes']} node(s), "
            f"{rep['episodes']} episodes, {rep['measurements']} measured, "
            f"{rep['served_by_fleet']} served by the fleet; {lost}")


@app.command()
def failures(
    store: Optional[str] = typer.Option(None, help="SQLite store (default ~/.cache/cuda-agent)"),
    top: int = typer.Option(20, help="rows to show"),
) -> None:
    """Failures grouped by template, error kind and slot value: a template bug shows at once."""
    from .store import Store

    path = store or default_store()
    if path != ":memory:" and not Path(path).exists():
        fail(f"{path}: no store yet (run cuda-agent tune first)")
    try:
        with Store(path, strict=True) as st:  # a corrupt store: one line, not a traceback
            groups = st.failure_groups()
    except CudaAgentError as exc:
        fail(str(exc), exc.exit_code)
        return
    if not groups:
        console.print("no failures recorded")
        return
    table = Table(title=f"failures in {path}")
    for col in ("template", "kind", "agent", "slot = value", "failed", "of", "share"):
        table.add_column(col, justify="right" if col in ("failed", "of", "share") else "left")
    for g in groups[:top]:
        table.add_row(g["template"], g["error_kind"], g["agent"], f"{g['slot']} = {g['value']}",
                      str(g["count"]), str(g["total"]), f"{100 * g['share']:.0f}%")
    console.print(table)


@app.command()
def bench(
    suite: Path = typer.Option(default_factory=example_suite, help="problems: a directory, a "
                               "file, or comma-separated files (run in that order)",
                               show_default="$CUDA_AGENT_SUITE, else the checkout's "
                               "benchmarks/problems"),
    device: str = typer.Option("replay", help="replay: recorded GPU sweeps; cuda: every "
                               "strategy and baseline measured on the GPU in this run; sim: "
                               "the same live run on the simulated device"),
    replay_root: Optional[Path] = typer.Option(None, help="recorded sweeps (default "
                                               "$CUDA_AGENT_REPLAY_ROOT, else the checkout's "
                                               "benchmarks/data)"),
    budget: int = typer.Option(100, help="measurements per strategy, problem and seed"),
    seeds: int = typer.Option(5),
    strategies: str = typer.Option(
        ",".join(BENCH_DEFAULT),
        help="comma-separated, of: " + ", ".join(bench_strategy_names()) + ". prior: the "
             "analytic model's ranking alone; optuna_warm, kt_warm:*: the peers started from "
             "the model's top picks (optuna, kt:* start cold); the agents' ablations when "
             "named: marl_noprior, marl_untrained, marl_single"),
    policy: Optional[Path] = typer.Option(None, help="trained agents checkpoint (for marl), or "
                                          "several comma-separated: each problem tuned by one "
                                          "that never trained on it"),
    single_policy: Optional[str] = typer.Option(
        None, help="single-agent checkpoint(s) for the ablation strategy marl_single, "
                   "comma-separated as --policy"),
    sim_constants: Optional[str] = typer.Option(
        None, help="the analytic model's constants fitted per fold (benchmarks/sim_folds/"
                   "*.json, comma-separated): each problem ranked by a model fitted without "
                   "it (default: the shipped model)"),
    out: Path = typer.Option(Path("runs/bench"), help="bench.json, bench.md, plots, "
                             "report.html"),
    problem_seconds: Optional[float] = typer.Option(
        None, help="live runs: give a problem up (listed as not compared) once it has run "
                   "this long"),
    parallel: int = typer.Option(1, help="live runs: strategy runs searching at once per "
                                 "problem (they compile side by side; measurements still take "
                                 "the GPU one at a time)"),
    precision: str = typer.Option("auto", help="live runs: " + PRECISION_HELP),
    stage_patience: int = typer.Option(STAGE_PATIENCE, help=STAGE_PATIENCE_HELP),
    tolerance: str = typer.Option("strict", help=TOLERANCE_HELP),
    baselines: bool = typer.Option(True, help="live runs: time torch eager and torch.compile "
                                   "per problem too (--no-baselines: the strategies alone)"),
) -> None:
    """Compare cuda-agent with random search, a genetic algorithm, Optuna and Kernel Tuner.

    Ctrl-C stops the run at once: the problems finished are kept and reported (exit 130); a
    second Ctrl-C aborts."""
    strategy_names_asked = tuple(s for s in strategies.split(",") if s)
    with _flag_errors():  # every flag, before a problem is loaded or anything is printed
        # (`bench` itself imports torch: checked here with flags.py alone, no import)
        flags.check_bench(
            suite=str(suite), device=device, strategies=strategy_names_asked, budget=budget,
            seeds=seeds, parallel=parallel, policy=str(policy) if policy else None,
            single_policy=single_policy, sim_constants=sim_constants, precision=precision,
            tolerance=tolerance, problem_seconds=problem_seconds,
            stage_patience=stage_patience or None,
            replay_root=str(replay_root) if replay_root else None)
        check_out_dir(out)
    from .bench import BENCH_RUN, BenchSettings

    # the bench's settings, built once here from every flag (`settings.py`): every strategy
    # run takes its run settings whole (`bench.strategy_settings`)
    settings = BenchSettings(
        suite=str(suite), strategies=strategy_names_asked,
        seeds=seeds, policy=str(policy) if policy else None, single_policy=single_policy,
        sim_constants=sim_constants, out=str(out), problem_seconds=problem_seconds,
        parallel=parallel,
        run=replace(BENCH_RUN, device=device, budget=budget,
                    replay_root=str(replay_root) if replay_root else None,
                    precision=precision, stage_patience=stage_patience or None,
                    tolerance=tolerance, baselines=baselines))
    from .bench import jobs_of, problem_files, run_bench
    from .report.bench_report import PARTIAL, write_partial, write_report

    out_existed = out.exists()
    total = len(problem_files(settings.suite)) * len(jobs_of(settings))
    try:
        with interrupt.first_stops_second_aborts():
            try:
                with _progress() as bar:
                    task = bar.add_task(f"bench ({device})", total=total, status="")
                    started: set[str] = set()

                    def step(p: str, s: str, k: int) -> None:
                        bar.update(task, advance=1, status=f"{p} {s} seed {k}")
                        if not console.is_terminal and p not in started:
                            # a log file gets no live bar: one line per problem shows progress
                            started.add(p)
                            console.print(f"bench ({device}): {p} ({len(started)} problems "
                                          "begun)")

                    def skip(p: str, runs: int) -> None:  # runs that will not be made
                        bar.update(task, advance=runs, status=f"{p} not compared")

                    # what is finished stays on disk (a run stopped from outside, a time
                    # limit, Ctrl-C, keeps its problems, and `cuda-agent report` reads them)
                    if device == "replay":
                        result = run_bench(settings, step, skip,
                                           on_problem=lambda r: write_partial(r, out))
                    else:
                        from .bench_live import run_live_bench

                        result = run_live_bench(settings, step, notify=console.print,
                                                on_problem=lambda r: write_partial(r, out),
                                                skipped=skip)
            except KeyboardInterrupt:
                _keep_finished_bench(out, out_existed)
    except CudaAgentError as exc:
        if (out / PARTIAL).exists():
            # the problems finished before the error are whole results (written atomically
            # after each): kept, not thrown away with the one that failed
            fail(f"{exc} (the problems finished before it are in {out / PARTIAL}: "
                 f"`cuda-agent report {out}` reports them)")
            return
        _remove_if_empty(out, out_existed)
        fail(str(exc))
        return
    files = write_report(result, out)
    (out / PARTIAL).unlink(missing_ok=True)
    console.print(files["markdown"].read_text().split("###")[1].split("\n", 1)[1])
    console.print(f"wrote {', '.join(str(p) for p in files.values())}")


def _remove_if_empty(out: Path, existed: bool) -> None:
    """A directory this run made and left empty goes: a failed run writes nothing."""
    if not existed and out.is_dir() and not any(out.iterdir()):
        out.rmdir()


def _keep_finished_bench(out: Path, existed: bool) -> None:
    """After Ctrl-C: the report of the problems finished (as `cuda-agent report` rebuilds it
    from the partial result), one line saying what was kept, exit 130."""
    from .report.bench_report import PARTIAL, load_run, rebuild

    partial = out / PARTIAL
    done = load_run(out) if partial.exists() else None
    if done is None or not done.problems:
        partial.unlink(missing_ok=True)
        _remove_if_empty(out, existed)
        err_console.print("interrupted before any problem was finished: nothing written",
                          highlight=False, soft_wrap=True)
        raise typer.Exit(INTERRUPTED)
    files = rebuild(out)
    n = len(done.problems)
    err_console.print(f"interrupted: kept {n} finished problem{'s' if n != 1 else ''}, "
                      f"reported in {files['json']} ({files['markdown'].name}, "
                      f"{files['html'].name}); the rest were not run", highlight=False,
                      soft_wrap=True)
    raise typer.Exit(INTERRUPTED)


@app.command()
def report(runs: list[Path] = typer.Argument(..., help="bench output directories"),
           out: Optional[Path] = typer.Option(None, help="merge the runs' problems into one "
                                              "report here (several runs)")) -> None:
    """Rebuild a bench run's tables, plots and HTML page from its bench.json, or merge several
    runs of the same settings into one report."""
    from .report.bench_report import PARTIAL, merge_runs, rebuild

    for run in runs:
        if not (run / "bench.json").exists() and not (run / PARTIAL).exists():
            fail(f"{run}: no bench.json (run cuda-agent bench first)")
    if len(runs) > 1 and out is None:
        fail("several runs: say where the merged report goes with --out")
    try:
        files = merge_runs(runs, out) if out is not None else rebuild(runs[0])
    except CudaAgentError as exc:
        fail(str(exc))
        return
    console.print(f"wrote {files['html']}")


@app.command()
def doctor(store: Optional[str] = typer.Option(
        None, help="the store to check (default: the one tune uses, shown in the table)")
           ) -> None:
    """Show what cuda-agent finds on this machine (GPU, compilers, packages) and what is missing,
    and check the store whole (exit 1 when it is damaged)."""
    from .build.compiler import nvcc_version, nvrtc_version

    table = Table(title="cuda-agent doctor")
    table.add_column("component")
    table.add_column("found")
    table.add_column("note")
    table.add_row("python", platform.python_version(), sys.executable)
    try:
        import torch
        gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
        table.add_row("torch", torch.__version__, f"CUDA {torch.version.cuda}")
        table.add_row("GPU", gpu or "[yellow]none[/]",
                      "tune runs on the real GPU" if gpu else
                      "tune falls back to the simulated device (figures labelled simulated)")
    except ImportError:
        table.add_row("torch", "[red]missing[/]", "pip install torch")
    nv = nvrtc_version()
    table.add_row("NVRTC", nv or "[red]missing[/]",
                  "compiles candidates" if nv else "pip install nvidia-cuda-nvrtc cuda-bindings")
    nvcc = nvcc_version()
    table.add_row("nvcc", nvcc or "[yellow]missing[/]", shutil.which("nvcc") or
                  "optional (--compiler nvcc)")
    for pkg, why in (("cuda-bindings", "driver API and NVRTC"), ("typer", "CLI"),
                     ("rich", "progress and tables"), ("matplotlib", "plots"),
                     ("optuna", "optional: Optuna baseline"),
                     ("kernel_tuner", "optional: Kernel Tuner baseline"),
                     ("ray", "optional: cluster fleet")):
        try:
            table.add_row(pkg, md.version(pkg), why)
        except md.PackageNotFoundError:
            table.add_row(pkg, "[yellow]missing[/]", why)
    path = store or default_store()
    health = store_health(path)
    table.add_row("store", path, _health_note(health))
    table.add_row("CPU cores", str(os.cpu_count()), "compile processes")
    console.print(table)
    if health.problems:
        for problem in health.problems:  # one line each, as integrity_check words them
            err_console.print(f"store {path}: {problem}", highlight=False, soft_wrap=True)
        fail(f"store {path} is damaged: move it away (the next run starts a new store there), "
             "or keep it and pass --store with another file", 1)
    if health.newer:
        fail(f"store {path}: schema version {health.version}, written by a newer cuda-agent; "
             f"this one reads versions up to {SCHEMA_VERSION}: upgrade cuda-agent "
             "(pip install -U cuda-agent) or pass --store with another file", 1)


def _health_note(health) -> str:  # noqa: ANN001 - a store.StoreHealth
    if not health.exists:
        return "none yet: tune starts it (SQLite record of every measurement)"
    if health.problems:
        return f"[red]damaged[/]: {len(health.problems)} problem(s), listed below"
    newer = " [red](newer than this cuda-agent reads)[/]" if health.newer else ""
    return (f"schema version {health.version}{newer}, {health.measurements} measurements, "
            "integrity check passed")


def main() -> None:
    try:
        app()
    except CudaAgentError as exc:
        fail(str(exc), exc.exit_code)


if __name__ == "__main__":
    main()
