"""Worker processes started without multiprocessing's spawn: the compile pool and the GPU worker.

multiprocessing's "spawn" (and "forkserver") re-run the parent's `__main__` in every child. A
user script that calls `cuda_agent.tune(...)` without an `if __name__ == "__main__":` guard then
starts the tuning again inside each worker, which fails, and every candidate looked like a
compile failure. Here a child is a fresh interpreter that imports only the target's module (an
importable `module:function`), talks over a `multiprocessing` connection, and says it is ready
before it is given work: a child that cannot start is a `HostError`, never a candidate's failure.

Children run in a session of their own, so a Ctrl-C at the terminal reaches only the parent
(which decides what to keep), and a kill takes the child's own children (nvcc) with it. A child
whose parent dies reads end-of-file on its connection and exits.

`fork` makes the same kind of child from a fork of this process, for a child that needs what
this process has imported (torch: a second import costs a second of CPU), where forking is
safe (`fork_is_safe`). `tree_anon_rss_bytes` is the memory a child and its own children hold,
for a parent that watches it (`problem_child.py`).
"""

from __future__ import annotations

import importlib
import multiprocessing
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Callable

from .errors import HostError

START_TIMEOUT_S = 300.0
"""how long a new process may take to import its modules (torch on a loaded machine is slow)"""

_BOOT = "import sys; from cuda_agent.procs import child_main; child_main(int(sys.argv[1]))"
_PACKAGE_ROOT = str(Path(__file__).resolve().parent.parent)


class Child:
    """One worker process and the parent's end of its connection."""

    def __init__(self, proc: subprocess.Popen, conn: Connection, log: Any, name: str) -> None:
        self.proc = proc
        self.conn = conn
        self.name = name
        self._log = log  # the child's stdout and stderr: read back when it fails

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def exitcode(self) -> int | None:
        return self.proc.poll()

    def is_alive(self) -> bool:
        return self.proc.poll() is None

    def wait_ready(self, timeout: float) -> None:
        """Block until the child has imported its target; a child that exits or stays silent
        is a `HostError` naming the last line it wrote."""
        try:
            if self.conn.poll(timeout):
                tag, detail = self.conn.recv()
                if tag == "ready":
                    return
            else:
                detail = f"not ready after {timeout:.0f} s"
        except (EOFError, OSError):
            self.join(5)
            detail = f"exited with code {self.exitcode}"
        self.kill()
        last = self.last_line()
        raise HostError(f"could not start a {self.name} process: {detail}"
                        + (f" ({last})" if last and last not in detail else ""))

    def last_line(self, since: int = 0) -> str:
        """The last non-empty line the child wrote to stdout or stderr (after `since` bytes)."""
        lines = [l.strip() for l in self.log_since(since).splitlines()]
        return next((l for l in reversed(lines) if l), "")[:300]

    def log_since(self, offset: int = 0) -> str:
        """What the child wrote to stdout and stderr after its first `offset` bytes."""
        try:
            self._log.seek(offset)
            return self._log.read().decode(errors="replace")
        except (OSError, ValueError):
            return ""

    def log_size(self) -> int:
        """Bytes the child has written to stdout and stderr so far (`log_since`)."""
        try:
            return os.fstat(self._log.fileno()).st_size
        except (OSError, ValueError):
            return 0

    def kill(self) -> None:
        """Kill the child and whatever it started (its process group), and reap it."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                try:
                    self.proc.kill()
                except ProcessLookupError:
                    pass
        self.join(10)
        self.conn.close()

    def join(self, timeout: float | None = None) -> None:
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pass

    def close(self) -> None:
        """Kill (if still running) and release the log."""
        self.kill()
        try:
            self._log.close()
        except OSError:
            pass


def start(target: str, args: tuple = (), name: str = "worker") -> Child:
    """Start `target` ("package.module:function") as `function(conn, *args)` in a new Python
    process; returns at once (call `Child.wait_ready`). `args` are pickled, and unpickled in
    the child after it has taken this process's `sys.path`."""
    parent, child_end = multiprocessing.Pipe()
    log = tempfile.TemporaryFile(prefix="cuda-agent-worker-")
    env = dict(os.environ)
    # the child must import cuda_agent from where this process did (a checkout on sys.path)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_ROOT, env.get("PYTHONPATH")) if p)
    try:
        proc = subprocess.Popen([sys.executable, "-c", _BOOT, str(child_end.fileno())],
                                pass_fds=(child_end.fileno(),), stdin=subprocess.DEVNULL,
                                stdout=log, stderr=log, env=env, start_new_session=True)
    except OSError as exc:
        parent.close()
        log.close()
        raise HostError(f"could not start a {name} process: {exc}") from None
    finally:
        child_end.close()
    try:
        parent.send((list(sys.path), target))
        parent.send(args)
    except OSError:
        pass  # the child died at once: wait_ready reports it
    return Child(proc, parent, log, name)


class _Forked:
    """A forked process as `subprocess.Popen` presents one to `Child` (pid, poll, wait)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                done, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped elsewhere
                self.returncode = -signal.SIGKILL
                return self.returncode
            if done:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(str(self.pid), timeout or 0)
            time.sleep(0.01)
        return self.returncode  # type: ignore[return-value]

    def kill(self) -> None:
        os.kill(self.pid, signal.SIGKILL)


def fork_is_safe() -> bool:
    """Whether this process may fork a child that goes on running Python and torch: one
    thread (a lock another thread held at the fork stays held in the child) and no CUDA
    context (which a forked child cannot use)."""
    if not hasattr(os, "fork") or threading.active_count() != 1:
        return False
    torch = sys.modules.get("torch")
    return torch is None or not torch.cuda.is_initialized()


def fork(fn: Callable[..., None], args: tuple = (), name: str = "worker") -> Child:
    """`fn(conn, *args)` in a fork of this process (check `fork_is_safe` first): what this
    process has imported, the child has without importing it again. Like `start`'s children, it
    runs in a session of its own, writes to a log, and says it is ready."""
    parent, child_end = multiprocessing.Pipe()
    log = tempfile.TemporaryFile(prefix="cuda-agent-worker-")
    for stream in (sys.stdout, sys.stderr):  # nothing buffered here is written twice
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass
    try:
        pid = os.fork()
    except OSError as exc:
        parent.close()
        child_end.close()
        log.close()
        raise HostError(f"could not start a {name} process: {exc}") from None
    if pid == 0:
        code = 0
        try:
            os.setsid()
            parent.close()
            os.dup2(log.fileno(), 1)
            os.dup2(log.fileno(), 2)
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            child_end.send(("ready", None))
            fn(child_end, *args)
        except BaseException:  # noqa: BLE001 - the parent reads it as an exit
            code = 1
        finally:
            os._exit(code)
    child_end.close()
    return Child(_Forked(pid), parent, log, name)  # type: ignore[arg-type]


def child_main(fd: int) -> None:
    """The child's side: take the parent's sys.path, import the target, say ready, run it."""
    conn = Connection(fd)
    try:
        path, target = conn.recv()
    except EOFError:
        return
    sys.path[:] = [p for p in path if p] + [p for p in sys.path if p not in path]
    module, _, func = target.partition(":")
    try:
        fn = getattr(importlib.import_module(module), func)
        args = conn.recv()
    except EOFError:
        return
    except Exception as exc:  # noqa: BLE001 - reported to the parent as a host failure
        conn.send(("failed", f"{type(exc).__name__}: {exc}"[:300]))
        sys.exit(1)
    conn.send(("ready", None))
    fn(conn, *args)


_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def anon_rss_bytes(pid: int) -> int:
    """A process's resident memory less what it maps from files (Linux /proc; 0 where it is
    gone or unknown): what it allocated, not the libraries it runs, whose pages the kernel can
    drop and a fork shares."""
    try:
        with open(f"/proc/{pid}/statm") as f:
            fields = f.read().split()
        return (int(fields[1]) - int(fields[2])) * _PAGE  # resident - shared (file-backed)
    except (OSError, ValueError, IndexError):
        return 0


def tree_anon_rss_bytes(pid: int) -> int:
    """`anon_rss_bytes` of a process and of every process below it."""
    total, todo, seen = 0, [pid], set()
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        total += anon_rss_bytes(p)
        try:
            tasks = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for t in tasks:
            try:
                with open(f"/proc/{p}/task/{t}/children") as f:
                    todo.extend(int(c) for c in f.read().split())
            except (OSError, ValueError):
                pass
    return total


def host_available_bytes() -> int:
    """Host memory the kernel reports available (MemAvailable), 0 where unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return 0
