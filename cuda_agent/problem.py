"""Problem files: load them, check them, run their reference.

A problem is a Python file in the field's common (KernelBench) format: a ``class Model(nn.Module)``,
``get_inputs()`` returning the forward() arguments and ``get_init_inputs()`` returning the
constructor arguments. Loading checks the file on meta tensors, so a malformed file fails in a
second with a one-line `ProblemError`, before anything is compiled or written.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

import torch

from .errors import ProblemError, first_line
from .ir.graph import Graph


@dataclass
class Problem:
    """A loaded, checked problem file."""

    path: Path
    name: str
    source: str
    module: ModuleType
    model_cls: type
    get_inputs: Callable[[], list]
    get_init_inputs: Callable[[], list]
    _graph: Graph | None = field(default=None, repr=False)

    @property
    def source_hash(self) -> str:
        return hashlib.sha256(self.source.encode()).hexdigest()[:16]

    def init_inputs(self) -> list:
        return list(self.get_init_inputs())

    def graph(self) -> Graph:
        """The captured op IR (traced once, on meta tensors; kept on disk for the next run of
        the same file: `ir/capture_cache.py`)."""
        if self._graph is None:
            from .ir import capture_cache
            from .ir.capture import capture

            key = self._capture_key() if capture_cache.enabled() else None
            if key is not None:
                self._graph = capture_cache.load(key)
            if self._graph is None:
                self._graph = capture(self.model_cls, self.init_inputs(), self.get_inputs)
                if key is not None:
                    capture_cache.store(key, self._graph)
        return self._graph

    def _capture_key(self) -> str | None:
        """The capture cache's key, or None where the file's functions raise (the capture
        then reports it)."""
        from .ir.capture_cache import capture_key

        try:
            with torch.device("meta"):
                init, inputs = self.init_inputs(), list(self.get_inputs())
        except Exception:  # noqa: BLE001 - user code
            return None
        return capture_key(self.source, self.module, init, inputs)

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
        raise ProblemError(f"{path}: importing the file raised {first_line(exc)}")
    return module


def load_problem(path: str | Path, check: bool = True) -> Problem:
    """Load a problem file; with `check`, run it on meta tensors and raise `ProblemError` early."""
    path = Path(path)
    if not path.exists():
        raise ProblemError(f"{path}: no such file")
    if path.is_dir():
        raise ProblemError(f"{path}: is a directory, expected a problem file")
    if path.suffix != ".py":
        raise ProblemError(f"{path}: expected a .py problem file")
    source = path.read_text()
    module = _import_file(path)
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
    problem = Problem(path, path.stem, source, module, model_cls, get_inputs, get_init_inputs)
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
            raise ProblemError(f"{where}: get_init_inputs() raised {first_line(exc)}")
        try:
            inputs = problem.get_inputs()
        except Exception as exc:  # noqa: BLE001
            raise ProblemError(f"{where}: get_inputs() raised {first_line(exc)}")
        if not isinstance(inputs, (list, tuple)):
            raise ProblemError(f"{where}: get_inputs() returned {type(inputs).__name__}, "
                               "expected a list")
        if not any(isinstance(t, torch.Tensor) for t in inputs):
            raise ProblemError(f"{where}: get_inputs() returned no tensors")
        try:
            model = problem.model_cls(*init)
        except Exception as exc:  # noqa: BLE001
            raise ProblemError(f"{where}: Model(*get_init_inputs()) raised {first_line(exc)}")
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                out: Any = model(*inputs)
        except Exception as exc:  # noqa: BLE001
            raise ProblemError(f"{where}: Model.forward raised {first_line(exc)}")
    if not isinstance(out, torch.Tensor):
        raise ProblemError(f"{where}: forward() returned {type(out).__name__}, expected a tensor")
