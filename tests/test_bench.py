"""The comparison metrics (hand-computed cases) and `bench` end to end on recorded H200 sweeps,
every strategy included (Optuna and Kernel Tuner through their real APIs)."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cuda_agent import metrics

ROOT = Path(__file__).resolve().parents[1]
H200 = ROOT / "benchmarks" / "data" / "nvidia-h200"
# the venv's entry point, also when the venv is not activated (CI calls .venv/bin/python)
CLI = shutil.which("cuda-agent") or str(Path(sys.executable).with_name("cuda-agent"))


def test_fast_p_by_hand():
    times = [1.0, 2.0, None, 4.0]
    base = [2.0, 2.0, 1.0, None]
    assert metrics.fast_p(times, base, 0.0) == 0.75  # correct ones
    assert metrics.fast_p(times, base, 1.0) == 0.25  # only the first is faster (2x)
    assert metrics.fast_p(times, base, 1.5) == 0.25
    assert metrics.fast_p(times, base, 2.0) == 0.0  # exactly 2x is not faster than 2x
    assert metrics.fast_p([], [], 1.0) == 0.0


def test_geomean_speedup_by_hand():
    assert metrics.geomean_speedup([1.0, 4.0], [2.0, 2.0]) == pytest.approx(math.sqrt(2 * 0.5))
    assert metrics.geomean_speedup([1.0, None], [4.0, 1.0]) == pytest.approx(4.0)
    assert metrics.geomean_speedup([None], [1.0]) is None


def test_evals_to_fraction_by_hand():
    times = [10.0, None, 6.0, 5.2, 5.0]
    assert metrics.evals_to_fraction(times, 5.0, 0.95) == 4  # 5.2 <= 5 / 0.95 = 5.263
    assert metrics.evals_to_fraction(times, 5.0, 1.0) == 5
    assert metrics.evals_to_fraction(times, 1.0, 0.95, censor=6) == 6
    assert metrics.evals_to_fraction([], 1.0) is None


def test_median_roofline_by_hand():
    # 1e9 bytes in 1 ms = 1e12 B/s over 2e12 B/s copy bandwidth = 0.5
    assert metrics.median_roofline([1.0, None], [10**9, 10**9], [2e12, 2e12]) == 0.5


SETTINGS = {"headline": "defaults", "defaults": {"conv_tf32": True, "matmul_tf32": False},
            "matched": {"conv_tf32": False, "matmul_tf32": False}, "same": False}


def test_best_of_run_by_hand():
    """The run's fastest kernel per problem against the baselines at PyTorch's defaults (the
    headline) and matched; a tie with torch.compile is not faster, and a problem without a
    compile time cannot count as faster."""
    from cuda_agent.bench import BenchResult, BenchSettings, best_of_run

    def facts(best, compile_ms, matched_ms):
        return {"family": "norm", "best_ms": best, "eager_ms": 4.0, "compile_ms": compile_ms,
                "eager_matched_ms": 8.0, "compile_matched_ms": matched_ms,
                "baseline_settings": SETTINGS}

    res = BenchResult(BenchSettings.of(budget=10, seeds=1), problems={
        "a": facts(1.0, 2.0, 4.0), "b": facts(1.0, 1.0, 2.0), "c": facts(3.0, 1.0, 6.0),
        "d": facts(1.0, None, None)})
    b = best_of_run(res)
    assert b["problems"] == 4
    assert b["fast_p_vs_compile"]["1.0"] == 0.25  # a only
    assert b["fast_p_vs_compile"]["0.0"] == 1.0
    assert b["not_faster_than_compile"] == ["b", "c", "d"]
    assert b["geomean_speedup_vs_compile"] == pytest.approx((2.0 * 1.0 * (1 / 3)) ** (1 / 3))
    assert b["fast_p_vs_eager"]["2.0"] == 0.75  # 4x on a, b, d; 1.33x on c
    # the same kernels against the matched (strict fp32) figures: faster on a, b and c
    assert b["fast_p_vs_compile_matched"]["1.0"] == 0.75
    assert b["not_faster_than_compile_matched"] == ["d"]
    assert b["geomean_speedup_vs_compile_matched"] == pytest.approx((4 * 2 * 2) ** (1 / 3))
    assert b["fast_p_vs_eager_matched"]["2.0"] == 1.0  # 8x on a, b, d; 2.67x on c


def test_an_old_run_has_matched_figures_only():
    """A bench run recorded before the baselines were timed at PyTorch's defaults: its
    compile_ms was timed under strict fp32, so it is read as the matched figure, and the
    headline (against the defaults) is unknown, not taken from it."""
    from cuda_agent.bench import BenchResult, BenchSettings, Run, best_of_run, summarize

    old = {"family": "norm", "best_ms": 1.0, "recorded": 10, "eager_ms": 4.0,
           "compile_ms": 2.0, "bytes": 1e9, "copy_bw": 4e12, "gpu": "x", "simulated": False}
    res = BenchResult(BenchSettings.of(budget=10, seeds=1), problems={"a": old})
    res.runs = [Run("a", "random", 0, [3.0, 1.0], 0.0)]
    b = best_of_run(res)
    assert b["fast_p_vs_compile"] is None and b["geomean_speedup_vs_compile"] is None
    assert b["not_faster_than_compile"] is None
    assert b["fast_p_vs_compile_matched"]["1.0"] == 1.0
    assert b["geomean_speedup_vs_compile_matched"] == pytest.approx(2.0)
    s = summarize(res)["random"]
    assert s["geomean_speedup_vs_compile"] is None and s["fast_p_vs_compile"] is None
    assert s["geomean_speedup_vs_compile_matched"] == pytest.approx(2.0)
    assert s["geomean_speedup_vs_eager_matched"] == pytest.approx(4.0)


@pytest.mark.skipif(not H200.exists(), reason="no recorded H200 sweeps")
def test_unseen_median_compares_every_strategy_on_the_same_problems():
    """marl's rows leave out the problems its policy trained on; the `unseen` median does so
    for every strategy, so the comparison is on one problem set (hand-computed)."""
    from cuda_agent.bench import BenchResult, BenchSettings, Run, summarize

    facts = {"family": "norm", "best_ms": 1.0, "recorded": 10, "eager_ms": 2.0,
             "compile_ms": 1.5, "bytes": 1e9, "copy_bw": 4e12, "gpu": "x", "simulated": False}
    res = BenchResult(BenchSettings.of(budget=10, seeds=1), problems={"a": facts, "b": facts},
                      trained_on=["a"])
    res.runs = [Run("a", "random", 0, [3.0, 1.0], 0.0),
                Run("b", "random", 0, [2.0, 2.0, 1.0], 0.0),
                Run("a", "marl", 0, [1.0], 0.0), Run("b", "marl", 0, [2.0, 1.0], 0.0)]
    s = summarize(res)
    assert s["random"]["median_evals_to_95"] == 2.5  # a: 2, b: 3
    assert s["random"]["median_evals_to_95_unseen"] == 3  # b only
    assert s["marl"]["problems"] == 1 and s["marl"]["median_evals_to_95_unseen"] == 2


def test_bench_on_replay_end_to_end(tmp_path):
    suite = tmp_path / "suite"
    suite.mkdir()
    for name in ("norm_l2", "reduce_argmin_middim", "elementwise_swiglu"):
        (suite / f"{name}.py").write_text((ROOT / "benchmarks/problems" / f"{name}.py").read_text())
    # a tiny agents policy, trained on one of them, so that marl is in the comparison too
    from cuda_agent.agents.train import TrainSettings, Trainer

    tr = Trainer(TrainSettings.of(suite=str(suite / "norm_l2.py"), device="replay",
                               replay_root=str(H200.parent), iterations=1, episodes=1, steps=1,
                               batch=4, hidden=16, out=str(tmp_path / "p")))
    try:
        tr.train()
    finally:
        tr.close()
    out = tmp_path / "bench"
    r = subprocess.run([CLI, "bench", "--suite", str(suite), "--budget", "12",
                        "--seeds", "1", "--replay-root", str(H200.parent), "--policy",
                        str(tmp_path / "p" / "policy.pt"), "--out", str(out)],
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-2000:]
    for f in ("bench.json", "bench.md", "report.html", "convergence.png", "speedup_by_family.png"):
        assert (out / f).exists() and (out / f).stat().st_size > 0, f
    data = json.loads((out / "bench.json").read_text())
    summary = data["summary"]
    from cuda_agent.bench import DEFAULT_STRATEGIES

    # the peers cold and warm (the model's top picks first), and the model's ranking alone
    assert set(summary) == set(DEFAULT_STRATEGIES) == {
        "random", "genetic", "optuna", "marl", "prior", "kt:genetic_algorithm", "kt:bayes_opt",
        "kt:simulated_annealing", "kt:random_sample", "optuna_warm",
        "kt_warm:genetic_algorithm", "kt_warm:bayes_opt", "kt_warm:simulated_annealing",
        "kt_warm:random_sample"}
    md = (out / "bench.md").read_text()
    assert "warm: the model's top picks first" in md and "| cold |" in md
    assert "The model's ranking alone (prior, no network)" in md
    assert summary["marl"]["problems"] == 2  # the problem it trained on is reported apart
    for run in data["runs"]:
        assert 0 < len(run["times"]) <= 12
    html = (out / "report.html").read_text()
    assert "<table>" in html and "data:image/png;base64," in html
    # `report` rebuilds the same page from bench.json
    (out / "report.html").unlink()
    r = subprocess.run([CLI, "report", str(out)], capture_output=True, text=True)
    assert r.returncode == 0 and (out / "report.html").exists()

    # cross-fitted: a second policy that never trained on norm_l2 tunes it, so the agents are
    # compared on all three problems; with them their ablation without the model's prior
    import torch

    from cuda_agent.agents import checkpoint
    from cuda_agent.agents.policy import MultiAgentPolicy

    blob = torch.load(tmp_path / "p" / "policy.pt", weights_only=False)
    blob["meta"]["trained_on"] = ["elementwise_swiglu"]
    torch.save(blob, tmp_path / "fold1.pt")
    # and the single-agent ablation's checkpoint (fresh weights: what matters here is that
    # marl_single tunes with it, and the other agents' strategies do not)
    checkpoint.save(tmp_path / "single.pt", MultiAgentPolicy("single", 16),
                    {"trained_on": ["norm_l2"]})
    out2 = tmp_path / "bench2"
    r = subprocess.run([CLI, "bench", "--suite", str(suite), "--budget", "6", "--seeds", "1",
                        "--strategies", "random,marl,marl_noprior,marl_untrained,marl_single",
                        "--replay-root", str(H200.parent),
                        "--policy", f"{tmp_path / 'p' / 'policy.pt'},{tmp_path / 'fold1.pt'}",
                        "--single-policy", str(tmp_path / "single.pt"),
                        "--out", str(out2)], capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-2000:]
    data = json.loads((out2 / "bench.json").read_text())
    assert data["trained_on"] == [] and data["summary"]["marl"]["problems"] == 3
    for ablation in ("marl_noprior", "marl_untrained", "marl_single"):
        assert data["summary"][ablation]["problems"] == 3, ablation
    assert data["settings"]["single_policy"] == str(tmp_path / "single.pt")
    assert data["problems"]["norm_l2"]["policy"] == "fold1.pt"
    assert {data["problems"][p]["policy"] for p in data["problems"] if p != "norm_l2"} == {
        "policy.pt"}
    assert "each problem is tuned by one that never trained on it" in (
        out2 / "bench.md").read_text()


def test_cross_fitted_policies_pick_one_that_never_trained_on_the_problem(tmp_path):
    import torch

    from cuda_agent.agents.checkpoint import FORMAT
    from cuda_agent.bench import Policies

    paths = []
    for name, trained in (("a.pt", ["x", "y"]), ("b.pt", ["y", "z"])):
        torch.save({"format": FORMAT, "meta": {"trained_on": trained}}, tmp_path / name)
        paths.append(str(tmp_path / name))
    pol = Policies(",".join(paths))
    assert pol.pick("x") == paths[1] and pol.pick("z") == paths[0]
    assert pol.pick("w") == paths[0]  # neither saw it: the first
    assert pol.pick("y") == paths[0] and pol.trained_on() == ["y"]  # both did: reported apart
    assert not Policies(None) and Policies(None).pick("x") is None


def test_bench_refuses_an_unknown_device_or_suite(tmp_path):
    r = subprocess.run([CLI, "bench", "--device", "tpu", "--out", str(tmp_path / "o")],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "replay, cuda, sim" in r.stderr
    assert not (tmp_path / "o").exists()
    r = subprocess.run([CLI, "bench", "--device", "sim", "--suite", str(tmp_path / "none"),
                        "--out", str(tmp_path / "o")], capture_output=True, text=True)
    assert r.returncode == 2 and "no such file" in r.stderr and not (tmp_path / "o").exists()


def test_suite_as_comma_separated_files_keeps_their_order(tmp_path):
    from cuda_agent.bench import problem_files
    from cuda_agent.errors import SettingsError

    b, a = tmp_path / "b.py", tmp_path / "a.py"
    b.write_text(""), a.write_text("")
    assert problem_files(f"{b},{a}") == [b, a]  # not sorted: the order given
    assert problem_files(str(tmp_path)) == [a, b]  # a directory: by name
    with pytest.raises(SettingsError, match="missing.py: no such file"):
        problem_files(f"{b},{tmp_path / 'missing.py'}")


def test_the_single_agent_ablation_needs_its_checkpoint(tmp_path):
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "norm_l2.py").write_text((ROOT / "benchmarks/problems/norm_l2.py").read_text())
    r = subprocess.run([CLI, "bench", "--suite", str(suite), "--strategies", "random,marl_single",
                        "--out", str(tmp_path / "o")], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode != 0 and "marl_single needs --single-policy" in r.stderr + r.stdout
    assert not (tmp_path / "o").exists()
