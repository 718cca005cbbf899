"""Problem files: load them, check them, run their reference.

A problem is a Python file in the field's common (KernelBench) format: a ``class Model(nn.Module)``,
``get_inputs()`` returning the forward() arguments and ``get_init_inputs()`` returning the
constructor arguments. Loading checks the file on meta tensors, so a malformed file fails in a
second with a one-line `ProblemError` (or `UnsupportedError`) that starts with the file's path,
before anything is compiled or written.

`load_problem` imports the file in this process. The entry points a user drives (`cuda-agent
tune`, `bench`, `train`, `sweep`, `cuda_agent.tune`) load it in a child process under a time and
a memory limit instead (`problem_child.load_problem_bounded`): the `Problem` they get holds the
child's captured graph and imports the file here only if its module is asked for.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import sys
import traceback
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable, Iterator, TypeVar

import torch

from .errors import (CudaAgentError, ProblemError, UnsupportedError, data_dependent, first_line,
                     problem_file)
# the capture through its module: tests count its calls
from .ir import capture, capture_cache
from .ir.graph import Graph

if TYPE_CHECKING:
    from .ir.capture_cache import CaptureKey


@dataclass
class Problem:
    """A loaded, checked problem file."""

    path: Path
    name: str
    source: str
    _module: ModuleType | None = field(default=None, repr=False)
    _graph: Graph | None = field(default=None, repr=False)
    _defs: tuple[type, Callable[[], list], Callable[[], list]] | None = field(
        default=None, repr=False)
    torch_flags: dict[str, Any] | None = field(default=None, repr=False)
    """torch's TF32 flags as importing the file left them, where a child process imported it
    (`problem_child`); None: this process's flags are the file's (it was imported here)"""

    @property
    def source_hash(self) -> str:
        return hashlib.sha256(self.source.encode()).hexdigest()[:16]

    @property
    def module(self) -> ModuleType:
        """The imported file; imported here on first use where a child process loaded and
        checked it (`problem_child`): the parent then needs only the graph."""
        if self._module is None:
            self._module = _import_file(self.path)
        return self._module

    @property
    def model_cls(self) -> type:
        return self._definitions()[0]

    @property
    def get_inputs(self) -> Callable[[], list]:
        return self._definitions()[1]

    @property
    def get_init_inputs(self) -> Callable[[], list]:
        return self._definitions()[2]

    def _definitions(self) -> tuple[type, Callable[[], list], Callable[[], list]]:
        if self._defs is None:
            self._defs = _definitions(self.module, self.path)
        return self._defs

    def init_inputs(self) -> list:
        return list(self.get_init_inputs())

    def graph(self) -> Graph:
        """The captured op IR (traced once, on meta tensors; kept on disk for the next run of
        the same file: `ir/capture_cache.py`). Its errors name the file."""
        if self._graph is None:
            key = self._capture_key() if capture_cache.enabled() else None
            if key is not None:
                self._graph = capture_cache.load(key)
            if self._graph is None:
                with naming_file(self.path):
                    self._graph = capture.capture(self.model_cls, self.init_inputs(),
                                                  self.get_inputs)
                if key is not None:
                    capture_cache.store(key, self._graph)
        return self._graph

    def _capture_key(self) -> CaptureKey | None:
        """The capture cache's key, or None where the file's functions raise (the capture
        then reports it)."""
        try:
            with torch.device("meta"):
                init, inputs = self.init_inputs(), list(self.get_inputs())
        except Exception:  # noqa: BLE001 - user code
            return None
        return capture_cache.capture_key(self.source, self.module, init, inputs)

    def make_model(self, device: str | torch.device = "cpu") -> torch.nn.Module:
        """`Model(*get_init_inputs())` on `device`, in the mode its constructor leaves it in
        (training mode unless it calls .eval()): the module as the user and the field's harness
        hold it, so batch norm normalises by the batch's statistics as theirs does."""
        torch.manual_seed(0)
        model = self.model_cls(*self.init_inputs())
        return model.to(device)

    def make_inputs(self, device: str | torch.device = "cpu") -> list[torch.Tensor]:
        """The problem's own example inputs, allocated directly on `device`."""
        with torch.device(device):
            inputs = list(self.get_inputs())
        return [t.to(device) if isinstance(t, torch.Tensor) else t for t in inputs]


E = TypeVar("E", bound=CudaAgentError)


def named(exc: E, path: Path) -> E:
    """`exc` with its message starting with the problem file's path (once)."""
    msg = str(exc)
    return exc if msg.startswith(f"{path}:") else type(exc)(f"{path}: {msg}")


@contextlib.contextmanager
def naming_file(path: Path) -> Iterator[None]:
    """Re-raise an error about the problem (`ProblemError`, `UnsupportedError`: the capture,
    the planner and the template spaces do not know the file) with the problem file's path in
    front: every user-facing error about a problem names its file."""
    try:
        yield
    except (ProblemError, UnsupportedError) as exc:
        renamed = named(exc, path)
        if renamed is exc:
            raise
        raise renamed from None


def _import_file(path: Path) -> ModuleType:
    digest = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:10]
    mod_name = f"cuda_agent_problem_{path.stem}_{digest}"
    spec = importlib.util.spec_from_file_location(mod_name, path)
    if spec is None or spec.loader is None:
        raise ProblemError(f"{path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module
    try:
        spec.loader.exec_module(module)
    except SyntaxError as exc:
        raise ProblemError(f"{path}: syntax error at line {exc.lineno}: {exc.msg}") from None
    except Exception as exc:  # noqa: BLE001 - user code
        raise ProblemError(f"{path}: {_at_line(exc, path)}importing the file raised "
                           f"{first_line(exc)}")
    return module


def _definitions(module: ModuleType, path: Path
                 ) -> tuple[type, Callable[[], list], Callable[[], list]]:
    """The file's Model, get_inputs and get_init_inputs, checked to be what the format says."""
    model_cls = getattr(module, "Model", None)
    if model_cls is None:
        raise ProblemError(f"{path}: no class Model defined")
    if not (isinstance(model_cls, type) and issubclass(model_cls, torch.nn.Module)):
        raise ProblemError(f"{path}: Model is not a torch.nn.Module subclass")
    get_inputs = getattr(module, "get_inputs", None)
    if not callable(get_inputs):
        raise ProblemError(f"{path}: no get_inputs() function defined")
    get_init_inputs = getattr(module, "get_init_inputs", None)
    if get_init_inputs is None:
        get_init_inputs = list  # the format allows leaving it out when Model takes no arguments
    elif not callable(get_init_inputs):
        raise ProblemError(f"{path}: get_init_inputs is not a function")
    return model_cls, get_inputs, get_init_inputs


def load_problem(path: str | Path, check: bool = True) -> Problem:
    """Load a problem file in this process; with `check`, run it on meta tensors and raise
    `ProblemError` early. (User-facing entry points load it bounded, in a child process:
    `problem_child.load_problem_bounded`.)"""
    path = problem_file(path)
    source = path.read_text()
    module = _import_file(path)
    problem = Problem(path, path.stem, source, module)
    problem._definitions()
    if check:
        check_problem(problem)
    return problem


def check_problem(problem: Problem) -> None:
    """Run the reference once on meta tensors: catches most malformed files in well under 1 s."""
    where = problem.path
    with torch.device("meta"):
        try:
            init = problem.init_inputs()
        except Exception as exc:  # noqa: BLE001
            raise ProblemError(f"{where}: {_at_line(exc, where)}get_init_inputs() raised "
                               f"{first_line(exc)}")
        try:
            inputs = problem.get_inputs()
        except Exception as exc:  # noqa: BLE001
            raise ProblemError(f"{where}: {_at_line(exc, where)}get_inputs() raised "
                               f"{first_line(exc)}")
        if not isinstance(inputs, (list, tuple)):
            raise ProblemError(f"{where}: get_inputs() returned {type(inputs).__name__}, "
                               "expected a list")
        if not any(isinstance(t, torch.Tensor) for t in inputs):
            raise ProblemError(f"{where}: get_inputs() returned no tensors")
        try:
            model = problem.model_cls(*init)
        except Exception as exc:  # noqa: BLE001
            raise ProblemError(f"{where}: {_at_line(exc, where)}Model(*get_init_inputs()) "
                               f"raised {first_line(exc)}")
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                out: Any = model(*inputs)
        except Exception as exc:  # noqa: BLE001
            raise ProblemError(f"{where}: {_at_line(exc, where)}"
                               + (data_dependent(exc) or f"Model.forward raised "
                                  f"{first_line(exc)}"))
    if not isinstance(out, torch.Tensor):
        raise ProblemError(f"{where}: forward() returned {type(out).__name__}, expected a tensor")


def _at_line(exc: BaseException, path: Path) -> str:
    """"line N: " for the last frame of `exc`'s traceback in the problem file, or ""."""
    want = os.path.realpath(path)
    line = None
    for frame, lineno in traceback.walk_tb(exc.__traceback__):
        if os.path.realpath(frame.f_code.co_filename) == want:
            line = lineno
    return f"line {line}: " if line is not None else ""
