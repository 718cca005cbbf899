"""Errors a user can cause, each turned into a one-line message and a non-zero exit by the CLI.

Failures of candidate kernels are *not* exceptions: they are data (see `runner/records.py`).
"""

from __future__ import annotations


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
