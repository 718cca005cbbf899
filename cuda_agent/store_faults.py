"""What a store's faults are and how they are told (`store.py` acts on them): which errors mean
the file cannot be used, as opposed to this code's own bugs; the one line that says what failed
and what to do; the time-bounded check a store gets when it is opened."""

from __future__ import annotations

import errno
import sqlite3
import sys
import threading

from cuda_agent.errors import StoreError

# sqlite3 errors that say the store is unusable (full, read-only, corrupt, gone), as opposed to
# a misuse of it by this code (a constraint, a closed connection), which would fail again in
# memory and must surface as the bug it is
_OUR_BUGS = (sqlite3.IntegrityError, sqlite3.ProgrammingError, sqlite3.InterfaceError)


def is_store_fault(exc: BaseException) -> bool:
    """Whether `exc`, raised while reading or writing a store, means the store cannot be used."""
    if isinstance(exc, (OSError, StoreError)):
        return True
    return isinstance(exc, sqlite3.DatabaseError) and not isinstance(exc, _OUR_BUGS)


def first_line(text: str) -> str:
    """The first line of `text` that says something (integrity_check heads its report with
    "*** in database main ***")."""
    lines = [ln.strip() for ln in str(text).splitlines() if ln.strip()
             and not ln.startswith("*** in database")]
    return lines[0] if lines else ""


def _advice(path: str, exc: BaseException) -> tuple[str, str]:
    """(what is wrong, what to do) for a store fault, in a few words each."""
    name = getattr(exc, "sqlite_errorname", "") or ""
    code = getattr(exc, "errno", None)
    text = str(exc).lower()
    elsewhere = "or pass --store with a file elsewhere"
    if isinstance(exc, StoreError):
        return "", ""  # its message says it all
    if name.startswith("SQLITE_FULL") or code in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT) \
            or "disk is full" in text:
        return "its disk is full", f"free space there {elsewhere}"
    if name.startswith(("SQLITE_READONLY", "SQLITE_CANTOPEN", "SQLITE_PERM")) \
            or code in (errno.EACCES, errno.EPERM, errno.EROFS) \
            or "readonly" in text or "unable to open" in text:
        return "it cannot be written", f"make the file and its folder writable {elsewhere}"
    if name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB")) or "malformed" in text \
            or "not a database" in text or "does not decode" in text:
        return "the file is corrupt", (f"move it away (the next run starts a new store "
                                       f"there); `cuda-agent doctor --store {path}` says more")
    if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")):
        return "another process held it too long", elsewhere.removeprefix("or ")
    if name.startswith("SQLITE_IOERR"):  # (a full disk can end here too: SQLite keeps no errno)
        return "its disk failed a read or write", f"check it has space and is mounted {elsewhere}"
    return "", f"`cuda-agent doctor --store {path}` checks it, {elsewhere}"


def describe_fault(path: str, doing: str, exc: BaseException) -> str:
    """One line: the store, what failed and why, what to do."""
    if isinstance(exc, StoreError):
        return str(exc)
    what, todo = _advice(path, exc)
    reason = first_line(str(exc)) or type(exc).__name__
    what = f"; {what}" if what else ""
    return f"store {path}: {doing} failed ({reason}){what}: {todo}"


_TOLD: set[str] = set()  # stores whose fault this process has reported


def tell_once(path: str, message: str) -> None:
    """`message` on stderr, unless this process has told a fault of `path` already: one line
    per store, however many `Store` objects a run opens on it (a sweep, training)."""
    if path not in _TOLD:
        _TOLD.add(path)
        print(f"warning: {message}", file=sys.stderr, flush=True)


def bounded_check(db: sqlite3.Connection, seconds: float) -> str | None:
    """The first problem `PRAGMA quick_check` finds within `seconds`; None if none (it stops
    there on a large store: `sqlite3_interrupt` from a timer, since the progress handler is
    not called inside the check's own loop)."""
    guard, active = threading.Lock(), [True]

    def stop() -> None:
        with guard:  # never interrupts a later statement
            if active[0]:
                db.interrupt()
    timer = threading.Timer(seconds, stop)
    timer.start()
    try:
        rows = db.execute("PRAGMA quick_check(1)").fetchall()
    except sqlite3.OperationalError as exc:
        if getattr(exc, "sqlite_errorname", "") == "SQLITE_INTERRUPT":
            return None
        raise
    finally:
        with guard:
            active[0] = False
        timer.cancel()
    found = first_line(rows[0][0]) if rows else "ok"
    return None if found == "ok" else found
