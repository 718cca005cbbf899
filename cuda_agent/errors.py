"""Errors a user can cause, each turned into a one-line message and a non-zero exit by the CLI.

Failures of candidate kernels are *not* exceptions: they are data (see `runner/records.py`).
"""

from __future__ import annotations

from pathlib import Path


class CudaAgentError(Exception):
    """Base of every error that the CLI reports as one line and exit code 2."""

    exit_code = 2


class ProblemError(CudaAgentError):
    """The problem file is malformed: no Model, get_inputs raising, non-tensor outputs..."""


class UnsupportedError(CudaAgentError):
    """The problem is well formed but uses an op, dtype or pattern the templates do not cover."""


class DeviceError(CudaAgentError):
    """The requested device cannot be used (no GPU, no recorded sweep, ...)."""


class SettingsError(CudaAgentError):
    """A command-line flag or setting is out of range."""


class OutputError(CudaAgentError):
    """The output directory cannot be written (checked before the search)."""


class StoreError(CudaAgentError):
    """The measurement store cannot be used: corrupt, written by a newer release, not writable.
    A search never stops for it (the run keeps its records in memory, `store.py`); commands that
    only read the store (`failures`) report it."""


class HostError(CudaAgentError):
    """This machine failed the run, not a candidate: a compile or GPU worker process that could
    not start, a compiler that could not run. Never recorded as a candidate's failure."""

    exit_code = 3


def first_line(exc: BaseException) -> str:
    """`Type: first line of the message`: user exceptions can span many lines, errors may not."""
    text = str(exc).strip()
    line = text.splitlines()[0] if text else ""
    return f"{type(exc).__name__}: {line}" if line else type(exc).__name__


# What torch says, on meta tensors (values unknown), when forward() needs a tensor's value.
# Reading one on the host: `if x.sum() > 0:`, `.item()`, `int(x)`, `.tolist()`, `.numpy()`.
_READS_VALUE = ("cannot be called on meta tensors",  # Tensor.item(), and bool/int/float of a tensor
                "Cannot copy out of meta tensor",  # .tolist()
                "can't convert meta device type tensor",  # .numpy()
                # torch.export's, on symbolic values
                "data-dependent expression", "GuardOnDataDependentSymNode")
# An output whose shape depends on the values: boolean-mask indexing, nonzero, unique, ...
_SHAPE_FROM_VALUES = ("data-independent implementation does not exist",  # nonzero, x[mask]
                      "without output_size",  # repeat_interleave of a tensor of counts
                      "aten::masked_select", "aten::_unique", "aten::unique",
                      "aten::equal:")


def data_dependent(exc: BaseException) -> str | None:
    """Plain words for forward() depending on tensor values, which a capture on tensors without
    values cannot follow (torch's own message speaks of meta tensors); None for other errors."""
    text = str(exc)
    cannot = ("data-dependent control flow, which cuda-agent cannot capture: it traces forward() "
              "once, on shapes alone, and the kernel must compute the same thing for every input")
    if any(s in text for s in _READS_VALUE):
        return (f"forward() reads a tensor's value (an `if` on a tensor, .item(), int() or "
                f"float() of one): {cannot}; use torch.where or masks instead of branches")
    if any(s in text for s in _SHAPE_FROM_VALUES):
        return (f"forward() makes a tensor whose shape depends on tensor values (a boolean mask "
                f"index, nonzero, unique, masked_select): {cannot}")
    return None


def problem_file(path: str | Path) -> Path:
    """`path` as a problem file, or a `ProblemError` saying why it cannot be one."""
    path = Path(path)
    if not path.exists():
        raise ProblemError(f"{path}: no such file")
    if path.is_dir():
        raise ProblemError(f"{path}: is a directory, expected a problem file")
    if path.suffix != ".py":
        raise ProblemError(f"{path}: expected a .py problem file")
    return path
