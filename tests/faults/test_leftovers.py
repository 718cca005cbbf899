"""Leftovers of killed runs, and file modes (issue 47).

A real `cuda-agent tune` is SIGKILLed at the search (while its compile process writes a cache
entry) and at the output (while it renames its files into place, in an existing directory and
in a new one), while another tune stands stopped half-way through writing its own output. The
next run removes the killed runs' temporaries, and not the live run's, which then finishes.
Every file cuda-agent writes has the mode the user's umask gives (022 and 077).
"""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import cuda_agent
from helpers import GOOD
from cuda_agent import tempfiles
from cuda_agent.agents import checkpoint
from cuda_agent.agents.policy import MultiAgentPolicy
from cuda_agent.ir import capture_cache
from cuda_agent.outputs import write_files

ROOT = Path(__file__).resolve().parents[2]

# Imported by every Python process of a faulted tune (the tune and its compile processes):
# the first file renamed to a path matching CA_FAULT_AT stops the process (SIGSTOP, a run
# caught mid-write) or SIGKILLs the tune and the process itself (the whole run dies there).
FAULTS = textwrap.dedent(r'''
    import os, re, signal
    _at, _how = os.environ.get("CA_FAULT_AT"), os.environ.get("CA_FAULT_HOW", "kill")
    if _at:
        os.environ.setdefault("CA_FAULT_TUNE", str(os.getpid()))
        _replace, _rename, _hit = os.replace, os.rename, []

        def _fault(dst):
            if not _hit and re.search(_at, os.fspath(dst)):
                _hit.append(dst)
                if _how == "stop":
                    os.kill(os.getpid(), signal.SIGSTOP)
                else:
                    os.kill(int(os.environ["CA_FAULT_TUNE"]), signal.SIGKILL)
                    os.kill(os.getpid(), signal.SIGKILL)

        def replace(src, dst, *a, **k):
            _fault(dst)
            return _replace(src, dst, *a, **k)

        def rename(src, dst, *a, **k):
            _fault(dst)
            return _rename(src, dst, *a, **k)

        os.replace, os.rename = replace, rename
''')


def leftovers(folder: Path, deep: bool = False) -> list[str]:
    """Hidden files and folders in `folder` (at any depth with `deep`): cuda-agent's
    temporaries, whatever their naming; nothing else there starts with a dot."""
    if not folder.exists():
        return []
    return sorted(str(p.relative_to(folder)) for p in (folder.rglob(".*") if deep
                                                        else folder.glob(".*")))


def start_tune(problem: Path, out: Path, env: dict, log: Path, fault: str | None = None,
               how: str = "kill") -> subprocess.Popen:
    env = {**env, "CA_FAULT_AT": fault or "", "CA_FAULT_HOW": how}
    with open(log, "w") as f:  # a file, not a pipe: a stopped tune must not block on it
        return subprocess.Popen(
            [sys.executable, "-m", "cuda_agent.cli", "tune", str(problem), "--out", str(out),
             "--device", "sim", "--budget", "2", "--batch", "2", "--strategy", "random",
             "--no-baselines", "--store", ":memory:"], env=env, stdout=f, stderr=f)


def wait_stopped(proc: subprocess.Popen, log: Path, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pid, status = os.waitpid(proc.pid, os.WNOHANG | os.WUNTRACED)
        if pid and os.WIFSTOPPED(status):
            return
        assert not pid, f"the tune ended before its fault: {log.read_text()[-2000:]}"
        time.sleep(0.1)
    pytest.fail("the tune never reached its fault")


def test_the_next_run_removes_a_killed_runs_leftovers_not_a_live_runs(tmp_path):
    faults = tmp_path / "faults"
    faults.mkdir()
    (faults / "sitecustomize.py").write_text(FAULTS)
    path = os.pathsep.join([str(faults), str(ROOT), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, capture_cache.ENV: "1", "PYTHONWARNINGS": "ignore", "PYTHONPATH": path}
    # the run killed at the search has a cache of its own: the other runs would remove its
    # temporary first (rightly: its writer is dead), before the next run could show it does
    cache, other_cache = tmp_path / "cache", tmp_path / "other-cache"
    outs = tmp_path / "outs"
    (outs / "existing").mkdir(parents=True)
    logs = {name: tmp_path / f"{name}.log" for name in ("search", "output", "live", "next")}
    # killed at the search, as its compile process renames a cubin into the cache; killed
    # renaming report.json into an existing directory; stopped renaming a new one into place
    search = start_tune(GOOD / "sum_small.py", outs / "search",
                        {**env, "CUDA_AGENT_CACHE": str(cache)}, logs["search"], r"\.cubin$")
    output = start_tune(GOOD / "relu_small.py", outs / "existing",
                        {**env, "CUDA_AGENT_CACHE": str(other_cache)}, logs["output"],
                        r"report\.json$")
    live = start_tune(GOOD / "relu_small.py", outs / "live",
                      {**env, "CUDA_AGENT_CACHE": str(other_cache)}, logs["live"], r"/live$",
                      "stop")
    try:
        for proc, name in ((search, "search"), (output, "output")):
            assert proc.wait(timeout=300) == -signal.SIGKILL, logs[name].read_text()[-2000:]
        wait_stopped(live, logs["live"])
        assert leftovers(cache, deep=True), "the kill at the search left no cache temporary"
        assert [n for n in leftovers(outs / "existing") if "report.json" in n]
        live_dirs = leftovers(outs)
        assert len(live_dirs) == 1  # the stopped run's temporary directory

        after = start_tune(GOOD / "relu_small.py", outs / "existing",
                           {**env, "CUDA_AGENT_CACHE": str(cache)}, logs["next"])
        assert after.wait(timeout=300) == 0, logs["next"].read_text()[-2000:]
        assert leftovers(cache, deep=True) == [] and leftovers(outs / "existing") == []
        assert leftovers(outs) == live_dirs, "the next run removed a live run's temporaries"
        assert (outs / "existing" / "report.json").exists()
    finally:
        live.send_signal(signal.SIGCONT)
    assert live.wait(timeout=300) == 0, logs["live"].read_text()[-2000:]
    assert sorted(p.name for p in (outs / "live").iterdir()) == ["kernel.cu", "model_new.py",
                                                                 "report.json"]
    assert leftovers(outs) == []


def _temp(folder: Path, pid: int, host: str = tempfiles.HOST, suffix: str = "") -> Path:
    path = folder / f"{tempfiles.PREFIX}{host}-{pid}-0123abcd{suffix}"
    path.write_text("partial")
    return path


def test_sweep_removes_only_temporaries_of_writers_that_are_gone(tmp_path):
    gone = subprocess.Popen(["true"])
    gone.wait()
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        dead = _temp(tmp_path, gone.pid, suffix=".report.json")
        dead_dir = tmp_path / f"{tempfiles.PREFIX}{tempfiles.HOST}-{gone.pid}-89abcdef"
        (dead_dir / "sub").mkdir(parents=True)
        alive = _temp(tmp_path, sleeper.pid, suffix=".report.json")
        mine = _temp(tmp_path, os.getpid())
        elsewhere = _temp(tmp_path, gone.pid, host="ffffff")  # a host this one cannot ask
        stale = _temp(tmp_path, sleeper.pid, host="ffffff")
        day_ago = time.time() - tempfiles.STALE_S - 60
        os.utime(stale, (day_ago, day_ago))
        users = [tmp_path / ".report.json.bak", tmp_path / f"{tempfiles.PREFIX}notes"]
        for path in users:
            path.write_text("the user's")
            os.utime(path, (day_ago, day_ago))
        removed = tempfiles.sweep(tmp_path)
        assert sorted(removed) == sorted([dead, dead_dir, stale])
        assert all(p.exists() for p in [alive, mine, elsewhere, *users])
    finally:
        sleeper.kill()
        sleeper.wait()


def test_the_capture_cache_and_checkpoints_remove_their_leftovers(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_AGENT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(tempfiles, "_swept", set())
    gone = subprocess.Popen(["true"])
    gone.wait()
    folder = capture_cache.cache_dir()
    folder.mkdir(parents=True)
    left = _temp(folder, gone.pid)
    assert capture_cache.load("0" * 64) is None and not left.exists()
    policies = tmp_path / "policies"
    policies.mkdir()
    left = _temp(policies, gone.pid, suffix=".pt")
    checkpoint.save(policies / "policy.pt", MultiAgentPolicy(), {})
    assert not left.exists() and leftovers(policies) == []


@pytest.fixture(params=[0o022, 0o077], ids=["umask022", "umask077"])
def umask(request):
    old = os.umask(request.param)
    yield request.param
    os.umask(old)


def test_files_get_the_users_umask(umask, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("CUDA_AGENT_CACHE", str(cache))
    monkeypatch.setenv(capture_cache.ENV, "1")
    new, existing = tmp_path / "new", tmp_path / "existing"
    cuda_agent.tune(GOOD / "relu_small.py", out=new, device="sim", budget=2, batch=2,
                    strategy="random", store=":memory:", baselines=False, workers=1,
                    compile_timeout_s=None, notify=lambda s: None)
    existing.mkdir()  # (into an existing directory, files are replaced one by one)
    write_files(existing, {p.name: p.read_text() for p in new.iterdir()})
    checkpoint.save(tmp_path / "policies" / "policy.pt", MultiAgentPolicy(), {})
    files = [new / "model_new.py", new / "report.json", new / "kernel.cu",
             existing / "model_new.py", existing / "report.json", existing / "kernel.cu",
             tmp_path / "policies" / "policy.pt", *capture_cache.cache_dir().glob("*.json"),
             *(cache / "build").rglob("*.cubin"), *(cache / "build").rglob("*.json")]
    assert len(files) > 9
    modes = {str(p.relative_to(tmp_path)): oct(stat.S_IMODE(p.stat().st_mode)) for p in files}
    assert modes == {k: oct(0o666 & ~umask) for k in modes}
    assert oct(stat.S_IMODE(new.stat().st_mode)) == oct(0o777 & ~umask)
