"""The archive: an SQLite file holding every problem, candidate and measurement ever made.

Failures are measurements with ``ok = 0`` and an ``error_kind`` (see `runner/records.py`), so one
table answers both "what is fastest" and "what keeps breaking". Reruns ask `lookup` before
measuring and reuse what was already measured on the same device kind, GPU and toolchain.

Concurrency: WAL journal, one writer. All writes of a `Store` go through its one connection
under a lock, each `record` in one transaction; any number of other `Store` objects (other
processes, the report) may read the same file meanwhile.

JSON columns (config, counters, build, agents) are strict JSON: non-finite floats are written
as the strings ``"Infinity"``, ``"-Infinity"`` and ``"NaN"`` and turned back into floats on
read (so a genuine string with one of those exact spellings would come back as a float).
REAL columns keep +-inf natively; SQLite stores a NaN there as NULL.

Faults: a store that cannot be used never costs a search. A full disk, a read-only file or
folder, a corrupt file (found by a time-bounded `PRAGMA quick_check` when it is opened, or by
any read or write later) or a store of a newer schema makes the `Store` say so in one line on
stderr, once, and keep the rest of the run's records in an in-memory database; `report()`
tells the run's report. `strict=True` (commands that only read the store) raises `StoreError`
instead. `health()` is `cuda-agent doctor`'s full check.

Versions: the `schema_version` table holds the schema a store was written with. An older
store is brought up to `SCHEMA_VERSION` by `_MIGRATIONS` when opened; a newer one is refused
(its release may have changed what the columns mean).
"""

from __future__ import annotations

import json
import math
import os
import random
import sqlite3
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, TypeVar

from cuda_agent.errors import StoreError
from .runner.records import Measurement
from .version import __version__
from cuda_agent.space.slots import ABSENT
from cuda_agent.store_faults import (bounded_check, describe_fault, first_line, is_store_fault,
                                     tell_once)

SCHEMA_VERSION = 1

# What takes a store of schema version v to v + 1: statements run in order, in the transaction
# that opens the store, for every version between the store's and SCHEMA_VERSION. Version 1 is
# the first schema, so there is nothing to run yet; a release that changes the schema bumps
# SCHEMA_VERSION and adds its step here (tests/test_store.py opens a store built by hand with
# the version-1 schema, and runs a made-up step through this path).
_MIGRATIONS: dict[int, tuple[str, ...]] = {}

# Seconds the opening check (`PRAGMA quick_check`) may take: it reads every page, about 0.25 s
# for a store of 100k measurements (160 MB) on a small machine, so a store up to some
# hundreds of MB is checked whole; a larger one is checked as far as this gets, and a fault
# further in is met by the read or write that hits it, which is handled the same way.
QUICK_CHECK_S = 1.0

# Failures that say something about the moment, not about the candidate alone, so they are never
# served from the store: a crash or a timeout (measuring again may well succeed), a compile that
# ran past its timeout or whose process died (the machine's load and the limit decide those), and
# a "slow" abandonment, which was decided against the best time of the search that measured it
# (another search, or `bench`'s next strategy sharing the store, has another best).
TRANSIENT_KINDS = ("crash", "timeout", "slow", "compile_timeout", "compile_crash",
                   "cache_damaged")

# Failures recorded by earlier versions as a candidate's "compile" failure when the machine had
# failed: a compile pool that could not start (a script without a main guard) left this message
# on every candidate. Never served again: the candidates are measured anew.
HOST_FAILURE_MESSAGES = (
    "the compiler's process died compiling this source (a crash, or killed for memory)",)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS problems (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    source_hash TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    family TEXT NOT NULL,
    created_at TEXT NOT NULL,
    UNIQUE (source_hash, fingerprint)
);
CREATE TABLE IF NOT EXISTS candidates (
    key TEXT PRIMARY KEY,
    problem_id INTEGER NOT NULL REFERENCES problems(id),
    template TEXT NOT NULL,
    config TEXT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS measurements (
    id INTEGER PRIMARY KEY,
    candidate TEXT NOT NULL REFERENCES candidates(key),
    device TEXT NOT NULL,
    gpu TEXT NOT NULL,
    toolchain TEXT NOT NULL,
    strategy TEXT,
    ok INTEGER NOT NULL,
    time_ms REAL,
    spread_ms REAL,
    samples INTEGER NOT NULL,
    verified INTEGER,
    simulated INTEGER NOT NULL,
    error_kind TEXT,
    error_msg TEXT,
    counters TEXT NOT NULL,
    max_rel_err REAL,
    wall_s REAL NOT NULL,
    build TEXT,
    agents TEXT,
    created_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS measurements_lookup
    ON measurements (candidate, device, gpu, toolchain);
CREATE INDEX IF NOT EXISTS candidates_problem ON candidates (problem_id);
"""

def default_store() -> str:
    """The store `cuda-agent` and `cuda_agent.tune()` share unless told otherwise:
    $CUDA_AGENT_HOME/store.sqlite, else ~/.cache/cuda-agent/store.sqlite (XDG_CACHE_HOME
    respected)."""
    root = os.environ.get("CUDA_AGENT_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "cuda-agent")
    return os.path.join(root, "store.sqlite")


_NONFINITE = {"Infinity": math.inf, "-Infinity": -math.inf, "NaN": math.nan}


def _plain(value: Any) -> Any:
    """`value` with non-finite floats spelled as strings (strict JSON has no NaN or Infinity)."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _revive(value: Any) -> Any:
    if isinstance(value, str) and value in _NONFINITE:
        return _NONFINITE[value]
    if isinstance(value, dict):
        return {k: _revive(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_revive(v) for v in value]
    return value


def _dumps(value: Any) -> str | None:
    # default=str: a stray non-JSON value (a Path, a numpy scalar) must not lose the measurement
    return None if value is None else json.dumps(_plain(value), sort_keys=True, allow_nan=False,
                                                 default=str)


def _loads(text: str | None) -> Any:
    return None if text is None else _revive(json.loads(text))


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _bool(value: int | None) -> bool | None:
    return None if value is None else bool(value)


_JSON_COLUMNS = ("config", "counters", "build", "agents")
_BOOL_COLUMNS = ("ok", "verified", "simulated")

_ROWS = """
SELECT m.*, c.problem_id, c.template, c.config
FROM measurements m JOIN candidates c ON c.key = m.candidate
"""


def _bring_up_to_date(db: sqlite3.Connection, path: str) -> None:
    """Inside the opening transaction: a new store gets the schema, an older one the steps of
    `_MIGRATIONS` up to SCHEMA_VERSION. The version is read again here: another process may
    have created or migrated the store since it was first read."""
    found = _version(db)
    if found is not None and found > SCHEMA_VERSION:
        raise _newer(path, found)
    for version in range(SCHEMA_VERSION if found is None else found, SCHEMA_VERSION):
        if version not in _MIGRATIONS:
            raise StoreError(f"store {path}: schema version {found}, which this cuda-agent "
                             f"({__version__}) cannot migrate to {SCHEMA_VERSION}: pass --store "
                             f"with another file")
        for statement in _MIGRATIONS[version]:
            db.execute(statement)
    # statement by statement: executescript() would COMMIT our transaction first
    for statement in _SCHEMA.split(";"):
        if statement.strip():
            db.execute(statement)
    if found is None:
        db.execute("DELETE FROM schema_version")  # (a row-less table: one row from here on)
        db.execute("INSERT INTO schema_version VALUES (?)", (SCHEMA_VERSION,))
    elif found != SCHEMA_VERSION:
        db.execute("UPDATE schema_version SET version = ?", (SCHEMA_VERSION,))


def _connect(path: str) -> sqlite3.Connection:
    # isolation_level=None: we issue BEGIN IMMEDIATE/COMMIT ourselves, so each record is one
    # transaction and a read never leaves an implicit transaction open (pinning a WAL snapshot).
    # check_same_thread=False + lock: tuner threads may share the one writing connection.
    db = sqlite3.connect(path, timeout=30.0, isolation_level=None, check_same_thread=False)
    db.row_factory = sqlite3.Row
    return db


# How long opening waits for other processes switching a new store to WAL at the same time.
WAL_SWITCH_WAIT_S = 30.0


def _enter_wal(db: sqlite3.Connection) -> None:
    """Put the file in WAL mode, waiting for other processes doing the same. SQLite answers
    "database is locked" at once, without calling the busy handler, to a connection that asks
    for WAL while another one is changing the journal mode (several tunes starting on one new
    store), so the wait is here: short sleeps with jitter, up to `WAL_SWITCH_WAIT_S`."""
    deadline = time.monotonic() + WAL_SWITCH_WAIT_S
    while True:
        try:
            if str(db.execute("PRAGMA journal_mode").fetchone()[0]).lower() != "wal":
                db.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            busy = "locked" in str(exc) or "busy" in str(exc)
            if not busy or time.monotonic() > deadline:
                raise
            time.sleep(random.uniform(0.005, 0.05))


def _version(db: sqlite3.Connection) -> int | None:
    """The store's schema version; None for a new (empty) file."""
    if db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' "
                  "AND name = 'schema_version'").fetchone() is None:
        return None
    row = db.execute("SELECT version FROM schema_version").fetchone()
    return None if row is None else int(row[0])


def _newer(path: str, version: int) -> StoreError:
    return StoreError(f"store {path}: schema version {version}, written by a newer cuda-agent; "
                      f"this one ({__version__}) reads versions up to {SCHEMA_VERSION}: upgrade "
                      f"cuda-agent (pip install -U cuda-agent) or pass --store with another file")


@dataclass
class StoreHealth:
    """`health()`'s findings: what `cuda-agent doctor` shows."""

    path: str
    exists: bool
    version: int | None = None
    measurements: int | None = None
    problems: list[str] = field(default_factory=list)
    """one line per problem found, empty when the store is sound"""

    @property
    def newer(self) -> bool:
        """Written by a newer release: sound, maybe, but not this release's to read."""
        return self.version is not None and self.version > SCHEMA_VERSION


def health(path: str | Path) -> StoreHealth:
    """The full check of a store file (`PRAGMA integrity_check`, every page and index; nothing
    written): its schema version, its measurements, and one line per problem found."""
    path = str(path)
    out = StoreHealth(path, os.path.exists(path))
    if not out.exists:
        return out
    try:
        # not mode=ro: a read-only connection leaves the -wal and -shm files it made behind
        # (it cannot remove them as the last one out); this one only reads
        db = sqlite3.connect(path, timeout=30.0)
    except sqlite3.Error as exc:
        out.problems.append(f"cannot be opened: {first_line(str(exc))}")
        return out
    try:
        try:
            out.version = _version(db)
        except sqlite3.Error as exc:
            out.problems.append(f"its schema cannot be read: {first_line(str(exc))}")
        rows: list[str] = []
        for pragma in ("integrity_check", "quick_check"):
            # integrity_check may give up on a page quick_check still describes
            try:
                rows = [r[0] for r in db.execute(f"PRAGMA {pragma}(100)").fetchall()]
                break
            except sqlite3.Error as exc:
                rows = [f"{pragma}: {first_line(str(exc))}"]
        lines = [ln.strip() for r in rows for ln in str(r).splitlines()
                 if ln.strip() and not ln.startswith("*** in database")]
        out.problems.extend(ln for ln in lines if ln != "ok")
        if not out.problems:
            try:
                out.measurements = db.execute("SELECT count(*) FROM measurements").fetchone()[0]
            except sqlite3.Error as exc:
                out.problems.append(f"its measurements cannot be read: {first_line(str(exc))}")
    finally:
        db.close()
    return out


T = TypeVar("T")


class Store:
    """Problems, candidates and measurements in one SQLite file (or ``":memory:"``).

    A fault of the file (module docstring) moves the store to memory for the rest of its life,
    with one line on stderr; with `strict`, it raises `StoreError` instead.
    """

    def __init__(self, path: str | Path, strict: bool = False) -> None:
        self.path = str(path)
        self.strict = strict
        self.fault: str | None = None
        """why the file was left for memory (one line), None while it is written"""
        self.in_memory = 0
        """measurements kept in memory after a fault (so missing from the file)"""
        self._lock = threading.RLock()
        # the problems handed out, so that the memory a fault moves to holds them with the
        # same ids
        self._problems: dict[int, tuple[str, str, str, str]] = {}
        try:
            self._db = self._open(self.path)
        except Exception as exc:
            if not is_store_fault(exc):
                raise
            self._db = self._leave(describe_fault(self.path, "opening it", exc), exc)

    def _open(self, path: str) -> sqlite3.Connection:
        if path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        db = _connect(path)
        try:
            db.execute("PRAGMA busy_timeout = 30000")  # wait for a busy writer, don't fail
            found = _version(db)
            if found is not None and found > SCHEMA_VERSION:
                raise _newer(path, found)  # before anything is written to it
            if found is not None and path != ":memory:":
                problem = bounded_check(db, QUICK_CHECK_S)
                if problem:
                    raise sqlite3.DatabaseError(f"database disk image is malformed: {problem}")
            _enter_wal(db)  # readers never block the writer
            # NORMAL is safe with WAL: a power cut may lose the last commits, never corrupt
            db.execute("PRAGMA synchronous = NORMAL")
            db.execute("PRAGMA foreign_keys = ON")
            with _Transaction(db, self._lock):
                _bring_up_to_date(db, path)
        except BaseException:
            db.close()
            raise
        return db

    def _leave(self, message: str, exc: BaseException) -> sqlite3.Connection:
        """Say `message` once (or raise it, strict) and go on in memory: the connection to use
        from now on, holding the problems handed out so far."""
        if self.strict:
            raise StoreError(message) from exc
        self.fault = message
        tell_once(self.path, f"{message}. This run goes on, keeping its measurements in memory")
        memory = _connect(":memory:")
        memory.execute("PRAGMA foreign_keys = ON")
        with _Transaction(memory, self._lock):
            _bring_up_to_date(memory, ":memory:")
            for pid, row in self._problems.items():
                memory.execute("INSERT INTO problems (id, name, source_hash, fingerprint, "
                               "family, created_at) VALUES (?, ?, ?, ?, ?, ?)",
                               (pid, *row, _now()))
        return memory

    def _guarded(self, doing: str, work: Callable[[], T]) -> T:
        """`work()` on the file; on a store fault, once more in memory (`_leave`)."""
        with self._lock:
            try:
                return work()
            except Exception as exc:
                if self.fault is not None or self.path == ":memory:" or \
                        not is_store_fault(exc):
                    raise
                broken = self._db
                self._db = self._leave(describe_fault(self.path, doing, exc), exc)
                try:
                    broken.close()
                except sqlite3.Error:
                    pass  # it is being left for its fault already
            return work()

    def report(self) -> dict[str, Any]:
        """What the run's report says of the store: whether it holds all of the run's records,
        and if not, why."""
        return {"path": self.path, "written": self.fault is None and self.path != ":memory:",
                "error": self.fault, "kept_in_memory": self.in_memory}

    # -- writing ---------------------------------------------------------------------------

    def _write(self) -> "_Transaction":
        return _Transaction(self._db, self._lock)

    def problem_id(self, name: str, source_hash: str, fingerprint: str, family: str) -> int:
        """The id of the problem with this source and input fingerprint, created if new."""
        def work() -> int:
            with self._write():
                # the name follows the file name, which may change while the problem stays the
                # same; a separate SELECT (not RETURNING) keeps this working on SQLite < 3.35
                self._db.execute(
                    "INSERT INTO problems (name, source_hash, fingerprint, family, created_at) "
                    "VALUES (?, ?, ?, ?, ?) ON CONFLICT (source_hash, fingerprint) "
                    "DO UPDATE SET name = excluded.name",
                    (name, source_hash, fingerprint, family, _now()))
                row = self._db.execute(
                    "SELECT id FROM problems WHERE source_hash = ? AND fingerprint = ?",
                    (source_hash, fingerprint)).fetchone()
            return int(row[0])
        pid = self._guarded("recording the problem", work)
        self._problems[pid] = (name, source_hash, fingerprint, family)
        return pid

    def record(self, problem_id: int, key: str, template: str, config: dict, m: Measurement,
               gpu: str, toolchain: str, strategy: str | None = None, build: dict | None = None,
               agents: dict | None = None) -> None:
        """Store candidate `key` (if new) and measurement `m` (unless it came from the store)."""
        now = _now()

        def work() -> None:
            with self._write():
                self._db.execute(
                    "INSERT OR IGNORE INTO candidates (key, problem_id, template, config, "
                    "created_at) VALUES (?, ?, ?, ?, ?)",
                    (key, problem_id, template, _dumps(config), now))
                if m.reused:  # already in here: inserting it again would double-count it
                    return
                self._db.execute(
                    "INSERT INTO measurements (candidate, device, gpu, toolchain, strategy, ok, "
                    "time_ms, spread_ms, samples, verified, simulated, error_kind, error_msg, "
                    "counters, max_rel_err, wall_s, build, agents, created_at) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (key, m.device, gpu, toolchain, strategy, int(m.ok), m.time_ms, m.spread_ms,
                     m.samples, None if m.verified is None else int(m.verified),
                     int(m.simulated), m.error_kind, m.error_msg, _dumps(m.counters or {}),
                     m.max_rel_err, m.wall_s, _dumps(build), _dumps(agents), now))
        self._guarded("recording a measurement", work)
        if self.fault is not None and not m.reused:
            self.in_memory += 1

    # -- reading ---------------------------------------------------------------------------

    def _rows(self, sql: str, args: tuple = ()) -> list[dict]:
        return self._guarded("reading it", lambda: self._decoded(sql, args))

    def _decoded(self, sql: str, args: tuple) -> list[dict]:
        rows = self._db.execute(sql, args).fetchall()
        out = []
        for row in rows:
            d = dict(row)
            try:
                for col in _JSON_COLUMNS:
                    if col in d:
                        d[col] = _loads(d[col])
            except ValueError as exc:  # garbled bytes inside a row SQLite itself reads fine
                raise sqlite3.DatabaseError(f"a stored row does not decode ({exc})") from exc
            for col in _BOOL_COLUMNS:
                if col in d:
                    d[col] = _bool(d[col])
            out.append(d)
        return out

    def lookup(self, key: str, device: str, gpu: str, toolchain: str) -> Measurement | None:
        """The newest reusable measurement of `key` on this device kind, GPU and toolchain."""
        marks = ", ".join("?" * len(TRANSIENT_KINDS))
        hosts = ", ".join("?" * len(HOST_FAILURE_MESSAGES))
        rows = self._rows(
            f"SELECT * FROM measurements WHERE candidate = ? AND device = ? AND gpu = ? "
            f"AND toolchain = ? AND (ok = 1 OR ((error_kind IS NULL OR error_kind NOT IN "
            f"({marks})) AND (error_msg IS NULL OR error_msg NOT IN ({hosts})))) "
            f"ORDER BY id DESC LIMIT 1",
            (key, device, gpu, toolchain, *TRANSIENT_KINDS, *HOST_FAILURE_MESSAGES))
        if not rows:
            return None
        r = rows[0]
        return Measurement(key=key, device=r["device"], ok=r["ok"], time_ms=r["time_ms"],
                           spread_ms=r["spread_ms"], samples=r["samples"], verified=r["verified"],
                           simulated=r["simulated"], error_kind=r["error_kind"],
                           error_msg=r["error_msg"], counters=r["counters"] or {},
                           max_rel_err=r["max_rel_err"], wall_s=r["wall_s"], reused=True)

    def problems(self) -> list[dict]:
        """Every problem recorded (id, name, source_hash, fingerprint, family, created_at),
        oldest first: what a measurement's `problem_id` names."""
        return self._rows("SELECT * FROM problems ORDER BY id")

    def measurements(self, problem_id: int | None = None, device: str | None = None) -> list[dict]:
        """Every measurement (oldest first), with its candidate's problem, template and config."""
        where, args = self._filters(problem_id=problem_id, device=device)
        return self._rows(f"{_ROWS} {where} ORDER BY m.id", args)

    def best(self, problem_id: int, device: str, gpu: str) -> dict | None:
        """The fastest correct measurement; the simulator's count too, since it never verifies."""
        where, args = self._filters(problem_id=problem_id, device=device, gpu=gpu)
        rows = self._rows(f"{_ROWS} {where} AND m.ok = 1 AND m.time_ms IS NOT NULL "
                          f"AND (m.verified = 1 OR m.simulated = 1) "
                          f"ORDER BY m.time_ms, m.id LIMIT 1", args)
        return rows[0] if rows else None

    def failures(self, problem_id: int | None = None) -> list[dict]:
        """Every failed measurement (oldest first), with its template and config."""
        where, args = self._filters(problem_id=problem_id)
        joiner = "AND" if where else "WHERE"
        return self._rows(f"{_ROWS} {where} {joiner} m.ok = 0 ORDER BY m.id", args)

    def failure_groups(self, problem_id: int | None = None) -> list[dict]:
        """Failures grouped by (template, error_kind, slot=value), worst first.

        `share` is the fraction of all measurements with that template and slot value that
        failed with that kind: 1.0 means the value never works, which points at a template bug
        rather than an unlucky configuration, so those groups come first.
        """
        totals: dict[tuple, int] = defaultdict(int)
        failed: dict[tuple, int] = defaultdict(int)
        for row in self.measurements(problem_id):
            for slot, value in (row["config"] or {}).items():
                if value == ABSENT:  # the template has no such slot: not a decision anyone made
                    continue
                value = json.dumps(value)  # hashable, and 4 and "4" stay apart
                totals[(row["template"], slot, value)] += 1
                if not row["ok"]:
                    failed[(row["template"], row["error_kind"], slot, value)] += 1
        groups = []
        for (template, kind, slot, value), count in failed.items():
            total = totals[(template, slot, value)]
            groups.append({"template": template, "error_kind": kind, "slot": slot,
                           "agent": slot.split(".", 1)[0], "value": json.loads(value),
                           "count": count, "total": total, "share": count / total})
        groups.sort(key=lambda g: (-g["share"], -g["count"], g["template"], g["error_kind"] or "",
                                   g["slot"], json.dumps(g["value"])))
        return groups

    @staticmethod
    def _filters(**conditions: Any) -> tuple[str, tuple]:
        names = {"problem_id": "c.problem_id", "device": "m.device", "gpu": "m.gpu"}
        used = [(names[k], v) for k, v in conditions.items() if v is not None]
        if not used:
            return "", ()
        return "WHERE " + " AND ".join(f"{col} = ?" for col, _ in used), tuple(v for _, v in used)

    # -- lifetime --------------------------------------------------------------------------

    def close(self) -> None:
        with self._lock:
            try:
                self._db.close()  # (the last connection's checkpoint may meet the fault)
            except sqlite3.Error as exc:
                if not is_store_fault(exc):
                    raise

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Transaction:
    """BEGIN IMMEDIATE ... COMMIT (ROLLBACK on error) under the store's lock.

    IMMEDIATE takes the write lock up front, so a second writer waits (busy timeout) at BEGIN
    instead of failing halfway through a transaction it cannot upgrade.
    """

    def __init__(self, db: sqlite3.Connection, lock: threading.RLock) -> None:
        self.db, self.lock = db, lock

    def __enter__(self) -> None:
        self.lock.acquire()
        try:
            self.db.execute("BEGIN IMMEDIATE")
        except BaseException:
            self.lock.release()
            raise

    def __exit__(self, exc_type: type | None, *exc: object) -> None:
        try:
            if exc_type is None:
                try:
                    self.db.execute("COMMIT")
                except BaseException:  # a full disk may refuse the commit itself
                    self._rollback()
                    raise
            else:
                self._rollback()
        finally:
            self.lock.release()

    def _rollback(self) -> None:
        # SQLite may have rolled back already (a full disk, a corrupt page): the error that
        # got us here is the one to report, not "no transaction is active"
        try:
            self.db.execute("ROLLBACK")
        except sqlite3.Error:
            pass
