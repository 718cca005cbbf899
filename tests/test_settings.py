"""One settings object per run (`settings.py`): every flag of every command lands in it, and
the parts of a run that derive their own settings from it (a bench's strategy runs) keep
everything the user set."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Callable

import pytest
import typer
from typer.testing import CliRunner

from cuda_agent import cli
from cuda_agent.errors import SettingsError
from cuda_agent.settings import RunSettings

ROOT = Path(__file__).resolve().parents[1]
GOOD = ROOT / "tests" / "data" / "good"
SOFTMAX = ROOT / "benchmarks" / "problems" / "softmax_tinyrows_odd.py"


class Captured(SettingsError):
    """Raised where the command hands its settings on: the command ends there (exit 2)."""


def _invoke(monkeypatch: pytest.MonkeyPatch, target: Any, name: str,
            settings_of: Callable[..., Any], args: list[str]) -> Any:
    """Run `cuda-agent ARGS` with `target.name` replaced by a function that keeps the settings
    it is handed (`settings_of(*args, **kw)`) and ends the command; those settings."""
    seen: list[Any] = []

    def capture(*a: Any, **kw: Any) -> Any:
        seen.append(settings_of(*a, **kw))
        raise Captured("captured")

    monkeypatch.setattr(target, name, capture)
    result = CliRunner().invoke(cli.app, args)
    assert seen, f"the settings never reached {name}: {result.output[-2000:]}"
    return seen[0]


def _flags(command: str) -> set[str]:
    """The parameter names of `cuda-agent COMMAND` (its flags and arguments)."""
    group = typer.main.get_command(cli.app)
    return {p.name for p in group.commands[command].params}  # type: ignore[attr-defined]


def _check(command: str, settings: Any, landed: dict[str, Callable[[Any], bool]],
           not_settings: set[str]) -> None:
    """Every flag of `command` is either checked in `landed` (its value found in `settings`)
    or named in `not_settings` (what the command acts on, not how): a flag added later
    without a place in the settings fails here."""
    unchecked = _flags(command) - set(landed) - not_settings
    assert not unchecked, f"{command}: flags not checked against the settings: {unchecked}"
    wrong = [flag for flag, holds in landed.items() if not holds(settings)]
    assert not wrong, f"{command}: flags whose value is not in the settings: {wrong}"


def test_every_tune_flag_lands_in_the_run_settings(tmp_path, monkeypatch):
    policy = tmp_path / "policy.pt"
    policy.write_bytes(b"")
    args = ["tune", str(GOOD / "softmax_small.py"), "--device", "sim", "--strategy", "marl",
            "--budget", "7", "--out", str(tmp_path / "out"), "--batch", "3", "--seed", "5",
            "--store", str(tmp_path / "s.sqlite"), "--no-baselines",
            "--replay-root", str(tmp_path), "--policy", str(policy), "--agents", "single",
            "--patience", "2", "--precision", "fp16", "--stage-patience", "3",
            "--tolerance", "kernelbench", "--time-limit", "99", "--compile-timeout", "77",
            "--baseline-timeout", "55", "--import-timeout", "44", "--import-memory", "2"]
    s = _invoke(monkeypatch, cli, "run_tune", lambda path, settings, *a: settings, args)
    assert isinstance(s, RunSettings)
    opts = s.strategy_options
    _check("tune", s, {
        "device": lambda s: s.device == "sim", "strategy": lambda s: s.strategy == "marl",
        "budget": lambda s: s.budget == 7, "batch": lambda s: s.batch == 3,
        "seed": lambda s: s.seed == 5, "store": lambda s: s.store == str(tmp_path / "s.sqlite"),
        "baselines": lambda s: s.baselines is False,
        "replay_root": lambda s: s.replay_root == str(tmp_path),
        "policy": lambda s: opts["policy"] == str(policy),
        "agents": lambda s: opts["agents"] == "single",
        "patience": lambda s: opts["patience"] == 2,
        "precision": lambda s: s.precision == "fp16",
        "stage_patience": lambda s: s.stage_patience == 3,
        "tolerance": lambda s: s.tolerance == "kernelbench",
        "time_limit": lambda s: s.time_limit_s == 99,
        "compile_timeout": lambda s: s.compile_timeout_s == 77,
        "baseline_timeout": lambda s: s.baseline_timeout_s == 55,
        "import_timeout": lambda s: s.import_timeout_s == 44,
        "import_memory": lambda s: s.import_memory_bytes == 2 * 10**9,
    }, not_settings={"problem", "out"})  # what is tuned, and where its kernel is written


def test_every_bench_flag_lands_in_the_bench_settings(tmp_path, monkeypatch):
    from cuda_agent import bench_live
    from cuda_agent.bench import BenchSettings

    files = {}
    for name in ("policy.pt", "single.pt", "fold.json"):
        files[name] = tmp_path / name
        files[name].write_bytes(b"")
    args = ["bench", "--suite", str(SOFTMAX), "--device", "sim", "--replay-root", str(tmp_path),
            "--budget", "7", "--seeds", "2", "--strategies", "random,marl_single",
            "--policy", str(files["policy.pt"]), "--single-policy", str(files["single.pt"]),
            "--sim-constants", str(files["fold.json"]), "--out", str(tmp_path / "out"),
            "--problem-seconds", "9", "--parallel", "2", "--precision", "fp16",
            "--stage-patience", "3", "--tolerance", "kernelbench", "--no-baselines"]
    s = _invoke(monkeypatch, bench_live, "run_live_bench", lambda settings, *a, **k: settings,
                args)
    assert isinstance(s, BenchSettings)
    _check("bench", s, {
        "suite": lambda s: s.suite == str(SOFTMAX), "device": lambda s: s.run.device == "sim",
        "replay_root": lambda s: s.run.replay_root == str(tmp_path),
        "budget": lambda s: s.run.budget == 7, "seeds": lambda s: s.seeds == 2,
        "strategies": lambda s: s.strategies == ("random", "marl_single"),
        "policy": lambda s: s.policy == str(files["policy.pt"]),
        "single_policy": lambda s: s.single_policy == str(files["single.pt"]),
        "sim_constants": lambda s: s.sim_constants == str(files["fold.json"]),
        "out": lambda s: s.out == str(tmp_path / "out"),
        "problem_seconds": lambda s: s.problem_seconds == 9,
        "parallel": lambda s: s.parallel == 2, "precision": lambda s: s.run.precision == "fp16",
        "stage_patience": lambda s: s.run.stage_patience == 3,
        "tolerance": lambda s: s.run.tolerance == "kernelbench",
        "baselines": lambda s: s.run.baselines is False,
    }, not_settings=set())


def test_every_train_flag_lands_in_the_train_settings(tmp_path, monkeypatch):
    from cuda_agent.agents import train

    args = ["train", "--suite", str(GOOD), "--device", "sim", "--replay-root", str(tmp_path),
            "--agents", "single", "--iterations", "3", "--episodes", "2", "--steps", "5",
            "--batch", "6", "--holdout", "a,b", "--aux-weight", "0.5", "--explore", "none",
            "--out", str(tmp_path / "out"), "--resume", "--seed", "4", "--samplers", "2",
            "--operators-per-iteration", "1", "--prior-weight", "10", "--time-limit", "99",
            "--ray", "auto"]
    s = _invoke(monkeypatch, train, "Trainer", lambda settings, *a, **k: settings, args)
    assert isinstance(s, train.TrainSettings)
    _check("train", s, {
        "suite": lambda s: s.suite == str(GOOD), "device": lambda s: s.run.device == "sim",
        "replay_root": lambda s: s.run.replay_root == str(tmp_path),
        "agents": lambda s: s.agents == "single", "iterations": lambda s: s.iterations == 3,
        "episodes": lambda s: s.episodes == 2, "steps": lambda s: s.steps == 5,
        "batch": lambda s: s.batch == 6, "holdout": lambda s: s.holdout == ("a", "b"),
        "aux_weight": lambda s: s.reward.aux_weight == 0.5,
        "explore": lambda s: s.explore == "none", "out": lambda s: s.out == str(tmp_path / "out"),
        "resume": lambda s: s.resume is True, "seed": lambda s: s.run.seed == 4,
        "samplers": lambda s: s.samplers == 2,
        "operators_per_iteration": lambda s: s.operators_per_iteration == 1,
        "prior_weight": lambda s: s.prior_weight == 10,
        "time_limit": lambda s: s.run.time_limit_s == 99, "ray": lambda s: s.ray == "auto",
    }, not_settings=set())


def test_every_sweep_flag_lands_in_the_run_settings(tmp_path, monkeypatch):
    from cuda_agent import tuner

    args = ["sweep", str(GOOD / "softmax_small.py"), "--device", "sim", "--sample", "5",
            "--out-root", str(tmp_path / "data"), "--seed", "3",
            "--store", str(tmp_path / "s.sqlite")]
    s = _invoke(monkeypatch, tuner, "open_device", lambda name, settings, notify: settings,
                args)
    _check("sweep", s, {
        "device": lambda s: s.device == "sim",
        "sample": lambda s: s.budget == 5 and s.strategy == "random",
        "seed": lambda s: s.seed == 3, "store": lambda s: s.store == str(tmp_path / "s.sqlite"),
    }, not_settings={"problems", "out_root"})  # what is swept, and where its files go


def _spied_tuners(monkeypatch: pytest.MonkeyPatch, module: Any) -> list[RunSettings]:
    """The settings of every tuner `module` makes from now on."""
    made: list[RunSettings] = []
    real = module.Tuner

    def spy(problem: Any, settings: RunSettings, *a: Any, **kw: Any) -> Any:
        made.append(settings)
        return real(problem, settings, *a, **kw)

    monkeypatch.setattr(module, "Tuner", spy)
    return made


def _is_the_bench_run(s: RunSettings, run: RunSettings, device: str) -> bool:
    """`s` is the bench's run settings but what a strategy run sets for itself."""
    own = dict(device=device, strategy=s.strategy, seed=s.seed, batch=4, baselines=False,
               include_default=False, strategy_options=s.strategy_options)
    return s == dataclasses.replace(run, **own)


def test_a_live_strategy_run_keeps_the_bench_tolerance_and_time_limit(tmp_path, monkeypatch):
    """Each strategy run of a live bench takes the bench's run settings whole: before, its
    tuner's settings were rebuilt field by field without the tolerance (they said "strict"
    while the device verified in conformance mode) and without the time limit."""
    from cuda_agent import bench_live
    from cuda_agent.bench import BenchSettings

    made = _spied_tuners(monkeypatch, bench_live)
    settings = BenchSettings.of(suite=str(SOFTMAX), strategies=("random", "genetic"),
                                budget=2, seeds=1, out=str(tmp_path), device="sim",
                                tolerance="kernelbench", time_limit_s=321.0, baselines=False)
    bench_live.run_live_bench(settings)
    assert {s.strategy for s in made} >= {"random", "genetic"}
    for s in made:
        assert s.tolerance == "kernelbench" and s.time_limit_s == 321.0
        assert _is_the_bench_run(s, settings.run, "sim"), s


def test_a_replayed_strategy_run_keeps_the_bench_time_limit(monkeypatch):
    from cuda_agent import bench
    from cuda_agent.bench import BenchSettings

    made = _spied_tuners(monkeypatch, bench)
    settings = BenchSettings.of(suite=str(ROOT / "benchmarks/problems/softmax_short_rows.py"),
                                strategies=("random",), budget=3, seeds=1,
                                replay_root=str(ROOT / "benchmarks/data"), time_limit_s=321.0)
    result = bench.run_bench(settings)
    assert [len(r.times) for r in result.runs] == [3]
    asked = [s for s in made if s.strategy == "random" and s.budget == 3]
    assert asked and all(s.time_limit_s == 321.0 for s in asked)
    assert all(_is_the_bench_run(s, settings.run, "replay") for s in asked)


def test_the_run_settings_are_frozen_and_recorded_whole():
    s = RunSettings(strategy_options={"policy": object()})
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.budget = 3  # type: ignore[misc]
    record = s.record()
    assert set(record) == {f.name for f in dataclasses.fields(RunSettings)}
    assert record["strategy_options"]["policy"].startswith("<object")


def test_a_sweep_measures_at_the_precision_replay_serves_it():
    """Replay serves every recorded sweep as strict fp32 (the file records configurations
    only): a sweep timed at `auto` (TF32 convolutions in a fresh process) would be replayed as
    if strict."""
    from cuda_agent.sweep import sweep_settings

    assert sweep_settings(device="sim").precision == "fp32"
    assert sweep_settings(device="sim", sample=5).precision == "fp32"


def test_bench_and_train_load_problems_within_the_runs_import_limits(monkeypatch):
    """`import_timeout_s` and `import_memory_bytes` reach every loader: bench's and training's
    loaded each problem at the default limits whatever the settings said."""
    from pathlib import Path

    from cuda_agent import bench
    from cuda_agent.agents import train

    seen = []

    class Stop(Exception):
        pass

    def loader(path, limits=None):
        seen.append(limits)
        raise Stop

    monkeypatch.setattr(bench, "load_problem_bounded", loader)
    monkeypatch.setattr(train, "load_problem_bounded", loader)
    problem = str(GOOD / "softmax_small.py")
    with pytest.raises(Stop):
        bench.run_bench(bench.BenchSettings.of(suite=problem, import_timeout_s=7,
                                               import_memory_bytes=123 << 20))
    with pytest.raises(Stop):
        train.operator_tuner(Path(problem), train.TrainSettings.of(
            suite=problem, import_timeout_s=9, import_memory_bytes=456 << 20), None, None,
            None, lambda s: None)
    assert [(x.time_s, x.memory_bytes) for x in seen] == [(7, 123 << 20), (9, 456 << 20)]
