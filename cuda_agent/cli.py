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
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                           TimeElapsedColumn)
from rich.table import Table

from .errors import CudaAgentError

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="cuda-agent: fast CUDA kernels for PyTorch reference programs, found by "
                       "measuring candidates on the GPU.")
console = Console()
err_console = Console(stderr=True)


def default_store() -> str:
    root = os.environ.get("CUDA_AGENT_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "cuda-agent")
    return os.path.join(root, "store.sqlite")


def fail(msg: str, code: int = 2) -> None:
    err_console.print(f"[bold red]error:[/] {msg}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def _fmt_ms(v: Optional[float], simulated: bool = False) -> str:
    if v is None:
        return "-"
    return f"{v:.4f} ms" + (" (sim)" if simulated else "")


def _progress() -> Progress:
    return Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TextColumn("{task.fields[status]}"), TimeElapsedColumn(), console=console,
                    transient=False)


def run_tune(problem_path: Path, settings_kw: dict, out: Optional[Path], quiet: bool = False):
    """Shared by `tune` and `sweep`: one problem, with a progress bar."""
    from .problem import load_problem
    from .tuner import TuneSettings, Tuner

    problem = load_problem(problem_path)
    settings = TuneSettings(**settings_kw)
    tuner = Tuner(problem, settings, notify=lambda s: console.print(f"[yellow]{s}[/]"))
    sim = tuner.device.simulated
    budget = min(settings.budget, len(tuner.space))
    try:
        with _progress() as bar:
            task = bar.add_task(f"{problem.name} [{tuner.device.kind}]", total=budget,
                                status="")

            def on_trial(trial, best):
                status = "best " + (_fmt_ms(best.measurement.time_ms, sim) if best else "-")
                bar.update(task, advance=1, status=status)

            result = tuner.run(on_trial)
        if out is not None:
            from .emit import emit

            emit(result, out)
        return result
    finally:
        tuner.close()


def summary_table(results: list, title: str) -> Table:
    table = Table(title=title, show_lines=False)
    for col in ("problem", "family", "device", "best", "default", "eager", "compile",
                "vs eager", "vs compile", "of copy bw", "evals", "failed"):
        table.add_column(col, justify="right" if col not in ("problem", "family", "device")
                         else "left")
    for r in results:
        from .emit import report_dict

        d = report_dict(r)
        sim = r.simulated
        fails = sum(d["failures"].values())
        table.add_row(
            d["problem"], d["family"], r.device.kind + (" (simulated)" if sim else ""),
            _fmt_ms(d["best_ms"], sim),
            _fmt_ms(r.default.measurement.time_ms if r.default else None, sim),
            _fmt_ms(d["eager_ms"]), _fmt_ms(d["compile_ms"]),
            f"{d['speedup_vs_eager']:.2f}x" if d["speedup_vs_eager"] else "-",
            f"{d['speedup_vs_compile']:.2f}x" if d["speedup_vs_compile"] else "-",
            (f"{100 * d['fraction_of_copy_bw']:.0f}%" + (" (sim)" if sim else ""))
            if d["fraction_of_copy_bw"] else "-",
            str(d["evals"]), str(fails))
    return table


@app.command()
def tune(
    problem: Path = typer.Argument(..., help="problem file (class Model, get_inputs, "
                                   "get_init_inputs)"),
    device: Optional[str] = typer.Option(None, help="cuda | sim | replay (default: cuda when a "
                                         "GPU is present, else sim)"),
    strategy: str = typer.Option("random", help="search strategy: random | exhaustive"),
    budget: int = typer.Option(64, help="configurations to measure"),
    out: Optional[Path] = typer.Option(None, help="output directory (default runs/<problem>)"),
    batch: int = typer.Option(16, help="configurations built and measured together"),
    seed: int = typer.Option(0),
    store: Optional[str] = typer.Option(None, help="SQLite store (default ~/.cache/cuda-agent)"),
    baselines: bool = typer.Option(True, help="time torch eager and torch.compile too"),
) -> None:
    """Find a fast, verified kernel for PROBLEM and write model_new.py, kernel.cu, report.json."""
    try:
        out = out or Path("runs") / problem.stem
        result = run_tune(problem, dict(device=device, strategy=strategy, budget=budget,
                                        batch=batch, seed=seed, store=store or default_store(),
                                        baselines=baselines), out)
    except CudaAgentError as exc:
        fail(str(exc))
        return
    console.print(summary_table([result], "cuda-agent tune"))
    if result.best is None:
        fail("no candidate passed verification; see report.json for every failure", 1)
    note = " [yellow](simulated: not verified, times are model estimates)[/]" \
        if result.simulated else ""
    console.print(f"wrote {out}/model_new.py, kernel.cu, report.json{note}")


@app.command()
def sweep(
    problems: list[Path] = typer.Argument(..., help="problem files or directories"),
    device: Optional[str] = typer.Option(None, help="cuda (default when a GPU is present) | sim"),
    sample: Optional[int] = typer.Option(None, help="measure a random sample of this many "
                                         "configurations instead of the whole space"),
    out_root: Path = typer.Option(Path("benchmarks/data"), help="where sweep files go"),
    seed: int = typer.Option(0),
    store: Optional[str] = typer.Option(None),
) -> None:
    """Measure a whole space (or a stated sample) and record it for the replay device."""
    from .emit import git_commit
    from .run.replay import measurement_record, sweep_path, write_sweep

    files: list[Path] = []
    for p in problems:
        files.extend(sorted(p.glob("*.py")) if p.is_dir() else [p])
    results = []
    for f in files:
        try:
            kw = dict(device=device, strategy="random" if sample else "exhaustive",
                      budget=sample or 10**9, seed=seed, store=store or default_store(),
                      include_default=True, batch=32)
            r = run_tune(f, kw, None)
        except CudaAgentError as exc:
            err_console.print(f"[red]skipped {f}: {exc}[/]")
            continue
        if r.device.kind == "replay":
            fail("sweep needs a measuring device (cuda or sim)")
        gpu = r.device.gpu_name()
        data = {"problem": r.problem.name, "source_hash": r.problem.source_hash,
                "fingerprint": r.problem.graph().fingerprint(), "space_version": r.space.version,
                "gpu": gpu, "device": r.device.kind, "simulated": r.simulated,
                "toolchain": r.toolchain, "target": r.device.target().__dict__,
                "copy_bw": r.device.copy_bandwidth(),
                "baselines": {"eager_ms": r.baselines.eager_ms,
                              "compile_ms": r.baselines.compile_ms},
                "date": time.strftime("%Y-%m-%d"), "commit": git_commit(),
                "sampled": bool(sample), "space_size": len(r.space),
                "records": [measurement_record(t.config, t.measurement) for t in r.trials]}
        path = sweep_path(r.problem.name, gpu, out_root)
        write_sweep(path, data)
        console.print(f"recorded {len(r.trials)} of {len(r.space)} configurations -> {path}")
        results.append(r)
    if results:
        console.print(summary_table(results, "cuda-agent sweep"))
    if not results:
        fail("nothing was swept")


@app.command()
def doctor() -> None:
    """Show what cuda-agent finds on this machine (GPU, compilers, packages) and what is missing."""
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
    table.add_row("store", default_store(), "SQLite record of every measurement")
    table.add_row("CPU cores", str(os.cpu_count()), "compile processes")
    console.print(table)


def main() -> None:
    try:
        app()
    except CudaAgentError as exc:
        fail(str(exc))


if __name__ == "__main__":
    main()
