"""The SQLite store: round trips, reuse rules, failure grouping, WAL and a concurrent reader;
schema versions (an older store opened, a newer one refused), a fault moving the store to memory
with one line, and `health` (doctor's check). End-to-end faults: tests/faults/."""

from __future__ import annotations

import json
import math
import sqlite3
import threading

import pytest

import cuda_agent.store as store_module
from cuda_agent.errors import StoreError
from cuda_agent.runner.records import Measurement
from cuda_agent.store import Store, health
from cuda_agent.store_faults import bounded_check

GPU, TC = "NVIDIA H200", "nvrtc-12.4"


def ok(key: str, time_ms: float = 1.0, device: str = "cuda") -> Measurement:
    return Measurement(key, device, True, time_ms=time_ms, spread_ms=0.01, samples=20,
                       verified=True, counters={"dram_bytes": 1024, "occupancy": 0.5},
                       max_rel_err=1e-6, wall_s=0.3)


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "sub" / "store.db") as s:
        yield s


@pytest.fixture
def pid(store):
    return store.problem_id("softmax", "src1", "fp1", "row")


def test_problem_id_upserts(store, pid):
    assert store.problem_id("softmax_renamed", "src1", "fp1", "row") == pid
    assert store.problem_id("softmax", "src1", "fp2", "row") != pid



def test_problems_name_what_measurements_point_to(store, pid):
    """The problems table as the scripts read it (benchmarks/counters_gpu.py names each
    measurement's problem): the latest name a problem was recorded under, oldest first."""
    other = store.problem_id("gemm", "src2", "fp2", "gemm")
    store.problem_id("softmax_renamed", "src1", "fp1", "row")
    store.record(other, "k1", "t", {}, ok("k1"), GPU, TC)
    rows = store.problems()
    assert [(r["id"], r["name"], r["family"]) for r in rows] == [
        (pid, "softmax_renamed", "row"), (other, "gemm", "gemm")]
    assert {m["problem_id"] for m in store.measurements()} == {other}


def test_round_trip(store, pid):
    m = ok("k1", 2.5)
    m.counters["ratio"] = math.inf
    m.counters["bad"] = math.nan
    m.counters["nested"] = [-math.inf, 1.0]
    cfg = {"memory.vec": 4, "config.block": 256, "reduction.tree": "-"}
    store.record(pid, "k1", "row", cfg, m, GPU, TC, strategy="random",
                 build={"registers": 32}, agents={"memory.vec": "memory"})
    got = store.lookup("k1", "cuda", GPU, TC)
    assert got is not None and got.reused
    assert (got.ok, got.time_ms, got.spread_ms, got.samples, got.verified, got.simulated) == \
        (True, 2.5, 0.01, 20, True, False)
    assert got.counters["dram_bytes"] == 1024 and got.counters["ratio"] == math.inf
    assert math.isnan(got.counters["bad"]) and got.counters["nested"] == [-math.inf, 1.0]
    [row] = store.measurements(pid)
    assert row["config"] == cfg and row["template"] == "row" and row["strategy"] == "random"
    assert row["build"] == {"registers": 32} and row["agents"] == {"memory.vec": "memory"}
    assert row["created_at"].endswith("+00:00")
    # strict JSON on disk: no bare NaN/Infinity tokens another tool would choke on
    raw = store._db.execute("SELECT counters FROM measurements").fetchone()[0]
    assert "NaN" in raw and '"NaN"' in raw and ": NaN" not in raw


def test_unverified_is_stored_as_null(store, pid):
    m = Measurement("k", "sim", True, time_ms=1.0, simulated=True)
    store.record(pid, "k", "map", {}, m, GPU, TC)
    assert store.lookup("k", "sim", GPU, TC).verified is None
    assert store.measurements()[0]["verified"] is None


def test_lookup_respects_device_gpu_toolchain(store, pid):
    store.record(pid, "k1", "row", {}, ok("k1"), GPU, TC)
    assert store.lookup("k1", "cuda", GPU, TC) is not None
    assert store.lookup("k1", "sim", GPU, TC) is None
    assert store.lookup("k1", "cuda", "NVIDIA A100", TC) is None
    assert store.lookup("k1", "cuda", GPU, "nvrtc-12.8") is None
    assert store.lookup("other", "cuda", GPU, TC) is None


def test_lookup_returns_newest(store, pid):
    store.record(pid, "k1", "row", {}, ok("k1", 3.0), GPU, TC)
    store.record(pid, "k1", "row", {}, ok("k1", 2.0), GPU, TC)
    assert store.lookup("k1", "cuda", GPU, TC).time_ms == 2.0


@pytest.mark.parametrize("kind", ["crash", "timeout", "slow", "compile_timeout",
                                  "compile_crash"])
def test_transient_failures_not_reused(store, pid, kind):
    store.record(pid, "k1", "row", {}, Measurement.failure("k1", "cuda", kind, "died"), GPU, TC)
    assert store.lookup("k1", "cuda", GPU, TC) is None
    # an earlier good measurement still stands behind a later transient failure
    store.record(pid, "k2", "row", {}, ok("k2", 1.5), GPU, TC)
    store.record(pid, "k2", "row", {}, Measurement.failure("k2", "cuda", kind, "died"), GPU, TC)
    assert store.lookup("k2", "cuda", GPU, TC).time_ms == 1.5


def test_compile_failure_reused(store, pid):
    store.record(pid, "k1", "row", {}, Measurement.failure("k1", "cuda", "compile", "error: x"),
                 GPU, TC)
    got = store.lookup("k1", "cuda", GPU, TC)
    assert got is not None and got.reused and not got.ok
    assert (got.error_kind, got.error_msg) == ("compile", "error: x")


def test_an_earlier_versions_host_failure_is_not_reused(store, pid):
    """Stores written while a compile pool could not start hold that as every candidate's
    "compile" failure; such rows are measured anew, not served (issue 35)."""
    crashed = "the compiler's process died compiling this source (a crash, or killed for memory)"
    store.record(pid, "k1", "row", {}, Measurement.failure("k1", "cuda", "compile", crashed),
                 GPU, TC)
    assert store.lookup("k1", "cuda", GPU, TC) is None


def test_reused_not_reinserted(store, pid):
    store.record(pid, "k1", "row", {}, ok("k1"), GPU, TC)
    again = store.lookup("k1", "cuda", GPU, TC)
    store.record(pid, "k1", "row", {}, again, GPU, TC)
    assert len(store.measurements()) == 1


def test_best(store, pid):
    store.record(pid, "a", "row", {}, ok("a", 2.0), GPU, TC)
    store.record(pid, "b", "row", {}, ok("b", 1.0), GPU, TC)
    fast_unverified = Measurement("c", "cuda", True, time_ms=0.1, verified=None)
    store.record(pid, "c", "row", {}, fast_unverified, GPU, TC)
    store.record(pid, "d", "row", {}, Measurement.failure("d", "cuda", "wrong", "diff"), GPU, TC)
    assert store.best(pid, "cuda", GPU)["candidate"] == "b"
    assert store.best(pid, "cuda", "NVIDIA A100") is None
    store.record(pid, "s", "row", {}, Measurement("s", "sim", True, time_ms=0.5, simulated=True),
                 GPU, TC)
    assert store.best(pid, "sim", GPU)["candidate"] == "s"


def test_failures_and_groups(store, pid):
    # memory.vec=4 always fails to compile (a template bug); block=1024 fails now and then
    n = 0
    for vec in (1, 2, 4):
        for block in (128, 256, 1024):
            n += 1
            key = f"k{n}"
            cfg = {"memory.vec": vec, "config.block": block, "reduction.tree": "-"}
            if vec == 4:
                m = Measurement.failure(key, "cuda", "compile", "bad vec")
            elif block == 1024 and vec == 1:
                m = Measurement.failure(key, "cuda", "resources", "too many regs")
            else:
                m = ok(key)
            store.record(pid, key, "row", cfg, m, GPU, TC, agents={"memory.vec": "memory"})
    failures = store.failures(pid)
    assert len(failures) == 4 and all(not f["ok"] for f in failures)
    assert {f["template"] for f in failures} == {"row"}
    assert sorted(f["config"]["memory.vec"] for f in failures) == [1, 4, 4, 4]
    groups = store.failure_groups(pid)
    top = groups[0]
    assert (top["template"], top["error_kind"], top["slot"], top["value"]) == \
        ("row", "compile", "memory.vec", 4)
    assert (top["count"], top["total"], top["share"], top["agent"]) == (3, 3, 1.0, "memory")
    assert all(g["slot"] != "reduction.tree" for g in groups)  # absent slots are not decisions
    res = [g for g in groups if g["error_kind"] == "resources" and g["slot"] == "config.block"]
    assert (res[0]["value"], res[0]["count"]) == (1024, 1)
    assert res[0]["share"] == pytest.approx(1 / 3)
    assert [g["share"] for g in groups] == sorted((g["share"] for g in groups), reverse=True)
    assert store.failure_groups(store.problem_id("other", "s", "f", "map")) == []


def test_wal_mode(tmp_path):
    path = tmp_path / "s.db"
    with Store(path) as s:
        assert s._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert s._db.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
        assert [tuple(r) for r in s._db.execute("SELECT version FROM schema_version")] == [(1,)]
    # reopening keeps one version row
    with Store(path) as s:
        assert s._db.execute("SELECT count(*) FROM schema_version").fetchone()[0] == 1


def test_memory_store():
    with Store(":memory:") as s:
        pid = s.problem_id("p", "h", "f", "map")
        s.record(pid, "k", "map", {}, ok("k"), GPU, TC)
        assert s.lookup("k", "cuda", GPU, TC) is not None


def test_two_stores_one_file(tmp_path):
    path = tmp_path / "shared.db"
    writer, reader = Store(path), Store(path)
    try:
        pid = writer.problem_id("p", "h", "f", "map")
        errors: list[BaseException] = []
        counts: list[int] = []

        def read() -> None:
            try:
                for _ in range(200):
                    counts.append(len(reader.measurements(pid)))
            except BaseException as e:  # surfaced below
                errors.append(e)

        t = threading.Thread(target=read)
        t.start()
        for i in range(200):
            writer.record(pid, f"k{i}", "map", {"memory.vec": 1}, ok(f"k{i}"), GPU, TC)
        t.join()
        assert not errors
        assert counts == sorted(counts)  # a reader only ever sees whole, committed records
        assert len(reader.measurements(pid)) == 200
        assert reader.lookup("k199", "cuda", GPU, TC) is not None
    finally:
        writer.close()
        reader.close()


def test_record_is_one_transaction(store, pid):
    # a measurement that cannot be written leaves no orphan candidate behind
    bad = ok("k1")
    bad.samples = None  # NOT NULL column
    with pytest.raises(sqlite3.IntegrityError):
        store.record(pid, "k1", "row", {}, bad, GPU, TC)
    assert store._db.execute("SELECT count(*) FROM candidates").fetchone()[0] == 0
    store.record(pid, "k1", "row", {}, ok("k1"), GPU, TC)  # the store is still usable
    assert len(store.measurements()) == 1


# -- schema versions ---------------------------------------------------------------------------

# the schema as the first release (schema version 1) wrote it, frozen here: the current code must
# keep opening such a store whatever its own _SCHEMA becomes
V1_SCHEMA = """
CREATE TABLE schema_version (version INTEGER NOT NULL);
CREATE TABLE problems (id INTEGER PRIMARY KEY, name TEXT NOT NULL, source_hash TEXT NOT NULL,
    fingerprint TEXT NOT NULL, family TEXT NOT NULL, created_at TEXT NOT NULL,
    UNIQUE (source_hash, fingerprint));
CREATE TABLE candidates (key TEXT PRIMARY KEY, problem_id INTEGER NOT NULL REFERENCES problems(id),
    template TEXT NOT NULL, config TEXT NOT NULL, created_at TEXT NOT NULL);
CREATE TABLE measurements (id INTEGER PRIMARY KEY, candidate TEXT NOT NULL REFERENCES
    candidates(key), device TEXT NOT NULL, gpu TEXT NOT NULL, toolchain TEXT NOT NULL,
    strategy TEXT, ok INTEGER NOT NULL, time_ms REAL, spread_ms REAL, samples INTEGER NOT NULL,
    verified INTEGER, simulated INTEGER NOT NULL, error_kind TEXT, error_msg TEXT,
    counters TEXT NOT NULL, max_rel_err REAL, wall_s REAL NOT NULL, build TEXT, agents TEXT,
    created_at TEXT NOT NULL);
CREATE INDEX measurements_lookup ON measurements (candidate, device, gpu, toolchain);
CREATE INDEX candidates_problem ON candidates (problem_id);
INSERT INTO schema_version VALUES (1);
INSERT INTO problems VALUES (1, 'softmax', 'src1', 'fp1', 'row', '2026-01-01T00:00:00+00:00');
INSERT INTO candidates VALUES ('k1', 1, 'row', '{"memory.vec": 4}', '2026-01-01T00:00:00+00:00');
INSERT INTO measurements (candidate, device, gpu, toolchain, ok, time_ms, samples, simulated,
    counters, wall_s, created_at) VALUES ('k1', 'cuda', 'NVIDIA H200', 'nvrtc-12.4', 1, 2.5, 20,
    0, '{"dram_bytes": 1024}', 0.3, '2026-01-01T00:00:00+00:00');
"""


def v1_store(path) -> None:
    db = sqlite3.connect(path)
    db.executescript(V1_SCHEMA)
    db.close()


def version_of(path) -> int:
    db = sqlite3.connect(path)
    try:
        return db.execute("SELECT version FROM schema_version").fetchone()[0]
    finally:
        db.close()


def test_a_store_of_the_first_schema_built_by_hand_opens(tmp_path):
    path = tmp_path / "v1.db"
    v1_store(path)
    with Store(path, strict=True) as s:
        hit = s.lookup("k1", "cuda", GPU, TC)
        assert hit is not None and hit.time_ms == 2.5 and hit.counters == {"dram_bytes": 1024}
        assert s.problem_id("softmax", "src1", "fp1", "row") == 1
        s.record(1, "k2", "row", {"memory.vec": 2}, ok("k2", 1.5), GPU, TC)
        assert [m["candidate"] for m in s.measurements(1)] == ["k1", "k2"]
        assert s.fault is None
    assert version_of(path) == store_module.SCHEMA_VERSION


def test_an_older_store_is_migrated_step_by_step(tmp_path, monkeypatch):
    # a made-up release with schema version 3: its two steps run in order on a version-1 store,
    # in the transaction that opens it, and the data stays
    monkeypatch.setattr(store_module, "SCHEMA_VERSION", 3)
    monkeypatch.setattr(store_module, "_MIGRATIONS", {
        1: ("ALTER TABLE measurements ADD COLUMN note TEXT",),
        2: ("UPDATE measurements SET note = 'from v' || (SELECT version FROM schema_version)",)})
    path = tmp_path / "v1.db"
    v1_store(path)
    with Store(path, strict=True) as s:
        assert s.lookup("k1", "cuda", GPU, TC).time_ms == 2.5
        assert s._db.execute("SELECT note FROM measurements").fetchone()[0] == "from v1"
    assert version_of(path) == 3
    with Store(path, strict=True):  # opened again: nothing more to run
        pass
    assert version_of(path) == 3


def test_a_store_with_a_gap_in_its_migrations_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(store_module, "SCHEMA_VERSION", 3)
    monkeypatch.setattr(store_module, "_MIGRATIONS", {2: ("SELECT 1",)})
    path = tmp_path / "v1.db"
    v1_store(path)
    with pytest.raises(StoreError, match="cannot migrate"):
        Store(path, strict=True)
    assert version_of(path) == 1  # nothing half done


def test_a_newer_store_is_refused_in_one_line_and_left_untouched(tmp_path, capsys):
    path = tmp_path / "newer.db"
    with Store(path) as s:
        s.problem_id("p", "h", "f", "map")
    db = sqlite3.connect(path)
    db.execute("UPDATE schema_version SET version = 7")
    db.commit()
    db.close()
    before = path.read_bytes()
    with pytest.raises(StoreError) as exc:
        Store(path, strict=True)
    msg = str(exc.value)
    assert "\n" not in msg and str(path) in msg
    assert "version 7" in msg and "up to 1" in msg and "upgrade cuda-agent" in msg
    assert "--store" in msg
    # not strict (a tune): the one line, and the run's records in memory
    with Store(path) as s:
        pid = s.problem_id("p", "h", "f", "map")
        s.record(pid, "k", "map", {}, ok("k"), GPU, TC)
        assert s.lookup("k", "cuda", GPU, TC) is not None
        assert s.report()["written"] is False and "version 7" in s.report()["error"]
    err = [ln for ln in capsys.readouterr().err.splitlines() if str(path) in ln]
    assert len(err) == 1 and "version 7" in err[0]
    assert path.read_bytes() == before


# -- faults while running ------------------------------------------------------------------------

def test_a_full_store_is_told_once_and_the_records_go_on_in_memory(tmp_path, capsys):
    path = tmp_path / "full.db"
    s = Store(path)
    try:
        pid = s.problem_id("softmax", "src1", "fp1", "row")
        s.record(pid, "k0", "row", {}, ok("k0"), GPU, TC)
        pages = s._db.execute("PRAGMA page_count").fetchone()[0]
        s._db.execute(f"PRAGMA max_page_count = {pages}")  # SQLite's own "disk is full"
        for i in range(1, 40):
            s.record(pid, f"k{i}", "row", {"memory.vec": i}, ok(f"k{i}", float(i)), GPU, TC)
        assert s.fault is not None and "full" in s.fault
        assert s.lookup("k39", "cuda", GPU, TC).time_ms == 39.0  # served from memory
        report = s.report()
        assert report["written"] is False and 0 < report["kept_in_memory"] < 40
    finally:
        s.close()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert str(path) in err[0] and "free space" in err[0] and "--store" in err[0]
    with Store(path, strict=True) as again:  # what reached the file is whole
        assert again.lookup("k0", "cuda", GPU, TC) is not None


def test_a_strict_store_raises_a_one_line_store_error(tmp_path):
    path = tmp_path / "garbled.db"
    path.write_bytes(b"this is no database" * 300)
    with pytest.raises(StoreError) as exc:
        Store(path, strict=True)
    assert str(path) in str(exc.value) and "doctor --store" in str(exc.value)
    assert "\n" not in str(exc.value)


# -- health: doctor's full check -------------------------------------------------------------------

def test_health_of_a_sound_store(tmp_path):
    path = tmp_path / "sound.db"
    with Store(path) as s:
        pid = s.problem_id("p", "h", "f", "map")
        s.record(pid, "k", "map", {}, ok("k"), GPU, TC)
    h = health(path)
    assert h.exists and h.problems == [] and h.version == 1 and h.measurements == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sound.db"]  # no -wal, -shm left
    assert not health(tmp_path / "none.db").exists


def test_health_lists_each_problem_of_a_garbled_store(tmp_path):
    path = tmp_path / "garbled.db"
    with Store(path) as s:
        pid = s.problem_id("p", "h", "f", "map")
        for i in range(60):
            s.record(pid, f"k{i}", "map", {"memory.vec": i}, ok(f"k{i}"), GPU, TC)
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle:middle + 2048] = bytes((i * 97 + 13) % 256 for i in range(2048))
    path.write_bytes(bytes(data))
    h = health(path)
    assert h.problems, "the garbled pages went unnoticed"
    assert all("\n" not in p for p in h.problems)


@pytest.mark.slow
def test_opening_a_store_of_100k_measurements_is_bounded(tmp_path):
    # a store of realistic size (100k measurements of the size a tune writes, 150+ MB): the
    # opening check stops at QUICK_CHECK_S, so a tune's first measurement waits at most that
    # (measured on a 2-core machine: 0.14 s with the file cached, 1.0 s cold)
    import time

    path = tmp_path / "big.db"
    counters = json.dumps({f"metric_{i}": i / 7 for i in range(16)})
    config = json.dumps({f"agent.slot_{i}": i for i in range(9)})
    with Store(path) as s:
        pid = s.problem_id("p", "h", "f", "row")
        with s._write():
            s._db.executemany(
                "INSERT INTO candidates VALUES (?, ?, 'row', ?, 'now')",
                ((f"{i:064x}", pid, config) for i in range(100_000)))
            s._db.executemany(
                "INSERT INTO measurements (candidate, device, gpu, toolchain, strategy, ok, "
                "time_ms, samples, simulated, counters, wall_s, build, agents, created_at) "
                "VALUES (?, 'cuda', ?, ?, 'marl', 1, ?, 20, 0, ?, 0.3, ?, ?, 'now')",
                ((f"{i:064x}", GPU, TC, i / 1e5, counters, counters, config)
                 for i in range(100_000)))
    assert path.stat().st_size > 100e6
    t = time.perf_counter()
    with Store(path) as s:
        assert s.fault is None
        assert s.lookup(f"{99_999:064x}", "cuda", GPU, TC) is not None
    assert time.perf_counter() - t < store_module.QUICK_CHECK_S + 1.0
    db = sqlite3.connect(path, check_same_thread=False)
    try:
        t = time.perf_counter()
        assert bounded_check(db, 60.0) is None  # the whole check: sound
        whole = time.perf_counter() - t
        t = time.perf_counter()
        assert bounded_check(db, whole / 10) is None  # stopped, not a fault
        assert time.perf_counter() - t < whole / 2
    finally:
        db.close()
