"""benchmarks/gpu_suite.py's GPU-test part: with workers, the memory and timing test files run
after the others, one at a time (four processes on one GPU failed their memory bounds and time
comparisons, 2026-12-07-h100-gpu-tests-3), every run verbose with a junit report, and a run
that the limit cuts still leaves its log. Checked with pytest's command recorded, not run."""

from __future__ import annotations

import subprocess
from pathlib import Path

from benchmarks import gpu_suite


def _record(monkeypatch) -> list[list[str]]:  # noqa: ANN001
    calls: list[list[str]] = []

    def fake_run(cmd, **kw):  # noqa: ANN001, ANN003, ANN202
        calls.append(list(cmd))
        kw["stdout"].write("1 passed\n")
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(gpu_suite.subprocess, "run", fake_run)
    return calls


def test_workers_run_the_safe_files_at_once_and_the_memory_and_timing_ones_alone(
        tmp_path, monkeypatch):
    (tmp_path / "logs").mkdir()
    calls = _record(monkeypatch)
    gpu_suite.run_tests(tmp_path, "tests/gpu", 100, workers=4)
    assert len(calls) == 2
    parallel, serial = calls
    assert parallel[parallel.index("-n") + 1] == "4" and "-n" not in serial
    files = {Path(a).stem for a in parallel + serial if a.endswith(".py")}
    on_disk = {p.stem for p in (gpu_suite.ROOT / "tests" / "gpu").glob("test_*.py")}
    assert files == on_disk  # every file, once
    assert {Path(a).stem for a in serial if a.endswith(".py")} == \
        set(gpu_suite.SERIAL_GPU_TESTS) & on_disk
    assert not any(Path(a).stem in gpu_suite.SERIAL_GPU_TESTS for a in parallel)
    for cmd in calls:
        args = cmd[cmd.index("pytest") + 1:]
        assert "-v" in args and "--junitxml" in args and args[args.index("-m") + 1] == "gpu"
    assert (tmp_path / "logs" / "gpu-parallel.log").read_text() == "1 passed\n"


def test_without_workers_one_run_as_before(tmp_path, monkeypatch):
    (tmp_path / "logs").mkdir()
    calls = _record(monkeypatch)
    gpu_suite.run_tests(tmp_path, "tests/gpu/test_faults.py", 100, "fault")
    assert len(calls) == 1 and "-n" not in calls[0]
    assert calls[0][-2:] == ["-k", "fault"] and "tests/gpu/test_faults.py" in calls[0]


def test_every_serial_name_is_a_gpu_test_file():
    on_disk = {p.stem for p in (gpu_suite.ROOT / "tests" / "gpu").glob("test_*.py")}
    assert set(gpu_suite.SERIAL_GPU_TESTS) <= on_disk
