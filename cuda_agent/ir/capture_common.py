"""What capture.py and its per-family handler modules (conv_capture.py, pool_capture.py,
scan_capture.py, attention_capture.py, normstat.py, class_loss.py) share: an aten op's argument
by position or keyword, and a value that cannot be computed. Here, below all of them, so that a
handler module does not import capture.py, which imports every handler module."""

from __future__ import annotations

import dataclasses
from typing import Any


def op_arg(args: list, kwargs: dict, i: int, name: str, default: Any = None) -> Any:
    """An aten op's argument `i`, passed by position or by keyword `name`."""
    if len(args) > i:
        return args[i]
    return kwargs.get(name, default)


@dataclasses.dataclass(frozen=True)
class Refused:
    """A value of a multi-output op that cannot be computed (max's indices over a dim of size
    1): lowering fails with `reason` only where something uses it."""

    reason: str
