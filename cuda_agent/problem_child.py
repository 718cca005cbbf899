"""Problem files imported, checked and captured in a child process, under a time and a memory
limit: the bounded path every user-facing entry point loads a problem through.

A problem file is user code. Its import can sleep, take the host's memory, crash the interpreter
or start processes that never end; imported in cuda-agent's own process, any of these takes the
command down with it (an out-of-memory kill is exit 137 and not a word). Here the import, the
check on meta tensors (`problem.check_problem`), the capture (`Problem.graph`, with its capture
cache) and the plan (for its errors) run in a child. The parent gets the captured graph and never
imports the file itself unless something asks for the module (`Problem.module`; the GPU worker
imports the file in its own process).

The children are forks of a *loader*, a process that has torch and the capture imported and
forks a fresh child per problem: a load costs milliseconds beyond the user's own code, and no
problem's import sees another's. `cuda-agent tune`'s loader is a fork of the command itself,
taken once it has imported torch (`procs.fork`; one thread, no CUDA): its start costs no second
import of torch. Elsewhere (the Python API, whose caller may hold threads or CUDA; `bench`,
`train`, `sweep`) it is a fresh interpreter (`procs.start`, no multiprocessing spawn), started
on first use and kept for the process's next loads. Each child is a process group of its own,
watched from the parent:

* time: the child's wall time, from its fork, against `LoadLimits.time_s`;
* memory: the resident memory of the child and everything it started, beyond the loader's own
  (torch's libraries, which every child shares), against `LoadLimits.memory_bytes`. Resident
  memory, watched, and not an address-space rlimit: CUDA and torch reserve far more address
  space than they use, and fail under one.

Past either, the child's group is killed and the caller gets one `ProblemError` naming the file,
the limit and how to raise it. A child that dies (os._exit, a segfault) is a `ProblemError`
too; a loader that cannot start is the machine's (`HostError`).

Everything here is importable without torch.
"""

from __future__ import annotations

import atexit
import os
import pickle
import re
import select
import signal
import sys
import threading
import time
import traceback
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import errors, procs
from .cache_check import CacheWarning
from .errors import CudaAgentError, HostError, ProblemError, SettingsError, problem_file
from .limits import IMPORT_MEMORY_FRACTION, IMPORT_TIMEOUT_S
from .procs import START_TIMEOUT_S, anon_rss_bytes, host_available_bytes, tree_anon_rss_bytes

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

    from .ir.graph import Graph
    from .problem import Problem

POLL_S = 0.05
"""how often the parent looks at a loading child's memory and clock: a child filling memory at
several GB/s takes a fraction of a GB past the limit before it is stopped"""
EXIT_WAIT_S = 10.0
"""how long the loader may take to report a finished child's end before it is replaced"""


@dataclass(frozen=True)
class LoadLimits:
    """The bounds on one problem file's import and capture, and what a user sets to raise them."""

    time_s: float | None = IMPORT_TIMEOUT_S
    """seconds the child may run (None: no limit)"""
    memory_bytes: int | None = None
    """host memory the child may add beyond the loader's own (None: IMPORT_MEMORY_FRACTION of
    the memory available when the load starts; 0: no limit)"""
    time_hint: str = "--import-timeout SECONDS (import_timeout_s in Python; 0: no limit)"
    """how to raise the time limit, for the error"""

    @staticmethod
    def of(import_timeout_s: float | None, time_limit_s: float | None = None,
           import_memory_bytes: int | None = None) -> "LoadLimits":
        """A run's bounds: the import's own, or the run's time limit where that is shorter
        (the import is part of the run)."""
        for name, value in (("--import-timeout", import_timeout_s),
                            ("--time-limit", time_limit_s)):
            if value is not None and value < 0:
                raise SettingsError(f"{name} must be 0 (no limit) or a positive number of "
                                    f"seconds, not {value:g}")
        if import_memory_bytes is not None and import_memory_bytes < 0:
            raise SettingsError(f"--import-memory must be 0 (no limit) or a positive size, not "
                                f"{import_memory_bytes}")
        own, run = import_timeout_s or None, time_limit_s or None
        if run is not None and (own is None or run < own):
            return LoadLimits(run, import_memory_bytes,
                              "--time-limit SECONDS (time_limit_s in Python; 0: no limit)")
        return LoadLimits(own, import_memory_bytes)

    @staticmethod
    def of_run(settings: Any) -> "LoadLimits":
        """A `TuneSettings`' bounds."""
        return LoadLimits.of(settings.import_timeout_s, settings.time_limit_s,
                             settings.import_memory_bytes)

    def memory_limit(self) -> int | None:
        """The memory bound in bytes for a load starting now (None: none)."""
        if self.memory_bytes is not None:
            return self.memory_bytes or None
        available = host_available_bytes()
        return int(available * IMPORT_MEMORY_FRACTION) if available else None


# -- the parent's side -------------------------------------------------------------------------------

class ProblemLoader:
    """The parent's end of a loader process; loads one problem at a time (a lock)."""

    def __init__(self, warm_after: int | None = None, fork: bool = False) -> None:
        """`warm_after`: after that many loads the loader imports what later captures may need
        (Dynamo: about a second, once), for a caller that loads many problems. `fork`: the
        loader is a fork of this process where that is safe (`procs.fork_is_safe`): it has
        torch from this process, and the start costs milliseconds, not a second import of
        torch competing for the CPU with this process's (the CLI's `tune`, once it has
        imported torch itself); else a fresh interpreter."""
        self._fork = fork
        self._child: Any = None  # a procs.Child
        self._ready = False  # whether it has said so (`procs.Child.wait_ready`)
        self._exit_pending = False  # the last child's end, not yet read from the loader
        self._lock = threading.RLock()
        self._loads = 0
        self._warm_after = warm_after
        self._flags: dict[str, Any] | None = None  # the last load's TF32 flags (the file's)

    def start(self) -> "ProblemLoader":
        """Start the loader process now (it imports torch while the caller goes on)."""
        with self._lock:
            if self._child is None or not self._child.is_alive():
                self._discard()
                self._ready = False
                self._exit_pending = False
                self._child = (procs.fork(serve, (), "problem loader")
                               if self._fork and procs.fork_is_safe() else
                               procs.start("cuda_agent.problem_child:serve", (),
                                           "problem loader"))
        return self

    def close(self) -> None:
        with self._lock:
            self._discard()

    def __enter__(self) -> "ProblemLoader":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _discard(self) -> None:
        if self._child is not None:
            self._child.close()
        self._child = None

    def load(self, path: str | Path, limits: LoadLimits | None = None) -> "Problem":
        """Import, check and capture `path` in a child; the `Problem` holds the child's graph.
        Raises the child's `ProblemError` or `UnsupportedError` (naming the file), a
        `ProblemError` where a limit stopped it or it died, `HostError` where no loader runs."""
        from .problem import Problem

        limits = limits or LoadLimits()
        path = problem_file(path)
        source = path.read_text()
        with self._lock:
            graph = self._load(path, limits)
            flags = self._flags
            self._loads += 1
            if self._loads == self._warm_after and self._child is not None:
                try:
                    self._child.conn.send(("warm", None))
                except OSError:
                    self._discard()
        return Problem(path, path.stem, source, _graph=graph, torch_flags=flags)

    def split(self, path: str | Path, limits: LoadLimits | None = None) -> Any:
        """Import and check `path` in a child, and split its model into kernel and torch
        regions there (`regions.split.split_model`): a whole model's first step."""
        path = problem_file(path)
        with self._lock:
            return self._load(path, limits or LoadLimits(), split=True)

    def _load(self, path: Path, limits: LoadLimits, split: bool = False) -> Any:
        self._read_last_exit()
        self.start()
        memory_limit = limits.memory_limit()
        child = self._child
        # the child writes the capture cache: with this process's umask, not the loader's
        # (which started under whatever umask the first load had)
        request = {"path": str(path), "split": split, "cwd": os.getcwd(),
                   "sys_path": list(sys.path),
                   "env": dict(os.environ), "umask": current_umask()}
        log_start = child.log_size()
        pid = None
        try:
            if not self._ready:
                child.wait_ready(START_TIMEOUT_S)  # a HostError where it cannot start
                self._ready = True
            child.conn.send(("load", request))
            # the loader imports torch before its first fork: bounded as a start is
            if not child.conn.poll(START_TIMEOUT_S):
                raise HostError(f"the problem loader did not start a child within "
                                f"{START_TIMEOUT_S:.0f} s")
            _, pid = child.conn.recv()
            answer = self._watch(path, limits, memory_limit, pid, log_start)
        except BaseException as exc:
            # a limit, a death, Ctrl-C: the child's group goes, and the loader with it (its
            # connection may hold half a message); the next load starts a fresh one
            last = child.last_line(log_start)
            if pid is not None:
                _kill_group(pid)
            self._discard()
            if isinstance(exc, (EOFError, OSError)):
                raise HostError("the problem loader process exited"
                                + (f" ({last})" if last else "")) from None
            raise
        # the file's own errors leave the loader as it was: it serves the next load
        if answer[0] == "done":
            for message in answer[2]:  # a damaged cache entry met in the child: said here
                warnings.warn(message, CacheWarning, stacklevel=3)
            # the TF32 flags the file set as it was imported, for `--precision auto`
            self._flags = answer[3] if len(answer) > 3 else None
            return answer[1]
        if answer[0] == "error":
            cls = getattr(errors, answer[1], None)
            if not (isinstance(cls, type) and issubclass(cls, CudaAgentError)):
                cls = ProblemError
            raise cls(answer[2])
        # cuda-agent's own failure, not the file's: its traceback, as an in-process load shows
        raise RuntimeError(f"{path}: loading the problem failed in its child process:\n"
                           f"{answer[1]}")

    def _read_last_exit(self) -> None:
        """The loader reports each child's end after its answer; read it before the next
        request (a loader that does not is replaced)."""
        if self._exit_pending and self._child is not None:
            self._exit_pending = False
            try:
                if self._child.conn.poll(EXIT_WAIT_S):
                    self._child.conn.recv()
                    return
            except (EOFError, OSError):
                pass
            self._discard()

    def _watch(self, path: Path, limits: LoadLimits, memory_limit: int | None, pid: int,
               log_start: int) -> tuple:
        """The child's answer, ("done", graph), ("error", class, message) or ("bug",
        traceback), once the child has ended; a `ProblemError` where it ran past a limit (it
        is then still running) or died."""
        child = self._child
        deadline = time.monotonic() + limits.time_s if limits.time_s else None
        while not child.conn.poll(POLL_S):
            if deadline is not None and time.monotonic() > deadline:
                raise ProblemError(f"{path}: importing and capturing the file took longer than "
                                   f"its limit, {limits.time_s:g} s, and was stopped; to allow "
                                   f"more, raise {limits.time_hint}")
            if memory_limit is not None:
                # beyond the loader's own (torch's, shared with every child it forks); the
                # pages of libraries mapped from files are not the file's to answer for
                used = tree_anon_rss_bytes(pid) - anon_rss_bytes(child.pid)
                if used > memory_limit:
                    raise ProblemError(
                        f"{path}: importing and capturing the file took more host memory "
                        f"than its limit, {_size(memory_limit)}, and was stopped; to allow "
                        f"more, raise --import-memory GB (import_memory_bytes in Python; 0: "
                        f"no limit; default: {IMPORT_MEMORY_FRACTION:.0%} of the memory "
                        f"available)")
        answer = child.conn.recv()
        if answer[0] == "exit":  # it died without an answer
            raise ProblemError(f"{path}: {_died(answer[1], path, child.log_since(log_start))}")
        # it has nothing left to do: ended now, with whatever it started, rather than waited
        # for (the loader's report of its end is read before the next load)
        _kill_group(pid)
        self._exit_pending = True
        return answer


def _died(status: int, path: Path, output: str) -> str:
    """Words for a child that ended without an answer (exit code, or signal as negative)."""
    if status < 0:
        try:
            name = signal.Signals(-status).name
        except ValueError:
            name = f"signal {-status}"
        how = f"the process importing and capturing the file was killed by {name}"
        if -status == signal.SIGKILL:
            how += " (out of host memory?)"
    else:
        how = f"importing and capturing the file ended the process (exit code {status})"
    line = _line_in(output, path)
    last = next((l.strip() for l in reversed(output.splitlines()) if l.strip()), "")
    return ((f"line {line}: " if line else "") + how
            + (f"; its last output: {last[:200]}" if last and not line else ""))


def _line_in(output: str, path: Path) -> int | None:
    """The problem file's line in a fault handler's dump (the most recent call comes first)."""
    want = os.path.realpath(path)
    for file, line in re.findall(r'File "([^"]+)", line (\d+)', output):
        if os.path.realpath(file) == want:
            return int(line)
    return None


def _size(n: int) -> str:
    """Bytes in decimal units, as --import-memory takes them."""
    return f"{n / 1e9:.1f} GB" if n >= 1e9 else f"{n / 1e6:.0f} MB"


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


_shared: ProblemLoader | None = None
_shared_lock = threading.Lock()


def shared_loader() -> ProblemLoader:
    """This process's loader, started on first use and ended at exit (a loader whose parent
    dies reads end-of-file and ends too)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = ProblemLoader(warm_after=2)  # a second load: more are likely to follow
            atexit.register(_shared.close)
        return _shared


def load_problem_bounded(path: str | Path, limits: LoadLimits | None = None) -> "Problem":
    """Import, check and capture a problem file in a child process, within `limits` (default:
    `LoadLimits()`); see the module's docstring."""
    return shared_loader().load(path, limits)


# -- the loader's side ---------------------------------------------------------------------------------

def serve(conn: "Connection") -> None:
    """The loader process: import what every load needs once, then fork a child per request;
    after each, report how the child ended. Ends when the parent closes the connection."""
    import torch  # noqa: F401 - imported once here, shared by every child forked below

    from .ir import capture, planning  # noqa: F401
    from . import problem  # noqa: F401

    while True:
        try:
            tag, request = conn.recv()
        except EOFError:
            return
        if tag == "warm":
            try:
                import torch._dynamo  # noqa: F401 - most captures import it (torch's meta kernels)
            except Exception:  # noqa: BLE001 - only a saving
                pass
            continue
        pid = os.fork()
        if pid == 0:
            _child(conn, request)  # never returns
        status = _wait_child(pid, conn)
        _kill_group(pid)  # what it started and left behind
        if status is None:  # the parent is gone
            return
        conn.send(("exit", status))


def _wait_child(pid: int, conn: "Connection") -> int | None:
    """The child's exit code (negative: the signal); None where the parent closed the
    connection meanwhile (it sends nothing while a child runs), the child then killed."""
    try:  # readable when the child ends (Linux 5.3): its end is seen at once
        ended: Any = os.pidfd_open(pid)
    except (AttributeError, OSError):
        ended = None
    try:
        wait = 0.001
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return os.waitstatus_to_exitcode(status)
            if ended is not None:
                select.select([ended, conn.fileno()], [], [])
            if conn.poll(0 if ended is not None else wait):
                _kill_group(pid)
                os.waitpid(pid, 0)
                return None
            wait = min(0.05, wait * 2)
    finally:
        if ended is not None:
            os.close(ended)


def _child(conn: "Connection", request: dict[str, Any]) -> None:
    """A forked child: load one problem file, send the graph or the error, exit."""
    code = 0
    try:
        os.setpgid(0, 0)  # a group of its own: killed with whatever it starts
        _die_with_parent()
        conn.send(("started", os.getpid()))
        os.umask(request["umask"])
        os.chdir(request["cwd"])
        sys.path[:] = request["sys_path"]
        os.environ.clear()
        os.environ.update(request["env"])
        import faulthandler

        # a segfault's dump names the file's line (`_line_in`); to file descriptor 2, which
        # a forked parent's sys.stderr need not have (a StringIO: redirect_stderr, notebooks)
        faulthandler.enable(file=2)
        load = _split_here if request.get("split") else _load_here
        answer = load(Path(request["path"]))
        try:
            conn.send(answer)
        except (pickle.PicklingError, TypeError, AttributeError):  # cuda-agent's own failure
            conn.send(("bug", traceback.format_exc()))
    except BaseException:  # noqa: BLE001 - the connection itself failed: nothing to tell
        code = 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001
                pass
        os._exit(code)


def _load_here(path: Path) -> tuple:
    """("done", graph, the cache warnings met), or ("error", class name, message), or ("bug",
    traceback)."""
    from .ir.planning import make_plan
    from .problem import load_problem, naming_file

    try:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always", CacheWarning)
            problem = load_problem(path)
            graph = problem.graph()
            with naming_file(path):
                make_plan(graph)  # its refusals name the file too; the parent plans again
        from .precision import process_flags

        return ("done", graph, [str(w.message) for w in seen
                                if issubclass(w.category, CacheWarning)], process_flags())
    except CudaAgentError as exc:
        return ("error", type(exc).__name__, str(exc))
    except (SystemExit, KeyboardInterrupt) as exc:  # the file's own code exits
        return ("error", "ProblemError", f"{path}: importing or capturing the file raised "
                                         f"{type(exc).__name__}({exc})")
    except Exception as exc:  # noqa: BLE001 - cuda-agent's own failure
        return ("bug", "".join(traceback.format_exception(exc)))


def _split_here(path: Path) -> tuple:
    """As `_load_here`, the answer being the model's region split (`regions.split.Split`)."""
    from .problem import load_problem, naming_file
    from .regions.split import split_model
    from .regions.trace import instantiate

    try:
        problem = load_problem(path)
        with naming_file(path):
            model, inputs = instantiate(problem.model_cls, problem.init_inputs(),
                                        problem.get_inputs)
            return ("done", split_model(model, inputs), [])
    except CudaAgentError as exc:
        return ("error", type(exc).__name__, str(exc))
    except (SystemExit, KeyboardInterrupt) as exc:
        return ("error", "ProblemError", f"{path}: importing or splitting the file raised "
                                         f"{type(exc).__name__}({exc})")
    except Exception as exc:  # noqa: BLE001 - cuda-agent's own failure
        return ("bug", "".join(traceback.format_exception(exc)))


def current_umask() -> int:
    """This process's umask (reading it means setting it: put back at once)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _die_with_parent() -> None:
    """Linux: this process is killed when the loader ends, whatever happens to the loader."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
