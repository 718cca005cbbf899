"""The SQLite store: round trips, reuse rules, failure grouping, WAL and a concurrent reader."""

from __future__ import annotations

import math
import sqlite3
import threading

import pytest

from cuda_agent.run.records import Measurement
from cuda_agent.store import Store

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
