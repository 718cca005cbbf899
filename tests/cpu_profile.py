"""A pytest plugin that records each test's CPU seconds, for finding what makes the suite slow
on a machine shared with other work (where wall times say more about the neighbours' load than
about the test).

A test's CPU is its worker's own, that of the children it reaped (CLI subprocesses, compilers)
less what an earlier test already counted of them, and the growth of its live descendants'
(compile pools, device workers), read from /proc (Linux only); setup and teardown, module
fixtures included, count to the test that ran them. Not counted: a child killed and never
reaped, and a grandchild that ended during the test (its parent, still running, reaped it).

    PYTHONPATH=tests CUDA_AGENT_CPU_PROFILE=/tmp/prof .venv/bin/python -m pytest -q -n auto \\
        -p cpu_profile
    python tests/cpu_profile.py /tmp/prof          # the costliest tests and files

writes one JSON line per test, {"id", "cpu", "wall"}, to /tmp/prof.<worker>.
"""

from __future__ import annotations

import collections
import glob
import json
import os
import sys
import time

import pytest

_TICK = os.sysconf("SC_CLK_TCK")
_out = None


def _descendants_cpu() -> dict[int, tuple[int, float]]:
    """(parent pid, CPU seconds) of each live descendant of this process, by pid."""
    parent, cpu = {}, {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()  # the name may hold spaces
        parent[int(pid)] = int(fields[1])
        cpu[int(pid)] = (int(fields[11]) + int(fields[12])) / _TICK
    children = collections.defaultdict(list)
    for pid, ppid in parent.items():
        children[ppid].append(pid)
    found, stack = {}, list(children[os.getpid()])
    while stack:
        pid = stack.pop()
        found[pid] = (parent[pid], cpu[pid])
        stack.extend(children[pid])
    return found


def _snapshot() -> tuple[float, dict[int, tuple[int, float]]]:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system, _descendants_cpu()


def pytest_configure(config) -> None:
    global _out
    path = os.environ.get("CUDA_AGENT_CPU_PROFILE")
    if path:
        _out = open(f"{path}.{os.environ.get('PYTEST_XDIST_WORKER', 'main')}", "a")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    own0, live0 = _snapshot()
    wall0 = time.perf_counter()
    yield
    wall = time.perf_counter() - wall0
    own1, live1 = _snapshot()
    me = os.getpid()
    grown = sum(c - live0.get(pid, (0, 0.0))[1] for pid, (_, c) in live1.items())
    # a child alive at the start and reaped since: its whole life is in children_user now,
    # the part before this test was counted already
    counted = sum(c for pid, (ppid, c) in live0.items() if ppid == me and pid not in live1)
    cpu = own1 - own0 + grown - counted
    if _out is not None:
        _out.write(json.dumps({"id": item.nodeid, "cpu": round(cpu, 3),
                               "wall": round(wall, 3)}) + "\n")
        _out.flush()


def summary(prefix: str, top: int = 40) -> str:
    rows = [json.loads(line) for path in glob.glob(prefix + ".*") for line in open(path)]
    files: collections.Counter = collections.Counter()
    for r in rows:
        files[r["id"].split("::")[0]] += r["cpu"]
    lines = [f"{len(rows)} tests, {sum(r['cpu'] for r in rows):.0f} CPU s", "", "files:"]
    lines += [f"{cpu:8.1f}  {name}" for name, cpu in files.most_common(top)]
    lines += ["", "tests:"]
    lines += [f"{r['cpu']:8.2f}  {r['id']}" for r in sorted(rows, key=lambda r: -r["cpu"])[:top]]
    return "\n".join(lines)


if __name__ == "__main__":
    print(summary(sys.argv[1]))
