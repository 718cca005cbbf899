"""Faults a user brings about (issue 47): bad flags, Ctrl-C, SIGKILL, a corrupt policy.

Every test injects the real fault into a real `cuda-agent` process on the simulated device (or
replay): a flag out of range is refused before any work; a SIGINT stops `tune`, `bench` and
`train` with what they finished on disk, exit 130 and one line on stderr; a run after a SIGKILL
at capture, search or output works; `train --resume` continues after a SIGKILL; a corrupt
`--policy` is one line naming the file.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from helpers import GOOD
from test_cli import CLI, cli_env
from cuda_agent.flags import NVIDIA_DRIVER

# one worker runs the module's tests (`--dist loadgroup`, pyproject), so its module fixtures
# (`bad_flag_runs`: CLI processes) are built once, not once per worker
pytestmark = pytest.mark.xdist_group("test_signals_and_flags")

ROOT = Path(__file__).resolve().parents[2]
PROBLEMS = ROOT / "benchmarks" / "problems"
RELU = GOOD / "relu_small.py"
SOFTMAX = GOOD / "softmax_small.py"


def _start(args: list, cwd: Path, env: dict | None = None) -> subprocess.Popen:
    """A `cuda-agent` process that takes Ctrl-C as a terminal's user would send it: SIGINT
    at its default (a shell starts a background job with SIGINT ignored, and a test run
    from one would pass that on)."""
    cwd.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen([CLI, *map(str, args)], cwd=cwd, env=env or cli_env(), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def _wait_for(pred, proc: subprocess.Popen, timeout: float, what: str) -> None:
    t0 = time.monotonic()
    while not pred():
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"the run ended ({proc.returncode}) before {what}: {err[-1500:]}")
        if time.monotonic() - t0 > timeout:
            proc.kill()
            proc.communicate()
            pytest.fail(f"no {what} within {timeout} s")
        time.sleep(0.05)


def _finish(proc: subprocess.Popen, timeout: float = 120) -> tuple[str, str]:
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"still running {timeout} s after the signal: {err[-1500:]}")


def _lines(text: str) -> list[str]:
    return [line for line in text.strip().splitlines() if line.strip()]


def _measured(store: Path) -> int:
    if not store.exists():
        return 0
    try:
        with sqlite3.connect(store) as db:
            return db.execute("SELECT COUNT(*) FROM measurements").fetchone()[0]
    except sqlite3.Error:  # created, tables not yet
        return 0


# -- flags checked before any work ---------------------------------------------------------------

_T, _B, _TR, _S = "tune", "bench", "train", "sweep"
BAD_FLAGS = {
    # name: (command and its bad flag, a word the one-line error must hold)
    "tune-budget": ([_T, "P", "--budget", "0"], "--budget"),
    "tune-batch": ([_T, "P", "--batch", "0"], "--batch"),
    "tune-strategy": ([_T, "P", "--strategy", "bogus"], "--strategy"),
    "tune-device": ([_T, "P", "--device", "tpu"], "--device"),
    # a machine with no NVIDIA driver (CI's): the GPU is refused before the problem loads
    **({"tune-device-cuda-no-gpu": ([_T, "P", "--device", "cuda"], "no CUDA GPU")}
       if not any(Path(p).exists() for p in NVIDIA_DRIVER) else {}),
    "tune-precision": ([_T, "P", "--precision", "fp8"], "--precision"),
    "tune-tolerance": ([_T, "P", "--tolerance", "loose"], "--tolerance"),
    "tune-replay-precision": ([_T, "P", "--device", "replay", "--precision", "tf32"],
                              "--precision"),
    "tune-time-limit": ([_T, "P", "--time-limit", "-1"], "--time-limit"),
    "tune-compile-timeout": ([_T, "P", "--compile-timeout", "-5"], "--compile-timeout"),
    "tune-baseline-timeout": ([_T, "P", "--baseline-timeout", "0"], "--baseline-timeout"),
    "tune-import-timeout": ([_T, "P", "--import-timeout", "-1"], "--import-timeout"),
    "tune-import-memory": ([_T, "P", "--import-memory", "-2"], "--import-memory"),
    "tune-stage-patience": ([_T, "P", "--stage-patience", "-1"], "--stage-patience"),
    "tune-patience": ([_T, "P", "--patience", "0"], "--patience"),
    "tune-agents": ([_T, "P", "--agents", "triple"], "--agents"),
    "tune-policy-missing": ([_T, "P", "--policy", "MISSING"], "--policy"),
    "tune-policy-strategy": ([_T, "P", "--strategy", "random", "--policy", "FILE"], "--policy"),
    "tune-replay-root": ([_T, "P", "--replay-root", "MISSING"], "--replay-root"),
    "tune-out": ([_T, "P", "--out", "FILE"], "output directory"),
    "bench-strategies": ([_B, "--strategies", "random,bogus"], "--strategies"),
    "bench-budget": ([_B, "--budget", "0"], "--budget"),
    "bench-seeds": ([_B, "--seeds", "0"], "--seeds"),
    "bench-parallel": ([_B, "--parallel", "0"], "--parallel"),
    "bench-device": ([_B, "--device", "tpu"], "--device"),
    "bench-suite": ([_B, "--suite", "MISSING"], "--suite"),
    "bench-problem-seconds": ([_B, "--problem-seconds", "0"], "--problem-seconds"),
    "bench-precision": ([_B, "--precision", "fp8"], "--precision"),
    "bench-replay-tolerance": ([_B, "--tolerance", "kernelbench"], "--tolerance"),
    "bench-single": ([_B, "--strategies", "marl_single"], "--single-policy"),
    "bench-policy": ([_B, "--policy", "MISSING"], "--policy"),
    "bench-stage-patience": ([_B, "--stage-patience", "-1"], "--stage-patience"),
    "bench-out": ([_B, "--out", "FILE"], "output directory"),
    "train-iterations": ([_TR, "--iterations", "0"], "--iterations"),
    "train-episodes": ([_TR, "--episodes", "0"], "--episodes"),
    "train-steps": ([_TR, "--steps", "0"], "--steps"),
    "train-batch": ([_TR, "--batch", "0"], "--batch"),
    "train-samplers": ([_TR, "--samplers", "0"], "--samplers"),
    "train-agents": ([_TR, "--agents", "triple"], "--agents"),
    "train-explore": ([_TR, "--explore", "wild"], "--explore"),
    "train-prior-weight": ([_TR, "--prior-weight", "-1"], "--prior-weight"),
    "train-aux-weight": ([_TR, "--aux-weight", "-1"], "--aux-weight"),
    "train-operators": ([_TR, "--operators-per-iteration", "-1"], "--operators-per-iteration"),
    "train-time-limit": ([_TR, "--time-limit", "0"], "--time-limit"),
    "train-device": ([_TR, "--device", "tpu"], "--device"),
    "train-suite": ([_TR, "--suite", "MISSING"], "--suite"),
    "train-out": ([_TR, "--out", "FILE"], "output directory"),
    "sweep-problem": ([_S, "MISSING"], "no such file"),
    "sweep-device": ([_S, "P", "--device", "replay"], "--device"),
    "sweep-unknown-device": ([_S, "P", "--device", "tpu"], "--device"),
    "sweep-sample": ([_S, "P", "--sample", "0"], "--sample"),
}
# what a command needs to run at all, so that the bad flag is the only thing wrong
VALID = {_B: ["--suite", str(PROBLEMS / "loss_hinge.py"), "--strategies", "random"],
         _TR: ["--suite", "SUITE"], _S: [], _T: []}

# Each case through the CLI's own entry point, in one process (a process per case would spend
# its second on imports): its exit status, its output, its seconds, and whether it imported
# torch, which only real work does (the problem's capture, a device, the tuner)
PROBE = """
import json, sys, time
from typer.testing import CliRunner
from cuda_agent.cli import app

found = {}
for name, args in json.loads(sys.argv[1]).items():
    t0 = time.perf_counter()
    r = CliRunner().invoke(app, args, terminal_width=300)
    found[name] = {"code": r.exit_code, "stdout": r.stdout, "stderr": r.stderr,
                   "seconds": time.perf_counter() - t0, "torch": "torch" in sys.modules}
print(json.dumps(found))
"""


@pytest.fixture(scope="module")
def bad_flag_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("bad-flags")
    (root / "a-file").write_text("not a directory\n")
    (root / "suite").mkdir()
    shutil.copy(RELU, root / "suite")
    subst = {"P": str(RELU), "MISSING": str(root / "missing.pt"), "FILE": str(root / "a-file"),
             "SUITE": str(root / "suite")}
    cases = {}
    for name, (args, _) in BAD_FLAGS.items():
        cmd, *rest = [subst.get(a, a) for a in args]
        out = ["--out", str(root / "out" / name)] if "--out" not in rest and cmd != _S else []
        if cmd == _S and "--out-root" not in rest:
            out = ["--out-root", str(root / "out" / name)]
        given = {a for a in rest if a.startswith("--")}
        valid = [subst.get(a, a) for a in VALID[cmd]]
        valid = [a for i, a in enumerate(valid) if not (a.startswith("--") and a in given)
                 and not (i and valid[i - 1].startswith("--") and valid[i - 1] in given)]
        cases[name] = [cmd, *rest, *valid, *out]
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", PROBE, json.dumps(cases)], cwd=root,
                          env=cli_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return root, json.loads(proc.stdout), time.monotonic() - t0


@pytest.mark.parametrize("name", sorted(BAD_FLAGS))
def test_a_bad_flag_is_refused_before_any_work(bad_flag_runs, name):
    """One line naming the flag, exit 2, in well under two seconds (bounded at 5 for slow CI
    machines): no problem loaded, no device opened (the simulator's banner), nothing written.
    `--budget 0` and a bad `--strategy` used to be refused after 15-18 s and the banner."""
    root, runs, _ = bad_flag_runs
    r = runs[name]
    lines = _lines(r["stderr"])
    assert r["code"] == 2, r
    assert len(lines) == 1 and lines[0].startswith("error:"), r["stderr"]
    assert BAD_FLAGS[name][1] in lines[0], lines[0]
    assert "simulated device" not in r["stdout"] + r["stderr"], r  # the simulator's banner
    assert not r["torch"], f"{name}: work began (torch was imported) before the flag was checked"
    assert r["seconds"] < 5.0, r["seconds"]
    assert not (root / "out" / name).exists()


def test_a_bad_strategy_names_every_strategy(bad_flag_runs):
    from cuda_agent.search import strategy_names

    _, runs, _ = bad_flag_runs
    line = _lines(runs["tune-strategy"]["stderr"])[0]
    assert ", ".join(strategy_names()) in " ".join(line.split()) and "default" in line


def test_the_bad_flags_of_the_issue_answer_at_once(tmp_path):
    """From the process's start: `--budget 0` and a bad `--strategy` (each 15-18 s before)."""
    procs = []
    for args in (["--budget", "0"], ["--strategy", "bogus"]):
        t0 = time.monotonic()
        procs.append((t0, _start(["tune", RELU, *args, "--out", tmp_path / "o"], tmp_path)))
    for t0, p in procs:
        out, err = _finish(p, 60)
        assert p.returncode == 2 and len(_lines(err)) == 1, err
        assert "simulated device" not in out + err
        assert time.monotonic() - t0 < 5.0


# -- Ctrl-C: what is finished is kept, exit 130, one line ------------------------------------------

def test_ctrl_c_in_tune_keeps_the_best_so_far(tmp_path):
    store, out = tmp_path / "s.db", tmp_path / "o"
    p = _start(["tune", SOFTMAX, "--device", "sim", "--strategy", "random", "--budget",
                "100000", "--batch", "2", "--time-limit", "0", "--store", store, "--out", out],
               tmp_path)
    _wait_for(lambda: _measured(store) >= 2, p, 240, "two measurements")
    p.send_signal(signal.SIGINT)
    _, err = _finish(p)
    assert p.returncode == 130, err[-1500:]
    lines = _lines(err)
    assert len(lines) == 1 and lines[0].startswith("interrupted after"), err
    report = json.loads((out / "report.json").read_text())
    assert report["interrupted"] is True and report["best"] is not None
    assert (out / "model_new.py").is_file() and (out / "kernel.cu").is_file()


def _replay_suite(tmp_path: Path) -> str:
    """Two problems with recorded H200 sweeps (replay needs no GPU)."""
    names = ("loss_hinge", "loss_cross_entropy_odd")
    for n in names:
        assert (ROOT / "benchmarks/data/nvidia-h200" / f"{n}.json.gz").exists(), n
    return ",".join(str(PROBLEMS / f"{n}.py") for n in names)


def test_ctrl_c_in_bench_keeps_the_problems_finished(tmp_path):
    """The first Ctrl-C used to be taken by the strategy run under way (the tuner keeps the
    search it ends) and the bench went on. Now: the first problem's report is written, as
    `cuda-agent report` rebuilds it, and the run stops."""
    out = tmp_path / "bench"
    p = _start(["bench", "--suite", _replay_suite(tmp_path), "--device", "replay",
                "--strategies", "random,genetic", "--seeds", "20", "--budget", "20",
                "--out", out], ROOT)
    _wait_for((out / "bench.partial.json").exists, p, 240, "the first problem finished")
    p.send_signal(signal.SIGINT)
    stdout, err = _finish(p)
    assert p.returncode == 130, err[-1500:]
    lines = _lines(err)
    assert len(lines) == 1 and lines[0].startswith("interrupted: kept 1 finished problem"), err
    assert "/80" in stdout and "eta" in stdout, stdout[-800:]  # the total, known up front
    data = json.loads((out / "bench.json").read_text())
    assert set(data["problems"]) == {"loss_hinge"}
    assert len(data["runs"]) == 40 and "loss_cross_entropy_odd" in data["skipped"]
    assert not (out / "bench.partial.json").exists()
    from cuda_agent.report.bench_report import load_run  # what `cuda-agent report` reads

    assert set(load_run(out).problems) == {"loss_hinge"}


def test_a_second_ctrl_c_aborts_at_once(tmp_path):
    """While what is finished is written, a second Ctrl-C ends the process there."""
    script = textwrap.dedent("""
        import os, signal, sys, time
        from cuda_agent import interrupt
        with interrupt.first_stops_second_aborts():
            try:
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(5)
            except KeyboardInterrupt:
                assert interrupt.requested()
                print("writing what is finished", flush=True)
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(5)
                print("never", flush=True)
    """)
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-c", script], env=cli_env(), capture_output=True,
                       text=True, timeout=60,
                       preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert p.returncode == 130 and time.monotonic() - t0 < 4
    assert p.stdout.split() == ["writing", "what", "is", "finished"]
    assert len(_lines(p.stderr)) == 1 and "aborted" in p.stderr


def _suite(tmp_path: Path) -> Path:
    suite = tmp_path / "suite"
    suite.mkdir(exist_ok=True)
    shutil.copy(RELU, suite)
    return suite


def _train(tmp_path: Path, out: Path, iterations: int, *more: str) -> list:
    return ["train", "--suite", _suite(tmp_path), "--device", "sim", "--iterations",
            str(iterations), "--episodes", "1", "--steps", "1", "--batch", "2", "--out", out,
            *more]


def _iteration(ckpt: Path) -> int:
    from cuda_agent.agents import checkpoint

    return checkpoint.load(ckpt)["meta"]["iteration"]


def test_train_keeps_its_checkpoint_at_ctrl_c_and_resumes_after_it_and_a_sigkill(tmp_path):
    """Ctrl-C: the checkpoint of the last finished iteration is kept (the first Ctrl-C used
    to be ignored while episodes finished); `--resume` continues from it; killed again
    (SIGKILL, nothing kept on purpose), `--resume` continues from the last checkpoint."""
    out = tmp_path / "t"
    p = _start(_train(tmp_path, out, 1000), tmp_path)
    _wait_for((out / "policy.pt").exists, p, 240, "the first checkpoint")
    p.send_signal(signal.SIGINT)
    stdout, err = _finish(p)
    assert p.returncode == 130, err[-1500:]
    lines = _lines(err)
    assert len(lines) == 1 and lines[0].startswith("interrupted: kept") and \
        "--resume" in lines[0], err
    assert "/1000" in stdout and "eta" in stdout, stdout[-800:]
    kept = _iteration(out / "policy.pt")
    assert kept >= 1 and f"at iteration {kept} of 1000" in " ".join(lines[0].split())
    assert len(json.loads((out / "curves.json").read_text())) == kept

    p = _start(_train(tmp_path, out, 1000, "--resume"), tmp_path)
    _wait_for(lambda: _iteration(out / "policy.pt") > kept, p, 240, "an iteration resumed")
    p.kill()
    stdout, _ = _finish(p)
    assert f"resumed from {out / 'policy.pt'} at iteration {kept}" in " ".join(stdout.split())
    kept = _iteration(out / "policy.pt")
    r = subprocess.run([CLI, *map(str, _train(tmp_path, out, kept + 1, "--resume"))],
                       cwd=tmp_path, env=cli_env(), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-1500:]
    assert _iteration(out / "policy.pt") == kept + 1


# -- SIGKILL: the next run works --------------------------------------------------------------------

def _site(tmp_path: Path, body: str) -> dict:
    """An environment whose first Python process (the CLI, not its workers) runs `body` at
    start-up (a sitecustomize)."""
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(textwrap.dedent("""
        import os
        if not os.environ.get("FAULT_HOOKED"):
            os.environ["FAULT_HOOKED"] = "1"
    """) + textwrap.indent(textwrap.dedent(body), "    "))
    env = cli_env()
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(site), env.get("PYTHONPATH")) if p)
    return env


STALLING_PROBLEM = '''
import os, time
import torch
import torch.nn as nn

if os.environ.get("FAULT_IMPORT_MARKER"):  # the problem's import: the capture has begun
    open(os.environ["FAULT_IMPORT_MARKER"], "w").close()
    time.sleep(60)


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(64, 128)]


def get_init_inputs():
    return []
'''

# output: the first file of model_new.py, kernel.cu, report.json is written, then the run stalls
STALL_AT_OUTPUT = """
import time
import cuda_agent.outputs as outputs

_write = outputs.write_files


class _Stalling(dict):
    def items(self):
        for i, item in enumerate(dict.items(self)):
            yield item
            if i == 0:
                open(os.environ["FAULT_OUTPUT_MARKER"], "w").close()
                time.sleep(60)


def write_files(out, files, remove=()):
    return _write(out, _Stalling(files), remove)


outputs.write_files = write_files
"""


def test_a_run_after_a_sigkill_at_capture_search_or_output_works(tmp_path):
    """Killed while the problem is imported (the capture), while it searches, and while the
    output is written: each next run over the same store, caches and output works."""
    problem = tmp_path / "problems" / "relu_kill.py"
    problem.parent.mkdir()
    problem.write_text(STALLING_PROBLEM)
    store, out, marker = tmp_path / "s.db", tmp_path / "o", tmp_path / "marker"
    args = ["tune", problem, "--device", "sim", "--strategy", "random", "--batch", "2",
            "--store", store, "--out", out]

    cached = {**cli_env(), "CUDA_AGENT_CAPTURE_CACHE": "1"}  # the capture cache in play too

    p = _start([*args, "--budget", "4"], tmp_path,
               {**cached, "FAULT_IMPORT_MARKER": str(marker)})
    _wait_for(marker.exists, p, 120, "the problem's import")
    p.kill()
    _finish(p)
    marker.unlink()

    p = _start([*args, "--budget", "100000", "--time-limit", "0"], tmp_path, cached)
    _wait_for(lambda: _measured(store) >= 2, p, 240, "two measurements")
    p.kill()
    _finish(p)

    p = _start([*args, "--budget", "4"], tmp_path,
               {**_site(tmp_path, STALL_AT_OUTPUT), "CUDA_AGENT_CAPTURE_CACHE": "1",
                "FAULT_OUTPUT_MARKER": str(marker)})
    _wait_for(marker.exists, p, 240, "the output half written")
    p.kill()
    _finish(p)

    r = subprocess.run([CLI, *map(str, args), "--budget", "4"], cwd=tmp_path, env=cached,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == \
        ["kernel.cu", "model_new.py", "report.json"]
    report = json.loads((out / "report.json").read_text())
    assert report["best"] is not None and report["evals"] == 4


# -- a corrupt policy ------------------------------------------------------------------------------

def test_a_corrupt_policy_is_one_line_naming_the_file(tmp_path):
    bad = tmp_path / "policy.pt"
    bad.write_bytes(os.urandom(4096))
    r = subprocess.run([CLI, "tune", str(RELU), "--device", "sim", "--policy", str(bad),
                        "--budget", "2", "--out", str(tmp_path / "o"), "--store",
                        str(tmp_path / "s.db")], cwd=tmp_path, env=cli_env(),
                       capture_output=True, text=True, timeout=300)
    lines = _lines(r.stderr)
    assert r.returncode == 2 and len(lines) == 1, r.stderr
    assert str(bad) in " ".join(lines[0].split()) and "Traceback" not in r.stderr
    assert not (tmp_path / "o").exists()
