"""Files written whole, and the temporaries of killed runs removed.

Every file cuda-agent keeps (outputs, caches, checkpoints) is written to a temporary beside it
and renamed into place, so that a reader never sees half a file. A run killed while writing
(SIGKILL, the OOM killer) leaves its temporary behind, and nothing else would ever remove it.
So a temporary's name says who wrote it, `.cuda-agent-<host>-<pid>-<random>[suffix]`, and a later
run removes those whose writer is no longer running (`sweep`), never those of a live run: six
tunes may share one store and its caches. A writer on another host or in another container (a
cache on a network file system, or shared by containers) cannot be asked; its temporaries go
once they are a day old, as do those of a pid that was reused since.

Files are created as `open()` creates them, with mode 0666 less the user's umask (`mkstemp`'s
0600 would hide a shared policy or cache from the user's group).
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import shutil
import socket
import time
from pathlib import Path

PREFIX = ".cuda-agent-"


def _host_tag() -> str:
    """Where a pid means this process table: the host, and the pid namespace within it (two
    containers may share a host name and a cache, but not their pids)."""
    try:
        namespace = str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        namespace = ""
    return hashlib.sha256(f"{socket.gethostname()}/{namespace}".encode()).hexdigest()[:6]


HOST = _host_tag()
STALE_S = 24 * 3600.0
"""age past which a temporary is removed whoever wrote it (no write takes a day)"""

_NAME = re.compile(re.escape(PREFIX) + r"(?P<host>[0-9a-f]{6})-(?P<pid>\d+)-[0-9a-f]{8}(\..+)?")


def temp_name(suffix: str = "") -> str:
    """A fresh temporary's name, owned by this process."""
    return f"{PREFIX}{HOST}-{os.getpid()}-{secrets.token_hex(4)}{suffix}"


def create(folder: Path, suffix: str = "") -> tuple[int, Path]:
    """Create an empty temporary in `folder` (mode as `open()` gives, umask applied): its open
    descriptor and its path."""
    path = Path(folder) / temp_name(suffix)
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), path


def make_dir(folder: Path) -> Path:
    """Create a temporary directory in `folder`, with the mode `mkdir` gives (umask applied)."""
    path = Path(folder) / temp_name()
    path.mkdir()
    return path


def write_atomic(path: Path, data: bytes, temp_dir: Path | None = None) -> None:
    """Replace `path` with `data` at once. The temporary lies in `temp_dir` (default: beside
    `path`; it must be on the same file system) and is removed if the write fails."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = create(temp_dir or path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _running(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process (EPERM): it exists
        return True
    return True


def abandoned(path: Path, now: float | None = None) -> bool:
    """Whether `path` is a temporary of this module's naming whose writer is gone."""
    m = _NAME.fullmatch(path.name)
    if m is None:
        return False  # not ours: never touched
    if m["host"] == HOST and not _running(int(m["pid"])):
        return True
    try:
        age = (now or time.time()) - path.lstat().st_mtime
    except OSError:
        return False
    return age > STALE_S


def sweep(folder: Path) -> list[Path]:
    """Remove the abandoned temporaries (files and directories) directly in `folder`; return
    what was removed. Never raises: a folder that cannot be listed, or a temporary another run
    removes first, is left alone."""
    removed: list[Path] = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    now = time.time()
    for entry in entries:
        if not entry.name.startswith(PREFIX):
            continue
        path = Path(entry.path)
        if not abandoned(path, now):
            continue
        try:
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(path)
            else:
                path.unlink()
        except OSError:
            continue
        removed.append(path)
    return removed


_swept: set[str] = set()


def sweep_once(folder: Path) -> None:
    """`sweep` a folder at most once per process (a run writes into it many times)."""
    key = os.path.realpath(folder)
    if key not in _swept:
        _swept.add(key)
        sweep(Path(folder))
