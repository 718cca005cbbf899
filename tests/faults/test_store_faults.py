"""Faults of the measurement store, injected for real, through the CLI and the Python API: a full
disk (SQLite's own limit on the file, and a full tmpfs where this user may mount one), a read-only
store file and folder, garbled pages, a garbled row met mid-search, a store of a newer release;
six tunes sharing one store. Every faulty run ends as a healthy one would (exit 0, the best kernel
in --out) with one line on stderr naming the store, and its report says the store was not
written.

The subprocesses start together (each CLI start costs seconds of imports) in one fixture."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from helpers import GOOD
import cuda_agent

# one worker runs the module's tests (`--dist loadgroup`, pyproject), so its module fixtures
# (`base_store`, `runs`: CLI processes) are built once, not once per worker
pytestmark = pytest.mark.xdist_group("test_store_faults")

OUT_FILES = {"model_new.py", "kernel.cu", "report.json"}
SHARED = [GOOD / "relu_small.py", GOOD / "softmax_small.py", GOOD / "sum_small.py"]
SHARED_BUDGET = 4

# Runs the CLI after setting a fault up (argv: [--max-pages STORE N] [--copy SRC DST]
# [--fill DIR KEEP] -- ARGS): SQLite's max_page_count on the store's connections is SQLite's own
# "database or disk is full" at the file's present size; --fill fills the file system under DIR
# but KEEP bytes (after --copy put the store there).
LAUNCH = r"""
import os, sqlite3, sys
args = sys.argv[1:]
while args[0] != "--":
    if args[0] == "--max-pages":
        store, pages = args[1], int(args[2])
        connect = sqlite3.connect
        def limited(database, *a, **kw):
            db = connect(database, *a, **kw)
            if str(database) == store:
                db.execute(f"PRAGMA max_page_count = {pages}")
            return db
        sqlite3.connect = limited
    elif args[0] == "--copy":
        import shutil
        shutil.copy(args[1], args[2])
    elif args[0] == "--fill":
        st = os.statvfs(args[1])
        with open(os.path.join(args[1], "filler"), "wb") as f:
            f.write(b"\0" * max(0, st.f_bavail * st.f_frsize - int(args[2])))
    args = args[3:]
sys.argv = ["cuda-agent", *args[1:]]
from cuda_agent.cli import main
main()
"""


STRATEGY = "random"  # the same candidates in this process and in the CLI's, for a seed
BUDGET = 8


def tune_args(problem: Path, store: Path, out: Path, budget: int = BUDGET) -> list[str]:
    return ["tune", str(problem), "--device", "sim", "--budget", str(budget), "--strategy",
            STRATEGY, "--no-baselines", "--store", str(store), "--out", str(out)]


def api_tune(problem: Path, store: Path | str, out: Path | None = None,
             budget: int = BUDGET) -> object:
    """`cuda_agent.tune` as the CLI runs it, but compiling in this process (no compile pool to
    start: one worker, no timeouts)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return cuda_agent.tune(problem, out=out, device="sim", budget=budget, strategy=STRATEGY,
                               baselines=False, store=str(store), workers=1,
                               compile_timeout_s=None, time_limit_s=None)


def spawn(cli_args: list[str], fault: list[str] = (), prefix: list[str] = ()
          ) -> subprocess.Popen:
    return subprocess.Popen([*prefix, sys.executable, "-c", LAUNCH, *fault, "--", *cli_args],
                            env={**os.environ, "PYTHONWARNINGS": "ignore"}, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def can_mount_tmpfs(where: Path) -> bool:
    """Whether this user may mount a tmpfs in a user and mount namespace of its own."""
    if shutil.which("unshare") is None:
        return False
    where.mkdir(parents=True, exist_ok=True)
    try:
        return subprocess.run(["unshare", "-rm", "sh", "-c",
                               'mount -t tmpfs -o size=64k tmpfs "$0"', str(where)],
                              capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def unprivileged(scratch: Path) -> list[str] | None:
    """The prefix that runs a command unable to write a read-only file or into a read-only
    folder: none for a user, `unshare --user` for root (who writes them: in a user namespace of
    its own, with no user mapped, root keeps its files' owner rights but loses the power to
    override permissions); None where root cannot have that."""
    if os.geteuid() != 0:
        return []
    if shutil.which("unshare") is None:
        return None
    probe = scratch / "read-only-probe"
    probe.write_text("")
    probe.chmod(0o444)
    try:
        ran = subprocess.run(["unshare", "--user", "sh", "-c",
                              'if [ -w "$0" ]; then exit 10; else exit 11; fi', str(probe)],
                             capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return ["unshare", "--user"] if ran.returncode == 11 else None


def store_lines(stderr: str, store: Path) -> list[str]:
    return [ln for ln in stderr.splitlines() if str(store) in ln]


def assert_went_on_without(store: Path, out: Path, rc: int, stderr: str, *words: str) -> dict:
    """A run whose store failed: exit 0, the best kernel in `out`, one line naming the store
    (with `words`), and a report that says the store was not written."""
    assert rc == 0, stderr[-3000:]
    assert "Traceback" not in stderr, stderr[-3000:]
    assert OUT_FILES <= set(os.listdir(out))
    lines = store_lines(stderr, store)
    assert len(lines) == 1, stderr
    for word in words:
        assert word in lines[0], (word, lines[0])
    report = json.loads((out / "report.json").read_text())
    assert report["best"] is not None
    assert report["store"]["written"] is False and report["store"]["error"]
    assert report["store"]["kept_in_memory"] > 0
    return report


def integrity(path: Path) -> list[str]:
    db = sqlite3.connect(path)
    try:
        return [r[0] for r in db.execute("PRAGMA integrity_check")]
    finally:
        db.close()


@pytest.fixture(scope="module")
def base_store(tmp_path_factory) -> Path:
    """A real store, written by a short sim tune of relu_small; the compile cache holds every
    candidate the CLI runs below build (so that none of them starts a compile pool)."""
    root = tmp_path_factory.mktemp("base-store")
    api_tune(GOOD / "relu_small.py", root / "store.db", root / "out")
    assert not (root / "store.db-wal").exists()  # closed and checkpointed: one whole file
    for problem in SHARED:
        api_tune(problem, ":memory:", budget=SHARED_BUDGET)
    api_tune(GOOD / "softmax_small.py", ":memory:")
    return root / "store.db"


@pytest.fixture(scope="module")
def runs(base_store, tmp_path_factory):
    """The CLI runs that need a process of their own (a fault set up in it, a mount namespace,
    six tunes at once), started together; {name: (store, out, exit status, stderr)}."""
    root = tmp_path_factory.mktemp("store-faults")
    started: dict[str, tuple[Path, Path, subprocess.Popen]] = {}
    try:
        yield from _run_all(root, base_store, started)
    finally:
        for _, _, proc in started.values():
            if proc.poll() is None:
                proc.kill()
        for folder in root.rglob("*"):  # pytest must be able to clean up
            if folder.is_dir():
                folder.chmod(0o755)


def _run_all(root: Path, base_store: Path, started: dict):
    softmax = GOOD / "softmax_small.py"  # a problem the base store has not seen: rows to add

    # a full disk: SQLite's limit on the file at its present size
    full = root / "full" / "store.db"
    full.parent.mkdir()
    shutil.copy(base_store, full)
    db = sqlite3.connect(full)
    pages = db.execute("PRAGMA page_count").fetchone()[0]
    db.close()
    started["full"] = (full, root / "full" / "out", spawn(
        tune_args(softmax, full, root / "full" / "out"), ["--max-pages", str(full), str(pages)]))

    # a full disk for real: a small tmpfs, filled but for room the store's shared memory takes
    mnt = root / "tmpfs" / "mnt"
    if can_mount_tmpfs(mnt):
        store = mnt / "store.db"
        started["tmpfs"] = (store, root / "tmpfs" / "out", spawn(
            tune_args(softmax, store, root / "tmpfs" / "out"),
            ["--copy", str(base_store), str(store), "--fill", str(mnt), "40960"],
            prefix=["unshare", "-rm", "sh", "-c", 'mount -t tmpfs -o size=1m tmpfs "$0" && '
                    'exec "$@"', str(mnt)]))

    # six tunes at once sharing one store, which none of them has made yet
    shared_store = root / "shared" / "store.db"
    for i in range(6):
        out = root / "shared" / f"out{i}"
        started[f"shared{i}"] = (shared_store, out, spawn(
            tune_args(SHARED[i % 3], shared_store, out, budget=SHARED_BUDGET)))

    done = {}
    for name, (store, out, proc) in started.items():
        _, err = proc.communicate(timeout=600)
        done[name] = (store, out, proc.returncode, err)
    yield done


def test_a_full_disk_does_not_cost_the_search(runs):
    store, out, rc, err = runs["full"]
    report = assert_went_on_without(store, out, rc, err, "disk is full", "free space",
                                    "--store")
    assert "recording" in report["store"]["error"]  # met mid-run, not at the start
    assert integrity(store) == ["ok"]  # what reached the file is whole


def test_a_full_tmpfs_does_not_cost_the_search(runs):
    if "tmpfs" not in runs:
        pytest.skip("this user may not mount a tmpfs (unshare -rm)")
    store, out, rc, err = runs["tmpfs"]
    report = assert_went_on_without(store, out, rc, err, "--store")
    # SQLite says "full" where a write came up short, "I/O error" where it failed outright
    assert "full" in report["store"]["error"] or "I/O" in report["store"]["error"]


def test_six_tunes_share_one_store(runs):
    shared = [runs[f"shared{i}"] for i in range(6)]
    for store, out, rc, err in shared:
        assert rc == 0, err[-3000:]
        assert not store_lines(err, store), err
        assert json.loads((out / "report.json").read_text())["store"]["written"] is True
    store = shared[0][0]
    assert integrity(store) == ["ok"]
    db = sqlite3.connect(store)
    try:
        assert db.execute("SELECT count(*) FROM problems").fetchone()[0] == 3
        assert db.execute("SELECT count(*) FROM schema_version").fetchone()[0] == 1
    finally:
        db.close()


# -- through the Python API (in this process: no imports to wait for) ----------------------------

def tune_here(problem: Path, store: Path, out: Path, capsys) -> tuple[object, str]:
    """`api_tune` and what it said on stderr."""
    capsys.readouterr()
    result = api_tune(problem, store, out)
    return result, capsys.readouterr().err


def test_garbled_pages_are_found_when_the_store_is_opened(base_store, tmp_path, capsys):
    store = garbled_copy(base_store, tmp_path)
    out = tmp_path / "out"
    _, err = tune_here(GOOD / "softmax_small.py", store, out, capsys)
    report = assert_went_on_without(store, out, 0, err, "corrupt", "move it away",
                                    "doctor --store")
    # by the quick check at the start, not by the measurement that meets the page
    assert "opening it failed" in report["store"]["error"]


def test_a_garbled_row_met_mid_search_does_not_cost_it(base_store, tmp_path, capsys):
    # bytes garbled inside stored measurements: the pages stay sound (the opening check passes),
    # the rows do not decode when the search looks its candidates up
    store = tmp_path / "store.db"
    shutil.copy(base_store, store)
    data = store.read_bytes()
    assert b'{"achieved_occupancy"' in data
    store.write_bytes(data.replace(b'{"achieved_occupancy"', b'{#achieved_occupancy"'))
    out = tmp_path / "out"
    result, err = tune_here(GOOD / "relu_small.py", store, out, capsys)  # the base's problem
    report = assert_went_on_without(store, out, 0, err, "corrupt")
    assert "reading it failed" in report["store"]["error"]
    assert len(result.trials) == BUDGET


def test_a_store_of_a_newer_release_is_refused_in_one_line(base_store, tmp_path, capsys):
    store = tmp_path / "store.db"
    shutil.copy(base_store, store)
    db = sqlite3.connect(store)
    db.execute("UPDATE schema_version SET version = 99")
    db.commit()
    db.close()
    before = store.read_bytes()
    out = tmp_path / "out"
    _, err = tune_here(GOOD / "softmax_small.py", store, out, capsys)
    assert_went_on_without(store, out, 0, err, "version 99", "up to 1", "upgrade cuda-agent")
    assert store.read_bytes() == before  # a newer release's store is not touched


# -- what this user may not write --------------------------------------------------------------

def tune_unprivileged(store: Path, out: Path, tmp_path: Path, capsys) -> tuple[int, str]:
    """A tune of softmax_small that cannot write what is read-only: in this process for a user,
    for root through the CLI without its powers (`unprivileged`); (exit status, stderr)."""
    prefix = unprivileged(tmp_path)
    if prefix is None:
        pytest.skip("root, and no user namespace to run without root's powers")
    if not prefix:
        return 0, tune_here(GOOD / "softmax_small.py", store, out, capsys)[1]
    proc = spawn(tune_args(GOOD / "softmax_small.py", store, out), prefix=prefix)
    _, err = proc.communicate(timeout=600)
    return proc.returncode, err


def test_a_read_only_store_file_does_not_cost_the_search(base_store, tmp_path, capsys):
    store = tmp_path / "ro" / "store.db"
    store.parent.mkdir()
    shutil.copy(base_store, store)
    store.chmod(0o444)
    out = tmp_path / "out"
    rc, err = tune_unprivileged(store, out, tmp_path, capsys)
    assert_went_on_without(store, out, rc, err, "cannot be written", "writable", "--store")


def test_a_store_in_a_read_only_folder_does_not_cost_the_search(base_store, tmp_path, capsys):
    store = tmp_path / "ro" / "store.db"
    store.parent.mkdir()
    shutil.copy(base_store, store)
    store.parent.chmod(0o555)
    out = tmp_path / "out"
    try:
        rc, err = tune_unprivileged(store, out, tmp_path, capsys)
    finally:
        store.parent.chmod(0o755)
    assert_went_on_without(store, out, rc, err, "cannot be written", "writable", "--store")


# -- doctor and failures on a damaged store ---------------------------------------------------------

def garbled_copy(base_store: Path, where: Path) -> Path:
    """A copy of the store with 2 KiB of garbage in the middle of the file."""
    store = where / "garbled.db"
    data = bytearray(base_store.read_bytes())
    middle = len(data) // 2
    data[middle:middle + 2048] = hashlib.sha256(b"garbage").digest() * 64
    store.write_bytes(bytes(data))
    return store


def cli(*args: str):
    from typer.testing import CliRunner

    from cuda_agent.cli import app
    return CliRunner().invoke(app, list(args))


def test_doctor_checks_the_store_whole(base_store, tmp_path, monkeypatch):
    import cuda_agent.cli

    # the table's rows unwrapped: rich fixes a console's width from $COLUMNS when it is made,
    # which an earlier test in this worker may have done
    monkeypatch.setenv("COLUMNS", "300")
    monkeypatch.setattr(cuda_agent.cli.console, "width", 300)
    sound = cli("doctor", "--store", str(base_store))
    assert sound.exit_code == 0, sound.output
    assert "integrity check passed" in sound.output and f"{BUDGET} measurements" in sound.output
    store = garbled_copy(base_store, tmp_path)
    damaged = cli("doctor", "--store", str(store))
    assert damaged.exit_code == 1, damaged.output
    problems = [ln for ln in damaged.output.splitlines() if ln.startswith(f"store {store}: ")]
    assert problems and all("page" in ln.lower() for ln in problems), damaged.output
    assert "move it away" in damaged.output


def test_failures_on_a_corrupt_store_is_one_line(base_store, tmp_path):
    store = garbled_copy(base_store, tmp_path)
    res = cli("failures", "--store", str(store))
    assert res.exit_code == 2
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and str(store) in lines[0] and "doctor --store" in lines[0], lines


def test_doctor_on_a_newer_release_s_store(base_store, tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "300")
    store = tmp_path / "store.db"
    shutil.copy(base_store, store)
    db = sqlite3.connect(store)
    db.execute("UPDATE schema_version SET version = 99")
    db.commit()
    db.close()
    res = cli("doctor", "--store", str(store))
    assert res.exit_code == 1
    assert "schema version 99" in res.output and "upgrade cuda-agent" in res.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["store.db"]  # nothing left behind


def _open_after(barrier, path: str, faults) -> None:
    from cuda_agent.store import Store
    barrier.wait()
    faults.put(Store(path).fault)


def test_processes_opening_one_new_store_together_all_write_it(tmp_path):
    """SQLite answers "database is locked" at once (no busy wait) to a connection asking for WAL
    while another one switches the journal mode: six processes opening a new store together
    lost about one try in thirteen to memory before opening waited for the switch."""
    import multiprocessing
    ctx = multiprocessing.get_context("fork")
    for attempt in range(25):
        path = str(tmp_path / f"store{attempt}.db")
        barrier, faults = ctx.Barrier(6), ctx.Queue()
        procs = [ctx.Process(target=_open_after, args=(barrier, path, faults)) for _ in range(6)]
        for proc in procs:
            proc.start()
        found = [faults.get(timeout=120) for _ in procs]
        for proc in procs:
            proc.join()
        assert found == [None] * 6, found
