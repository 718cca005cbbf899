"""`bench` measured live (`bench_live.py`): end to end on the simulated device with every
strategy, Kernel Tuner driven through its real API on a cache filled as it asks, and the
rules that keep the comparison fair (shared measurements neither shorten a strategy's count
nor its cost; every configuration a strategy is credited with, it asked for)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from cuda_agent.bench import RUN_FIELDS, BenchResult, BenchSettings, Run, merge
from cuda_agent.errors import SettingsError
from cuda_agent.space.slots import Config

# one worker runs the module's tests (`--dist loadgroup`, pyproject), so its module fixtures
# (`live_run`) are built once, not once per worker
pytestmark = pytest.mark.xdist_group("test_bench_live")

pytest.importorskip("kernel_tuner")

ROOT = Path(__file__).resolve().parents[1]
PROBLEMS = ROOT / "benchmarks" / "problems"
POLICY = ROOT / "benchmarks" / "policies" / "h200-replay-multi.pt"
CLI = shutil.which("cuda-agent") or str(Path(sys.executable).with_name("cuda-agent"))


def _configs() -> list[Config]:
    """A small space with a constraint: not every combination of the slot values is valid."""
    out = []
    for block in (64, 128, 256, 512):
        for vec in (1, 2, 4):
            for unroll in (1, 2, 4, 8):
                if block * vec <= 1024 and not (vec == 4 and unroll == 8):
                    out.append(Config.of({"config.block": block, "memory.vec": vec,
                                          "compute.unroll": unroll, "reduction.combine": "shfl"}))
    return out


@pytest.mark.parametrize("strategy", ["genetic_algorithm", "bayes_opt", "simulated_annealing",
                                      "random_sample"])
def test_kernel_tuner_live_measures_only_what_it_asks_within_budget(strategy):
    from cuda_agent.search import kernel_tuner_sim

    configs = _configs()
    valid = set(configs)
    asked: list[Config] = []

    def measure(cfgs: list[Config]) -> list[dict]:
        assert all(c in valid for c in cfgs), "measured a configuration outside the space"
        asked.extend(cfgs)
        return [{"ok": True, "time_ms": 1.0 + c["config.block"] / 512 + c["memory.vec"] / 7
                 + c["compute.unroll"] / 13} for c in cfgs]

    order = kernel_tuner_sim.run_live(configs, strategy, 12, 0, measure)
    assert 0 < len(order) <= 12
    assert len(asked) == len(set(asked)) <= 12, "a configuration measured twice or past budget"
    # what Kernel Tuner is credited with is exactly what it had measured, with its results
    assert {c for c, _ in order} <= set(asked)
    for c, rec in order:
        assert rec["time_ms"] == pytest.approx(1.0 + c["config.block"] / 512
                                               + c["memory.vec"] / 7 + c["compute.unroll"] / 13)


def test_kernel_tuner_search_space_is_exactly_the_configurations():
    """With the whole space as budget, Kernel Tuner's random sampling measures every
    configuration once and nothing else: its constraint admits exactly our space."""
    from cuda_agent.search import kernel_tuner_sim

    configs = _configs()
    seen: list[Config] = []
    order = kernel_tuner_sim.run_live(configs, "random_sample", len(configs), 1,
                                      lambda cs: (seen.extend(cs),
                                                  [{"ok": True, "time_ms": 1.0}] * len(cs))[1])
    assert sorted(seen, key=Config.key) == sorted(configs, key=Config.key)
    assert len(order) == len(configs)


def test_kernel_tuner_failures_reach_it_as_failures():
    from cuda_agent.search import kernel_tuner_sim

    configs = _configs()
    order = kernel_tuner_sim.run_live(
        configs, "random_sample", 10, 0,
        lambda cs: [{"ok": c["memory.vec"] != 2, "time_ms": 1.0 if c["memory.vec"] != 2
                     else None} for c in cs])
    assert order and all((rec["time_ms"] is None) == (c["memory.vec"] == 2) for c, rec in order)


def test_kernel_tuner_genetic_algorithm_ends_on_a_space_it_cannot_breed_in():
    """Kernel Tuner 1.5's genetic algorithm loops forever when its parents can make no child
    new to the generation (a recorded sweep of 8 configurations ran the replay bench for 30
    minutes, seed 1). Run in a child process with a deadline, so a regression fails here and
    does not hang the suite; the search ends with what it evaluated, inside the space."""
    code = """if True:
        import gzip, json
        from cuda_agent.search import kernel_tuner_sim
        path = 'benchmarks/data/nvidia-h200/attention_causal.json.gz'
        recs = json.load(gzip.open(path))['records']
        keys = {json.dumps(r['config'], sort_keys=True) for r in recs}
        for seed in range(4):
            order = kernel_tuner_sim.run(recs, 'genetic_algorithm', 40, seed)
            assert 1 <= len(order) <= len(recs), (seed, len(order))
            assert all(json.dumps(c.as_dict(), sort_keys=True) in keys for c, _ in order)
        print('ok')
    """
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]


def test_kernel_tuner_error_is_recorded_not_raised(tmp_path):
    """Kernel Tuner's bayes_opt will not start on a space smaller than its initial sample (here
    a sweep of 12 records, which is the space replay serves): the replay bench records the run
    as stopped with Kernel Tuner's message (no measurement credited), the report lists it, and
    the other strategies' runs are unaffected."""
    from cuda_agent.bench import run_bench
    from cuda_agent.report.bench_report import write_report

    settings = BenchSettings.of(suite=str(PROBLEMS / "attention_manual_odd.py"),
                             strategies=("random", "kt:bayes_opt"), budget=40, seeds=1,
                             out=str(tmp_path))
    result = run_bench(settings)
    kt = [r for r in result.runs if r.strategy == "kt:bayes_opt"]
    assert len(kt) == 1 and "Can't sample more than the size" in kt[0].error
    assert [r.error for r in result.runs if r.strategy == "random"] == [None]
    md = write_report(result, tmp_path)["markdown"].read_text()
    assert "stopped with an error" in md and "Can't sample more" in md
    again = BenchResult.from_json(json.loads((tmp_path / "bench.json").read_text()))
    assert [r.error for r in again.runs] == [r.error for r in result.runs]


CONV_POOL = '''import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(8, 16, 3, padding=1)

    def forward(self, x):
        return F.max_pool2d(torch.relu(self.conv(x)), 2)


def get_inputs():
    return [torch.randn(4, 8, 32, 32)]


def get_init_inputs():
    return []
'''


@pytest.fixture(scope="module")
def live_run(tmp_path_factory):
    """One live bench on the simulated device: a small softmax (with a recorded sweep), a
    small multi-kernel program (a convolution, then a pooling kernel) and a malformed file (to
    be reported as not compared); every strategy, the agents' shipped policy included."""
    suite = tmp_path_factory.mktemp("suite")
    shutil.copy(PROBLEMS / "softmax_tinyrows_odd.py", suite)
    (suite / "conv_pool_small.py").write_text(CONV_POOL)
    shutil.copy(ROOT / "tests" / "data" / "bad" / "no_model.py", suite)
    out = tmp_path_factory.mktemp("out") / "bench"
    strategies = ("random,genetic,optuna,marl,kt:genetic_algorithm,kt:bayes_opt,"
                  "kt:simulated_annealing,kt:random_sample")
    proc = subprocess.run([CLI, "bench", "--suite", str(suite), "--device", "sim", "--budget", "6",
                           "--seeds", "1", "--strategies", strategies, "--policy", str(POLICY),
                           "--out", str(out)], capture_output=True, text=True, timeout=1200,
                          cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return out, json.loads((out / "bench.json").read_text())


@pytest.mark.slow  # a whole live bench, every strategy (minutes); bench's CLI is tested below
def test_live_bench_runs_every_strategy_and_reports(live_run):
    out, data = live_run
    for f in ("bench.json", "bench.md", "report.html", "convergence.png",
              "speedup_by_family.png"):
        assert (out / f).stat().st_size > 0
    assert data["live"] == "sim"
    assert set(data["problems"]) == {"softmax_tinyrows_odd", "conv_pool_small"}
    assert set(data["skipped"]) == {"no_model"}, "a malformed file is reported as such"
    facts = data["problems"]["softmax_tinyrows_odd"]
    assert facts["simulated"] is True and facts["device"] == "sim"
    runs = data["runs"]
    assert {r["strategy"] for r in runs} == {
        "random", "genetic", "optuna", "marl", "kt:genetic_algorithm", "kt:bayes_opt",
        "kt:simulated_annealing", "kt:random_sample"}
    for r in runs:
        assert 0 < len(r["times"]) <= 6
        assert r["measured_s"] is not None and r["measured_s"] >= 0
        # where an ask/tell search's wall time went: inside the strategy, waiting for builds
        if r["strategy"].startswith("kt:"):
            assert r["strategy_s"] is None and r["build_wait_s"] is None
        else:
            assert 0 <= r["strategy_s"] <= r["seconds"] and 0 <= r["build_wait_s"] <= r["seconds"]
    # the optimum is a time of this run, no later than any strategy's best
    for name, facts in data["problems"].items():
        found = [t for r in runs if r["problem"] == name for t in r["times"] if t is not None]
        assert facts["best_ms"] <= min(found)
    assert {r["strategy"] for r in runs if r["problem"] == "conv_pool_small"} == {
        r["strategy"] for r in runs}, "every strategy searches the multi-kernel program too"
    md = (out / "bench.md").read_text()
    assert "SIMULATED" in md and "not compared" in md
    assert "of which in the strategy itself" in md


@pytest.mark.slow
def test_every_strategy_searches_a_program_stage_by_stage(live_run):
    """On a multi-kernel program every strategy, Kernel Tuner's included, spends its budget
    over the stages (3 + 3 of 6: the conv stage, then the pool stage), each configuration
    named with its stage; the program's space counts every stage's configurations."""
    _, data = live_run
    facts = data["problems"]["conv_pool_small"]
    assert facts["family"] == "conv+pool" and facts["sweep_best_recorded_ms"] is None
    from cuda_agent.ir.planning import make_plan
    from cuda_agent.problem import load_problem
    from cuda_agent.space.program import stage_spaces
    from cuda_agent.space.slots import Target

    suite = Path(data["settings"]["suite"])
    plan = make_plan(load_problem(suite / "conv_pool_small.py").graph())
    assert facts["recorded"] == sum(len(sp.configs) for sp in stage_spaces(plan, Target()))
    for r in (r for r in data["runs"] if r["problem"] == "conv_pool_small"):
        stages = [c.split(":", 1)[0] for c in r["configs"]]
        assert stages == sorted(stages) and set(stages) <= {"s0", "s1"}, r["strategy"]
        if r["strategy"].startswith("kt:") and not r["error"]:
            assert stages.count("s0") == 3 and stages.count("s1") == 3, r["strategy"]
        assert "s1" in stages or r["error"], f"{r['strategy']} never searched the pool stage"


def test_shared_measurements_cost_what_they_cost_first(tmp_path):
    """A strategy served measurements another strategy made is charged their first cost, and
    its count is the configurations it asked for: sharing cannot make it look cheaper."""
    from cuda_agent.bench_live import _measured_s
    from cuda_agent.runner.records import Measurement
    from cuda_agent.tuner import Trial

    def trial(key: str, wall: float, reused: bool) -> Trial:
        m = Measurement(key, "sim", True, 1.0, wall_s=wall, reused=reused)
        return Trial(0, Config.of({"a": key}), "t", m)

    first = {"k1": 0.5, "k2": 0.25}
    assert _measured_s([trial("k1", 0.0, True), trial("k2", 0.0, True)], first) == 0.75
    assert _measured_s([trial("k3", 0.125, False)], first) == 0.125


def test_live_bench_refuses_a_missing_gpu(tmp_path):
    from cuda_agent.runner.devices import cuda_available

    if cuda_available():
        pytest.skip("a GPU is present")
    out = tmp_path / "bench"
    proc = subprocess.run([CLI, "bench", "--suite", str(PROBLEMS / "softmax_tinyrows_odd.py"),
                           "--device", "cuda", "--out", str(out)], capture_output=True,
                          text=True, timeout=300, cwd=ROOT)
    assert proc.returncode != 0
    assert "no CUDA GPU" in proc.stderr + proc.stdout
    assert not out.exists()


def _result(problem: str, budget: int = 10) -> BenchResult:
    # a problem as a live run records it: baselines at PyTorch's defaults, say so
    facts = {"family": "norm", "best_ms": 1.0, "recorded": 5, "eager_ms": 2.0,
             "compile_ms": 1.5, "bytes": 1e9, "copy_bw": 4e12, "gpu": "x", "simulated": False,
             "baseline_settings": {"headline": "defaults", "same": True}}
    return BenchResult(BenchSettings.of(budget=budget, seeds=1, strategies=("random",)),
                       [Run(problem, "random", 0, [2.0, 1.0], 0.1, 0.2)], {problem: facts},
                       date="2026-11-30", live="cuda", provenance={"commit": "abc"})


def test_merge_joins_runs_and_refuses_mismatches():
    m = merge([_result("a"), _result("b")])
    assert set(m.problems) == {"a", "b"} and len(m.runs) == 2 and m.live == "cuda"
    assert m.provenance == {"commit": "abc"}
    with pytest.raises(SettingsError, match="twice"):
        merge([_result("a"), _result("a")])
    with pytest.raises(SettingsError, match="budget"):
        merge([_result("a"), _result("b", budget=20)])
    even = _result("b")
    even.settings = replace(even.settings, run=replace(even.settings.run, stage_patience=None))
    with pytest.raises(SettingsError, match="stage_patience"):
        merge([_result("a"), even])


def test_a_run_written_before_stages_handed_over_reads_as_an_even_split():
    d = json.loads(json.dumps(_result("a").to_json()))
    old, run = d["settings"], d["settings"].pop("run")
    old.update({k: run[k] for k in RUN_FIELDS})  # as written before `BenchSettings.run`
    assert BenchResult.from_json(d).settings.run.budget == 10
    del old["stage_patience"]
    assert BenchResult.from_json(d).settings.run.stage_patience is None
    assert BenchResult.from_json(_result("a").to_json()).settings.run.stage_patience == 8


def test_merge_drops_a_skip_that_a_later_run_benched():
    """A call stopped before problem b (listed as not finished) and the next call benched it:
    the merge compares b and no longer lists it as skipped; a problem no run benched stays."""
    first, later = _result("a"), _result("b")
    first.skipped = {"b": "not finished: the run was stopped", "c": "not finished: stopped"}
    m = merge([first, later])
    assert set(m.problems) == {"a", "b"} and m.skipped == {"c": "not finished: stopped"}


def test_max_autotune_baselines_with_and_without_cuda_graphs():
    """Both max-autotune timings reach the summary and the report; a run recorded before the
    graph-free mode was timed (merged with newer ones) counts only where it was measured."""
    from cuda_agent.bench import summarize
    from cuda_agent.report.bench_report import tables

    a, b = _result("a"), _result("b")
    a.problems["a"].update(compile_max_ms=4.0, compile_max_nocg_ms=2.0)
    b.problems["b"].update(compile_max_ms=9.0)  # older run: no graph-free timing
    m = merge([a, b])
    s = summarize(m)["random"]
    assert s["geomean_speedup_vs_compile_max_autotune"] == pytest.approx(6.0)  # sqrt(4 * 9)
    assert s["geomean_speedup_vs_compile_max_autotune_no_cudagraphs"] == pytest.approx(2.0)
    times = {title: (header, rows) for title, header, rows in tables(m, summarize(m))}
    header, rows = next(v for k, v in times.items() if k.startswith("Times per problem"))
    col = header.index("max-autotune without CUDA graphs")
    assert [r[col] for r in rows] == ["2.0000", "-"]


def test_eager_with_cudnn_benchmark_is_a_baseline_of_convolutions_only():
    """Convolutions (a plan's or a program's) get eager with cuDNN's benchmark mode as one
    more baseline, and the times table a column for it only where one was measured."""
    from cuda_agent.bench import summarize
    from cuda_agent.ir.planning import make_plan
    from cuda_agent.problem import load_problem
    from cuda_agent.report.bench_report import tables
    from cuda_agent.runner.devices import CUDNN_BENCHMARK, cudnn_baselines

    def plan(name):
        return make_plan(load_problem(PROBLEMS / f"{name}.py").graph())

    assert cudnn_baselines(plan("conv_transpose2d_odd")) == (CUDNN_BENCHMARK,)
    assert cudnn_baselines(plan("fused_conv2d_relu_maxpool")) == (CUDNN_BENCHMARK,)
    assert cudnn_baselines(plan("gemm_square")) == cudnn_baselines(plan("softmax_short_rows")) \
        == ()

    def times(result):
        found = {t: (h, rows) for t, h, rows in tables(result, summarize(result))}
        return next(v for k, v in found.items() if k.startswith("Times per problem"))

    a, b = _result("a"), _result("b")
    header, _ = times(merge([a, b]))
    assert "eager, cudnn.benchmark on" not in header
    a.problems["a"]["eager_cudnn_benchmark_ms"] = 0.5
    header, rows = times(merge([a, b]))
    col = header.index("eager, cudnn.benchmark on")
    assert [r[col] for r in rows] == ["0.5000", "-"] and header[col - 1] == "eager"


def test_a_problem_past_its_time_is_given_up_and_kept_apart(tmp_path):
    """--problem-seconds: a problem still running past it is listed as not compared (none of
    its strategy runs count), and each problem's result is handed out as it ends."""
    from cuda_agent.bench_live import run_live_bench

    seen = []
    settings = BenchSettings.of(suite=str(PROBLEMS / "softmax_tinyrows_odd.py"),
                             strategies=("random", "genetic"), budget=3, seeds=1,
                             out=str(tmp_path), problem_seconds=1e-9)
    with pytest.raises(SettingsError, match="could be measured"):
        run_live_bench(settings.on("sim"), on_problem=lambda r: seen.append(
            (dict(r.skipped), len(r.runs))))
    assert len(seen) == 1
    skipped, runs = seen[0]
    assert "given up after" in skipped["softmax_tinyrows_odd"] and runs == 0


def test_a_strategy_that_raises_is_recorded_and_the_bench_goes_on(tmp_path, monkeypatch):
    """One strategy failing with a bug of its own (here the genetic search raising on its
    second batch) is that run's error, kept with what it measured before; the other strategies
    of the problem run and the bench ends normally."""
    from cuda_agent.bench_live import run_live_bench
    from cuda_agent.search import base
    from cuda_agent.search.genetic import Genetic

    class Breaks(Genetic):
        def tell(self, results):
            super().tell(results)
            self.told = getattr(self, "told", 0) + 1
            if self.told == 2:
                raise RuntimeError("a bug in the strategy\nsecond line")

    monkeypatch.setitem(base.STRATEGIES, "genetic", Breaks)
    settings = BenchSettings.of(suite=str(PROBLEMS / "softmax_tinyrows_odd.py"),
                             strategies=("random", "genetic"), budget=12, seeds=1,
                             out=str(tmp_path))
    result = run_live_bench(settings.on("sim"))
    runs = {r.strategy: r for r in result.runs}
    assert runs["random"].error is None and len(runs["random"].times) == 12
    broken = runs["genetic"]
    assert broken.error == "RuntimeError: a bug in the strategy"
    assert 0 < len(broken.times) < 12, "what it measured before failing is kept"
    assert set(result.problems) == {"softmax_tinyrows_odd"}


def test_a_problem_whose_set_up_fails_is_reported_and_the_bench_goes_on(tmp_path, monkeypatch):
    """A problem the device cannot set up (its reference failed in the worker) is listed as
    not compared with the reason, and the suite's next problem is benched: one such set-up
    ended a live bench of 12 problems (H100, 2026-12-06)."""
    from cuda_agent.bench_live import run_live_bench
    from cuda_agent.errors import DeviceError
    from cuda_agent.runner.sim import SimDevice

    real = SimDevice.setup

    def setup(self, problem, plan):
        if problem.name == "softmax_tinyrows_odd":
            raise DeviceError(f"GPU setup failed for {problem.name}: RuntimeError: shapes")
        return real(self, problem, plan)

    monkeypatch.setattr(SimDevice, "setup", setup)
    suite = f"{PROBLEMS / 'softmax_tinyrows_odd.py'},{PROBLEMS / 'elementwise_log_sqrt.py'}"
    settings = BenchSettings.of(suite=suite, strategies=("random",), budget=3, seeds=1,
                             out=str(tmp_path))
    result = run_live_bench(settings.on("sim"))
    assert "GPU setup failed" in result.skipped["softmax_tinyrows_odd"]
    assert set(result.problems) == {"elementwise_log_sqrt"}
    assert {r.problem for r in result.runs} == {"elementwise_log_sqrt"}


def test_a_stopped_run_keeps_what_it_finished(tmp_path):
    """The partial result a live run keeps on disk is reported like a finished run, with the
    suite's problems it did not finish listed as such; the partial file is then gone."""
    from cuda_agent.report.bench_report import PARTIAL, rebuild, write_partial

    suite = tmp_path / "suite"
    suite.mkdir()
    for name in ("a", "b", "c"):
        (suite / f"{name}.py").write_text("")
    r = _result("a")
    r.settings = replace(r.settings, suite=str(suite))
    r.skipped["b"] = "a multi-kernel program"
    run = tmp_path / "run"
    write_partial(r, run)
    assert json.loads((run / PARTIAL).read_text())["problems"].keys() == {"a"}
    proc = subprocess.run([CLI, "report", str(run)], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads((run / "bench.json").read_text())
    assert set(data["problems"]) == {"a"} and data["skipped"]["b"] == "a multi-kernel program"
    assert data["skipped"]["c"].startswith("not finished")
    assert not (run / PARTIAL).exists() and (run / "report.html").exists()
    rebuild(run)  # a finished run's report is rebuilt from its bench.json as before
    assert json.loads((run / "bench.json").read_text())["skipped"] == data["skipped"]


def test_a_stopped_run_in_a_used_folder_is_not_reported_as_the_earlier_run(tmp_path):
    """A bench run into a folder holding an earlier run's bench.json, stopped before its end:
    its report is of what it finished (the partial file, newer), not the earlier run's (a
    reused work folder on the GPU machine lost a finished problem to exactly this)."""
    import os

    from cuda_agent.report.bench_report import PARTIAL, load_run, rebuild, write_partial

    run = tmp_path / "run"
    run.mkdir()
    (run / "bench.json").write_text(json.dumps(_result("old").to_json()))
    os.utime(run / "bench.json", ns=(1, 1))  # written long before
    write_partial(_result("new"), run)
    assert set(load_run(run).problems) == {"new"}
    rebuild(run)
    assert set(json.loads((run / "bench.json").read_text())["problems"]) == {"new"}
    assert not (run / PARTIAL).exists()


def test_a_run_ended_by_an_error_keeps_the_problems_it_finished(tmp_path, monkeypatch):
    """An error that ends a live bench after some problems (a device that died, say) is a
    one-line error and a non-zero exit; the problems finished before it stay in the partial
    file, which `cuda-agent report` reads (a live bench on the H100 lost 4 finished problems
    to one set-up error, 2026-12-06)."""
    from typer.testing import CliRunner

    from cuda_agent import bench_live
    from cuda_agent.cli import app
    from cuda_agent.errors import DeviceError
    from cuda_agent.report.bench_report import PARTIAL, load_run, write_partial

    def ends_after_one(settings, device, progress=None, notify=print, on_problem=None, **kw):
        write_partial(_result("a"), Path(settings.out))
        raise DeviceError("the GPU worker died")

    monkeypatch.setattr(bench_live, "run_live_bench", ends_after_one)
    run = tmp_path / "run"
    res = CliRunner().invoke(app, ["bench", "--suite", str(PROBLEMS / "softmax_tinyrows_odd.py"),
                                   "--device", "sim", "--out", str(run)])
    assert res.exit_code != 0
    assert "the GPU worker died" in res.output and "cuda-agent report" in res.output
    assert set(load_run(run).problems) == {"a"} and (run / PARTIAL).exists()


def test_problem_seconds_must_be_positive(tmp_path):
    out = tmp_path / "bench"
    proc = subprocess.run([CLI, "bench", "--suite", str(PROBLEMS / "softmax_tinyrows_odd.py"),
                           "--device", "sim", "--problem-seconds", "0", "--out", str(out)],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 2 and "--problem-seconds must be positive" in proc.stderr
    assert not out.exists()


def _speed(c: Config) -> dict:
    return {"ok": True, "time_ms": 1.0 + c["config.block"] / 512 + c["memory.vec"] / 7
            + c["compute.unroll"] / 13}


@pytest.mark.parametrize("strategy", ["genetic_algorithm", "random_sample"])
def test_kernel_tuner_in_its_own_process_searches_as_it_does_here(strategy):
    """The ask/tell adapter: Kernel Tuner on a thread and in a process of its own ask for the
    same configurations in the same order as `run_live` called directly (its seeding and
    swapped classes are its own there), and every measurement is made by the search loop."""
    from cuda_agent.search import kernel_tuner_sim
    from cuda_agent.search.kernel_tuner_ask import KernelTunerProposer
    from engine_loop import loop

    here: list[Config] = []
    a = kernel_tuner_sim.run_live(_configs(), strategy, 12, 3,
                                  lambda cs: (here.extend(cs), [_speed(c) for c in cs])[1])
    for isolated in (False, True):
        proposer = KernelTunerProposer(_configs(), strategy, 12, 3, isolated=isolated)
        engine, _ = loop(proposer, lambda c: _speed(c)["time_ms"], budget=12)
        ended = proposer.close()
        assert ended is not None
        order, error = ended
        assert error is None and [t.config for t in engine.measured] == here
        assert [c for c, _ in order] == [c for c, _ in a]
        assert [r["time_ms"] for _, r in order] == [r["time_ms"] for _, r in a]


@pytest.mark.parametrize("isolated", [False, True])
def test_an_error_of_the_measuring_side_ends_kernel_tuner_and_is_raised(isolated):
    from cuda_agent.errors import DeviceError
    from cuda_agent.search.kernel_tuner_ask import KernelTunerProposer
    from engine_loop import loop

    def broken(c: Config) -> float:
        raise DeviceError("the GPU worker could not start")

    proposer = KernelTunerProposer(_configs(), "random_sample", 5, 0, isolated=isolated)
    with pytest.raises(DeviceError, match="could not start"):
        loop(proposer, broken, budget=5)
    assert proposer.close() is None  # abandoned where it waited, and ended
    if not isolated:
        assert not proposer.driver.thread.is_alive()


def test_parallel_strategy_runs_measure_one_at_a_time_and_match_a_sequential_run(
        tmp_path, monkeypatch):
    """--parallel: strategy runs search side by side, but the device never times two
    candidates at once; and on the deterministic simulator every run asks for and is served
    exactly what it is in a run one strategy after another (the shared measurements and
    Kernel Tuner's processes change nothing a run sees)."""
    import threading
    import time as _time

    from cuda_agent.bench_live import run_live_bench
    from cuda_agent.runner.sim import SimDevice

    inside, overlaps = [0], []
    lock = threading.Lock()
    evaluate = SimDevice.evaluate

    def exclusive(self, cand, best_ms=None):
        with lock:
            inside[0] += 1
            overlaps.append(inside[0] > 1)
        _time.sleep(0.002)  # long enough for another thread to come in, were it let
        try:
            return evaluate(self, cand, best_ms)
        finally:
            with lock:
                inside[0] -= 1

    monkeypatch.setattr(SimDevice, "evaluate", exclusive)
    strategies = ("random", "genetic", "optuna", "kt:random_sample", "kt:genetic_algorithm")
    results = {}
    for parallel in (1, 5):
        settings = BenchSettings.of(suite=str(PROBLEMS / "softmax_tinyrows_odd.py"),
                                 strategies=strategies, budget=10, seeds=1,
                                 out=str(tmp_path / str(parallel)), parallel=parallel)
        res = run_live_bench(settings.on("sim"))
        results[parallel] = {(r.strategy, r.seed): (r.times, r.configs) for r in res.runs}
        assert all(len(r.configs) == len(r.times) and len(set(r.configs)) == len(r.configs)
                   for r in res.runs), "each measured configuration is listed once, in order"
    assert overlaps and not any(overlaps), "two measurements overlapped on the device"
    assert set(results[5]) == {(s, 0) for s in strategies}
    assert results[5] == results[1]


def test_parallel_must_be_positive():
    from cuda_agent.bench_live import run_live_bench

    with pytest.raises(SettingsError, match="--parallel"):
        run_live_bench(BenchSettings.of(parallel=0, device="sim"))


def test_every_strategy_hands_a_settled_stage_on_alike(tmp_path):
    """With a stage patience of 2, each strategy, Kernel Tuner's included, ends the conv
    stage where the plateau rule says (or at its share), goes on to the pool stage, and
    searches the stages again in rounds alike while a round brings progress; no run measures
    past the budget."""
    from itertools import groupby

    from cuda_agent.bench import BenchSettings
    from cuda_agent.bench_live import run_live_bench
    from cuda_agent.space.program import StagePlateau

    (tmp_path / "conv_pool_small.py").write_text(CONV_POOL)
    settings = BenchSettings.of(suite=str(tmp_path / "conv_pool_small.py"), budget=12, seeds=1,
                             strategies=("random", "kt:random_sample", "kt:genetic_algorithm"),
                             out=str(tmp_path / "out"), stage_patience=2)
    result = run_live_bench(settings.on("sim"))
    assert {r.strategy for r in result.runs} == set(settings.strategies)
    first_round = {}
    for r in result.runs:
        stages = [c.split(":", 1)[0] for c in r.configs]
        runs = [k for k, _ in groupby(stages)]
        assert runs[:2] == ["s0", "s1"], f"{r.strategy} never reached the pool stage"
        assert runs == ["s0", "s1"] * (len(runs) // 2) + ["s0"] * (len(runs) % 2), r.strategy
        assert len(stages) <= 12, r.strategy
        first = [t for t, _ in zip(r.times, stages[:stages.index("s1")])]
        first_round[r.strategy] = len(first)
        plateau = StagePlateau(None, 2)
        settled = next((k + 1 for k, ms in enumerate(first) if plateau.update(ms)), None)
        # the stage ends at the measurement it settled at, or its share (6 of 12)
        assert len(first) == min(settled or 6, 6), (r.strategy, first)
    assert min(first_round.values()) < 6, f"no stage settled early here: {first_round}"


def test_no_baselines_leaves_torch_untimed_and_says_so(tmp_path, monkeypatch):
    """`bench --no-baselines` (a comparison of the strategies alone) never asks the device for
    torch's timings; the problem's record says they were not measured and why."""
    from cuda_agent.bench_live import run_live_bench
    from cuda_agent.runner.sim import SimDevice

    asked: list[tuple] = []
    real = SimDevice.baselines
    monkeypatch.setattr(SimDevice, "baselines",
                        lambda self, which=(): asked.append(which) or real(self, which))
    for baselines in (True, False):
        settings = BenchSettings.of(suite=str(PROBLEMS / "softmax_tinyrows_odd.py"),
                                 strategies=("random",), budget=3, seeds=1,
                                 out=str(tmp_path / str(baselines)), baselines=baselines)
        res = run_live_bench(settings.on("sim"))
        assert bool(asked) == baselines
        facts = res.problems["softmax_tinyrows_odd"]
        assert facts["eager_ms"] is None and facts["compile_ms"] is None
        assert ("not measured: --no-baselines" in facts["baseline_notes"].values()) \
            == (not baselines)
        asked.clear()


def test_bench_tolerance_reaches_the_verifier_and_replay_refuses_it(tmp_path, monkeypatch):
    """`bench --tolerance kernelbench` opens the live device with conformance mode (it was
    accepted and dropped before); a malformed tolerance, or any but strict on replay, is a
    one-line settings error."""
    from cuda_agent import bench_live
    from cuda_agent.bench import run_bench
    from cuda_agent.runner.sim import SimDevice

    opened = []
    monkeypatch.setattr(bench_live, "open_device",
                        lambda name, settings, notify: opened.append(settings) or SimDevice())
    settings = BenchSettings.of(suite=str(PROBLEMS / "softmax_tinyrows_odd.py"),
                             strategies=("random",), budget=2, seeds=1, out=str(tmp_path),
                             tolerance="kernelbench")
    bench_live.run_live_bench(settings.on("sim"))
    assert [s.tolerance for s in opened] == ["kernelbench"]
    with pytest.raises(SettingsError, match="strict protocol"):
        run_bench(settings)
    with pytest.raises(SettingsError, match="--tolerance"):
        bench_live.run_live_bench(BenchSettings.of(tolerance="loose", device="sim"))


def test_warm_kernel_tuner_starts_a_program_from_the_model_picks(tmp_path):
    """Warm, Kernel Tuner is given a program as cuda-agent's warm strategies are: every stage at
    the model's pick measured first as one program; cold, it starts from the defaults."""
    from cuda_agent.bench import BenchSettings
    from cuda_agent.bench_live import run_live_bench
    from cuda_agent.ir.planning import make_plan
    from cuda_agent.problem import load_problem
    from cuda_agent.search.prior_rank import model_pick
    from cuda_agent.space.program import stage_spaces
    from cuda_agent.space.slots import Target

    path = tmp_path / "conv_pool_small.py"
    path.write_text(CONV_POOL)
    settings = BenchSettings.of(suite=str(path), budget=6, seeds=1, out=str(tmp_path / "out"),
                             strategies=("kt:random_sample", "kt_warm:random_sample"),
                             baselines=False)
    runs = {r.strategy: r for r in run_live_bench(settings.on("sim")).runs}
    stages = stage_spaces(make_plan(load_problem(path).graph()), Target())
    pick = model_pick(stages[0])
    assert runs["kt_warm:random_sample"].configs[0] == f"s0:{pick.short()}"
    assert len(runs["kt_warm:random_sample"].configs) <= 6
    assert runs["kt:random_sample"].configs[0] != f"s0:{pick.short()}"
