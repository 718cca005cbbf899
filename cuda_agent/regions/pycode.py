"""Python source for FX nodes of aten ops: the code a region runs in torch, in a region's
problem file, its reference function and the emitted module's forward()."""

from __future__ import annotations

import math
import operator
from typing import Any

import torch

from ..errors import UnsupportedError


def var(name: str) -> str:
    """The Python variable holding FX value `name` (prefixed: an FX name may be `torch`)."""
    return f"v_{name}"


def literal(a: Any) -> str:
    """`a` (an FX node argument) as Python source; a device is the runtime's `_device`."""
    if isinstance(a, torch.fx.Node):
        return var(a.name)
    if isinstance(a, list):
        return "[" + ", ".join(literal(x) for x in a) + "]"
    if isinstance(a, tuple):
        return "(" + "".join(literal(x) + ", " for x in a) + ")"
    if isinstance(a, torch.device):
        return "_device"
    if isinstance(a, (torch.dtype, torch.memory_format, torch.layout)):
        return str(a)
    if isinstance(a, bool) or a is None or isinstance(a, (int, str)):
        return repr(a)
    if isinstance(a, float):
        return repr(a) if math.isfinite(a) else f"float({str(a)!r})"
    raise UnsupportedError(f"unsupported: argument {a!r} of type {type(a).__name__} in the "
                           "traced graph")


def call(node: torch.fx.Node) -> str:
    """One assignment computing `node` from earlier values."""
    if node.target is operator.getitem:
        seq, idx = node.args
        return f"{var(node.name)} = {literal(seq)}[{literal(idx)}]"
    if not isinstance(node.target, torch._ops.OpOverload):
        raise UnsupportedError(f"unsupported: {node.target} in the traced graph (not an aten op)")
    packet = node.target.overloadpacket.__name__
    ns = node.target.namespace
    args = [literal(a) for a in node.args]
    args += [f"{k}={literal(v)}" for k, v in node.kwargs.items()]
    return (f"{var(node.name)} = torch.ops.{ns}.{packet}.{node.target._overloadname}"
            f"({', '.join(args)})")

