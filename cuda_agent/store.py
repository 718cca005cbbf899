"""The archive: an SQLite file holding every problem, candidate and measurement ever made.

Failures are measurements with ``ok = 0`` and an ``error_kind`` (see `run/records.py`), so one
table answers both "what is fastest" and "what keeps breaking". Reruns ask `lookup` before
measuring and reuse what was already measured on the same device kind, GPU and toolchain.

Concurrency: WAL journal, one writer. All writes of a `Store` go through its one connection
under a lock, each `record` in one transaction; any number of other `Store` objects (other
processes, the report) may read the same file meanwhile.

JSON columns (config, counters, build, agents) are strict JSON: non-finite floats are written
as the strings ``"Infinity"``, ``"-Infinity"`` and ``"NaN"`` and turned back into floats on
read (so a genuine string with one of those exact spellings would come back as a float).
REAL columns keep +-inf natively; SQLite stores a NaN there as NULL.
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
import threading
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from cuda_agent.errors import CudaAgentError
from cuda_agent.run.records import Measurement
from cuda_agent.space.slots import ABSENT

SCHEMA_VERSION = 1

# Failures that say something about the moment, not about the candidate alone, so they are never
# served from the store: a crash or a timeout (measuring again may well succeed), a compile that
# ran past its timeout or whose process died (the machine's load and the limit decide those), and
# a "slow" abandonment, which was decided against the best time of the search that measured it
# (another search, or `bench`'s next strategy sharing the store, has another best).
TRANSIENT_KINDS = ("crash", "timeout", "slow", "compile_timeout", "compile_crash")

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


class Store:
    """Problems, candidates and measurements in one SQLite file (or ``":memory:"``)."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        # isolation_level=None: we issue BEGIN IMMEDIATE/COMMIT ourselves, so each record is one
        # transaction and a read never leaves an implicit transaction open (pinning a WAL snapshot).
        # check_same_thread=False + lock: tuner threads may share the one writing connection.
        self._db = sqlite3.connect(self.path, timeout=30.0, isolation_level=None,
                                   check_same_thread=False)
        self._db.row_factory = sqlite3.Row
        self._lock = threading.RLock()
        self._db.execute("PRAGMA busy_timeout = 30000")  # wait for a busy writer, don't fail
        self._db.execute("PRAGMA journal_mode = WAL")  # readers never block the writer
        # NORMAL is safe with WAL: a power cut may lose the last commits, never corrupt the file
        self._db.execute("PRAGMA synchronous = NORMAL")
        self._db.execute("PRAGMA foreign_keys = ON")
        with self._write():
            # statement by statement: executescript() would COMMIT our transaction first
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    self._db.execute(statement)
            row = self._db.execute("SELECT version FROM schema_version").fetchone()
            if row is None:
                self._db.execute("INSERT INTO schema_version VALUES (?)", (SCHEMA_VERSION,))
            elif row[0] != SCHEMA_VERSION:
                raise CudaAgentError(f"{self.path}: store schema version {row[0]}, "
                                   f"this cuda-agent reads version {SCHEMA_VERSION}")

    # -- writing ---------------------------------------------------------------------------

    def _write(self) -> "_Transaction":
        return _Transaction(self._db, self._lock)

    def problem_id(self, name: str, source_hash: str, fingerprint: str, family: str) -> int:
        """The id of the problem with this source and input fingerprint, created if new."""
        with self._write():
            # the name follows the file name, which may change while the problem stays the same;
            # a separate SELECT (not RETURNING) keeps this working on SQLite older than 3.35
            self._db.execute(
                "INSERT INTO problems (name, source_hash, fingerprint, family, created_at) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT (source_hash, fingerprint) "
                "DO UPDATE SET name = excluded.name",
                (name, source_hash, fingerprint, family, _now()))
            row = self._db.execute(
                "SELECT id FROM problems WHERE source_hash = ? AND fingerprint = ?",
                (source_hash, fingerprint)).fetchone()
        return int(row[0])

    def record(self, problem_id: int, key: str, template: str, config: dict, m: Measurement,
               gpu: str, toolchain: str, strategy: str | None = None, build: dict | None = None,
               agents: dict | None = None) -> None:
        """Store candidate `key` (if new) and measurement `m` (unless it came from the store)."""
        now = _now()
        with self._write():
            self._db.execute(
                "INSERT OR IGNORE INTO candidates (key, problem_id, template, config, created_at) "
                "VALUES (?, ?, ?, ?, ?)", (key, problem_id, template, _dumps(config), now))
            if m.reused:  # already in here: inserting it again would double-count it
                return
            self._db.execute(
                "INSERT INTO measurements (candidate, device, gpu, toolchain, strategy, ok, "
                "time_ms, spread_ms, samples, verified, simulated, error_kind, error_msg, "
                "counters, max_rel_err, wall_s, build, agents, created_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (key, m.device, gpu, toolchain, strategy, int(m.ok), m.time_ms, m.spread_ms,
                 m.samples, None if m.verified is None else int(m.verified), int(m.simulated),
                 m.error_kind, m.error_msg, _dumps(m.counters or {}), m.max_rel_err, m.wall_s,
                 _dumps(build), _dumps(agents), now))

    # -- reading ---------------------------------------------------------------------------

    def _rows(self, sql: str, args: tuple = ()) -> list[dict]:
        with self._lock:
            rows = self._db.execute(sql, args).fetchall()
        out = []
        for row in rows:
            d = dict(row)
            for col in _JSON_COLUMNS:
                if col in d:
                    d[col] = _loads(d[col])
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
            self._db.close()

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
            self.db.execute("COMMIT" if exc_type is None else "ROLLBACK")
        finally:
            self.lock.release()
