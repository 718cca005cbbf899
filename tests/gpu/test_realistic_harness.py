"""The realistic suite's harness and runner on the GPU, on small problems (seconds, not the
suite's GiB): the harness passes a module that computes what the reference does, times it beside
eager and torch.compile at PyTorch's defaults, and fails one that is off; the runner takes a real
`cuda-agent tune` through to a harness row."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from test_realistic_run import MODEL_NEW, PROBLEM  # noqa: E402

PROBLEM_GPU = PROBLEM.replace("torch.randn(4, 3, 6, 6)", "torch.randn(16, 3, 64, 64)")


def harness(tmp_path: Path, case: str) -> dict:
    problem = tmp_path / "conv_bn_relu.py"
    problem.write_text(PROBLEM_GPU)
    new = tmp_path / f"model_new_{case}.py"
    new.write_text(PROBLEM_GPU + "\n\n" + MODEL_NEW[case])
    out = tmp_path / f"{case}.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks/realistic_harness.py"),
                           str(problem), str(new), "--out", str(out), "--time-budget", "0.2"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(out.read_text())


def test_harness_passes_and_times_a_faithful_module(tmp_path):
    row = harness(tmp_path, "same")
    assert row["status"] == "ok", row
    assert row["eager_ms"] > 0 and row["compile_ms"] > 0 and row["new_ms"] > 0
    assert row["compile_first_call_s"] > 0 and row["copy_tbps"] > 1
    # PyTorch's defaults: TF32 in cuDNN's convolutions, strict fp32 in cuBLAS
    assert row["flags"]["cudnn.allow_tf32"] and not row["flags"]["cuda.matmul.allow_tf32"]
    assert row["flags_after"] == row["flags"]
    assert row["float64"]["new"]["rel_norm_err"] < 1e-2


def test_harness_fails_an_output_off_and_statistics_not_updated(tmp_path):
    assert harness(tmp_path, "off")["status"] == "wrong"
    row = harness(tmp_path, "frozen")
    assert row["status"] == "wrong" and "running_mean" in row["message"]
    assert "new_ms" not in row  # a module that failed is not timed


def test_runner_takes_a_real_tune_to_a_harness_row(tmp_path, monkeypatch):
    """One problem through `run_problem` as the suite runs it (tune subprocess, harness
    subprocess), on a small softmax: the CLI's flags as the runner passes them are accepted."""
    from benchmarks import realistic_run as rr
    from benchmarks import realistic_suite

    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "softmax_small.py").write_text(
        (ROOT / "tests/data/good/softmax_small.py").read_text())
    monkeypatch.setattr(realistic_suite, "SUITE", suite)
    entry = {"problem": "softmax_small", "family": "softmax", "input_bytes": 0, "bytes": 0,
             "flops": 0, "stages": 1}
    s = rr.RunSettings(work=tmp_path / "work", final=tmp_path / "out",
                       deadline=time.time() + 400, budget=8, time_limit_s=20)
    row = rr.run_problem(entry, "0", s, rr.tune_has_time_limit())
    assert row is not None and row["status"] == "ok", row
    assert row["verified"] and row["new_ms"] > 0 and row["best_ms"] > 0
    assert row["tune_peak_gpu_bytes"] is None or row["tune_peak_gpu_bytes"] > 0
