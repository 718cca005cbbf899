"""Run control (issues 35 and 33): a script without a main guard, host failures kept out of the
store, output paths checked before the search, Ctrl-C keeping the best so far, the time limit
and the compile timeout, and the small things a new user meets first (--version, the strategy
list, the simulator notice, the default store).

The CLI tests run real `cuda-agent` subprocesses on the simulated device; the interrupt tests
send a real SIGINT."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from helpers import GOOD
from test_cli import CLI, as_from_a_shell, cli_env, run, spawn, tree

RELU = GOOD / "relu_small.py"
SOFTMAX = GOOD / "softmax_small.py"


def _measurements(store: Path) -> list[tuple]:
    if not store.exists():
        return []
    with sqlite3.connect(store) as db:
        try:
            return db.execute("SELECT ok, error_kind FROM measurements").fetchall()
        except sqlite3.OperationalError:  # the schema is not there yet
            return []


def _problems(store: Path) -> int:
    if not store.exists():
        return 0
    with sqlite3.connect(store) as db:
        try:
            return db.execute("SELECT COUNT(*) FROM problems").fetchone()[0]
        except sqlite3.OperationalError:
            return 0


def _site(tmp_path: Path, body: str) -> dict:
    """An environment whose Python processes run `body` at start-up (a sitecustomize): how a
    test makes every worker process of the run fail or stall, whatever starts it."""
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(textwrap.dedent(body))
    env = cli_env()
    env["CUDA_AGENT_CACHE"] = str(tmp_path / "cache")  # cold: every candidate compiles
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(site), env.get("PYTHONPATH")) if p)
    return env


# Only the first Python process (the CLI) runs normally; every Python process it starts
# (compile workers, however they are started) exits at once.
NO_CHILDREN = """
    import os
    if os.environ.get("RC_CHILDREN") == "blocked":
        os._exit(1)
    os.environ["RC_CHILDREN"] = "blocked"
"""


# -- 1. the API from a script without `if __name__ == "__main__":` ---------------------------------

def test_tune_from_a_script_without_a_main_guard(tmp_path):
    """The workers do not re-run the user's __main__: a script calling cuda_agent.tune() at
    top level gets a result, without multiprocessing's tracebacks, and runs once."""
    script = tmp_path / "noguard.py"
    marker = tmp_path / "runs.txt"
    script.write_text(textwrap.dedent(f"""
        import cuda_agent
        with open({str(marker)!r}, "a") as f:
            f.write("ran\\n")
        r = cuda_agent.tune({str(RELU)!r}, device="sim", budget=4, batch=4,
                            store={str(tmp_path / "s.db")!r})
        print("BEST", r.best is not None, [t.measurement.error_kind for t in r.trials])
    """))
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                       timeout=300, env=cli_env(), cwd=tmp_path)
    took = time.monotonic() - t0
    assert p.returncode == 0, p.stderr[-2000:]
    assert "BEST True [None, None, None, None]" in p.stdout
    assert "Traceback" not in p.stderr and "bootstrapping phase" not in p.stderr
    assert marker.read_text() == "ran\n", "the script ran again inside a worker"
    assert took < 120


# -- 2. a host failure is the user's error, never a candidate's ------------------------------------

def test_workers_that_cannot_start_are_an_error_not_candidate_failures(tmp_path):
    """No compile process can start: one line, a non-zero exit, and nothing in the shared
    store, so that the next run (on a working host) measures and succeeds."""
    store = tmp_path / "s.db"
    args = ["tune", RELU, "--device", "sim", "--budget", "4", "--batch", "4", "--store", store,
            "--out", tmp_path / "o"]
    p = subprocess.run([CLI, *map(str, args)], capture_output=True, text=True, timeout=300,
                       env=_site(tmp_path, NO_CHILDREN), cwd=tmp_path)
    assert p.returncode not in (0, 1), (p.returncode, p.stdout[-1500:], p.stderr[-1500:])
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "could not start a compile process" in lines[0], p.stderr
    assert _measurements(store) == [], "a host failure was stored as candidate data"
    assert not (tmp_path / "o").exists()
    again = subprocess.run([CLI, *map(str, args)], capture_output=True, text=True,
                           timeout=300, env={**cli_env(), "CUDA_AGENT_CACHE": str(tmp_path / "c")},
                           cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-1500:]
    assert [ok for ok, _ in _measurements(store)] == [1, 1, 1, 1]


# -- 3. output paths are checked before the search --------------------------------------------------

@pytest.fixture
def loud_problem(tmp_path) -> tuple[Path, Path]:
    """A problem that leaves a marker when loaded: proof that an error came before it."""
    marker = tmp_path / "loaded"
    src = RELU.read_text() + f"\nopen({str(marker)!r}, 'w').close()\n"
    path = tmp_path / "loud.py"
    path.write_text(src)
    return path, marker


@pytest.mark.parametrize("where", ["proc", "under_a_file", "read_only_fs"])
def test_an_unwritable_out_fails_before_the_search(tmp_path, loud_problem, where):
    problem, marker = loud_problem
    (tmp_path / "afile").write_text("x")
    out = {"proc": Path("/proc/cuda-agent-x"), "under_a_file": tmp_path / "afile" / "o",
           "read_only_fs": Path("/sys/cuda-agent-x/o")}[where]
    if where == "read_only_fs" and not Path("/sys").is_dir():
        pytest.skip("no /sys here")
    store = tmp_path / "s.db"
    t0 = time.monotonic()
    r = run(["tune", problem, "--device", "sim", "--out", out, "--store", store], tmp_path)
    took = time.monotonic() - t0
    assert r.returncode == 2, (r.stdout[-1000:], r.stderr[-1000:])
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and str(out) in lines[0] and "Traceback" not in r.stderr
    assert not marker.exists(), "the problem was loaded: the check came after the search began"
    assert not store.exists() and not out.exists()
    assert took < 30  # the CLI's start-up only, on a loaded 2-core machine


def test_emit_replaces_an_earlier_run_whole(tmp_path):
    """Into an existing directory: every file replaced, and no kernel left from an earlier run
    beside a report that has none (nothing half-written, nothing mismatched)."""
    from cuda_agent.outputs import write_files

    out = tmp_path / "o"
    write_files(out, {"kernel.cu": "old", "model_new.py": "old", "report.json": "{}"})
    assert oct(out.stat().st_mode & 0o777) != oct(0o700), "not mkdtemp's private mode"
    write_files(out, {"report.json": '{"best": null}'}, remove=("kernel.cu", "model_new.py"))
    assert tree(out) == ["report.json"] and "null" in (out / "report.json").read_text()
    assert not [p for p in tmp_path.rglob(".*")]


# -- 4. Ctrl-C keeps the best so far -----------------------------------------------------------------

def _wait_for(pred, proc: subprocess.Popen, timeout: float, what: str) -> None:
    t0 = time.monotonic()
    while not pred():
        if proc.poll() is not None:
            pytest.fail(f"the run ended before {what}: {proc.stderr.read()[-1500:]}")
        if time.monotonic() - t0 > timeout:
            proc.kill()
            pytest.fail(f"no {what} within {timeout} s")
        time.sleep(0.2)


def test_ctrl_c_writes_the_best_so_far_and_exits_130(tmp_path):
    store, out = tmp_path / "s.db", tmp_path / "o"
    p = spawn(["tune", SOFTMAX, "--device", "sim", "--budget", "100000", "--batch", "2",
               "--time-limit", "0", "--store", store, "--out", out], tmp_path)
    _wait_for(lambda: len(_measurements(store)) >= 3, p, 240, "three measurements")
    p.send_signal(signal.SIGINT)
    stdout, stderr = p.communicate(timeout=120)
    assert p.returncode == 130, (stdout[-1500:], stderr[-1500:])
    assert "Traceback" not in stderr
    assert tree(out) == ["kernel.cu", "model_new.py", "report.json"]
    report = json.loads((out / "report.json").read_text())
    assert report["interrupted"] is True and report["stopped"] == "interrupted"
    assert report["evals"] == len(report["candidates"]) >= 3
    assert report["best"] is not None and report["simulated"] is True
    assert f"interrupted after {report['evals']} measured candidates" in " ".join(stderr.split())
    assert "kept the best so far" in stderr
    assert "simulated" in (out / "model_new.py").read_text().lower()


def test_ctrl_c_before_anything_was_measured_writes_the_report_only(tmp_path):
    """The first batch is still compiling (compile processes that stall) when Ctrl-C comes:
    nothing measured, so the report alone is written, and it says so."""
    started = tmp_path / "worker-started"
    env = _site(tmp_path, f"""
        import os, time
        if os.environ.get("RC_CHILDREN") == "stalled":
            open({str(started)!r}, "w").close()
            time.sleep(120)
        os.environ["RC_CHILDREN"] = "stalled"
    """)
    store, out = tmp_path / "s.db", tmp_path / "o"
    p = subprocess.Popen([CLI, "tune", str(RELU), "--device", "sim", "--budget", "8",
                          "--store", str(store), "--out", str(out)], cwd=tmp_path, env=env,
                         text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         preexec_fn=as_from_a_shell)
    _wait_for(started.exists, p, 240, "a compile process")
    p.send_signal(signal.SIGINT)
    stdout, stderr = p.communicate(timeout=120)
    assert p.returncode == 130, (stdout[-1500:], stderr[-1500:])
    assert tree(out) == ["report.json"]
    report = json.loads((out / "report.json").read_text())
    assert report["interrupted"] is True and report["evals"] == 0 and report["best"] is None
    assert "none passed yet" in " ".join(stderr.split())


# -- 5. the time limit and the compile timeout -------------------------------------------------------

def _stalls(job):
    """A compile worker that never finishes (a kernel too big to compile in any time)."""
    time.sleep(600)


STALLING_BLOCK = 128


def _stalls_on_big_blocks(job):
    """A compile worker that never finishes the 128-thread kernels (the default is a 256-thread
    one, so a run's first measurement always compiles; which of the others stall depends on
    the sample, and the tests read it off each trial's config)."""
    from cuda_agent.build.builder import _build_one

    if f"__launch_bounds__({STALLING_BLOCK})" in job[0]:
        time.sleep(600)
    return _build_one(job)


def test_the_time_limit_cuts_a_first_batch_that_compiles_too_long(tmp_path, monkeypatch):
    """The limit is a real bound: a first batch whose compiles never end is cut when the time
    is up (it was measured in full before), and the report says why the run stopped."""
    from cuda_agent.build.builder import Builder
    from cuda_agent.emit import report_dict
    from cuda_agent.tuner import tune

    monkeypatch.setenv("CUDA_AGENT_CACHE", str(tmp_path / "cache"))  # every source compiles
    monkeypatch.setattr(Builder, "_worker", staticmethod(_stalls))
    t0 = time.monotonic()
    r = tune(RELU, device="sim", budget=8, batch=8, time_limit_s=4.0, store=":memory:",
             strategy="random")
    took = time.monotonic() - t0
    assert r.stopped == "time_limit" and r.trials == [] and r.best is None
    assert took < 60, f"{took:.0f} s for a 4 s limit"
    d = report_dict(r)
    assert d["stopped"] == "time_limit" and d["time_limit_s"] == 4.0 and not d["interrupted"]


def test_the_time_limit_returns_the_best_so_far(tmp_path):
    """A search that would run for hours stops at the limit with what it measured: the limit
    is checked inside a batch, not only between batches."""
    from cuda_agent.tuner import tune

    t0 = time.monotonic()
    r = tune(SOFTMAX, out=tmp_path / "o", device="sim", budget=100000, batch=4,
             time_limit_s=6.0, store=":memory:", strategy="random")
    took = time.monotonic() - t0
    assert r.stopped == "time_limit" and r.best is not None
    assert 0 < len(r.trials) < 100000
    assert r.wall_s < 6.0 + 10, r.wall_s
    assert took < 120
    report = json.loads((tmp_path / "o" / "report.json").read_text())
    assert report["stopped"] == "time_limit" and (tmp_path / "o" / "model_new.py").exists()


def test_a_compile_past_its_timeout_is_the_candidates_failure(tmp_path, monkeypatch):
    """Killed at the compile timeout and recorded as compile_timeout: the candidate's data,
    in the report and the store; but not served from the store again (the machine's load
    decides it as much as the source)."""
    from cuda_agent.build.builder import Builder
    from cuda_agent.tuner import tune

    monkeypatch.setenv("CUDA_AGENT_CACHE", str(tmp_path / "cache"))  # every source compiles
    monkeypatch.setattr(Builder, "_worker", staticmethod(_stalls_on_big_blocks))
    store = str(tmp_path / "s.db")
    r = tune(RELU, device="sim", budget=4, batch=4, compile_timeout_s=3.0, store=store,
             strategy="random")
    kinds = [t.measurement.error_kind for t in r.trials]
    stalled = [t.config["config.block"] == STALLING_BLOCK for t in r.trials]
    assert kinds == ["compile_timeout" if s else None for s in stalled], (kinds, stalled)
    assert any(stalled) and not all(stalled), "the sample should hold both kinds of candidate"
    assert r.best is not None and r.stopped == "budget"
    again = tune(RELU, device="sim", budget=4, batch=4, compile_timeout_s=3.0, store=store,
                 strategy="random")
    for t in again.trials:
        assert t.measurement.reused == (t.measurement.error_kind != "compile_timeout")


def test_time_limit_flags(tmp_path):
    for flag in ("--time-limit", "--compile-timeout", "--baseline-timeout"):
        r = run(["tune", RELU, "--device", "sim", flag, "-1"], tmp_path)
        assert r.returncode == 2 and flag in r.stderr and "seconds" in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1


# -- 6. the first things a new user meets -----------------------------------------------------------

def test_version(tmp_path):
    import cuda_agent

    r = run(["--version"], tmp_path)
    assert r.returncode == 0 and r.stdout.strip() == f"cuda-agent {cuda_agent.__version__}"


def test_tune_help_lists_the_strategies_the_registry_accepts(tmp_path):
    from cuda_agent.search import STRATEGIES, strategy_names

    r = run(["tune", "--help"], tmp_path)
    assert r.returncode == 0
    text = " ".join(r.stdout.replace("│", " ").split())
    listed = text.split("search strategy:", 1)[1].split("(default", 1)[0]
    # "default" is the tuner's name for the best measured strategy (search/default.py)
    assert [s.strip() for s in listed.split("|")] == strategy_names()
    import cuda_agent.agents.strategy  # noqa: F401  (registers the lazily named ones)
    assert ["default", *sorted(STRATEGIES)] == strategy_names(), \
        "a lazily named strategy is not registered"


def test_the_api_warns_when_it_falls_back_to_the_simulator(tmp_path):
    from cuda_agent.runner.devices import cuda_available
    from cuda_agent.tuner import SimulatedDeviceWarning, tune

    if cuda_available():
        pytest.skip("a GPU is present: no fallback")
    with pytest.warns(SimulatedDeviceWarning, match="simulated"):
        tune(RELU, budget=2, batch=2, store=":memory:", strategy="random")


def test_the_api_uses_the_clis_store(tmp_path, monkeypatch):
    from cuda_agent.cli import default_store
    from cuda_agent.tuner import tune

    monkeypatch.setenv("CUDA_AGENT_HOME", str(tmp_path / "home"))
    r = tune(RELU, device="sim", budget=2, batch=2, strategy="random")
    assert Path(default_store()) == tmp_path / "home" / "store.sqlite"
    assert [ok for ok, _ in _measurements(Path(default_store()))] == [1, 1]
    assert r.best is not None
